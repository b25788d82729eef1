"""Liveness at quiescence (docs/spec.md, "Liveness at quiescence"): once faults stop and timers run, the group catches
up.

The correct model passes every liveness check after many seeded walks, with consumers restarted and with them left
down; each planted timer bug is caught by its LIV check with INV-27 (the timers' own safety property, the only one that
sees it) unwatched; a dead task's failures are its harm, with the task, client and time that explain them, and explain
nothing else; and the Hypothesis machines quiesce at the end of each example.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test

from rmqspec.cli import main
from rmqspec.properties import liveness
from rmqspec.properties.explore import explore, replay_liveness, walk
from rmqspec.properties.liveness import (
    HORIZON_MS,
    DeadTask,
    HeldUncommitted,
    LocklessCoOwner,
    Shortfall,
    check_liveness,
    death,
    explains,
    quiesce,
    quiesce_and_check,
)
from rmqspec.properties.machines import machine_for
from rmqspec.spec import actions as act
from rmqspec.spec.config import BROADCASTING, CLUSTERING, V5_X, Config
from rmqspec.spec.invariants import check_step
from rmqspec.spec.model import Model
from rmqspec.spec.state import State

# Configurations the correct model must pass, over WALKS walks of STEPS steps each, both ways.
CLEAN: list[dict[str, object]] = [
    {"mode": CLUSTERING, "consumers": 3, "max_reconsume_times": 2},
    {"mode": BROADCASTING, "consumers": 3, "max_reconsume_times": 2},
    {"mode": CLUSTERING, "version": V5_X, "query_errors": 2, "retention_deletes": 2},
    {"mode": CLUSTERING, "consumers": 1, "retention_deletes": 3, "backlog": 2},
    {"mode": CLUSTERING, "orderly": True, "broker_crashes": 0},
]
WALKS, STEPS = 25, 150

# Planted timer bugs that only INV-27 sees among the safety properties: mutation -> (the check that refutes it at
# quiescence, config that lets walks reach it).
LIVENESS_CASES: dict[str, tuple[str, dict[str, object]]] = {
    "persist_timer_stops": ("LIV-2", {"mode": BROADCASTING}),
    "rebalance_timer_stops": ("LIV-1", {"mode": CLUSTERING, "version": V5_X, "query_errors": 3, "consumers": 2}),
}


def _end_state(model: Model, seed: int) -> State:
    taken: list[object] = []
    assert walk(model, seed, STEPS, record=taken) is None  # type: ignore[arg-type]
    state = model.initial()
    for action in taken:
        state = model.step(state, action)  # type: ignore[arg-type]
    return state


@pytest.mark.parametrize("overrides", CLEAN, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
@pytest.mark.parametrize("restart_clients", [True, False], ids=["restarted", "left-down"])
def test_correct_model_is_live_at_quiescence(overrides: dict[str, object], restart_clients: bool) -> None:
    model = Model(Config(**overrides))  # type: ignore[arg-type]
    for seed in range(WALKS):
        quiescence, found = quiesce_and_check(model, _end_state(model, seed), restart_clients)
        assert not found, f"seed {seed}: {found}"
        assert quiescence.state.now <= quiescence.horizon and len(quiescence.steps) <= quiescence.bound


@pytest.mark.parametrize(("mutation", "prop", "overrides"), [(m, p, o) for m, (p, o) in LIVENESS_CASES.items()])
def test_liveness_catches_a_planted_timer_bug_that_only_inv27_of_the_safety_properties_sees(
    mutation: str, prop: str, overrides: dict[str, object]
) -> None:
    base = {"consumers": 3, "queues": 4, "messages_per_queue": 4, "max_reconsume_times": 2, **overrides}
    buggy = Config(**base, mutations=frozenset({mutation}))  # type: ignore[arg-type]
    safety = explore(buggy, 100, STEPS)
    assert not safety.valid and {v.id for c in safety.counterexamples for v in c.violations} == {"INV-27"}
    found = explore(buggy, 100, STEPS, watch=frozenset({prop}), liveness=True)
    assert not found.valid, f"{prop} did not catch {mutation}"
    assert prop in {v.id for v in found.counterexamples[0].violations}
    clean = explore(Config(**base), 100, STEPS, liveness=True)  # type: ignore[arg-type]
    assert clean.valid, clean.counterexamples[0].describe()


def test_quiescence_is_deterministic_and_stays_within_its_bounds() -> None:
    model = Model(Config(consumers=3, max_reconsume_times=2))
    state = _end_state(model, 7)
    first, second = quiesce(model, state), quiesce(model, state)
    assert first.steps == second.steps and first.state == second.state
    assert first.reached and first.state.now - state.now <= HORIZON_MS + max(
        [0, *(e.due - state.now for e in state.broker.scheduled)]
    )


def test_a_client_left_down_leaves_its_queues_to_the_survivors() -> None:
    model = Model(Config(consumers=2, client_crashes=1, client_shutdowns=0, broker_crashes=0))
    state = model.step(model.initial(), next(a for a in model.enabled(model.initial()) if type(a).__name__ == "Start"))
    quiescence, found = quiesce_and_check(model, state, restart_clients=False)
    assert not found
    owners = {q for cl in quiescence.state.clients if cl.running for q, pq in enumerate(cl.pqs) if pq is not None}
    assert owners == set(range(model.q_count))


@pytest.mark.parametrize(
    ("task", "mode", "expected"),
    [
        ("persistAllConsumerOffset", BROADCASTING, "LIV-2"),  # the local file is never written again
        ("RebalanceService", CLUSTERING, "LIV-1"),  # the old owner keeps every queue the newcomer takes too
        # the channel expires 120 s after the last heartbeat (nobody told); the consumer's own rebalance then
        # finds itself missing and drops its queues, and messageQueueChanged's heartbeat (not the dead task)
        # brings it back: it flaps every ~2 minutes, a liveness check at any instant may pass
        ("sendHeartbeatToAllBroker", CLUSTERING, None),
    ],
)
def test_a_background_task_that_dies_is_caught_at_quiescence(task: str, mode: str, expected: str | None) -> None:
    from rmqspec.spec import actions as act

    config = Config(
        mode=mode, consumers=2, queues=2, backlog=2, messages_per_queue=2, task_deaths=1,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET", client_crashes=0, client_shutdowns=0, broker_crashes=0,
    )  # fmt: skip
    model = Model(config)
    state = model.initial()
    for action in (act.Start(0), act.Rebalance(0), act.TaskDies(0, task), act.Start(1)):
        state = model.step(state, action)
    if expected is None:  # run the whole horizon: the flapping starts after 120 s of silence
        steps = quiesce(model, state, settle=False).steps
        assert steps.count(act.ExpireChannel(0)) >= 2  # it dropped out, came back, and dropped out again
    else:
        assert expected in {v.id for v in quiesce_and_check(model, state)[1]}
    healthy = Model(replace(config, task_deaths=0))
    state = healthy.initial()
    for action in (act.Start(0), act.Rebalance(0), act.Start(1)):
        state = healthy.step(state, action)
    assert quiesce_and_check(healthy, state)[1] == []


# --- a dead task's failures are its harm; anything else is a violation ------------------------------
TWO_BROADCASTING = Config(
    mode=BROADCASTING, consumers=2, queues=2, backlog=2, messages_per_queue=2, task_deaths=1,
    consume_from_where="CONSUME_FROM_FIRST_OFFSET", client_crashes=1, client_shutdowns=0, broker_crashes=0,
)  # fmt: skip


def _scripted(model: Model, actions: list[act.Action]) -> tuple[State, list[DeadTask]]:
    """Apply ``actions`` from the initial state, recording the deaths as a walk does."""
    state, deaths = model.initial(), []
    for k, action in enumerate(actions, 1):
        state = model.step(state, action)
        if (dead := death(action, state, k)) is not None:
            deaths.append(dead)
    return state, deaths


def test_a_dead_persist_task_s_failures_are_its_harm_naming_the_task_client_and_time() -> None:
    model = Model(TWO_BROADCASTING)
    script = [act.Start(0), act.Rebalance(0), act.Tick(), act.TaskDies(0, "persistAllConsumerOffset"), act.Start(1)]
    state, deaths = _scripted(model, script)
    assert deaths == [DeadTask(0, "persistAllConsumerOffset", 4, _scripted(model, script[:4])[0].now)]
    outcome = check_liveness(model, state, deaths)
    assert outcome.violations == [] and {h.id for h in outcome.harms} == {"LIV-2", "LIV-5"}
    assert all(h.causes == tuple(deaths) and "client 0 " in h.detail for h in outcome.harms)
    # the same end state without the walk's record of the death: nothing explains the failures
    assert {v.id for v in check_liveness(model, state, ()).violations} == {"LIV-2", "LIV-5"}


def test_a_dead_task_explains_nothing_once_its_client_restarted() -> None:
    # client 0's persist task dies, the process crashes and restarts (its tasks live again), and under
    # persist_timer_stops the new persist task runs once, before anything is consumed, and never again:
    # the file lags for good, and the old death must not excuse it
    model = Model(replace(TWO_BROADCASTING, mutations=frozenset({"persist_timer_stops"})))
    script = [act.Start(0), act.Rebalance(0), act.TaskDies(0, "persistAllConsumerOffset"), act.Crash(0), act.Start(0)]
    state, deaths = _scripted(model, script)
    busy = (act.SendPull, act.ReceivePull, act.StartConsume, act.FinishConsume, act.Produce, *act.PERTURBING)
    while act.PersistOffsets(0) not in model.enabled(state):  # timers only: nothing is pulled or consumed
        state = model.step(state, next(a for a in model.enabled(state) if not isinstance(a, busy)))
    state = model.step(state, act.PersistOffsets(0))
    assert deaths and not state.clients[0].dead_tasks
    outcome = check_liveness(model, state, deaths)  # INV-27: the quiescence's persist runs once more and stops
    assert {v.id for v in outcome.violations} == {"INV-27", "LIV-2", "LIV-5"} and outcome.harms == []


def test_a_dead_task_does_not_excuse_another_client_s_failure() -> None:
    model = Model(replace(TWO_BROADCASTING, mutations=frozenset({"persist_timer_stops"})))
    died = [act.Start(0), act.Rebalance(0), act.TaskDies(0, "persistAllConsumerOffset"), act.Start(1)]
    outcome = check_liveness(model, *_scripted(model, died))  # INV-27: client 1's persist runs once and stops
    assert {v.id for v in outcome.violations} == {"INV-27", "LIV-2", "LIV-5"}
    assert all("client 1" in v.detail and "client 0" not in v.detail for v in outcome.violations)  # client 0's own
    # are its task's harm


@pytest.mark.parametrize("cause", ["TaskDies", "clean_timer_stops"])
def test_a_dead_clean_expire_msg_task_excuses_a_pinned_message_and_explains_no_shortfall(cause: str) -> None:
    # R6.8: the listener runs on past consumeTimeout (2 s) while only timers fire. With the cleaner's task dead
    # (TaskDies) INV-23 accepts the message held past its deadline (start + 2 x 2 s); with the planted bug that
    # never re-arms the task (no death to show) INV-23 reports it. At quiescence the listener answers, so the dead
    # task leaves no shortfall to explain: no violation and no harm.
    config = Config(
        consumers=1, queues=1, messages_per_queue=2, backlog=2, consume_batch_size=2, consume_timeout=2_000,
        task_deaths=1, consume_from_where="CONSUME_FROM_FIRST_OFFSET", client_crashes=0, client_shutdowns=0,
        broker_crashes=0, mutations=frozenset() if cause == "TaskDies" else frozenset({"clean_timer_stops"}),
    )  # fmt: skip
    model = Model(config)
    script: list[act.Action] = [act.Start(0), act.Rebalance(0), act.SendPull(0, 0), act.BrokerReceive(0, 0)]
    script.append(act.ReceivePull(0, 0))
    state, _ = _scripted(model, script)
    script.append(act.StartConsume(0, state.clients[0].requests[0].rid))
    if cause == "TaskDies":
        script.append(act.TaskDies(0, "cleanExpireMsg"))
    state, deaths = _scripted(model, script)
    reported = []
    while state.now <= 10_000:  # timers only: the listener runs on, nothing is pulled
        action = next(a for a in model.enabled(state) if isinstance(a, act.TIME_ONLY))
        after = model.step(state, action)
        reported += [v for v in check_step(model, state, action, after) if v.id == "INV-23"]
        state = after
    assert state.clients[0].pqs[0].tree  # type: ignore[union-attr]  # still held: nothing cleaned it
    if cause == "TaskDies":
        assert reported == [] and [d.task for d in deaths] == ["cleanExpireMsg"]
    else:
        assert reported and "no cleanExpireMsg task runs, and none died" in reported[0].detail
    outcome = check_liveness(model, state, deaths)
    assert outcome.violations == [] and outcome.harms == []


def test_an_auto_commit_off_listener_holding_messages_is_harm_not_a_violation() -> None:
    # orderly, autoCommit false: the listener answers SUCCESS without a COMMIT and holds what it took (R8.6);
    # its queue is then flow-controlled by what it holds (R6.5) and never committed: its choice, shown as harm
    config = Config(
        consumers=1, queues=1, messages_per_queue=3, backlog=3, orderly=True, orderly_auto_commit=False,
        pull_threshold_for_queue=1, pull_batch_size=2, consume_batch_size=1, client_crashes=0, client_shutdowns=0,
        broker_crashes=0, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    )  # fmt: skip
    model = Model(config)
    state = model.initial()
    first = (act.FinishConsume, act.StartConsume, act.ApplyConsumeOffset, act.ReceivePull, act.BrokerReceive)
    for _ in range(40):  # consume whatever can be, the listener answering SUCCESS each time, then pull
        enabled = [a for a in model.enabled(state) if getattr(a, "status", act.ORDERLY_SUCCESS) == act.ORDERLY_SUCCESS]
        rank = {kind: k for k, kind in enumerate(first)}
        state = model.step(state, min(enabled, key=lambda a: rank.get(type(a), len(first) + isinstance(a, act.Tick))))
    assert state.clients[0].pqs[0] is not None and state.clients[0].pqs[0].consuming_tree
    outcome = check_liveness(model, state)
    assert outcome.violations == []
    assert {type(c) for h in outcome.harms for c in h.causes} == {HeldUncommitted}


# A default campaign's LIV-2 failure (`rmqspec campaign --runs 300 --seed 7`, unit 43, seed 50, profile churn), its
# walk shrunk to 9 steps: orderly CLUSTERING, 5.x, CONFIG lists naming queue 1 for consumers 0 and 3. Consumer 3 locks
# and creates its pq of queue 1, then stalls 65 s: its broker lock lapses (R8.1) and consumer 0 takes it, consumes and
# commits 1, while consumer 3 keeps its lockless pq and its memory offset 0, persisted every 5 s (R4.1, R11.4, R3.2).
# Also in the failure store (failures/LIV-2-921497d7c3.json). docs/spec.md, "Liveness in every run, and what a shown
# cause may explain".
LOCKLESS = Config(
    consumers=4, queues=3, messages_per_queue=4, mode=CLUSTERING, strategy="CONFIG",
    allocate_config_queues=((1,), (), (3,), (0, 1)), consume_from_where="CONSUME_FROM_LAST_OFFSET", pull_batch_size=3,
    consume_batch_size=1, pull_threshold_for_queue=3, max_reconsume_times=2, client_crashes=0, client_shutdowns=3,
    broker_crashes=0, send_back_failures=0, client_stalls=1, version=V5_X, orderly=True, backlog_head_hot=False,
)  # fmt: skip
LOCKLESS_WALK: list[act.Action] = [
    act.Start(3), act.Tick(), act.Rebalance(3), act.Produce(1, "A"), act.Heartbeat(3), act.LockAll(3), act.Tick(),
    act.SendPull(3, 1), act.Stall(3, 65_000),
]  # fmt: skip


def _lockless_outcome(config: Config = LOCKLESS) -> liveness.LivenessOutcome:
    safety, outcome = replay_liveness(config, LOCKLESS_WALK, len(LOCKLESS_WALK))
    assert safety == [] and outcome is not None
    return outcome


@pytest.mark.parametrize("auto_commit", [True, False])
def test_a_lockless_co_owner_s_persists_are_harm_not_a_violation(auto_commit: bool) -> None:
    # with autoCommit false as well the cause is the lockless co-owner, not HeldUncommitted: it took nothing
    outcome = _lockless_outcome(replace(LOCKLESS, orderly_auto_commit=auto_commit))
    assert outcome.violations == []
    causes = {c for h in outcome.harms for c in h.causes}
    assert causes == {LocklessCoOwner(client=3, holder=0, queue=1, offset=0, holder_offset=1)}
    assert [h.id for h in outcome.harms] == ["LIV-2"]


@pytest.mark.parametrize("auto_commit", [True, False])
def test_without_the_lockless_cause_the_campaign_s_liv2_failure_returns(
    monkeypatch: pytest.MonkeyPatch, auto_commit: bool
) -> None:
    # the code before the cause: the same walk fails LIV-2 as the campaign found it; HeldUncommitted does not explain it
    monkeypatch.setattr(liveness, "lockless_co_owners", lambda model, s: [])
    outcome = _lockless_outcome(replace(LOCKLESS, orderly_auto_commit=auto_commit))
    assert [(v.id, v.detail) for v in outcome.violations] == [
        ("LIV-2", "client 3 queue 1: memory offset 0 but the broker holds 1")
    ]


def test_a_lockless_co_owner_explains_only_its_queue_s_overwrites() -> None:
    model = Model(LOCKLESS)
    s = _lockless_outcome().quiescence.state
    cause = LocklessCoOwner(client=3, holder=0, queue=1, offset=0, holder_offset=1)
    assert liveness.lockless_co_owners(model, s) == [cause]
    stale = Shortfall("LIV-2", "", 3, 1)
    assert explains(model, cause, stale, s)
    assert explains(model, cause, Shortfall("LIV-2", "", 0, 1), s)  # the holder's, when the stale value lands last
    assert not explains(model, cause, Shortfall("LIV-2", "", 3, 0), s)  # another queue
    assert not explains(model, cause, Shortfall("LIV-2", "", 2, 1), s)  # a client that is neither owner
    assert not explains(model, cause, Shortfall("LIV-5", "", 0, 1, "unconsumed"), s)  # the holder consumes everything
    assert not explains(model, cause, Shortfall("LIV-5", "", 0, 1, "uncommitted"), s)  # the broker holds 1, not 0
    offsets = list(s.broker.offsets)
    offsets[1] = 0  # the lockless owner's persist landed last: the committed offset is its stale 0
    landed = s._replace(broker=s.broker._replace(offsets=tuple(offsets)))
    assert explains(model, cause, Shortfall("LIV-5", "", 0, 1, "uncommitted"), landed)
    offsets[1] = 5  # a value neither owner ever wrote: not this cause's doing
    foreign = s._replace(broker=s.broker._replace(offsets=tuple(offsets)))
    assert not explains(model, cause, stale, foreign)
    assert not explains(model, cause, Shortfall("LIV-2", "", 0, 1, "unflushed"), foreign)
    # a list that does not name the queue (no configured double ownership): no such cause
    lists = ((1,), (), (3,), (0,))
    assert liveness.lockless_co_owners(Model(replace(LOCKLESS, allocate_config_queues=lists)), s) == []


def _write_config(tmp_path: Path, config: dict[str, object]) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return str(path)


def _timer_bug_run(tmp_path: Path) -> list[str]:
    config = _write_config(tmp_path, {"mode": BROADCASTING, "consumers": 2, "queues": 2})
    return ["run", "--config", config, "--walks", "3", "--steps", "60", "--mutation", "persist_timer_stops"]


def test_rmqspec_run_reports_a_stopped_timer_as_an_inv27_counterexample_without_liveness(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*_timer_bug_run(tmp_path), "--no-liveness", "--out", str(tmp_path / "a")]) == 1
    assert "INV-27" in capsys.readouterr().out


@pytest.mark.usefixtures("inv27_unwatched")  # what the liveness checks see of it alone
def test_rmqspec_run_checks_liveness_by_default_and_a_planted_timer_bug_is_a_counterexample(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = _timer_bug_run(tmp_path)
    assert main([*argv, "--out", str(tmp_path / "a")]) == 1
    out = capsys.readouterr().out
    assert "LIV-2 liveness at quiescence" in out and "its walk shrunk from" in out
    summary = json.loads((tmp_path / "a" / "run-summary.json").read_text())
    assert summary["liveness"] and summary["configs"][0]["liveness"]["violations"] == 1
    assert main([*argv, "--no-liveness", "--out", str(tmp_path / "b")]) == 0  # the other safety properties miss it
    assert "liveness at quiescence: not checked (--no-liveness)" in capsys.readouterr().out


def test_rmqspec_run_counts_dead_tasks_failures_as_harm_per_cause(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _write_config(tmp_path, {"mode": BROADCASTING, "consumers": 2, "queues": 2, "task_deaths": 2})
    assert main(["run", "--config", config, "--walks", "20", "--steps", "100", "--out", str(tmp_path)]) == 0
    figures = json.loads((tmp_path / "run-summary.json").read_text())["configs"][0]["liveness"]
    assert figures["quiesced"] == figures["reached"] == 20 and figures["violations"] == 0
    assert figures["harm"] and all(cause.startswith("TaskDies(") for cause in figures["harm"])
    harm_line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("liveness harm"))
    assert all(cause in harm_line for cause in figures["harm"])


@pytest.mark.usefixtures("inv27_unwatched")
def test_the_spec_machine_quiesces_at_teardown_and_refutes_a_timer_bug_with_inv27_unwatched() -> None:
    buggy = Config(
        mode=BROADCASTING, consumers=2, queues=1, client_crashes=0, client_shutdowns=0, broker_crashes=0,
        mutations=frozenset({"persist_timer_stops"}),
    )  # fmt: skip
    # no shrinking: each shrink attempt quiesces a failing state to the horizon, which takes minutes in all
    quick = settings(max_examples=20, stateful_step_count=30, derandomize=True, database=None)
    with pytest.raises(AssertionError, match="LIV-2"):
        run_state_machine_as_test(machine_for(st.just(buggy)), settings=settings(quick, phases=[Phase.generate]))
    dying = replace(buggy, mutations=frozenset(), task_deaths=1)  # its failures are harm: every example passes
    run_state_machine_as_test(machine_for(st.just(dying)), settings=quick)
