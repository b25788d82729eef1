"""check-history: every anomaly on hand-written histories, the allow-list per mode, the reader's
errors (fuzzed), the schema, model runs (correct and with a planted bug), the CLI, and one Spark run
that must give the local report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmqspec.bench_history import write_synthetic_history
from rmqspec.cli import main
from rmqspec.properties import fates
from rmqspec.properties.history import (
    ADMIN_RESET,
    ANOMALIES,
    CLASSES,
    COMMIT_CAUSES,
    EVENT_TYPES,
    FAILURE_DROPPED,
    FIRST_START,
    LOCAL_RETRY,
    OFFSET_ILLEGAL_FIX,
    REMOVAL_CAUSES,
    REQUIRED,
    RESUMED_AT_STORED,
    RESUMED_WITHOUT_OFFSET,
    SKIP_CAUSES,
    SKIP_FAULTS,
    HistoryError,
    allow_list_markdown,
    allowed_anomalies,
    check_history,
    check_lines,
    describe,
    history_from_model_run,
    history_schema,
    lines_of,
    model_run,
    read_lines,
    schema_text,
    validate_event,
    validate_event_carefully,
    write_history,
)
from rmqspec.properties.profiles import scaled
from rmqspec.spec.config import BROADCASTING, Config

ROOT = Path(__file__).resolve().parent.parent
A, B, C = "10.0.0.1@c0", "10.0.0.2@c1", "10.0.0.3@c2"


# --- tiny history builders ---------------------------------------------------------------------
def header(
    mode: str = "CLUSTERING", consumption: str = "concurrent", rocketmq: str = "4.9.8", strategy: str | None = None
) -> dict[str, Any]:
    out = {
        "format": "rmqspec-history",
        "version": 1,
        "mode": mode,
        "consumption": consumption,
        "rocketmq": rocketmq,
        "group": "G",
    }
    if strategy is not None:
        out["strategy"] = strategy
    return out


def P(t: float, q: int, o: int, topic: str = "T", origin: dict[str, Any] | None = None) -> dict[str, Any]:
    ev: dict[str, Any] = {"time": t, "type": "produce", "topic": topic, "queue": q, "offset": o}
    if origin is not None:
        ev["origin"] = origin
    return ev


def D(t: float, c: str, q: int, o: int, result: str | None = None, topic: str = "T") -> dict[str, Any]:
    ev: dict[str, Any] = {"time": t, "type": "deliver", "consumer": c, "topic": topic, "queue": q, "offset": o}
    if result is not None:
        ev["result"] = result
    return ev


def K(t: float, c: str, q: int, o: int | None, cause: str | None = None) -> dict[str, Any]:
    ev: dict[str, Any] = {"time": t, "type": "commit", "consumer": c, "topic": "T", "queue": q, "offset": o}
    if cause is not None:
        ev["cause"] = cause
    return ev


def J(t: float, c: str) -> dict[str, Any]:
    return {"time": t, "type": "join", "consumer": c}


def L(t: float, c: str) -> dict[str, Any]:
    return {"time": t, "type": "leave", "consumer": c}


def V(t: float, c: str, members: list[str] | None) -> dict[str, Any]:
    return {"time": t, "type": "view", "consumer": c, "members": members}


def O(t: float, c: str, q: int, owned: bool = True) -> dict[str, Any]:  # noqa: E743 - reads like the event
    return {"time": t, "type": "own", "consumer": c, "topic": "T", "queue": q, "owned": owned}


def S(
    t: float, q: int, start: int, end: int, cause: str, c: str | None = None, fault: str | None = None
) -> dict[str, Any]:
    ev: dict[str, Any] = {"time": t, "type": "skip", "topic": "T", "queue": q, "from": start, "to": end, "cause": cause}
    if c is not None:
        ev["consumer"] = c
    if fault is not None:
        ev["fault"] = fault
    return ev


def check(*events: dict[str, Any], **mode: str) -> dict[str, Any]:
    return check_lines(lines_of([header(**mode), *events]))


def classes(report: dict[str, Any], name: str) -> list[str]:
    return [e["class"] for e in report[name]]


# --- lost, skipped -------------------------------------------------------------------------------
def test_delivery_below_commit_never_made_is_lost() -> None:
    r = check(P(1, 0, 0), P(1, 0, 1), P(1, 0, 2), D(2, A, 0, 0), D(2, A, 0, 2), K(3, A, 0, 3))
    assert not r["valid"]
    assert r["lost"] == [
        {
            "class": "lost",
            "topic": "T",
            "queue": 0,
            "offset": 1,
            "consumer": None,
            "committed": 3,
            "failed_deliveries": 0,
            "produce_line": 3,
            "commit_line": 7,
        }
    ]
    assert r["not_tolerated"] == {"lost": 1} and r["bad_anomaly_types"] == ["lost"]
    assert r["fates"] == {"consumed-and-committed": 2, "lost": 1}


def test_messages_at_or_above_the_final_commit_are_not_owed() -> None:
    r = check(P(1, 0, 0), P(1, 0, 1), P(1, 0, 2), D(2, A, 0, 0), K(3, A, 0, 1))
    assert r["valid"] and r["lost_count"] == 0


def test_failed_delivery_committed_past_without_send_back_is_lost() -> None:
    r = check(P(1, 0, 0), D(2, A, 0, 0, "failure"), K(3, A, 0, 1))
    assert classes(r, "lost") == ["lost:failed_delivery"] and r["lost"][0]["failed_deliveries"] == 1
    assert not r["valid"]


def test_failed_delivery_forwarded_to_the_retry_topic_is_not_lost() -> None:
    sent_back = {"topic": "T", "queue": 0, "offset": 0}
    r = check(P(1, 0, 0), D(2, A, 0, 0, "failure"), P(2, 0, 0, topic="%RETRY%G", origin=sent_back), K(3, A, 0, 1))
    assert r["valid"] and r["lost_count"] == 0


def test_failed_then_successful_redelivery_is_consumed() -> None:
    r = check(P(1, 0, 0), D(2, A, 0, 0, "failure"), D(7, A, 0, 0, "success"), K(8, A, 0, 1))
    assert r["valid"] and r["lost_count"] == 0 and r["duplicated"][0]["successes"] == 1


def test_broadcasting_failure_drop_is_tolerated_for_concurrent_consumers_only() -> None:
    events = (P(1, 0, 0), D(2, A, 0, 0, "failure"), K(3, A, 0, 1))
    concurrent = check(*events, mode="BROADCASTING")
    assert concurrent["valid"] and "lost:failed_delivery" in concurrent["tolerated"]
    orderly = check(*events, mode="BROADCASTING", consumption="orderly")
    assert not orderly["valid"] and orderly["not_tolerated"] == {"lost:failed_delivery": 1}


def test_broadcasting_owes_each_consumer_its_own_messages() -> None:
    r = check(
        P(1, 0, 0),
        P(1, 0, 1),
        D(2, A, 0, 0),
        D(2, A, 0, 1),
        D(2, B, 0, 0),
        K(3, A, 0, 2),
        K(3, B, 0, 2),
        mode="BROADCASTING",
    )
    assert [(e["consumer"], e["offset"]) for e in r["lost"]] == [(B, 1)]


def test_consume_from_last_skip_excuses_offsets_of_a_new_group() -> None:
    r = check(P(1, 0, 0), P(1, 0, 1), S(2, 0, 0, 2, "consume_from_last", A), P(3, 0, 2), D(4, A, 0, 2), K(5, A, 0, 3))
    assert r["valid"] and r["lost_count"] == 0
    assert r["skipped"][0]["excused"] == 2 and r["tolerated"]["skipped"]["count"] == 1


def test_consume_from_last_skip_is_no_excuse_once_an_offset_is_committed() -> None:
    # S1: consumeFromWhere only applies when the broker holds no offset for the group.
    r = check(
        P(1, 0, 0), P(1, 0, 1), D(2, A, 0, 0), K(3, A, 0, 1), S(4, 0, 0, 2, "consume_from_last", A), K(5, A, 0, 2)
    )
    assert classes(r, "lost") == ["lost"] and r["lost"][0]["offset"] == 1


def test_consume_from_last_skip_excuses_again_after_failover_dropped_the_offset() -> None:
    r = check(
        P(1, 0, 0), P(1, 0, 1), D(2, A, 0, 0), K(3, A, 0, 1), K(4, "broker", 0, None, "failover"),
        S(5, 0, 0, 2, "consume_from_last", A), K(6, A, 0, 2),
    )  # fmt: skip
    assert r["valid"] and r["skipped_count"] == 1


def test_forward_reset_declares_the_offsets_it_jumps_over_skipped() -> None:
    r = check(P(1, 0, 0), P(1, 0, 1), P(1, 0, 2), D(2, A, 0, 0), K(3, A, 0, 1), K(4, "admin", 0, 3, "reset"))
    assert r["valid"] and r["skipped"][0]["cause"] == "reset" and r["skipped"][0]["excused"] == 2


def test_filtered_skip_without_consumer_applies_to_every_broadcast_consumer() -> None:
    r = check(
        P(1, 0, 0), S(1, 0, 0, 1, "filtered"), P(1, 0, 1), D(2, A, 0, 1), D(2, B, 0, 1), K(3, A, 0, 2), K(3, B, 0, 2),
        mode="BROADCASTING",
    )  # fmt: skip
    assert r["valid"] and r["skipped"][0]["excused"] == 2


# --- duplicated, unexpected ----------------------------------------------------------------------
def test_second_successful_delivery_by_the_same_pq_has_no_cause_in_every_mode() -> None:
    for mode in ("CLUSTERING", "BROADCASTING"):
        for consumption in ("concurrent", "orderly"):
            for version in ("4.9.8", "5.x"):
                r = check(
                    J(0, A), O(0, A, 0), P(1, 0, 0), D(2, A, 0, 0), D(3, A, 0, 0),
                    mode=mode, consumption=consumption, rocketmq=version,
                )  # fmt: skip
                assert r["not_tolerated"] == {"duplicated": 1} and r["redelivery_causes"] == {"no cause": 1}
                assert "INV-22" in r["duplicated"][0]["uncaused"] and r["duplicated"][0]["uncaused_line"] == 6


def test_a_failed_delivery_retried_by_the_same_pq_is_a_local_retry_except_in_broadcasting_concurrent() -> None:
    events = (J(0, A), O(0, A, 0), P(1, 0, 0), D(2, A, 0, 0, "failure"), D(3, A, 0, 0))
    for mode, consumption, valid in (
        ("CLUSTERING", "concurrent", True),
        ("CLUSTERING", "orderly", True),
        ("BROADCASTING", "orderly", True),
        ("BROADCASTING", "concurrent", False),  # R7.3: a failed message is dropped, never retried
    ):
        r = check(*events, mode=mode, consumption=consumption)
        assert r["valid"] is valid, (mode, consumption)
        assert r["redelivery_causes"] == ({LOCAL_RETRY: 1} if valid else {"no cause": 1})
        assert classes(r, "duplicated") == ["duplicated:caused" if valid else "duplicated"]


def test_duplicate_window_says_what_happened_between_the_deliveries() -> None:
    r = check(
        J(0, A), J(0, B), V(0, A, [A, B]), V(0, B, [A, B]), O(0, A, 0),
        P(1, 0, 0), D(2, A, 0, 0), K(3, A, 0, 1), L(4, A), O(4, B, 0), V(4, B, [B]), K(4, B, 0, 0, "reset"),
        D(5, B, 0, 0), P(6, 0, 1), D(7, B, 0, 1), D(8, B, 0, 1),
    )  # fmt: skip
    first, second = r["duplicated"]
    assert (first["offset"], first["count"], first["first_time"], first["last_time"]) == (0, 2, 2, 5)
    assert first["consumers"] == [A, B]
    assert first["after_membership_change"] and first["after_ownership_change"] and first["after_commit_decrease"]
    assert not (
        second["after_membership_change"] or second["after_ownership_change"] or second["after_commit_decrease"]
    )


def test_broadcast_delivery_to_two_consumers_is_not_a_duplicate() -> None:
    r = check(P(1, 0, 0), D(2, A, 0, 0), D(2, B, 0, 0), D(3, B, 0, 0), mode="BROADCASTING")
    assert [(e["consumer"], e["count"]) for e in r["duplicated"]] == [(B, 2)]
    assert r["counts"][0]["distinct_delivered"] == 1


def test_delivery_never_produced_is_unexpected() -> None:
    r = check(P(1, 0, 0), D(2, A, 0, 0), D(3, A, 0, 5), D(4, B, 0, 5), D(4, A, 1, 0))
    assert [(e["queue"], e["offset"], e["deliveries"], e["consumers"]) for e in r["unexpected"]] == [
        (0, 5, 2, [A, B]),
        (1, 0, 1, [A]),
    ]
    # B's delivery of 5 is also a redelivery no event explains (no own or join of B)
    assert r["not_tolerated"] == {"unexpected": 2, "duplicated": 1}


# --- fates and the causal allow-list --------------------------------------------------------------
def test_every_message_consumed_and_committed_has_that_fate_and_nothing_else() -> None:
    clustering = check(
        J(0, A), V(0, A, [A]), O(0, A, 0), O(0, A, 1), P(1, 0, 0), P(1, 0, 1), P(1, 1, 0),
        D(2, A, 0, 0), D(2, A, 0, 1), D(2, A, 1, 0), K(3, A, 0, 2), K(3, A, 1, 1),
    )  # fmt: skip
    assert clustering["valid"] and clustering["fates"] == {"consumed-and-committed": 3}
    assert clustering["fate_harm"] == {} and clustering["redelivery_causes"] == {}
    # BROADCASTING: one fate per message and consumer (each consumer is a ledger)
    broadcasting = check(
        J(0, A), J(0, B), P(1, 0, 0), D(2, A, 0, 0), D(2, B, 0, 0), K(3, A, 0, 1), K(3, B, 0, 1), mode="BROADCASTING"
    )
    assert broadcasting["valid"] and broadcasting["fates"] == {"consumed-and-committed": 2}


def test_each_produced_message_gets_exactly_one_fate() -> None:
    r = check(
        P(1, 0, 0), S(1, 0, 0, 1, "filtered"), P(1, 0, 1), P(1, 0, 2), P(1, 0, 3), P(1, 0, 4),
        D(2, A, 0, 1), D(2, A, 0, 2), D(2, A, 0, 3, "failure"),
        P(2, 0, 3, topic="%RETRY%G", origin={"topic": "T", "queue": 0, "offset": 3}), K(3, A, 0, 3),
        P(4, 0, 0, topic="%DLQ%G", origin={"topic": "%RETRY%G", "queue": 0, "offset": 3}),
        P(4, 0, 0, topic="SCHEDULE_TOPIC_XXXX"),  # a stage of a send-back: no fate of its own
    )  # fmt: skip
    assert r["valid"] and r["fates"] == {
        "filtered-by-tag": 1,  # 0
        "consumed-and-committed": 2,  # 1, 2
        "consumed-not-yet-committed": 1,  # 3: sent back (forwarded) but above the committed offset
        "pending": 1,  # 4
        "retry: consumed-not-yet-committed": 1,  # the retry copy, forwarded to the DLQ
        "dead-lettered": 1,
    }
    assert sum(r["fates"].values()) == r["totals"]["produced"] - 1  # every message but the schedule stage


# Consumer A owns queue 0 of four messages, consumes 0 and 1, its commit of 2 lands; it restarts and
# positions with CONSUME_FROM_LAST at 4, skipping 2 and 3 (lines 2-12 and 13-17; the header is line 1).
JUMP = (J(0, A), O(0, A, 0), P(1, 0, 0), P(1, 0, 1), P(1, 0, 2), P(1, 0, 3), D(2, A, 0, 0), D(2, A, 0, 1),
        K(3, A, 0, 2), L(4, A), J(5, A))  # fmt: skip
AFTER = (S(6, 0, 2, 4, "consume_from_last", A), O(6, A, 0), P(7, 0, 4), D(8, A, 0, 4), K(9, A, 0, 5))


def test_consume_from_last_jump_after_a_commit_with_no_cause_is_lost() -> None:
    r = check(*JUMP, *AFTER)
    assert not r["valid"] and r["not_tolerated"] == {"lost": 2}
    assert r["fates"] == {"consumed-and-committed": 3, "lost": 2}
    first = r["lost"][0]
    # the loss names the message and the events that show it: its produce, the commit that passed it, and the
    # positioning skip that could not excuse it
    assert (first["queue"], first["offset"], first["produce_line"], first["commit_line"]) == (0, 2, 6, 17)
    assert first["refused_skip"] == {
        "line": 13,
        "cause": "consume_from_last",
        "why_refused": "it held committed offset 2 (line 10) and the history shows no cause",
    }


def test_the_same_jump_after_an_admin_reset_is_skipped_by_the_reset() -> None:
    r = check(*JUMP, K(5, "admin", 0, 4, "reset"), *AFTER)
    assert r["valid"] and r["fates"] == {"consumed-and-committed": 3, "skipped: admin-reset": 2}
    assert r["skipped"][0]["fate"] == "skipped: admin-reset" and r["fate_harm"] == {}


@pytest.mark.parametrize(
    ("removal", "skip_fault", "fate", "harm"),
    [
        (K(5, "admin", 0, None, "reset"), None, "skipped: consume-from-last: admin-reset", False),
        (K(5, "broker", 0, None, "failover"), None, "skipped: consume-from-last: broker-crash", True),
        (None, "query-error", "skipped: consume-from-last: query-error", True),
        (None, "failover-to-a-replica-lacking-the-offset",
         "skipped: consume-from-last: failover-to-a-replica-lacking-the-offset", True),
    ],
)  # fmt: skip
def test_a_jump_whose_missing_offset_has_a_cause_is_skipped_with_that_cause(
    removal: dict[str, Any] | None, skip_fault: str | None, fate: str, harm: bool
) -> None:
    skip = S(6, 0, 2, 4, "consume_from_last", A, fault=skip_fault)
    r = check(*JUMP, *([removal] if removal else []), skip, *AFTER[1:])
    assert r["valid"], r["not_tolerated"]
    assert r["fates"] == {"consumed-and-committed": 3, fate: 2}
    assert r["fate_harm"] == ({fate: 2} if harm else {})  # a skip a fault caused is that fault's harm


def test_first_start_positioning_is_skipped_with_first_start() -> None:
    r = check(P(1, 0, 0), P(1, 0, 1), S(2, 0, 0, 2, "consume_from_last", A), P(3, 0, 2), D(4, A, 0, 2), K(5, A, 0, 3))
    assert r["valid"] and r["fates"] == {"consumed-and-committed": 1, "skipped: consume-from-last: first-start": 2}


def test_redeliveries_are_counted_per_cause() -> None:
    r = check(
        *AGREED, O(1, A, 0), O(1, B, 1), P(2, 0, 0), P(2, 0, 1), P(2, 0, 2),
        D(3, A, 0, 0), D(3, A, 0, 1, "failure"), D(4, A, 0, 1),  # the failed send-back's local retry (R7.3)
        D(4, A, 0, 2), K(5, A, 0, 2),  # 2 is consumed, its commit never lands: the unpersisted window
        L(6, A), O(6, B, 0), V(6, B, [B]), D(7, B, 0, 2), K(8, B, 0, 3),  # B takes queue 0 over, resumes at 2
        P(9, 1, 0), D(9, B, 1, 0), L(10, B), J(11, B), V(11, B, [B]), O(11, B, 0), O(11, B, 1),
        D(12, B, 1, 0),  # B restarts; queue 1 has no offset yet: its new pq starts from consumeFromWhere
    )  # fmt: skip
    assert r["valid"], r["not_tolerated"]
    assert r["redelivery_causes"] == {LOCAL_RETRY: 1, RESUMED_WITHOUT_OFFSET: 1, RESUMED_AT_STORED: 1}
    assert {(e["queue"], e["offset"]): e["causes"] for e in r["duplicated"]} == {
        (0, 1): {LOCAL_RETRY: 1},
        (0, 2): {RESUMED_AT_STORED: 1},
        (1, 0): {RESUMED_WITHOUT_OFFSET: 1},
    }
    assert r["fates"] == {"consumed-and-committed": 3, "consumed-not-yet-committed": 1}
    summary = describe(r)
    assert "redeliveries: local-retry 1, resumed-at-consume-from-where 1, resumed-at-stored-offset 1" in summary
    assert "fates: consumed-and-committed 3, consumed-not-yet-committed 1" in summary


def test_a_redelivery_with_no_cause_the_history_shows_is_a_violation() -> None:
    # B takes queue 0 over and resumes *above* the committed offset's window yet delivers 0 again, which the
    # group had committed: its pq started when the committed offset was 2.
    r = check(
        *AGREED, O(1, A, 0), P(2, 0, 0), P(2, 0, 1), D(3, A, 0, 0), D(3, A, 0, 1), K(4, A, 0, 2),
        O(5, A, 0, False), O(5, B, 0), D(6, B, 0, 0),
    )  # fmt: skip
    assert r["not_tolerated"] == {"duplicated": 1} and r["redelivery_causes"] == {"no cause": 1}
    entry = r["duplicated"][0]
    assert entry["uncaused_line"] == 14 and "committed offset was 2" in entry["uncaused"]
    # With no own or join event of the consumer, the history cannot show where its pq started: no cause either.
    unexplained = check(P(1, 0, 0), D(2, A, 0, 0), D(3, B, 0, 0))
    assert unexplained["not_tolerated"] == {"duplicated": 1}
    assert "no own or join event" in unexplained["duplicated"][0]["uncaused"]


# --- planted bugs in a synthetic foreign client ------------------------------------------------------
def foreign_client(bug: str | None = None) -> list[dict[str, Any]]:
    """The history of a small synthetic foreign client group (A and B, queue 0 of six messages, CLUSTERING).

    A consumes 0-2 and its commit of 3 lands; it delivers 3 and crashes before committing it; B takes the
    queue over and resumes at the committed offset, so it redelivers 3 (resumed-at-stored-offset), and
    commits 6. Planted bugs: ``resume_one_behind``: B resumes one below the committed offset (like the model's
    ``resume_memory_one_behind``/``update_offset_stores_one_less``), redelivering 2, which the group had
    committed; ``forgets_offsets``: the broker drops the group's offset when its last consumer leaves (the
    model's ``empty_group_loses_offsets``): A is alone, its restart finds no offset and positions at the end
    with CONSUME_FROM_LAST, skipping 3-5."""
    if bug == "forgets_offsets":
        return [
            header(), J(0, A), V(0, A, [A]), O(0, A, 0), *(P(1, 0, o) for o in range(6)),
            D(2, A, 0, 0), D(2, A, 0, 1), D(2, A, 0, 2), K(3, A, 0, 3), L(4, A),
            K(4, "broker", 0, None),  # a harness polling the broker sees the offset vanish, with no cause
            J(5, A), S(6, 0, 0, 6, "consume_from_last", A), O(6, A, 0), V(6, A, [A]),
            P(7, 0, 6), D(8, A, 0, 6), K(9, A, 0, 7),
        ]  # fmt: skip
    resume = 2 if bug == "resume_one_behind" else 3
    return [
        header(), *AGREED, O(1, A, 0), O(1, B, 1), *(P(2, 0, o) for o in range(6)),
        D(3, A, 0, 0), D(3, A, 0, 1), D(3, A, 0, 2), K(4, A, 0, 3), D(5, A, 0, 3),
        L(6, A), O(6, B, 0), V(6, B, [B]), *(D(7, B, 0, o) for o in range(resume, 6)), K(8, B, 0, 6),
    ]  # fmt: skip


def test_planted_foreign_bugs_are_refuted_only_by_the_causal_allow_list() -> None:
    """Each planted bug's history shows nothing but what the old category tolerance accepted: before the
    causal allow-list, ``allowed_anomalies`` tolerated the class ``duplicated`` in every mode, whatever caused
    it, and a consume_from_last skip excused every offset once the ledger's committed offset was null, however
    it got there (the null itself was a tolerated ``commit_decreased:other_writer``: another writer, R3.2). So
    both histories were valid. Now a redelivery, a positioning skip and a removal by another writer need a cause
    the history shows."""
    correct = check_lines(lines_of(foreign_client()))
    assert correct["valid"] and correct["redelivery_causes"] == {RESUMED_AT_STORED: 1}
    assert correct["fates"] == {"consumed-and-committed": 6}

    behind = check_lines(lines_of(foreign_client("resume_one_behind")))
    assert set(behind["not_tolerated"]) == {"duplicated"}  # the only finding: the old allow-list tolerated it
    assert behind["redelivery_causes"] == {"no cause": 1, RESUMED_AT_STORED: 1}
    (bad,) = [e for e in behind["duplicated"] if e["class"] == "duplicated"]
    assert bad["offset"] == 2 and "committed offset was 3" in bad["uncaused"]

    forgets = check_lines(lines_of(foreign_client("forgets_offsets")))
    # 3, 4, 5: the skip is refused; and the removal itself, no longer a tolerated other_writer decrease (what the
    # old check stopped at): no consumer's commit removes an offset, so a removal needs its declared cause
    assert forgets["not_tolerated"] == {"lost": 3, "commit_decreased:other_writer_uncaused": 1}
    (removal,) = forgets["commit_decreased"]
    assert removal["to"] is None and "a removal needs its declared cause" in removal["why_refused"]
    assert all("removed at line 16 with no cause" in e["refused_skip"]["why_refused"] for e in forgets["lost"])
    assert forgets["fates"] == {"consumed-and-committed": 4, "lost": 3}
    # the same history with the removal's cause recorded (a broker failover to its flushed file) passes
    caused = check_lines(
        lines_of(
            {**ev, "cause": "failover"} if ev.get("consumer") == "broker" else ev
            for ev in foreign_client("forgets_offsets")
        )
    )
    assert caused["valid"] and caused["fate_harm"] == {"skipped: consume-from-last: broker-crash": 3}


def handover(bug: str | None = None) -> list[dict[str, Any]]:
    """A synthetic foreign client group whose queue 0 (six messages) moves from A to B and back (CLUSTERING,
    views agreeing, one owner at a time): A consumes 0-2 and commits 3; B takes the queue over, reads 3, consumes 3
    and 4 and commits 5; A takes it back, reads 5, consumes 5 and commits 6; then B's commit of 5, sent oneway
    when it dropped the queue (R9.5, R2.6), lands over A's 6: a stale owner's late commit (last writer wins,
    R3.2), which A's next persist writes over again. Planted bugs: ``late_commit_below_start``: B's late commit
    carries 2, below the 3 B read when its ownership started (like the model's ``position_seeds_memory_one_below``: a
    memory entry seeded below the position), a value B never had; ``persists_a_queue_it_never_owned``: C, which
    never owned queue 0, commits 4 over A's 6 (a client persisting offsets of queues outside its allocation).
    Neither history shows anything the old check refused: it tolerated every decrease by another writer."""
    members = [A, B, C] if bug == "persists_a_queue_it_never_owned" else [A, B]
    late = {"late_commit_below_start": (B, 2), "persists_a_queue_it_never_owned": (C, 4)}.get(bug or "", (B, 5))
    return [
        header(), *(J(0, m) for m in members), *(V(1, m, members) for m in members),
        O(1, A, 0), *(P(2, 0, o) for o in range(6)), *(D(3, A, 0, o) for o in range(3)), K(4, A, 0, 3),
        O(5, A, 0, False), O(5, B, 0), D(6, B, 0, 3), D(6, B, 0, 4), K(7, B, 0, 5),
        O(8, B, 0, False), O(8, A, 0), D(9, A, 0, 5), K(10, A, 0, 6), K(11, late[0], 0, late[1]), K(12, A, 0, 6),
    ]  # fmt: skip


def test_planted_foreign_offset_bugs_are_refuted_only_by_the_causal_decrease_rule() -> None:
    """A decrease by another writer is tolerated only with the race the history shows and a value the writer's
    ownership could have had (INV-8r's stale-owner cause): the old check tolerated both planted bugs."""
    correct = check_lines(lines_of(handover()))
    assert correct["valid"] and classes(correct, "commit_decreased") == ["commit_decreased:other_writer"]
    (late,) = correct["commit_decreased"]
    assert (late["from"], late["to"], late["race"], late["start"]) == (6, 5, "stale-owner", 3)
    assert "R3.2" in correct["tolerated"]["commit_decreased:other_writer"]["reason"]

    below = check_lines(lines_of(handover("late_commit_below_start")))
    assert below["not_tolerated"] == {"commit_decreased:other_writer_uncaused": 1}  # the only finding
    (e,) = below["commit_decreased"]
    assert "commits 2 below where its ownership started (3, the committed offset it read at line" in e["why_refused"]

    foreign = check_lines(lines_of(handover("persists_a_queue_it_never_owned")))
    assert foreign["not_tolerated"] == {"commit_decreased:other_writer_uncaused": 1}
    assert "shows no ownership of the queue by" in foreign["commit_decreased"][0]["why_refused"]


def test_fate_and_cause_names_are_the_models() -> None:
    """The history's fates reuse properties/fates.py's constants, and its causes are the model's names."""
    import inspect
    import sys

    from rmqspec.spec import admin_reset, rebalance
    from rmqspec.spec.model import Model

    # the model's source: spec/model.py and every concern module it mixes in
    source = "".join(inspect.getsource(sys.modules[cls.__module__]) for cls in Model.__mro__[:-1])
    assert {"consume-from-last", "consume-from-timestamp"} <= rebalance.POSITIONED_WITHOUT_OFFSET
    assert OFFSET_ILLEGAL_FIX in admin_reset.RESET_APPLY_CAUSES
    for name in (FIRST_START, ADMIN_RESET, FAILURE_DROPPED, LOCAL_RETRY, "resumed-at-", "stored-offset"):
        assert f'"{name}"' in source, name
    assert set(SKIP_FAULTS) == fates.FAULT_CAUSES
    assert {"broker-crash", "corrupt-local-offset-file"} <= set(REMOVAL_CAUSES.values())
    assert all(fates.is_harm(cause) for cause in ("broker-crash", "corrupt-local-offset-file"))


# --- commits -------------------------------------------------------------------------------------
def test_commit_decrease_by_the_same_consumer_without_cause_is_a_bug() -> None:
    r = check(P(1, 0, 0), P(1, 0, 1), D(2, A, 0, 0), D(2, A, 0, 1), K(3, A, 0, 2), K(4, A, 0, 1))
    assert classes(r, "commit_decreased") == ["commit_decreased"]
    assert r["commit_decreased"][0]["from"] == 2 and r["commit_decreased"][0]["to"] == 1
    assert not r["valid"]


def test_commit_decrease_with_a_declared_cause_is_tolerated() -> None:
    for cause in COMMIT_CAUSES:
        r = check(P(1, 0, 0), D(2, A, 0, 0), K(3, A, 0, 1), K(4, A, 0, 0, cause))
        assert r["valid"] and classes(r, "commit_decreased") == ["commit_decreased:declared"], cause


def test_a_decrease_by_another_consumer_needs_the_ownership_the_history_shows() -> None:
    # Without own or join events nothing shows that A owned the queue, nor that its ownership ended: no stale owner.
    events = (P(1, 0, 0), P(1, 0, 1), D(2, A, 0, 0), D(2, B, 0, 1), K(3, B, 0, 2), K(4, A, 0, 1))
    r = check(*events)
    assert r["not_tolerated"] == {"commit_decreased:other_writer_uncaused": 1}
    assert "shows no ownership of the queue by" in r["commit_decreased"][0]["why_refused"]
    # With joins only (no own event of the topic), a join A delivered from and a leave before its commit landed
    # show a stale owner: the commit of its shutdown lands after B's (R4.4, R2.5)
    left = check(J(0, A), J(0, B), *events[:5], L(3.5, A), events[5])
    assert left["valid"] and [(e["class"], e.get("race")) for e in left["commit_decreased"]] == [
        ("commit_decreased:other_writer", "stale-owner")
    ]
    # A still running: no race the history shows (two owners at once, judged by the views of own events only)
    running = check(J(0, A), J(0, B), *events)
    assert running["not_tolerated"] == {"commit_decreased:other_writer_uncaused": 1}
    assert "shows no views to judge it by" in running["commit_decreased"][0]["why_refused"]


def test_a_negative_commit_is_commit_negative_and_no_decrease() -> None:
    """The issue's example: a commit of -1 after 5 by another consumer passed as a tolerated
    commit_decreased:other_writer beside its commit_negative; -1 is no offset a consumer had, so it is reported
    once, as commit_negative (INV-7), by another writer or by the writer itself."""
    before = (*AGREED, O(1, A, 0), *(P(2, 0, o) for o in range(5)), *(D(3, A, 0, o) for o in range(5)), K(4, A, 0, 5))
    for who in (B, A):
        r = check(*before, K(5, who, 0, -1))
        assert r["not_tolerated"] == {"commit_negative": 1} and r["commit_negative"][0]["offset"] == -1, who
        assert r["commit_decreased"] == [] and r["tolerated"] == {}, who


def test_a_value_the_new_owner_never_read_may_be_lowered_but_not_one_it_read() -> None:
    # A hands the queue to B at 3; A's late commit of 5 lands after B's start, so B never read it, and B's commit of
    # 4 lowers it: the same race seen from the new owner (INV-8r: a pq that never read the value it undercuts)
    head = (*AGREED, O(1, A, 0), *(P(2, 0, o) for o in range(6)), *(D(3, A, 0, o) for o in range(5)), K(4, A, 0, 3))
    r = check(*head, O(5, A, 0, False), O(5, B, 0), K(6, A, 0, 5), D(7, B, 0, 3), K(8, B, 0, 4))
    assert r["valid"] and [(e["race"], e["start"]) for e in r["commit_decreased"]] == [("undercuts-a-stale-commit", 3)]
    # below the 3 B read at its own line: a value B never had
    below = check(*head, O(5, A, 0, False), O(5, B, 0), K(6, A, 0, 5), K(8, B, 0, 2))
    assert below["not_tolerated"] == {"commit_decreased:other_writer_uncaused": 1}
    assert "below where its ownership started (3" in below["commit_decreased"][0]["why_refused"]
    # A's late 5 landed before B took the queue: B read 5 at its own line, and lowering it is no race
    read = check(*head, O(5, A, 0, False), K(5, A, 0, 5), O(5, B, 0), D(7, B, 0, 5), K(8, B, 0, 4))
    assert read["not_tolerated"] == {"commit_decreased:other_writer_uncaused": 1}
    assert "was there when its ownership started" in read["commit_decreased"][0]["why_refused"]


def test_two_owners_at_once_explain_a_decrease_only_where_the_allow_list_tolerates_them() -> None:
    # A's view holds only A, B's both: both own queue 0 and commit their own progress until A's view catches up
    events = (
        J(0, A), J(0, B), V(1, A, [A]), V(1, B, [A, B]), O(1, A, 0), O(1, B, 0), *(P(2, 0, o) for o in range(4)),
        *(D(3, A, 0, o) for o in range(3)), D(3, B, 0, 0), K(4, A, 0, 3), K(5, B, 0, 1), V(6, A, [A, B]),
        O(6, A, 0, False),
    )  # fmt: skip
    concurrent = check(*events)
    assert concurrent["valid"] and set(concurrent["tolerated"]) >= {"double_owned:views_differ"}
    assert [e["race"] for e in concurrent["commit_decreased"]] == ["overlapping-owners"]
    # orderly consumers lock the queue (R8.1, R8.4): two owners at once are RMQ-09, and no cause of a decrease
    orderly = check(*events, consumption="orderly")
    assert orderly["not_tolerated"] == {"double_owned:views_differ": 1, "commit_decreased:other_writer_uncaused": 1}
    assert "held the queue at once" in orderly["commit_decreased"][0]["why_refused"]


def test_a_commit_landing_over_a_reset_it_never_read_is_tolerated_but_not_one_it_read() -> None:
    # 5.x server-side reset (R3.10b): the admin writes 4 after B took the queue; the pull that takes the pending reset
    # still lands B's piggy-back of 2 over it, and B then adopts 4 (the OFFSET_ILLEGAL path, R5.7)
    head = (*AGREED, O(1, B, 0), *(P(2, 0, o) for o in range(6)), D(3, B, 0, 0), K(4, B, 0, 1))
    r = check(*head, K(5, "admin", 0, 4, "reset"), D(6, B, 0, 1), K(7, B, 0, 2), K(8, B, 0, 4, "offset_illegal"))
    assert r["valid"] and [e.get("race") for e in r["commit_decreased"]] == ["undercuts-a-reset"], r["not_tolerated"]
    # the reset landed before B's ownership started: B read 4, and its 2 is below where it started
    read = check(*AGREED, O(1, A, 0), *(P(1, 0, o) for o in range(6)), K(1, "admin", 0, 4, "reset"),
                 O(2, A, 0, False), O(2, B, 0), D(3, B, 0, 4), K(4, B, 0, 2))  # fmt: skip
    assert read["not_tolerated"] == {"commit_decreased:other_writer_uncaused": 1}


def test_same_consumer_decrease_after_dropping_the_queue_is_a_stale_incarnation() -> None:
    r = check(
        O(0, A, 0), P(1, 0, 0), P(1, 0, 1), D(2, A, 0, 0), D(2, A, 0, 1), O(3, A, 0, False), O(4, A, 0),
        K(5, A, 0, 2), K(6, A, 0, 1),
    )  # fmt: skip
    assert r["valid"] and classes(r, "commit_decreased") == ["commit_decreased:stale_incarnation"]


def test_a_broadcast_consumer_restarting_with_a_lower_offset_is_a_bug() -> None:
    # The local offset file is written synchronously: no commit of the earlier process lands later.
    r = check(J(0, A), P(1, 0, 0), D(2, A, 0, 0), K(3, A, 0, 1), L(4, A), J(5, A), K(6, A, 0, 0), mode="BROADCASTING")
    assert r["not_tolerated"] == {"commit_decreased:stale_incarnation": 1}


def test_lowering_an_offset_illegal_correction_is_tolerated_in_4_9_8_only() -> None:
    events = (P(1, 0, 0), P(1, 0, 1), D(2, A, 0, 0), K(3, A, 0, 2, "offset_illegal"), K(4, A, 0, 1))
    old = check(*events, rocketmq="4.9.8")
    assert old["valid"] and classes(old, "commit_decreased") == ["commit_decreased:after_offset_illegal"]
    assert not check(*events, rocketmq="5.x")["valid"]


def test_losing_the_offset_is_a_decrease_and_the_next_commit_starts_afresh() -> None:
    r = check(P(1, 0, 0), D(2, A, 0, 0), K(3, A, 0, 1), K(4, "broker", 0, None, "failover"), K(5, A, 0, 0))
    assert r["valid"] and classes(r, "commit_decreased") == ["commit_decreased:declared"]
    assert (r["commit_decreased"][0]["from"], r["commit_decreased"][0]["to"]) == (1, None)
    # The same consumer's offset file losing an entry without a cause (RMQ-21) is a bug.
    bad = check(P(1, 0, 0), D(2, A, 0, 0), K(3, A, 0, 1), K(4, A, 0, None), mode="BROADCASTING")
    assert bad["not_tolerated"] == {"commit_decreased": 1}


def test_commit_beyond_the_highest_produced_offset_plus_one() -> None:
    r = check(P(1, 0, 0), P(1, 0, 1), D(2, A, 0, 0), D(2, A, 0, 1), K(3, A, 0, 2), K(4, A, 0, 4))
    assert r["commit_beyond_max"] == [
        {
            "class": "commit_beyond_max",
            "topic": "T",
            "queue": 0,
            "consumer": A,
            "offset": 4,
            "max_produced": 1,
            "time": 4,
            "line": 7,
        }
    ]
    assert not r["valid"]


def test_negative_committed_offset_is_an_anomaly_not_bad_input() -> None:
    r = check(P(1, 0, 0), D(2, A, 0, 0), K(3, A, 0, -1))
    assert r["not_tolerated"] == {"commit_negative": 1} and r["commit_negative"][0]["offset"] == -1


# --- ownership -----------------------------------------------------------------------------------
AGREED = (J(0, A), J(0, B), V(1, A, [A, B]), V(1, B, [A, B]))


def test_double_ownership_after_views_agree_is_a_bug() -> None:
    r = check(*AGREED, O(1, A, 0), O(1, A, 1), O(1, B, 1), P(2, 0, 0))
    assert r["double_owned"] == [
        {
            "class": "double_owned",
            "topic": "T",
            "queue": 1,
            "consumers": [A, B],
            "from_time": 1,
            "to_time": None,
            "views_agree": True,
            "agreed_from": 1,
        }
    ]
    assert r["not_tolerated"] == {"double_owned": 1}


def test_double_ownership_while_views_differ_is_tolerated_for_concurrent_not_orderly() -> None:
    events = (
        J(0, A),
        J(0, B),
        V(1, A, [A]),
        O(1, A, 0),
        O(1, B, 0),
        V(2, B, [A, B]),
        O(3, A, 0, False),
        V(3, A, [A, B]),
    )
    concurrent = check(*events)
    assert concurrent["valid"] and classes(concurrent, "double_owned") == ["double_owned:views_differ"]
    entry = concurrent["double_owned"][0]
    assert (entry["from_time"], entry["to_time"], entry["views_agree"]) == (1, 3, False)
    orderly = check(*events, consumption="orderly")
    assert orderly["not_tolerated"] == {"double_owned:views_differ": 1}


def test_config_strategy_tolerates_ownership_anomalies_that_avg_reports() -> None:
    """AllocateMessageQueueByConfig ignores the other members (R11.4): with strategy CONFIG in the
    header, two owners of a queue and a queue owned by nobody are tolerated, with the reason."""
    events = (*AGREED, O(1, A, 0), O(1, A, 1), O(1, B, 1), P(2, 2, 0))
    as_avg = check(*events)
    assert set(as_avg["not_tolerated"]) == {"double_owned", "unowned"}
    as_config = check(*events, strategy="CONFIG")
    assert as_config["valid"] and as_config["strategy"] == "CONFIG"
    assert "R11.4" in as_config["tolerated"]["double_owned"]["reason"]
    as_machine_room = check(*events, strategy="MACHINE_ROOM")  # its slices are disjoint: only gaps are allowed
    assert set(as_machine_room["not_tolerated"]) == {"double_owned"}


def test_unknown_strategy_in_the_header_names_the_field() -> None:
    with pytest.raises(HistoryError, match="strategy"):
        check(strategy="ROUND_ROBIN")


def test_queue_unowned_after_views_agree_is_a_bug() -> None:
    r = check(*AGREED, O(1, A, 0), P(2, 1, 0), O(5, B, 1))
    assert [(e["class"], e["queue"], e["from_time"], e["to_time"]) for e in r["unowned"]] == [("unowned", 1, 2, 5)]


def test_queue_unowned_while_views_differ_is_tolerated() -> None:
    r = check(J(0, A), J(0, B), V(1, A, [A]), O(1, A, 0), P(2, 1, 0), V(3, B, [A, B]), V(3, A, [A, B]), O(3, B, 1))
    assert r["valid"] and classes(r, "unowned") == ["unowned:views_differ"]


def test_a_leave_ends_the_consumers_ownership() -> None:
    r = check(*AGREED, O(1, A, 0), O(1, B, 1), L(5, B), O(6, A, 1), V(6, A, [A]))
    # B's queue 1 was unowned from 5 to 6, while A's view still listed B: tolerated.
    assert r["valid"] and [(e["class"], e["from_time"], e["to_time"]) for e in r["unowned"]] == [
        ("unowned:views_differ", 5, 6)
    ]


def test_events_sharing_a_timestamp_are_simultaneous() -> None:
    # The view is logged before the ownership change of the same rebalance: no instant of disagreement.
    r = check(
        J(0, A),
        V(1, A, [A]),
        O(1, A, 0),
        P(2, 0, 0),
        J(3, B),
        V(4, A, [A, B]),
        V(4, B, [A, B]),
        O(4, A, 0, False),
        O(4, B, 0),
    )
    assert r["valid"] and r["double_owned_count"] == 0 and r["unowned_count"] == 0


def test_ownership_is_not_judged_without_membership_events() -> None:
    r = check(O(1, A, 0), O(1, B, 0), P(2, 0, 0))
    assert r["valid"] and not r["ownership_checked"] and "join" in r["ownership_note"]


# --- report shape, allow-list ----------------------------------------------------------------------
def test_report_is_flat_with_counts_per_queue() -> None:
    r = check(P(1, 0, 0), P(1, 1, 0), D(2, A, 0, 0), D(3, A, 0, 0), D(3, A, 1, 0, "failure"), K(4, A, 0, 1))
    assert r["counts"] == [
        {"group": "G", "topic": "T", "queue": 0, "produced": 1, "max_produced": 0, "delivered": 2,
         "distinct_delivered": 1, "failed_deliveries": 0, "commits": 1, "committed": 1, "lost": 0,
         "duplicated": 1, "skipped": 0},
        {"group": "G", "topic": "T", "queue": 1, "produced": 1, "max_produced": 0, "delivered": 1,
         "distinct_delivered": 1, "failed_deliveries": 1, "commits": 0, "committed": None, "lost": 0,
         "duplicated": 0, "skipped": 0},
    ]  # fmt: skip
    assert r["totals"] == {"produced": 2, "delivered": 3, "distinct_delivered": 2, "failed_deliveries": 1, "commits": 1}
    for name in ANOMALIES:
        assert r[f"{name}_count"] == len(r[name])
    json.dumps(r)  # plain JSON


def test_every_mode_has_an_allow_list_with_reasons() -> None:
    for mode in ("CLUSTERING", "BROADCASTING"):
        for consumption in ("concurrent", "orderly"):
            for version in ("4.9.8", "5.x"):
                allowed = allowed_anomalies(mode, consumption, version)
                assert set(allowed) <= set(CLASSES) and all(reason for reason in allowed.values())
                assert "duplicated:caused" in allowed and "commit_decreased:declared" in allowed
                assert "lost" not in allowed and "unexpected" not in allowed and "commit_beyond_max" not in allowed
                assert "duplicated" not in allowed  # a redelivery needs a cause the history shows
    assert "double_owned:views_differ" in allowed_anomalies("CLUSTERING", "concurrent", "5.x")
    assert "double_owned:views_differ" not in allowed_anomalies("CLUSTERING", "orderly", "4.9.8")


def test_docs_state_the_allow_list_and_the_schema_the_code_uses() -> None:
    assert allow_list_markdown() in (ROOT / "docs" / "oracle.md").read_text(encoding="utf-8")
    on_disk = (ROOT / "docs" / "history.schema.json").read_text(encoding="utf-8")
    assert on_disk == schema_text(), (
        "docs/history.schema.json is stale; regenerate it with: .venv/bin/python -c 'from "
        'rmqspec.properties.history import schema_text; print(schema_text(), end="")\' > docs/history.schema.json'
    )


def test_schema_and_reader_agree_on_types_required_fields_and_enums() -> None:
    schema = history_schema()
    by_title = {s["title"]: s for s in schema["oneOf"]}
    assert set(by_title) == {"header", *EVENT_TYPES}
    assert by_title["commit"]["properties"]["cause"]["enum"] == [*COMMIT_CAUSES, None]
    assert by_title["skip"]["properties"]["cause"]["enum"] == list(SKIP_CAUSES)
    sample = {
        "produce": P(1, 0, 0),
        "deliver": D(1, A, 0, 0),
        "commit": K(1, A, 0, 0),
        "skip": S(1, 0, 0, 1, "filtered"),
        "join": J(1, A),
        "leave": L(1, A),
        "view": V(1, A, [A]),
        "own": O(1, A, 0),
    }
    for kind, event in sample.items():
        assert by_title[kind]["required"] == ["time", "type", *REQUIRED[kind]]
        read_lines(lines_of([header(), event]))  # the sample is valid
        for name in by_title[kind]["required"]:
            broken = {k: v for k, v in event.items() if k != name}
            with pytest.raises(HistoryError) as err:
                read_lines(lines_of([header(), broken]))
            assert err.value.line == 2 and err.value.field == name, (kind, name, str(err.value))


# --- reading errors ------------------------------------------------------------------------------
GOOD = json.dumps(header())


@pytest.mark.parametrize(
    ("lines", "line", "field", "words"),
    [
        ([], None, None, "empty file"),
        (["\n"], 1, None, "blank"),
        (['{"format": "x"}'], 1, "format", "rmqspec-history"),
        ([GOOD.replace('"CLUSTERING"', '"CLUSTER"')], 1, "mode", "CLUSTERING, BROADCASTING"),
        ([GOOD.replace('"version": 1', '"version": true')], 1, "version", "expected 1"),
        ([GOOD, "{not json"], 2, None, "not JSON"),
        ([GOOD, '{"time": NaN, "type": "join", "consumer": "a"}'], 2, None, "NaN"),
        ([GOOD, "[1, 2]"], 2, None, "event object"),
        ([GOOD, '{"time": 1, "type": "join", "consumer": "a"} x'], 2, None, "Extra data"),
        ([GOOD, '{"type": "join", "consumer": "a"}'], 2, "time", "missing"),
        ([GOOD, '{"time": "1", "type": "join", "consumer": "a"}'], 2, "time", "finite number"),
        ([GOOD, '{"time": 1, "type": "poll"}'], 2, "type", "one of produce"),
        ([GOOD, '{"time": 1, "type": "produce", "topic": "T", "queue": 0, "offset": -1}'], 2, "offset", "non-negative"),
        ([GOOD, '{"time": 1, "type": "produce", "topic": "T", "queue": 0.5, "offset": 1}'], 2, "queue", "non-negative"),
        ([GOOD, '{"time": 1, "type": "produce", "topic": "", "queue": 0, "offset": 1}'], 2, "topic", "non-empty"),
        ([GOOD, '{"time": 1, "type": "produce", "topic": "T", "queue": 0, "offset": 1, "origin": {"topic": "T"}}'],
         2, "origin.queue", "non-negative"),
        ([GOOD, '{"time": 1, "type": "deliver", "consumer": "a", "topic": "T", "queue": 0, "offset": 0, '
                '"result": "ok"}'],
         2, "result", "success, failure"),
        ([GOOD, '{"time": 1, "type": "commit", "consumer": "a", "topic": "T", "queue": 0}'], 2, "offset", "missing"),
        ([GOOD, '{"time": 1, "type": "commit", "consumer": "a", "topic": "T", "queue": 0, "offset": 1, "cause": "x"}'],
         2, "cause", "reset"),
        ([GOOD, '{"time": 1, "type": "view", "consumer": "a", "members": ["a", 3]}'], 2, "members", "array"),
        ([GOOD, '{"time": 1, "type": "view", "consumer": "a"}'], 2, "members", "missing"),
        ([GOOD, '{"time": 1, "type": "own", "consumer": "a", "topic": "T", "queue": 0, "owned": 1}'],
         2, "owned", "true or false"),
        ([GOOD, '{"time": 1, "type": "skip", "topic": "T", "queue": 0, "from": 3, "to": 1, "cause": "reset"}'],
         2, "to", ">= from"),
        ([GOOD, '{"time": 1, "type": "skip", "topic": "T", "queue": 0, "from": 0, "to": 1, '
                '"cause": "consume_from_last", "fault": "gremlins"}'],
         2, "fault", "query-error"),
        ([GOOD, '{"time": 5, "type": "join", "consumer": "a"}', '{"time": 4, "type": "join", "consumer": "b"}'],
         3, "time", "before the previous"),
    ],
)  # fmt: skip
def test_malformed_input_names_the_line_and_the_field(
    lines: list[str], line: int | None, field: str | None, words: str
) -> None:
    with pytest.raises(HistoryError) as err:
        read_lines([text if text.endswith("\n") else text + "\n" for text in lines])
    assert (err.value.line, err.value.field) == (line, field)
    assert words in str(err.value)
    if line is not None:
        assert str(err.value).startswith(f"line {line}: ")


def test_blank_lines_and_unknown_fields_are_ignored() -> None:
    r = check_lines([GOOD + "\n", "\n", "  \n", json.dumps({**P(1, 0, 0), "msgId": "x"}) + "\n", "\n"])
    assert r["valid"] and r["events"] == 1


def test_a_file_that_is_not_utf8_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    path.write_bytes((GOOD + "\n").encode() + b'{"time": 1, "type": "join", "consumer": "\xff"}\n')
    with pytest.raises(HistoryError, match="line 2: not UTF-8"):
        check_history(path)


VALID_EVENTS = [
    J(0, A), J(0, B), V(1, A, [A, B]), V(1, B, [A, B]), O(1, A, 0), O(1, B, 1), P(2, 0, 0), P(2, 1, 0),
    D(3, A, 0, 0), D(3, B, 1, 0, "failure"), K(4, A, 0, 1), S(4, 1, 0, 1, "filtered"), L(5, B),
    P(6, 1, 1, topic="%RETRY%G", origin={"topic": "T", "queue": 1, "offset": 0}),
]  # fmt: skip
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 2**64) | st.floats(allow_nan=False) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


@st.composite
def mutated_history(draw: st.DrawFn) -> list[str]:
    lines = lines_of([header(), *VALID_EVENTS])
    for _ in range(draw(st.integers(1, 3))):
        k = draw(st.integers(0, len(lines) - 1))
        how = draw(st.sampled_from(["field", "drop", "truncate", "garbage", "swap"]))
        try:
            obj = json.loads(lines[k])
        except ValueError:
            obj = None
        if how in ("field", "drop") and isinstance(obj, dict):
            name = draw(st.sampled_from(sorted(obj) + ["type", "time", "members", "origin", "fault"]))
            if how == "drop":
                obj.pop(name, None)
            else:
                obj[name] = draw(JSON_VALUES)
            lines[k] = json.dumps(obj) + "\n"
        elif how == "truncate":
            lines[k] = lines[k][: draw(st.integers(0, len(lines[k]) - 1))] + "\n"
        elif how == "garbage":
            lines[k] = draw(st.text(max_size=20)).replace("\n", " ") + "\n"
        else:
            j = draw(st.integers(0, len(lines) - 1))
            lines[k], lines[j] = lines[j], lines[k]
    return lines


@scaled(3)
@given(mutated_history())
def test_fuzzed_histories_give_a_report_or_an_error_naming_the_line(lines: list[str]) -> None:
    try:
        report = check_lines(lines)
    except HistoryError as err:
        assert err.line is not None and 1 <= err.line <= len(lines)
        assert str(err).startswith(f"line {err.line}: ") and "\n" not in str(err)
        if err.field is not None:
            assert f'field "{err.field}"' in str(err)
    else:
        json.dumps(report)
        assert report["events"] <= len(lines) - 1


@scaled(2)
@given(st.lists(st.text(max_size=40), max_size=6))
def test_arbitrary_text_after_a_header_never_escapes_as_a_traceback(texts: list[str]) -> None:
    lines = [GOOD + "\n"] + [t + "\n" for t in texts]
    try:
        check_lines(lines)
    except HistoryError as err:
        assert err.line is not None and str(err).startswith("line ")


FIELD_VALUES = (
    st.none() | st.booleans() | st.integers(-2, 3) | st.floats(-1, 3, allow_nan=False) | st.sampled_from(
        ["", "T", A, "success", "failure", "deliver", "produce", "commit", "own", "reset", "filtered", "x"]
    )
    | st.lists(st.sampled_from([A, B, ""]), max_size=2)
    | st.fixed_dictionaries(
        {"topic": st.sampled_from(["T", ""]), "queue": st.integers(-1, 1), "offset": st.integers(0, 1)}
    )
)  # fmt: skip


@scaled(3)
@given(
    st.sampled_from(VALID_EVENTS),
    st.dictionaries(st.sampled_from(["time", "type", "consumer", "topic", "queue", "offset", "result", "cause",
                                     "origin", "members", "owned", "from", "to"]), FIELD_VALUES, max_size=3),
    st.sets(st.sampled_from(["time", "type", "consumer", "topic", "queue", "offset", "result", "origin"]), max_size=2),
)  # fmt: skip
def test_fast_paths_agree_with_the_careful_validator(
    event: dict[str, Any], changes: dict[str, Any], dropped: set[str]
) -> None:
    obj = {k: v for k, v in {**event, **changes}.items() if k not in dropped}
    try:
        expected: Any = validate_event_carefully(obj, 2)
    except HistoryError as err:
        expected = (err.field, err.message)
    try:
        fast: Any = validate_event(obj, 2)
    except HistoryError as err:
        fast = (err.field, err.message)
    assert fast == expected
    try:
        history = read_lines(lines_of([header(), obj]))
    except HistoryError as err:
        assert (err.field, err.message) == expected
        return
    t, key, rec, fkey, frec = expected
    if key is None:
        assert history.membership == [rec] and not history.buckets
    else:
        wanted = {key: [rec]}
        if fkey is not None:
            wanted.setdefault(fkey, []).append(frec)
        assert history.buckets == wanted and history.last_time == t


# --- model runs ----------------------------------------------------------------------------------
MODEL_CONFIGS = [
    Config(consumers=3, queues=4, messages_per_queue=8, max_reconsume_times=1, client_crashes=2, client_shutdowns=2),
    Config(consumers=2, queues=3, messages_per_queue=8, mode=BROADCASTING, client_crashes=2),
    Config(consumers=2, queues=2, tags=("A", "B"), subscription=("A",), messages_per_queue=6, broker_crashes=2),
]


def test_history_fates_and_redelivery_causes_are_the_models_own() -> None:
    """check-history gives a model walk's history the fates the model gives the walk's last state
    (properties/fates.py), fault harm included, and the redeliveries the model counts per cause, but for the
    consumeFromWhere positions a history cannot tell apart (young-queue-zero, consume-from-first, ...)."""
    from rmqspec.spec.rebalance import POSITIONED_WITHOUT_OFFSET

    harm: dict[str, int] = {}
    redelivered: dict[str, int] = {}
    for config in MODEL_CONFIGS:
        # twelve seeds, and seed 37, the first of the clustering walks whose broker crash loses an offset that a
        # consume-from-last positioning then skips past (a fault's harm, asserted below)
        for seed in [*range(12), 37]:
            events, model, final = model_run(config, seed, 700)
            report = check_lines(lines_of(events))
            expected = fates.message_fates(model, final)
            assert (report["fates"], report["fate_harm"]) == (dict(expected.counts), dict(expected.harm)), seed
            causes: dict[str, int] = {}
            for cause, n in final.ghost.redelivery_causes:
                if cause.removeprefix("resumed-at-") in POSITIONED_WITHOUT_OFFSET:
                    cause = RESUMED_WITHOUT_OFFSET
                causes[cause] = causes.get(cause, 0) + n
            assert report["redelivery_causes"] == causes, seed
            harm.update(report["fate_harm"])
            redelivered.update(causes)
    # not a vacuous comparison: a broker crash's lost offset is harm, and every redelivery cause occurs
    assert "skipped: consume-from-last: broker-crash" in harm
    assert set(redelivered) == {LOCAL_RETRY, RESUMED_AT_STORED, RESUMED_WITHOUT_OFFSET}


# An orderly group, whose loop hands the next batch to the listener within a FinishConsume or ApplyConsumeOffset
# under the same request id (R8.5) and dead-letters past maxReconsumeTimes (R8.7); and a consumeTimeout of 2 s,
# so that cleanExpiredMsg sends messages back (R6.8) that later reach %RETRY% through the schedule topic.
LISTENER_CONFIGS = {
    "orderly": Config(consumers=2, queues=2, messages_per_queue=4, orderly=True, max_reconsume_times=1),
    "expired": Config(consumers=1, queues=2, messages_per_queue=3, consume_timeout=2000, max_reconsume_times=2),
}


@pytest.mark.parametrize("name", LISTENER_CONFIGS)
def test_orderly_batches_and_expired_send_backs_are_written_as_the_model_ran_them(name: str) -> None:
    """The history of an orderly walk says success for the batches SUCCESS consumed and forwards the ones past the
    maximum to %DLQ%; that of a walk with cleanExpiredMsg forwards each expired message to the schedule topic and
    from there to %RETRY%: check-history finds them valid with the model's own fates."""
    config = LISTENER_CONFIGS[name]
    successes = forwarded = 0
    for seed in range(12):
        events, model, final = model_run(config, seed, 400)
        report = check_lines(lines_of(events))
        assert report["valid"], (seed, report["not_tolerated"])
        assert report["fates"] == dict(fates.message_fates(model, final).counts), seed
        successes += sum(e.get("type") == "deliver" and e["result"] == "success" for e in events)
        prefix = "%DLQ%" if name == "orderly" else "%RETRY%"
        forwarded += sum(e.get("type") == "produce" and e["topic"].startswith(prefix) and "origin" in e for e in events)
    assert successes > 0 and forwarded > 0  # not vacuous: batches consumed, messages forwarded


@pytest.mark.parametrize("config", MODEL_CONFIGS, ids=["clustering", "broadcasting", "tags-failover"])
def test_correct_model_runs_show_only_tolerated_anomalies(config: Config) -> None:
    seen: set[str] = set()
    races: set[str] = set()
    delivered = 0
    for seed in range(12):
        report = check_lines(lines_of(history_from_model_run(config, seed, 700)))
        assert report["valid"], (seed, report["not_tolerated"])
        delivered += report["totals"]["delivered"]
        seen |= set(report["tolerated"])
        races |= {e["race"] for e in report["commit_decreased"] if "race" in e}
    assert delivered > 0 and ("skipped" in seen or "duplicated" in seen)
    # every decrease by another writer had its race; not vacuously: the CLUSTERING walks meet stale owners
    assert "stale-owner" in races or config.mode == BROADCASTING


def test_correct_model_decreases_by_another_writer_after_an_admin_reset_have_their_causes() -> None:
    """Three walks of the campaign's own configurations (``units.sample_config``, seeds 429, 1092 and 1178: admin
    resets, 4.9.8 and 5.x) in which another writer lowers the committed offset after an admin reset: each has its race
    (the pull that takes a pending 5.x reset still lands its piggy-back over it, R3.10b: undercuts-a-reset), the
    model's own OFFSET_ILLEGAL corrections are declared (offset_illegal, R5.7: the model's INV-8r cause
    offset-illegal-fix), and a consumer's commit landing below its correction after it re-created the queue is a
    stale incarnation, not a lowered 5.x freeze (5.x removes the corrected pq at once)."""
    import random

    from rmqspec.campaign.units import PROFILES, sample_config

    races: set[str] = set()
    declared = 0
    for seed in (429, 1092, 1178):
        profile = PROFILES[seed % len(PROFILES)]
        config = profile.apply(sample_config(random.Random(seed), profile=profile))
        assert config.admin_resets and config.mode == "CLUSTERING"
        events = history_from_model_run(config, seed, 400)
        report = check_lines(lines_of(events))
        assert report["valid"], (seed, report["not_tolerated"])
        races |= {e["race"] for e in report["commit_decreased"] if "race" in e}
        declared += sum(1 for e in events if e.get("cause") == "offset_illegal")
    assert {"undercuts-a-reset", "stale-owner"} <= races and declared > 0


def test_planted_commit_before_send_back_is_lost() -> None:
    # RMQ-03: a message whose send-back failed is committed past; once its pq is dropped before the
    # local retry runs, nobody consumes it again.
    base = {"consumers": 3, "queues": 2, "messages_per_queue": 10, "max_reconsume_times": 2,
            "send_back_failures": 10, "client_crashes": 0, "client_shutdowns": 4}  # fmt: skip
    buggy = Config(**base, mutations=frozenset({"commit_before_send_back"}))  # type: ignore[arg-type]
    for seed in range(60):
        report = check_lines(lines_of(history_from_model_run(buggy, seed, 800)))
        if report["lost_count"]:
            break
    else:
        pytest.fail("no walk of the planted bug lost a message")
    assert not report["valid"] and set(report["not_tolerated"]) <= {"lost", "lost:failed_delivery"}
    correct = check_lines(lines_of(history_from_model_run(Config(**base), seed, 800)))  # type: ignore[arg-type]
    assert correct["valid"], correct["not_tolerated"]


def test_planted_overlapping_allocation_is_double_ownership_after_views_agree() -> None:
    config = Config(consumers=3, queues=4, mutations=frozenset({"avg_blocks_overlap"}))
    for seed in range(30):
        report = check_lines(lines_of(history_from_model_run(config, seed, 600)))
        if "double_owned" in report["not_tolerated"]:
            return
    pytest.fail("no walk showed double ownership with agreeing views")


# --- the command line ----------------------------------------------------------------------------
def test_cli_exit_codes_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good, bad, broken = tmp_path / "good.jsonl", tmp_path / "bad.jsonl", tmp_path / "broken.jsonl"
    write_history([header(), P(1, 0, 0), D(2, A, 0, 0), K(3, A, 0, 1)], good)
    write_history([header(), P(1, 0, 0), K(3, A, 0, 1)], bad)
    broken.write_text(GOOD + '\n{"time": 1, "type": "deliver"}\n', encoding="utf-8")
    assert main(["check-history", str(good)]) == 0
    out = capsys.readouterr().out
    assert "valid: yes" in out and "\nfates: consumed-and-committed 1\n" in out
    assert main(["check-history", "--json", str(bad)]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["not_tolerated"] == {"lost": 1}
    assert (report["fates"], report["fate_harm"], report["redelivery_causes"]) == ({"lost": 1}, {}, {})
    assert main(["check-history", str(broken)]) == 2
    err = capsys.readouterr().err
    assert err == f'rmqspec: error: {broken}: line 2: field "consumer": missing (required for a deliver event)\n'
    assert main(["check-history", str(tmp_path / "missing.jsonl")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_benchmark_history_is_valid(tmp_path: Path) -> None:
    path = tmp_path / "bench.jsonl"
    n = write_synthetic_history(path, 20_000)
    report = check_history(path)
    assert report["valid"], report["not_tolerated"]
    assert report["events"] == n and report["duplicated_count"] > 0 and report["ownership_checked"]


# --- Spark ---------------------------------------------------------------------------------------
def test_spark_gives_the_local_report_for_jsonl_and_parquet(tmp_path: Path) -> None:
    from rmqspec.history_spark import _session, check_history_spark, write_parquet

    config = Config(consumers=3, queues=3, messages_per_queue=6, max_reconsume_times=1, client_crashes=1)
    path = tmp_path / "model.jsonl"
    write_history(history_from_model_run(config, 3, 500), path)
    local = check_history(path)
    assert local["duplicated_count"] + local["skipped_count"] + local["unowned_count"] > 0  # not a trivial report
    assert local["fates"]["consumed-and-committed"] > 0  # fates too, merged across queues as locally
    spark = _session("local[2]", quick_start=True)
    assert check_history_spark(path, spark=spark) == local
    parquet = tmp_path / "model.parquet"
    write_parquet(spark, path, parquet)
    assert check_history_spark(parquet, spark=spark) == local
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    for k, bad in enumerate(
        [
            text.replace('"type": "deliver"', '"type": "delivery"', 1),  # a bad field
            "{not json\n" + "".join(lines[1:]),  # a bad header
            "".join(lines[:-1]) + lines[-1].replace('"time": ', '"time": -1, "was": ', 1),  # time goes back
        ]
    ):
        broken = tmp_path / f"broken{k}.jsonl"
        broken.write_text(bad, encoding="utf-8")
        with pytest.raises(HistoryError) as spark_err:
            check_history_spark(broken, spark=spark)
        with pytest.raises(HistoryError) as local_err:
            check_history(broken)
        assert str(spark_err.value) == str(local_err.value)
