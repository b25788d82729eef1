"""``rmqspec conform``: drive a system under test and the reference side by side and report the
first divergence, shrunk to a short request script that replays.

Requests come from a Hypothesis stateful machine (:func:`machine_class`) that picks, step by step,
one of the components the SUT declared and then one of its operations with its arguments; after
every operation on a ProcessQueue, offset store or broker offset manager, it also asks for that
object's whole state, so a wrong internal state shows up at the step that caused it rather than
later. Hypothesis generates; the shrinking is our own delta
debugging over the request script (:func:`shrink`), because it must also shrink failures that cost
a timeout each (a hanging SUT) within a time budget, and because a script that drops the request
creating a handle must drop the requests that use it too (:func:`replay` skips them).

Two replies agree when :func:`protocol.normalise` makes them equal: same success or same Java
exception type, same result, same broker requests as a multiset.
"""

from __future__ import annotations

import copy
import json
import math
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from hypothesis.errors import Flaky
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule, run_state_machine_as_test

from rmqspec.conform import protocol as p
from rmqspec.conform.reference_adapter import ReferenceAdapter
from rmqspec.conform.sut import SutFailure, SutProcess
from rmqspec.jsonin import InputError, iter_lines

SCRIPT_FORMAT: Final = "rmqspec-conform-script"
SCRIPT_VERSION: Final = 1
OBSERVERS: Final = ("pq.state", "store.clone", "com.table")  # requests that only read an object's state


class ScriptError(ValueError):
    """A replay script that cannot be read; the message names the file and line."""


class RejectedRequest(RuntimeError):
    """The reference answered a request with ``ProtocolError``: the request is malformed. From the
    generator that is a bug of rmqspec; from a replay script, bad input (:func:`replay_script` names
    the line). ``position`` is the request's index in the script :func:`replay` was running."""

    def __init__(self, request: dict[str, Any], error: dict[str, Any]) -> None:
        super().__init__(f"conform generated a request the reference rejects: {request}: {error}")
        self.request = request
        self.error = error
        self.position: int | None = None


@dataclass
class Divergence(Exception):
    """The SUT's reply differs from the reference's at ``script[-1]``."""

    request: dict[str, Any]
    sut: dict[str, Any]
    reference: dict[str, Any]
    script: list[dict[str, Any]]

    @property
    def signature(self) -> tuple[str, str]:
        return ("divergence", self.request["op"])

    @property
    def rules(self) -> str:
        """The rules behind the expected reply. A state observation that differs shows what the
        request before it did, so that request's rules are named too."""
        rules = p.OPS[self.request["op"]].rules
        if self.request["op"] in OBSERVERS and len(self.script) >= 2:
            before = self.script[-2]["op"]
            if before not in OBSERVERS:
                rules = f"{p.OPS[before].rules} ({before}), observed through {rules}"
        return rules

    def to_json(self) -> dict[str, Any]:
        return {
            "step": len(self.script),
            "request": self.request,
            "sut": self.sut,
            "reference": self.reference,
            "rules": self.rules,
        }


@dataclass
class SutBroke(Exception):
    """The SUT crashed, hung or broke the protocol at ``script[-1]``."""

    failure: SutFailure
    script: list[dict[str, Any]]

    @property
    def signature(self) -> tuple[str, str]:
        return ("sut", self.failure.kind)


Finding = Divergence | SutBroke


class Session:
    """The SUT process and the reference, fed the same requests. Restarts a SUT that died."""

    def __init__(self, command: str, timeout: float, out_dir: Path, components: tuple[str, ...] | None = None) -> None:
        self.sut = SutProcess(command, timeout, out_dir / "sut-stderr.log")
        hello = self.sut.start()  # SutFailure propagates: nothing can be checked without a handshake
        try:
            self.version, declared, self.strategies, self.implementation = p.check_hello(hello)
        except p.ProtocolError as e:
            self.sut.close()
            raise SutFailure("bad-reply", {"op": "hello"}, json.dumps(hello), str(e)) from None
        if components is not None:
            missing = sorted(set(components) - set(declared))
            if missing:
                self.sut.close()
                raise ValueError(f"--components: the SUT does not declare {missing}; it declares {list(declared)}")
            declared = tuple(c for c in declared if c in components)
            if p.PULL_FROM_WHERE in declared and not {p.REMOTE_OFFSET_STORE, p.LOCAL_OFFSET_STORE} & set(declared):
                self.sut.close()
                raise ValueError("--components: pullFromWhere needs an offset store component to read from")
        self.components = declared
        self.reference = ReferenceAdapter(self.version)
        self.script: list[dict[str, Any]] = []
        self.requests = 0
        # What the run reached: requests per (op, outcome), the outcome being "ok" or the Java
        # exception type the reference expected. A run that never reached an outcome proves nothing of it.
        self.outcomes: Counter[tuple[str, str]] = Counter()
        # The last finding raised, for when Hypothesis reports a flaky test instead of it (a SUT whose
        # behaviour depends on more than the requests makes a rerun fail differently).
        self.last_finding: Finding | None = None

    def begin(self, fresh_process: bool = False) -> None:
        """A fresh start on both sides: ``reset``, after restarting the SUT if it died or if
        ``fresh_process`` asks for a new process (a crash may depend on the process's history)."""
        self.script = []
        if fresh_process:
            self.sut.close()
        if not self.sut.alive():
            self.sut.start()
        self.reference.reset()
        try:
            reply = self.sut.call("reset", {})
        except SutFailure as failure:
            self.last_finding = SutBroke(failure, [])
            raise self.last_finding from None
        if not reply["ok"]:
            refused = SutFailure("bad-reply", {"op": "reset", "args": {}}, json.dumps(reply), "reset failed")
            self.last_finding = SutBroke(refused, [])
            raise self.last_finding

    def exchange(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """Send one request to both sides; the reference's reply, or Divergence / SutBroke."""
        request = {"op": op, "args": args}
        self.script.append(request)
        self.requests += 1
        expected = self.reference.handle(op, copy.deepcopy(args))
        if not expected["ok"] and expected["error"]["type"] == "ProtocolError":
            raise RejectedRequest(request, expected["error"])
        self.outcomes[op, "ok" if expected["ok"] else expected["error"]["type"]] += 1
        try:
            got = self.sut.call(op, args)
        except SutFailure as failure:
            self.last_finding = SutBroke(failure, list(self.script))
            raise self.last_finding from None
        if p.normalise(got) != p.normalise(expected):
            got = {k: v for k, v in got.items() if k != "id"}
            self.last_finding = Divergence(request, got, expected, list(self.script))
            raise self.last_finding
        return expected

    def close(self) -> None:
        self.sut.close()
        self.reference.close()


def replay(session: Session, script: list[dict[str, Any]], fresh_process: bool = False) -> Finding | None:
    """Run ``script`` from a fresh start; the first finding, or None if both sides agree throughout.
    A request on a handle that no earlier request of the script created is skipped."""
    try:
        session.begin(fresh_process)
        created: set[tuple[str, str]] = set()
        for position, request in enumerate(script):
            spec = p.OPS.get(request["op"])
            if (
                spec is not None
                and spec.handle is not None
                and (spec.handle, request["args"][spec.handle]) not in created
            ):
                continue
            try:
                session.exchange(request["op"], request["args"])
            except RejectedRequest as rejected:
                rejected.position = position
                raise
            if spec is not None and spec.creates is not None:
                created.add((spec.creates, request["args"][spec.creates]))
    except (Divergence, SutBroke) as finding:
        return finding
    return None


@dataclass
class ShrinkStats:
    replays: int = 0
    seconds: float = 0.0
    original: int = 0


def shrink(session: Session, finding: Finding, budget_seconds: float) -> tuple[Finding, ShrinkStats]:
    """Delta debugging (ddmin) over the script: drop chunks while the replay still fails the same
    way (same op diverging, or same kind of SUT failure), until no single request can be dropped;
    then simplify arguments (shorter lists, smaller integers) one at a time. Stops when the time
    budget is spent and returns the smallest finding seen."""
    stats = ShrinkStats(original=len(finding.script))
    deadline = time.monotonic() + budget_seconds
    best = finding

    def attempt(candidate: list[dict[str, Any]]) -> bool:
        nonlocal best
        stats.replays += 1
        found = replay(session, candidate, fresh_process=isinstance(best, SutBroke))
        if found is not None and found.signature == best.signature and len(found.script) <= len(best.script):
            best = found
            return True
        return False

    def drop_requests() -> bool:
        """ddmin: True if some requests could be dropped."""
        dropped = False
        granularity = 2
        while len(best.script) >= 2 and time.monotonic() < deadline:
            script = best.script
            chunk = math.ceil(len(script) / granularity)
            for i in range(granularity):
                candidate = script[: i * chunk] + script[(i + 1) * chunk :]
                if candidate and time.monotonic() < deadline and attempt(candidate) and len(best.script) < len(script):
                    dropped = True
                    granularity = max(granularity - 1, 2)
                    break
            else:
                if granularity >= len(script):
                    break
                granularity = min(len(script), granularity * 2)
        return dropped

    def simplify_arguments() -> bool:
        """True if some request's arguments could be made simpler."""
        simplified = False
        index = 0
        while index < len(best.script) and time.monotonic() < deadline:
            request = best.script[index]
            for args in _simpler_args(request["args"]):
                if time.monotonic() >= deadline:
                    break
                candidate = [*best.script[:index], {"op": request["op"], "args": args}, *best.script[index + 1 :]]
                if attempt(candidate):
                    simplified = True
                    break
            else:
                index += 1
        return simplified

    # A simpler argument can make another request unnecessary, so alternate until neither helps.
    while drop_requests() | simplify_arguments():
        pass
    stats.seconds = budget_seconds - max(0.0, deadline - time.monotonic())
    return best, stats


def _simpler_args(args: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Each argument object one step simpler: one list element fewer, or one integer smaller
    (0, then half), also inside list elements. Handle names and flags are left alone."""
    for key, value in args.items():
        if isinstance(value, list):
            for i in reversed(range(len(value))):
                yield {**args, key: value[:i] + value[i + 1 :]}
            for i, element in enumerate(value):
                if isinstance(element, dict):
                    for simpler in _simpler_ints(element):
                        yield {**args, key: [*value[:i], simpler, *value[i + 1 :]]}
    yield from _simpler_ints(args)


def _simpler_ints(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for key, value in obj.items():
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            yield {**obj, key: 0}
            if value > 1:
                yield {**obj, key: value // 2}


# --- request generation ---------------------------------------------------------------------------
def _one_in(n: int) -> st.SearchStrategy[bool]:
    """True about once in ``n`` draws. (Hypothesis favours small integers, so ``integers(0, n - 1)
    == 0`` would be true far more often; the rare case is the largest value instead.)"""
    return st.integers(0, n - 1).map(lambda i: i == n - 1)


# Small pools make collisions (same queue, same offset, same file) likely: that is where bugs live.
STORE_MQS: Final = (
    p.mq("T", "broker-a", 0),
    p.mq("T", "broker-a", 1),
    p.mq("T", "broker-b", 0),
    p.mq("%RETRY%G", "broker-a", 0),
    p.mq("U", "broker-a", 0),
)
ALLOCATE_MQS: Final = tuple(
    p.mq(topic, broker, q) for topic in ("T",) for broker in ("broker-a", "room1@b", "room2@c") for q in range(4)
)
CLIENT_IDS: Final = tuple(f"10.0.0.{i + 1}@c{i}" for i in range(6))
ROOMS: Final = ("room1", "room2", "room3")
# Offsets: small ones collide; the edges of Java int and long catch narrowing and overflow.
offsets: Final = st.one_of(st.integers(0, 40), st.sampled_from([2**31 - 1, 2**31, 2**63 - 1]))
answers: Final = st.lists(
    st.one_of(
        st.builds(lambda o: {"offset": o}, offsets),
        st.sampled_from([{"responseCode": p.QUERY_NOT_FOUND}, {"responseCode": 1}, {"timeout": True}]),
    ),
    max_size=3,
)
_message: Final = st.fixed_dictionaries(
    {"queueOffset": st.integers(0, 30), "bodySize": st.integers(0, 4)},
    optional={"maxOffset": st.integers(0, 40)},
)
messages: Final = st.lists(_message, min_size=1, max_size=4)  # a pull batch


def _allocate_args(strategies: tuple[str, ...]) -> st.SearchStrategy[dict[str, Any]]:
    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        strategy = draw(st.sampled_from(strategies))
        # One call in five tries the argument checks (empty lists, a missing or unknown currentCID);
        # the others allocate for real.
        degenerate = draw(_one_in(5))
        least = 0 if degenerate else 1
        mq_all = draw(st.lists(st.sampled_from(ALLOCATE_MQS), unique_by=p.encode, min_size=least, max_size=10))
        cid_all = draw(st.lists(st.sampled_from(CLIENT_IDS), unique=True, min_size=least, max_size=6))
        if draw(st.booleans()):  # RebalanceImpl sorts both lists; the strategy itself must not care
            mq_all.sort(key=lambda m: (m["topic"], m["brokerName"], m["queueId"]))
            cid_all.sort()
        odd_ids = st.sampled_from(["10.0.0.9@x", "", None])
        current = draw(odd_ids if degenerate or not cid_all else st.sampled_from(cid_all))
        args: dict[str, Any] = {
            "strategy": strategy,
            "consumerGroup": "G",
            "currentCID": current,
            "mqAll": mq_all,
            "cidAll": cid_all,
        }
        if strategy == "CONSISTENT_HASH":
            args["virtualNodeCnt"] = draw(st.integers(-1, 12))
        elif strategy == "CONFIG":
            args["messageQueueList"] = draw(st.none() | st.lists(st.sampled_from(ALLOCATE_MQS), max_size=4))
        elif strategy == "MACHINE_ROOM":
            args["consumeridcs"] = draw(st.none() | st.lists(st.sampled_from(ROOMS), unique=True))
        elif strategy == "MACHINE_ROOM_NEARBY":
            args["inner"] = draw(st.sampled_from(("AVG", "AVG_BY_CIRCLE")))
            brokers = ("broker-a", "room1@b", "room2@c")
            args["brokerRooms"] = draw(st.dictionaries(st.sampled_from(brokers), st.sampled_from(ROOMS)))
            args["consumerRooms"] = draw(st.dictionaries(st.sampled_from(CLIENT_IDS), st.sampled_from(ROOMS)))
        return args

    return build()


def machine_class(session: Session, on_example: Callable[[], None]) -> type[RuleBasedStateMachine]:
    """A stateful machine over the components ``session``'s SUT declared; ``on_example`` is called
    as each generated example starts.

    One rule picks a component family, then an operation of that family and its arguments, so every
    declared component gets a fair share of each sequence however many operations it has (a rule
    per operation lets the allocation rule, which needs no object, crowd out the stateful ones).
    """
    has = set(session.components)

    class ConformMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            on_example()
            session.begin()
            self.pqs: list[str] = []
            self.pq_offsets: dict[str, set[int]] = {}
            self.pq_cached: dict[str, int] = {}  # messages in the tree, by the reference's last state
            self.pq_in_flight: dict[str, int] = {}  # orderly messages taken, likewise
            self.stores: list[str] = []
            self.coms: list[str] = []
            self.families: list[Callable[[st.DataObject], None]] = []
            if p.ALLOCATE in has:
                self.families.append(self.allocate)
            if p.PROCESS_QUEUE in has:
                self.families.append(self.process_queue)
            if has & {p.REMOTE_OFFSET_STORE, p.LOCAL_OFFSET_STORE}:
                self.families.append(self.offset_store)
            if p.PULL_FROM_WHERE in has:
                self.families.append(self.pull_from_where)
            if p.CONSUMER_OFFSET_MANAGER in has:
                self.families.append(self.offset_manager)

        @initialize(data=st.data())
        def choose_families(self, data: st.DataObject) -> None:
            """Swarm testing: each sequence works on a random non-empty subset of the families, so
            it goes deeper into the few it has instead of touching every one briefly."""
            chosen = data.draw(st.sets(st.sampled_from(range(len(self.families))), min_size=1))
            self.families = [f for i, f in enumerate(self.families) if i in chosen]

        @rule(data=st.data())
        def step(self, data: st.DataObject) -> None:
            data.draw(st.sampled_from(self.families))(data)

        def call(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
            return session.exchange(op, args)

        # allocation (R11): stateless
        def allocate(self, data: st.DataObject) -> None:
            self.call("allocate", data.draw(_allocate_args(session.strategies)))

        # ProcessQueue (R6); after each operation its whole state is compared
        def process_queue(self, data: st.DataObject) -> None:
            if not self.pqs or (len(self.pqs) < 3 and data.draw(_one_in(8))):
                name = f"pq{len(self.pqs)}"
                self.call("pq.new", {"pq": name})
                self.pqs.append(name)
                self.pq_offsets[name] = set()
                return
            pq = data.draw(st.sampled_from(self.pqs))
            # The reference's last state of this queue steers the choice towards operations that do
            # something: take when messages are cached, commit when some are in flight (on an empty
            # in-flight map commit throws, which is worth trying now and then, not most of the time).
            cached, in_flight = self.pq_cached.get(pq, 0), self.pq_in_flight.get(pq, 0)
            ops = ["pq.put", "pq.put", "pq.remove", "pq.remove"]
            if p.PROCESS_QUEUE_ORDERLY in has:
                ops += ["pq.take"] * (3 if cached else 1) + ["pq.rollback", "pq.consumeAgain", "pq.clear"]
                ops += ["pq.commit"] * (4 if in_flight else 1)
            op = data.draw(st.sampled_from(ops))
            args: dict[str, Any] = {"pq": pq}
            if op == "pq.put":  # an empty batch is a legal edge case, but one in eight is plenty
                args["msgs"] = [] if data.draw(_one_in(8)) else data.draw(messages)
                self.pq_offsets[pq].update(m["queueOffset"] for m in args["msgs"])
            elif op in ("pq.remove", "pq.consumeAgain"):
                known = sorted(self.pq_offsets[pq])
                offset: st.SearchStrategy[int] = st.integers(0, 30)
                if known and not data.draw(_one_in(5)):  # mostly offsets the queue holds
                    offset = st.sampled_from(known)
                message = st.fixed_dictionaries({"queueOffset": offset, "bodySize": st.integers(0, 4)})
                args["msgs"] = data.draw(st.lists(message, max_size=4))
            elif op == "pq.take":
                args["batchSize"] = data.draw(st.integers(1, 4) | st.just(0))
            self.call(op, args)
            state = self.call("pq.state", {"pq": pq})["result"]
            self.pq_cached[pq], self.pq_in_flight[pq] = len(state["cached"]), len(state["inFlight"])

        # offset stores (R1, R2); after each operation the whole memory table is compared
        def offset_store(self, data: st.DataObject) -> None:
            if not self.stores or (len(self.stores) < 3 and data.draw(_one_in(8))):
                kinds = [k for k, c in (("remote", p.REMOTE_OFFSET_STORE), ("local", p.LOCAL_OFFSET_STORE)) if c in has]
                name = f"s{len(self.stores)}"
                args: dict[str, Any] = {"store": name, "kind": data.draw(st.sampled_from(kinds)), "group": "G"}
                if args["kind"] == "local":  # two local stores of one client share a file: a restart
                    args["clientId"] = data.draw(st.sampled_from(CLIENT_IDS[:2]))
                self.call("store.new", args)
                self.stores.append(name)
                return
            store = data.draw(st.sampled_from(self.stores))
            op = data.draw(
                st.sampled_from(
                    ["store.update"] * 3
                    + ["store.read"] * 2
                    + ["store.persistAll"] * 2
                    + ["store.persist", "store.remove", "store.clone", "store.load"]
                )
            )
            args = {"store": store}
            if op == "store.update":
                args |= {"mq": data.draw(st.sampled_from(STORE_MQS)), "offset": data.draw(offsets)}
                args["increaseOnly"] = data.draw(st.booleans())
            elif op == "store.read":
                args |= {"mq": data.draw(st.sampled_from(STORE_MQS)), "type": data.draw(st.sampled_from(p.READ_TYPES))}
                args["answers"] = data.draw(answers)
            elif op == "store.persistAll":
                args["mqs"] = data.draw(st.lists(st.sampled_from(STORE_MQS), unique_by=p.encode, max_size=4))
            elif op in ("store.persist", "store.remove"):
                args["mq"] = data.draw(st.sampled_from(STORE_MQS))
            elif op == "store.clone":
                args["topic"] = data.draw(st.sampled_from([None, "", " ", "T", "U", "%RETRY%G"]))
            self.call(op, args)
            if op != "store.clone":
                self.call("store.clone", {"store": store, "topic": None})

        # computePullFromWhere (R10.1), reading through one of the stores
        def pull_from_where(self, data: st.DataObject) -> None:
            if not self.stores:
                return self.offset_store(data)
            store = data.draw(st.sampled_from(self.stores))
            args = {
                "store": store,
                "mq": data.draw(st.sampled_from(STORE_MQS)),
                "consumeFromWhere": data.draw(st.sampled_from(p.CONSUME_FROM_WHERE)),
                "consumeTimestamp": data.draw(st.integers(0, 10**6)),
                "answers": data.draw(answers),
            }
            self.call("pullFromWhere", args)
            self.call("store.clone", {"store": store, "topic": None})
            return None

        # broker ConsumerOffsetManager (R3); after each change the whole table is compared
        def offset_manager(self, data: st.DataObject) -> None:
            if not self.coms or (len(self.coms) < 2 and data.draw(_one_in(8))):
                name = f"com{len(self.coms)}"
                self.call("com.new", {"com": name})
                self.coms.append(name)
                return
            com = data.draw(st.sampled_from(self.coms))
            op = data.draw(st.sampled_from(["com.commit"] * 3 + ["com.query"] * 3 + ["com.persist", "com.restart"]))
            args: dict[str, Any] = {"com": com}
            if op in ("com.commit", "com.query"):
                args |= {
                    "group": data.draw(st.sampled_from(["G", "H"])),
                    "topic": data.draw(st.sampled_from(["T", "%RETRY%G"])),
                    "queueId": data.draw(st.integers(0, 2)),
                }
            if op == "com.commit":
                args |= {"clientHost": "10.0.0.1", "offset": data.draw(offsets)}
            elif op == "com.query":
                low, high = data.draw(st.integers(0, 3)), data.draw(st.integers(0, 5))
                args |= {"minOffset": low, "maxOffset": max(low, high), "offset0InMemory": data.draw(st.booleans())}
                zero_if_not_found = data.draw(st.sampled_from([None, None, True, False]))  # only 5.0.0 clients send it
                if zero_if_not_found is not None:
                    args["setZeroIfNotFound"] = zero_if_not_found
            self.call(op, args)
            if op != "com.query":
                self.call("com.table", {"com": com})

    return ConformMachine


@dataclass
class ConformResult:
    """What a conform run found. Flat and aggregatable, like check-trace's and check-history's."""

    sut: str
    implementation: str
    version: str
    components: tuple[str, ...]
    examples: int = 0
    requests: int = 0
    seconds: float = 0.0
    finding: Finding | None = None
    shrink: ShrinkStats = field(default_factory=ShrinkStats)
    script_path: str | None = None
    outcomes: dict[str, int] = field(default_factory=dict)  # "op" or "op:ExceptionType" -> requests

    @property
    def valid(self) -> bool:
        return self.finding is None

    def to_json(self) -> dict[str, Any]:
        finding = self.finding
        return {
            "valid": self.valid,
            "sut": self.sut,
            "implementation": self.implementation,
            "version": self.version,
            "components": list(self.components),
            "examples": self.examples,
            "requests": self.requests,
            "seconds": round(self.seconds, 3),
            "divergence": finding.to_json() if isinstance(finding, Divergence) else None,
            "sutFailure": (
                {"step": len(finding.script), **finding.failure.to_json()} if isinstance(finding, SutBroke) else None
            ),
            "scriptSteps": len(finding.script) if finding is not None else None,
            "shrunkFrom": self.shrink.original or None,
            "script": self.script_path,
            "outcomes": self.outcomes,
        }


def _first_finding(error: BaseException) -> Finding | None:
    """The Divergence or SutBroke inside whatever Hypothesis raised (it may wrap it as flaky)."""
    if isinstance(error, (Divergence, SutBroke)):
        return error
    for inner in getattr(error, "exceptions", ()) or ():
        found = _first_finding(inner)
        if found is not None:
            return found
    if error.__cause__ is not None:
        return _first_finding(error.__cause__)
    return None


def conform(
    command: str,
    out_dir: Path,
    examples: int = 100,
    steps: int = 30,
    seed: int = 0,
    timeout: float = 10.0,
    shrink_seconds: float = 60.0,
    components: tuple[str, ...] | None = None,
    progress: Callable[[str], None] | None = None,
) -> ConformResult:
    """Run ``examples`` generated request sequences of up to ``steps`` operations each against the
    SUT and the reference; stop at the first finding, shrink it and save it as a replayable script."""
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    session = Session(command, timeout, out_dir, components)
    result = ConformResult(command, session.implementation, session.version, session.components)
    counted = {"examples": 0}

    def on_example() -> None:
        counted["examples"] += 1
        if progress is not None and counted["examples"] % max(1, examples // 10) == 0:
            progress(f"conform: {counted['examples']}/{examples} examples, {session.requests:,} requests")

    machine = hypothesis_seed(seed)(machine_class(session, on_example))
    try:
        run_state_machine_as_test(
            machine,
            settings=settings(
                settings.get_profile("default"),  # the caller's profile (e.g. a test suite's) must not change the run
                max_examples=examples,
                stateful_step_count=steps,
                phases=[Phase.explicit, Phase.generate],  # shrinking is ours: see shrink()
                database=None,
                deadline=None,
                suppress_health_check=list(HealthCheck),
                report_multiple_bugs=False,
                print_blob=False,
                verbosity=Verbosity.quiet,
            ),
        )
    except Exception as error:  # the finding is inside; anything else is re-raised
        finding = _first_finding(error)
        if finding is None and isinstance(error, Flaky):
            finding = session.last_finding  # the rerun failed differently; report what was found first
        if finding is None:
            session.close()
            raise
        result.examples, result.requests = counted["examples"], session.requests
        result.outcomes = _outcomes(session)
        if progress is not None:
            progress(f"conform: found a {finding.signature[0]} after {result.examples} examples; shrinking")
        finding, result.shrink = shrink(session, finding, shrink_seconds)
        result.finding = finding
        path = out_dir / "divergence.jsonl"
        write_script(path, finding.script, session, result)
        result.script_path = str(path)
    else:
        result.examples, result.requests = counted["examples"], session.requests
        result.outcomes = _outcomes(session)
    finally:
        session.close()
    result.seconds = time.monotonic() - started
    return result


def _outcomes(session: Session) -> dict[str, int]:
    return {op if outcome == "ok" else f"{op}:{outcome}": n for (op, outcome), n in sorted(session.outcomes.items())}


def write_script(path: Path, script: list[dict[str, Any]], session: Session, result: ConformResult) -> None:
    header = {
        "format": SCRIPT_FORMAT,
        "version": SCRIPT_VERSION,
        "sut": result.sut,
        "implementation": session.implementation,
        "rocketmqVersion": session.version,
        "components": list(session.components),
    }
    lines = [p.encode(header)] + [p.encode(request) for request in script]
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tmp.replace(path)


def read_script(path: str) -> list[dict[str, Any]]:
    """The requests of a saved script; ScriptError names the line that cannot be read."""
    return [request for _, request in read_numbered_script(path)]


def read_numbered_script(path: str) -> list[tuple[int, dict[str, Any]]]:
    """(line number, request) for every request of a saved script; ScriptError names the line."""
    try:
        lines = list(iter_lines(path, path))
    except InputError as e:
        raise ScriptError(str(e)) from None
    if not lines:
        raise ScriptError(f'{path}: empty; expected a header line {{"format": "{SCRIPT_FORMAT}", ...}}')
    number, header = lines[0]
    if not isinstance(header, dict) or header.get("format") != SCRIPT_FORMAT:
        raise ScriptError(f'{path}: line {number}: expected a header with "format": "{SCRIPT_FORMAT}"')
    if header.get("version") != SCRIPT_VERSION:
        raise ScriptError(
            f"{path}: line {number}: script version {header.get('version')!r}; this rmqspec reads {SCRIPT_VERSION}"
        )
    script = []
    for number, value in lines[1:]:
        try:
            script.append((number, p.check_request(value, f"{path}: line {number}")))
        except p.ProtocolError as e:
            raise ScriptError(str(e)) from None
    return script


def replay_script(command: str, script_path: str, out_dir: Path, timeout: float = 10.0) -> ConformResult:
    """Run a saved script against the SUT and the reference; no generation, no shrinking."""
    numbered = read_numbered_script(script_path)
    script = [request for _, request in numbered]
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    session = Session(command, timeout, out_dir)
    result = ConformResult(command, session.implementation, session.version, session.components, examples=1)
    try:
        needed = {c for r in script if (c := p.component_of(r)) is not None} - set(session.components)
        if needed:
            raise ValueError(
                f"{script_path}: the script uses {sorted(needed)} (not declared by the SUT: {list(session.components)})"
            )
        try:
            result.finding = replay(session, script, fresh_process=True)
        except RejectedRequest as rejected:
            line = numbered[rejected.position][0] if rejected.position is not None else "?"
            message = rejected.error.get("message", "")
            raise ScriptError(
                f"{script_path}: line {line}: the reference rejects this request as malformed ({message}); "
                "fix the request's arguments or remove the line"
            ) from None
        result.requests = session.requests
    finally:
        session.close()
    result.seconds = time.monotonic() - started
    return result


def describe(result: ConformResult) -> str:
    """The human report: what was run, and the finding with its shrunk script."""
    rate = result.requests / result.seconds if result.seconds > 0 else 0.0
    lines = [
        f"system under test: {result.sut}",
        f"  implementation {result.implementation}, RocketMQ {result.version}",
        f"  components: {', '.join(result.components)}",
        f"ran {result.examples} example(s), {result.requests:,} requests in {result.seconds:.1f} s "
        f"({rate:,.0f} requests/s)",
    ]
    if result.outcomes:
        lines.append("requests by operation and expected outcome:")
        items = [f"{k} {v:,}" for k, v in result.outcomes.items()]
        lines += ["  " + ", ".join(items[i : i + 6]) for i in range(0, len(items), 6)]
    finding = result.finding
    if finding is None:
        lines.append("conforms: every reply agreed with the reference")
        return "\n".join(lines)
    if isinstance(finding, Divergence):
        d = finding.to_json()
        lines += [
            f"DIVERGENCE at request {d['step']} of the script below (rules {d['rules']}):",
            f"  request:   {p.encode(finding.request)}",
            f"  SUT:       {p.encode(finding.sut)}",
            f"  reference: {p.encode(finding.reference)}",
        ]
    else:
        lines.append(f"SUT FAILURE at request {len(finding.script)} of the script below: {finding.failure}")
    if result.shrink.original:
        lines.append(
            f"shrunk from {result.shrink.original} to {len(finding.script)} requests "
            f"({result.shrink.replays} replays, {result.shrink.seconds:.1f} s)"
        )
    lines.append("script:")
    lines += [f"  {i:3d} {p.encode(r)}" for i, r in enumerate(finding.script, start=1)]
    if result.script_path:
        lines.append(
            f"saved to {result.script_path}; replay: rmqspec conform --sut '{result.sut}' --replay {result.script_path}"
        )
    return "\n".join(lines)
