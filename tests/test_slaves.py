"""The slave (``Config.slave``; R2.4, R2.5, R3.4, R3.8, R5.3-R5.5, R9.3; docs/spec.md, section slave): what it serves
while the master is down, its offset sync, and the two known bugs it carries, RMQ-17 (a lagging slave correcting
offsets, restored by ``offset_check_in_slave``) and RMQ-25 (2) (commits taken during the outage overwritten by the
sync)."""

from __future__ import annotations

import itertools

import pytest

from rmqspec.properties.explore import explore, replay, walk
from rmqspec.properties.slave_scenarios import (
    RMQ17_SCHEDULE,
    consume_everything,
    consumed_two_then_master_down,
    persist_and_land,
    pull_once,
    slave_config,
    slave_outage,
)
from rmqspec.spec import actions as act
from rmqspec.spec import broker_rules as br
from rmqspec.spec.config import BROADCASTING, V4_9_8, V5_X, Config, ConfigError
from rmqspec.spec.model import Model
from rmqspec.spec.pull import PULL_DELAY_WHEN_EXCEPTION
from rmqspec.spec.state import State, history_list


def test_a_4_9_8_slave_serves_pulls_and_takes_commits_while_the_master_is_down() -> None:
    d = consumed_two_then_master_down(V4_9_8)
    assert d.state.broker.offsets[0] == 2
    d.fire(act.SendPull)
    request = d.state.clients[0].channel[-1]
    assert request.to_slave and not request.commit_flag  # R5.3: the flag is cleared for a slave's address
    d.drain()
    d.fire(act.ReceivePull)
    assert d.state.clients[0].pqs[0].next_offset == 4  # FOUND [2, 3] from the slave's copy
    consume_everything(d)
    persist_and_land(d)
    assert d.state.slave is not None and d.state.slave.offsets[0] == 4  # R3.4: no role check
    assert d.state.broker.offsets[0] == 2  # the master, down, keeps what it loaded
    assert "commit-landed-on-slave" in {e.kind for e in history_list(d.state)}
    assert d.violations == []


def test_a_5x_slave_refuses_pulls_but_takes_commits_and_answers_queries() -> None:
    d = consumed_two_then_master_down(V5_X)
    pq = d.state.clients[0].pqs[0]
    pull_once(d)  # rejectRequest: SYSTEM_BUSY, an exception to the client
    after = d.state.clients[0].pqs[0]
    assert after.next_offset == pq.next_offset == 2
    assert after.pull_ready_at == d.state.now + PULL_DELAY_WHEN_EXCEPTION  # pull again in 1 s (R5.7)
    persist_and_land(d)
    assert d.state.slave is not None and d.state.slave.offsets[0] == 2
    assert d.violations == []


def test_slave_sync_copies_the_masters_memory_table_per_topic_key() -> None:
    model = Model(slave_config(queues=2))
    s = model.initial()
    assert s.slave is not None and s.slave.next_sync == 3_000
    master = s.broker._replace(offsets=(5, None, 1))  # topic queues 0-1, the retry queue 2
    slave = s.slave._replace(offsets=(7, 3, None), next_sync=0)
    t = model.step(s._replace(broker=master, slave=slave), act.SlaveSync())
    assert t.slave is not None
    # putAll on the topic@group map: the master's whole per-queue map of T@G replaces the slave's (queue 1's
    # 3, only on the slave, is gone); the retry topic's key is copied too
    assert t.slave.offsets == (5, None, 1)
    assert t.slave.next_sync == 10_000
    only_slave = model.step(
        s._replace(broker=s.broker._replace(offsets=(None, None, 1)), slave=slave), act.SlaveSync()
    ).slave
    assert only_slave is not None and only_slave.offsets[:2] == (7, 3)  # no T@G key on the master: kept


def test_slave_sync_waits_for_the_master_and_follows_the_version_timer() -> None:
    model = Model(slave_config(V5_X))
    s = model.initial()
    assert s.slave is not None and s.slave.next_sync == 61_000
    down = s._replace(broker=s.broker._replace(up=False, offsets=(3, None)), slave=s.slave._replace(next_sync=0))
    t = model.step(down, act.SlaveSync())
    assert t.slave is not None and t.slave.offsets == s.slave.offsets and t.slave.next_sync == 63_000


def test_rmq25_sync_overwrites_what_the_slave_took_during_the_outage_and_the_queue_replays() -> None:
    """RMQ-25 (2): the master is down; the consumer reads from the slave and commits 4 there; the master
    comes back with 2 (its flushed file); the next SlaveSync puts 2 back on the slave; a consumer that
    restarts before persisting 4 to the master resumes at 2 and gets 2 and 3 again."""
    d = slave_outage(V4_9_8, tolerate_slave_sync=False)  # report what SLAVE_ANOMALIES tolerates
    landed = [e.offset for e in history_list(d.state) if e.kind == "commit-landed-on-slave" and e.queue == 0]
    assert landed == [4] and d.state.slave is not None and d.state.slave.offsets[0] == 2
    assert d.violations == [
        "INV-8s slave_decrease_declared: queue 0: SlaveSync lowered the slave's offset 4 -> 2 "
        "(the master's older value)"
    ]
    pq = d.state.clients[0].pqs[0]
    assert pq is not None and pq.next_offset == 2
    pull_once(d)
    d.fire(act.StartConsume)
    assert d.state.ghost.redeliveries == 1  # offset 2 again: bounded duplicates, not a loss


def test_rmq25_is_tolerated_by_default_as_a_declared_slave_anomaly() -> None:
    assert slave_outage(V4_9_8).violations == []


def test_rmq17_a_lagging_slave_with_offset_check_in_slave_corrects_from_its_own_bounds() -> None:
    config = slave_config(consume_from_where="CONSUME_FROM_LAST_OFFSET", offset_check_in_slave=True)
    _, violations = replay(config, list(RMQ17_SCHEDULE))
    assert [v.id for v in violations] == ["INV-21"]
    assert "corrected offset 1 to 0" in violations[0].detail


def test_rmq17_the_default_slave_corrects_nothing_and_the_client_retries_at_the_same_offset() -> None:
    config = slave_config(consume_from_where="CONSUME_FROM_LAST_OFFSET")
    state, violations = replay(config, list(RMQ17_SCHEDULE))
    assert violations == []
    pq = state.clients[0].pqs[0]
    assert pq is not None and pq.next_offset == 1 and pq.pull_ready_at == state.now  # PULL_RETRY_IMMEDIATELY
    assert state.clients[0].offset_fixes == ()


def test_slave_pull_result_keeps_the_request_offset_unless_offset_check_in_slave() -> None:
    empty = Model(slave_config()).initial().broker.queues[0]
    assert br.slave_pull_result(empty, 3, 2, None, False) == br.PullResult(br.NO_MATCHED_MSG, (), 3)
    assert br.slave_pull_result(empty, 3, 2, None, True) == br.PullResult(br.OFFSET_ILLEGAL, (), 0)
    assert br.slave_pull_result(empty, 0, 2, None, False).status == br.NO_NEW_MSG


def test_config_refuses_slave_combinations_it_does_not_model() -> None:
    with pytest.raises(ConfigError, match="offset_check_in_slave"):
        Config(offset_check_in_slave=True)
    with pytest.raises(ConfigError, match="slave: got true with orderly"):
        Config(slave=True, orderly=True)
    with pytest.raises(ConfigError, match="slave: got true with orderly"):
        Config(slave=True, admin_resets=1)


SLAVE_WALK_CONFIGS = [
    pytest.param(slave_config(V4_9_8, consumers=2, queues=2, broker_crashes=2, client_crashes=1), id="4.9.8"),
    pytest.param(slave_config(V5_X, consumers=2, queues=2, broker_crashes=2, client_crashes=1), id="5.x"),
    pytest.param(
        slave_config(V4_9_8, consumers=2, queues=1, broker_crashes=2, mode=BROADCASTING), id="4.9.8-broadcasting"
    ),
    pytest.param(
        slave_config(V4_9_8, consumers=3, queues=2, broker_crashes=2, commit_losses=1, view_faults=1), id="faults"
    ),
]


@pytest.mark.parametrize("config", SLAVE_WALK_CONFIGS)
def test_walks_through_master_outages_hold_every_property_and_liveness(config: Config) -> None:
    # Fault-sparing walks (2 % per step) keep the broker crashes for when work is in flight; 80 walks of 300
    # steps reach a slave commit in most of them (asserted below) in about 5 s per configuration.
    result = explore(config, 80, 300, liveness=True, fault_rate=0.02)
    assert result.valid, result.counterexamples[0].describe()
    reached = {"slave-commit": 0, "slave-pull": 0, "slave-offset-lowered": 0}
    model = Model(config)
    for seed in range(80):
        states: list[State] = []
        walk(model, seed, 300, on_state=states.append, check=False, fault_rate=0.02)
        reached["slave-commit"] += any(e.kind == "commit-landed-on-slave" for e in history_list(states[-1]))
        reached["slave-offset-lowered"] += any(
            old is not None and new is not None and new < old
            for s, t in itertools.pairwise(states)
            if s.slave is not None and t.slave is not None
            for old, new in zip(s.slave.offsets, t.slave.offsets, strict=True)
        )
        reached["slave-pull"] += any(
            p.from_slave for s in states for cl in s.clients for p in cl.pulls if p.epoch != -1
        )
    assert reached["slave-pull"] >= 10, reached
    if config.mode != BROADCASTING:
        assert reached["slave-commit"] >= 5, reached
    if config.mode != BROADCASTING and config.version == V4_9_8:
        # 5.x syncs at 61 s and every 63 s, past most of these walks' outages; tests/test_slaves.py's RMQ-25
        # schedule shows the sync undoing a slave commit
        assert reached["slave-offset-lowered"] >= 1, reached
