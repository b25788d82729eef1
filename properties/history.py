"""Black-box history checking: what a user of a RocketMQ consumer group can see, checked for anomalies.

Some implementations can only log what their users see: messages produced (with the queue offset
the broker assigned), messages delivered to a listener, the broker's committed offset, consumers
joining and leaving, each consumer's rebalance result and its queue assignment. This module checks
such a history, in the vocabulary of Jepsen's ``total-queue`` and Kafka checkers extended for
RocketMQ (docs/oracle.md, "History checking"; docs/history.schema.json):

``lost``
    produced, below the final committed offset of its ledger (the group in CLUSTERING, each
    consumer in BROADCASTING), not declared skipped, and never consumed: no delivery succeeded and
    no copy was forwarded to a retry or dead-letter topic. Class ``lost`` when it was never
    delivered at all, ``lost:failed_delivery`` when every delivery failed (RMQ-03's symptom).
``duplicated``
    delivered more than once (BROADCASTING: more than once to the same consumer), with the count, each
    redelivery's cause, the window between the first and the last delivery, and whether a membership
    change (join, leave, view), an ownership change of the queue or a commit decrease falls inside it.
    Class ``duplicated:caused`` when every redelivery has a cause the history shows (``local-retry``,
    ``resumed-at-stored-offset``, ``resumed-at-consume-from-where``), plain ``duplicated`` otherwise.
``unexpected``
    delivered but never produced.
``commit_decreased``
    a committed offset went down (a negative value is ``commit_negative`` only). Classes: ``:declared`` (the
    commit names a cause: reset, offset_illegal, orderly, slave_sync, failover), ``:other_writer`` (the value
    lowered was written by another consumer, in a race of last writer wins the history shows, with a value
    the lowering consumer's ownership could have had: INV-8r's stale-owner cause, R3.2; the entry's ``race``
    and ``start``), ``:other_writer_uncaused`` (another writer, no such race or a value below its own start;
    ``why_refused``), ``:stale_incarnation`` (the same consumer, which had dropped the queue or left before: a
    commit of an earlier ProcessQueue still in flight, INV-8), ``:after_offset_illegal`` (lowering an
    OFFSET_ILLEGAL correction, S9), and plain ``commit_decreased`` (none of these: a bug).
``commit_beyond_max`` / ``commit_negative``
    a committed offset above the queue's highest produced offset + 1, or below 0 (INV-16, INV-7).
``double_owned`` / ``unowned`` (CLUSTERING)
    a stretch of time in which a queue had two or more owners, or none, with class ``:views_differ``
    when the live consumers' views never all agreed during it, and no suffix when they did (INV-13).
``skipped``
    offsets owed by the committed position but never consumed that a declared skip excuses:
    consumeFromWhere positioning (R10.4) with a cause the history shows (the ledger's first start, a
    commit that removed its offset with a declared cause, the skip's recorded fault; INV-9a), a filtered
    tag, a BROADCASTING failure drop, retention, a forward reset (INV-9's declared skips).

``allowed_anomalies`` says, per mode (CLUSTERING or BROADCASTING x concurrent or orderly x 4.9.8 or
5.x), which classes at-least-once delivery tolerates and why, like Jepsen's ``allowed-error-types``; the
report lists every anomaly, counts them per class, and says which were tolerated and why. It is
``valid`` when none is left untolerated. As in the model (docs/spec.md, "Allowed anomalies, each with its cause") the
tolerance is causal: a redelivery, a positioning skip or a decrease by another writer with no cause the history
shows is a violation.

The report also gives every produced message exactly one *fate* per ledger, in the model's vocabulary
(``properties.fates``: consumed-and-committed, consumed-not-yet-committed, skipped: <cause>,
filtered-by-tag, deleted-by-retention, not-allocated: <anomaly>, pending, lost; ``retry:`` and
``dead-lettered`` copies), with the fault harm among them, and the redeliveries per cause; on the
model's own walks they are the fates ``message_fates`` gives and the causes the ghost counts.

Work is partitioned by (topic, queue) of the group (P-compositionality): one streaming pass reads
and validates each line once and appends a tuple to its queue's bucket; ``analyze_queue`` then
analyses each bucket in one pass, O(events) per queue, plus a bisection per reported entry into the
group's membership timeline (``Timeline``, built once from join/leave/view events) and, when another
writer lowered a committed offset, one more scan of the queue's records for the race. The Spark path
(``rmqspec.history_spark``) runs the same ``validate_event`` on every line and the same
``analyze_queue`` on every group of the same records, so both give the same report.

Everything here is pure apart from reading the file (and pausing the garbage collector while the
buckets are built and analysed). ``history_from_model_run`` turns a seeded
walk of the model into a history, so the checker can be tested on real model behaviour.
"""

from __future__ import annotations

import gc
import json
import math
import random
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache
from json.scanner import make_scanner
from pathlib import Path
from typing import Any, Final

from rmqspec import jsonin
from rmqspec.properties.fates import (
    CONSUMED,
    FAULT_CAUSES,
    FILTERED,
    LOST,
    NOT_ALLOCATED,
    PENDING,
    RETENTION,
    UNCOMMITTED,
    Fates,
    is_harm,
)
from rmqspec.spec.concurrent_consume import CLEAN_EXPIRED_DELAY_LEVEL
from rmqspec.spec.config import STRATEGIES

FORMAT: Final = "rmqspec-history"
VERSION: Final = 1
MODES: Final = ("CLUSTERING", "BROADCASTING")
CONSUMPTIONS: Final = ("concurrent", "orderly")
ROCKETMQ_VERSIONS: Final = ("4.9.8", "5.x")
EVENT_TYPES: Final = ("produce", "deliver", "commit", "skip", "join", "leave", "view", "own")
# request_pool_reorder: a commit the broker's request pools ran after a later one of the same consumer
# (docs/spec.md, "Thread boundaries"): only a harness that sees the broker's order can declare it
COMMIT_CAUSES: Final = ("reset", "offset_illegal", "orderly", "slave_sync", "failover", "request_pool_reorder")
SKIP_CAUSES: Final = (
    "consume_from_last",
    "consume_from_timestamp",
    "filtered",
    "broadcast_failure",
    "retention",
    "reset",
)
RESULTS: Final = ("success", "failure")
# A consumeFromWhere skip is legitimate only while the ledger has no committed offset (S1, R10.4).
POSITIONING_CAUSES: Final = frozenset({"consume_from_last", "consume_from_timestamp"})
# Commits whose forward jump is itself a declared skip (INV-9: an explicit forward reset; an
# OFFSET_ILLEGAL jump over data the store no longer has).
SKIPPING_COMMIT_CAUSES: Final = frozenset({"reset", "offset_illegal"})
# A skip event's optional "fault": the fault that made a consumer find no stored offset when the history
# cannot show it otherwise (an offset query error read as "no offset", a failover to a replica lacking it).
SKIP_FAULTS: Final = tuple(sorted(FAULT_CAUSES))

# --- fates (properties/fates.py's vocabulary) -----------------------------------------------------
# The causes below are the model's own names (spec/: Ghost.skips, rebalance.POSITIONED_WITHOUT_OFFSET,
# admin_reset.RESET_APPLY_CAUSES, Ghost.redelivery_causes; tests/test_history.py checks them against the model).
SKIPPED: Final = "skipped: "
RETRY_PREFIX: Final = "retry: "
DEAD_LETTERED: Final = "dead-lettered"
FIRST_START: Final = "first-start"
ADMIN_RESET: Final = "admin-reset"
FAILURE_DROPPED: Final = "failure-dropped"
OFFSET_ILLEGAL_FIX: Final = "offset-illegal-fix"
# The fate of the offsets a declared skip covers, per skip cause (positioning skips name their cause below).
SKIP_FATES: Final[dict[str, str]] = {
    "filtered": FILTERED,
    "retention": RETENTION,
    "broadcast_failure": SKIPPED + FAILURE_DROPPED,
    "reset": SKIPPED + ADMIN_RESET,
}
COMMIT_SKIP_FATES: Final[dict[str, str]] = {
    "reset": SKIPPED + ADMIN_RESET,
    "offset_illegal": SKIPPED + OFFSET_ILLEGAL_FIX,
}
# What a commit cause that removed a ledger's offset (offset null) names as the cause of a later
# positioning without an offset: the model's name for that removal. "failover" is the broker falling back
# to its flushed file (CLUSTERING: a broker crash, R3.6, R3.7) or a consumer's offset file falling back to
# its .bak (BROADCASTING, R1.16); both are faults, so the skip is their harm.
REMOVAL_CAUSES: Final[dict[tuple[bool, str], str]] = {
    (True, "failover"): "broker-crash",
    (False, "failover"): "corrupt-local-offset-file",
    (True, "reset"): ADMIN_RESET,
    (False, "reset"): ADMIN_RESET,
    (True, "offset_illegal"): OFFSET_ILLEGAL_FIX,
    (False, "offset_illegal"): OFFSET_ILLEGAL_FIX,
}
# Redelivery causes (the model's Ghost.redelivery_causes): the same pq hands a failed message to its
# listener again; a new pq resumed at a stored offset at or below the message (the unpersisted window);
# a new pq positioned by consumeFromWhere because its ledger held no offset. NO_CAUSE: none the history shows.
LOCAL_RETRY: Final = "local-retry"
RESUMED_AT_STORED: Final = "resumed-at-stored-offset"
RESUMED_WITHOUT_OFFSET: Final = "resumed-at-consume-from-where"
NO_CAUSE: Final = "no cause"
# A decrease by another writer (CLUSTERING) is tolerated only with the race of last writer wins the history shows
# (INV-8r's stale-owner cause, spec/committed_offset.py), each named in its entry's "race".
OTHER_WRITER: Final = "commit_decreased:other_writer"
OTHER_WRITER_UNCAUSED: Final = "commit_decreased:other_writer_uncaused"
STALE_OWNER: Final = "stale-owner"  # the lowering consumer's ownership had ended when its commit landed
UNDERCUTS_STALE_COMMIT: Final = "undercuts-a-stale-commit"  # the value lowered was a stale owner's late commit
OVERLAPPING_OWNERS: Final = "overlapping-owners"  # both held the queue at once, as the allow-list tolerates (S7)
UNDERCUTS_RESET: Final = "undercuts-a-reset"  # the value lowered was a reset landed after its ownership started
SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"  # the broker's delay topic: a stage of a send-back, not a message
_EVERY: Final = object()  # key of a skip's fate for every ledger not named

ANOMALIES: Final = (
    "lost",
    "duplicated",
    "unexpected",
    "commit_decreased",
    "commit_beyond_max",
    "commit_negative",
    "double_owned",
    "unowned",
    "skipped",
)
CLASSES: Final = (
    "lost",
    "lost:failed_delivery",
    "duplicated",
    "duplicated:caused",
    "unexpected",
    "commit_decreased",
    "commit_decreased:declared",
    "commit_decreased:other_writer",
    "commit_decreased:other_writer_uncaused",
    "commit_decreased:stale_incarnation",
    "commit_decreased:after_offset_illegal",
    "commit_beyond_max",
    "commit_negative",
    "double_owned",
    "double_owned:views_differ",
    "unowned",
    "unowned:views_differ",
    "skipped",
)

# Record kinds in a queue's bucket. A record is (line, time, kind, consumer, offset, aux).
PRODUCE, DELIVER, COMMIT, OWN, SKIP, FORWARD = range(6)
# Membership kinds; a membership record is (line, time, kind, consumer, members).
JOIN, LEAVE, VIEW = range(3)
_MEMBERSHIP_KIND = {"join": JOIN, "leave": LEAVE, "view": VIEW}
INF: Final = math.inf


# --- the allow-list ----------------------------------------------------------------------------
# The strategies' own gaps (spec.anomalies.ALLOCATION_ANOMALIES) a history tolerates for the whole class: it
# does not carry the configured lists or rooms. (A ring with no virtual node is not: the count is not logged.)
_TOLERATED_UNOWNED: Final = ("unowned-by-configuration", "unowned-outside-consumeridcs")


def allowed_anomalies(mode: str, consumption: str, rocketmq: str, strategy: str = "AVG") -> dict[str, str]:
    """The anomaly classes at-least-once delivery tolerates in this mode, each with its reason.

    The reasons come from docs/rules.md (S- and R- numbers), docs/spec.md (INV- numbers) and, where the model
    has the same tolerance, from the model's own ``spec.anomalies.ALLOWED_ANOMALIES`` and
    ``ALLOCATION_ANOMALIES`` (the strategies that do not partition the queues).
    """
    from rmqspec.spec.anomalies import ALLOCATION_ANOMALIES
    from rmqspec.spec.anomalies import ALLOWED_ANOMALIES as MODEL

    out: dict[str, str] = {}
    clustering = mode == "CLUSTERING"
    orderly = consumption == "orderly"
    out["duplicated:caused"] = (
        "At-least-once delivery (S4), each redelivery with a cause the history shows (redelivery_causes): "
        + (
            "local-retry (the same consumer's pq, with no own or join event of it since, hands a message whose "
            "delivery failed to its listener again: a failed send-back, R7.3"
            + ("; a suspended orderly queue, R8.6" if orderly else "")
            + "), "
            if clustering or orderly
            else ""
        )
        + "resumed-at-stored-offset (a pq that started, own or join, after the earlier delivery resumed at the "
        "ledger's committed offset, at or below the message: the unpersisted window of a crash, shutdown, "
        "rebalance or lost commit, INV-15), resumed-at-consume-from-where (it started while the ledger held no "
        "offset). Model: " + MODEL[mode]["duplicate-delivery"]
    )
    out["skipped"] = (
        "Declared skips are not owed (INV-9): filtered tags, BROADCASTING failure drops, retention, forward "
        "resets, and consumeFromWhere positioning (R10.4, S1) only with a cause the history shows: the ledger's "
        "first start on the queue (no commit of it before), a commit with a declared cause that removed its "
        "offset (failover, reset), or the skip's own recorded fault. " + MODEL[mode]["positioning-skip"]
    )
    out["commit_decreased:declared"] = (
        "Offsets can go backwards for a named cause (S5, INV-8): an admin reset (R3.10a), the OFFSET_ILLEGAL "
        "correction (R5.7), orderly commits with increaseOnly=false (R8.6), slave sync (R3.8), failover to "
        "the last flushed file (R3.6, R3.7), and a commit the broker's request pools ran after a later one of the "
        "same consumer (request_pool_reorder, docs/spec.md, 'Thread boundaries')."
    )
    if clustering:
        out["commit_decreased:stale_incarnation"] = (
            "Commits are oneway and asynchronous (R2.5, R2.6): a commit sent by the consumer's previous "
            "ProcessQueue of this queue (before it dropped the queue or left) may land after the new one's. "
            "INV-8 allows a decrease written by a different pq."
        )
        out[OTHER_WRITER] = (
            "The broker is last-writer-wins (R3.2) and commits are oneway (R2.5, R2.6): another consumer's commit "
            "may land below the current value, only in a race the history shows (the race field; INV-8r's "
            "stale-owner cause): the consumer owned the queue (own events; with none of the topic, a join it "
            "delivered from) and that ownership had ended when its commit landed (stale-owner: own false or leave, "
            "a late commit, R9.5), or the value it lowers landed after that ownership started, so that it never "
            "read it: a stale owner's late commit (undercuts-a-stale-commit), a reset (undercuts-a-reset: the pull "
            "that takes a pending reset still lands its own piggy-back, R3.10b) or a co-owner's while two owners "
            "at once are tolerated (overlapping-owners: double_owned:views_differ for concurrent consumers, S7, or "
            "the strategy's own overlap). The value must be one that ownership could have had: at or above where "
            "it started (start: the offset it read at its own line; with none held, where its positioning skip put "
            "it; with neither, consumeFromWhere's position is not in the history and any value fits; R10.1, R9.4). "
            "Model: " + MODEL["CLUSTERING"]["broker-offset-decrease-by-another-owner"]
        )
        out["unowned:views_differ"] = (
            "While the consumers' views of the group differ, allocations need not cover every queue (S7, "
            "RMQ-11); a queue may be orphaned until the views agree. Coverage is required once they do (INV-13)."
        )
        if orderly:
            pass  # double ownership is never tolerated for orderly consumers: see allow_list_notes()
        else:
            out["double_owned:views_differ"] = MODEL["CLUSTERING"]["double-ownership-while-views-differ"]
    else:
        if not orderly:
            out["lost:failed_delivery"] = MODEL["BROADCASTING"]["failure-dropped"]
    by_strategy = ALLOCATION_ANOMALIES.get(strategy, {}) if clustering else {}
    unknowable = (
        " A history does not carry the strategy's configuration (the configured lists or rooms), so the "
        "whole class is tolerated for this strategy, not only the queues the configuration explains."
    )
    if "double-ownership-by-configuration" in by_strategy:
        out["double_owned"] = by_strategy["double-ownership-by-configuration"] + unknowable
    for key in _TOLERATED_UNOWNED:
        if key in by_strategy:
            out["unowned"] = by_strategy[key] + unknowable
    if rocketmq == "4.9.8":
        out["commit_decreased:after_offset_illegal"] = (
            "4.9.8 applies the OFFSET_ILLEGAL correction 10 s later as a plain overwrite, and consume results "
            "that finish meanwhile can lower it again (S9, R5.7, apache/rocketmq#7634). 5.2.0 freezes the "
            "corrected entry, so 5.x does not tolerate this."
        )
    return out


def allow_list_notes(mode: str, consumption: str, rocketmq: str) -> dict[str, str]:
    """Why the classes that are *not* tolerated in this mode are not (for the docs and reports)."""
    allowed = allowed_anomalies(mode, consumption, rocketmq)
    notes = {
        "lost": "At-least-once: every message below a committed offset was consumed or forwarded (INV-9); a "
        "consumeFromWhere skip over offsets the ledger had committed needs a cause the history shows (INV-9a).",
        "duplicated": "A redelivery needs a cause the history shows (INV-22, INV-15): a pq that delivers again what "
        "it delivered successfully, or that started above the message's committed offset, has none.",
        "lost:failed_delivery": "A failed message is sent back to %RETRY% (CLUSTERING, R7.3-R7.5) or retried "
        "locally (orderly, R8.6-R8.7); committing past it without either is RMQ-03.",
        "unexpected": "A delivered message was produced (no phantom reads).",
        "commit_decreased": "A consumer never lowers its own committed offset without a cause (R1.5 increaseOnly).",
        OTHER_WRITER: "BROADCASTING offsets are per consumer; only that consumer writes them.",
        OTHER_WRITER_UNCAUSED: "Last writer wins (R3.2) explains another consumer's lower commit only by a race the "
        "history shows (INV-8r): a consumer still holding the queue that lowers a value it read, or one no stale "
        "owner, reset or tolerated co-owner wrote; a value below where its own ownership started (one it never "
        "read); a consumer the history shows owning no part of the queue; a removal (offset null) with no declared "
        "cause: each is a bug (the entry's why_refused says which).",
        "commit_decreased:stale_incarnation": "BROADCASTING offsets are written synchronously to the consumer's "
        "local file (R1.12, R1.13): nothing of an earlier process or ProcessQueue lands later, and the file keeps "
        "its entries (INV-6b, RMQ-21).",
        "commit_decreased:after_offset_illegal": "5.2.0+ freezes an OFFSET_ILLEGAL correction until the queue is "
        "re-created (R5.7, 5.x).",
        "commit_beyond_max": "A committed offset never exceeds maxOffset (INV-16; the broker validates nothing).",
        "commit_negative": "A committed offset is never negative (INV-7, INV-16): -1 is the client's 'no offset' "
        "sentinel, and a broker that stores it sends consumers to OFFSET_ILLEGAL (RMQ-14).",
        "double_owned": "Once all live consumers' views agree, allocations are disjoint (INV-13a).",
        "double_owned:views_differ": "Orderly consumers lock a queue at the broker before creating its pq (R8.1, "
        "R8.4): two consumers never consume one queue at once, even while views differ (INV-11, INV-12, RMQ-09).",
        "unowned": "Once all live consumers' views agree, every queue has an owner (INV-13b, RMQ-11).",
    }
    return {c: notes[c] for c in CLASSES if c not in allowed and c in notes}


def allow_list_markdown() -> str:
    """The allow-list as a Markdown table (docs/oracle.md includes exactly this text)."""
    modes = [(m, c, v) for m in MODES for c in CONSUMPTIONS for v in ROCKETMQ_VERSIONS]
    short = {"CLUSTERING": "CL", "BROADCASTING": "BC", "concurrent": "conc", "orderly": "ord"}
    head = "| class | " + " | ".join(f"{short[m]} {short[c]} {v}" for m, c, v in modes) + " |"
    rows = [head, "|---" * (len(modes) + 1) + "|"]
    for cls in CLASSES:
        cells = []
        for m, c, v in modes:
            if m == "BROADCASTING" and cls.startswith(("double_owned", "unowned", OTHER_WRITER)):
                cells.append("n/a")
            else:
                cells.append("tolerated" if cls in allowed_anomalies(m, c, v) else "**bad**")
        rows.append(f"| `{cls}` | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


# --- errors and the header ---------------------------------------------------------------------
class HistoryError(Exception):
    """Unreadable input. ``line`` and ``field`` say where; ``str()`` is one line naming both."""

    def __init__(self, line: int | None, field: str | None, message: str, unit: str = "line") -> None:
        super().__init__(message)
        self.line = line
        self.field = field
        self.message = message
        self.unit = unit

    def __str__(self) -> str:
        where = f"{self.unit} {self.line}: " if self.line is not None else ""
        what = f'field "{self.field}": ' if self.field else ""
        return f"{where}{what}{self.message}"


@dataclass(frozen=True)
class Header:
    mode: str
    consumption: str
    rocketmq: str
    group: str
    strategy: str = "AVG"  # the allocation strategy; CONFIG and MACHINE_ROOM own queues unevenly (R11)

    @property
    def clustering(self) -> bool:
        return self.mode == "CLUSTERING"


def _show(value: Any) -> str:
    text = json.dumps(value, allow_nan=True) if not isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


def parse_header(obj: Any, line: int = 1) -> Header:
    """The header of a history (its first line); raises HistoryError naming the bad field."""
    if not isinstance(obj, dict):
        raise HistoryError(line, None, f'expected the header object {{"format": "{FORMAT}", ...}}, got {_kind(obj)}')
    if obj.get("format") != FORMAT:
        raise HistoryError(line, "format", f'expected "{FORMAT}", got {_show(obj.get("format"))}')
    if obj.get("version") != VERSION or type(obj.get("version")) is not int:
        raise HistoryError(line, "version", f"expected {VERSION}, got {_show(obj.get('version'))}")
    for name, accepted in (("mode", MODES), ("consumption", CONSUMPTIONS), ("rocketmq", ROCKETMQ_VERSIONS)):
        if obj.get(name) not in accepted:
            raise HistoryError(line, name, f"expected one of {', '.join(accepted)}, got {_show(obj.get(name))}")
    group = obj.get("group")
    if type(group) is not str or not group:
        raise HistoryError(line, "group", f"expected a non-empty string, got {_show(group)}")
    strategy = obj.get("strategy", "AVG")
    if strategy not in STRATEGIES:
        raise HistoryError(line, "strategy", f"expected one of {', '.join(STRATEGIES)}, got {_show(strategy)}")
    return Header(obj["mode"], obj["consumption"], obj["rocketmq"], group, strategy)


# --- one event ---------------------------------------------------------------------------------
# Required fields per event type (besides "time" and "type"), as the schema states them.
REQUIRED: Final[dict[str, tuple[str, ...]]] = {
    "produce": ("topic", "queue", "offset"),
    "deliver": ("consumer", "topic", "queue", "offset"),
    "commit": ("consumer", "topic", "queue", "offset"),
    "skip": ("topic", "queue", "from", "to", "cause"),
    "join": ("consumer",),
    "leave": ("consumer",),
    "view": ("consumer", "members"),
    "own": ("consumer", "topic", "queue", "owned"),
}
_FIELD_RULES: Final[dict[str, str]] = {
    "consumer": "str",
    "topic": "str",
    "queue": "nat",
    "offset": "nat",
    "from": "nat",
    "to": "nat",
}


def _field_error(obj: dict[str, Any], line: int, names: Iterable[str]) -> HistoryError:
    """The first of ``names`` that is missing or has the wrong type, as an error."""
    for name in names:
        if name not in obj or obj[name] is None:
            return HistoryError(line, name, f"missing (required for a {obj.get('type')} event)")
        value = obj[name]
        rule = _FIELD_RULES[name]
        if rule == "str" and (type(value) is not str or not value):
            return HistoryError(line, name, f"expected a non-empty string, got {_show(value)}")
        if rule == "nat" and (type(value) is not int or value < 0):
            return HistoryError(line, name, f"expected a non-negative integer, got {_show(value)}")
    return HistoryError(line, None, "invalid event")  # pragma: no cover - callers check first


def validate_event(obj: Any, line: int) -> tuple[Any, ...]:
    """Check one event and turn it into records: ``(time, key, record, forward_key, forward_record)``.

    ``key`` is the (topic, queue) bucket of ``record``; for join/leave/view it is None and
    ``record`` is a membership record. A produce with an ``origin`` also yields a FORWARD record
    for the origin's bucket. Raises HistoryError naming the line and the field.

    The three most common events, when plainly valid, take a fast path of subscripts and type
    tests; anything else (other types, optional fields, every error) goes to
    ``validate_event_carefully``, which gives the same result for every valid event (a property
    test checks that the two agree).
    """
    if type(obj) is dict:
        try:
            t = obj["time"]
            kind = obj["type"]
            if type(t) is int or (type(t) is float and math.isfinite(t)):
                if kind == "deliver":
                    consumer, topic, queue, offset = obj["consumer"], obj["topic"], obj["queue"], obj["offset"]
                    if (
                        type(consumer) is str
                        and consumer
                        and type(topic) is str
                        and topic
                        and type(queue) is int
                        and queue >= 0
                        and type(offset) is int
                        and offset >= 0
                    ):
                        result = obj.get("result")
                        if result is None or result == "success":
                            return t, (topic, queue), (line, t, DELIVER, consumer, offset, True), None, None
                        if result == "failure":
                            return t, (topic, queue), (line, t, DELIVER, consumer, offset, False), None, None
                elif kind == "produce":
                    topic, queue, offset = obj["topic"], obj["queue"], obj["offset"]
                    if (
                        type(topic) is str
                        and topic
                        and type(queue) is int
                        and queue >= 0
                        and type(offset) is int
                        and offset >= 0
                        and obj.get("origin") is None
                    ):
                        return t, (topic, queue), (line, t, PRODUCE, None, offset, None), None, None
                elif kind == "commit":
                    consumer, topic, queue, offset = obj["consumer"], obj["topic"], obj["queue"], obj["offset"]
                    cause = obj.get("cause")
                    if (
                        type(consumer) is str
                        and consumer
                        and type(topic) is str
                        and topic
                        and type(queue) is int
                        and queue >= 0
                        and type(offset) is int
                        and (cause is None or (type(cause) is str and cause in COMMIT_CAUSES))
                    ):
                        return t, (topic, queue), (line, t, COMMIT, consumer, offset, cause), None, None
        except KeyError:
            pass
    return validate_event_carefully(obj, line)


def validate_event_carefully(obj: Any, line: int) -> tuple[Any, ...]:
    """``validate_event`` for every event, field by field, with an error naming the bad field."""
    if type(obj) is not dict:
        raise HistoryError(line, None, f"expected an event object, got {_kind(obj)}")
    t = obj.get("time")
    if type(t) is not int and (type(t) is not float or not math.isfinite(t)):
        if t is None:
            raise HistoryError(line, "time", "missing (every event has a time)")
        raise HistoryError(line, "time", f"expected a finite number, got {_show(t)}")
    kind = obj.get("type")
    get = obj.get
    if kind == "deliver":
        consumer, topic, queue, offset = get("consumer"), get("topic"), get("queue"), get("offset")
        if not (
            type(consumer) is str
            and consumer
            and type(topic) is str
            and topic
            and type(queue) is int
            and queue >= 0
            and type(offset) is int
            and offset >= 0
        ):
            raise _field_error(obj, line, REQUIRED["deliver"])
        result = get("result")
        if result is None or result == "success":
            ok = True
        elif result == "failure":
            ok = False
        else:
            raise HistoryError(line, "result", f"expected one of {', '.join(RESULTS)}, got {_show(result)}")
        return t, (topic, queue), (line, t, DELIVER, consumer, offset, ok), None, None
    if kind == "produce":
        topic, queue, offset = get("topic"), get("queue"), get("offset")
        if not (
            type(topic) is str and topic and type(queue) is int and queue >= 0 and type(offset) is int and offset >= 0
        ):
            raise _field_error(obj, line, REQUIRED["produce"])
        origin = get("origin")
        if origin is None:
            return t, (topic, queue), (line, t, PRODUCE, None, offset, None), None, None
        if type(origin) is not dict:
            raise HistoryError(line, "origin", f"expected an object {{topic, queue, offset}}, got {_kind(origin)}")
        otopic, oqueue, ooffset = origin.get("topic"), origin.get("queue"), origin.get("offset")
        if not (type(otopic) is str and otopic):
            raise HistoryError(line, "origin.topic", f"expected a non-empty string, got {_show(otopic)}")
        if type(oqueue) is not int or oqueue < 0:
            raise HistoryError(line, "origin.queue", f"expected a non-negative integer, got {_show(oqueue)}")
        if type(ooffset) is not int or ooffset < 0:
            raise HistoryError(line, "origin.offset", f"expected a non-negative integer, got {_show(ooffset)}")
        return (
            t,
            (topic, queue),
            (line, t, PRODUCE, None, offset, None),
            (otopic, oqueue),
            (line, t, FORWARD, None, ooffset, (topic, queue, offset)),
        )
    if kind == "commit":
        consumer, topic, queue, offset = get("consumer"), get("topic"), get("queue"), get("offset")
        if offset is None and "offset" in obj:
            offset_ok = True  # null: the broker no longer holds an offset (failover to no entry, reset)
        else:
            offset_ok = type(offset) is int  # a negative one is an anomaly (commit_negative), not bad input
        if not (
            type(consumer) is str and consumer and type(topic) is str and topic and type(queue) is int and queue >= 0
        ):
            raise _field_error(obj, line, ("consumer", "topic", "queue"))
        if not offset_ok:
            if "offset" not in obj:
                raise HistoryError(line, "offset", "missing (required for a commit event)")
            raise HistoryError(line, "offset", f"expected an integer or null, got {_show(offset)}")
        cause = get("cause")
        if cause is not None and cause not in COMMIT_CAUSES:
            raise HistoryError(line, "cause", f"expected one of {', '.join(COMMIT_CAUSES)} or null, got {_show(cause)}")
        return t, (topic, queue), (line, t, COMMIT, consumer, offset, cause), None, None
    if kind == "own":
        consumer, topic, queue, owned = get("consumer"), get("topic"), get("queue"), get("owned")
        if not (
            type(consumer) is str and consumer and type(topic) is str and topic and type(queue) is int and queue >= 0
        ):
            raise _field_error(obj, line, ("consumer", "topic", "queue"))
        if type(owned) is not bool:
            if owned is None:
                raise HistoryError(line, "owned", "missing (required for a own event)")
            raise HistoryError(line, "owned", f"expected true or false, got {_show(owned)}")
        return t, (topic, queue), (line, t, OWN, consumer, None, owned), None, None
    if type(kind) is not str:
        if kind is None:
            raise HistoryError(line, "type", "missing (every event has a type)")
        raise HistoryError(line, "type", f"expected one of {', '.join(EVENT_TYPES)}, got {_show(kind)}")
    if kind in _MEMBERSHIP_KIND:
        consumer = get("consumer")
        if type(consumer) is not str or not consumer:
            raise _field_error(obj, line, ("consumer",))
        members: frozenset[str] | None = None
        if kind == "view":
            raw = get("members")
            if raw is None:
                if "members" not in obj:
                    raise HistoryError(line, "members", "missing (required for a view event; null means no view)")
            elif type(raw) is not list or any(type(m) is not str or not m for m in raw):
                raise HistoryError(line, "members", f"expected an array of non-empty strings or null, got {_show(raw)}")
            else:
                members = frozenset(raw)
        return t, None, (line, t, _MEMBERSHIP_KIND[kind], consumer, members), None, None
    if kind == "skip":
        topic, queue, start, end = get("topic"), get("queue"), get("from"), get("to")
        if not (
            type(topic) is str
            and topic
            and type(queue) is int
            and queue >= 0
            and type(start) is int
            and start >= 0
            and type(end) is int
            and end >= 0
        ):
            raise _field_error(obj, line, ("topic", "queue", "from", "to"))
        if end < start:
            raise HistoryError(line, "to", f"expected to >= from ({start}), got {end}")
        cause = get("cause")
        if cause not in SKIP_CAUSES:
            if cause is None:
                raise HistoryError(line, "cause", "missing (required for a skip event)")
            raise HistoryError(line, "cause", f"expected one of {', '.join(SKIP_CAUSES)}, got {_show(cause)}")
        consumer = get("consumer")
        if consumer is not None and (type(consumer) is not str or not consumer):
            raise HistoryError(line, "consumer", f"expected a non-empty string or null, got {_show(consumer)}")
        fault = get("fault")
        if fault is not None and fault not in FAULT_CAUSES:
            raise HistoryError(line, "fault", f"expected one of {', '.join(SKIP_FAULTS)} or null, got {_show(fault)}")
        return t, (topic, queue), (line, t, SKIP, consumer, start, (end, cause, fault)), None, None
    raise HistoryError(line, "type", f"expected one of {', '.join(EVENT_TYPES)}, got {_show(kind)}")


# --- reading -----------------------------------------------------------------------------------
def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


# The C scanner json.loads itself uses, called directly: each line is parsed exactly once and
# the two Python frames of json.loads/JSONDecoder.decode are skipped. NaN and Infinity are refused.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
_SCAN = make_scanner(_DECODER)  # type: ignore[arg-type]


_BLANK: Final = object()
BLANK: Final = _BLANK  # what parse_text returns for a blank line


def _parse_line(text: str, line: int) -> Any:
    """The slow path: a line the fast path could not take. Returns ``_BLANK`` for a blank line."""
    if not text.strip():
        return _BLANK
    try:
        return jsonin.parse(text, "history", line=line, allow_nan=False)
    except jsonin.InputError as err:  # not JSON, nested too deeply, an integer too long, NaN
        column = f" (column {err.column})" if err.column is not None else ""
        raise HistoryError(line, None, f"{err.what}{column}") from None


def parse_text(text: str, line: int) -> Any:
    """One line of text as a JSON value, exactly as the streaming reader parses it (the C scanner,
    then the slow path for anything unusual). Returns ``BLANK`` for a blank line."""
    try:
        obj, end = _SCAN(text, 0)
    except Exception:
        return _parse_line(text, line)
    if end != len(text) and text[end:].strip():
        return _parse_line(text, line)
    return obj


@dataclass
class Bucketed:
    """A history read and bucketed: what the per-queue analysis needs."""

    header: Header
    buckets: dict[tuple[str, int], list[tuple[Any, ...]]]
    membership: list[tuple[Any, ...]]
    events: int
    last_time: float | int | None
    owned_topics: set[str] = field(default_factory=set)


def read_lines(lines: Iterable[str], unit: str = "line") -> Bucketed:
    """Read a history from its lines (header first), validating every line in one pass.

    Raises HistoryError for the first bad line. Blank lines are ignored.
    """
    it: Iterator[str] = iter(lines)
    header_obj = None
    lineno = 0
    for text in it:
        lineno += 1
        header_obj = _parse_line(text, lineno)
        break
    if lineno == 0:
        raise HistoryError(None, None, "empty file: expected a header line", unit)
    if header_obj is _BLANK:
        raise HistoryError(1, None, "expected the header on line 1, got a blank line", unit)
    header = parse_header(header_obj, 1)
    buckets: dict[tuple[str, int], list[tuple[Any, ...]]] = {}
    membership: list[tuple[Any, ...]] = []
    owned_topics: set[str] = set()
    last: Any = -INF
    blanks = 0
    scan = _SCAN
    get_bucket = buckets.get
    causes = COMMIT_CAUSES
    gc_was_enabled = gc.isenabled()
    gc.disable()  # the buckets are millions of small tuples; no cycles to find among them
    try:
        # The hot loop. Plainly valid produce, deliver and commit events with an integer time are
        # checked inline (the same tests as validate_event's fast path); everything else goes to
        # validate_event, which is also what names the field of a bad event.
        for lineno, text in enumerate(it, 2):
            try:
                obj, end = scan(text, 0)
                if end != len(text) - 1 and text[end:].strip():
                    obj = _parse_line(text, lineno)
            except HistoryError:
                raise
            except Exception:
                obj = _parse_line(text, lineno)
                if obj is _BLANK:
                    blanks += 1
                    continue
            rec: Any = None
            if type(obj) is dict:
                try:
                    t = obj["time"]
                    kind = obj["type"]
                    if type(t) is int:
                        if kind == "deliver":
                            consumer, topic, queue, offset = obj["consumer"], obj["topic"], obj["queue"], obj["offset"]
                            if (
                                type(consumer) is str
                                and consumer
                                and type(topic) is str
                                and topic
                                and type(queue) is int
                                and queue >= 0
                                and type(offset) is int
                                and offset >= 0
                            ):
                                result = obj.get("result")
                                if result is None or result == "success":
                                    rec = (lineno, t, DELIVER, consumer, offset, True)
                                elif result == "failure":
                                    rec = (lineno, t, DELIVER, consumer, offset, False)
                        elif kind == "produce":
                            topic, queue, offset = obj["topic"], obj["queue"], obj["offset"]
                            if (
                                type(topic) is str
                                and topic
                                and type(queue) is int
                                and queue >= 0
                                and type(offset) is int
                                and offset >= 0
                                and obj.get("origin") is None
                            ):
                                rec = (lineno, t, PRODUCE, None, offset, None)
                        elif kind == "commit":
                            consumer, topic, queue, offset = obj["consumer"], obj["topic"], obj["queue"], obj["offset"]
                            cause = obj.get("cause")
                            if (
                                type(consumer) is str
                                and consumer
                                and type(topic) is str
                                and topic
                                and type(queue) is int
                                and queue >= 0
                                and type(offset) is int
                                and (cause is None or (type(cause) is str and cause in causes))
                            ):
                                rec = (lineno, t, COMMIT, consumer, offset, cause)
                except KeyError:
                    pass
            if rec is not None:
                if t < last:
                    raise HistoryError(lineno, "time", f"{_show(t)} is before the previous event's time {_show(last)}")
                last = t
                key = (topic, queue)
                bucket = get_bucket(key)
                if bucket is None:
                    bucket = buckets[key] = []
                bucket.append(rec)
                continue
            t, key, rec, fkey, frec = validate_event_carefully(obj, lineno)
            if t < last:
                raise HistoryError(lineno, "time", f"{_show(t)} is before the previous event's time {_show(last)}")
            last = t
            if key is None:
                membership.append(rec)
                continue
            bucket = get_bucket(key)
            if bucket is None:
                bucket = buckets[key] = []
            bucket.append(rec)
            if fkey is not None:
                bucket = get_bucket(fkey)
                if bucket is None:
                    bucket = buckets[fkey] = []
                bucket.append(frec)
            elif rec[2] == OWN:
                owned_topics.add(key[0])
    except HistoryError as err:
        err.unit = unit
        raise
    finally:
        if gc_was_enabled:
            gc.enable()
    events = lineno - 1 - blanks
    return Bucketed(header, buckets, membership, events, last if events else None, owned_topics)


def read_history(path: str | Path) -> Bucketed:
    """Read a JSON Lines history file. Raises HistoryError (bad content) or OSError (unreadable)."""
    with open(path, encoding="utf-8", newline=None) as fh:
        try:
            return read_lines(fh)
        except UnicodeDecodeError:
            pass
    raise HistoryError(_first_non_utf8_line(path), None, "not UTF-8 text")


def _first_non_utf8_line(path: str | Path) -> int:
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                return lineno
    return 1  # pragma: no cover - the decoder failed, so some line does


# --- the membership timeline ---------------------------------------------------------------------
@dataclass
class Timeline:
    """Group-wide context every queue's analysis shares (small: membership events only).

    ``agree_starts``/``agree_ends`` are the maximal time intervals [start, end) in which every live
    consumer's latest view equals the set of live consumers (the state at time t is the state after
    every event stamped t, so events sharing a timestamp count as simultaneous). ``leaves`` maps a
    consumer to the lines and times of its leave events, ``joins`` to the lines of its join events (a
    restart: its pqs start anew); ``membership_lines`` lists the lines of all join/leave/view events.
    """

    header: Header
    events: int
    last_time: float | int | None
    agree_starts: list[float | int]
    agree_ends: list[float | int]
    leaves: dict[str, tuple[list[int], list[float | int]]]
    membership_lines: list[int]
    owned_topics: frozenset[str]
    ownership_checked: bool
    ownership_note: str
    joins: dict[str, list[int]] = field(default_factory=dict)


def build_timeline(
    header: Header,
    membership: list[tuple[Any, ...]],
    events: int,
    last_time: float | int | None,
    owned_topics: Iterable[str],
) -> Timeline:
    """The membership timeline of a group from its join/leave/view records (in line order)."""
    membership = sorted(membership)
    live: set[str] = set()
    views: dict[str, frozenset[str] | None] = {}
    starts: list[float | int] = []
    ends: list[float | int] = []
    leaves: dict[str, tuple[list[int], list[float | int]]] = {}
    joins: dict[str, list[int]] = {}
    agree = False
    i, n = 0, len(membership)
    while i < n:
        t = membership[i][1]
        while i < n and membership[i][1] == t:
            line, _, kind, consumer, members = membership[i]
            if kind == JOIN:
                live.add(consumer)
                views[consumer] = None
                joins.setdefault(consumer, []).append(line)
            elif kind == LEAVE:
                live.discard(consumer)
                views.pop(consumer, None)
                seqs, times = leaves.setdefault(consumer, ([], []))
                seqs.append(line)
                times.append(t)
            elif consumer in live:
                views[consumer] = members
            i += 1
        now = bool(live) and all(views.get(c) == live for c in live)
        if now and not agree:
            starts.append(t)
        elif agree and not now:
            ends.append(t)
        agree = now
    if agree:
        ends.append(INF)
    kinds = {r[2] for r in membership}
    owned = frozenset(owned_topics)
    if not header.clustering:
        checked, note = False, "BROADCASTING: every consumer owns every queue"
    elif JOIN not in kinds or VIEW not in kinds or not owned:
        checked, note = False, "needs join, view and own events"
    else:
        checked, note = True, ""
    return Timeline(
        header,
        events,
        last_time,
        starts,
        ends,
        leaves,
        [r[0] for r in membership],
        owned,
        checked,
        note,
        joins,
    )


def _left_between(tl: Timeline, consumer: str, after_line: int, before_line: int) -> float | int | None:
    """The time of the consumer's first leave with after_line < line < before_line, or None."""
    left = _leave_between(tl, consumer, after_line, before_line)
    return None if left is None else left[1]


def _leave_between(
    tl: Timeline, consumer: str, after_line: float | int, before_line: float | int
) -> tuple[int, float | int] | None:
    """The line and time of the consumer's first leave with after_line < line < before_line, or None."""
    entry = tl.leaves.get(consumer)
    if entry is None:
        return None
    seqs, times = entry
    k = bisect_right(seqs, after_line)
    if k < len(seqs) and seqs[k] < before_line:
        return seqs[k], times[k]
    return None


def _agreement(tl: Timeline, start: float | int, end: float | int) -> float | int | None:
    """The first time in [start, end) at which the views agree, or None."""
    k = bisect_right(tl.agree_ends, start)
    if k < len(tl.agree_starts) and tl.agree_starts[k] < end:
        return max(start, tl.agree_starts[k])
    return None


# --- the per-queue analysis ----------------------------------------------------------------------
def _json_time(t: float | int) -> float | int | None:
    return None if t == INF else t


def analyze_queue(topic: str, queue: int, records: list[tuple[Any, ...]], tl: Timeline) -> dict[str, Any]:
    """Every anomaly of one (topic, queue) of the group: one pass over its records (in line order).

    Returns a partial report: a list per anomaly, one counts row, and the queue's fates (each produced
    message's fate per ledger, properties/fates.py's vocabulary), the fault harm among them and the
    redeliveries per cause. Pure; used unchanged by the local path and by Spark.
    """
    header = tl.header
    bcast = not header.clustering
    produced: set[int] = set()
    forwarded: set[int] = set()
    first: dict[Any, tuple[Any, ...]] = {}  # delivery key -> its first delivery record
    dups: dict[Any, list[Any]] = {}  # delivery key -> [count, first, last, consumers, successes, last per consumer]
    # (key, record, that consumer's previous delivery, (line, ledger's committed offset) of its latest own)
    redelivered: list[tuple[Any, ...]] = []
    ok: dict[Any, set[int]] = {}  # ledger -> offsets delivered successfully
    failed: dict[Any, dict[int, int]] = {}  # ledger -> offset -> failed deliveries
    delivered = failures = commits = 0
    cstate: dict[Any, list[Any]] = {}  # ledger -> [value, writer, cause, line]
    final: dict[Any, int] = {}  # ledger -> last non-null committed offset
    final_line: dict[Any, int] = {}  # ledger -> the line of that commit
    commit_recs: list[tuple[Any, ...]] = []
    decreased: list[dict[str, Any]] = []
    decrease_lines: dict[Any, list[int]] = {}
    by_other: list[tuple[dict[str, Any], int, Any]] = []  # by another writer: entry, line and cause of what it lowered
    # [from, to, cause, line, time, consumer, refused (ledger -> why not), excused, fate (str, or ledger -> fate)]
    skips: list[list[Any]] = []
    own_recs: list[tuple[Any, ...]] = []
    own_start: dict[str, tuple[int, Any]] = {}  # consumer -> its latest own(true): line, the ledger's offset
    dropped: set[str] = set()
    keep_first = first.setdefault
    produced_add = produced.add
    ok_group_add = ok.setdefault(None, set()).add  # CLUSTERING: one ledger
    for rec in records:
        line, t, kind, c, o, aux = rec
        if kind == DELIVER:
            delivered += 1
            key = (c, o) if bcast else o
            seen = keep_first(key, rec)
            if seen is not rec:
                d = dups.get(key)
                if d is None:
                    previous = seen if seen[3] == c else None
                    dups[key] = [2, seen, rec, {seen[3], c}, seen[5] + aux, {seen[3]: seen, c: rec}]
                else:
                    previous = d[5].get(c)
                    d[0] += 1
                    d[2] = rec
                    d[3].add(c)
                    d[4] += aux
                    d[5][c] = rec
                redelivered.append((key, rec, previous, own_start.get(c)))
            if aux:
                if bcast:
                    s = ok.get(c)
                    if s is None:
                        s = ok[c] = set()
                    s.add(o)
                else:
                    ok_group_add(o)
            else:
                failures += 1
                ledger = c if bcast else None
                f = failed.get(ledger)
                if f is None:
                    f = failed[ledger] = {}
                f[o] = f.get(o, 0) + 1
        elif kind == PRODUCE:
            produced_add(o)
        elif kind == COMMIT:
            commits += 1
            ledger = c if bcast else None
            if o is not None:
                commit_recs.append(rec)
            st = cstate.get(ledger)
            old = None if st is None else st[0]
            if old is not None and (o is None or o < old):  # losing the offset altogether is a decrease too
                decrease_lines.setdefault(ledger, []).append(line)
            # A negative value is commit_negative (below), never also a decrease: it is no offset a consumer had.
            if old is not None and (o is None or old > o >= 0):
                other = False
                if aux is not None:
                    cls = "commit_decreased:declared"
                elif st[1] != c:  # type: ignore[index]
                    cls, other = OTHER_WRITER_UNCAUSED, True  # until _other_writer_races shows its race
                else:
                    earlier = c in dropped or _left_between(tl, c, -1, line) is not None
                    # CLUSTERING: a oneway commit of an earlier ProcessQueue can land after a correction in either
                    # version (5.x removes the corrected pq at once, R5.7), so the stale incarnation comes first
                    if st[2] == "offset_illegal" and not (earlier and not bcast):  # type: ignore[index]
                        cls = "commit_decreased:after_offset_illegal"
                    elif earlier:
                        cls = "commit_decreased:stale_incarnation"
                    else:
                        cls = "commit_decreased"
                fall: dict[str, Any] = {
                    "class": cls,
                    "topic": topic,
                    "queue": queue,
                    "consumer": c,
                    "ledger": ledger,
                    "from": old,
                    "to": o,
                    "previous_writer": st[1],  # type: ignore[index]
                    "cause": aux,
                    "time": t,
                    "line": line,
                }
                decreased.append(fall)
                if other:
                    by_other.append((fall, st[3], st[2]))  # type: ignore[index]
            if aux in SKIPPING_COMMIT_CAUSES and o is not None and (old is None or o > old):
                skips.append([0 if old is None else old, o, aux, line, t, c, (), 0, COMMIT_SKIP_FATES[aux]])
            if st is None:
                cstate[ledger] = [o, c, aux, line]
            else:
                st[0], st[1], st[2], st[3] = o, c, aux, line
            if o is not None:
                final[ledger] = o
                final_line[ledger] = line
        elif kind == OWN:
            own_recs.append(rec)
            if aux:
                st = cstate.get(c if bcast else None)
                own_start[c] = (line, None if st is None else st[0])
            else:
                dropped.add(c)
        elif kind == FORWARD:
            forwarded.add(o)
        else:  # SKIP
            end, cause, fault = aux
            if cause in POSITIONING_CAUSES:
                refused, named = _positioning(cause, fault, c, bcast, cstate, final)
                skips.append([o, end, cause, line, t, c, refused, 0, named])
            else:
                skips.append([o, end, cause, line, t, c, (), 0, SKIP_FATES[cause]])

    out: dict[str, Any] = {name: [] for name in ANOMALIES}
    max_produced = max(produced) if produced else -1
    # fates, lost and skipped: every produced offset, for every ledger
    fates: dict[str, int] = {}
    harm: dict[str, int] = {}
    dead_letters = topic.startswith("%DLQ%")
    counted = not dead_letters and topic != SCHEDULE_TOPIC  # broker-made stages of a send-back have no fate
    prefix = RETRY_PREFIX if topic.startswith("%RETRY%") else ""
    drop_tolerated = bcast and header.consumption == "concurrent"  # R7.3: BROADCASTING drops a failed message
    if dead_letters and produced:
        fates[DEAD_LETTERED] = len(produced)
    if bcast:
        ledgers: list[Any] = sorted(
            ({lg for lg in ok if lg is not None} | set(failed) | set(cstate) | set(tl.joins))
            | {sk[5] for sk in skips if sk[5] is not None}
        )
    else:
        ledgers = [None]
    lost_total = 0
    not_allocated: str | None = None  # the fate of a pending message if the queue ends with no owner (or "")
    for ledger in ledgers:
        position = final.get(ledger)
        done = (ok.get(ledger, set()) | forwarded) & produced
        missing = produced - done
        if not done and not missing:
            continue
        if counted and done:
            below = sum(map(position.__gt__, done)) if position is not None else 0
            if below:
                fates[prefix + CONSUMED] = fates.get(prefix + CONSUMED, 0) + below
            if len(done) > below:
                fates[prefix + UNCOMMITTED] = fates.get(prefix + UNCOMMITTED, 0) + len(done) - below
        if not missing:
            continue
        if not_allocated is None:
            not_allocated = _not_allocated(topic, own_recs, tl)
        order = sorted(missing)
        excused_by = _excusing_skips(skips, ledger, bcast, order)
        fails = failed.get(ledger, {})
        for o in order:
            owed = position is not None and o < position
            k = excused_by.get(o)
            if k is not None:
                fate = _skip_fate(skips[k], ledger)
                if owed:
                    skips[k][7] += 1
            elif owed:
                n_failed = fails.get(o, 0)
                entry: dict[str, Any] = {
                    "class": "lost:failed_delivery" if n_failed else "lost",
                    "topic": topic,
                    "queue": queue,
                    "offset": o,
                    "consumer": ledger,
                    "committed": position,
                    "failed_deliveries": n_failed,
                    "produce_line": None,  # filled in below, from one scan of the records
                    "commit_line": final_line[ledger],
                }
                refusal = _refused_skip(skips, ledger, bcast, o)
                if refusal is not None:
                    entry["refused_skip"] = refusal
                out["lost"].append(entry)
                lost_total += 1
                fate = SKIPPED + FAILURE_DROPPED if n_failed and drop_tolerated else LOST
            else:
                fate = not_allocated or PENDING
            if counted:
                fates[prefix + fate] = fates.get(prefix + fate, 0) + 1
                if fate.startswith(SKIPPED) and is_harm(fate[len(SKIPPED) :]):
                    harm[prefix + fate] = harm.get(prefix + fate, 0) + 1
    if out["lost"]:
        produce_lines: dict[int, int] = {}
        for rec in records:
            if rec[2] == PRODUCE and rec[4] not in produce_lines:
                produce_lines[rec[4]] = rec[0]
        for entry in out["lost"]:
            entry["produce_line"] = produce_lines[entry["offset"]]
    skipped_total = 0
    for sk in skips:
        if sk[7]:
            skipped_total += sk[7]
            out["skipped"].append(
                {
                    "class": "skipped",
                    "topic": topic,
                    "queue": queue,
                    "consumer": sk[5],
                    "from": sk[0],
                    "to": sk[1],
                    "cause": sk[2],
                    "fate": _skip_fate(sk, sk[5] if bcast else None),
                    "excused": sk[7],
                    "time": sk[4],
                    "line": sk[3],
                }
            )
    # unexpected
    delivered_offsets = {k[1] for k in first} if bcast else set(first)
    phantom = delivered_offsets - produced
    if phantom:
        seen_by: dict[int, list[Any]] = {}
        for rec in records:
            if rec[2] == DELIVER and rec[4] in phantom:
                e = seen_by.get(rec[4])
                if e is None:
                    seen_by[rec[4]] = [1, rec[1], rec[0], {rec[3]}]
                else:
                    e[0] += 1
                    e[3].add(rec[3])
        for o in sorted(phantom):
            n, t0, line0, who = seen_by[o]
            out["unexpected"].append(
                {
                    "class": "unexpected",
                    "topic": topic,
                    "queue": queue,
                    "offset": o,
                    "consumers": sorted(who),
                    "deliveries": n,
                    "first_time": t0,
                    "line": line0,
                }
            )
    # duplicated: each redelivery's cause, then one entry per message with its window
    causes: dict[str, int] = {}
    if dups:
        retried = header.clustering or header.consumption == "orderly"  # R7.3: BROADCASTING drops failures
        per_key = _redelivery_causes(redelivered, records, tl, bcast, retried)
        own_lines = [r[0] for r in own_recs]
        mlines = tl.membership_lines
        for key in sorted(dups, key=lambda k: (k[1], k[0]) if bcast else (k, "")):
            count, r0, r1, who, successes, _ = dups[key]
            key_causes, uncaused = per_key[key]
            for cause, n in key_causes.items():
                causes[cause] = causes.get(cause, 0) + n
            a, b = r0[0], r1[0]
            ledger = key[0] if bcast else None
            dl = decrease_lines.get(ledger, ())
            entry = {
                "class": "duplicated" if uncaused is not None else "duplicated:caused",
                "topic": topic,
                "queue": queue,
                "offset": key[1] if bcast else key,
                "consumer": ledger,
                "consumers": sorted(who),
                "count": count,
                "successes": successes,
                "causes": dict(sorted(key_causes.items())),
                "first_time": r0[1],
                "last_time": r1[1],
                "first_line": a,
                "last_line": b,
                "after_membership_change": _between(mlines, a, b),
                "after_ownership_change": _between(own_lines, a, b),
                "after_commit_decrease": _between(dl, a, b),
            }
            if uncaused is not None:
                entry["uncaused_line"], entry["uncaused"] = uncaused
            out["duplicated"].append(entry)
    # commit beyond max and decreases
    bound = max_produced + 1
    for rec in commit_recs:
        if rec[4] < 0:
            out["commit_negative"].append(
                {
                    "class": "commit_negative",
                    "topic": topic,
                    "queue": queue,
                    "consumer": rec[3],
                    "offset": rec[4],
                    "time": rec[1],
                    "line": rec[0],
                }
            )
        elif rec[4] > bound:
            out["commit_beyond_max"].append(
                {
                    "class": "commit_beyond_max",
                    "topic": topic,
                    "queue": queue,
                    "consumer": rec[3],
                    "offset": rec[4],
                    "max_produced": max_produced if produced else None,
                    "time": rec[1],
                    "line": rec[0],
                }
            )
    if by_other:
        _other_writer_races(by_other, records, own_recs, tl, topic in tl.owned_topics)
    out["commit_decreased"] = decreased
    # ownership
    if tl.ownership_checked and topic in tl.owned_topics:
        _ownership(topic, queue, records[0][1] if records else 0, own_recs, tl, out)
    finals = list(final.values())
    out["counts"] = [
        {
            "group": header.group,
            "topic": topic,
            "queue": queue,
            "produced": len(produced),
            "max_produced": max_produced if produced else None,
            "delivered": delivered,
            "distinct_delivered": len(delivered_offsets),
            "failed_deliveries": failures,
            "commits": commits,
            "committed": (min(finals) if finals else None),
            "lost": lost_total,
            "duplicated": len(dups),
            "skipped": skipped_total,
        }
    ]
    out["fates"] = fates
    out["fate_harm"] = harm
    out["redelivery_causes"] = causes
    return out


def _positioning(
    cause: str,
    fault: str | None,
    consumer: str | None,
    bcast: bool,
    cstate: dict[Any, list[Any]],
    final: dict[Any, int],
) -> tuple[dict[Any, str], dict[Any, str]]:
    """A consumeFromWhere skip, judged causally (INV-9a): for each ledger it speaks for, the cause of the
    missing offset as the fate names it, or why it has none (refused: those offsets stay owed).

    A cause is the skip's own recorded ``fault``, the ledger's first start on the queue (no non-null commit
    of it before), or the declared cause of the commit that removed its offset (offset null). A ledger
    that holds an offset, or lost it to a commit with no cause, has none."""
    how = SKIPPED + cause.replace("_", "-") + ": "
    if fault is not None:
        return {}, {_EVERY: how + fault}
    if bcast and consumer is None:
        ledgers: list[Any] = list(cstate)
    else:
        ledgers = [consumer if bcast else None]
    refused: dict[Any, str] = {}
    fate: dict[Any, str] = {_EVERY: how + FIRST_START}
    for ledger in ledgers:
        if ledger not in final:
            continue  # never committed: its first start on the queue
        value, _, removed_by, line = cstate[ledger]
        if value is None and removed_by is not None:
            fate[ledger] = how + REMOVAL_CAUSES.get((not bcast, removed_by), removed_by.replace("_", "-"))
        elif value is None:
            refused[ledger] = f"its offset was removed at line {line} with no cause"
        else:
            refused[ledger] = f"it held committed offset {value} (line {line}) and the history shows no cause"
    return refused, fate


def _not_allocated(topic: str, own_recs: list[tuple[Any, ...]], tl: Timeline) -> str:
    """``not-allocated: <anomaly>`` when the queue has no owner at the end of the history and the header's
    strategy deals some queues to nobody (the allocation anomaly the allow-list tolerates: CONFIG's lists,
    MACHINE_ROOM's rooms); else "". Only where the history records ownership of the topic."""
    names = _unowned_anomalies(tl.header.strategy) if tl.header.clustering else ""
    if not names or not tl.ownership_checked or topic not in tl.owned_topics:
        return ""
    last: dict[str, tuple[Any, ...]] = {}
    for rec in own_recs:
        last[rec[3]] = rec
    for c, rec in last.items():
        if rec[5] and _left_between(tl, c, rec[0], 1 << 62) is None:
            return ""
    return f"{NOT_ALLOCATED}: {names}"


@cache
def _unowned_anomalies(strategy: str) -> str:
    """The strategy's own gaps the history allow-list tolerates (allowed_anomalies), joined as fates.py does."""
    from rmqspec.spec.anomalies import ALLOCATION_ANOMALIES

    return "/".join(sorted(a for a in ALLOCATION_ANOMALIES.get(strategy, {}) if a in _TOLERATED_UNOWNED))


def _skip_fate(sk: list[Any], ledger: Any) -> str:
    fate = sk[8]
    if type(fate) is str:
        return fate
    return fate.get(ledger, fate[_EVERY])


def _refused_skip(skips: list[list[Any]], ledger: Any, bcast: bool, o: int) -> dict[str, Any] | None:
    """The first positioning skip covering ``o`` that was refused for ``ledger``, as evidence of a loss."""
    for sk in skips:
        if sk[0] <= o < sk[1] and ledger in sk[6] and (not bcast or sk[5] is None or sk[5] == ledger):
            return {"line": sk[3], "cause": sk[2], "why_refused": sk[6][ledger]}
    return None


def _redelivery_causes(
    redelivered: list[tuple[Any, ...]], records: list[tuple[Any, ...]], tl: Timeline, bcast: bool, retries: bool
) -> dict[Any, tuple[dict[str, int], tuple[int, str] | None]]:
    """Per delivery key, its redeliveries per cause, and the line and reason of the first one without a cause.

    The pq that delivers is the consumer's latest (own true of this queue, or join) before the delivery;
    ``redelivered`` carries the latest own with the ledger's committed offset then (for a later join the
    records are scanned once for the offset at its line).
    That pq delivered the message before: ``local-retry`` if that delivery failed and failures are retried
    (CLUSTERING, orderly; R7.3, R8.6), else no cause (INV-22). Otherwise the pq resumed where its ledger's
    committed offset stood when it started: at or below the message, ``resumed-at-stored-offset``; with no
    offset held, ``resumed-at-consume-from-where``; above it, no cause (INV-15). No recorded start: no cause."""
    lines: dict[Any, list[int]] = {}
    values: dict[Any, list[Any]] = {}
    scanned = False
    out: dict[Any, tuple[dict[str, int], tuple[int, str] | None]] = {}
    for key, rec, previous, own in redelivered:
        line, _, _, c, o, _ = rec
        ledger = c if bcast else None
        start, value = own if own is not None else (None, None)
        joined = tl.joins.get(c)
        if joined:
            k = bisect_right(joined, line) - 1
            if k >= 0 and (start is None or joined[k] > start):
                start = joined[k]
                if not scanned:  # the ledger's committed offset at a join's line: from the commits, once
                    scanned = True
                    for r in records:
                        if r[2] == COMMIT:
                            lines.setdefault(r[3] if bcast else None, []).append(r[0])
                            values.setdefault(r[3] if bcast else None, []).append(r[4])
                j = bisect_right(lines.get(ledger, ()), start) - 1
                value = values[ledger][j] if j >= 0 else None
        cause, reason = NO_CAUSE, None
        if previous is not None and (start is None or previous[0] > start):
            if not previous[5] and retries:
                cause = LOCAL_RETRY
            elif not previous[5]:
                reason = f"{c} delivered it at line {previous[0]} (failed) and again: BROADCASTING drops it (R7.3)"
            else:
                reason = f"{c}'s pq delivered it at line {previous[0]} (success) and again (INV-22)"
        elif start is None:
            reason = f"no own or join event of {c} shows where its pq of the queue started"
        else:
            if value is None:
                cause = RESUMED_WITHOUT_OFFSET
            elif o >= value:
                cause = RESUMED_AT_STORED
            else:
                reason = f"{c}'s pq started at line {start}, above it: the committed offset was {value} (INV-15)"
        counts, uncaused = out.get(key, ({}, None))
        counts[cause] = counts.get(cause, 0) + 1
        if reason is not None and uncaused is None:
            uncaused = (line, reason)
        out[key] = (counts, uncaused)
    return out


def _between(lines: Any, a: int, b: int) -> bool:
    """Is some line strictly between a and b in the sorted list ``lines``?"""
    k = bisect_right(lines, a)
    return k < len(lines) and lines[k] < b


def _excusing_skips(skips: list[list[Any]], ledger: Any, bcast: bool, missing: list[int]) -> dict[int, int]:
    """Offset (of the sorted ``missing``) -> index in ``skips`` of the declared skip of ``ledger`` that gives it
    its fate: a filtered one if any covers it (an unsubscribed tag is never owed, R5.5), else the earliest
    valid one (a later skip finds it skipped already: the model's Ghost.skips record only what was not).
    Refused positioning skips excuse nothing."""
    out: dict[int, int] = {}
    keep = out.setdefault
    for k in sorted(range(len(skips)), key=lambda k: (skips[k][2] != "filtered", k)):
        sk = skips[k]
        if sk[1] <= sk[0] or ledger in sk[6] or (bcast and sk[5] is not None and sk[5] != ledger):
            continue
        for o in missing[bisect_left(missing, sk[0]) : bisect_left(missing, sk[1])]:
            keep(o, k)
    return out


def _other_writer_races(
    by_other: list[tuple[dict[str, Any], int, Any]],
    records: list[tuple[Any, ...]],
    own_recs: list[tuple[Any, ...]],
    tl: Timeline,
    owned_topic: bool,
) -> None:
    """Judge each decrease by another writer (CLUSTERING, no declared cause) causally, as INV-8r's stale-owner cause
    judges the model's broker table (spec/committed_offset.py): ``commit_decreased:other_writer`` with the ``race``
    the history shows and the ``start`` of the lowering consumer's ownership, or ``:other_writer_uncaused`` with
    ``why_refused``. ``by_other`` holds each entry with the line and the declared cause of the value it lowered.

    The race of last writer wins (R3.2; commits are oneway, R2.5, R2.6): the lowering consumer owned the queue (an
    ownership from its ``own`` events; in a history with no ``own`` event of the topic, a join to its leave in which
    it delivered from the queue) and one of its ownerships before the commit shows the race: ``stale-owner`` (it had
    ended, by own(false) or a leave, when the commit landed: a stale owner's late commit, R9.5), or the value lowered
    landed after it started (so the consumer never read it) and was ``undercuts-a-reset`` (a ``reset``: the pull
    that takes a pending reset still lands its own piggy-back, R3.10b), ``undercuts-a-stale-commit`` (written by a
    consumer that had owned the queue and held it no more: a stale owner's late commit itself) or
    ``overlapping-owners`` (written by a consumer that held the queue then too, where the allow-list tolerates the
    two owners: ``double_owned:views_differ`` for concurrent consumers, S7, or the strategy's own overlap). Times
    follow the timeline's rule: the state at time t is the one after every event stamped t.

    The value must be one that ownership could have had: at or above where it started (``start_of`` in the model,
    R10.1, R9.4): the ledger's committed offset at its start line, what it read; with none held there, the ``to``
    of the consumer's positioning skip of the queue since its previous ownership (concurrent consumers: an orderly
    pq's memory may predate a re-read, ``_memory_predates_start``); with neither, consumeFromWhere's position is not
    in the history and any value fits (its deliveries bound it only from above: the offsets before the first may be
    filtered, deleted or pulled and never delivered). A removal (offset null) is no value a consumer had: it needs its
    declared cause."""
    commit_lines: list[int] = []
    commit_values: list[Any] = []
    delivered: dict[str, list[int]] = {}  # consumer -> lines of its deliveries of the queue
    positioned: dict[str, tuple[list[int], list[int]]] = {}  # consumer -> lines and ends of its positioning skips
    for r in records:
        kind = r[2]
        if kind == COMMIT:
            commit_lines.append(r[0])
            commit_values.append(r[4])
        elif kind == DELIVER:
            delivered.setdefault(r[3], []).append(r[0])
        elif kind == SKIP and r[3] is not None and r[5][1] in POSITIONING_CAUSES:
            lines, ends = positioned.setdefault(r[3], ([], []))
            lines.append(r[0])
            ends.append(r[5][0])
    times = {r[0]: r[1] for r in records if r[2] == COMMIT}
    by_own = _own_intervals(own_recs, tl)
    h = tl.header
    allowed = allowed_anomalies(h.mode, h.consumption, h.rocketmq, h.strategy)
    concurrent = h.consumption == "concurrent"

    def delivered_between(c: str, after: float | int, before: float | int) -> bool:
        seqs = delivered.get(c, ())
        k = bisect_right(seqs, after)
        return k < len(seqs) and seqs[k] < before

    def ownerships(c: str) -> list[tuple[Any, ...]]:
        """c's ownerships of the queue (start line, start time, end line, end time); without own events of the
        topic, its joins to their leaves in which it delivered from the queue (times None: only lines are known)."""
        if owned_topic:
            return by_own.get(c, [])
        out = []
        for j in tl.joins.get(c, ()):
            left = _leave_between(tl, c, j, 1 << 62)
            end = INF if left is None else left[0]
            if delivered_between(c, j, end):
                out.append((j, None, end, None))
        return out

    def holds(iv: tuple[Any, ...], line: int, t: float | int) -> bool:
        return iv[0] < line < iv[2] if iv[1] is None else iv[1] <= t < iv[3]

    def start_of(c: str, start_line: int, after: float | int, until: int) -> tuple[int | None, str]:
        k = bisect_right(commit_lines, start_line) - 1
        value = commit_values[k] if k >= 0 else None
        if type(value) is int and value >= 0:
            return value, f"the committed offset it read at line {start_line}"
        lines, ends = positioned.get(c, ((), ()))
        j = bisect_left(lines, until) - 1
        if concurrent and j >= 0 and lines[j] > after:
            return ends[j], f"where its positioning skip at line {lines[j]} put it"
        return None, f"no offset held at line {start_line}"

    for entry, written, written_by in by_other:
        c, w, v, line, t = entry["consumer"], entry["previous_writer"], entry["to"], entry["line"], entry["time"]
        lowered = f"the value it lowers ({entry['from']}, line {written}, by {w})"
        if v is None:
            entry["why_refused"] = (
                "a commit never removes an offset (the broker stores the value it is sent, R3.2): a removal needs "
                "its declared cause (failover, reset)"
            )
            continue
        mine = [iv for iv in ownerships(c) if iv[0] < line]
        if not mine:
            entry["why_refused"] = (
                f"the history shows no ownership of the queue by {c} before it (no own event, nor a join it "
                "delivered from)"
            )
            continue
        t_written = times[written]
        theirs = ownerships(w)
        held_then = [iv for iv in theirs if holds(iv, written, t_written)]  # w's ownership its value landed in
        w_stale = not held_then and any(iv[0] < written for iv in theirs)  # it had owned the queue, and no more
        refusals: list[str] = []
        below: list[str] = []
        for k in range(len(mine) - 1, -1, -1):
            start_line, start_time, end_line, end_time = mine[k]
            race = ""
            if not holds(mine[k], line, t) and end_line != INF:
                race = STALE_OWNER
            elif written < start_line:
                refusals.append(f"{lowered} was there when its ownership started at line {start_line}: it read it")
            elif written_by == "reset":
                race = UNDERCUTS_RESET
            elif w_stale:
                race = UNDERCUTS_STALE_COMMIT
            elif not held_then:
                refusals.append(
                    f"{c} still held the queue (from line {start_line}) when its commit landed, and {w} "
                    + ("wrote it before any ownership of the queue the history shows" if theirs else "never owned it")
                    + ": no stale owner's race (R3.2)"
                )
            elif start_time is None or not tl.ownership_checked:
                refusals.append(f"{c} and {w} held the queue at once, and the history shows no views to judge it by")
            else:
                overlap = ""
                for _, w_start, _, w_end in held_then:
                    a, b = max(start_time, w_start), min(end_time, w_end)
                    overlap = "double_owned" if _agreement(tl, a, b) is not None else "double_owned:views_differ"
                    if overlap in allowed:
                        race = OVERLAPPING_OWNERS
                if not race:
                    refusals.append(
                        f"{c} and {w} held the queue at once, as {overlap}, which this mode does not tolerate "
                        "(INV-13a; orderly consumers lock the queue, R8.1, R8.4)"
                    )
            if not race:
                continue
            start, how = start_of(c, start_line, mine[k - 1][2] if k else -1, min(end_line, line))
            if start is not None and v < start:
                below.append(f"{c} commits {v} below where its ownership started ({start}, {how}): never its value")
                continue
            entry["class"] = OTHER_WRITER
            entry["race"] = race
            entry["start"] = start
            break
        else:
            entry["why_refused"] = (below or refusals)[0]


def _own_intervals(own_recs: list[tuple[Any, ...]], tl: Timeline) -> dict[str, list[tuple[Any, ...]]]:
    """Per consumer, its ownerships of one queue from its ``own`` events, in order: (start line, start time, end
    line, end time). One starts at an own(true) while not held and ends at the next own(false) or leave of the
    consumer; one still held at the end of the history ends at INF (line and time)."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    current: dict[str, tuple[int, float | int]] = {}
    for line, t, _, c, _, owned in own_recs:
        held = current.get(c)
        if held is not None:
            left = _leave_between(tl, c, held[0], line)
            if left is not None:  # a leave ended that ownership before this event
                out.setdefault(c, []).append((*held, *left))
                del current[c]
                held = None
        if owned and held is None:
            current[c] = (line, t)
        elif not owned and held is not None:
            out.setdefault(c, []).append((*held, line, t))
            del current[c]
    for c, (line, t) in current.items():
        left = _leave_between(tl, c, line, 1 << 62)
        out.setdefault(c, []).append((line, t, INF, INF) if left is None else (line, t, *left))
    return out


def _ownership(
    topic: str, queue: int, first_time: float | int, own_recs: list[tuple[Any, ...]], tl: Timeline, out: dict[str, Any]
) -> None:
    """Double and missing ownership of one queue over time, judged against view agreement."""
    intervals = [(iv[1], iv[3], c) for c, ivs in _own_intervals(own_recs, tl).items() for iv in ivs]
    changes: dict[float | int, list[tuple[int, str]]] = {}
    for start, end, c in intervals:
        if end > start:
            changes.setdefault(start, []).append((1, c))
            if end != INF:
                changes.setdefault(end, []).append((-1, c))
    owners: dict[str, int] = {}
    times = sorted(changes)
    points = [first_time] + [t for t in times if t > first_time]
    # apply the changes at or before first_time
    for t in times:
        if t > first_time:
            break
        for delta, c in changes[t]:
            owners[c] = owners.get(c, 0) + delta
    # Stretches of constant owners: (start, owners), merging changes that leave the owners as they were.
    stretches: list[tuple[float | int, list[str]]] = []
    for k, a in enumerate(points):
        if k > 0:
            for delta, c in changes[a]:
                owners[c] = owners.get(c, 0) + delta
        holders = sorted(c for c, n in owners.items() if n > 0)
        if not stretches or stretches[-1][1] != holders:
            stretches.append((a, holders))
    for k, (a, holders) in enumerate(stretches):
        b = stretches[k + 1][0] if k + 1 < len(stretches) else INF
        if len(holders) == 1:
            continue
        agreed = _agreement(tl, a, b)
        name = "double_owned" if holders else "unowned"
        entry: dict[str, Any] = {
            "class": name if agreed is not None else name + ":views_differ",
            "topic": topic,
            "queue": queue,
        }
        if holders:
            entry["consumers"] = holders
        entry.update(
            {
                "from_time": a,
                "to_time": _json_time(b),
                "views_agree": agreed is not None,
                "agreed_from": agreed,
            }
        )
        out[name].append(entry)


# --- the report ----------------------------------------------------------------------------------
def assemble_report(tl: Timeline, partials: Iterable[tuple[tuple[str, int], dict[str, Any]]]) -> dict[str, Any]:
    """The flat report from the per-queue partial reports (in any order)."""
    header = tl.header
    lists: dict[str, list[dict[str, Any]]] = {name: [] for name in ANOMALIES}
    counts: list[dict[str, Any]] = []
    fates = Fates()
    redeliveries: Counter[str] = Counter()
    for _, part in sorted(partials, key=lambda kv: kv[0]):
        for name in ANOMALIES:
            lists[name].extend(part[name])
        counts.extend(part["counts"])
        fates.merge(Fates(Counter(part["fates"]), Counter(part["fate_harm"])))
        redeliveries.update(part["redelivery_causes"])
    allowed = allowed_anomalies(header.mode, header.consumption, header.rocketmq, header.strategy)
    per_class: dict[str, int] = {}
    for entries in lists.values():
        for e in entries:
            per_class[e["class"]] = per_class.get(e["class"], 0) + 1
    tolerated = {c: {"count": n, "reason": allowed[c]} for c, n in sorted(per_class.items()) if c in allowed}
    bad = {c: n for c, n in sorted(per_class.items()) if c not in allowed}
    report: dict[str, Any] = {
        "valid": not bad,
        "format": FORMAT + "-report",
        "version": VERSION,
        "mode": header.mode,
        "consumption": header.consumption,
        "rocketmq": header.rocketmq,
        "group": header.group,
        "strategy": header.strategy,
        "events": tl.events,
        "queues": len(counts),
        "ownership_checked": tl.ownership_checked,
    }
    if not tl.ownership_checked:
        report["ownership_note"] = tl.ownership_note
    report["anomaly_types"] = sorted(per_class)
    report["bad_anomaly_types"] = sorted(bad)
    report["not_tolerated"] = bad
    report["tolerated"] = tolerated
    for name in ANOMALIES:
        report[f"{name}_count"] = len(lists[name])
    report["totals"] = {
        k: sum(r[k] for r in counts)
        for k in ("produced", "delivered", "distinct_delivered", "failed_deliveries", "commits")
    }
    # every produced message's fate per ledger, the fault harm among them, and the redeliveries per cause
    report["fates"] = fates.as_dict()["fates"]
    report["fate_harm"] = fates.as_dict()["harm"]
    report["redelivery_causes"] = dict(sorted(redeliveries.items()))
    for name in ANOMALIES:
        report[name] = lists[name]
    report["counts"] = counts
    report["allowed"] = allowed
    return report


def check_bucketed(history: Bucketed) -> dict[str, Any]:
    """The report of a history already read (the local path)."""
    tl = build_timeline(history.header, history.membership, history.events, history.last_time, history.owned_topics)
    gc_was_enabled = gc.isenabled()
    gc.disable()  # as in read_lines: nothing here makes cycles, and a collection would walk every record
    try:
        partials = [(key, analyze_queue(key[0], key[1], recs, tl)) for key, recs in history.buckets.items()]
    finally:
        if gc_was_enabled:
            gc.enable()
    return assemble_report(tl, partials)


def check_history(path: str | Path) -> dict[str, Any]:
    """Read and check a JSON Lines history. Raises HistoryError or OSError."""
    return check_bucketed(read_history(path))


def check_lines(lines: Iterable[str]) -> dict[str, Any]:
    """Check a history given as lines of text (tests, pipes)."""
    return check_bucketed(read_lines(lines))


def describe(report: dict[str, Any], limit: int = 5) -> str:
    """A short human-readable summary of a report."""
    lines = [
        f"{report['mode']} {report['consumption']} {report['rocketmq']}, group {report['group']}: "
        f"{report['events']} events over {report['queues']} queues "
        f"({report['totals']['produced']} produced, {report['totals']['delivered']} deliveries, "
        f"{report['totals']['commits']} commits)",
    ]
    if not report["ownership_checked"]:
        lines.append(f"ownership not checked: {report['ownership_note']}")
    fates = Fates(Counter(report["fates"]), Counter(report["fate_harm"]))
    lines.append(f"fates: {fates.summary()}")
    redeliveries = report["redelivery_causes"]
    if redeliveries:
        lines.append("redeliveries: " + ", ".join(f"{cause} {n}" for cause, n in redeliveries.items()))
    for name in ANOMALIES:
        n = report[f"{name}_count"]
        lines.append(f"  {name:<18}{n:>8}")
    for cls, n in report["not_tolerated"].items():
        lines.append(f"NOT TOLERATED {cls}: {n}")
        shown = [e for name in ANOMALIES for e in report[name] if e["class"] == cls][:limit]
        lines += [f"    {json.dumps(e, sort_keys=True)}" for e in shown]
    for cls, info in report["tolerated"].items():
        lines.append(f"tolerated {cls}: {info['count']} ({info['reason']})")
    lines.append("valid: " + ("yes" if report["valid"] else "NO"))
    return "\n".join(lines)


# --- the JSON Schema -----------------------------------------------------------------------------
def history_schema() -> dict[str, Any]:
    """The JSON Schema of one line of a history (docs/history.schema.json is exactly this)."""
    nat = {"type": "integer", "minimum": 0}
    name = {"type": "string", "minLength": 1}
    common = {"time": {"type": "number", "description": "nondecreasing along the file"}}

    def event(kind: str, props: dict[str, Any], description: str) -> dict[str, Any]:
        return {
            "title": kind,
            "description": description,
            "type": "object",
            "required": ["time", "type", *REQUIRED[kind]],
            "properties": {**common, "type": {"const": kind}, **props},
        }

    events = [
        event(
            "produce",
            {
                "topic": name,
                "queue": nat,
                "offset": nat,
                "origin": {
                    "description": "the message this one was forwarded from (send-back to a retry, schedule "
                    "or DLQ topic): marks the origin as consumed",
                    "type": "object",
                    "required": ["topic", "queue", "offset"],
                    "properties": {"topic": name, "queue": nat, "offset": nat},
                },
            },
            "A message stored at (topic, queue, offset).",
        ),
        event(
            "deliver",
            {
                "consumer": name,
                "topic": name,
                "queue": nat,
                "offset": nat,
                "result": {
                    "enum": [*RESULTS, None],
                    "description": "what the listener returned; absent or null means success",
                },
            },
            "A message handed to a consumer's listener.",
        ),
        event(
            "commit",
            {
                "consumer": {**name, "description": 'who wrote it: a consumer, "admin" or "broker"'},
                "topic": name,
                "queue": nat,
                "offset": {
                    "type": ["integer", "null"],
                    "description": "the committed offset after the event (BROADCASTING: the consumer's own); "
                    "null: none is held; a negative value is reported as commit_negative",
                },
                "cause": {"enum": [*COMMIT_CAUSES, None], "description": "a declared cause of a decrease"},
            },
            "The committed offset of the group (CLUSTERING) or of the consumer (BROADCASTING) changed.",
        ),
        event(
            "skip",
            {
                "consumer": {
                    "type": ["string", "null"],
                    "minLength": 1,
                    "description": "whose ledger (BROADCASTING); absent or null: every ledger",
                },
                "topic": name,
                "queue": nat,
                "from": nat,
                "to": {**nat, "description": "exclusive; to >= from"},
                "cause": {"enum": list(SKIP_CAUSES)},
                "fault": {
                    "enum": [*SKIP_FAULTS, None],
                    "description": "consume_from_*: the recorded fault that made the consumer find no stored "
                    "offset, when no commit event shows it (a query error read as no offset, a replica lacking "
                    "it); the skip is then that fault's harm",
                },
            },
            "A declared skip: offsets in [from, to) are not owed (INV-9). A consume_from_* skip over offsets "
            "its ledger had committed needs a cause the history shows (INV-9a).",
        ),
        event("join", {"consumer": name}, "A consumer started (or restarted)."),
        event("leave", {"consumer": name}, "A consumer stopped or crashed; it owns nothing afterwards."),
        event(
            "view",
            {
                "consumer": name,
                "members": {
                    "type": ["array", "null"],
                    "items": name,
                    "description": "the consumer list this consumer's last complete rebalance allocated "
                    "from; null: no complete view",
                },
            },
            "A rebalance result; log it after (or at the same time as) that rebalance's own events.",
        ),
        event(
            "own",
            {"consumer": name, "topic": name, "queue": nat, "owned": {"type": "boolean"}},
            "A queue was assigned to (owned: true) or removed from (false) a consumer.",
        ),
    ]
    header = {
        "title": "header",
        "description": "Line 1.",
        "type": "object",
        "required": ["format", "version", "mode", "consumption", "rocketmq", "group"],
        "properties": {
            "format": {"const": FORMAT},
            "version": {"const": VERSION},
            "mode": {"enum": list(MODES)},
            "consumption": {"enum": list(CONSUMPTIONS)},
            "rocketmq": {"enum": list(ROCKETMQ_VERSIONS)},
            "group": name,
            "strategy": {
                "enum": list(STRATEGIES),
                "description": "The allocation strategy (default AVG). CONFIG and MACHINE_ROOM do not partition "
                "the queues, so their ownership anomalies are tolerated (R11.4, R11.5).",
            },
        },
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://rmqspec.invalid/history.schema.json",
        "title": "rmqspec history line",
        "description": "One line of an rmqspec history (JSON Lines): line 1 is the header, every other "
        "line one event, in nondecreasing time. Unknown fields are ignored. See docs/oracle.md.",
        "oneOf": [header, *events],
    }


def schema_text() -> str:
    return json.dumps(history_schema(), indent=2) + "\n"


# --- histories from model runs -------------------------------------------------------------------
def history_from_model_run(config: Any, seed: int, steps: int) -> list[dict[str, Any]]:
    """The history a black-box observer would log of the explorer's seeded walk of the model.

    The walk is the one ``properties.explore.walk`` takes with this seed (uniform choice among the
    enabled actions), but it does not stop at a violation. Deliveries, landed commits and positions
    come from the model's ghost history; produces, skips, membership, views, ownership, failover
    and BROADCASTING file commits from the difference between consecutive states. Each delivery's
    result is what the listener answered (failure for a listener that never finished). A send-back
    the broker accepted is a produce on SCHEDULE_TOPIC_XXXX or %DLQ% with the sent-back message as
    origin, and the retry message it later becomes is a produce on %RETRY% with the scheduled one
    as origin. Returns the header followed by the events, as dicts ready for ``json.dumps``.
    """
    return list(_ModelHistory(config, seed, steps).run())


def model_run(config: Any, seed: int, steps: int) -> tuple[list[dict[str, Any]], Any, Any]:
    """``history_from_model_run``'s history with the model and the walk's last state, so that the history's
    fates can be compared with the model's own (``properties.fates.message_fates``)."""
    walk = _ModelHistory(config, seed, steps)
    events = list(walk.run())
    return events, walk.model, walk.final


class _ModelHistory:
    def __init__(self, config: Any, seed: int, steps: int) -> None:
        from rmqspec.spec.model import Model

        self.config = config
        self.model = Model(config)
        self.seed = seed
        self.steps = steps
        m = self.model
        self.cids = m.cids
        self.names = [(config.topic, q) for q in range(config.queues)]
        if m.retry_queue is not None:
            self.names.append((config.retry_topic, 0))
        self.pending: dict[tuple[int, int], list[dict[str, Any]]] = {}
        self.scheduled_src: dict[Any, list[dict[str, Any]]] = {}
        self.counters: dict[tuple[str, int], int] = {}
        self.final: Any = None  # the walk's last state, once run() is exhausted

    def run(self) -> Iterator[dict[str, Any]]:
        from rmqspec.spec.actions import (
            BrokerCrash,
            CorruptLocalOffsetFile,
            CorruptOffsetFile,
            Crash,
            DeliverScheduled,
            FinishConsume,
            Produce,
            RetentionDelete,
            Shutdown,
        )

        c = self.config
        m = self.model
        yield {
            "format": FORMAT,
            "version": VERSION,
            "mode": c.mode,
            "consumption": "orderly" if c.orderly else "concurrent",
            "rocketmq": c.version,
            "group": c.group,
            "strategy": c.strategy,
            "generator": f"rmqspec model walk, seed {self.seed}, {self.steps} steps",
        }
        s = m.initial()
        out: list[dict[str, Any]] = []
        for q in range(c.queues):
            for o in range(s.broker.queues[q].max_offset):
                out.append(self._produce(0, q, o))
        out += self._skips(None, s, None, 0)
        rng = random.Random(self.seed)
        for _ in range(self.steps):
            enabled = m.enabled(s)
            if not enabled:
                break
            a = enabled[rng.randrange(len(enabled))]
            try:
                t = m.step(s, a)
            except AssertionError:
                break  # a planted bug drove the model out of its scope (e.g. OFFSET_ILLEGAL): stop here
            now = t.now
            # ghost history: deliveries, landed commits, positions (newest first until s's head)
            new = []
            node = t.history
            while node is not None and node is not s.history:
                new.append(node.event)
                node = node.previous
            new.reverse()
            positions = {}
            delivered: list[tuple[tuple[int, int], dict[str, Any]]] = []  # pending after this step's finish
            expired: list[tuple[int, int]] = []  # (queue, offset) cleanExpiredMsg sent back (R6.8)
            for ev in new:
                if ev.kind == "deliver":
                    topic, queue = self.names[ev.queue]
                    d = {
                        "time": now,
                        "type": "deliver",
                        "consumer": self.cids[ev.client],
                        "topic": topic,
                        "queue": queue,
                        "offset": ev.offset,
                        "result": "failure",
                    }
                    # the listener the message went to: a StartConsume's, or (orderly) the next batch of the loop a
                    # FinishConsume or ApplyConsumeOffset runs on (R8.5), under the same request id
                    rid = next(
                        r.rid
                        for r in t.clients[ev.client].consuming
                        if r.queue == ev.queue and any(o == ev.offset for o, _ in r.msgs)
                    )
                    delivered.append(((ev.client, rid), d))
                    out.append(d)
                elif ev.kind in ("expired-sent-back", "expired-to-unsubscribed-retry-topic"):
                    expired.append((ev.queue, ev.offset))
                elif ev.kind == "commit-landed" and m.clustering:
                    cause = _MODEL_COMMIT_CAUSES.get(ev.cause)
                    mark = s.ghost.overtaken[ev.queue] if s is not None and s.ghost.overtaken else None
                    current = s.broker.offsets[ev.queue] if s is not None else None
                    if mark is not None and mark[0] == ev.client and current is not None and ev.offset < current:
                        cause = "request_pool_reorder"  # an overtaken request landing late (Ghost.overtaken)
                    out.append(self._commit(now, self.cids[ev.client], ev.queue, ev.offset, cause))
                elif ev.kind == "admin-write" and m.clustering:  # the admin's own write of the table (R3.10)
                    out.append(self._commit(now, "admin", ev.queue, ev.offset, "reset"))
                elif ev.kind == "position":  # "consume-from-last: <why the offset was missing>"
                    positions[(ev.client, ev.queue)] = ev.cause
            if isinstance(a, Produce):
                out.append(self._produce(now, a.queue, t.broker.queues[a.queue].max_offset - 1))
            elif isinstance(a, DeliverScheduled):
                origin = self.scheduled_src[s.broker.scheduled[0].message].pop(0)
                rq = m.retry_queue
                if rq is not None:  # BROADCASTING subscribes to no %RETRY%: the copy is dropped there
                    out.append(
                        {
                            "time": now,
                            "type": "produce",
                            "topic": c.retry_topic,
                            "queue": 0,
                            "offset": t.broker.queues[rq].max_offset - 1,
                            "origin": origin,
                        }
                    )
            elif isinstance(a, FinishConsume):
                out += self._finish(s, t, a, now)
            elif isinstance(a, (Crash, Shutdown)):
                self._interrupted(s, a.client)
            elif isinstance(a, (BrokerCrash, CorruptOffsetFile)) and m.clustering:  # the table the restart loads
                for q, (old, newv) in enumerate(zip(s.broker.offsets, t.broker.offsets, strict=True)):
                    if old != newv:
                        out.append(self._commit(now, "broker", q, newv, "failover"))
            elif isinstance(a, RetentionDelete):  # what retention deleted is not owed by anyone
                topic, queue = self.names[a.queue]
                deleted = {"from": s.broker.queues[a.queue].min_offset, "to": t.broker.queues[a.queue].min_offset}
                out.append({"time": now, "type": "skip", "topic": topic, "queue": queue, **deleted})
                out[-1]["cause"] = "retention"
            if expired:
                out += self._sent_back(s, t, now, [(q, o, None) for q, o in expired], CLEAN_EXPIRED_DELAY_LEVEL)
            for listener, d in delivered:
                self.pending.setdefault(listener, []).append(d)
            if not m.clustering:
                fallback = "failover" if isinstance(a, CorruptLocalOffsetFile) else None  # the file's .bak (R1.16)
                for i, (before, after) in enumerate(zip(s.clients, t.clients, strict=True)):
                    for q, (old, newv) in enumerate(zip(before.file, after.file, strict=True)):
                        if old != newv:
                            out.append(self._commit(now, self.cids[i], q, newv, fallback))
            out += self._skips(s, t, a, now, positions)
            out += self._membership(s, t, now)
            yield from out
            out = []
            s = t
        self.final = s
        yield from out

    def _produce(self, now: int, q: int, o: int) -> dict[str, Any]:
        topic, queue = self.names[q]
        return {"time": now, "type": "produce", "topic": topic, "queue": queue, "offset": o}

    def _commit(self, now: int, who: str, q: int, offset: int | None, cause: str | None) -> dict[str, Any]:
        topic, queue = self.names[q]
        ev: dict[str, Any] = {"time": now, "type": "commit", "consumer": who, "topic": topic, "queue": queue}
        ev["offset"] = offset
        if cause is not None:
            ev["cause"] = cause
        return ev

    def _skips(
        self, s: Any, t: Any, a: Any, now: int, positions: dict[tuple[int, int], str] | None = None
    ) -> list[dict[str, Any]]:
        """Declared skips: the ghost's skipped ledgers grew."""
        from rmqspec.spec.actions import AdminReset, FinishConsume, Produce

        m = self.model
        qn = m.q_count
        before = s.ghost.skipped if s is not None else (0,) * len(t.ghost.skipped)
        out: list[dict[str, Any]] = []
        produce_done: set[int] = set()
        for idx, (old, newv) in enumerate(zip(before, t.ghost.skipped, strict=True)):
            bits = newv & ~old
            if not bits:
                continue
            ledger, q = divmod(idx, qn)
            topic, queue = self.names[q]
            fault = None
            if a is None or isinstance(a, Produce):
                if q in produce_done:
                    continue  # one group-wide skip covers every ledger
                produce_done.add(q)
                consumer, cause = None, "filtered"
            elif isinstance(a, FinishConsume):
                consumer, cause = self.cids[ledger], "broadcast_failure"
            elif isinstance(a, AdminReset):
                consumer, cause = None, "reset"
            else:
                where = positions or {}
                who = ledger if not m.clustering else next((i for (i, qq) in where if qq == q), 0)
                consumer = self.cids[who]
                how, _, why = where.get((who, q), "consume-from-last").partition(": ")
                cause = how.replace("-", "_")
                if why in FAULT_CAUSES and why not in _FAULTS_SHOWN_AS_COMMITS:
                    fault = why
            for start, end in _runs(bits):
                ev: dict[str, Any] = {"time": now, "type": "skip", "topic": topic, "queue": queue}
                if consumer is not None:
                    ev["consumer"] = consumer
                ev.update({"from": start, "to": end, "cause": cause})
                if fault is not None:
                    ev["fault"] = fault
                out.append(ev)
        return out

    def _finish(self, s: Any, t: Any, a: Any, now: int) -> list[dict[str, Any]]:
        """Listener results, and the send-backs the broker accepted (as forwarded produces)."""
        from rmqspec.spec.orderly_consume import ORDERLY_COMMIT, ORDERLY_SUCCESS

        r = next(r for r in s.clients[a.client].consuming if r.rid == a.rid)
        delivered = self.pending.pop((a.client, a.rid), [])
        # orderly: SUCCESS and COMMIT consume the whole batch, SUSPEND and ROLLBACK none (R8.6); concurrent: the
        # messages up to ackIndex (R7.3)
        consumed = len(delivered) if self.model.orderly and a.status in (ORDERLY_SUCCESS, ORDERLY_COMMIT) else -1
        for k, d in enumerate(delivered):
            d["result"] = "success" if k <= a.ack_index or k < consumed else "failure"
        if self.model.orderly:  # what exceeded maxReconsumeTimes goes to %DLQ% (R8.7), counted as the loop counted
            counts = self.config.orderly_forward_counts_the_send
            return self._sent_back(s, t, now, [(r.queue, o, times + 1 if counts else times) for o, times in r.msgs])
        return self._sent_back(s, t, now, [(r.queue, o, None) for o, _ in r.msgs[a.ack_index + 1 :]])

    def _sent_back(
        self, s: Any, t: Any, now: int, candidates: list[tuple[int, int, int | None]], delay_level: int = 0
    ) -> list[dict[str, Any]]:
        """The send-backs of this step the broker accepted, as forwarded produces: each candidate (queue, offset,
        reconsumeTimes of the copy; None: the stored one + 1, as CONSUMER_SEND_MSG_BACK counts, R7.5) that
        reached %DLQ% or the schedule topic's queue delayLevel - 1 (``delay_level``; 0: the broker's choice, 3 +
        reconsumeTimes), which DeliverScheduled later forwards to %RETRY% (scheduled_src)."""
        c = self.config
        new_dlq = list(t.broker.dlq[len(s.broker.dlq) :])
        old_sched = list(s.broker.scheduled)
        new_sched = []
        for e in t.broker.scheduled:
            if e in old_sched:
                old_sched.remove(e)
            else:
                new_sched.append(e)
        out: list[dict[str, Any]] = []
        for q, o, times in candidates:
            topic, queue = self.names[q]
            src = {"topic": topic, "queue": queue, "offset": o}
            original = s.broker.queues[q].messages[o]
            counted = original.reconsume_times + 1 if times is None else times
            sent = original._replace(reconsume_times=counted, store_time=now, sent_back_at=now)
            if sent in new_dlq:
                new_dlq.remove(sent)
                out.append(self._forward(now, c.dlq_topic, 0, src))
                continue
            match = next((e for e in new_sched if e.message == sent), None)
            if match is None:
                continue  # not sent back: send-back failed, BROADCASTING drop, pq dropped, or orderly below the max
            new_sched.remove(match)
            level = delay_level or 3 + original.reconsume_times
            fwd = self._forward(now, "SCHEDULE_TOPIC_XXXX", level - 1, src)
            out.append(fwd)
            self.scheduled_src.setdefault(match.message, []).append(
                {"topic": fwd["topic"], "queue": fwd["queue"], "offset": fwd["offset"]}
            )
        return out

    def _forward(self, now: int, topic: str, queue: int, origin: dict[str, Any]) -> dict[str, Any]:
        key = (topic, queue)
        offset = self.counters.get(key, 0)
        self.counters[key] = offset + 1
        return {"time": now, "type": "produce", "topic": topic, "queue": queue, "offset": offset, "origin": origin}

    def _interrupted(self, s: Any, client: int) -> None:
        """A crash or shutdown ends the running listeners: their deliveries stay failures."""
        for r in s.clients[client].consuming:
            self.pending.pop((client, r.rid), None)

    def _membership(self, s: Any, t: Any, now: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for i, (before, after) in enumerate(zip(s.clients, t.clients, strict=True)):
            cid = self.cids[i]
            if not before.running and after.running:
                out.append({"time": now, "type": "join", "consumer": cid})
            for q, (old, newv) in enumerate(zip(before.pqs, after.pqs, strict=True)):
                had, has = old is not None, newv is not None
                if had and has and old.uid != newv.uid:
                    out.append(self._own(now, cid, q, False))
                    out.append(self._own(now, cid, q, True))
                elif had != has:
                    out.append(self._own(now, cid, q, has))
            if before.running and not after.running:
                out.append({"time": now, "type": "leave", "consumer": cid})
            elif after.running and after.view != before.view and self.model.clustering:
                members = None if after.view is None else [self.cids[j] for j in after.view]
                out.append({"time": now, "type": "view", "consumer": cid, "members": members})
        return out

    def _own(self, now: int, cid: str, q: int, owned: bool) -> dict[str, Any]:
        topic, queue = self.names[q]
        return {"time": now, "type": "own", "consumer": cid, "topic": topic, "queue": queue, "owned": owned}


# The model's commit causes (Event.cause of "commit-landed") that a history declares, in its vocabulary: a client's
# commit applying a 4.9.8 reset (R3.10a), and the OFFSET_ILLEGAL correction (R5.7; in 5.x also the adoption of a
# server-side reset, R3.10b), both declared causes of a falling broker offset in the model (INV-8r).
_MODEL_COMMIT_CAUSES: Final = {"admin-reset-client": "reset", "offset-illegal-fix": "offset_illegal"}
# Faults whose removal of an offset the generated history shows as a "failover" commit (the broker's table,
# a consumer's file); the others are written into the positioning skip as its "fault".
_FAULTS_SHOWN_AS_COMMITS: Final = frozenset({"broker-crash", "corrupt-offset-file", "corrupt-local-offset-file"})


def _runs(bits: int) -> list[tuple[int, int]]:
    """Maximal runs of set bits as [start, end) ranges."""
    out = []
    o = 0
    while bits:
        if bits & 1:
            start = o
            while bits & 1:
                bits >>= 1
                o += 1
            out.append((start, o))
        else:
            low = (bits & -bits).bit_length() - 1
            bits >>= low
            o += low
    return out


def write_history(events: Iterable[dict[str, Any]], path: str | Path) -> int:
    """Write a history (header first) as JSON Lines; returns the number of lines."""
    n = 0
    with open(path, "w", encoding="utf-8") as fh:
        for ev in events:
            fh.write(json.dumps(ev) + "\n")
            n += 1
    return n


def lines_of(events: Iterable[dict[str, Any]]) -> list[str]:
    """A history as lines of text (each ending in a newline), for ``check_lines``."""
    return [json.dumps(ev) + "\n" for ev in events]
