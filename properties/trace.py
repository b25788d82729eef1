"""Trace conformance: the model as an oracle for other implementations of consumer offset management.

An implementation under test writes what it did as a *trace*, a JSON Lines file in a versioned,
language-neutral format (``docs/trace.schema.json``, ``docs/oracle.md``). Line 1 is a header::

    {"format": "rmqspec-trace", "version": 1, "config": {<Config fields>}, "producer": "<free text>"}

and every following line is one event::

    {"step": n, "action": {<action_to_json form>}, "observed": {<what the implementation can say>}}

with ``step`` counting from 1 without gaps and ``observed`` optional. Observations speak the
model's vocabulary (``OBSERVATION_KEYS``); any subset may be given, and only what is given is
compared. Clients and queues are numbered as in the model: queues ``0 .. queues-1`` are the topic's,
and in CLUSTERING index ``queues`` is the single queue of ``%RETRY%<group>``.

:func:`check_trace` replays a trace through :class:`~rmqspec.spec.model.Model`. The first event whose
action the model does not enable, or after which an observation differs from the model's state, is
the *divergence*; it is reported with the step, the action, expected versus observed by field path,
and the rules behind the expectation (the R-numbers cited by the docstring of the model's transition
function, plus ``FIELD_RULES`` for the observed field). Every state and action property of
``spec/invariants.py`` is checked on every step the model took, up to and including the divergent
one. Malformed input raises :class:`TraceFormatError` naming the line and the field, never anything
else. :func:`write_trace` is the other direction: the model writes its own runs with full
observations.

Pure apart from reading and writing the trace file.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from rmqspec import jsonin
from rmqspec.properties.explore import walk
from rmqspec.properties.serialize import ACTION_TYPES, action_to_json, config_to_json
from rmqspec.spec import actions as act
from rmqspec.spec.config import Config, ConfigError
from rmqspec.spec.invariants import ACTION_PROPERTIES, INVARIANTS, check_state, check_step
from rmqspec.spec.model import ActionNotEnabled, Model
from rmqspec.spec.state import History, State

FORMAT: Final = "rmqspec-trace"
VERSION: Final = 1

HEADER_KEYS: Final = ("format", "version", "config", "producer")
EVENT_KEYS: Final = ("step", "action", "observed")
EVENT_REQUIRED: Final = ("step", "action")
OBSERVATION_KEYS: Final = ("mem", "owned", "broker_offsets", "delivered", "next_offset", "flushed")

# The rules behind each observed field: what decides its value in the model.
FIELD_RULES: Final[dict[str, list[str]]] = {
    "mem": ["R1.5", "R6.3", "R7.3"],
    "owned": ["R9.3", "R9.4", "R11"],
    "broker_offsets": ["R3.2", "R5.4"],
    "delivered": ["R7.2"],
    "next_offset": ["R5.7"],
    "flushed": ["R3.6"],
}

# Property id -> the rules it rests on.
PROPERTY_RULES: Final[dict[str, str]] = {
    **{p.id: p.rules for p in INVARIANTS},
    **{p.id: p.rules for p in ACTION_PROPERTIES},
}
PROPERTY_IDS: Final[tuple[str, ...]] = tuple(PROPERTY_RULES)

_PLAIN_KEY = re.compile(r"[A-Za-z0-9_%@-]+")
_RULE = re.compile(r"\bR\d+(?:\.\d+[a-z]?)?")
_MAX_MISMATCHES = 20  # mismatches listed for the divergent step


class TraceFormatError(ValueError):
    """The trace cannot be read: ``line`` (1-based; 0 when there is no line at all) and ``field``
    (a dotted path such as ``observed.mem.0``) say where, ``message`` what is wrong."""

    def __init__(self, line: int, field: str, message: str) -> None:
        super().__init__(f"line {line}: {field}: {message}")
        self.line = line
        self.field = field
        self.message = message


# --- rules ----------------------------------------------------------------------------------------
def _transition_name(action_name: str) -> str:
    return "_" + re.sub(r"(?<!^)(?=[A-Z])", "_", action_name).lower()


def action_rules(action_name: str) -> list[str]:
    """The R-numbers the docstring of the model's transition for ``action_name`` cites, in order."""
    fn = getattr(Model, _transition_name(action_name), None)
    return list(dict.fromkeys(_RULE.findall(getattr(fn, "__doc__", None) or "")))


_ACTION_RULES: Final[dict[str, list[str]]] = {name: action_rules(name) for name in ACTION_TYPES}


# --- results ----------------------------------------------------------------------------------------
@dataclass
class Mismatch:
    """One observed value that differs from the model's: ``field`` is a dotted path."""

    field: str
    expected: Any
    observed: Any
    rules: list[str]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class Divergence:
    """The first event the model disagrees with. ``kind`` is ``"not-enabled"`` (the model forbids
    the action where it comes) or ``"observation"`` (the action was taken, an observation differs);
    ``field``/``expected``/``observed`` repeat the first mismatch. ``rules`` joins the action's
    rules and the field's."""

    step: int
    line: int
    action: dict[str, Any]
    kind: str
    reason: str
    field: str | None
    expected: Any
    observed: Any
    action_rules: list[str]
    field_rules: list[str]
    rules: list[str]
    mismatches: list[Mismatch]

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["mismatches"] = [m.to_json() for m in self.mismatches]
        return out


@dataclass
class TraceViolation:
    step: int
    id: str
    name: str
    detail: str
    rules: str

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class TraceReport:
    """Flat, aggregatable results of one trace: ``valid`` iff no divergence and no violation."""

    producer: str
    config: dict[str, Any]
    events: int = 0  # events in the trace
    steps_checked: int = 0  # events the model replayed (up to and including a divergence)
    invariants_checked: bool = True
    divergence: Divergence | None = None
    violations: list[TraceViolation] = field(default_factory=list)  # the first ``max_violations``
    violation_count: int = 0
    invariant_counts: dict[str, int] = field(default_factory=dict)  # every property id -> violations
    observed_fields: dict[str, int] = field(default_factory=dict)  # field -> events that observed it
    comparisons: int = 0  # observed leaf values compared with the model

    @property
    def valid(self) -> bool:
        return self.divergence is None and self.violation_count == 0

    def to_json(self) -> dict[str, Any]:
        return {
            "valid": self.valid,
            "producer": self.producer,
            "events": self.events,
            "steps_checked": self.steps_checked,
            "divergence": None if self.divergence is None else self.divergence.to_json(),
            "violation_count": self.violation_count,
            "violations": [v.to_json() for v in self.violations],
            "invariant_counts": dict(self.invariant_counts),
            "invariants_checked": self.invariants_checked,
            "observed_fields": dict(self.observed_fields),
            "comparisons": self.comparisons,
            "config": self.config,
        }

    def describe(self) -> str:
        """A readable summary, a few lines long."""
        verdict = "CONFORMS" if self.valid else "DOES NOT CONFORM"
        lines = [
            f"trace by {self.producer!r}: {verdict}",
            f"events: {self.events}; replayed through the model: {self.steps_checked}; "
            f"observed values compared: {self.comparisons}",
        ]
        observed = ", ".join(f"{k} {v}" for k, v in self.observed_fields.items() if v) or "none"
        lines.append(f"observations per field (events): {observed}")
        d = self.divergence
        if d is None:
            lines.append("divergence: none")
        else:
            lines.append(f"divergence at step {d.step} (line {d.line}): {_action_text(d.action)}")
            if d.kind == "not-enabled":
                lines.append(f"  the model does not enable this action: {d.reason}")
            else:
                for m in d.mismatches:
                    lines.append(f"  {m.field}: expected {_value_text(m.expected)}, observed {_value_text(m.observed)}")
            lines.append(f"  rules: action {', '.join(d.action_rules) or '(none cited)'}")
            if d.field_rules:
                lines[-1] += f"; observed field {', '.join(d.field_rules)}"
        if not self.invariants_checked:
            lines.append("invariants: not checked (--no-invariants)")
        elif self.violation_count == 0:
            lines.append(f"invariants: {len(self.invariant_counts)} properties held at every replayed step")
        else:
            counts = ", ".join(f"{k} {v}" for k, v in self.invariant_counts.items() if v)
            lines.append(f"invariant violations: {self.violation_count} ({counts})")
            for v in self.violations:
                lines.append(f"  step {v.step}: {v.id} {v.name} [{v.rules}]: {v.detail}")
            if len(self.violations) < self.violation_count:
                lines.append(f"  ... {self.violation_count - len(self.violations)} more")
        return "\n".join(lines)


def _action_text(action: dict[str, Any]) -> str:
    args = ", ".join(f"{k}={v!r}" for k, v in action.items() if k != "action")
    return f"{action.get('action')}({args})"


def _value_text(value: Any) -> str:
    return "absent" if value is None else json.dumps(value)


# --- reading ----------------------------------------------------------------------------------------
def _numbered_lines(source: str | os.PathLike[str] | Iterable[str]) -> Iterator[tuple[int, str]]:
    """(line number, text) pairs. A path is read as UTF-8 bytes line by line, so a bad byte is
    reported with its line; any other iterable yields its strings as lines."""
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as handle:
            for n, raw in enumerate(handle, 1):
                try:
                    yield n, raw.decode("utf-8")
                except UnicodeDecodeError as err:
                    raise TraceFormatError(n, "line", f"not UTF-8: {err.reason} at byte {err.start}") from None
    else:
        for n, text in enumerate(source, 1):
            if not isinstance(text, str):
                raise TraceFormatError(n, "line", f"expected text, got {type(text).__name__}")
            yield n, text


def _parse_json(n: int, text: str) -> dict[str, Any]:
    if not text.strip():
        raise TraceFormatError(n, "line", "blank line; every line is one JSON object")
    try:
        value = jsonin.parse(text, "trace", line=n)
    except jsonin.InputError as err:  # not JSON, nested too deeply, an integer too long for int()
        column = f" (column {err.column})" if err.column is not None else ""
        raise TraceFormatError(n, "line", f"{err.what}{column}") from None
    if not isinstance(value, dict):
        raise TraceFormatError(n, "line", f"expected a JSON object, got {_type_name(value)}")
    return value


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    names: dict[type, str] = {str: "string", list: "array", dict: "object"}
    return names.get(type(value), type(value).__name__)


def _show(value: Any) -> str:
    """A JSON value for an error message, cut short."""
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _key(key: str) -> str:
    """A key as it appears in a field path: quoted as JSON unless it is a plain name."""
    return key if _PLAIN_KEY.fullmatch(key) else json.dumps(key)


def _is_int(value: Any) -> bool:
    return type(value) is int


@dataclass
class TraceHeader:
    config: Config
    producer: str


def read_header(n: int, value: dict[str, Any]) -> TraceHeader:
    """Validate the header object of line ``n``."""
    if "format" not in value and "step" in value:
        raise TraceFormatError(n, "header", "missing header: line 1 must be the rmqspec-trace header, got an event")
    unknown = sorted(set(value) - set(HEADER_KEYS))
    if unknown:
        raise TraceFormatError(n, f"header.{_key(unknown[0])}", f"unknown key; accepted: {', '.join(HEADER_KEYS)}")
    for key in HEADER_KEYS:
        if key not in value:
            raise TraceFormatError(n, f"header.{key}", "missing")
    if value["format"] != FORMAT:
        raise TraceFormatError(n, "header.format", f"expected {json.dumps(FORMAT)}, got {_show(value['format'])}")
    if not _is_int(value["version"]) or value["version"] != VERSION:
        raise TraceFormatError(
            n, "header.version", f"unsupported version {_show(value['version'])}; this reads {VERSION}"
        )
    if not isinstance(value["producer"], str):
        raise TraceFormatError(n, "header.producer", f"expected a string, got {_type_name(value['producer'])}")
    config = value["config"]
    if not isinstance(config, dict):
        raise TraceFormatError(n, "header.config", f"expected an object of Config fields, got {_type_name(config)}")
    for key, v in config.items():
        kind = _CONFIG_TYPES.get(key)
        if kind is not None and not _config_type_ok(kind, v):
            raise TraceFormatError(
                n, f"header.config.{key}", f"expected {_CONFIG_TYPE_TEXT[kind]}, got {_type_name(v)}"
            )
    try:
        parsed = Config.from_mapping(config, where="header.config")
    except ConfigError as err:
        text = str(err).removeprefix("header.config: ")
        raise TraceFormatError(n, "header.config", text) from None
    return TraceHeader(parsed, value["producer"])


# JSON types of the Config fields (the dataclass's annotations are strings): checked before
# Config.from_mapping, which trusts the types it is given.
_CONFIG_TYPES: Final[dict[str, str]] = {
    f.name: {
        "int": "int",
        "bool": "bool",
        "str": "str",
        "str | None": "str-or-null",
        "tuple[str, ...] | None": "strings-or-null",
        "tuple[tuple[int, ...], ...] | None": "int-lists-or-null",
    }.get(str(f.type), "strings")
    for f in dataclasses.fields(Config)
}
_CONFIG_TYPE_TEXT: Final = {
    "int": "an integer",
    "bool": "a boolean",
    "str": "a string",
    "strings": "an array of strings",
    "strings-or-null": "an array of strings or null",
    "str-or-null": "a string or null",
    "int-lists-or-null": "an array of arrays of integers or null",
}


def _config_type_ok(kind: str, v: Any) -> bool:
    if kind == "int":
        return type(v) is int
    if kind == "bool":
        return type(v) is bool
    if kind == "str":
        return type(v) is str
    if kind in ("strings-or-null", "str-or-null", "int-lists-or-null") and v is None:
        return True
    if kind == "str-or-null":
        return type(v) is str
    if kind == "int-lists-or-null":
        return type(v) is list and all(type(x) is list and all(type(q) is int for q in x) for x in v)
    return type(v) is list and all(type(t) is str for t in v)


class _Reader:
    """Validates events against one configuration; decodes actions with precomputed tables."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.consumers = config.consumers
        self.q_count = config.queue_count
        self.fields: dict[str, tuple[type, tuple[tuple[str, type, int], ...], frozenset[str]]] = {}
        # fields that may be omitted, with their defaults (BrokerReceive.overtakes: traces written before it)
        self.optional: dict[str, dict[str, Any]] = {}
        for name, cls in ACTION_TYPES.items():
            specs = []
            self.optional[name] = {
                f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING
            }
            for f in dataclasses.fields(cls):
                kind: type = int if f.type in ("int", int) else bool if f.type in ("bool", bool) else str
                # upper bound for index fields: clients, and queues (topic queues for the
                # environment's actions, every tracked queue for a pull); 0 means unbounded
                bound = 0
                if f.name == "client":
                    bound = config.consumers
                elif f.name == "queue":
                    bound = config.queues if name in ("Produce", "CoolQueueHead") else config.queue_count
                specs.append((f.name, kind, bound))
            self.fields[name] = (cls, tuple(specs), frozenset(["action", *(s[0] for s in specs)]))
        self.client_keys = {str(i): i for i in range(config.consumers)}
        self.queue_keys = {str(q): q for q in range(config.queue_count)}
        self.queue_key_list = list(self.queue_keys)
        self.paths = {(key, ck): f"observed.{key}.{ck}" for key in OBSERVATION_KEYS for ck in self.client_keys}

    def action(self, n: int, value: Any) -> act.Action:
        if not isinstance(value, dict):
            raise TraceFormatError(n, "action", f"expected an object, got {_type_name(value)}")
        name = value.get("action")
        if not isinstance(name, str):
            raise TraceFormatError(n, "action.action", "missing or not a string: the action's name")
        entry = self.fields.get(name)
        if entry is None:
            raise TraceFormatError(
                n, "action.action", f"unknown action {_show(name)}; known: {', '.join(ACTION_TYPES)}"
            )
        cls, specs, keys = entry
        optional = self.optional[name]
        if optional and not optional.keys() <= value.keys():
            value = {**optional, **value}
        if len(value) != len(keys) or not keys.issuperset(value):
            extra = sorted(set(value) - keys)
            if extra:
                raise TraceFormatError(
                    n, f"action.{_key(extra[0])}", f"{name} has no such field; fields: {_names(specs)}"
                )
            missing = sorted(keys - set(value))
            raise TraceFormatError(n, f"action.{missing[0]}", f"missing; {name} takes fields {_names(specs)}")
        args = []
        for fname, kind, bound in specs:
            v = value[fname]
            if kind is int:
                if not _is_int(v):
                    raise TraceFormatError(n, f"action.{fname}", f"expected an integer, got {_type_name(v)}")
                if bound and not 0 <= v < bound:
                    raise TraceFormatError(n, f"action.{fname}", f"{v} is out of range 0..{bound - 1} for this config")
            elif kind is bool:  # AdminReset.by_timestamp
                if type(v) is not bool:
                    raise TraceFormatError(n, f"action.{fname}", f"expected true or false, got {_type_name(v)}")
            elif type(v) is not str:
                raise TraceFormatError(n, f"action.{fname}", f"expected a string, got {_type_name(v)}")
            elif fname == "status" and v not in _STATUSES:
                raise TraceFormatError(
                    n, "action.status", f"{_show(v)} is not a listener status; accepted: {', '.join(_STATUSES)}"
                )
            args.append(v)
        action: act.Action = cls(*args)
        return action

    def client(self, n: int, path: str, key: str) -> int:
        i = self.client_keys.get(key)
        if i is None:
            raise TraceFormatError(n, path, f"key {_show(key)} is not a client index 0..{self.consumers - 1}")
        return i

    def table(self, n: int, path: str, value: Any, what: str) -> dict[str, Any]:
        if type(value) is not dict:
            raise TraceFormatError(n, path, f"expected an object of {what}, got {_type_name(value)}")
        return value

    def offsets(
        self,
        n: int,
        path: str,
        value: Any,
        expected: tuple[int | None, ...] | None,
        rules: list[str],
        out: list[Mismatch],
    ) -> int:
        """Check a ``{"<queue>": offset-or-null}`` map against ``expected`` (indexed by queue; None:
        validate only). Returns the number of values compared."""
        if type(value) is not dict:
            raise TraceFormatError(n, path, f"expected an object of queues, got {_type_name(value)}")
        # Fast path: every queue, in order, integers or nulls, as the writer puts them.
        if list(value) == self.queue_key_list:
            values = tuple(value.values())
            if _OFFSET_TYPES.issuperset(map(type, values)):
                if expected is None:
                    return 0
                if values == expected:
                    return len(values)
        for key, v in value.items():
            q = self.queue_keys.get(key)
            if q is None:
                raise TraceFormatError(n, path, f"key {_show(key)} is not a queue index 0..{self.q_count - 1}")
            if v is not None and type(v) is not int:
                raise TraceFormatError(n, f"{path}.{key}", f"expected an integer or null, got {_type_name(v)}")
            if expected is not None and v != expected[q]:
                out.append(Mismatch(f"{path}.{key}", expected[q], v, list(rules)))
        return 0 if expected is None else len(value)


_OFFSET_TYPES: Final = frozenset({int, type(None)})
_STATUSES: Final = (
    act.CONSUME_SUCCESS,
    act.RECONSUME_LATER,
    act.ORDERLY_SUCCESS,
    act.SUSPEND_CURRENT_QUEUE_A_MOMENT,
    act.ORDERLY_COMMIT,
    act.ORDERLY_ROLLBACK,
)
_INT_TYPE: Final = frozenset({int})


def _names(specs: tuple[tuple[str, type, int], ...]) -> str:
    return "[" + ", ".join(s[0] for s in specs) + "]"


def _delivered_by_step(before: State, after: State) -> list[list[int]]:
    """(queue, offset) of every message handed to a listener by the step ``before -> after``."""
    out: list[list[int]] = []
    stop = before.history
    node: History | None = after.history
    while node is not None and node is not stop:
        e = node.event
        if e.kind == "deliver":
            out.append([e.queue, e.offset])
        node = node.previous
    out.sort()
    return out


def _check_observed(
    reader: _Reader,
    n: int,
    observed: Any,
    before: State | None,
    after: State | None,
    counts: dict[str, int],
    mismatches: list[Mismatch],
) -> int:
    """Validate ``observed`` and, when ``after`` is given, compare it with the model's state,
    appending every difference to ``mismatches``. Returns the number of values compared."""
    if type(observed) is not dict:
        raise TraceFormatError(n, "observed", f"expected an object, got {_type_name(observed)}")
    compared = 0
    q_count = reader.q_count
    for key, value in observed.items():
        rules = FIELD_RULES.get(key)
        if rules is None:
            raise TraceFormatError(
                n, f"observed.{_key(key)}", f"unknown observation; accepted: {', '.join(OBSERVATION_KEYS)}"
            )
        counts[key] += 1
        path = "observed." + key
        if key == "mem" or key == "next_offset":
            for ck, queues in reader.table(n, path, value, "clients").items():
                i = reader.client(n, path, ck)
                expected: tuple[int | None, ...] | None = None
                if after is not None:
                    cl = after.clients[i]
                    if key == "mem":
                        expected = cl.mem
                    else:
                        expected = tuple(None if pq is None else pq.next_offset for pq in cl.pqs)
                compared += reader.offsets(n, reader.paths[key, ck], queues, expected, rules, mismatches)
        elif key == "broker_offsets" or key == "flushed":
            expected = None
            if after is not None:
                expected = after.broker.offsets if key == "broker_offsets" else after.broker.flushed
            compared += reader.offsets(n, path, value, expected, rules, mismatches)
        elif key == "owned":
            for ck, queues in reader.table(n, path, value, "clients").items():
                i = reader.client(n, path, ck)
                cpath = reader.paths[key, ck]
                if after is not None and type(queues) is list:
                    expected_owned = [q for q, pq in enumerate(after.clients[i].pqs) if pq is not None]
                    if queues == expected_owned and _INT_TYPE.issuperset(map(type, queues)):
                        compared += 1  # fast path: as the model has it, so valid and equal
                        continue
                if type(queues) is not list:
                    raise TraceFormatError(n, cpath, f"expected an array of queue indexes, got {_type_name(queues)}")
                for q in queues:
                    if type(q) is not int or not 0 <= q < q_count:
                        raise TraceFormatError(n, cpath, f"{json.dumps(q)} is not a queue index 0..{q_count - 1}")
                if len(set(queues)) != len(queues):
                    raise TraceFormatError(n, cpath, "a queue is listed twice; owned is a set")
                if after is not None:
                    expected_owned = [q for q, pq in enumerate(after.clients[i].pqs) if pq is not None]
                    compared += 1
                    if queues != expected_owned and sorted(queues) != expected_owned:
                        mismatches.append(Mismatch(cpath, expected_owned, sorted(queues), list(rules)))
        else:  # delivered
            if type(value) is not list:
                raise TraceFormatError(n, path, f"expected an array of [queue, offset] pairs, got {_type_name(value)}")
            for k, pair in enumerate(value):
                if not (type(pair) is list and len(pair) == 2 and type(pair[0]) is int and type(pair[1]) is int):
                    raise TraceFormatError(
                        n, f"{path}.{k}", f"expected a [queue, offset] pair of integers, got {_show(pair)}"
                    )
                if not 0 <= pair[0] < q_count:
                    raise TraceFormatError(n, f"{path}.{k}", f"{pair[0]} is not a queue index 0..{q_count - 1}")
            if after is not None and before is not None:
                expected_delivered = _delivered_by_step(before, after)
                compared += 1
                if value != expected_delivered and sorted(value) != expected_delivered:
                    mismatches.append(Mismatch(path, expected_delivered, sorted(value), list(rules)))
    return compared


def _event(reader: _Reader, n: int, value: dict[str, Any], expected_step: int) -> tuple[act.Action, Any]:
    if "format" in value and "step" not in value:
        raise TraceFormatError(n, "line", "a second header; only line 1 is a header")
    for key in value:
        if key not in EVENT_KEYS:
            raise TraceFormatError(n, _key(key), f"unknown event key; accepted: {', '.join(EVENT_KEYS)}")
    for key in EVENT_REQUIRED:
        if key not in value:
            raise TraceFormatError(n, key, "missing")
    step = value["step"]
    if not _is_int(step):
        raise TraceFormatError(n, "step", f"expected an integer, got {_type_name(step)}")
    if step != expected_step:
        raise TraceFormatError(n, "step", f"expected {expected_step} (steps count from 1 without gaps), got {step}")
    return reader.action(n, value["action"]), value.get("observed")


def check_trace(
    source: str | os.PathLike[str] | Iterable[str],
    *,
    invariants: bool = True,
    max_violations: int = 50,
) -> TraceReport:
    """Replay a trace through the model and report the first divergence and every violation.

    ``source`` is a path (``str`` or ``PathLike``), or an iterable of lines. With
    ``invariants=False`` only conformance is checked (faster). Raises :class:`TraceFormatError`
    for malformed input (also when the malformation comes after a divergence: the whole trace is
    read) and ``OSError`` if a path cannot be opened.
    """
    lines = _numbered_lines(source)
    first = next(lines, None)
    if first is None:
        raise TraceFormatError(1, "header", "empty trace: line 1 must be the rmqspec-trace header")
    header = read_header(first[0], _parse_json(*first))
    config = header.config
    model = Model(config)
    reader = _Reader(config)
    report = TraceReport(producer=header.producer, config=config_to_json(config), invariants_checked=invariants)
    report.invariant_counts = dict.fromkeys(PROPERTY_IDS, 0)
    counts = dict.fromkeys(OBSERVATION_KEYS, 0)
    state: State | None = model.initial()
    step = 0
    for n, text in lines:
        value = _parse_json(n, text)
        step += 1
        action, observed = _event(reader, n, value, step)
        if state is None:  # past the divergence: keep reading, to report malformed input
            if observed is not None:
                _check_observed(reader, n, observed, None, None, counts, [])
            continue
        report.steps_checked = step
        try:
            after = model.step(state, action)
        except ActionNotEnabled as err:
            if observed is not None:
                _check_observed(reader, n, observed, None, None, counts, [])
            report.divergence = _divergence(step, n, action, "not-enabled", err.reason, [])
            state = None
            continue
        mismatches: list[Mismatch] = []
        if observed is not None:
            report.comparisons += _check_observed(reader, n, observed, state, after, counts, mismatches)
        if invariants:
            for v in check_step(model, state, action, after) + check_state(model, after):
                report.violation_count += 1
                report.invariant_counts[v.id] += 1
                if len(report.violations) < max_violations:
                    report.violations.append(TraceViolation(step, v.id, v.name, v.detail, PROPERTY_RULES[v.id]))
        if mismatches:
            reason = f"{len(mismatches)} observed value(s) differ from the model's state after the step"
            report.divergence = _divergence(step, n, action, "observation", reason, mismatches)
            state = None
        else:
            state = after
    report.events = step
    report.observed_fields = counts
    return report


def _divergence(
    step: int, n: int, action: act.Action, kind: str, reason: str, mismatches: list[Mismatch]
) -> Divergence:
    a_rules = list(_ACTION_RULES.get(type(action).__name__, []))
    f_rules: list[str] = []
    for m in mismatches:
        f_rules += [r for r in m.rules if r not in f_rules]
    first = mismatches[0] if mismatches else None
    return Divergence(
        step=step,
        line=n,
        action=action_to_json(action),
        kind=kind,
        reason=reason,
        field=None if first is None else first.field,
        expected=None if first is None else first.expected,
        observed=None if first is None else first.observed,
        action_rules=a_rules,
        field_rules=f_rules,
        rules=list(dict.fromkeys(a_rules + f_rules)),
        mismatches=mismatches[:_MAX_MISMATCHES],
    )


# --- writing ----------------------------------------------------------------------------------------
def observe(before: State, after: State) -> dict[str, Any]:
    """Every observation the format has, read from the model's state after a step."""
    clients = after.clients
    b = after.broker
    return {
        "mem": {str(i): {str(q): v for q, v in enumerate(cl.mem)} for i, cl in enumerate(clients)},
        "owned": {str(i): [q for q, pq in enumerate(cl.pqs) if pq is not None] for i, cl in enumerate(clients)},
        "broker_offsets": {str(q): v for q, v in enumerate(b.offsets)},
        "delivered": _delivered_by_step(before, after),
        "next_offset": {
            str(i): {str(q): pq.next_offset for q, pq in enumerate(cl.pqs) if pq is not None}
            for i, cl in enumerate(clients)
        },
        "flushed": {str(q): v for q, v in enumerate(b.flushed)},
    }


def header_json(config: Config, producer: str) -> dict[str, Any]:
    return {"format": FORMAT, "version": VERSION, "config": config_to_json(config), "producer": producer}


def trace_lines(
    config: Config,
    actions: Iterable[act.Action],
    producer: str = "rmqspec model",
    observe_with: Config | None = None,
) -> Iterator[str]:
    """The trace of ``actions`` as JSON lines (no newlines), replayed through ``Model(observe_with
    or config)`` with full observations. The header names ``config``: observing with a different
    configuration (say, one with a planted bug) writes the trace of a faulty implementation.
    Raises ``ActionNotEnabled`` if an action is not enabled where it comes."""
    model = Model(observe_with or config)
    dumps = json.JSONEncoder(separators=(",", ":")).encode
    yield dumps(header_json(config, producer))
    state = model.initial()
    for k, action in enumerate(actions, 1):
        after = model.step(state, action)
        yield dumps({"step": k, "action": action_to_json(action), "observed": observe(state, after)})
        state = after


def write_trace(
    config: Config,
    actions: Iterable[act.Action],
    path: str | os.PathLike[str],
    producer: str = "rmqspec model",
    observe_with: Config | None = None,
) -> int:
    """Write the trace of ``actions`` to ``path`` (see :func:`trace_lines`), whole or not at all
    (``outfiles.write_atomic``); returns the number of events."""
    from rmqspec.outfiles import write_atomic

    lines = [line + "\n" for line in trace_lines(config, actions, producer, observe_with)]
    write_atomic(path, lines)
    return len(lines) - 1


def explorer_actions(config: Config, seed: int, steps: int, stop_at_violation: bool = True) -> list[act.Action]:
    """The actions of the explorer's seeded walk (``explore.walk``: same seed, same choices), so a
    trace recorded here replays the walk ``rmqspec run`` took with that seed. Like the explorer it
    stops after the first step that violates a property, unless ``stop_at_violation`` is false."""
    taken: list[act.Action] = []
    walk(Model(config), seed, steps, record=taken, check=stop_at_violation)
    return taken
