"""INV-29 (``scheduled_copies_reach_the_retry_queue``): a sent-back message waiting in the broker's schedule leaves it
only when its delay is due and the master is up, into the group's retry queue, unchanged but for its store time
(R7.5, R7.7; ScheduleMessageService's delivery, BrokerMixin._deliver_scheduled).

Each half is shown on one scripted step of the correct model, a CLUSTERING consumer whose one message failed and was
sent back with delay level 3 (10 s): the step passes, and the same step with the schedule or the retry queue changed
the way a broken broker would change it is reported.
"""

from __future__ import annotations

from rmqspec.spec import actions as act
from rmqspec.spec.broker import SCHEDULED_COPIES_REACH_THE_RETRY_QUEUE as INV29
from rmqspec.spec.concurrent_consume import RECONSUME_LATER
from rmqspec.spec.config import Config
from rmqspec.spec.model import Model
from rmqspec.spec.state import State
from rmqspec.spec.state import put_at as _put

ONE_FAILURE = Config(
    consumers=1, queues=1, messages_per_queue=1, backlog=1, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    client_crashes=0, client_shutdowns=0, broker_crashes=1,
)  # fmt: skip
PULLED = [act.Start(0), act.Rebalance(0), act.SendPull(0, 0), act.BrokerReceive(0, 0), act.ReceivePull(0, 0)]
# 10 s on: the first Tick stops at the heartbeat's first run (1 s), the second at the copy's delay (level 3, 10 s)
TO_THE_DELAY = [act.Tick(), act.Heartbeat(0), act.Tick()]


def _sent_back(model: Model) -> State:
    """The state right after the listener failed the message and its send-back succeeded: the copy is scheduled."""
    state = model.initial()
    for action in PULLED:
        state = model.step(state, action)
    rid = state.clients[0].requests[-1].rid
    state = model.step(state, act.StartConsume(0, rid))
    return model.step(state, act.FinishConsume(0, rid, RECONSUME_LATER, -1, 0))


def _due(model: Model) -> State:
    state = _sent_back(model)
    for action in TO_THE_DELAY:
        state = model.step(state, action)
    return state


def _with_retry_queue(model: Model, state: State, *messages: object) -> State:
    rq = model.retry_queue
    assert rq is not None
    queue = state.broker.queues[rq]
    queue = queue._replace(messages=(*queue.messages, *messages))
    return state._replace(broker=state.broker._replace(queues=_put(state.broker.queues, rq, queue)))


def test_a_due_copy_lands_in_the_retry_queue_and_a_copy_dropped_or_altered_on_the_way_is_reported() -> None:
    model = Model(ONE_FAILURE)
    before = _due(model)
    entry = before.broker.scheduled[0]
    assert (before.now, entry.due, entry.message.reconsume_times) == (10_000, 10_000, 1)
    deliver = act.DeliverScheduled()
    after = model.step(before, deliver)
    assert model.retry_queue is not None
    assert after.broker.queues[model.retry_queue].messages == (entry.message._replace(store_time=10_000),)
    assert INV29.check(model, before, deliver, after) is None
    # the schedule let go of the copy and nothing reached the retry queue (a delivery timer that never ran)
    dropped = after._replace(broker=before.broker._replace(scheduled=()))
    detail = INV29.check(model, before, deliver, dropped)
    assert detail is not None and "was due at 10000; the retry queue received nothing" in detail
    # the copy landed with another count than the one the send-back stored
    recounted = _with_retry_queue(model, dropped, entry.message._replace(store_time=10_000, reconsume_times=0))
    detail = INV29.check(model, before, deliver, recounted)
    assert detail is not None and "the retry queue received" in detail and "reconsume_times=0" in detail


def test_only_a_due_delivery_takes_a_copy_out_and_a_crash_that_loses_the_schedule_is_reported() -> None:
    model = Model(ONE_FAILURE)
    scheduled = _sent_back(model)
    # the schedule topic is in the commit log: a crash keeps it, and the correct crash passes
    crash = act.BrokerCrash()
    crashed = model.step(scheduled, crash)
    assert crashed.broker.scheduled == scheduled.broker.scheduled
    assert INV29.check(model, scheduled, crash, crashed) is None
    lost = crashed._replace(broker=crashed.broker._replace(scheduled=()))
    detail = INV29.check(model, scheduled, crash, lost)
    assert detail is not None and "BrokerCrash: the scheduled copy of (0, 0) left the schedule undelivered" in detail
    # a delivery at the send-back's own time, 10 s early
    early = _with_retry_queue(
        model, scheduled._replace(broker=scheduled.broker._replace(scheduled=())), scheduled.broker.scheduled[0].message
    )
    detail = INV29.check(model, scheduled, act.DeliverScheduled(), early)
    assert detail is not None and "delivered before its delay (due 10000, now 0)" in detail


def test_nothing_reaches_the_retry_queue_but_the_schedule_and_nothing_there_changes() -> None:
    model = Model(ONE_FAILURE)
    before = _due(model)
    msg = before.broker.scheduled[0].message
    # a copy in the retry queue while the schedule still holds it: written twice, once around the delay
    heartbeat = act.Heartbeat(0)
    twice = _with_retry_queue(model, before, msg)
    detail = INV29.check(model, before, heartbeat, twice)
    assert detail is not None and "Heartbeat: (0, 0) reached the retry queue without leaving the schedule" in detail
    # a delivered copy rewritten afterwards
    delivered = model.step(before, act.DeliverScheduled())
    assert model.retry_queue is not None
    rewritten = delivered._replace(
        broker=delivered.broker._replace(
            queues=_put(delivered.broker.queues, model.retry_queue, before.broker.queues[model.retry_queue])
        )
    )
    rewritten = _with_retry_queue(model, rewritten, msg._replace(store_time=1))
    detail = INV29.check(model, delivered, heartbeat, rewritten)
    assert detail is not None and "the retry queue's stored messages changed" in detail
