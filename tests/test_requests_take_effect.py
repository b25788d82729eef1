"""INV-30, INV-31 and INV-32: a notice, a request or a timer the model's processes receive does its work.

- INV-30 (``group_changes_wake_the_rebalance``, R9.7): a consumer joining the group wakes every listed consumer's
  rebalance (NOTIFY_CONSUMER_IDS_CHANGED).
- INV-31 (``client_reset_runs_its_course``, R3.10a): a RESET_CONSUMER_CLIENT_OFFSET leaves the client's inbox only into
  resetOffset (paused, the pq dropped and held, the 10 s sleep armed), or on the wire with a broker crash.
- INV-32 (``slave_sync_copies_the_master``, R3.8): a slave sync with the master up copies the master's table.
- INV-35 (``shutdown_unregisters``, R4.4): a consumer's shutdown leaves it in no broker's list of the group.
- INV-24b (``send_back_leaves_a_copy``, R7.3, R7.5, R6.8, R8.7): a CONSUMER_SEND_MSG_BACK the consumer counts as done
  (processConsumeResult, cleanExpiredMsg, the orderly forward to the DLQ) stored its copy at the broker.
- INV-38 (``channels_expire_when_silent``, R4.3): a heartbeat that lands stamps its channel, and the idle-channel scan
  closes only a silent consumer's channel.
- INV-34 (``lock_answers_follow_the_table``, R8.2), its broker-down clause: a lockAll whose LOCK_BATCH_MQ cannot reach
  the master changes no pq's lock.

Each is shown on scripted steps of the correct model: the step passes, and the same step with its effect removed, the
way a missing handler would leave it, is reported.
"""

from __future__ import annotations

from rmqspec.spec import actions as act
from rmqspec.spec.admin_reset import CLIENT_RESET_RUNS_ITS_COURSE as INV31
from rmqspec.spec.broker import CHANNELS_EXPIRE_WHEN_SILENT as INV38
from rmqspec.spec.client_locks import LOCK_ANSWERS_FOLLOW_THE_TABLE as INV34
from rmqspec.spec.concurrent_consume import SEND_BACK_LEAVES_A_COPY as INV24B
from rmqspec.spec.config import Config
from rmqspec.spec.consumer_process import SHUTDOWN_UNREGISTERS as INV35
from rmqspec.spec.model import Model
from rmqspec.spec.rebalance import GROUP_CHANGES_WAKE_THE_REBALANCE as INV30
from rmqspec.spec.slave import SLAVE_SYNC_COPIES_THE_MASTER as INV32
from rmqspec.spec.state import State
from rmqspec.spec.state import put_at as _put

QUIET = {"client_crashes": 0, "client_shutdowns": 0, "send_back_failures": 0}


def _run(model: Model, actions: list[act.Action]) -> State:
    state = model.initial()
    for action in actions:
        state = model.step(state, action)
    return state


def _client(state: State, i: int, **fields: object) -> State:
    return state._replace(clients=_put(state.clients, i, state.clients[i]._replace(**fields)))


def test_a_consumer_joining_wakes_the_others_rebalance_and_a_join_that_wakes_nobody_is_reported() -> None:
    model = Model(Config(consumers=2, queues=1, messages_per_queue=1, broker_crashes=0, **QUIET))
    before = _run(model, [act.Start(0), act.Rebalance(0)])
    assert not before.clients[0].rebalance_requested
    join = act.Start(1)
    after = model.step(before, join)
    assert after.broker.registered == {0, 1} and after.clients[0].rebalance_requested
    assert INV30.check(model, before, join, after) is None
    detail = INV30.check(model, before, join, _client(after, 0, rebalance_requested=False))
    assert detail == "Start: consumer 1 joined the group on the master, but consumer 0's rebalance was not woken"


def _reset_sent(broker_crashes: int) -> tuple[Model, State]:
    """One consumer whose offset 1 the broker stores; an admin reset of queue 0 to 1 is on the wire to it."""
    model = Model(Config(consumers=1, queues=1, messages_per_queue=2, admin_resets=1, broker_crashes=broker_crashes,
                         **QUIET))  # fmt: skip
    state = _run(
        model,
        [
            act.Start(0), act.Produce(0, "A"), act.Rebalance(0), act.Tick(), act.Heartbeat(0), act.Tick(),
            act.Produce(0, "A"), act.BrokerFlush(), act.CoolQueueHead(0), act.PersistOffsets(0, 0), act.SendPull(0, 1),
            act.BrokerReceive(0, 0), act.AdminReset(0, 1, False),
        ],
    )  # fmt: skip
    assert state.clients[0].reset_inbox == ((0, 1),)
    return model, state


def test_a_reset_taken_pauses_the_consumer_drops_its_pq_and_sleeps_and_one_taken_and_dropped_is_reported() -> None:
    model, before = _reset_sent(broker_crashes=0)
    receive = act.ClientResetReceive(0)
    after = model.step(before, receive)
    cl = after.clients[0]
    assert cl.paused and cl.reset_table == ((0, 1),) and cl.reset_wake == before.now + 10_000 and cl.pqs[0] is None
    assert INV31.check(model, before, receive, after) is None
    # the request answered and dropped: nothing paused, nothing dropped, nothing sleeps
    swallowed = _client(before, 0, reset_inbox=())
    detail = INV31.check(model, before, receive, swallowed)
    assert detail is not None and "the reset of (0, 1) was taken but the consumer is not paused" in detail
    # taken off the inbox by a step that is not the client's resetOffset
    heartbeat = act.Heartbeat(0)
    detail = INV31.check(model, before, heartbeat, swallowed)
    assert detail == "client 0: Heartbeat took the reset of (0, 1) from the inbox without running it"


def test_a_broker_crash_loses_the_reset_on_the_wire_and_is_no_violation() -> None:
    model, before = _reset_sent(broker_crashes=1)
    crash = act.BrokerCrash()
    after = model.step(before, crash)
    assert after.clients[0].reset_inbox == () and not after.clients[0].paused
    assert INV31.check(model, before, crash, after) is None


def test_a_slave_sync_copies_the_masters_table_and_a_sync_that_copies_nothing_is_reported() -> None:
    model = Model(Config(consumers=1, queues=1, messages_per_queue=2, slave=True, broker_crashes=0, **QUIET))
    before = _run(
        model,
        [
            act.Produce(0, "A"), act.Produce(0, "A"), act.Start(0), act.Tick(), act.CoolQueueHead(0),
            act.Rebalance(0), act.SlaveReplicate(0), act.SendPull(0, 0), act.SendPull(0, 1), act.BrokerReceive(0, 0),
            act.ReceivePull(0, 0), act.BrokerReceive(0, 0), act.Heartbeat(0), act.Tick(), act.SendPull(0, 0),
            act.BrokerReceive(0, 0),
        ],
    )  # fmt: skip
    assert before.slave is not None and before.broker.offsets[0] == 2 and before.slave.offsets[0] is None
    sync = act.SlaveSync()
    after = model.step(before, sync)
    assert after.slave is not None and after.slave.offsets[0] == 2
    assert INV32.check(model, before, sync, after) is None
    stub = after._replace(slave=after.slave._replace(offsets=before.slave.offsets))
    detail = INV32.check(model, before, sync, stub)
    assert detail == "SlaveSync: queue 0 on the slave is None, the master's table has 2"


def test_a_shutdown_unregisters_from_the_master_and_the_slave_and_one_left_listed_is_reported() -> None:
    model = Model(Config(consumers=2, queues=1, messages_per_queue=1, broker_crashes=0, slave=True,
                         client_crashes=0, send_back_failures=0))  # fmt: skip
    before = _run(model, [act.Start(0), act.Start(1)])
    assert before.broker.registered == {0, 1}
    assert before.slave is not None and before.slave.registered == {0, 1}
    shutdown = act.Shutdown(1)
    after = model.step(before, shutdown)
    assert after.broker.registered == {0} and after.slave is not None and after.slave.registered == {0}
    assert INV35.check(model, before, shutdown, after) is None
    kept = after._replace(broker=after.broker._replace(registered=frozenset({0, 1})))
    detail = INV35.check(model, before, shutdown, kept)
    assert detail == "client 1: its shutdown left it in the master's list of the group [0, 1]"
    on_slave = after._replace(slave=after.slave._replace(registered=frozenset({0, 1})))
    detail = INV35.check(model, before, shutdown, on_slave)
    assert detail == "client 1: its shutdown left it in the slave's list of the group [0, 1]"


# One consumer, one queue, two messages pulled together, each its own request; message 0's listener is running
_PULLED = [
    act.Produce(queue=0, tag="A"),
    act.Produce(queue=0, tag="A"),
    act.Start(client=0),
    act.Rebalance(client=0),
    act.SendPull(client=0, queue=0),
    act.BrokerReceive(client=0, overtakes=0),
    act.ReceivePull(client=0, pq_uid=0),
    act.StartConsume(client=0, rid=2),
]
_ONE_QUEUE = {**QUIET, "consumers": 1, "queues": 1, "broker_crashes": 0}


def _without_new_copies(before: State, after: State) -> State:
    """``after`` with the broker's schedule and DLQ as they were in ``before``: a send-back that stored nothing."""
    return after._replace(broker=after.broker._replace(scheduled=before.broker.scheduled, dlq=before.broker.dlq))


def test_a_failed_message_sent_back_is_scheduled_and_one_let_go_with_no_copy_is_reported() -> None:
    model = Model(Config(**_ONE_QUEUE, messages_per_queue=2))  # type: ignore[arg-type]
    before = _run(model, _PULLED)
    step = act.FinishConsume(client=0, rid=2, status="RECONSUME_LATER", ack_index=-1, send_back_fails=0)
    after = model.step(before, step)
    assert not after.clients[0].pqs[0].tree & 1 and len(after.broker.scheduled) == 1  # let go, its copy scheduled
    assert INV24B.check(model, before, step, after) is None
    detail = INV24B.check(model, before, step, _without_new_copies(before, after))
    assert detail is not None and "offset 0 (origin (0, 0)) left the pq as sent back by the RECONSUME_LATER" in detail
    # a success stores nothing and owes nothing
    ok = act.FinishConsume(client=0, rid=2, status="CONSUME_SUCCESS", ack_index=0, send_back_fails=0)
    assert INV24B.check(model, before, ok, model.step(before, ok)) is None


def test_a_send_back_that_fails_keeps_the_message_and_owes_no_copy() -> None:
    model = Model(Config(**{**_ONE_QUEUE, "send_back_failures": 1}, messages_per_queue=2))  # type: ignore[arg-type]
    before = _run(model, _PULLED)
    step = act.FinishConsume(client=0, rid=2, status="RECONSUME_LATER", ack_index=-1, send_back_fails=1)
    after = model.step(before, step)
    assert after.clients[0].pqs[0].tree & 1 and not after.broker.scheduled  # kept for the local resubmit (R7.3)
    assert INV24B.check(model, before, step, after) is None


def test_a_message_cleaned_after_consume_timeout_is_scheduled_and_one_removed_with_no_copy_is_reported() -> None:
    # consumeTimeout 2 s: the cleaner's run at 4 s finds message 0's listener started at 0, more than 2 s ago (R6.8)
    model = Model(Config(**_ONE_QUEUE, messages_per_queue=2, consume_timeout=2_000))  # type: ignore[arg-type]
    timers = [act.Tick(), act.Heartbeat(client=0), act.Tick(), act.CleanExpiredMsg(client=0), act.Tick()]
    before = _run(model, [*_PULLED, *timers])
    step = act.CleanExpiredMsg(client=0)
    after = model.step(before, step)
    assert before.now == 4_000 and not after.clients[0].pqs[0].tree & 1 and len(after.broker.scheduled) == 1
    assert INV24B.check(model, before, step, after) is None
    detail = INV24B.check(model, before, step, _without_new_copies(before, after))
    assert detail is not None and "was removed by cleanExpiredMsg after its send-back" in detail


def test_an_orderly_message_forwarded_at_the_maximum_is_in_the_dlq_and_one_counted_with_no_copy_is_reported() -> None:
    # maxReconsumeTimes 0: the SUSPEND answer forwards message 0 to the DLQ at once (checkReconsumeTimes, R8.7)
    model = Model(Config(**_ONE_QUEUE, messages_per_queue=1, orderly=True, max_reconsume_times=0))  # type: ignore[arg-type]
    before = _run(model, [_PULLED[0], *_PULLED[2:]])
    step = act.FinishConsume(client=0, rid=2, status="SUSPEND_CURRENT_QUEUE_A_MOMENT", ack_index=-1, send_back_fails=0)
    after = model.step(before, step)
    assert len(after.broker.dlq) == 1
    assert INV24B.check(model, before, step, after) is None
    detail = INV24B.check(model, before, step, _without_new_copies(before, after))
    assert detail is not None and "was counted forwarded to the DLQ by the SUSPEND answer" in detail


def test_a_lock_all_with_the_broker_down_changes_no_pq_and_one_that_renews_a_lock_is_reported() -> None:
    # one orderly consumer locks its queues at its first rebalance (at 0); the broker crashes and lockAll runs at 1 s
    model = Model(Config(**{**_ONE_QUEUE, "broker_crashes": 1}, messages_per_queue=1, orderly=True))  # type: ignore[arg-type]
    before = _run(model, [act.Start(client=0), act.Rebalance(client=0), act.BrokerCrash(), act.Tick()])
    step = act.LockAll(client=0)
    after = model.step(before, step)
    assert before.now == 1_000 and not before.broker.up
    assert [(pq.locked, pq.last_lock) for pq in after.clients[0].pqs if pq is not None] == [(True, 0), (True, 0)]
    assert INV34.check(model, before, step, after) is None
    renewed = tuple(None if pq is None else pq._replace(last_lock=1_000) for pq in after.clients[0].pqs)
    detail = INV34.check(model, before, step, _client(after, 0, pqs=renewed))
    assert (
        detail is not None
        and "lockAll ran with the broker down" in detail
        and "since 0 to locked=True since 1000" in detail
    )


def test_a_heartbeat_stamps_its_channel_and_a_scan_of_a_heartbeating_consumer_is_reported() -> None:
    # one consumer, a stall in its budget (so the broker keeps the channels' lastUpdateTimestamp); its first heartbeat
    # lands at 1 s
    model = Model(Config(**{**_ONE_QUEUE, "client_stalls": 1}, messages_per_queue=1))  # type: ignore[arg-type]
    before = _run(model, [act.Start(client=0), act.Tick()])
    beat = act.Heartbeat(client=0)
    after = model.step(before, beat)
    assert after.broker.heartbeat_at == (1_000,) and INV38.check(model, before, beat, after) is None
    kept = after._replace(broker=after.broker._replace(heartbeat_at=before.broker.heartbeat_at))
    assert "lastUpdateTimestamp is 0" in (INV38.check(model, before, beat, kept) or "")
    # the scan may not close the channel of a consumer whose heartbeats run (the correct model does not enable it)
    detail = INV38.check(model, after, act.ExpireChannel(client=0), after)
    assert detail is not None and "whose heartbeats still run" in detail
