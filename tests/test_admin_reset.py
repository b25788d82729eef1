"""Admin offset reset: 4.9.8's client-driven reset (R3.10a) and 5.x's server-side
reset (R3.10b), the invariants INV-18 (reset takes effect) and INV-8r (a committed offset falls only with
a declared cause), and the known race RMQ-26: 4.9.8 fails INV-18 with a short counterexample, 5.x passes.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from rmqspec.properties.explore import explore, walk
from rmqspec.properties.machines import configs, machine_for, outcomes
from rmqspec.properties.profiles import scaled
from rmqspec.properties.reset_scenarios import QUIET, Driver, consumed_then_reset, resume_after_reset
from rmqspec.refinement.reference_system import ReferenceSystem
from rmqspec.spec import actions as act
from rmqspec.spec import broker_rules as br
from rmqspec.spec.admin_reset import PULL_DELAY_WHEN_SUSPEND
from rmqspec.spec.config import CLUSTERING, V4_9_8, V5_X, Config
from rmqspec.spec.invariants import check_state, check_step
from rmqspec.spec.model import Model


def test_4_9_8_reset_race_fails_inv18_with_a_short_counterexample() -> None:
    d = consumed_then_reset(V4_9_8)
    resume_after_reset(d, patient=False)
    assert d.violations == [
        "INV-18 reset_takes_effect: queue 0: the reset to 0 completed, but the first batch of client 0's "
        "new pq 4 starts at 1"
    ]
    assert len(d.taken) <= 40


def test_4_9_8_reset_takes_effect_when_the_persist_lands_before_the_rebalance() -> None:
    d = consumed_then_reset(V4_9_8)
    resume_after_reset(d, patient=True)
    assert d.violations == []
    assert d.state.clients[0].pqs[0] is not None and d.state.clients[0].pqs[0].tree & 1


def test_4_9_8_paused_consumer_neither_rebalances_nor_pulls() -> None:
    d = consumed_then_reset(V4_9_8)
    d.fire(act.ClientResetReceive)
    cl = d.state.clients[0]
    assert cl.paused and cl.pqs[0] is None and cl.reset_held
    retry = d.model.retry_queue
    assert retry is not None
    while not any(isinstance(a, act.SendPull) for a in d.model.enabled(d.state)):
        d.do(next(a for a in d.model.enabled(d.state) if isinstance(a, act.Tick | act.PersistOffsets)))
    d.do(act.SendPull(0, retry))
    pq = d.state.clients[0].pqs[retry]
    assert pq is not None and pq.pull_ready_at == d.state.now + PULL_DELAY_WHEN_SUSPEND and not d.state.clients[0].pulls
    d.until(act.Rebalance)
    before = d.state.clients[0].pqs
    d.fire(act.Rebalance)
    assert d.state.clients[0].pqs == before  # doRebalance skipped while paused
    assert d.violations == []


def test_5x_reset_ignores_commits_while_pending_and_the_next_pull_answers_offset_moved() -> None:
    d = consumed_then_reset(V5_X)
    assert d.state.broker.offsets[0] == 0 and d.state.broker.reset_pending[0] == 0
    d.until(act.PersistOffsets)
    d.fire(act.PersistOffsets)  # memory still says 1: this UPDATE_CONSUMER_OFFSET is ignored
    d.drain()
    assert d.state.broker.offsets[0] == 0 and d.state.broker.reset_pending[0] == 0
    d.do(act.SendPull(0, 0))
    d.drain()
    pull = d.state.clients[0].pulls[0]
    assert pull.result == br.PullResult(br.OFFSET_ILLEGAL, (), 0) and d.state.broker.reset_pending[0] is None
    d.fire(act.ReceivePull)  # 5.x adopts at once: updateOffset(0), persist, remove the pq, rebalance now
    d.drain()
    d.fire(act.Rebalance)
    d.do(act.SendPull(0, 0))
    d.drain()
    d.fire(act.ReceivePull)
    assert d.violations == []
    assert d.state.ghost.reset_expect[0] is None  # INV-18 was checked on this batch


def test_5x_single_resets_pass_every_property_with_faults() -> None:
    for consumers, queues in ((2, 2), (3, 2)):
        config = Config(
            consumers=consumers,
            queues=queues,
            messages_per_queue=4,
            admin_resets=1,
            version=V5_X,
            max_reconsume_times=2,
        )
        result = explore(config, 40, 300)
        assert result.valid, result.counterexamples[0].describe()
        assert result.actions["AdminReset"] == 40


def test_5x_inv18_strict_finds_the_r3_10b_window() -> None:
    """Without the declared event "a commit from a pq older than the reset lands after it", INV-18
    fails under 5.x too: the pull that takes the pending reset still applies its stale piggy-back
    (tryCommitOffset after queryThenEraseResetOffset), and the adopting client's rebalance can read
    it before its own persist lands (docs/spec.md, section admin_reset)."""
    model = Model(Config(consumers=2, queues=2, messages_per_queue=4, admin_resets=1, version=V5_X, **QUIET))
    model.reset_declare_stale = False
    found = next(f for seed in range(200) if (f := walk(model, seed, 300)) is not None)
    assert {v.id for v in found.violations} == {"INV-18"}


TestAdminResetMachine = machine_for(
    configs(mode=CLUSTERING, version=V5_X, admin_resets=1, orderly=False, query_errors=0)
).TestCase
TestAdminResetMachine.settings = scaled(0.25)


def test_default_configuration_has_no_reset_action_or_wrapper() -> None:
    model = Model(Config())
    assert not model.reset_on and not model._reset_wrapped
    state = model.initial()
    for _ in range(60):
        enabled = model.enabled(state)
        assert not any(isinstance(a, act.AdminReset | act.ClientResetReceive | act.ClientResetWake) for a in enabled)
        state = model.step(state, enabled[0])


def test_walks_reach_every_reset_outcome_the_machine_reports() -> None:
    """The events the Hypothesis machine records (``outcomes``), counted over seeded 5.x walks."""
    model = Model(Config(consumers=2, queues=2, messages_per_queue=4, admin_resets=1, version=V5_X, **QUIET))
    counts: Counter[str] = Counter()
    for seed in range(40):
        rng = random.Random(seed)
        state = model.initial()
        for _ in range(300):
            enabled = model.enabled(state)
            after = model.step(state, enabled[rng.randrange(len(enabled))])
            counts.update(outcomes(model, state, after))
            state = after
    for name in (
        "admin reset completed",
        "commit ignored during a pending reset",
        "OFFSET_ILLEGAL correction sent",
        "reset expectation ended",
        "broker offset decreased",
    ):
        assert counts[name] > 0, (name, counts)


def test_4_9_8_reset_sleep_lets_a_late_pull_reply_and_the_persist_timer_commit_past_an_unconsumed_message() -> None:
    # Found while modelling (docs/spec.md, section admin_reset): message 0 is consumed (offset 1), message 1 waits in
    # the pq and a pull at 2 is held. resetOffset drops and clears the pq (msgCount 0) and sleeps 10 s with it still in
    # the table; the held pull comes back NO_NEW_MSG and correctTagsOffset raises memory to 2 (R6.7); the persist
    # timer's persistAll still names the dropped pq and commits 2, past message 1, which was never delivered. Until the
    # wake's updateOffset(1) and persist, a crash loses message 1 (INV-9).
    a = act
    script = [
        a.Start(0), a.Start(1), a.Produce(0, "A"), a.Rebalance(0), a.Produce(0, "A"), a.SendPull(0, 0),
        a.BrokerReceive(0), a.ReceivePull(0, 0), a.StartConsume(0, 2), a.Tick(),
        a.FinishConsume(0, 2, "CONSUME_SUCCESS", 0, 0), a.ApplyConsumeOffset(0, 2), a.Heartbeat(0), a.Heartbeat(1),
        a.Tick(), a.SendPull(0, 0), a.BrokerReceive(0), a.AdminReset(0, 1, False), a.ClientResetReceive(0),
        a.ReceivePull(0, 0), a.PersistOffsets(0), a.BrokerReceive(0),
    ]  # fmt: skip
    model = Model(Config(admin_resets=2, queues=2, messages_per_queue=4))
    s = model.initial()
    found: list[str] = []
    for action in script:
        t = model.step(s, action)
        found += [v.id for v in check_step(model, s, action, t) + check_state(model, t)]
        s = t
    assert found == ["INV-9"] and s.broker.offsets[0] == 2 and s.clients[0].reset_wake is not None


def _wake_with_a_pull_in_flight(late: bool) -> Driver:
    """``consumed_then_reset``: message 0 consumed and committed (1), message 1 in the pq, then the admin
    resets to 0. The next pull (offset 2) is held at the broker; the reset drops and clears the pq and sleeps;
    at its wake the held pull's reply (NO_NEW_MSG, next 2) is taken after the wake (``late`` false) or between
    the wake's updateOffset(0) and its persist (``ClientResetWake(0, late_reply=0)``, docs/spec.md, "What is real,
    ranked")."""
    d = consumed_then_reset(V4_9_8)
    d.do(act.SendPull(0, 0))
    d.drain()
    d.fire(act.ClientResetReceive)
    d.until(act.ClientResetWake)
    d.do(act.ClientResetWake(0, 0) if late else act.ClientResetWake(0))
    d.drain()
    d.fire(act.Rebalance)
    d.do(act.SendPull(0, 0))
    d.drain()
    d.fire(act.ReceivePull)
    return d


@pytest.mark.parametrize("late", [False, True])
def test_4_9_8_a_pull_reply_inside_the_reset_wake_persists_past_an_unconsumed_message(
    late: bool, tmp_path: Path
) -> None:
    # Inside MQClientInstance#resetOffset (1094-1095) the callback thread's correctTagsOffset (msgCount 0 after
    # the clear) raises memory from the target 0 to 2 before the persist, which sends 2: the reset is lost and
    # message 1, never delivered, is skipped (INV-9). Taken after the wake, the reply changes nothing sent.
    d = _wake_with_a_pull_in_flight(late)
    assert d.state.broker.offsets[0] == (2 if late else 0)
    assert sorted({v.split(" ", 1)[0] for v in d.violations}) == (["INV-9"] if late else [])
    reference = ReferenceSystem(d.model.config, tmp_path)  # the reference takes the reply at the same statement
    s = d.model.initial()
    for a in d.taken:
        s = d.model.step(s, a)
        reference.apply(a)
        assert reference.abstract() == (s.now, s.broker, s.clients), a
