"""Every property catches a planted bug: the model with a known-buggy variant must be refuted.

For each mutation in ``config.MUTATIONS`` the seeded explorer must find a violation of the named
property, watching that property alone (so the test shows it catches the bug by itself, not that
some other check happened to fire first), and the correct model with the same budget must not.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from rmqspec.properties import orderly_scenarios as orderly
from rmqspec.properties.explore import explore, replay, shrink
from rmqspec.properties.reset_scenarios import patient_reset_violations
from rmqspec.spec import actions as act
from rmqspec.spec.config import BROADCASTING, CLUSTERING, MUTATIONS, Config
from rmqspec.spec.invariants import check_state, check_step
from rmqspec.spec.model import ActionNotEnabled, Model
from rmqspec.spec.state import Commit, State

BASE = {"consumers": 3, "queues": 4, "messages_per_queue": 4, "max_reconsume_times": 2}

# mutation -> (property id that must refute it, config overrides that let walks reach it)
CASES: dict[str, tuple[str, dict[str, object]]] = {
    "count_not_decremented": ("INV-1", {"mode": CLUSTERING}),
    "watermark_highest_consumed": ("INV-2", {"mode": CLUSTERING}),
    "removal_result_read_before_removal": ("INV-2b", {"mode": CLUSTERING}),
    "ignore_increase_only": ("INV-4", {"mode": CLUSTERING}),
    "dropped_pq_commits": ("INV-5", {"mode": CLUSTERING}),
    "no_persist_all_pruning": ("INV-6a", {"mode": CLUSTERING}),
    "local_remove_offset_deletes_file": ("INV-6b", {"mode": BROADCASTING}),
    # the model keeps offsets.json.bak only where a local-file corruption may need it
    "bak_written_once": ("INV-6d", {"mode": BROADCASTING, "local_offset_file_corruptions": 1}),
    "broker_answers_minus_one": ("INV-7", {"mode": CLUSTERING}),
    # the idle-channel scan (R4.3) judges only a silent consumer: a paused one
    "channel_expiry_in_seconds": ("INV-38", {"mode": CLUSTERING, "client_stalls": 2}),
    "commit_before_send_back": ("INV-9", {"mode": CLUSTERING, "send_back_failures": 2}),
    "dlq_one_retry_late": ("INV-10", {"mode": CLUSTERING, "max_reconsume_times": 1, "consumers": 1}),
    "send_back_from_ack_index": ("INV-24", {"mode": CLUSTERING}),
    # a DLQ-bound send-back needs a message failed maxReconsumeTimes times: 1 keeps that within a walk
    "dlq_copy_not_stored": ("INV-24b", {"mode": CLUSTERING, "max_reconsume_times": 1}),
    "avg_blocks_overlap": ("INV-13a", {"mode": CLUSTERING}),
    "piggyback_next_offset": ("INV-14", {"mode": CLUSTERING}),
    "resume_ignores_stored_offset": ("INV-15", {"mode": CLUSTERING}),
    "last_offset_one_before_max": ("INV-37", {"mode": CLUSTERING}),
    "commit_past_cached": ("INV-16", {"mode": BROADCASTING}),
    # OFFSET_ILLEGAL: 5.x with the OFFSET_ILLEGAL correction deferred 10 s again (4.9.8's window)
    "offset_illegal_fix_deferred": ("INV-17", {"mode": CLUSTERING, "version": "5.x", "retention_deletes": 2}),
    # the OFFSET_ILLEGAL correction needs a retention delete below a pull
    "offset_fix_updates_after_removal": ("INV-36", {"mode": CLUSTERING, "retention_deletes": 2}),
    # orderly consumption (R8)
    "lock_ignores_holder": ("INV-11", {"mode": CLUSTERING, "orderly": True}),
    "lock_all_keeps_denied_locked": ("INV-34", {"mode": CLUSTERING, "orderly": True}),
    "add_without_lock": ("INV-12a", {"mode": CLUSTERING, "orderly": True}),
    # orderly consume loop (R6.4, R8.6)
    "orderly_commit_returns_last_key": ("INV-3", {"mode": CLUSTERING, "orderly": True}),
    "orderly_suspend_commits": ("INV-3", {"mode": CLUSTERING, "orderly": True}),
    "pull_request_requeued": ("INV-20", {"mode": CLUSTERING}),
    # admin reset (admin reset, R3.10a): the reset's commit carries no target of any reset
    "client_reset_off_by_one": ("INV-8r", {"mode": CLUSTERING, "admin_resets": 2}),
    # the causal allow-list: bugs a category would tolerate (tests/test_causal_allow_list.py shows that)
    "empty_group_loses_offsets": ("INV-9a", {"mode": CLUSTERING, "consumers": 1}),
    "resume_memory_one_behind": ("INV-8r", {"mode": CLUSTERING}),
    "pull_cursor_one_behind": ("INV-22", {"mode": CLUSTERING}),
    # the broker's request pools (docs/spec.md, "Thread boundaries"): a same-pq decrease with no request overtaken is no
    # reorder
    "update_offset_stores_one_less": ("INV-8r", {"mode": CLUSTERING}),
    # cleanExpiredMsg (R6.8): uniform walks answer a listener within a few steps, so none outlives the default
    # 15 s; at 2 s most walks have the cleaner remove a message, and the next commit passes it unhandled
    "expired_removed_without_send_back": ("INV-9", {"mode": CLUSTERING, "consume_timeout": 2_000}),
    # tolerances that fit their cause: a decrease by a pq below its own start (INV-8r), a redelivery below the
    # position its pq resumed from (INV-22c), a message outliving its cleanup with no dead task (INV-23)
    "position_seeds_memory_one_below": ("INV-8r", {"mode": CLUSTERING}),
    "first_pull_one_below_position": ("INV-22c", {"mode": CLUSTERING}),
    "clean_timer_stops": ("INV-23", {"mode": CLUSTERING, "consume_timeout": 2_000}),
    # a removed orderly pq that still caches messages (R8.8): 4.9.8's delayed unlock
    "unlock_delay_never_scheduled": ("INV-26", {"mode": CLUSTERING, "orderly": True}),
    # the client's scheduled tasks (INV-27): the first run of the task drops its deadline; the liveness checks see
    # the same bugs with INV-27 unwatched (tests/test_liveness.py, LIVENESS_CASES)
    "persist_timer_stops": ("INV-27", {"mode": BROADCASTING}),
    "rebalance_timer_stops": ("INV-27", {"mode": CLUSTERING}),
}
# Properties refuted a second time by a bug above, watched alone.
SECOND_WITNESSES = [
    ("ignore_increase_only", "INV-8", {"mode": CLUSTERING}),
    ("avg_blocks_overlap", "INV-13b", {"mode": CLUSTERING}),
    # memory seeded one below the offset read: INV-33 at the positioning itself, before any commit lands
    ("resume_memory_one_behind", "INV-33", {"mode": CLUSTERING}),
    ("commit_past_cached", "INV-9", {"mode": CLUSTERING}),
    # a message whose send-back failed taken out of the pq: INV-24c at the listener's return, before the commit
    # passes it
    ("commit_before_send_back", "INV-24c", {"mode": CLUSTERING, "send_back_failures": 2}),
    # the end-of-run fates alone (properties/fates.py): the messages INV-9 would report are "lost"
    ("commit_past_cached", "FATES", {"mode": CLUSTERING}),
    # the cleaner's first run drops its deadline (INV-27); INV-23 above sees the message it then never cleans
    ("clean_timer_stops", "INV-27", {"mode": CLUSTERING, "consume_timeout": 2_000}),
]

WALKS, STEPS = 300, 300  # enough for every case below; the slowest needs ~60 walks


def test_every_mutation_has_a_refuting_property() -> None:
    scripted = set(SCHEDULED_CASES) | set(RESET_SCRIPTED_CASES) | set(ORDERLY_SCRIPTED_CASES) | set(SHUTDOWN_CASES)
    assert set(CASES) | scripted == set(MUTATIONS)


@pytest.mark.parametrize(
    ("mutation", "prop", "overrides"),
    [(m, p, o) for m, (p, o) in CASES.items()] + SECOND_WITNESSES,
)
def test_property_refutes_planted_bug(mutation: str, prop: str, overrides: dict[str, object]) -> None:
    config = Config(**{**BASE, **overrides, "mutations": frozenset({mutation})})  # type: ignore[arg-type]
    result = explore(config, WALKS, STEPS, watch=frozenset({prop}))
    assert not result.valid, f"{prop} did not refute {mutation} in {WALKS} walks of {STEPS} steps"
    found = result.counterexamples[0]
    assert {v.id for v in found.violations} == {prop}


@pytest.mark.parametrize("mode", [CLUSTERING, BROADCASTING])
def test_correct_model_passes_the_same_budget(mode: str) -> None:
    result = explore(Config(**{**BASE, "mode": mode}), 60, STEPS)  # type: ignore[arg-type]
    assert result.valid, result.counterexamples[0].describe()
    assert result.actions["FinishConsume"] > 0 and result.actions["Crash"] > 0


def test_shrunk_counterexample_is_one_minimal_and_still_fails() -> None:
    config = Config(**{**BASE, "mutations": frozenset({"watermark_highest_consumed"})})  # type: ignore[arg-type]
    found = explore(config, WALKS, STEPS).counterexamples[0]
    small = shrink(found)
    assert len(small.actions) <= 20 < len(found.actions)  # 245 steps shrink to 15
    assert {v.id for v in small.violations} == {"INV-2"}
    assert replay(config, small.actions)[1] == small.violations
    for k in range(len(small.actions)):  # deleting any one action loses the failure
        try:
            _, violations = replay(config, small.actions[:k] + small.actions[k + 1 :])
        except ActionNotEnabled:
            continue
        assert "INV-2" not in {v.id for v in violations}


def test_a_lost_fate_shrinks_to_a_short_walk_that_still_loses_the_message() -> None:
    # commit_past_cached with only the end-of-run fates watched: the walk that first ends with a lost message
    # (seed 1, 300 steps) shrinks to about 20 steps, replayed from scratch, that still lose one; INV-9, the
    # per-step property, reports the same walk
    config = Config(**{**BASE, "mode": CLUSTERING, "mutations": frozenset({"commit_past_cached"})})  # type: ignore[arg-type]
    found = explore(config, WALKS, STEPS, watch=frozenset({"FATES"})).counterexamples[0]
    small = shrink(found)
    assert [v.id for v in small.violations] == ["FATES"] and "lost: ledger 0" in small.violations[0].detail
    assert len(small.actions) < 40 < len(found.actions)
    assert [v.id for v in replay(config, small.actions)[1]] == ["INV-9"]  # the per-step property agrees


# --- planted bugs whose property needs an adversarial schedule -------------------------------------------
# A stalled pull (no pullMessage for 120 s) needs a scheduler that keeps a ready or answered pull waiting
# for two minutes; uniform random walks almost never do that. A fixed schedule (start, then only timers
# and ticks) does, and shows the property refutes the bug alone while the correct model passes.
TIMERS = act.TIME_ONLY
SCHEDULED_CASES: dict[str, tuple[str, dict[str, object]]] = {
    "pull_expiry_ignored": ("LIV-3", {"consumers": 1, "queues": 2}),
}


def _stalled_run(config: Config, prop: str, until: int = 200_000) -> list[str]:
    """Start client 0, then fire only timers and ticks until ``until``: pulls stall."""
    model = Model(config)
    state = model.initial()
    found: list[str] = []
    first = True
    while state.now < until:
        enabled = model.enabled(state)
        if first:
            action: act.Action = act.Start(0)
            first = False
        else:
            options = [a for a in enabled if isinstance(a, TIMERS)]
            action = next((a for a in options if not isinstance(a, act.Tick)), options[0])
        after = model.step(state, action)
        found += [v.id for v in check_step(model, state, action, after) + check_state(model, after) if v.id == prop]
        state = after
    return found


@pytest.mark.parametrize(("mutation", "prop", "overrides"), [(m, p, o) for m, (p, o) in SCHEDULED_CASES.items()])
def test_property_refutes_planted_bug_under_a_stalling_schedule(
    mutation: str, prop: str, overrides: dict[str, object]
) -> None:
    base = {**BASE, **overrides}
    assert _stalled_run(Config(**{**base, "mutations": frozenset({mutation})}), prop)  # type: ignore[arg-type]
    assert not _stalled_run(Config(**base), prop)  # type: ignore[arg-type]


# --- admin reset (R3.10a) ---------------------------------------------------------------------------
# Under 4.9.8, INV-18 also fails without any bug (RMQ-26's race), so its planted bug is shown on the patient
# schedule of tests/test_admin_reset.py, where the reset's persist lands before the rebalance: the correct
# model passes it, the mutated one fails INV-18 alone. INV-8r's bug is refuted by random walks above, and
# the correct model passes INV-8r on the same budget.
RESET_SCRIPTED_CASES: dict[str, tuple[str, dict[str, object]]] = {
    "client_reset_skips_update": ("INV-18", {}),
}


@pytest.mark.parametrize(("mutation", "prop"), [(m, p) for m, (p, _) in RESET_SCRIPTED_CASES.items()])
def test_property_refutes_planted_reset_bug_on_the_patient_schedule(mutation: str, prop: str) -> None:
    assert patient_reset_violations(frozenset({mutation})) == [prop]
    assert patient_reset_violations(frozenset()) == []


def test_correct_model_passes_inv9_with_a_consume_timeout_that_listeners_outlive() -> None:
    """R6.8: with the steered timeout of ``expired_removed_without_send_back`` the correct cleaner sends every
    message it removes back first, so the commits that pass it break no property (in both versions)."""
    for version in ("4.9.8", "5.x"):
        config = Config(**{**BASE, "mode": CLUSTERING, "consume_timeout": 2_000, "version": version})  # type: ignore[arg-type]
        result = explore(config, 100, STEPS)
        assert result.valid, result.counterexamples[0].describe()
        assert result.actions["CleanExpiredMsg"] > 0


def test_correct_model_passes_inv8r_with_admin_resets() -> None:
    config = Config(**{**BASE, "mode": CLUSTERING, "admin_resets": 2})  # type: ignore[arg-type]
    result = explore(config, 100, STEPS, watch=frozenset({"INV-8r"}))
    assert result.valid, result.counterexamples[0].describe()
    assert result.actions["ClientResetWake"] > 0


# --- orderly consume loop (R8.5, R8.8): bugs that need a listener to outlast a rebalance or a stall -------
# Random walks answer a running listener within a few steps, so the schedules of
# properties/orderly_scenarios.py hold it: the planted bug fails the named property alone, and the correct
# model passes the same schedule (or refuses the step the bug enables).
ORDERLY_SCRIPTED_CASES: dict[str, tuple[str, Callable[[str, frozenset[str]], orderly.OrderlyRun]]] = {
    "orderly_removal_ignores_consume_lock": ("INV-12", orderly.removal_while_listening),  # RMQ-09 (1)
    "orderly_ignores_lock_expiry": ("INV-12b", orderly.stall_past_lock_validity),  # RMQ-10's planted bug
    "orderly_no_queue_monitor": ("INV-12", lambda version, m: orderly.requeued_while_listening(m)),
}


@pytest.mark.parametrize(
    ("mutation", "prop", "version"),
    [
        (m, p, v)
        for m, (p, _) in ORDERLY_SCRIPTED_CASES.items()
        for v in (("5.x",) if m == "orderly_no_queue_monitor" else ("4.9.8", "5.x"))  # its schedule is 5.x's
    ],
)
def test_property_refutes_planted_orderly_bug_on_its_schedule(mutation: str, prop: str, version: str) -> None:
    schedule = ORDERLY_SCRIPTED_CASES[mutation][1]
    buggy = schedule(version, frozenset({mutation}))
    assert buggy.completed and buggy.ids == [prop], buggy.violations
    correct = schedule(version, frozenset())
    assert correct.ids == [], correct.violations


def _cleaner_due_over_an_expired_listener() -> tuple[Model, State]:
    """One consumer whose listener of a two-message batch has run past its 2 s consumeTimeout, at the first
    cleanExpireMsg run after that (timers only in between: the listener runs on)."""
    config = Config(
        consumers=1, queues=1, messages_per_queue=2, backlog=2, consume_batch_size=2, consume_timeout=2_000,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET", client_crashes=0, client_shutdowns=0, broker_crashes=0,
    )  # fmt: skip
    model = Model(config)
    state = model.initial()
    for action in (act.Start(0), act.Rebalance(0), act.SendPull(0, 0), act.BrokerReceive(0, 0), act.ReceivePull(0, 0)):
        state = model.step(state, action)
    state = model.step(state, act.StartConsume(0, state.clients[0].requests[0].rid))
    while act.CleanExpiredMsg(0) not in model.enabled(state) or state.now <= 2_000:  # timers only: the listener runs on
        state = model.step(state, next(a for a in model.enabled(state) if isinstance(a, TIMERS)))
    return model, state


def test_inv23_reports_a_cleaner_run_that_leaves_an_expired_message_at_the_head_of_its_pq() -> None:
    """INV-23's other half (R6.8): the run itself. A CleanExpiredMsg step with the broker up after which a pq is still
    headed by a message whose listener started more than consumeTimeout before the run is reported; the correct run
    removes it."""
    model, state = _cleaner_due_over_an_expired_listener()
    after = model.step(state, act.CleanExpiredMsg(0))
    assert after.clients[0].pqs[0].tree == 0  # sent back and removed
    assert "INV-23" not in {v.id for v in check_step(model, state, act.CleanExpiredMsg(0), after)}
    kept = after._replace(clients=(after.clients[0]._replace(pqs=state.clients[0].pqs),))  # a run that removed nothing
    found = [v for v in check_step(model, state, act.CleanExpiredMsg(0), kept) if v.id == "INV-23"]
    assert found and "still heads pq" in found[0].detail


def test_inv24_reports_a_cleaner_run_that_sends_back_a_message_whose_listener_had_not_run_past_the_timeout() -> None:
    """INV-24's cleaner half (R6.8): a CleanExpiredMsg step may send back only messages whose listener started more
    than consumeTimeout before the run. The correct run passes; the same send-backs from a pq whose listeners started
    just now, or never, are reported (planted: send_back_from_ack_index shows the FinishConsume half)."""
    model, state = _cleaner_due_over_an_expired_listener()
    clean = act.CleanExpiredMsg(0)
    after = model.step(state, clean)
    assert len(after.broker.scheduled) > len(state.broker.scheduled)  # the run sent the expired messages back
    assert "INV-24" not in {v.id for v in check_step(model, state, clean, after)}
    pq = state.clients[0].pqs[0]
    assert pq is not None and pq.consume_started
    for started in (tuple((o, state.now) for o, _ in pq.consume_started), ()):  # started just now; never started
        before = state._replace(clients=(state.clients[0]._replace(pqs=(pq._replace(consume_started=started),)),))
        found = [v for v in check_step(model, before, clean, after) if v.id == "INV-24"]
        assert found and "had not run for more than consumeTimeout" in found[0].detail


# --- shutdown (R4.4): a persist queued before the shutdown --------------------------------------------------
# Uniform walks take the one Shutdown of their budget early, mostly at time 0 before any persist (300 walks: one
# shutdown with a commit on the connection), so the schedule below queues the 10 s persist's commit, consumes one
# more message and shuts down.
SHUTDOWN_CASES: dict[str, str] = {"shutdown_skips_queued_commits": "INV-25"}


def _shutdown_after_a_persist(mode: str, mutations: frozenset[str] = frozenset()) -> tuple[Model, State, list[str]]:
    """One consumer of one queue with two messages: message 0 consumed and its offset persisted by the 10 s timer
    (CLUSTERING: the commit still on the connection), message 1 consumed; returns the model, the state before
    ``Shutdown(0)`` and the property ids the run broke so far."""
    config = Config(
        mode=mode, consumers=1, queues=1, messages_per_queue=2, backlog=2,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET", client_crashes=0, broker_crashes=0, mutations=mutations,
    )  # fmt: skip
    model = Model(config)
    state = model.initial()
    broken: list[str] = []

    def step(action: act.Action) -> None:
        nonlocal state
        after = model.step(state, action)
        broken.extend(v.id for v in check_step(model, state, action, after) + check_state(model, after))
        state = after

    for action in (act.Start(0), act.Rebalance(0), act.SendPull(0, 0), act.BrokerReceive(0, 0), act.ReceivePull(0, 0)):
        step(action)
    for k in range(2):
        step(act.StartConsume(0, state.clients[0].requests[0].rid))
        rid = state.clients[0].consuming[0].rid
        step(act.FinishConsume(0, rid, "CONSUME_SUCCESS", 0, 0))
        step(act.ApplyConsumeOffset(0, rid))
        while k == 0 and not any(isinstance(a, act.PersistOffsets) for a in model.enabled(state)):
            step(next(a for a in model.enabled(state) if isinstance(a, TIMERS)))
        if k == 0:
            step(act.PersistOffsets(0, 0))
    assert state.clients[0].mem[0] == 2
    return model, state, broken


@pytest.mark.parametrize(("mutation", "prop"), list(SHUTDOWN_CASES.items()))
def test_property_refutes_planted_shutdown_bug_on_its_schedule(mutation: str, prop: str) -> None:
    for mutations, expected in ((frozenset({mutation}), [prop]), (frozenset(), [])):
        model, state, broken = _shutdown_after_a_persist(CLUSTERING, mutations)
        assert any(isinstance(c, Commit) and c.offset == 1 for c in state.clients[0].channel)  # the persist's commit
        after = model.step(state, act.Shutdown(0))
        assert broken + [v.id for v in check_step(model, state, act.Shutdown(0), after)] == expected


def test_inv25_reports_a_broadcasting_shutdown_that_leaves_offsets_json_behind() -> None:
    """INV-25's other half: a BROADCASTING shutdown writes every owned queue's memory offset to offsets.json; the
    correct one does (the file holds 2), one that left the file as it was is reported."""
    model, state, broken = _shutdown_after_a_persist(BROADCASTING)
    after = model.step(state, act.Shutdown(0))
    assert broken == [] and after.clients[0].file[0] == 2
    assert "INV-25" not in {v.id for v in check_step(model, state, act.Shutdown(0), after)}
    stale = after._replace(clients=(after.clients[0]._replace(file=state.clients[0].file),))
    assert state.clients[0].file[0] == 1
    assert "INV-25" in {v.id for v in check_step(model, state, act.Shutdown(0), stale)}


def test_inv26_reports_an_orderly_shutdown_that_keeps_its_broker_lock() -> None:
    """INV-26's shutdown half (R4.4 step 1, unlockAll): after an orderly CLUSTERING consumer locked its queue and shut
    down, the broker holds no lock in its name; a shutdown that left the lock table as it was is reported."""
    model = Model(Config(consumers=1, queues=1, messages_per_queue=0, orderly=True, client_crashes=0, broker_crashes=0))
    state = model.initial()
    for action in (act.Start(0), act.Rebalance(0)):
        state = model.step(state, action)
    assert state.clients[0].pqs[0] is not None and state.broker.locks[0] is not None
    after = model.step(state, act.Shutdown(0))
    assert after.broker.locks[0] is None
    assert "INV-26" not in {v.id for v in check_step(model, state, act.Shutdown(0), after)}
    kept = after._replace(broker=after.broker._replace(locks=state.broker.locks))
    assert "INV-26" in {v.id for v in check_step(model, state, act.Shutdown(0), kept)}


@pytest.mark.parametrize("version", ["4.9.8", "5.x"])
def test_correct_orderly_model_releases_its_locks_and_persists_at_shutdown(version: str) -> None:
    """INV-25 and INV-26 on the correct orderly model, two consumers on two queues with three shutdowns each walk
    (INV-19 is left out: 4.9.8 itself breaks it, docs/spec.md, section client_locks)."""
    config = Config(
        **{
            **BASE,
            "mode": CLUSTERING,
            "orderly": True,
            "consumers": 2,
            "queues": 2,
            "client_shutdowns": 3,
            "version": version,
        }
    )  # type: ignore[arg-type]
    result = explore(config, 150, STEPS, watch=frozenset({"INV-25", "INV-26"}))
    assert result.valid, result.counterexamples[0].describe()
    assert result.actions["Shutdown"] > 150
    assert version == "5.x" or result.actions["DelayedUnlock"] > 0
