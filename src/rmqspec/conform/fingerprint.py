"""Where and how two replies differ: the differences a divergence is made of, and its fingerprint.

Two normalised replies (:func:`protocol.normalise`) that differ are compared structurally, field by
field, and every place they differ is one :class:`Difference`: its *path* (where), its *shape* (how)
and the two values there. A divergence's *fingerprint* is its operation and the ``path:shape`` of
each of its differences, with the queues of its element keys as ``*``, sorted and each once::

    consumer.observe tasks[persistOffsets].due:changed
    consumer.observe tasks[pull *].due:changed
    store.clone table[*].offset:changed, table[*]:sut-only
    store.read outcome:NullPointerException/ok

Values and queues are not part of it, so the same difference with other numbers, or on another queue, is the
same finding; a report shows them (``consumer.observe tasks[pull T/1].due: 1000 vs 3000``, the SUT's value first).

**Paths.** A result field is named by its key (``offset``, ``tasks``), a field of an object inside it
by ``.key`` (``pqs[T/1].cached``), the broker requests by ``sent``. An element of a list of objects
is named in brackets by a stable key when the elements have an identity (a queue ``T/1``, a task
``pull T/1``; :func:`element_key` says which, per operation), else by its index (``[0]``). A list of
numbers or strings (``cached``, ``pulls``, ``msgs``) is one value, compared whole: its length and its
elements are values. Elements with one key on both sides are compared field by field; elements of one
key that both sides hold equally are left out, and the rest are paired in order, so an extra
``UPDATE_CONSUMER_OFFSET`` of a queue is ``sent[UPDATE_CONSUMER_OFFSET T/1]:sut-only`` however many
equal ones came before it.

**Shapes.** ``changed`` (both sides have a value of the same JSON type, different), ``sut-only`` and
``reference-only`` (one side has the field or element, the other not), ``type`` (different JSON
types: a number against a string, ``null`` against a list). When one side returned and the other
threw, the only difference is ``outcome`` with the shape ``A/B`` (the SUT's outcome first, each
``ok`` or a Java exception type); when both threw different exceptions, ``error`` with ``A/B``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Final

HOME_BROKER: Final = "broker-a"  # the one broker of the consumer world; its queues are named without it
SHAPES: Final = ("changed", "sut-only", "reference-only", "type")


class _Absent:
    """A side that has nothing at a path."""

    def __repr__(self) -> str:
        return "(absent)"


ABSENT: Final = _Absent()


@dataclass(frozen=True)
class Difference:
    """One place two replies differ. Equal (and hashed) by ``path`` and ``shape`` only: the values
    are what a report shows, not what tells findings apart."""

    path: str
    shape: str
    sut: Any = field(default=ABSENT, compare=False, hash=False)
    reference: Any = field(default=ABSENT, compare=False, hash=False)

    @property
    def part(self) -> str:
        """``path:shape``, with the path's queues (``table[T/1].offset:changed``)."""
        return f"{self.path}:{self.shape}"

    @property
    def fingerprint_part(self) -> str:
        """``path:shape`` with the path's queues as ``*`` (:func:`any_queue`), as the fingerprint lists it."""
        return f"{any_queue(self.path)}:{self.shape}"

    def show(self, limit: int = 80) -> str:
        """``path: SUT's value vs reference's value``, each shortened to ``limit`` characters."""
        return f"{self.path}: {value_text(self.sut, limit)} vs {value_text(self.reference, limit)}"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "shape": self.shape}
        if self.sut is not ABSENT:
            out["sut"] = self.sut
        if self.reference is not ABSENT:
            out["reference"] = self.reference
        return out


def value_text(value: Any, limit: int | None = None) -> str:
    """A value as a report and a ``--known`` value pattern see it: a string as it is, anything else as
    compact JSON, ``(absent)`` where the side has nothing."""
    if value is ABSENT:
        return "(absent)"
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))
    if limit is not None and len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def fingerprint(op: str, differences: tuple[Difference, ...] | list[Difference]) -> str:
    """The operation and the ``path:shape`` of each difference with its queues as ``*`` (:func:`any_queue`), sorted,
    each once."""
    return f"{op} " + ", ".join(sorted({d.fingerprint_part for d in differences}))


# A queue's name inside an element key (queue_key): ``T/1``, ``%RETRY%g/0``, ``T/0@broker-b``, ``T@g/1`` (com.table)
_QUEUE_IN_KEY = re.compile(r"[^\s\[\]]+/-?\d+(?:@[^\s\[\]]+)?")


def any_queue(path: str) -> str:
    """``path`` with every queue of its element keys as ``*`` (``tasks[pull T/1].due`` -> ``tasks[pull *].due``,
    ``table[T/1].offset`` -> ``table[*].offset``): what a fingerprint names, so that one difference is one finding
    on whichever queue a run meets it; the report shows the queue with the values."""
    found = segments(path)
    if found is None:
        return path
    return "".join(
        f"[{_QUEUE_IN_KEY.sub('*', name)}]" if kind == "element" else (name if i == 0 else f".{name}")
        for i, (kind, name) in enumerate(found)
    )


def differences(op: str, sut: dict[str, Any], reference: dict[str, Any]) -> tuple[Difference, ...]:
    """Every place two normalised replies to ``op`` differ, sorted by path (empty if they are equal)."""
    if sut["ok"] != reference["ok"]:
        a, b = _outcome(sut), _outcome(reference)
        return (Difference("outcome", f"{a}/{b}", a, b),)
    out: list[Difference] = []
    if not sut["ok"] and sut["error"] != reference["error"]:
        out.append(Difference("error", f"{sut['error']}/{reference['error']}", sut["error"], reference["error"]))
    if sut["ok"]:
        _compare(op, "", "", sut.get("result", {}), reference.get("result", {}), out)
    _compare(op, "sent", "sent", sut.get("sent", []), reference.get("sent", []), out)
    if not out and sut != reference:  # not reached: the comparison above is the equality of the two
        out.append(Difference("", "changed", sut, reference))
    return tuple(sorted(out, key=lambda d: (d.path, d.shape)))


def queue_key(mq: Any) -> str | None:
    """A message queue's name in a path: ``T/1``, or ``T/0@broker-b`` off the home broker."""
    if not isinstance(mq, dict) or not {"topic", "queueId"} <= set(mq):
        return None
    name = f"{value_text(mq['topic'])}/{value_text(mq['queueId'])}"
    broker = mq.get("brokerName", HOME_BROKER)
    return name if broker == HOME_BROKER else f"{name}@{value_text(broker)}"


def element_key(op: str, list_path: str, element: Any) -> str | None:
    """The stable key that names ``element`` of the list at ``list_path`` (its field names joined with
    ``.``, without element keys: ``tasks``, ``sent``, ``sent.mqs``) in a reply to ``op``, or None to
    name the list's elements by index. Chosen per operation from what its replies hold
    (``docs/oracle.md``, the protocol's operations):

    ===========================  ==================  ==============================================
    operation                    list                key of an element
    ===========================  ==================  ==============================================
    every operation              ``sent``            its request code and queue:
                                                     ``QUERY_CONSUMER_OFFSET T/1``; the code alone
                                                     for a request without a queue (a send-back,
                                                     a lock)
    every operation              ``sent.mqs``        the queue (a lock request's queues)
    ``consumer.observe``         ``tasks``           the task and its queue: ``pull T/1``,
                                                     ``fixOffset T/0``; the task alone for a
                                                     consumer-wide one: ``rebalance``,
                                                     ``persistOffsets``
    ``consumer.observe``         ``pqs``,            the queue of its ``mq``: ``T/1``
                                 ``offsets``,
                                 ``listening``
    ``consumer.observe``         ``owned``           the queue itself
    ``store.clone``              ``table``           the queue of its ``mq``
    ``com.table``                ``table``           ``topic@group/queueId``, as the broker keys it
    ``allocate``                 ``queues``          the queue itself
    ===========================  ==================  ==============================================

    A queue is ``topic/queueId``, with ``@brokerName`` when it is not ``broker-a`` (:func:`queue_key`).
    A pull's number, a listener call's number and a message's offset are values, never keys: they
    differ between implementations that agree. Any other list of objects (and a list one of whose
    elements lacks what its key needs, on either side) is named by index."""
    if not isinstance(element, dict):
        return None
    if list_path == "sent":
        if not isinstance(element.get("code"), str):
            return None
        queue = queue_key(element) if "queueId" in element else None
        return element["code"] if queue is None else f"{element['code']} {queue}"
    if list_path == "sent.mqs":
        return queue_key(element)
    if op == "consumer.observe":
        if list_path == "tasks":
            if not isinstance(element.get("task"), str):
                return None
            if "mq" not in element:
                return element["task"]
            queue = queue_key(element["mq"])
            return None if queue is None else f"{element['task']} {queue}"
        if list_path in ("pqs", "offsets", "listening"):
            return queue_key(element.get("mq"))
        if list_path == "owned":
            return queue_key(element)
    if op == "store.clone" and list_path == "table":
        return queue_key(element.get("mq"))
    if op == "com.table" and list_path == "table":
        if not {"topic", "group", "queueId"} <= set(element):
            return None
        return f"{value_text(element['topic'])}@{value_text(element['group'])}/{value_text(element['queueId'])}"
    if op == "allocate" and list_path == "queues":
        return queue_key(element)
    return None


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    return "object" if isinstance(value, dict) else type(value).__name__


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _compare(op: str, path: str, shape_path: str, sut: Any, reference: Any, out: list[Difference]) -> None:
    """Append the differences between ``sut`` and ``reference`` at ``path`` (``shape_path``: the same
    without element keys, as :func:`element_key` takes it)."""
    if sut == reference:
        return
    if _kind(sut) != _kind(reference):
        out.append(Difference(path, "type", sut, reference))
    elif isinstance(sut, dict):
        for key in sorted(set(sut) | set(reference), key=str):
            where, shape_where = _join(path, str(key)), _join(shape_path, str(key))
            if key not in reference:
                out.append(Difference(where, "sut-only", sut[key], ABSENT))
            elif key not in sut:
                out.append(Difference(where, "reference-only", ABSENT, reference[key]))
            else:
                _compare(op, where, shape_where, sut[key], reference[key], out)
    elif isinstance(sut, list) and any(isinstance(e, dict | list) for e in sut + reference):
        _compare_lists(op, path, shape_path, sut, reference, out)
    else:  # a number, a string, a flag, or a list of them: one value
        out.append(Difference(path, "changed", sut, reference))


def _compare_lists(
    op: str, path: str, shape_path: str, sut: list[Any], reference: list[Any], out: list[Difference]
) -> None:
    sut_keys = [element_key(op, shape_path, e) for e in sut]
    reference_keys = [element_key(op, shape_path, e) for e in reference]
    if None in sut_keys or None in reference_keys:
        for i in range(max(len(sut), len(reference))):
            _pair(op, f"{path}[{i}]", shape_path, sut[i] if i < len(sut) else ABSENT,
                  reference[i] if i < len(reference) else ABSENT, out)  # fmt: skip
        return
    groups: dict[str, tuple[list[Any], list[Any]]] = {}
    for key, element in zip(sut_keys, sut, strict=True):
        groups.setdefault(str(key), ([], []))[0].append(element)
    for key, element in zip(reference_keys, reference, strict=True):
        groups.setdefault(str(key), ([], []))[1].append(element)
    for key in sorted(groups):
        mine, theirs = groups[key]
        unmatched = list(theirs)
        rest = []
        for element in mine:  # what both sides hold equally is no difference
            if element in unmatched:
                unmatched.remove(element)
            else:
                rest.append(element)
        for i in range(max(len(rest), len(unmatched))):
            a = rest[i] if i < len(rest) else ABSENT
            b = unmatched[i] if i < len(unmatched) else ABSENT
            _pair(op, f"{path}[{key}]", shape_path, a, b, out)


def _pair(op: str, path: str, shape_path: str, sut: Any, reference: Any, out: list[Difference]) -> None:
    if reference is ABSENT:
        out.append(Difference(path, "sut-only", sut, ABSENT))
    elif sut is ABSENT:
        out.append(Difference(path, "reference-only", ABSENT, reference))
    else:
        _compare(op, path, shape_path, sut, reference, out)


def _outcome(normalised: dict[str, Any]) -> str:
    return "ok" if normalised["ok"] else str(normalised["error"])


def any_element(path: str) -> str:
    """``path`` with every element key as ``*`` (``table[T/1].offset`` -> ``table[*].offset``): the
    same field of every element, as a ``--known`` path pattern names it."""
    found = segments(path)
    if found is None:
        return path
    return "".join(
        "[*]" if kind == "element" else (name if i == 0 else f".{name}") for i, (kind, name) in enumerate(found)
    )


# --- path patterns (--known) -----------------------------------------------------------------------
_SEGMENT = re.compile(r"\[([^\[\]]*)\]|\.?([^.\[\]]+)")


def segments(path: str) -> list[tuple[str, str]] | None:
    """A path as its segments, ``("key", name)`` or ``("element", key)``; None if it is not a path."""
    out: list[tuple[str, str]] = []
    position = 0
    while position < len(path):
        match = _SEGMENT.match(path, position)
        if match is None or (match.group(2) is not None and (path[position] == ".") != bool(out)):
            return None  # a field after the first is joined with ".", the first has none
        out.append(("element", match.group(1)) if match.group(1) is not None else ("key", match.group(2)))
        position = match.end()
    return out or None


@dataclass(frozen=True)
class PathPattern:
    """A path with ``*`` allowed in each segment (any characters of that segment). It matches a
    difference's path if it matches the path's first segments, so ``pqs[*]`` matches
    ``pqs[T/1].cached``: a field's pattern accepts what differs inside the field."""

    text: str
    parts: tuple[tuple[str, re.Pattern[str]], ...]

    @classmethod
    def parse(cls, text: str) -> PathPattern | None:
        """The pattern, or None if ``text`` is not a path."""
        found = segments(text)
        if found is None:
            return None
        parts = tuple((kind, re.compile(".*".join(map(re.escape, name.split("*"))))) for kind, name in found)
        return cls(text, parts)

    def matches(self, path: str) -> bool:
        found = segments(path)
        if found is None or len(found) < len(self.parts):
            return False
        return all(
            kind == got_kind and pattern.fullmatch(name) is not None
            for (kind, pattern), (got_kind, name) in zip(self.parts, found, strict=False)
        )
