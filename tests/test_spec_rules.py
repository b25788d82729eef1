"""Each RocketMQ rule the model encodes, pinned by a concrete scenario (tests named as claims)."""

from __future__ import annotations

import pytest

from rmqspec.properties.orderly_scenarios import advance_paced
from rmqspec.spec import broker_rules as br
from rmqspec.spec.actions import (
    CONSUME_SUCCESS,
    RECONSUME_LATER,
    Action,
    ApplyConsumeOffset,
    BrokerCrash,
    BrokerFlush,
    BrokerReceive,
    BrokerRestart,
    CleanExpiredMsg,
    CoolQueueHead,
    DeliverScheduled,
    FinishConsume,
    Heartbeat,
    PersistOffsets,
    Produce,
    Rebalance,
    RebalanceQueryError,
    ReceivePull,
    SendPull,
    Shutdown,
    Start,
    StartConsume,
    Tick,
)
from rmqspec.spec.allocation import allocate, client_id, mq_text
from rmqspec.spec.committed_offset import DECLARED_DECREASE_CAUSES
from rmqspec.spec.concurrent_consume import CLEAN_EXPIRED_DELAY_LEVEL
from rmqspec.spec.config import BROADCASTING, FROM_FIRST, FROM_TIMESTAMP, Config, ConfigError
from rmqspec.spec.invariants import check_step
from rmqspec.spec.model import ActionNotEnabled, Model
from rmqspec.spec.state import BrokerQueue, Message, State, history_list


def run(model: Model, *actions: Action, state: State | None = None) -> State:
    s = model.initial() if state is None else state
    for a in actions:
        s = model.step(s, a)
    return s


def one_consumer(**overrides: object) -> Model:
    values: dict[str, object] = {"consumers": 1, "queues": 1, "messages_per_queue": 4, "pull_batch_size": 4}
    values.update(overrides)
    return Model(Config(**values))  # type: ignore[arg-type]


def pulled(model: Model, produced: int) -> State:
    """One consumer owning queue 0 with ``produced`` messages pulled into its pq."""
    s = run(model, *[Produce(0, "A")] * produced, Start(0), Rebalance(0), SendPull(0, 0), BrokerReceive(0))
    return run(model, ReceivePull(0, 0), state=s)


def finish(model: Model, s: State, offset: int, status: str = CONSUME_SUCCESS, ack: int = 0, fails: int = 0) -> State:
    """Consume the request holding ``offset`` of queue 0 to the end, applying its offset update."""
    (rid,) = [r.rid for r in s.clients[0].requests if r.queue == 0 and r.msgs[0][0] == offset]
    s = run(model, StartConsume(0, rid), FinishConsume(0, rid, status, ack, fails), state=s)
    pending = [u.rid for u in s.clients[0].offset_updates]
    return run(model, *[ApplyConsumeOffset(0, r) for r in pending], state=s)


# --- ProcessQueue watermark (R6.3) -------------------------------------------------------------
def test_remove_message_returns_lowest_cached_offset() -> None:
    m = one_consumer()
    s = pulled(m, 3)  # offsets 0, 1, 2 cached, one consume request each
    s = finish(m, s, 2)  # offset 2 done first
    assert s.clients[0].mem[0] == 0
    s = finish(m, s, 0)
    assert s.clients[0].mem[0] == 1


def test_remove_message_returns_queue_offset_max_plus_one_when_tree_empties() -> None:
    m = one_consumer()
    s = pulled(m, 2)
    s = finish(m, finish(m, s, 1), 0)
    assert s.clients[0].pqs[0] is not None and s.clients[0].pqs[0].tree == 0
    assert s.clients[0].mem[0] == 2


def test_pq_counts_messages_and_sizes_on_put_and_remove() -> None:
    m = one_consumer()
    s = pulled(m, 2)
    pq = s.clients[0].pqs[0]
    assert pq is not None and pq.msg_count == 2 and pq.msg_size > 0 and pq.queue_offset_max == 1
    s = finish(m, finish(m, s, 0), 1)
    pq = s.clients[0].pqs[0]
    assert pq is not None and (pq.msg_count, pq.msg_size) == (0, 0)


# --- QUERY_CONSUMER_OFFSET and positioning (R3.5, R10.1, R10.4) -------------------------------
def test_young_queue_answers_zero_to_a_group_without_offset() -> None:
    hot = BrokerQueue((Message((0, 0), "A", 0),), head_hot=True)
    assert br.query_consumer_offset(None, hot) == 0
    assert br.query_consumer_offset(None, BrokerQueue((), head_hot=False)) == 0  # empty queue: 0 in 4.9.8


def test_5x_young_queue_rule_needs_message_zero_in_memory_so_an_empty_queue_is_not_found() -> None:
    """R3.5, Config.young_queue_needs_head_in_memory: 5.1.0+ checkInMemByConsumeOffset(0, 1)."""
    assert Config(version="5.x").young_queue_needs_head_in_memory
    assert not Config().young_queue_needs_head_in_memory
    empty, hot = BrokerQueue((), head_hot=False), BrokerQueue((Message((0, 0), "A", 0),), head_hot=True)
    cold = hot._replace(head_hot=False)
    assert br.query_consumer_offset(None, empty, head_in_memory_rule=True) is br.QUERY_NOT_FOUND
    assert br.query_consumer_offset(None, hot, head_in_memory_rule=True) == 0
    assert br.query_consumer_offset(None, cold, head_in_memory_rule=True) is br.QUERY_NOT_FOUND
    assert br.query_consumer_offset(3, empty, head_in_memory_rule=True) == 3


def test_old_queue_answers_not_found_to_a_group_without_offset() -> None:
    cold = BrokerQueue((Message((0, 0), "A", 0),), head_hot=False)
    assert br.query_consumer_offset(None, cold) is br.QUERY_NOT_FOUND
    assert br.query_consumer_offset(7, cold) == 7


def test_consume_from_last_starts_a_new_group_at_zero_on_a_young_queue() -> None:
    m = one_consumer()
    s = run(m, Produce(0, "A"), Produce(0, "A"), Start(0), Rebalance(0))
    pq = s.clients[0].pqs[0]
    assert pq is not None and pq.next_offset == 0 and s.clients[0].mem[0] == 0  # the broker's 0 seeds memory


def test_consume_from_last_starts_a_new_group_at_max_offset_on_an_old_queue() -> None:
    m = one_consumer()
    s = run(m, Produce(0, "A"), Produce(0, "A"), CoolQueueHead(0), Start(0), Rebalance(0))
    pq = s.clients[0].pqs[0]
    assert pq is not None and pq.next_offset == 2 and s.clients[0].mem[0] is None
    assert s.ghost.skipped[0] == 0b11  # the jump over history is a declared skip


def test_consume_from_first_starts_at_zero_on_an_old_queue() -> None:
    m = one_consumer(consume_from_where=FROM_FIRST)
    s = run(m, Produce(0, "A"), CoolQueueHead(0), Start(0), Rebalance(0))
    assert s.clients[0].pqs[0] is not None and s.clients[0].pqs[0].next_offset == 0


def test_consume_from_timestamp_is_ignored_on_a_young_queue() -> None:
    m = one_consumer(consume_from_where=FROM_TIMESTAMP, consume_timestamp=10_000)
    s = run(m, Produce(0, "A"), Start(0), Rebalance(0))
    assert s.clients[0].pqs[0] is not None and s.clients[0].pqs[0].next_offset == 0


def test_search_offset_returns_the_message_closest_in_time() -> None:
    queue = BrokerQueue(tuple(Message((0, o), "A", t) for o, t in enumerate((0, 10, 20, 40))), True)
    assert br.search_offset(queue, 20) == 2
    assert br.search_offset(queue, 32) == 3  # 40 is closer than 20
    assert br.search_offset(queue, 14) == 1  # may lie before the timestamp
    assert br.search_offset(queue, 99) == 3
    assert br.search_offset(BrokerQueue((), False), 5) == 0


def test_retry_queue_of_a_new_group_starts_at_zero_under_consume_from_last() -> None:
    m = Model(Config(consumers=1, queues=1))
    s = run(m, Start(0), Rebalance(0))
    retry = m.retry_queue
    assert retry is not None and s.clients[0].pqs[retry] is not None and s.clients[0].pqs[retry].next_offset == 0


# --- commits: piggy-back, persist timer, broker table (R2.7, R3.2, R3.6, R5.2, R5.4) -----------
def test_piggyback_commit_is_flagged_only_above_zero() -> None:
    m = one_consumer()
    s = run(m, Start(0), Rebalance(0), SendPull(0, 0))
    request = s.clients[0].channel[-1]
    assert request.commit_offset == 0 and not request.commit_flag  # type: ignore[union-attr]


def test_broker_applies_a_flagged_piggyback_commit_on_receipt() -> None:
    m = one_consumer()
    s = finish(m, pulled(m, 1), 0)
    s = run(m, SendPull(0, 0), BrokerReceive(0), state=s)
    assert s.broker.offsets[0] == 1


def test_persist_timer_first_fires_after_ten_seconds_then_every_five() -> None:
    m = one_consumer()
    s = run(m, Start(0), Rebalance(0))
    assert s.clients[0].next_persist == 10_000
    with pytest.raises(ActionNotEnabled):
        m.step(s, PersistOffsets(0))
    while s.now < 10_000:
        due = [a for a in m.enabled(s) if isinstance(a, (Heartbeat, BrokerFlush, Rebalance))]
        s = m.step(s, due[0] if due else Tick())
    s = m.step(s, PersistOffsets(0))
    assert s.clients[0].next_persist == 15_000


def test_tick_cannot_pass_a_due_timer() -> None:
    m = one_consumer()
    s = run(m, Start(0), Rebalance(0), Tick())
    assert s.now == 1_000  # the heartbeat is due
    assert Tick() not in m.enabled(s)
    with pytest.raises(ActionNotEnabled, match="timer is due"):
        m.step(s, Tick())


def test_remote_persist_all_sends_owned_queues_and_prunes_the_rest() -> None:
    m = Model(Config(consumers=2, queues=2))
    s = run(m, Start(0), Rebalance(0))
    assert all(pq is not None for pq in s.clients[0].pqs)
    s = run(m, Start(1), Rebalance(0), state=s)  # c1 joined: c0 keeps queue 0 and the retry queue
    mem = s.clients[0].mem
    assert mem[1] is None  # removeOffset at removal
    s = s._replace(clients=(s.clients[0]._replace(mem=(0, 5, 0), next_persist=0), s.clients[1]))
    s = m.step(s, PersistOffsets(0))
    assert s.clients[0].mem == (0, None, 0)
    assert [c.queue for c in s.clients[0].channel if hasattr(c, "cause") and c.cause == "persist-timer"] == [0, 2]


def test_broker_commits_are_last_writer_wins_and_crash_restores_the_flushed_file() -> None:
    m = one_consumer()
    s = finish(m, pulled(m, 2), 0)
    s = s._replace(clients=(s.clients[0]._replace(next_persist=s.now),))
    s = run(m, PersistOffsets(0), BrokerReceive(0), BrokerReceive(0), state=s)  # pull request, then commit 1
    assert s.broker.offsets[0] == 1
    s = s._replace(broker=s.broker._replace(next_flush=s.now))
    s = run(m, BrokerFlush(), state=s)
    assert s.broker.flushed[0] == 1
    s = s._replace(broker=s.broker._replace(offsets=(0, None)))  # a stale owner's late commit of 0
    s = run(m, BrokerCrash(), BrokerRestart(), state=s)
    assert s.broker.offsets[0] == 1 and s.broker.next_flush == s.now + 10_000


# --- the broker's request pools (docs/spec.md, "Thread boundaries") ----------------------------------------------
def test_a_commit_that_overtakes_a_pull_lets_the_pulls_older_piggyback_lower_the_broker_offset() -> None:
    """docs/spec.md, "What is real, ranked", item 1: the broker runs PULL_MESSAGE and UPDATE_CONSUMER_OFFSET on
    different pools (NettyRemotingAbstract#processRequestCommand), and PullMessageProcessor commits a pull's piggy-back
    when the pull runs. SendPull carries P = 1; the listener finishes; PersistOffsets sends C = 2; the broker runs C
    first, then the pull: the offset falls from 2 to 1, written by the same pq, and INV-8r names the cause."""
    m = one_consumer()
    s = finish(m, pulled(m, 3), 0)  # memory 1
    s = run(m, SendPull(0, 0), state=s)  # the piggy-back P = 1 on the wire
    assert s.clients[0].channel[0].commit_flag  # type: ignore[union-attr]
    s = finish(m, s, 1)  # memory 2
    s = s._replace(clients=(s.clients[0]._replace(next_persist=s.now),))
    s = run(m, PersistOffsets(0), state=s)  # C = 2, behind the pull
    assert BrokerReceive(0, 1) in m.enabled(s)
    assert run(m, BrokerReceive(0), BrokerReceive(0), state=s).broker.offsets[0] == 2  # in send order: C last
    t = run(m, BrokerReceive(0, 1), state=s)  # C overtakes the pull
    assert t.broker.offsets[0] == 2 and t.ghost.overtaken[0] == (0, s.clients[0].channel[0])
    u = run(m, BrokerReceive(0), state=t)  # the overtaken pull lands P
    assert u.broker.offsets[0] == 1 and u.ghost.last_writer[0] == t.ghost.last_writer[0]
    assert check_step(m, t, BrokerReceive(0), u) == []
    causes = [c.name for c in DECLARED_DECREASE_CAUSES if c.applies(m, t, BrokerReceive(0), u, 0)]
    assert causes == ["request-pool-reorder"]
    # the cause is the ghost's overtaken request, not "the same pq wrote it": without it, INV-8 and INV-8r fail
    blind = t._replace(ghost=t.ghost._replace(overtaken=()))
    assert {v.id for v in check_step(m, blind, BrokerReceive(0), u)} == {"INV-8", "INV-8r"}


def test_only_a_commit_of_the_same_queue_may_overtake_a_commit() -> None:
    """The abstraction of docs/spec.md, "Thread boundaries": overtakes=1 is offered only when both requests carry a
    commit of one queue; a pull without the commit flag (memory 0) commutes with a commit for every offset, so it is not
    offered."""
    m = one_consumer()
    s = run(m, SendPull(0, 0), state=pulled(m, 3))  # memory 0: no commit flag
    s = s._replace(clients=(s.clients[0]._replace(next_persist=s.now),))
    s = run(m, PersistOffsets(0), state=s)
    pull, commit = s.clients[0].channel[:2]
    assert not pull.commit_flag and commit.queue == 0  # type: ignore[union-attr]
    assert BrokerReceive(0, 1) not in m.enabled(s)
    with pytest.raises(ActionNotEnabled):
        m.step(s, BrokerReceive(0, 1))


# --- retry and DLQ (R7.3-R7.7) -----------------------------------------------------------------
def test_first_retry_waits_ten_seconds_at_delay_level_three() -> None:
    assert br.retry_delay_ms(0) == 10_000
    assert br.retry_delay_ms(1) == 30_000
    assert br.retry_delay_ms(15) == 7_200_000
    m = one_consumer(max_reconsume_times=2)
    s = finish(m, pulled(m, 1), 0, status=RECONSUME_LATER, ack=-1)
    (entry,) = s.broker.scheduled
    assert entry.due == s.now + 10_000 and entry.message.reconsume_times == 1
    assert s.clients[0].mem[0] == 1  # sent back counts as handled: the offset moves on


def test_message_goes_to_the_dlq_when_reconsume_times_reaches_the_maximum() -> None:
    m = one_consumer(max_reconsume_times=1)
    s = finish(m, pulled(m, 1), 0, status=RECONSUME_LATER, ack=-1)
    s = s._replace(now=s.broker.scheduled[0].due)
    s = run(m, DeliverScheduled(), state=s)
    retry = m.retry_queue
    assert retry is not None and s.broker.queues[retry].messages[0].reconsume_times == 1


def test_failed_send_back_keeps_the_message_and_resubmits_it_after_five_seconds() -> None:
    m = one_consumer()
    s = finish(m, pulled(m, 2), 0, status=RECONSUME_LATER, ack=-1, fails=1)
    assert s.clients[0].mem[0] is None or s.clients[0].mem[0] == 0  # offset 0 still held: no progress
    (resubmitted,) = [r for r in s.clients[0].requests if r.msgs == ((0, 1),)]
    assert resubmitted.ready_at == s.now + 5_000
    assert s.budget.send_back_failures == 0


def test_broadcasting_drops_a_failed_message_without_retry() -> None:
    m = one_consumer(mode=BROADCASTING, consume_from_where=FROM_FIRST)  # LAST would start at maxOffset
    s = finish(m, pulled(m, 1), 0, status=RECONSUME_LATER, ack=-1)
    assert s.broker.scheduled == () and s.clients[0].mem[0] == 1
    assert s.ghost.skipped[0] & 1


# --- dropped ProcessQueues (R5.7, R6.7, R7.2) ---------------------------------------------------
def test_consume_request_of_a_dropped_pq_never_reaches_the_listener() -> None:
    m = Model(Config(consumers=2, queues=1))
    s = run(m, Produce(0, "A"), Start(0), Rebalance(0), SendPull(0, 0), BrokerReceive(0), ReceivePull(0, 0))
    s = run(m, Start(1), Rebalance(0), state=s)  # AVG gives queue 0 to c0? cids sort: c0 keeps 0, c1 gets retry
    owner = 0 if s.clients[0].pqs[0] is not None else 1
    assert owner == 0
    s = run(m, Shutdown(0), state=s)
    assert s.clients[0].requests == () and s.ghost.deliveries == 0


def test_no_new_msg_on_an_empty_pq_moves_the_offset_forward() -> None:
    m = one_consumer(tags=("A", "B"), subscription=("A",))
    s = run(m, Produce(0, "B"), Produce(0, "B"), Start(0), Rebalance(0), SendPull(0, 0), BrokerReceive(0))
    s = run(m, ReceivePull(0, 0), state=s)  # NO_MATCHED_MSG: both messages filtered out
    assert s.clients[0].mem[0] == 2 and s.clients[0].pqs[0] is not None and s.clients[0].pqs[0].next_offset == 2


# --- consumers joining and leaving (R4.4, R9.3, R9.7) ------------------------------------------
def test_shutdown_persists_owned_offsets_then_unregisters_and_notifies() -> None:
    m = Model(Config(consumers=2, queues=2))
    s = run(m, Start(0), Start(1), Rebalance(0), Rebalance(1))
    s = run(m, Shutdown(0), state=s)
    causes = [e.cause for e in history_list(s) if e.kind == "commit-sent" and e.client == 0]
    assert causes and set(causes) == {"shutdown"}
    assert 0 not in s.broker.registered and s.clients[1].rebalance_requested
    assert not s.clients[0].running and all(pq is None for pq in s.clients[0].pqs)


def test_consumer_missing_from_the_list_allocates_nothing() -> None:
    assert allocate("AVG", client_id(2), ("a", "b"), (client_id(0), client_id(1))) == ()


def test_avg_gives_the_first_n_mod_c_consumers_one_extra_queue() -> None:
    mqs = tuple(mq_text("T", "b", q) for q in range(8))
    cids = tuple(client_id(i) for i in range(3))
    assert [allocate("AVG", c, mqs, cids) for c in cids] == [(0, 1, 2), (3, 4, 5), (6, 7)]
    assert [allocate("AVG_BY_CIRCLE", c, mqs, cids) for c in cids] == [(0, 3, 6), (1, 4, 7), (2, 5)]


def test_consistent_hash_partitions_the_queues() -> None:
    mqs = tuple(mq_text("T", "broker-a", q) for q in range(8))
    cids = tuple(client_id(i) for i in range(3))
    parts = [set(allocate("CONSISTENT_HASH", c, mqs, cids)) for c in cids]
    assert set().union(*parts) == set(range(8)) and sum(map(len, parts)) == 8


# --- the model's contract ---------------------------------------------------------------------
def test_disabled_action_raises_a_named_error() -> None:
    m = one_consumer()
    with pytest.raises(ActionNotEnabled, match="not running"):
        m.step(m.initial(), Shutdown(0))


def test_states_reached_differently_compare_equal() -> None:
    m = one_consumer()
    a = run(m, Produce(0, "A"), Produce(0, "B") if False else Produce(0, "A"))
    b = run(m, Produce(0, "A"), Produce(0, "A"))
    assert a == b and hash(a) == hash(b)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("consumers", 0, "consumers: got 0; accepted: an integer from 1 to 8"),
        ("mode", "FANOUT", "mode: got 'FANOUT'; accepted: CLUSTERING, BROADCASTING"),
        ("strategy", "RANDOM", "strategy: got 'RANDOM'"),
        ("backlog", 9, "backlog: got 9"),
        ("mutations", frozenset({"nope"}), "mutations: unknown ['nope']"),
    ],
)
def test_bad_config_names_the_field_and_what_is_accepted(field: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        Config(**{field: value})  # type: ignore[arg-type]


def test_config_from_mapping_rejects_unknown_fields() -> None:
    with pytest.raises(ConfigError, match="unknown field"):
        Config.from_mapping({"consumer": 3})


# --- the version switch (docs/spec.md, "What the version switch changes") ----------------------------
def test_version_switches_follow_config_version() -> None:
    """R2.3, R10.1, R3.5: each 5.x difference is one derived property of Config."""
    old, new = Config(), Config(version="5.x")
    assert (old.broker_error_reads_as_no_offset, old.read_error_throws, old.young_queue_needs_head_in_memory) == (
        True,
        False,
        False,
    )
    assert (new.broker_error_reads_as_no_offset, new.read_error_throws, new.young_queue_needs_head_in_memory) == (
        False,
        True,
        True,
    )
    with pytest.raises(ConfigError, match="version"):
        Config(version="5.1.0")


def test_query_error_is_offered_with_a_due_rebalance_for_queues_without_pq_and_spent_only_when_it_strikes() -> None:
    """RebalanceQueryError: CLUSTERING, budget left, broker up with the group registered, one per queue
    that has no pq; a fault on a queue the rebalance does not query costs nothing."""
    m = Model(Config(consumers=2, queues=2, query_errors=1, version="5.x"))
    s = run(m, Start(0), Start(1), Tick())  # 5.x: the first rebalance comes 1 s after start (R4.2)
    offered = [a for a in m.enabled(s) if isinstance(a, RebalanceQueryError)]
    assert offered == [RebalanceQueryError(i, q) for i in (0, 1) for q in range(3)]
    missed = run(m, RebalanceQueryError(0, 1), state=s)  # c0 gets queue 0 and the retry queue, not 1
    assert missed.budget.query_errors == 1 and missed.clients[0].pqs[0] is not None
    struck = run(m, RebalanceQueryError(0, 0), state=s)
    assert struck.budget.query_errors == 0 and struck.clients[0].pqs[0] is None
    assert not any(isinstance(a, RebalanceQueryError) for a in m.enabled(struck))
    broadcasting = Model(Config(mode=BROADCASTING, query_errors=1))
    assert not any(isinstance(a, RebalanceQueryError) for a in broadcasting.enabled(run(broadcasting, Start(0))))
    with pytest.raises(ActionNotEnabled):
        m.step(run(m, Rebalance(0), state=s), RebalanceQueryError(0, 0))  # queue 0 has a pq now


# --- cleanExpiredMsg (R6.8, R7.3) ---------------------------------------------------------------
CLEAN_TIMERS = (Heartbeat, PersistOffsets, BrokerFlush, Rebalance, DeliverScheduled)


def until_clean_due(model: Model, s: State) -> State:
    """Fire the other due timers (and ticks) until consumer 0's cleanExpireMsg timer is due."""
    while CleanExpiredMsg(0) not in (enabled := model.enabled(s)):
        s = model.step(s, next((a for a in enabled if isinstance(a, CLEAN_TIMERS)), Tick()))
    return s


def listening_on_offset_zero(model: Model) -> State:
    """One consumer: offsets 0 and 1 pulled, the listener of offset 0 started, offset 1's request still
    queued (its message carries no consume start time). 5.x first waits out its rebalance pacing (R4.2)."""
    s = model.initial()
    for a in (Produce(0, "A"), Produce(0, "A"), Start(0), Rebalance(0), SendPull(0, 0), BrokerReceive(0)):
        s = model.step(advance_paced(model, s, a), a)
    s = run(model, ReceivePull(0, 0), state=s)
    (rid,) = [r.rid for r in s.clients[0].requests if r.msgs[0][0] == 0]
    return run(model, StartConsume(0, rid), state=s)


def test_clean_expired_msg_sends_a_listener_older_than_consume_timeout_back_at_level_three_and_removes_it() -> None:
    """R6.8: the timer runs every consumeTimeout from start (fixed rate); a message goes only once its listener
    started *more* than consumeTimeout ago; it is sent back at delay level 3 and removed, and the offset is not
    updated (removeMessage's result is dropped). A message whose listener has not started stays."""
    m = one_consumer()
    timeout = m.config.consume_timeout
    s = listening_on_offset_zero(m)
    started = s.now
    assert started == 0 and s.clients[0].pqs[0] is not None and s.clients[0].pqs[0].consume_started == ((0, 0),)
    s = until_clean_due(m, s)
    assert s.now == timeout  # exactly consumeTimeout after the start: not more
    s = m.step(s, CleanExpiredMsg(0))
    assert s.clients[0].pqs[0] is not None and s.clients[0].pqs[0].tree == 0b11 and s.broker.scheduled == ()
    assert s.clients[0].next_clean == 2 * timeout
    mem = s.clients[0].mem[0]
    s = m.step(until_clean_due(m, s), CleanExpiredMsg(0))
    pq = s.clients[0].pqs[0]
    assert pq is not None and pq.tree == 0b10 and pq.consume_started == () and pq.msg_count == 1
    (copy,) = s.broker.scheduled
    assert copy.message.origin == (0, 0) and copy.message.reconsume_times == 1
    assert copy.due == s.now + br.delay_level_ms(CLEAN_EXPIRED_DELAY_LEVEL) == s.now + 10_000
    assert s.clients[0].mem[0] == mem and s.clients[0].offset_updates == ()  # no updateOffset (R6.3)
    assert s.ghost.handled[0] & 1 and s.clients[0].next_clean == 3 * timeout
    assert [e.kind for e in history_list(s)].count("expired-sent-back") == 1


def test_clean_expired_msg_level_three_ignores_reconsume_times_where_a_listener_failure_would_wait_longer() -> None:
    """R6.8, R7.5 step 6: the broker honours the explicit level 3 (10 s) whatever the stored reconsumeTimes;
    a failed listener's send-back (level 0) lets the broker choose 3 + reconsumeTimes."""
    assert br.delay_level_ms(CLEAN_EXPIRED_DELAY_LEVEL) == br.retry_delay_ms(0) == 10_000
    assert br.retry_delay_ms(1) == 30_000 and br.delay_level_ms(99) == br.delay_level_ms(18)


@pytest.mark.parametrize(("version", "copies"), [("4.9.8", 2), ("5.x", 1)])
def test_a_cleaned_message_whose_listener_then_fails_is_sent_back_again_only_by_4_9_8(
    version: str, copies: int
) -> None:
    """R7.3, R6.8: the stuck listener returns after the cleaner sent its message back and removed it. 4.9.8's
    processConsumeResult sends it back a second time; 5.x (containsMessage) skips it, so no send-back fault
    can be injected for it either. removeMessage then commits the lowest offset still held."""
    m = one_consumer(version=version)
    s = listening_on_offset_zero(m)
    (rid,) = [r.rid for r in s.clients[0].consuming]
    s = m.step(until_clean_due(m, m.step(until_clean_due(m, s), CleanExpiredMsg(0))), CleanExpiredMsg(0))
    assert s.clients[0].pqs[0] is not None and s.clients[0].pqs[0].tree == 0b10
    faulted = FinishConsume(0, rid, RECONSUME_LATER, -1, 1)
    assert (faulted in m.enabled(s)) is (version == "4.9.8")
    s = run(m, FinishConsume(0, rid, RECONSUME_LATER, -1, 0), ApplyConsumeOffset(0, rid), state=s)
    assert [e.message.origin for e in s.broker.scheduled] == [(0, 0)] * copies
    assert s.clients[0].mem[0] == 1


def test_clean_expired_msg_leaves_the_message_while_the_broker_is_down() -> None:
    """R6.8, R7.4: the send-back and its producer fall-back both fail; the exception is logged and the message
    stays, so a later run sends it back once the broker is up."""
    m = one_consumer()
    s = listening_on_offset_zero(m)
    s = m.step(until_clean_due(m, s), CleanExpiredMsg(0))
    s = m.step(until_clean_due(m, m.step(s, BrokerCrash())), CleanExpiredMsg(0))
    assert s.clients[0].pqs[0] is not None and s.clients[0].pqs[0].tree == 0b11 and s.broker.scheduled == ()
    assert not s.ghost.handled[0] & 1
    s = m.step(until_clean_due(m, m.step(s, BrokerRestart())), CleanExpiredMsg(0))
    assert s.clients[0].pqs[0] is not None and s.clients[0].pqs[0].tree == 0b10 and len(s.broker.scheduled) == 1


def test_broadcasting_clean_expired_msg_is_a_declared_skip_whose_copy_nobody_consumes() -> None:
    """R6.8, R7.8: cleanExpiredMsg has no mode check; a BROADCASTING consumer's copy goes to %RETRY%<group>, which
    it does not subscribe to, so the message is dropped for it: a declared skip. The copy leaves the schedule
    at its due time and reaches no queue of the model."""
    m = one_consumer(mode=BROADCASTING, consume_from_where=FROM_FIRST)
    s = listening_on_offset_zero(m)
    s = m.step(until_clean_due(m, m.step(until_clean_due(m, s), CleanExpiredMsg(0))), CleanExpiredMsg(0))
    assert s.clients[0].pqs[0] is not None and s.clients[0].pqs[0].tree == 0b10
    assert s.ghost.skipped[0] & 1 and not s.ghost.handled[0] & 1
    assert (0, "expired-to-unsubscribed-retry-topic", 1) in s.ghost.skips
    (copy,) = s.broker.scheduled
    s = run(m, DeliverScheduled(), state=s._replace(now=copy.due))
    assert s.broker.scheduled == () and [len(q.messages) for q in s.broker.queues] == [2]


def test_an_orderly_consumer_never_schedules_clean_expired_msg() -> None:
    """R6.8: ConsumeMessageOrderlyService#start schedules no cleanExpireMsg (and cleanExpiredMsg returns at once
    for an orderly consumer); a concurrent consumer's timer starts one period after Start and stops at Shutdown."""
    orderly = one_consumer(orderly=True)
    s = run(orderly, Start(0))
    assert s.clients[0].next_clean is None
    with pytest.raises(ActionNotEnabled):
        orderly.step(s._replace(now=10 * orderly.config.consume_timeout), CleanExpiredMsg(0))
    m = one_consumer()
    s = run(m, Start(0))
    assert s.clients[0].next_clean == m.config.consume_timeout
    assert run(m, Shutdown(0), state=s).clients[0].next_clean is None
