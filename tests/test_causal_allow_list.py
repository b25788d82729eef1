"""The allow-list is causal: every tolerated anomaly points to a cause the run shows.

Three planted bugs pass every category tolerance the properties had (a positioning skip, a broker
offset lowered by another pq, a duplicate delivery) and are refuted only by the property that asks
for the cause: INV-9a (a position consumeFromWhere chose on a queue the group had committed on),
INV-8r's stale-owner race (a pq that read the value it undercuts), INV-22 (a pq pulling again what
it consumed). The correct model's tolerated anomalies carry their causes: skips name the fault that
removed the offset, redeliveries are counted per cause, and every message ends with one fate.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from rmqspec.properties.explore import explore, replay, walk
from rmqspec.properties.fates import FAULT_CAUSES, LOST, PENDING, message_fates
from rmqspec.properties.liveness import quiesce
from rmqspec.spec import committed_offset as co
from rmqspec.spec import invariants as inv
from rmqspec.spec.actions import (
    TIME_ONLY,
    Action,
    BrokerCrash,
    BrokerReceive,
    CleanExpiredMsg,
    Rebalance,
    ReceivePull,
    SendPull,
    Start,
    StartConsume,
)
from rmqspec.spec.concurrent_consume import NO_REDELIVERY_CAUSE
from rmqspec.spec.config import BROADCASTING, CLUSTERING, Config
from rmqspec.spec.model import Model
from rmqspec.spec.state import State

BASE = {"consumers": 3, "queues": 4, "messages_per_queue": 4, "max_reconsume_times": 2}
WALKS, STEPS = 300, 300  # the budget tests/test_planted_bugs.py refutes every mutation with
ALL = frozenset(p.id for p in inv.INVARIANTS) | frozenset(p.id for p in inv.ACTION_PROPERTIES)
CAUSAL = frozenset({"INV-9a", "INV-22", "INV-8r"})


def _by_another_pq(m: Model, s: State, a: object, t: State, q: int) -> bool:
    """The category the stale-owner cause used to be: any commit from a pq other than the last writer."""
    landed = co._landed_commit(s, a, q)  # type: ignore[arg-type]
    return landed is not None and s.ghost.last_writer[q] != landed[0]


@pytest.mark.parametrize(
    ("mutation", "overrides"),
    [("empty_group_loses_offsets", {"consumers": 1}), ("pull_cursor_one_behind", {})],
)
def test_every_other_property_and_liveness_let_the_bug_through(mutation: str, overrides: dict[str, object]) -> None:
    config = Config(**{**BASE, **overrides, "mutations": frozenset({mutation})})  # type: ignore[arg-type]
    result = explore(config, WALKS, STEPS, watch=ALL - CAUSAL, liveness=True)
    assert result.valid, result.counterexamples[0].describe()


def test_a_decrease_by_another_pq_hides_a_pq_committing_below_what_it_read(monkeypatch: pytest.MonkeyPatch) -> None:
    config = Config(**{**BASE, "mutations": frozenset({"resume_memory_one_behind"})})  # type: ignore[arg-type]
    refuted = explore(config, WALKS, STEPS, watch=frozenset({"INV-8r"}))
    assert not refuted.valid
    assert "no declared cause" in refuted.counterexamples[0].violations[0].detail
    causes = tuple(
        c._replace(applies=_by_another_pq) if c.name == "stale-owner" else c for c in co.DECLARED_DECREASE_CAUSES
    )
    monkeypatch.setattr(co, "DECLARED_DECREASE_CAUSES", causes)
    # INV-33 (positioning_seeds_memory) sees the seeding itself, at the positioning, before any commit: this test is
    # about what the decrease properties let through, so it is left out with the two that watch other effects
    assert explore(config, WALKS, STEPS, watch=ALL - {"INV-9a", "INV-22", "INV-33"}).valid
    assert not explore(config, WALKS, STEPS, watch=frozenset({"INV-33"})).valid


def _not_a_reader(m: Model, s: State, a: object, t: State, q: int) -> bool:
    """The stale-owner cause without its extent: a commit from a pq other than the last writer that did not read the
    value it undercuts, whatever the value."""
    landed = co._landed_commit(s, a, q)  # type: ignore[arg-type]
    if landed is None or s.ghost.last_writer[q] == landed[0]:
        return False
    return not (s.ghost.readers and landed[0] in s.ghost.readers[q])


def test_a_stale_owner_s_commit_must_lie_at_or_above_where_its_pq_started(monkeypatch: pytest.MonkeyPatch) -> None:
    # the pq seeds its memory one below the position consumeFromWhere gave it: its commit lowers the broker below its
    # own start, a value it never read. Only INV-8r's stale-owner extent refutes it; without the extent it passes.
    config = Config(**{**BASE, "mutations": frozenset({"position_seeds_memory_one_below"})})  # type: ignore[arg-type]
    refuted = explore(config, WALKS, STEPS, watch=frozenset({"INV-8r"}))
    assert not refuted.valid
    assert "below its own start" in refuted.counterexamples[0].violations[0].detail
    causes = tuple(
        c._replace(applies=_not_a_reader) if c.name == "stale-owner" else c for c in co.DECLARED_DECREASE_CAUSES
    )
    monkeypatch.setattr(co, "DECLARED_DECREASE_CAUSES", causes)
    assert explore(config, WALKS, STEPS, watch=ALL, liveness=True).valid


def test_a_redelivery_below_the_position_its_pq_resumed_from_has_no_cause() -> None:
    # the new pq's first pull starts one below its start: what it delivers there again was committed by the group;
    # the per-cause count names it "no-cause" (it used to be counted as "resumed-at-<how>") and INV-22c refutes it
    config = Config(**{**BASE, "mutations": frozenset({"first_pull_one_below_position"})})  # type: ignore[arg-type]
    found = explore(config, WALKS, STEPS, watch=frozenset({"INV-22c"})).counterexamples[0]
    assert "below its start" in found.violations[0].detail
    end = replay(config, found.actions)[0]
    assert dict(end.ghost.redelivery_causes).get(NO_REDELIVERY_CAUSE, 0) >= 1


def test_a_pq_re_created_while_its_predecessor_s_listener_runs_redelivers_what_that_listener_holds() -> None:
    # R9.4: a pull-expired pq is dropped and re-created in one rebalance while its listener still runs (R6.7); the new
    # pq resumes at the stored position and delivers again the two messages that listener holds, whose result
    # processConsumeResult will skip (R7.3): counted under beside-dropped-pq-listener, no property broken
    config = Config(
        consumers=1, queues=1, messages_per_queue=2, backlog=2, consume_batch_size=2, consume_timeout=600_000,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET", client_crashes=0, client_shutdowns=0, broker_crashes=0,
    )  # fmt: skip
    model = Model(config)
    state = model.initial()
    steps: list[Action] = [Start(0), Rebalance(0), SendPull(0, 0), BrokerReceive(0, 0), ReceivePull(0, 0)]
    for action in steps:
        state = model.step(state, action)
    steps.append(StartConsume(0, state.clients[0].requests[0].rid))
    state = model.step(state, steps[-1])
    old = state.clients[0].pqs[0]
    assert old is not None and state.clients[0].consuming
    while (pq := state.clients[0].pqs[0]) is None or pq.uid == old.uid:  # timers only: no pull, the listener runs on
        steps.append(
            next(a for a in model.enabled(state) if isinstance(a, TIME_ONLY) and not isinstance(a, CleanExpiredMsg))
        )
        state = model.step(state, steps[-1])
    assert state.clients[0].consuming[0].pq_uid == old.uid  # the predecessor's listener still runs
    while not any(r.pq_uid != old.uid for r in state.clients[0].requests):
        steps.append(next(a for a in model.enabled(state) if isinstance(a, (SendPull, BrokerReceive, ReceivePull))))
        state = model.step(state, steps[-1])
    steps.append(StartConsume(0, state.clients[0].requests[-1].rid))
    state, violations = replay(config, steps)
    assert violations == []
    assert state.ghost.redelivery_causes == (("beside-dropped-pq-listener", 2),)


def test_a_group_that_lost_its_offsets_without_a_fault_is_refuted_at_its_restart() -> None:
    config = Config(**{**BASE, "consumers": 1, "mutations": frozenset({"empty_group_loses_offsets"})})  # type: ignore[arg-type]
    found = explore(config, WALKS, STEPS, watch=frozenset({"INV-9a"})).counterexamples[0]
    detail = found.violations[0].detail
    assert "although the group had committed on this queue" in detail
    assert "no fault the run shows removed the offset" in detail


def _keeper(box: list[State]) -> Callable[[State], None]:
    """A walk callback that keeps the latest state in ``box``."""

    def keep(state: State) -> None:
        box[0] = state

    return keep


def _states(config: Config, walks: int, steps: int = STEPS) -> list[tuple[Model, State]]:
    model = Model(config)
    out: list[tuple[Model, State]] = []
    for seed in range(walks):
        last = [model.initial()]
        assert walk(model, seed, steps, on_state=_keeper(last)) is None
        out.append((model, last[0]))
    return out


def test_a_broker_crash_before_the_flush_makes_the_restart_skip_and_the_skip_names_the_crash() -> None:
    # query_errors keeps the default swarm; the crash budget of 1 is the default
    harmed = [
        (m, s)
        for m, s in _states(Config(**BASE), 120)  # type: ignore[arg-type]
        if any(cause.endswith(": broker-crash") for _, cause, _ in s.ghost.skips)
    ]
    assert harmed, "no walk reached a restart after a crash that lost an unflushed offset"
    model, state = harmed[0]
    kinds = [e.kind for e in state.history.events()] if state.history else []
    assert "commit-landed" in kinds
    fates = message_fates(model, state)
    assert any("broker-crash" in name for name in fates.harm)


def test_redeliveries_are_counted_per_cause_and_the_causes_add_up() -> None:
    causes: dict[str, int] = {}
    for _, state in _states(Config(**{**BASE, "send_back_failures": 2}), 80):  # type: ignore[arg-type]
        assert sum(n for _, n in state.ghost.redelivery_causes) == state.ghost.redeliveries
        for cause, n in state.ghost.redelivery_causes:
            causes[cause] = causes.get(cause, 0) + n
    assert causes.get("local-retry", 0) > 0  # a failed send-back is consumed again by the same pq (R7.3)
    assert causes.get("resumed-at-stored-offset", 0) > 0  # the unpersisted window behind a handover
    assert set(causes) <= {"local-retry", "beside-dropped-pq-listener"} | {f"resumed-at-{how}" for how in _HOWS}


_HOWS = (
    "stored-offset",
    "stored-offset-on-slave",
    "young-queue-zero",
    "consume-from-first",
    "consume-from-last",
    "consume-from-timestamp",
)


@pytest.mark.parametrize(
    "overrides",
    [
        {"mode": CLUSTERING},
        {"mode": BROADCASTING},
        {"mode": CLUSTERING, "slave": True, "broker_crashes": 2},
        {"mode": CLUSTERING, "tags": ("A", "B"), "subscription": ("A",), "retention_deletes": 2, "version": "5.x"},
    ],
)
def test_every_message_has_one_fate_and_none_is_lost_or_pending_after_quiescence(overrides: dict[str, object]) -> None:
    for model, state in _states(Config(**{**BASE, **overrides}), 25):  # type: ignore[arg-type]
        end = quiesce(model, state).state
        fates = message_fates(model, end)
        ledgers = 1 if model.clustering else model.config.consumers
        total = ledgers * sum(q.max_offset for q in end.broker.queues) + len(end.broker.dlq)
        assert sum(fates.counts.values()) == total
        assert not fates.lost and fates.counts[LOST] == 0
        assert fates.counts[PENDING] == 0 and fates.counts["retry: " + PENDING] == 0
        assert not any("unrecorded" in name or "no cause" in name for name in fates.counts)
        assert all(name.rsplit(": ", 1)[-1] in FAULT_CAUSES for name in fates.harm)


def test_a_restart_reads_exactly_the_flushed_file_and_nothing_lower() -> None:
    model = Model(Config(**BASE))  # type: ignore[arg-type]
    s = model.initial()
    s = s._replace(broker=s.broker._replace(offsets=(3, None, None, None, None), flushed=(2, None, None, None, None)))
    crash = BrokerCrash()
    to_flush = s._replace(broker=s.broker._replace(offsets=(2, None, None, None, None)))
    below_flush = s._replace(broker=s.broker._replace(offsets=(1, None, None, None, None)))
    assert co._by_failover(model, s, crash, to_flush, 0)
    assert not co._by_failover(model, s, crash, below_flush, 0)
