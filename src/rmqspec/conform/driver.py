"""``rmqspec conform``: drive a system under test and the reference side by side and report what
differs, each finding shrunk to a short request script that replays.

Requests come from a generated :class:`Sequence`, each drawn from a ``random.Random`` of its own
(seeded by the run's seed and the sequence's number), that picks, step by step, one of the
components the SUT declared and then one of its operations with its arguments; after every operation
on a ProcessQueue, offset store or broker offset manager, it also asks for that object's whole
state, so a wrong internal state shows up at the step that caused it rather than later. The
shrinking is delta debugging over the request script (:func:`shrink`), because it must also shrink
failures that cost a timeout each (a hanging SUT) within a time budget, and because a script that
drops the request creating a handle must drop the requests that use it too (:func:`replay` skips
them).

Two replies agree when :func:`protocol.normalise` makes them equal: same success or same Java
exception type, same result, same broker requests as a multiset. Where they differ is a list of
differences, each a path and a shape (:func:`fingerprint.differences`); a divergence's fingerprint is
its operation and the path and shape of each difference that no ``--known`` entry accepts
(:attr:`Divergence.fingerprint`). Shrinking keeps the fingerprint, and only tries argument values the
generator could have drawn (:func:`drawable`).

A run does not have to stop at its first finding: a divergence every difference of which a team has
accepted (``--known``, :class:`KnownDifferences`) is counted and the run goes on with the next
sequence, and ``--max-findings N`` collects up to N findings of distinct fingerprints, each counted,
shrunk from its shortest occurrence and saved to its own script. An operation the SUT answers as
unsupported is not generated again in the run, and result fields it declares unsupported are not
compared (``docs/oracle.md``, "Unsupported operations").
Nothing is kept from one sequence to the next but the findings and counts, so memory stays flat
however many sequences are asked for.
"""

from __future__ import annotations

import copy
import json
import math
import random
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from rmqspec.conform import fingerprint as fp
from rmqspec.conform import protocol as p
from rmqspec.conform.consumers import REACHED, ConsumerScenario
from rmqspec.conform.reference_adapter import ReferenceAdapter
from rmqspec.conform.sut import SutFailure, SutProcess
from rmqspec.jsonin import InputError, iter_lines

SCRIPT_FORMAT: Final = "rmqspec-conform-script"
SCRIPT_VERSION: Final = 1
KNOWN_FORMAT: Final = "rmqspec-conform-known"
KNOWN_VERSION: Final = 2  # what docs/oracle.md describes; version 1 files are read with their old meaning
KNOWN_VERSIONS: Final = (1, 2)
OBSERVERS: Final = (
    "pq.state",
    "store.clone",
    "com.table",
    "consumer.observe",
)  # requests that only read an object's state
# The op whose handle every other op of a family needs: when the SUT does not support it, the whole
# family is dropped from generation.
CREATORS: Final = {
    "pq.new": "process_queue",
    "store.new": "offset_store",
    "com.new": "offset_manager",
    "consumer.new": "push_consumer",
}


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
    """The SUT's reply differs from the reference's at ``script[-1]``. ``difference`` is the coarse kind
    (:func:`protocol.difference`); ``differences`` where and how the replies differ
    (:func:`fingerprint.differences`), of which those at the indices ``accepted`` a ``--known`` entry
    accepts, for ``reasons``."""

    request: dict[str, Any]
    sut: dict[str, Any]
    reference: dict[str, Any]
    script: list[dict[str, Any]]
    difference: str = ""
    differences: tuple[fp.Difference, ...] = ()
    accepted: frozenset[int] = frozenset()
    reasons: tuple[str, ...] = ()

    @property
    def new_differences(self) -> tuple[fp.Difference, ...]:
        """The differences no ``--known`` entry accepts."""
        return tuple(d for i, d in enumerate(self.differences) if i not in self.accepted)

    @property
    def is_known(self) -> bool:
        """True if ``--known`` accepts every difference: the divergence is no finding."""
        return bool(self.differences) and not self.new_differences

    @property
    def fingerprint(self) -> str:
        """The operation and the ``path:shape`` of each new difference (of every difference if all
        are known): ``consumer.observe tasks[persistOffsets].due:changed``."""
        shown = self.new_differences or self.differences
        if not shown:  # made without its differences (a test's stand-in): the coarse kind
            return f"{self.request['op']} {self.difference}"
        return fp.fingerprint(self.request["op"], shown)

    @property
    def signature(self) -> tuple[str, ...]:
        """What tells findings apart: the fingerprint (a known divergence's is kept apart)."""
        return ("known" if self.is_known else "divergence", self.fingerprint)

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
            "difference": self.difference,
            "fingerprint": self.fingerprint,
            "paths": [{**d.to_json(), "known": i in self.accepted} for i, d in enumerate(self.differences)],
        }


@dataclass
class SutBroke(Exception):
    """The SUT crashed, hung or broke the protocol at ``script[-1]``."""

    failure: SutFailure
    script: list[dict[str, Any]]

    @property
    def signature(self) -> tuple[str, ...]:
        return ("sut", self.failure.kind)

    @property
    def fingerprint(self) -> str:
        return f"sut {self.failure.kind}"


Finding = Divergence | SutBroke


class UnsupportedBySut(Exception):
    """The SUT answered ``op`` as unsupported; the sequence cannot go on (the reference did it)."""

    def __init__(self, op: str, reason: str) -> None:
        super().__init__(f"{op}: {reason}")
        self.op, self.reason = op, reason


class KnownError(ValueError):
    """A known-differences file that cannot be read; the message names the file and line."""


_KNOWN_FIELDS_V1: Final = ("op", "difference", "note")
_KNOWN_FIELDS: Final = ("fingerprint", "op", "path", "shape", "sut", "reference", "reason")


@dataclass(frozen=True)
class KnownEntry:
    """One entry of a ``--known`` file: what it accepts (see :class:`KnownDifferences`) and why."""

    line: int
    reason: str
    op: str | None = None
    difference: str | None = None  # version 1: a coarse kind of difference, or "*"
    fingerprint: str | None = None
    parts: frozenset[str] = frozenset()  # the fingerprint's path:shape parts
    path: fp.PathPattern | None = None
    shape: str | None = None
    sut: re.Pattern[str] | None = None
    reference: re.Pattern[str] | None = None

    @property
    def name(self) -> str:
        """What the entry names, as a report shows it."""
        if self.fingerprint is not None:
            return self.fingerprint
        if self.path is not None:
            what = " ".join(x for x in (self.op, self.path.text) if x is not None)
            if self.shape is not None:
                what += f":{self.shape}"
            for side, pattern in (("SUT", self.sut), ("reference", self.reference)):
                if pattern is not None:
                    what += f" ({side} ~ /{pattern.pattern}/)"
            return what
        return f"{self.op} {self.difference}"

    def accepts(self, op: str, difference: str, differences: tuple[fp.Difference, ...]) -> frozenset[int]:
        """The indices of the ``differences`` of a divergence of ``op`` this entry accepts."""
        if self.op is not None and self.op != op:
            return frozenset()
        if self.difference is not None:  # version 1: the whole divergence, or nothing
            return frozenset(range(len(differences))) if self.difference in ("*", difference) else frozenset()
        if self.path is None:  # a fingerprint: its parts, when the divergence has every one of them
            if not self.parts <= {d.fingerprint_part for d in differences}:
                return frozenset()
            return frozenset(i for i, d in enumerate(differences) if d.fingerprint_part in self.parts)
        return frozenset(i for i, d in enumerate(differences) if self._takes(d))

    def _takes(self, d: fp.Difference) -> bool:
        assert self.path is not None
        if not self.path.matches(d.path) or (self.shape is not None and self.shape != d.shape):
            return False
        for pattern, value in ((self.sut, d.sut), (self.reference, d.reference)):
            if pattern is not None and (value is fp.ABSENT or pattern.fullmatch(fp.value_text(value)) is None):
                return False
        return True


@dataclass(frozen=True)
class KnownDifferences:
    """Differences a team has accepted, from a ``--known`` file (JSON Lines). Version 2::

        {"format": "rmqspec-conform-known", "version": 2}
        {"fingerprint": "store.read offset:changed", "reason": "we answer -2 for every broker error"}
        {"op": "consumer.observe", "path": "tasks[pull *].due", "reason": "our pulls wait 3 s"}
        {"op": "store.clone", "path": "table[*].offset", "sut": "-2", "reference": "-1", "reason": "..."}

    Every entry carries a ``reason``, the team's why, and names either a ``fingerprint`` exactly as a
    report prints it (it accepts those ``path:shape`` parts of a divergence that has all of them), or a
    ``path`` (``*`` allowed in each segment; it accepts the differences at that path or inside it) with
    optionally the ``op`` (default any), the ``shape`` (``changed``, ``sut-only``,
    ``reference-only``, ``type``, or ``A/B`` for ``outcome`` and ``error``) and regular expressions
    that the SUT's and the reference's value there must match whole (``sut``, ``reference``; a string
    value as it is, any other as compact JSON; a side with no value matches no pattern).

    Version 1 files keep their meaning: ``{"op": ..., "difference": ..., "note": ...}``, where
    ``difference`` is the coarse kind :func:`protocol.difference` gives (``result:f1,f2``,
    ``outcome:A/B``, ...) or ``*`` for any difference on the operation, and accepts the whole
    divergence; ``note`` is free text and no reason is required.

    A divergence every difference of which some entry accepts is known (counted, not a finding); one
    that has differences no entry accepts is a finding named by those alone."""

    entries: tuple[KnownEntry, ...]

    def accept(
        self, op: str, difference: str, differences: tuple[fp.Difference, ...]
    ) -> tuple[frozenset[int], tuple[str, ...]]:
        """The indices of the ``differences`` some entry accepts, and the reasons of the entries
        that accepted any."""
        accepted: set[int] = set()
        reasons: list[str] = []
        for entry in self.entries:
            taken = entry.accepts(op, difference, differences)
            if taken:
                accepted |= taken
                reasons.append(f"line {entry.line}: {entry.name}: {entry.reason}")
        return frozenset(accepted), tuple(dict.fromkeys(reasons))

    def matches(self, finding: Finding) -> bool:
        """True if the entries accept every difference of ``finding`` (a divergence)."""
        if not isinstance(finding, Divergence):
            return False
        accepted, _ = self.accept(finding.request["op"], finding.difference, finding.differences)
        return bool(finding.differences) and len(accepted) == len(finding.differences)

    @classmethod
    def read(cls, path: str) -> KnownDifferences:
        version, lines = _headed_lines(path, KNOWN_FORMAT, KNOWN_VERSIONS, KnownError)
        entries = []
        for number, entry in lines:
            where = f"{path}: line {number}"
            entries.append(_known_v1(where, number, entry) if version == 1 else _known_v2(where, number, entry))
        return cls(tuple(entries))


def _known_v1(where: str, number: int, entry: Any) -> KnownEntry:
    if not isinstance(entry, dict):
        raise KnownError(f'{where}: an entry must be an object {{"op": ..., "difference": ...}}')
    unknown = sorted(set(entry) - set(_KNOWN_FIELDS_V1))
    if unknown:
        raise KnownError(f"{where}: unknown field {unknown[0]!r}; a version 1 entry has op, difference and note")
    op, difference = entry.get("op"), entry.get("difference")
    if not isinstance(op, str) or op not in p.OPS:
        raise KnownError(f"{where}: op must be one of {sorted(p.OPS)}, got {op!r}")
    if not isinstance(difference, str) or not difference:
        raise KnownError(f'{where}: difference must be one as reports print it (e.g. "result:offset") or "*"')
    note = entry.get("note", "")
    if not isinstance(note, str):
        raise KnownError(f"{where}: note must be a string")
    return KnownEntry(number, note or "(version 1 entry, no reason given)", op=op, difference=difference)


def _valid_shape(shape: str) -> bool:
    return shape in fp.SHAPES or (shape.count("/") == 1 and all(shape.split("/")))


def _known_v2(where: str, number: int, entry: Any) -> KnownEntry:
    if not isinstance(entry, dict):
        raise KnownError(f'{where}: an entry must be an object {{"fingerprint": ..., "reason": ...}}')
    unknown = sorted(set(entry) - set(_KNOWN_FIELDS), key=str)
    if unknown:
        hint = "; use version 1 for op, difference and note" if unknown[0] in ("difference", "note") else ""
        raise KnownError(f"{where}: unknown field {unknown[0]!r}; an entry has {', '.join(_KNOWN_FIELDS)}{hint}")
    reason = entry.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise KnownError(f"{where}: reason: every entry needs a reason, the team's why (a non-empty string)")
    if ("fingerprint" in entry) == ("path" in entry):
        raise KnownError(f"{where}: fingerprint or path: an entry names exactly one of them")
    if "fingerprint" in entry:
        extra = sorted(set(entry) - {"fingerprint", "reason"})
        if extra:
            raise KnownError(f"{where}: {extra[0]}: a fingerprint names the op and the shapes; use path for patterns")
        text = entry["fingerprint"]
        named, _, rest = text.partition(" ") if isinstance(text, str) else ("", "", "")
        parts = rest.split(", ") if rest else []
        if named not in p.OPS or not parts or any(not _valid_part(part) for part in parts):
            raise KnownError(
                f"{where}: fingerprint must be one as reports print it, the op then path:shape parts "
                f'(e.g. "store.read offset:changed"), got {text!r}'
            )
        return KnownEntry(number, reason, op=named, fingerprint=text, parts=frozenset(parts))
    op = entry.get("op")
    if op is not None and (not isinstance(op, str) or op not in p.OPS):
        raise KnownError(f"{where}: op must be one of {sorted(p.OPS)}, got {op!r}")
    path = entry["path"]
    pattern = fp.PathPattern.parse(path) if isinstance(path, str) else None
    if pattern is None:
        raise KnownError(
            f'{where}: path must be a field path as reports print it (e.g. "tasks[pull *].due"), got {path!r}'
        )
    shape = entry.get("shape")
    if shape is not None and (not isinstance(shape, str) or not _valid_shape(shape)):
        raise KnownError(f"{where}: shape must be one of {list(fp.SHAPES)} or A/B (outcome, error), got {shape!r}")
    patterns: dict[str, re.Pattern[str] | None] = {}
    for side in ("sut", "reference"):
        value = entry.get(side)
        if value is None:
            patterns[side] = None
            continue
        if not isinstance(value, str):
            raise KnownError(f"{where}: {side} must be a regular expression (a string), got {value!r}")
        try:
            patterns[side] = re.compile(value)
        except re.error as e:
            raise KnownError(f"{where}: {side}: not a regular expression ({e})") from None
    return KnownEntry(
        number, reason, op=op, path=pattern, shape=shape, sut=patterns["sut"], reference=patterns["reference"]
    )


def _valid_part(part: str) -> bool:
    path, colon, shape = part.rpartition(":")
    if not colon:
        return False
    if path in ("outcome", "error"):
        return _valid_shape(shape) and "/" in shape
    return shape in fp.SHAPES and fp.segments(path) is not None


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
            wanted = set(components)
            if p.PROCESS_QUEUE_ORDERLY in wanted:  # its operations work on ProcessQueues pq.new makes
                wanted.add(p.PROCESS_QUEUE)
            if p.PUSH_CONSUMER_ORDERLY in wanted:  # its consumers are made by pushConsumer's consumer.new
                wanted.add(p.PUSH_CONSUMER)
            declared = tuple(c for c in declared if c in wanted)
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
        # Consumer-level states the generated sequences reached (consumers.REACHED), by name.
        self.reached: Counter[str] = Counter()
        # What the SUT does not support: operations (with its reason), result fields per operation.
        self.unsupported_ops: dict[str, str] = {}
        self.ignored_fields: dict[str, frozenset[str]] = {}
        # Findings of a generating run: new ones by signature (the fingerprint) in order found, each
        # the occurrence with the shortest script, and how often each was found; known ones counted
        # by fingerprint, with the reasons of the entries that accepted them.
        self.known: KnownDifferences | None = None
        self.max_findings = 1
        self.findings: dict[tuple[str, ...], Finding] = {}
        self.counts: Counter[tuple[str, ...]] = Counter()
        self.known_seen: Counter[str] = Counter()
        self.known_reasons: dict[str, tuple[str, ...]] = {}
        self.repeats = 0  # findings whose fingerprint was found before
        self.stop = False  # the next sequence must not start
        self.on_sequence: Callable[[list[dict[str, Any]]], None] | None = None  # gets each finished script

    def record(self, finding: Finding) -> None:
        """Keep a finding of a generating run: count it if known; if its fingerprint was seen before,
        count it and keep the shorter script; else add it. Stop the run after ``max_findings``
        distinct ones or any SUT failure."""
        if isinstance(finding, Divergence) and finding.is_known:
            self.known_seen[finding.fingerprint] += 1
            self.known_reasons[finding.fingerprint] = tuple(
                dict.fromkeys(self.known_reasons.get(finding.fingerprint, ()) + finding.reasons)
            )
            return
        key = finding.signature
        self.counts[key] += 1
        if key in self.findings:
            self.repeats += 1
            if len(finding.script) < len(self.findings[key].script):
                self.findings[key] = finding
            return
        self.findings[key] = finding
        if isinstance(finding, SutBroke) or len(self.findings) >= self.max_findings:
            self.stop = True

    def begin(self, fresh_process: bool = False) -> None:
        """A fresh start on both sides: ``reset``, after restarting the SUT if it died or if
        ``fresh_process`` asks for a new process (a crash may depend on the process's history)."""
        if self.on_sequence is not None and self.script:
            self.on_sequence(self.script)
        self.script = []
        if fresh_process:
            self.sut.close()
        if not self.sut.alive():
            self.sut.start()
        self.reference.reset()
        try:
            reply = self.sut.call("reset", {})
        except SutFailure as failure:
            raise SutBroke(failure, []) from None
        if not reply["ok"]:
            refused = SutFailure("bad-reply", {"op": "reset", "args": {}}, json.dumps(reply), "reset failed")
            raise SutBroke(refused, [])

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
            raise SutBroke(failure, list(self.script)) from None
        if p.is_unsupported(got):
            reason = str(got["unsupported"].get("reason", ""))
            self.unsupported_ops.setdefault(op, reason)
            raise UnsupportedBySut(op, reason)
        fields = frozenset(p.unsupported_fields(got))
        if not fields <= self.ignored_fields.get(op, frozenset()):
            self.ignored_fields[op] = self.ignored_fields.get(op, frozenset()) | fields
        ignored = self.ignored_fields.get(op, frozenset())
        mine, theirs = p.normalise(got, ignored), p.normalise(expected, ignored)
        if mine != theirs:
            got = {k: v for k, v in got.items() if k != "id"}
            kind, differences = p.difference(mine, theirs), fp.differences(op, mine, theirs)
            accepted, reasons = self.known.accept(op, kind, differences) if self.known else (frozenset(), ())
            raise Divergence(request, got, expected, list(self.script), kind, differences, accepted, reasons)
        return expected

    def close(self) -> None:
        self.sut.close()
        self.reference.close()


def replay(session: Session, script: list[dict[str, Any]], fresh_process: bool = False) -> Finding | None:
    """Run ``script`` from a fresh start; the first finding, or None if both sides agree throughout
    (or until the SUT answers a request as unsupported). A request on a handle that no earlier
    request of the script created is skipped."""
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
    except UnsupportedBySut:
        return None
    return None


@dataclass
class ShrinkStats:
    replays: int = 0
    seconds: float = 0.0
    original: int = 0


def shrink(session: Session, finding: Finding, budget_seconds: float) -> tuple[Finding, ShrinkStats]:
    """Delta debugging (ddmin) over the script: drop chunks while the replay still fails the same
    way (a divergence of the same fingerprint, or the same kind of SUT failure), until no single
    request can be dropped;
    then simplify arguments (shorter lists, smaller integers) one at a time. Stops when the time
    budget is spent and returns the smallest finding seen."""
    stats = ShrinkStats(original=len(finding.script))
    deadline = time.monotonic() + budget_seconds
    best = finding

    def attempt(candidate: list[dict[str, Any]]) -> bool:
        nonlocal best
        stats.replays += 1
        try:
            found = replay(session, candidate, fresh_process=isinstance(best, SutBroke))
        except RejectedRequest:  # e.g. a pull.reply whose pull the candidate no longer sends
            return False
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
            for args in _simpler_args(request["op"], request["args"]):
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


def _simpler_args(op: str, args: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Each argument object one step simpler, drawable by the generator (:func:`drawable`): one list
    element fewer, or one number smaller (towards 0), also inside list elements. Only numbers the
    generator draws from a range are made smaller, and only to values it could have drawn; handle
    names, flags, queues and enumerated codes are left alone."""
    for candidate in _simpler_candidates(op, args):
        if drawable({"op": op, "args": candidate}):
            yield candidate


def _simpler_candidates(op: str, args: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for key, value in args.items():
        if isinstance(value, list):
            for i in reversed(range(len(value))):
                yield {**args, key: value[:i] + value[i + 1 :]}
            for i, element in enumerate(value):
                if isinstance(element, dict) and key in ("msgs", "answers"):
                    for simpler in _simpler_ints(element):
                        yield {**args, key: [*value[:i], simpler, *value[i + 1 :]]}
        elif isinstance(value, dict) and key == "answers":  # protocol 2: answers by request code
            for code, queue in value.items():
                if isinstance(queue, list):
                    for i in reversed(range(len(queue))):
                        yield {**args, key: {**value, code: queue[:i] + queue[i + 1 :]}}
            if value:
                yield {**args, key: {}}
    if isinstance(args.get("answer"), dict) and isinstance(args["answer"].get("msgs"), list):  # pull.reply
        msgs = args["answer"]["msgs"]
        for i in reversed(range(len(msgs))):
            yield {**args, "answer": {**args["answer"], "msgs": msgs[:i] + msgs[i + 1 :]}}
    if "consumer" in args:
        return  # a consumer's settings and task arguments stay as drawn
    yield from _simpler_ints(args)


def _simpler_ints(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for key, value in obj.items():
        if isinstance(value, int) and not isinstance(value, bool) and value != 0:
            for smaller in dict.fromkeys((0, 1, value // 2, -1)):
                if abs(smaller) < abs(value):
                    yield {**obj, key: smaller}


# --- request generation ---------------------------------------------------------------------------
# Each sequence is drawn from a random.Random of its own, seeded by the run's seed and the sequence's
# number: the same seed sends the same requests, and one sequence can be re-drawn alone. (A
# Hypothesis stateful machine drew them before: about 200 µs a draw, three quarters of a run's time,
# and its example tree grew with the run; what it added, novelty between examples, the swarm choice
# of families below gives, and shrinking is ours anyway.)


def _one_in(rng: random.Random, n: int) -> bool:
    return rng.randrange(n) == 0


def _mostly(rng: random.Random, small: int, edges: tuple[int, ...], weight: int) -> int:
    """An integer in [0, small], or about one time in ``weight + 1`` one of ``edges``."""
    return rng.choice(edges) if rng.randrange(weight + 1) == 0 else rng.randint(0, small)


def _sample(rng: random.Random, pool: tuple[Any, ...], least: int, most: int) -> list[Any]:
    """Between ``least`` and ``most`` distinct elements of ``pool``, in random order."""
    return rng.sample(pool, rng.randint(least, min(most, len(pool))))


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
ALLOCATE_BROKERS: Final = ("broker-a", "room1@b", "room2@c")
CLIENT_IDS: Final = tuple(f"10.0.0.{i + 1}@c{i}" for i in range(6))
ODD_CLIENT_IDS: Final = ("10.0.0.9@x", "", None)  # a currentCID not in cidAll, empty, missing
ROOMS: Final = ("room1", "room2", "room3")
NEARBY_INNERS: Final = ("AVG", "AVG_BY_CIRCLE", "CONFIG")
# Offsets are Java longs: small ones collide; the edges of int and long catch narrowing and overflow,
# negatives are legal longs, and 2^53 + 1 is the first integer a JSON double cannot hold. One offset
# in four is an edge: enough to meet each of the eight in a sequence, few enough that most updates
# collide with the small ones (where increaseOnly and the table's order matter).
OFFSET_EDGES: Final = (-1, -2, -(2**63), 2**31 - 1, 2**31, 2**53, 2**53 + 1, 2**63 - 1)
SMALL_OFFSET: Final = 40
# A queue offset in a pulled batch is a long too; the edges are rarer there (one in eight), since a
# ProcessQueue does its interesting work on offsets that collide.
QUEUE_OFFSET_EDGES: Final = (-1, -(2**63), 2**53 + 1, 2**63 - 1)
SMALL_QUEUE_OFFSET: Final = 30
# MAX_OFFSET property: its edge makes MAX_OFFSET - queueOffset overflow a long (Java's edge).
MAX_OFFSET_EDGES: Final = (2**53 + 1, 2**63 - 1)
BODY_SIZES: Final = range(5)
# Broker answers: an offset, an error code (22 QUERY_NOT_FOUND, 1 SYSTEM_ERROR), SUCCESS without a
# header (Java's edge), or a timeout.
RESPONSE_CODES: Final = (p.QUERY_NOT_FOUND, p.SYSTEM_ERROR, p.SUCCESS)
# batchSize is an int: 0 and negatives are legal Java; a negative one throws (Java's edge).
BATCH_SIZES: Final = range(5)
BATCH_SIZE_EDGES: Final = (-1, -(2**31))
# consumeTimestamp in ms, whole seconds: 4.9.8 holds it as a yyyyMMddHHmmss string (R10.2), so a
# real client floors any millisecond part. 1,000 s after the epoch keeps clear of any zone's DST change.
TIMESTAMP_SECONDS: Final = 1000
VIRTUAL_NODE_COUNTS: Final = range(-1, 13)
STORE_OPS: Final = tuple(
    ["store.update"] * 3
    + ["store.read"] * 2
    + ["store.persistAll"] * 2
    + ["store.persist", "store.remove", "store.clone", "store.load"]
)
CLONE_TOPICS: Final = (None, "", " ", "T", "U", "%RETRY%G")
COM_QUERY_MIN: Final = 3
COM_QUERY_MAX: Final = 5
COM_QUEUE_IDS: Final = range(3)
COM_OPS: Final = ("com.commit",) * 3 + ("com.query",) * 3 + ("com.persist", "com.restart")


def draw_offset(rng: random.Random) -> int:
    return _mostly(rng, SMALL_OFFSET, OFFSET_EDGES, 3)


def draw_answers(rng: random.Random) -> list[dict[str, Any]]:
    """What the scripted broker answers, in order, to the requests one operation sends (0 to 3)."""
    out: list[dict[str, Any]] = []
    for _ in range(rng.randint(0, 3)):
        if rng.randrange(2):
            out.append({"offset": draw_offset(rng)})
        else:
            out.append(rng.choice([{"responseCode": c} for c in RESPONSE_CODES] + [{"timeout": True}]))
    return out


def draw_messages(rng: random.Random) -> list[dict[str, Any]]:
    """A pull batch of 1 to 4 messages; about half carry the MAX_OFFSET property."""
    batch = []
    for _ in range(rng.randint(1, 4)):
        message = {
            "queueOffset": _mostly(rng, SMALL_QUEUE_OFFSET, QUEUE_OFFSET_EDGES, 7),
            "bodySize": rng.choice(BODY_SIZES),
        }
        if rng.randrange(2):
            message["maxOffset"] = _mostly(rng, SMALL_OFFSET, MAX_OFFSET_EDGES, 7)
        batch.append(message)
    return batch


def _optional_queue_list(rng: random.Random) -> list[dict[str, Any]] | None:
    if _one_in(rng, 4):
        return None
    return [rng.choice(ALLOCATE_MQS) for _ in range(rng.randint(0, 4))]


def _nearby_args(rng: random.Random, depth: int) -> dict[str, Any]:
    inner: Any = rng.choice(NEARBY_INNERS + (("MACHINE_ROOM_NEARBY",) if depth == 0 else ()))
    args: dict[str, Any] = {
        "brokerRooms": {b: rng.choice(ROOMS) for b in _sample(rng, ALLOCATE_BROKERS, 0, 3)},
        "consumerRooms": {c: rng.choice(ROOMS) for c in _sample(rng, CLIENT_IDS, 0, 6)},
    }
    if inner == "MACHINE_ROOM_NEARBY":  # nested: the inner one has arguments of its own
        inner = {"strategy": "MACHINE_ROOM_NEARBY", **_nearby_args(rng, 1)}
    elif inner == "CONFIG":
        args["messageQueueList"] = _optional_queue_list(rng)
    args["inner"] = inner
    return args


def draw_allocation(rng: random.Random, strategies: tuple[str, ...]) -> dict[str, Any]:
    """The arguments of one allocation, for a SUT with ``strategies``."""
    strategy = rng.choice(strategies)
    # One call in five tries the argument checks (empty lists, a missing or unknown currentCID);
    # the others allocate for real.
    degenerate = _one_in(rng, 5)
    least = 0 if degenerate else 1
    mq_all = _sample(rng, ALLOCATE_MQS, least, 10)
    cid_all: list[str | None] = list(_sample(rng, CLIENT_IDS, least, 6))
    if rng.randrange(2):  # RebalanceImpl sorts both lists; the strategy itself must not care
        mq_all.sort(key=lambda m: (m["topic"], m["brokerName"], m["queueId"]))
        cid_all.sort(key=str)
    current = rng.choice(ODD_CLIENT_IDS) if degenerate or not cid_all else rng.choice(cid_all)
    if strategy == "CONSISTENT_HASH" and _one_in(rng, 6):  # a null clientId on the ring (Java's edge)
        cid_all.insert(rng.randint(0, len(cid_all)), None)
    args: dict[str, Any] = {
        "strategy": strategy,
        "consumerGroup": "G",
        "currentCID": current,
        "mqAll": mq_all,
        "cidAll": cid_all,
    }
    if strategy == "CONSISTENT_HASH":
        args["virtualNodeCnt"] = rng.choice(VIRTUAL_NODE_COUNTS)
    elif strategy == "CONFIG":
        args["messageQueueList"] = _optional_queue_list(rng)
    elif strategy == "MACHINE_ROOM":
        args["consumeridcs"] = None if _one_in(rng, 4) else _sample(rng, ROOMS, 0, 3)
    elif strategy == "MACHINE_ROOM_NEARBY":
        args |= _nearby_args(rng, 0)
    return args


def _is_offset(value: Any) -> bool:
    return _is_int(value) and (0 <= value <= SMALL_OFFSET or value in OFFSET_EDGES)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_message(m: Any, removal: bool) -> bool:
    if not isinstance(m, dict) or not _is_int(m.get("queueOffset")) or m.get("bodySize") not in BODY_SIZES:
        return False
    offset = m["queueOffset"]
    if not (0 <= offset <= SMALL_QUEUE_OFFSET or offset in QUEUE_OFFSET_EDGES):
        return False
    if removal:
        return set(m) == {"queueOffset", "bodySize"}
    top = m.get("maxOffset", 0)
    return (
        set(m) <= {"queueOffset", "bodySize", "maxOffset"}
        and _is_int(top)
        and (0 <= top <= SMALL_OFFSET or top in MAX_OFFSET_EDGES)
    )


def _is_answer(a: Any) -> bool:
    if not isinstance(a, dict):
        return False
    return (
        (set(a) == {"offset"} and _is_offset(a["offset"]))
        or (set(a) == {"responseCode"} and a["responseCode"] in RESPONSE_CODES and _is_int(a["responseCode"]))
        or a == {"timeout": True}
    )


def drawable(request: dict[str, Any]) -> bool:
    """True if the generator could have drawn the values of ``request`` that the shrinker changes:
    its numbers, the lengths of its lists and what ties them together (an allocation's currentCID and
    lists, a query's min and max offset). Handle names, queues and flags are not checked: the
    shrinker never changes them."""
    op, args = request["op"], request["args"]
    if op == "allocate":
        return _drawable_allocation(args)
    if op == "pq.put":
        msgs = args.get("msgs")
        return isinstance(msgs, list) and len(msgs) <= 4 and all(_is_message(m, False) for m in msgs)
    if op in ("pq.remove", "pq.consumeAgain"):
        msgs = args.get("msgs")
        return isinstance(msgs, list) and len(msgs) <= 4 and all(_is_message(m, True) for m in msgs)
    if op == "pq.take":
        return args.get("batchSize") in BATCH_SIZES or args.get("batchSize") in BATCH_SIZE_EDGES
    if op == "store.update":
        return _is_offset(args.get("offset"))
    if op in ("store.read", "pullFromWhere"):
        found = args.get("answers")
        if not isinstance(found, list) or len(found) > 3 or not all(_is_answer(a) for a in found):
            return False
        if op == "pullFromWhere":
            ts = args.get("consumeTimestamp")
            return _is_int(ts) and ts % 1000 == 0 and 0 <= ts <= TIMESTAMP_SECONDS * 1000
        return True
    if op == "store.persistAll":
        return isinstance(args.get("mqs"), list) and len(args["mqs"]) <= 4
    if op == "time.advance":
        return _is_int(args.get("ms")) and 0 <= args["ms"] <= CONSUMER_MAX_ADVANCE
    if op in ("com.commit", "com.query"):
        if args.get("queueId") not in COM_QUEUE_IDS or not _is_int(args.get("queueId")):
            return False
        if op == "com.commit":
            return _is_offset(args.get("offset"))
        low, high = args.get("minOffset"), args.get("maxOffset")
        return _is_int(low) and _is_int(high) and 0 <= low <= COM_QUERY_MIN and low <= high <= COM_QUERY_MAX
    return True


def _drawable_allocation(args: dict[str, Any]) -> bool:
    mq_all, cid_all, current = args.get("mqAll"), args.get("cidAll"), args.get("currentCID")
    if not isinstance(mq_all, list) or not isinstance(cid_all, list) or len(mq_all) > 10:
        return False
    real = [c for c in cid_all if c is not None]
    if len(real) > 6 or len(real) + 1 < len(cid_all):
        return False
    if len(real) < len(cid_all) and args.get("strategy") != "CONSISTENT_HASH":
        return False  # a null clientId is drawn for the hash ring only
    if current not in ODD_CLIENT_IDS and not (mq_all and real and current in real):
        return False  # a real currentCID is one of cidAll, and lists are empty only with an odd one
    if "virtualNodeCnt" in args and args["virtualNodeCnt"] not in VIRTUAL_NODE_COUNTS:
        return False
    queues = args.get("messageQueueList")
    return queues is None or (isinstance(queues, list) and len(queues) <= 4)


CONSUMER_MAX_ADVANCE: Final = 60_000  # ms: the longest time.advance the consumer generator draws


class SequenceEnded(Exception):
    """The sequence cannot go on: it found something (recorded) or the SUT does not support a request."""


class Sequence:
    """One generated request sequence over the components ``session``'s SUT declared, drawn from
    ``rng``, sent as it is drawn. :meth:`run` does at most ``steps`` operations; it ends early at
    the first finding (recorded with :meth:`Session.record`) or at a request the SUT does not support.

    Each step picks a component family, then an operation of that family and its arguments, so every
    declared component gets a fair share of each sequence however many operations it has (an
    operation picked among all of them lets allocation, which needs no object, crowd out the
    stateful ones). The reference's last state of an object steers the choice towards operations
    that do something.
    """

    def __init__(self, session: Session, rng: random.Random) -> None:
        self.session, self.rng = session, rng
        has = self.has = set(session.components)
        self.store_kinds = tuple(
            k for k, c in (("remote", p.REMOTE_OFFSET_STORE), ("local", p.LOCAL_OFFSET_STORE)) if c in has
        )
        self.pqs: list[str] = []
        self.pq_offsets: dict[str, set[int]] = {}
        self.pq_cached: dict[str, int] = {}  # messages in the tree, by the reference's last state
        self.pq_in_flight: dict[str, int] = {}  # orderly messages taken, likewise
        self.stores: list[str] = []
        self.local_stores: list[str] = []
        self.coms: list[str] = []
        self.families = families(session)
        self.consumer_scenario: ConsumerScenario | None = None

    def run(self, steps: int) -> None:
        """Swarm testing: each sequence works on a random non-empty subset of the families, so it
        goes deeper into the few it has instead of touching every one briefly."""
        rng = self.rng
        chosen = [f for f in self.families if rng.randrange(2)] or [rng.choice(self.families)]
        try:
            # Most sequences go the whole length (depth finds the bugs of state); one in four is
            # shorter, down to one operation, which keeps the short scripts in reach too.
            for _ in range(rng.randint(1, steps) if _one_in(rng, 4) else steps):
                getattr(self, rng.choice(chosen))()
        except (Divergence, SutBroke) as finding:
            self.session.record(finding)
        except UnsupportedBySut:
            pass

    def call(self, op: str, args: dict[str, Any]) -> dict[str, Any] | None:
        """The reference's reply, or None when the SUT does not support ``op`` (not sent)."""
        if op in self.session.unsupported_ops:
            return None
        return self.session.exchange(op, args)

    def pick_op(self, ops: tuple[str, ...]) -> str:
        supported = tuple(op for op in ops if op not in self.session.unsupported_ops)
        return self.rng.choice(supported or ops)

    # whole push consumers (protocol 2): consumers.ConsumerScenario draws each step
    def push_consumer(self) -> None:
        if self.consumer_scenario is None:
            orderly = p.PUSH_CONSUMER_ORDERLY in self.has

            def reached(name: str) -> None:
                self.session.reached[name] += 1

            self.consumer_scenario = ConsumerScenario(self.rng, self.call, reached, orderly)
        self.consumer_scenario.step()

    # allocation (R11): stateless
    def allocate(self) -> None:
        self.call("allocate", draw_allocation(self.rng, self.session.strategies))

    # ProcessQueue (R6); after each operation its whole state is compared
    def process_queue(self) -> None:
        rng = self.rng
        if not self.pqs or (len(self.pqs) < 3 and _one_in(rng, 8)):
            name = f"pq{len(self.pqs)}"
            self.call("pq.new", {"pq": name})
            self.pqs.append(name)
            self.pq_offsets[name] = set()
            return
        pq = rng.choice(self.pqs)
        # Take when messages are cached, commit when some are in flight (on an empty in-flight map
        # commit throws, which is worth trying now and then, not most of the time).
        cached, in_flight = self.pq_cached.get(pq, 0), self.pq_in_flight.get(pq, 0)
        ops: tuple[str, ...] = ("pq.put", "pq.put", "pq.remove", "pq.remove")
        if p.PROCESS_QUEUE_ORDERLY in self.has:
            ops += ("pq.take",) * (3 if cached else 1) + ("pq.rollback", "pq.consumeAgain", "pq.clear")
            ops += ("pq.commit",) * (4 if in_flight else 1)
        op = self.pick_op(ops)
        args: dict[str, Any] = {"pq": pq}
        if op == "pq.put":  # an empty batch is a legal edge case, but one in eight is plenty
            args["msgs"] = [] if _one_in(rng, 8) else draw_messages(rng)
            self.pq_offsets[pq].update(m["queueOffset"] for m in args["msgs"])
        elif op in ("pq.remove", "pq.consumeAgain"):
            known = sorted(self.pq_offsets[pq])
            msgs = []
            for _ in range(rng.randint(0, 4)):  # mostly offsets the queue holds
                offset = rng.choice(known) if known and not _one_in(rng, 5) else rng.randint(0, SMALL_QUEUE_OFFSET)
                msgs.append({"queueOffset": offset, "bodySize": rng.choice(BODY_SIZES)})
            args["msgs"] = msgs
        elif op == "pq.take":
            args["batchSize"] = _mostly(rng, 4, BATCH_SIZE_EDGES, 5)
        self.call(op, args)
        observed = self.call("pq.state", {"pq": pq})
        if observed is not None and observed["ok"]:
            state = observed["result"]
            self.pq_cached[pq], self.pq_in_flight[pq] = len(state["cached"]), len(state["inFlight"])

    # offset stores (R1, R2); after each operation the whole memory table is compared
    def offset_store(self) -> None:
        rng = self.rng
        if not self.stores or (len(self.stores) < 3 and _one_in(rng, 8)):
            name = f"s{len(self.stores)}"
            args: dict[str, Any] = {"store": name, "kind": rng.choice(self.store_kinds), "group": "G"}
            if args["kind"] == "local":  # two local stores of one client share a file: a restart
                args["clientId"] = rng.choice(CLIENT_IDS[:2])
            self.call("store.new", args)
            self.stores.append(name)
            if args["kind"] == "local":
                self.local_stores.append(name)
            return
        store = rng.choice(self.stores)
        op = self.pick_op(STORE_OPS + (("store.damage",) * 2 if store in self.local_stores else ()))
        args = {"store": store}
        if op == "store.update":
            args |= {"mq": rng.choice(STORE_MQS), "offset": draw_offset(rng), "increaseOnly": bool(rng.randrange(2))}
        elif op == "store.read":
            args |= {"mq": rng.choice(STORE_MQS), "type": rng.choice(p.READ_TYPES)}
            args["answers"] = draw_answers(rng)
        elif op == "store.persistAll":
            args["mqs"] = _sample(rng, STORE_MQS, 0, 4)
        elif op in ("store.persist", "store.remove"):
            args["mq"] = rng.choice(STORE_MQS)
        elif op == "store.clone":
            args["topic"] = rng.choice(CLONE_TOPICS)
        elif op == "store.damage":  # between writes: the next load or restart reads what is left
            args["file"] = rng.choice(p.DAMAGED_FILES)
            args["damage"] = rng.choice(p.DAMAGES)
        self.call(op, args)
        if op != "store.clone":
            self.call("store.clone", {"store": store, "topic": None})

    # computePullFromWhere (R10.1), reading through one of the stores
    def pull_from_where(self) -> None:
        rng = self.rng
        if not self.stores:
            return self.offset_store()
        args = {
            "store": rng.choice(self.stores),
            "mq": rng.choice(STORE_MQS),
            "consumeFromWhere": rng.choice(p.CONSUME_FROM_WHERE),
            "consumeTimestamp": rng.randint(0, TIMESTAMP_SECONDS) * 1000,
            "answers": draw_answers(rng),
        }
        self.call("pullFromWhere", args)
        return None

    # the broker's ConsumerOffsetManager (R3)
    def offset_manager(self) -> None:
        rng = self.rng
        if not self.coms or (len(self.coms) < 2 and _one_in(rng, 8)):
            name = f"com{len(self.coms)}"
            self.call("com.new", {"com": name})
            self.coms.append(name)
            return
        com = rng.choice(self.coms)
        op = self.pick_op(COM_OPS)
        args: dict[str, Any] = {"com": com}
        if op in ("com.commit", "com.query"):
            args |= {
                "group": rng.choice(("G", "H")),
                "topic": rng.choice(("T", "%RETRY%G")),
                "queueId": rng.choice(COM_QUEUE_IDS),
            }
        if op == "com.commit":
            args |= {"clientHost": "10.0.0.1", "offset": draw_offset(rng)}
        elif op == "com.query":
            low, high = rng.randint(0, COM_QUERY_MIN), rng.randint(0, COM_QUERY_MAX)
            args |= {"minOffset": low, "maxOffset": max(low, high), "offset0InMemory": bool(rng.randrange(2))}
            zero_if_not_found = rng.choice((None, None, True, False))  # only 5.0.0 clients send it
            if zero_if_not_found is not None:
                args["setZeroIfNotFound"] = zero_if_not_found
        self.call(op, args)
        if op != "com.query":  # after each change the whole table is compared
            self.call("com.table", {"com": com})


def families(session: Session) -> list[str]:
    """The families (methods of :class:`Sequence`) generation can still draw from: the declared
    components, less those whose creating operation the SUT answered as unsupported."""
    has, unsupported_ops = set(session.components), session.unsupported_ops
    unsupported = {CREATORS[op] for op in unsupported_ops if op in CREATORS}
    out = []
    if p.ALLOCATE in has and "allocate" not in unsupported_ops:
        out.append("allocate")
    if p.PROCESS_QUEUE in has and "process_queue" not in unsupported:
        out.append("process_queue")
    if has & {p.REMOTE_OFFSET_STORE, p.LOCAL_OFFSET_STORE} and "offset_store" not in unsupported:
        out.append("offset_store")
        if p.PULL_FROM_WHERE in has and "pullFromWhere" not in unsupported_ops:
            out.append("pull_from_where")
    if p.CONSUMER_OFFSET_MANAGER in has and "offset_manager" not in unsupported:
        out.append("offset_manager")
    if p.PUSH_CONSUMER in has and "push_consumer" not in unsupported:
        out.append("push_consumer")
    return out


@dataclass
class ConformResult:
    """What a conform run found. Flat and aggregatable, like check-trace's and check-history's.
    ``finding`` is the first new finding (None if none); ``findings`` all of them (one per fingerprint),
    each with how often the run found it in ``counts``, its shrink figures in ``shrinks`` and its
    script in ``script_paths``."""

    sut: str
    implementation: str
    version: str
    components: tuple[str, ...]
    examples: int = 0
    requests: int = 0
    seconds: float = 0.0
    findings: list[Finding] = field(default_factory=list)
    shrinks: list[ShrinkStats] = field(default_factory=list)
    script_paths: list[str] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)  # times each finding's fingerprint was found
    known: dict[str, int] = field(default_factory=dict)  # fingerprint of an accepted divergence -> times seen
    known_reasons: dict[str, tuple[str, ...]] = field(default_factory=dict)  # the entries that accepted it
    repeats: int = 0  # findings whose fingerprint was found before in the run
    unsupported_ops: dict[str, str] = field(default_factory=dict)
    unsupported_fields: dict[str, list[str]] = field(default_factory=dict)
    outcomes: dict[str, int] = field(default_factory=dict)  # "op" or "op:ExceptionType" -> requests
    reached: dict[str, int] = field(default_factory=dict)  # consumer-level state (consumers.REACHED) -> times

    @property
    def finding(self) -> Finding | None:
        return self.findings[0] if self.findings else None

    @property
    def shrink(self) -> ShrinkStats:
        return self.shrinks[0] if self.shrinks else ShrinkStats()

    @property
    def script_path(self) -> str | None:
        return self.script_paths[0] if self.script_paths else None

    @property
    def valid(self) -> bool:
        return not self.findings

    def _counts(self) -> list[int]:
        return self.counts + [1] * (len(self.findings) - len(self.counts))

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
            "findings": [
                {
                    "signature": list(f.signature),
                    "fingerprint": f.fingerprint,
                    "paths": [d.to_json() for d in f.new_differences] if isinstance(f, Divergence) else [],
                    "count": count,
                    "divergence": f.to_json() if isinstance(f, Divergence) else None,
                    "sutFailure": {"step": len(f.script), **f.failure.to_json()} if isinstance(f, SutBroke) else None,
                    "scriptSteps": len(f.script),
                    "shrunkFrom": stats.original or None,
                    "script": path,
                }
                for f, stats, path, count in zip(
                    self.findings, self.shrinks, self.script_paths, self._counts(), strict=False
                )
            ],
            "known": [
                {
                    "op": fingerprint.split(" ", 1)[0],
                    "fingerprint": fingerprint,
                    "count": n,
                    "reasons": list(self.known_reasons.get(fingerprint, ())),
                }
                for fingerprint, n in sorted(self.known.items())
            ],
            "repeats": self.repeats,
            "unsupported": {"operations": self.unsupported_ops, "fields": self.unsupported_fields},
            "outcomes": self.outcomes,
            "reached": self.reached,
        }


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
    known: KnownDifferences | None = None,
    max_findings: int = 1,
    on_sequence: Callable[[list[dict[str, Any]]], None] | None = None,
) -> ConformResult:
    """Run at most ``examples`` generated request sequences of up to ``steps`` operations each
    against the SUT and the reference. Stop after ``max_findings`` findings of distinct fingerprints
    that ``known`` does not accept (or at the first SUT failure); shrink each from its shortest
    occurrence (``shrink_seconds`` each, keeping the fingerprint) and save it as a replayable script.
    ``on_sequence`` is given each generated sequence's requests as the next one starts (the
    benchmark replays them)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    session = Session(command, timeout, out_dir, components)
    session.known, session.max_findings, session.on_sequence = known, max_findings, on_sequence
    result = ConformResult(command, session.implementation, session.version, session.components)
    counted = 0
    try:
        while counted < examples and not session.stop:
            available = families(session)
            if not available:  # the SUT supports nothing that is left to generate
                break
            rng = random.Random(f"rmqspec conform {seed} {counted}")
            counted += 1
            try:
                session.begin()
            except SutBroke as broke:
                session.record(broke)
                break
            Sequence(session, rng).run(steps)
            if progress is not None and counted % max(1, examples // 10) == 0:
                progress(f"conform: {counted}/{examples} examples, {session.requests:,} requests")
        if on_sequence is not None and session.script:
            on_sequence(session.script)
        session.on_sequence = None  # shrinking's replays are not generated sequences
        result.examples, result.requests = counted, session.requests
        result.outcomes = _outcomes(session)
        if p.PUSH_CONSUMER in session.components:
            result.reached = {name: session.reached.get(name, 0) for name in REACHED}
        result.known, result.repeats = dict(session.known_seen), session.repeats
        result.known_reasons = dict(session.known_reasons)
        found = list(session.findings.values())
        result.counts = [session.counts[key] for key in session.findings]
        if found and progress is not None:
            progress(f"conform: {len(found)} finding(s) after {result.examples} examples; shrinking")
        for number, finding in enumerate(found, start=1):
            shrunk, stats = shrink(session, finding, shrink_seconds)
            path = out_dir / ("divergence.jsonl" if number == 1 else f"divergence-{number}.jsonl")
            write_script(path, shrunk.script, session, result)
            result.findings.append(shrunk)
            result.shrinks.append(stats)
            result.script_paths.append(str(path))
        result.unsupported_ops = dict(session.unsupported_ops)
        result.unsupported_fields = {op: sorted(f) for op, f in sorted(session.ignored_fields.items())}
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


def _headed_lines(
    path: str, fmt: str, versions: tuple[int, ...], error: type[ValueError]
) -> tuple[int, list[tuple[int, Any]]]:
    """The version of a JSON Lines file whose header is ``{"format": fmt, "version": v, ...}`` with
    ``v`` one of ``versions``, and (line number, value) of every line after the header; ``error``
    names the file and line that cannot be read."""
    try:
        lines = list(iter_lines(path, path))
    except InputError as e:
        raise error(str(e)) from None
    if not lines:
        raise error(f'{path}: empty; expected a header line {{"format": "{fmt}", "version": {versions[-1]}}}')
    number, header = lines[0]
    if not isinstance(header, dict) or header.get("format") != fmt:
        raise error(f'{path}: line {number}: expected a header with "format": "{fmt}"')
    version = header.get("version")
    if isinstance(version, bool) or version not in versions:
        reads = " and ".join(str(v) for v in versions)
        raise error(f"{path}: line {number}: {fmt} version {version!r}; this rmqspec reads {reads}")
    return int(version), lines[1:]


def read_script(path: str) -> list[dict[str, Any]]:
    """The requests of a saved script; ScriptError names the line that cannot be read."""
    return [request for _, request in read_numbered_script(path)]


def read_numbered_script(path: str) -> list[tuple[int, dict[str, Any]]]:
    """(line number, request) for every request of a saved script; ScriptError names the line."""
    script = []
    for number, value in _headed_lines(path, SCRIPT_FORMAT, (SCRIPT_VERSION,), ScriptError)[1]:
        try:
            script.append((number, p.check_request(value, f"{path}: line {number}")))
        except p.ProtocolError as e:
            raise ScriptError(str(e)) from None
    return script


def replay_script(
    command: str, script_path: str, out_dir: Path, timeout: float = 10.0, known: KnownDifferences | None = None
) -> ConformResult:
    """Run a saved script against the SUT and the reference; no generation, no shrinking. A
    divergence ``known`` accepts is counted as known, not as a finding."""
    numbered = read_numbered_script(script_path)
    script = [request for _, request in numbered]
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    session = Session(command, timeout, out_dir)
    session.known = known
    result = ConformResult(command, session.implementation, session.version, session.components, examples=1)
    try:
        needed = {c for r in script if (c := p.component_of(r)) is not None} - set(session.components)
        if needed:
            raise ValueError(
                f"{script_path}: the script uses {sorted(needed)} (not declared by the SUT: {list(session.components)})"
            )
        try:
            finding = replay(session, script, fresh_process=True)
        except RejectedRequest as rejected:
            line = numbered[rejected.position][0] if rejected.position is not None else "?"
            message = rejected.error.get("message", "")
            raise ScriptError(
                f"{script_path}: line {line}: the reference rejects this request as malformed ({message}); "
                "fix the request's arguments or remove the line"
            ) from None
        if isinstance(finding, Divergence) and finding.is_known:
            result.known, result.known_reasons = {finding.fingerprint: 1}, {finding.fingerprint: finding.reasons}
        elif finding is not None:
            result.findings, result.shrinks, result.script_paths = [finding], [ShrinkStats()], [script_path]
            result.counts = [1]
        result.requests = session.requests
        result.unsupported_ops = dict(session.unsupported_ops)
        result.unsupported_fields = {op: sorted(f) for op, f in sorted(session.ignored_fields.items())}
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
    if result.reached:
        lines.append("consumer states reached (times):")
        items = [f"{k} {v:,}" for k, v in result.reached.items()]
        lines += ["  " + ", ".join(items[i : i + 4]) for i in range(0, len(items), 4)]
    if result.unsupported_ops or result.unsupported_fields:
        lines.append("not supported by the SUT, so not generated (operations) or not compared (fields):")
        lines += [f"  {op}: {reason or 'no reason given'}" for op, reason in sorted(result.unsupported_ops.items())]
        lines += [f"  {op} fields {', '.join(names)}" for op, names in result.unsupported_fields.items()]
    if result.known:
        lines.append("known differences seen (accepted by --known, not findings):")
        for fingerprint, n in sorted(result.known.items()):
            lines.append(f"  {fingerprint}: {n} time(s)")
            lines += [f"    accepted by {reason}" for reason in result.known_reasons.get(fingerprint, ())]
    if not result.findings:
        known = " or was a known difference" if result.known else ""
        lines.append(f"conforms: every reply agreed with the reference{known}")
        return "\n".join(lines)
    counts = result._counts()
    if len(result.findings) > 1 or result.repeats:
        lines.append(
            f"{len(result.findings)} distinct finding(s), by fingerprint; "
            f"{result.repeats} more of the same fingerprints:"
        )
        lines += [f"  {n:4d}x {finding.fingerprint}" for finding, n in zip(result.findings, counts, strict=False)]
    fields = _fields_of(result.findings)
    if len(fields) < sum(len(f.new_differences) for f in result.findings if isinstance(f, Divergence)):
        lines.append("the same differences with any element key (as a --known path entry names them):")
        lines += [f"  {field}: in {n} finding(s)" for field, n in fields.items()]
    for number, (finding, stats, path, count) in enumerate(
        zip(result.findings, result.shrinks, result.script_paths, counts, strict=False), start=1
    ):
        lines.append(f"--- finding {number} of {len(result.findings)}: {finding.fingerprint} (found {count} time(s))")
        lines += _describe_finding(finding, stats, path, result.sut)
    return "\n".join(lines)


def _fields_of(findings: list[Finding]) -> dict[str, int]:
    """``op path:shape`` with every element key as ``*``, for each new difference of the findings, and
    in how many findings each shows."""
    fields: Counter[str] = Counter()
    for finding in findings:
        if isinstance(finding, Divergence):
            op = finding.request["op"]
            fields.update({f"{op} {fp.any_element(d.path)}:{d.shape}" for d in finding.new_differences})
    return dict(sorted(fields.items()))


def _describe_finding(finding: Finding, stats: ShrinkStats, path: str | None, sut: str) -> list[str]:
    lines = []
    if isinstance(finding, Divergence):
        d = finding.to_json()
        op = finding.request["op"]
        lines.append(f"DIVERGENCE at request {d['step']} of the script below (rules {d['rules']}):")
        lines += [f"  {op} {difference.show()}" for difference in finding.new_differences]
        lines += [f"  {op} {x.show()} (known)" for i, x in enumerate(finding.differences) if i in finding.accepted]
        lines += [
            f"  request:   {p.encode(finding.request)}",
            f"  SUT:       {p.encode(finding.sut)}",
            f"  reference: {p.encode(finding.reference)}",
        ]
    else:
        lines.append(f"SUT FAILURE at request {len(finding.script)} of the script below: {finding.failure}")
    if stats.original:
        lines.append(
            f"shrunk from {stats.original} to {len(finding.script)} requests "
            f"({stats.replays} replays, {stats.seconds:.1f} s)"
        )
    lines.append("script:")
    lines += [f"  {i:3d} {p.encode(r)}" for i, r in enumerate(finding.script, start=1)]
    if path:
        lines.append(f"saved to {path}; replay: rmqspec conform --sut '{sut}' --replay {path}")
    return lines
