"""Exhaustive breadth-first exploration of the model: every state reachable under a configuration's bounds,
every invariant on every state, every action property on every transition, and the shortest path to each
violation.

``check(config, bounds)`` visits each class of states once (``properties/canonical.py`` decides which states
are one: relative time, clamped old times, no report-only counters). The visited set holds 64-bit
fingerprints, not states; each state's parent index and the index of the action taken (in
``Model.enabled`` order) are kept in compact arrays, so a path is rebuilt by replaying those indices from
``initial()``. Breadth-first order makes the first path found to any state, and so to any violation, a
shortest one.

What bounds a search (``Bounds``):

* the model's own budgets (``Config``): produces, crashes, faults;
* **constraints**, part of the checked model as TLC's ``CONSTRAINT`` is: ``horizon_ms``, the logical time no
  state may pass (needed when time cannot be relative, ``canonical.time_is_relative``), and ``max_channel``,
  the most requests one consumer's connection may hold (a persist timer that outpaces an idle network grows a
  channel without bound; the quiescence procedure bounds it the same way, by delivering first);
* **search limits**: ``max_states``, ``max_depth`` and ``max_seconds``. A search cut by one of these is
  reported as not exhausted.

"Sometimes" properties (``SOMETIMES``) are conditions that must be reachable: each is reported with the shortest
path to it, and one that no transition satisfies means the model or its bounds went vacuous.
"""

from __future__ import annotations

import resource
import time
from array import array
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rmqspec.jsonin import InputError, read_file
from rmqspec.properties.canonical import CLOCK_ORIGIN, DEFAULT_CLAMP_MS, CanonicalKeys, canonical, time_is_relative
from rmqspec.properties.step_guards import StepChecks
from rmqspec.spec import actions as act
from rmqspec.spec import broker_rules as br
from rmqspec.spec.actions import Action, action_name
from rmqspec.spec.config import Config, ConfigError
from rmqspec.spec.faults import STALL_DURATIONS
from rmqspec.spec.invariants import ACTION_PROPERTIES, Violation, check_state
from rmqspec.spec.model import Model
from rmqspec.spec.orderly import client_lock_expired
from rmqspec.spec.property_types import ActionProperty
from rmqspec.spec.state import Commit, State

# What each bound accepts: (type, lowest, highest). A bound outside its range would make a search claim what it
# did not do: max_channel 0 forbids every pull, so the space "exhausted" is the idle start; NaN compares false
# with every clock, so a NaN horizon prunes nothing it should and everything it should not. horizon_ms 0 is an
# instant model (the shipped *-instant configurations). The integers stop at 2**63 - 1 (a Spark LongType); the
# clamp is longer than the longest window a past time is compared against (the 150 s Stall, spec/faults.py) and
# at most CLOCK_ORIGIN, so no clamped time is negative (canonical.py).
_INT64 = 2**63 - 1
BOUND_RANGES: dict[str, tuple[type, float, float]] = {
    "horizon_ms": (int, 0, _INT64),
    "max_channel": (int, 1, _INT64),
    "max_states": (int, 1, _INT64),
    "max_depth": (int, 0, _INT64),
    "max_seconds": (float, 0, 1e9),  # about 31 years: beyond it a limit is a mistake, not a budget
    "clamp_ms": (int, max(STALL_DURATIONS) + 1, CLOCK_ORIGIN),
}


def _accepted(name: str) -> str:
    kind, low, high = BOUND_RANGES[name]
    what = "an integer" if kind is int else "a finite number"
    none = "" if name == "clamp_ms" else ", or null for no limit"
    return f"{what} from {low:,.0f} to {high:,.0f}{none}" if high < _INT64 else f"{what} from {low:,.0f} up{none}"


@dataclass(frozen=True)
class Bounds:
    """What limits a search: constraints (part of the checked model) and search limits (which make a search
    incomplete). ``None`` is "no limit"."""

    horizon_ms: int | None = None  # constraint: no state's clock passes it
    max_channel: int | None = 3  # constraint: requests one consumer's connection may hold
    max_states: int | None = None  # limit: distinct states
    max_depth: int | None = None  # limit: steps from the initial state
    max_seconds: float | None = None  # limit: wall-clock time
    clamp_ms: int = DEFAULT_CLAMP_MS  # canonical form: how old a past time may get before it is clamped

    def __post_init__(self) -> None:
        for name, (kind, low, high) in BOUND_RANGES.items():
            value = getattr(self, name)
            if value is None and name != "clamp_ms":
                continue
            if kind is int:
                ok = isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
            else:
                ok = isinstance(value, (int, float)) and not isinstance(value, bool) and low <= value <= high
            if not ok:  # NaN fails every comparison, so it lands here, as do the infinities
                raise ConfigError(f"{name}: got {value!r}; accepted: {_accepted(name)}")

    def admits(self, state: State) -> bool:
        """Whether ``state`` lies within the constraints (a successor outside them is pruned)."""
        if self.horizon_ms is not None and state.now > self.horizon_ms:
            return False
        return self.max_channel is None or all(len(c.channel) <= self.max_channel for c in state.clients)

    def time_is_relative(self, config: Config) -> bool:
        """Whether the search of ``config`` may use relative time (``canonical.time_is_relative``); a
        configuration that may not needs a horizon to be finite, or this raises ValueError."""
        relative = time_is_relative(config)
        if not relative and self.horizon_ms is None:
            raise ValueError(
                "CONSUME_FROM_TIMESTAMP compares absolute times, so the clock cannot be relative: give a horizon "
                "(Bounds.horizon_ms, --horizon MS) to make the state space finite"
            )
        return relative

    def describe(self) -> str:
        parts = []
        if self.horizon_ms is not None:
            parts.append(f"time <= {self.horizon_ms} ms")
        if self.max_channel is not None:
            parts.append(f"at most {self.max_channel} requests per connection")
        return ", ".join(parts) or "none"


@dataclass(frozen=True)
class Sometimes:
    """A condition some transition must reach; ``holds(model, before, action, after)``."""

    name: str
    description: str
    holds: Callable[[Model, State, Action, State], bool]


def _rebalance_drops_cached(m: Model, s: State, a: Action, t: State) -> bool:
    if not isinstance(a, (act.Rebalance, act.RebalanceQueryError)):
        return False
    before, after = s.clients[a.client].pqs, t.clients[a.client].pqs
    return any(
        p is not None and p.msg_count > 0 and (n is None or n.uid != p.uid or (n.dropped and not p.dropped))
        for p, n in zip(before, after, strict=True)
    )


def _routed_to_dlq(m: Model, s: State, a: Action, t: State) -> bool:
    return len(t.broker.dlq) > len(s.broker.dlq)


def _commit_after_drop(m: Model, s: State, a: Action, t: State) -> bool:
    if not isinstance(a, act.BrokerReceive) or t.broker.offsets == s.broker.offsets:
        return False
    cl = s.clients[a.client]
    landed = [x for x in cl.channel[: a.overtakes + 1] if isinstance(x, Commit)]
    return any((pq := cl.pqs[c.queue]) is None or pq.uid != c.pq_uid or pq.dropped for c in landed)


def _offset_illegal_with_cache(m: Model, s: State, a: Action, t: State) -> bool:
    if not isinstance(a, act.ReceivePull):
        return False
    cl = s.clients[a.client]
    pull = next((p for p in cl.pulls if p.pq_uid == a.pq_uid and p.epoch != -1), None)
    if pull is None:
        return False
    pq = cl.pqs[pull.queue]
    if pq is None or pq.uid != pull.pq_uid or not pq.tree:
        return False
    result = pull.result if pull.result is not None else m._pull_result(s, pull.queue, pull.offset, pull.from_slave)
    return result.status == br.OFFSET_ILLEGAL


def _lock_expires_under_listener(m: Model, s: State, a: Action, t: State) -> bool:
    if not m.orderly or not isinstance(a, act.Tick):
        return False
    for cl in t.clients:
        for r in cl.consuming:
            pq = cl.pqs[r.queue]
            if (
                pq is not None
                and pq.uid == r.pq_uid
                and pq.locked
                and client_lock_expired(pq.last_lock, t.now)
                and not client_lock_expired(pq.last_lock, s.now)
            ):
                return True
    return False


def _flow_control_holds_pull(m: Model, s: State, a: Action, t: State) -> bool:
    if not isinstance(a, act.ReceivePull):
        return False
    return any(
        pq is not None and m.flow_controlled(pq, t.now) and not (p is not None and m.flow_controlled(p, s.now))
        for p, pq in zip(s.clients[a.client].pqs, t.clients[a.client].pqs, strict=True)
    )


def _expired_message_cleaned(m: Model, s: State, a: Action, t: State) -> bool:
    if not isinstance(a, act.CleanExpiredMsg):
        return False
    return any(
        p is not None and n is not None and n.uid == p.uid and n.msg_count < p.msg_count
        for p, n in zip(s.clients[a.client].pqs, t.clients[a.client].pqs, strict=True)
    )


def _pull_to_slave(m: Model, s: State, a: Action, t: State) -> bool:
    if not isinstance(a, act.SendPull):
        return False
    return len(t.clients[a.client].pulls) > len(s.clients[a.client].pulls) and t.clients[a.client].pulls[-1].from_slave


SOMETIMES: tuple[Sometimes, ...] = (
    Sometimes("rebalance-drops-cached", "a rebalance takes away a pq holding messages (R9.4)", _rebalance_drops_cached),
    Sometimes("routed-to-dlq", "a message is routed to the DLQ (R7.5)", _routed_to_dlq),
    Sometimes(
        "commit-after-drop", "a commit lands after its pq was dropped or replaced (R2.5, R9.4)", _commit_after_drop
    ),
    Sometimes(
        "offset-illegal-with-cache",
        "OFFSET_ILLEGAL answers a pull of a pq holding messages (R5.7)",
        _offset_illegal_with_cache,
    ),
    Sometimes(
        "lock-expires-under-listener",
        "a pq's lock expires while its orderly listener runs (R6.6, R8.5)",
        _lock_expires_under_listener,
    ),
    Sometimes(
        "flow-control-holds-pull",
        "a pull's answer leaves its pq over pullThresholdForQueue with its next pull due: flow control holds it (R5.1)",
        _flow_control_holds_pull,
    ),
    Sometimes(
        "expired-message-cleaned",
        "cleanExpiredMsg removes a message whose listener ran past consumeTimeout from its pq (R6.8)",
        _expired_message_cleaned,
    ),
    Sometimes("pull-to-slave", "a pull goes to the slave while the master is down (R5.3)", _pull_to_slave),
)


@dataclass
class Found:
    """A violation or a sometimes-witness: what, the breaking action's name, and the shortest path to it."""

    id: str
    name: str
    detail: str
    action: str
    actions: list[Action]
    depth: int


@dataclass
class CheckResult:
    """Flat results of one exhaustive search (TLC's statistics, and the findings)."""

    config: Config
    bounds: Bounds
    relative_time: bool
    distinct_states: int = 0
    transitions: int = 0
    pruned: int = 0  # successors outside a constraint
    depth_counts: list[int] = field(default_factory=list)  # distinct states first reached at each depth
    action_counts: Counter[str] = field(default_factory=Counter)  # transitions per action name
    violations: list[Found] = field(default_factory=list)
    sometimes: dict[str, Found] = field(default_factory=dict)
    sometimes_hits: Counter[str] = field(default_factory=Counter)
    exhausted: bool = False
    stopped_by: str = ""  # the search limit that cut it, or "violation" with stop_at_first
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # this process's CPU time: the rate on one core, even on a machine others share
    bytes_per_state: float = 0.0

    @property
    def diameter(self) -> int:
        return len(self.depth_counts) - 1

    @property
    def valid(self) -> bool:
        return not self.violations

    def states_per_second(self) -> float:
        return self.distinct_states / self.seconds if self.seconds else 0.0

    def states_per_cpu_second(self) -> float:
        return self.distinct_states / self.cpu_seconds if self.cpu_seconds else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "valid": self.valid,
            "exhausted": self.exhausted,
            "stopped_by": self.stopped_by,
            "relative_time": self.relative_time,
            "constraints": self.bounds.describe(),
            "distinct_states": self.distinct_states,
            "transitions": self.transitions,
            "pruned_by_constraints": self.pruned,
            "diameter": self.diameter,
            "states_per_depth": self.depth_counts,
            "actions": dict(self.action_counts.most_common()),
            "seconds": round(self.seconds, 3),
            "states_per_second": round(self.states_per_second()),
            "cpu_seconds": round(self.cpu_seconds, 3),
            "states_per_cpu_second": round(self.states_per_cpu_second()),
            "bytes_per_state": round(self.bytes_per_state),
            "violations": [_found_dict(f) for f in self.violations],
            "sometimes": {
                s.name: (
                    {"hits": self.sometimes_hits[s.name], **_found_dict(self.sometimes[s.name])}
                    if s.name in self.sometimes
                    else {"hits": 0}
                )
                for s in SOMETIMES
            },
        }


def _found_dict(f: Found) -> dict[str, Any]:
    return {"id": f.id, "name": f.name, "detail": f.detail, "action": f.action, "steps": f.depth}


def _rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _reset_peak_rss() -> None:
    """Start this process's peak RSS afresh (Linux: ``/proc/self/clear_refs``), so that a search measures its
    own peak even after an earlier, larger one in the same process (``rmqspec check --config all``, a test
    run). Elsewhere the peak stays, and a later, smaller search reports no growth."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
    except OSError:
        pass


class _Graph:
    """The explored graph in compact arrays: per state its parent and the action index taken from it, and
    (when kept) every transition as (source, target, action index)."""

    def __init__(self, keep_edges: bool) -> None:
        self.parent = array("q", [-1])
        self.via = array("l", [-1])
        self.depth = array("l", [0])
        self.keep_edges = keep_edges
        # with keep_edges: every enabled action of every expanded state, as (source, target or -1 when a
        # constraint pruned it, interned action id), and per state the liveness checks failing in it (a bitmask
        # over properties.lasso.LIVENESS_IDS)
        self.src = array("q")
        self.dst = array("q")
        self.act = array("l")
        self.actions: dict[Action, int] = {}
        self.action_list: list[Action] = []
        self.bad = array("B")

    def intern(self, a: Action) -> int:
        k = self.actions.get(a)
        if k is None:
            k = self.actions[a] = len(self.action_list)
            self.action_list.append(a)
        return k

    def add(self, parent: int, via: int) -> int:
        self.parent.append(parent)
        self.via.append(via)
        self.depth.append(self.depth[parent] + 1)
        return len(self.parent) - 1

    def path(self, index: int) -> list[int]:
        out = []
        while index > 0:
            out.append(self.via[index])
            index = self.parent[index]
        out.reverse()
        return out


def replay(model: Model, choices: list[int]) -> tuple[list[Action], State]:
    """The actions a path of action indices takes from ``initial()``, and the state it ends in."""
    s = model.initial()
    actions = []
    for j in choices:
        a = model.enabled(s)[j]
        actions.append(a)
        s = model.step(s, a)
    return actions, s


@dataclass
class Search:
    """A finished search: its results, its graph (for liveness), and its model."""

    result: CheckResult
    graph: _Graph
    model: Model
    visited: dict[int, int]  # fingerprint -> state index


def check(
    config: Config,
    bounds: Bounds = Bounds(),
    *,
    stop_at_first: bool = True,
    keep_edges: bool = False,
    progress: Callable[[CheckResult, int, int], None] | None = None,
    optimised: bool = True,
    at_horizon: Callable[[int, State], None] | None = None,
) -> Search:
    """Explore every state of ``config`` reachable within ``bounds``, breadth first (module docstring).
    ``keep_edges`` keeps the transition graph and each state's failing liveness checks, which
    ``properties.lasso`` needs. ``progress(result, depth, frontier)`` is called about once a second.
    ``optimised=False`` computes each fingerprint from ``canonical()`` afresh and asks every action property
    and sometimes-condition on every transition: the plain search the optimised one must agree with
    (docs/check.md, "Performance"), and the baseline ``rmqspec bench-check`` measures it against.
    ``at_horizon(index, state)`` is called once for each expanded state with a successor the horizon cut off
    (a frontier state: ``properties.frontier`` quiesces it)."""
    from rmqspec.properties.lasso import liveness_bits

    model = Model(config)
    relative = bounds.time_is_relative(config)
    result = CheckResult(config, bounds, relative)
    graph = _Graph(keep_edges)
    fp: Callable[[State], int]
    step_properties: Callable[[Action], tuple[ActionProperty, ...]]
    step_sometimes: Callable[[Action], tuple[Sometimes, ...]]
    if optimised:
        fp = CanonicalKeys(config, relative, bounds.clamp_ms).fingerprint
        # the action properties and sometimes-conditions a step of each action type can fire (their opening guards)
        step_properties = StepChecks(model, ACTION_PROPERTIES, lambda p: p.check).for_action
        step_sometimes = StepChecks(model, SOMETIMES, lambda x: x.holds).for_action
    else:
        fp = lambda s: hash(canonical(s, config, relative, bounds.clamp_ms))  # noqa: E731
        step_properties = lambda a: ACTION_PROPERTIES  # noqa: E731
        step_sometimes = lambda a: SOMETIMES  # noqa: E731

    _reset_peak_rss()
    rss0 = _rss_bytes()
    started, cpu_started = time.perf_counter(), time.process_time()
    next_report = started + 1.0
    s0 = model.initial()
    seen: dict[int, int] = {fp(s0): 0}
    if keep_edges:
        graph.bad.append(liveness_bits(model, s0))
    result.depth_counts.append(1)
    frontier: deque[tuple[int, State]] = deque([(0, s0)])
    found_keys: set[tuple[str, str]] = set()
    deadline = None if bounds.max_seconds is None else started + bounds.max_seconds
    horizon = bounds.horizon_ms
    cut_at = -1  # the last state reported to at_horizon

    def record(index: int, extra: int | None, vs: list[Any], name: str) -> bool:
        """Keep the first (shortest) violation per (property, action); True if the search should stop."""
        for v in vs:
            key = (v.id, name)
            if key in found_keys:
                continue
            found_keys.add(key)
            choices = graph.path(index) + ([] if extra is None else [extra])
            actions, _ = replay(model, choices)
            result.violations.append(Found(v.id, v.name, v.detail, name, actions, len(actions)))
        return stop_at_first and bool(result.violations)

    if record(0, None, check_state(model, s0), "initial"):
        result.stopped_by = "violation"
    while frontier and not result.stopped_by:
        index, s = frontier.popleft()
        depth = graph.depth[index]
        if bounds.max_depth is not None and depth >= bounds.max_depth:
            result.stopped_by = "max_depth"
            break
        for j, a in enumerate(model.enabled(s)):
            n = model.step(s, a)
            name = action_name(a)
            result.transitions += 1
            result.action_counts[name] += 1
            broken = [
                Violation(p.id, p.name, detail)
                for p in step_properties(a)
                if (detail := p.check(model, s, a, n)) is not None
            ]
            if broken and record(index, j, broken, name):
                result.stopped_by = "violation"
                break
            for st in step_sometimes(a):
                if st.holds(model, s, a, n):
                    result.sometimes_hits[st.name] += 1
                    if st.name not in result.sometimes:
                        actions, _ = replay(model, [*graph.path(index), j])
                        result.sometimes[st.name] = Found(st.name, st.name, st.description, name, actions, len(actions))
            if not bounds.admits(n):
                result.pruned += 1
                if at_horizon is not None and cut_at != index and horizon is not None and n.now > horizon:
                    cut_at = index
                    at_horizon(index, s)
                if keep_edges:
                    graph.src.append(index)
                    graph.dst.append(-1)
                    graph.act.append(graph.intern(a))
                continue
            key = fp(n)
            target = seen.get(key)
            if target is None:
                target = graph.add(index, j)
                seen[key] = target
                if depth + 1 == len(result.depth_counts):
                    result.depth_counts.append(0)
                result.depth_counts[depth + 1] += 1
                frontier.append((target, n))
                if keep_edges:
                    graph.bad.append(liveness_bits(model, n))
                if record(target, None, check_state(model, n), "state"):
                    result.stopped_by = "violation"
                    break
            if keep_edges:
                graph.src.append(index)
                graph.dst.append(target)
                graph.act.append(graph.intern(a))
        result.distinct_states = len(seen)
        if bounds.max_states is not None and len(seen) >= bounds.max_states and frontier:
            result.stopped_by = result.stopped_by or "max_states"
        now = time.perf_counter()
        if deadline is not None and now > deadline and frontier:
            result.stopped_by = result.stopped_by or "max_seconds"
        if progress is not None and now >= next_report:
            next_report = now + 1.0
            result.seconds = now - started
            progress(result, depth, len(frontier))
    result.distinct_states = len(seen)
    result.exhausted = not frontier and not result.stopped_by
    result.seconds = time.perf_counter() - started
    result.cpu_seconds = time.process_time() - cpu_started
    result.bytes_per_state = max(0, _rss_bytes() - rss0) / max(1, len(seen))
    return Search(result, graph, model, seen)


# --- named configurations (properties/check_configs/*.json) ------------------------------------------
NAMED_DIR = Path(__file__).resolve().parent / "check_configs"


@dataclass(frozen=True)
class NamedConfig:
    """A configuration shipped for exhaustive checking: its model configuration, its bounds and why it exists."""

    name: str
    description: str
    config: Config
    bounds: Bounds
    default_run: bool = True  # checked by ``rmqspec check --config all`` (and so by ``make run``)
    # the figures its search gives (``EXPECTED_FIELDS``), and the same within tighter bounds where the full search
    # takes too long for the tests (``"bounds"``: the Bounds fields changed); tests/test_check_configs.py checks them
    expected: dict[str, Any] = field(default_factory=dict)
    expected_within: dict[str, Any] = field(default_factory=dict)

    def tested(self) -> tuple[Bounds, dict[str, Any]]:
        """The bounds the tests search and the figures they expect there: ``expected_within`` if given, else
        ``expected``."""
        if self.expected_within:
            changed = self.expected_within.get("bounds", {})
            return replace(self.bounds, **changed), {k: v for k, v in self.expected_within.items() if k != "bounds"}
        return self.bounds, self.expected


def named_configs() -> dict[str, NamedConfig]:
    """Every configuration in ``properties/check_configs``, by file stem."""
    return {p.stem: load_named(p) for p in sorted(NAMED_DIR.glob("*.json"))}


# What a configuration's "expected" object may pin: the search's statistics, whether it is exhausted, the
# sometimes-conditions it reaches (exactly), the actions it takes (at least these), and the frontier quiescence's
# verdict ("frontier_failures": the liveness checks failing at the horizon, [] for none).
EXPECTED_FIELDS = (
    "exhausted",
    "distinct_states",
    "transitions",
    "pruned",
    "diameter",
    "sometimes",
    "actions",
    "frontier_failures",
)
_DOC_KEYS = ("description", "config", "bounds", "default_run", "expected", "expected_within")


def _expected(path: Path, doc: dict[str, Any], key: str) -> dict[str, Any]:
    raw = doc.get(key, {})
    allowed = EXPECTED_FIELDS + (("bounds",) if key == "expected_within" else ())
    if not isinstance(raw, dict) or set(raw) - set(allowed):
        bad = sorted(set(raw) - set(allowed)) if isinstance(raw, dict) else [key]
        raise ConfigError(f"{path}: {key}: unknown field {bad[0]!r}; accepted: {', '.join(allowed)}")
    changed = raw.get("bounds", {})
    if not isinstance(changed, dict) or set(changed) - set(BOUND_RANGES):
        raise ConfigError(f"{path}: {key}.bounds: expected an object of {', '.join(BOUND_RANGES)}")
    return raw


def load_named(path: Path) -> NamedConfig:
    """A named configuration from its JSON file: ``{"description", "config": {Config fields}, "bounds":
    {Bounds fields}, "default_run": false, "expected": {...}, "expected_within": {"bounds": {...}, ...}}``
    (``default_run`` only for one too slow for every ``make run``; its description must say why; the expected
    figures as ``EXPECTED_FIELDS``). Read by the one JSON reader (``rmqspec.jsonin``); the Config by
    ``Config.from_mapping``, as ``rmqspec run --config`` reads one; every bound checked for type, finiteness and
    range (``BOUND_RANGES``). A bad file raises ConfigError naming the file and the field."""
    try:
        doc = read_file(path, "a check configuration")
    except InputError as err:
        raise ConfigError(str(err)) from None
    if not isinstance(doc, dict) or "config" not in doc or not isinstance(doc["config"], dict):
        raise ConfigError(
            f'{path}: expected an object with "config" (an object of Config fields, {{}} for the defaults) and "bounds"'
        )
    unknown = sorted(set(doc) - set(_DOC_KEYS))
    if unknown:
        raise ConfigError(f"{path}: unknown key {unknown[0]!r}; accepted: {', '.join(_DOC_KEYS)}")
    default_run = doc.get("default_run", True)
    if not isinstance(default_run, bool):
        raise ConfigError(f"{path}: default_run: got {default_run!r}; accepted: true or false")
    raw_bounds = doc.get("bounds", {})
    if not isinstance(raw_bounds, dict) or set(raw_bounds) - set(BOUND_RANGES):
        bad = sorted(set(raw_bounds) - set(BOUND_RANGES)) if isinstance(raw_bounds, dict) else ["bounds"]
        raise ConfigError(f"{path}: bounds: unknown field {bad[0]!r}; accepted: {', '.join(BOUND_RANGES)}")
    try:
        bounds = Bounds(**raw_bounds)
    except ConfigError as err:
        raise ConfigError(f"{path}: bounds.{err}") from None
    config = Config.from_mapping(doc["config"], where=str(path))
    expected, within = _expected(path, doc, "expected"), _expected(path, doc, "expected_within")
    return NamedConfig(path.stem, str(doc.get("description", "")), config, bounds, default_run, expected, within)
