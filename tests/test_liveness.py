"""Liveness at quiescence (docs/spec.md §13): once faults stop and timers run, the group catches up.

The correct model passes every liveness check after many seeded walks, with consumers restarted and
with them left down; each liveness-only planted bug is caught by its LIV check and by no safety
property; and the Hypothesis machine quiesces at the end of each example.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from rmqspec.properties.explore import explore, walk
from rmqspec.properties.liveness import HORIZON_MS, quiesce, quiesce_and_check
from rmqspec.properties.machines import LivenessMachine, configs, machine_for
from rmqspec.properties.profiles import scaled
from rmqspec.spec.config import BROADCASTING, CLUSTERING, V5_X, Config
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

# Liveness-only planted bugs: mutation -> (the check that refutes it, config that lets walks reach it).
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
def test_liveness_catches_a_planted_bug_that_safety_misses(
    mutation: str, prop: str, overrides: dict[str, object]
) -> None:
    base = {"consumers": 3, "queues": 4, "messages_per_queue": 4, "max_reconsume_times": 2, **overrides}
    buggy = Config(**base, mutations=frozenset({mutation}))  # type: ignore[arg-type]
    assert explore(buggy, 100, STEPS).valid, "a safety property caught it: not a liveness-only bug"
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


TestLivenessMachine = machine_for(configs(), LivenessMachine).TestCase
TestLivenessMachine.settings = scaled(0.25)


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
