"""Pull expiry (R6.6, R9.4), retention raising minOffset (R5.5) and OFFSET_ILLEGAL
(R5.5, R5.7), with the 4.9.8 / 5.x difference of the correction (docs/spec.md, "What the version switch changes"; S9).

The known-bug reproduction: 4.9.8 corrects an OFFSET_ILLEGAL queue 10 s after the pull result; a
rebalance in that window takes the queue away, and the correction then overwrites the offset as a
non-owner (INV-17). 5.x corrects at once and passes the same walks.
"""

from __future__ import annotations

import time
from pathlib import Path

from rmqspec.properties.explore import explore, replay, shrink
from rmqspec.properties.machines import configs, machine_for
from rmqspec.properties.orderly_scenarios import step_paced
from rmqspec.properties.profiles import scaled
from rmqspec.reference.broker import BrokerHost
from rmqspec.reference.compat import SpecCompat
from rmqspec.reference.scheduler import VirtualClock
from rmqspec.spec import actions as act
from rmqspec.spec import broker_rules as br
from rmqspec.spec.config import FROM_FIRST, Config
from rmqspec.spec.invariants import check_step
from rmqspec.spec.model import ActionNotEnabled, Model
from rmqspec.spec.pull import OFFSET_ILLEGAL_FIX_DELAY
from rmqspec.spec.state import PULL_DROPPED, BrokerQueue, Commit, Message, State

# The configuration of the reproduction: two consumers, two queues, two retention deletes.
KNOWN_BUG = {"consumers": 2, "queues": 2, "messages_per_queue": 4, "retention_deletes": 2}
WALKS, STEPS = 300, 300

# A schedule of the window: client 1 pulls queue 0 at 0 after retention deleted message 0,
# gets OFFSET_ILLEGAL, client 0 joins and takes queue 0 away, the 10 s task then corrects anyway.
WINDOW = [
    act.Start(1),
    act.Rebalance(1),
    act.SendPull(1, 0),
    act.Produce(0, "A"),
    act.RetentionDelete(0),
    act.BrokerReceive(1),
    act.ReceivePull(1, 0),
    act.Start(0),
    act.Rebalance(1),
]


def run(config: Config, actions: list[act.Action]) -> tuple[Model, State]:
    model = Model(config)
    state = model.initial()
    for a in actions:
        state = step_paced(model, state, a)  # 5.x paces the rebalance and a new pq's first pull (R4.2)
    return model, state


def until_fix_due(model: Model, state: State) -> State:
    """Fire timers (and ticks) until an OFFSET_ILLEGAL task is due."""
    timers = (act.Heartbeat, act.PersistOffsets, act.BrokerFlush, act.Rebalance)
    while not any(isinstance(a, act.FixOffsetIllegal) for a in model.enabled(state)):
        enabled = model.enabled(state)
        state = model.step(state, next((a for a in enabled if isinstance(a, timers)), act.Tick()))
    return state


def test_retention_raises_min_offset_and_ends_the_young_queue_answer() -> None:
    """R5.5, R3.5: RetentionDelete raises minOffset by one and spends budget; with message 0 gone a
    group with no offset is told QUERY_NOT_FOUND (no longer young); the budget bounds it."""
    config = Config(consumers=1, queues=1, retention_deletes=1)
    model, state = run(config, [act.Produce(0, "A"), act.Produce(0, "A"), act.RetentionDelete(0)])
    assert state.broker.queues[0].min_offset == 1 and state.budget.retention_deletes == 0
    assert act.RetentionDelete(0) not in model.enabled(state)
    _, state = run(config, [act.Produce(0, "A"), act.RetentionDelete(0), act.Start(0), act.Rebalance(0)])
    assert state.clients[0].pqs[0] is not None and state.clients[0].pqs[0].next_offset == 1  # LAST: maxOffset


def test_default_config_has_no_retention() -> None:
    """Existing configurations keep their meaning: RetentionDelete is never enabled by default."""
    model, state = run(Config(), [act.Start(0), act.Produce(0, "A")])
    assert not any(isinstance(a, act.RetentionDelete) for a in model.enabled(state))


def test_offset_illegal_in_4_9_8_drops_the_pq_and_corrects_10_s_later() -> None:
    """R5.7 (4.9.8): the pq stays in the table dropped, its PullRequest is gone; 10 s later
    FixOffsetIllegal overwrites memory with nextBeginOffset (increaseOnly=false), persists it and
    removes the pq; the queue waits for the next rebalance."""
    config = Config(**KNOWN_BUG)  # type: ignore[arg-type]
    model, state = run(config, WINDOW[:7])
    pq = state.clients[1].pqs[0]
    assert pq is not None and pq.pull_state == PULL_DROPPED and pq.next_offset == 1
    fix = state.clients[1].offset_fixes[0]
    assert (fix.queue, fix.offset, fix.due, fix.live) == (0, 1, state.now + OFFSET_ILLEGAL_FIX_DELAY, True)
    try:
        model.step(state, act.FixOffsetIllegal(1, 0))
        raise AssertionError("the correction ran before its 10 s")
    except ActionNotEnabled:
        pass
    state = until_fix_due(model, state)
    after = model.step(state, act.FixOffsetIllegal(1, 0))
    assert after.clients[1].pqs[0] is None and after.clients[1].mem[0] is None  # removed, then removeOffset
    fixes = [c.offset for c in after.clients[1].channel if isinstance(c, Commit) and c.cause == "offset-illegal-fix"]
    assert fixes == [1, 1]  # persist(mq), then removeProcessQueue's persist


def test_offset_illegal_in_5x_corrects_at_once_and_rebalances_now() -> None:
    """R5.7 (5.2.0+, ``Config.offset_illegal_fixed_at_once``): the same pull result corrects memory,
    persists, removes the pq and requests a rebalance in one step; no task is left."""
    config = Config(**{**KNOWN_BUG, "version": "5.x"})  # type: ignore[arg-type]
    _, state = run(config, WINDOW[:7])
    cl = state.clients[1]
    assert cl.pqs[0] is None and not cl.offset_fixes and cl.rebalance_requested
    assert any(isinstance(c, Commit) and c.cause == "offset-illegal-fix" and c.offset == 1 for c in cl.channel)


def test_4_9_8_window_exposes_inv17_on_a_short_schedule() -> None:
    """The scripted window: the 4.9.8 correction runs after the rebalance took the queue away."""
    model, state = run(Config(**KNOWN_BUG), WINDOW)  # type: ignore[arg-type]
    assert state.clients[1].pqs[0] is None and state.clients[1].offset_fixes
    state = until_fix_due(model, state)
    after = model.step(state, act.FixOffsetIllegal(1, 0))
    assert [v.id for v in check_step(model, state, act.FixOffsetIllegal(1, 0), after)] == ["INV-17"]


def test_4_9_8_random_walks_find_the_offset_illegal_window_and_shrink_it() -> None:
    """Known-bug reproduction (S9): seeded walks of 4.9.8 find INV-17 fast; the shrunk counterexample
    is short and replays. Figures (docs/spec.md, "OFFSET_ILLEGAL"): found in walk 21 (~0.2 s),
    74 steps shrunk to 20."""
    config = Config(**KNOWN_BUG)  # type: ignore[arg-type]
    start = time.perf_counter()
    result = explore(config, WALKS, STEPS)
    assert not result.valid and {v.id for v in result.counterexamples[0].violations} == {"INV-17"}
    assert result.walks <= 60 and time.perf_counter() - start < 5
    small = shrink(result.counterexamples[0])
    assert len(small.actions) <= 25
    assert replay(config, small.actions)[1] == small.violations


def test_5x_passes_the_same_walks() -> None:
    """The 5.x switch closes the window: the same budget finds nothing, with corrections exercised."""
    config = Config(**{**KNOWN_BUG, "version": "5.x"})  # type: ignore[arg-type]
    result = explore(config, WALKS, STEPS)
    assert result.valid, result.counterexamples[0].describe()
    assert result.actions["RetentionDelete"] > 0 and result.actions["FixOffsetIllegal"] == 0


# The swarm machine draws retention under 5.x anywhere and under 4.9.8 with one consumer or in
# BROADCASTING (properties/machines.py); this pinned 4.9.8 machine makes sure the 10 s correction
# (FixOffsetIllegal) is exercised under Hypothesis too, with every property checked at every step.
TestFidelityMachine = machine_for(
    configs(
        version="4.9.8",
        consumers=1,
        messages_per_queue=3,
        backlog=2,
        consume_from_where=FROM_FIRST,
        retention_deletes=2,
    )
).TestCase
TestFidelityMachine.settings = scaled(0.25)


def test_timestamp_search_on_a_fully_deleted_queue_lands_on_0_in_model_and_reference(tmp_path: Path) -> None:
    """R10.3 after retention deleted every message: RocketMQ's search visits no unit and computes
    (fileFromOffset + -1) / 20 = 0; model and reference agree, and the pull at 0 is then corrected."""
    queue = BrokerQueue((Message((0, 0), "A", 0),), False, min_offset=1)
    assert br.search_offset(queue, 15_000) == 0
    host = BrokerHost(VirtualClock(0), tmp_path, "broker-a", {"T": 1}, SpecCompat())
    host.start()
    host.produce("T", 0, "A", bytes(16))
    host.message_store.retention_delete("T", 0)
    assert host.message_store.get_offset_in_queue_by_time("T", 0, 15_000, True) == 0
