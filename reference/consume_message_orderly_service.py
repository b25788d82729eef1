"""``ConsumeMessageOrderlyService``: lock renewal, the orderly consume loop, local retry and forwarding.

Mirrors RocketMQ 4.9.8's ``ConsumeMessageOrderlyService`` (R8.3, R8.5-R8.7, R8.9, R4.4) with
the 5.x difference of R8.7 (``MQVersion.orderly_forward_counts_the_send``):

- ``start`` schedules ``lockMQPeriodically`` in CLUSTERING: ``RebalanceImpl.lock_all`` every 20 s
  (``rocketmq.client.rebalance.lockInterval``), first after 1 s (R8.3). ``shutdown`` stops the service,
  drops its scheduled tasks, discards queued and running consume requests and, in CLUSTERING, calls
  ``unlockAll(false)`` (R4.4 step 1, R8.9).
- ``submit_consume_request`` submits one :class:`ConsumeRequest` (a pq and its mq, no messages) only
  when ``putMessage`` answered ``dispatchToConsume`` (R6.2, R8.5).
- ``ConsumeRequest.run`` (R8.5): returns at once for a dropped pq; takes the queue's MessageQueueLock
  monitor; in CLUSTERING it needs ``pq.locked`` and not ``isLockExpired()`` (else
  ``tryLockLaterAndReconsume`` in 100 ms); then loops: dropped stops; unlocked or expired re-locks in
  10 ms; after 60 s of continuous consumption (``MAX_TIME_CONSUME_CONTINUOUSLY``) it resubmits itself
  10 ms later; ``takeMessages(consumeMessageBatchMaxSize)`` (R6.4), and an empty take ends the run
  (``consuming := false``); otherwise the listener runs holding ``pq.consumeLock`` (R8.5 step 3).
- ``process_consume_result`` (R8.6, autoCommit): SUCCESS (and COMMIT / ROLLBACK) ``commit()``;
  SUSPEND_CURRENT_QUEUE_A_MOMENT (also an exception or null) runs ``checkReconsumeTimes`` (R8.7): below
  ``maxReconsumeTimes`` (-1 = ``Integer.MAX_VALUE``) a message's local ``reconsumeTimes`` goes up by one;
  at the maximum the consumer's producer forwards it to ``%RETRY%<group>`` (the broker dead-letters it),
  and a failed send counts like a message below the maximum. Any such message makes the batch go back
  to the tree (``makeMessageToConsumeAgain``) and the request is resubmitted after
  ``suspendCurrentQueueTimeMillis`` (1 s); otherwise the batch is committed. A commit offset >= 0 is
  written with ``updateOffset(mq, offset, increaseOnly=false)`` unless the pq was dropped, and the loop
  goes on.
- ``try_lock_later_and_reconsume`` (R8.5): after the delay, ``lock(mq)`` (R8.2), then a new request 10 ms
  later if granted, 3 s if not. ``submit_consume_request_later`` clamps the delay to [10 ms, 30 s].

Threads are generators, as in the concurrent service: ``ConsumeRequest.run`` yields while the listener
runs (resumed with the listener's :class:`OrderlyListenerAnswer`) and between ``commit()`` and the
dropped check with ``updateOffset`` (resumed with None); after that the same thread goes round the loop
and may call the listener again without another step. While it is suspended it holds its queue's
monitor, so the driver starts no other request of that queue (:class:`MessageQueueLock`).

The service's own single-thread scheduler is the client instance's scheduled executor here, its tasks
named ``LOCK_MQ_TASK_NAME`` and ``TRY_LOCK_LATER_TASK`` + a sequence number, so that the driver's
clock treats them like the other timers. A request handed over later (``submitConsumeRequestLater``)
is built when it is scheduled and waits in the pool's delay queue, as in the concurrent service.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from rmqspec.reference.consume_message_concurrently_service import ConsumeExecutor, ConsumeRequestState
from rmqspec.reference.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    TRACE_SENT_BACK_AT,
    MessageExt,
)
from rmqspec.reference.message_queue import MessageQueue, retry_topic
from rmqspec.reference.mq_client_instance import LOCK_MQ_TASK_NAME, TRY_LOCK_LATER_TASK
from rmqspec.reference.process_queue import ProcessQueue
from rmqspec.reference.protocol import SendMessageRequestHeader
from rmqspec.reference.scheduler import (
    IdSequence,
    ScheduledExecutorService,
    ScheduledFuture,
    SchedulerError,
)

if TYPE_CHECKING:
    from rmqspec.reference.default_mq_push_consumer_impl import DefaultMQPushConsumerImpl

log = logging.getLogger(__name__)

REBALANCE_LOCK_INTERVAL: Final = 20_000  # rocketmq.client.rebalance.lockInterval (R8.3)
LOCK_MQ_INITIAL_DELAY: Final = 1_000
MAX_TIME_CONSUME_CONTINUOUSLY: Final = 60_000  # rocketmq.client.maxTimeConsumeContinuously (R8.5)
SUSPEND_CURRENT_QUEUE_TIME_MILLIS: Final = 1_000  # DefaultMQPushConsumer.suspendCurrentQueueTimeMillis
TRY_LOCK_LATER_WHEN_NOT_LOCKED: Final = 100  # run(): the pq is not locked, or its lock expired
TRY_LOCK_LATER_IN_LOOP: Final = 10  # the loop found the lock lost or expired
SUBMIT_LATER_WHEN_LOCKED: Final = 10  # tryLockLaterAndReconsume: lock(mq) granted
SUBMIT_LATER_WHEN_REFUSED: Final = 3_000  # tryLockLaterAndReconsume: lock(mq) refused
INTEGER_MAX_VALUE: Final = 2**31 - 1
PROPERTY_RECONSUME_TIME: Final = "RECONSUME_TIME"  # MessageConst.PROPERTY_RECONSUME_TIME
PROPERTY_TRANSACTION_PREPARED: Final = "TRAN_MSG"
CLIENT_INNER_PRODUCER_GROUP: Final = "CLIENT_INNER_PRODUCER"


class ConsumeOrderlyStatus(enum.Enum):
    SUCCESS = "SUCCESS"
    ROLLBACK = "ROLLBACK"  # deprecated; with autoCommit it acts as SUCCESS
    COMMIT = "COMMIT"  # deprecated; with autoCommit it acts as SUCCESS
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


@dataclass
class ConsumeOrderlyContext:
    """``ConsumeOrderlyContext``: ``autoCommit`` (default true) and the suspend time (-1: the consumer's)."""

    message_queue: MessageQueue
    auto_commit: bool = True
    suspend_current_queue_time_millis: int = -1


@dataclass(frozen=True)
class OrderlyListenerAnswer:
    """What ``MessageListenerOrderly#consumeMessage`` returned (None: it threw or returned null) and
    what it set on its context."""

    status: ConsumeOrderlyStatus | None
    auto_commit: bool = True
    suspend_current_queue_time_millis: int = -1


OrderlyConsumeThread = Generator["ConsumeRequest", OrderlyListenerAnswer | None, None]
ProcessResultThread = Generator["ConsumeRequest", OrderlyListenerAnswer | None, bool]


class MessageQueueLock:
    """``MessageQueueLock``: one monitor per queue (shared by every pq of that queue). ``holders`` maps a
    queue to the request whose thread is inside ``synchronized (objLock)``."""

    def __init__(self) -> None:
        self.holders: dict[MessageQueue, ConsumeRequest] = {}

    def is_held(self, mq: MessageQueue) -> bool:
        return mq in self.holders

    def acquire(self, mq: MessageQueue, request: ConsumeRequest) -> None:
        holder = self.holders.get(mq)
        if holder is not None and holder is not request:
            raise SchedulerError(f"the monitor of {mq} is held by request {holder.rid}: the thread would block")
        self.holders[mq] = request

    def release(self, mq: MessageQueue, request: ConsumeRequest) -> None:
        if self.holders.get(mq) is request:
            del self.holders[mq]


class ConsumeRequest:
    """``ConsumeMessageOrderlyService.ConsumeRequest``: a pq and its mq; ``rid`` is its object identity.
    ``msgs`` is the batch whose listener runs (or ran last), ``listen_at`` when that listener was called,
    ``begin_time`` the run's ``beginTime`` and ``commit_offset`` what ``commit()`` returned, between it
    and ``updateOffset``."""

    def __init__(
        self, rid: int, process_queue: ProcessQueue, message_queue: MessageQueue, service: ConsumeMessageOrderlyService
    ) -> None:
        self.rid = rid
        self.process_queue = process_queue
        self.message_queue = message_queue
        self.service = service
        self.state = ConsumeRequestState.SUBMITTED
        self.msgs: list[MessageExt] = []
        self.ready_at = 0
        self.listen_at = 0
        self.begin_time = 0
        self.commit_offset = -1

    def __repr__(self) -> str:
        offsets = [m.queue_offset for m in self.msgs]
        return f"OrderlyConsumeRequest(rid={self.rid}, mq={self.message_queue}, offsets={offsets}, {self.state.value})"

    def run(self) -> OrderlyConsumeThread:
        """R8.5; yields while the listener runs and between ``commit()`` and ``updateOffset``."""
        service = self.service
        pq, mq = self.process_queue, self.message_queue
        if pq.dropped:
            log.warning("run, the message queue not be able to consume, because it's dropped. %s", mq)
            self.state = ConsumeRequestState.DONE
            return
        service.message_queue_lock.acquire(mq, self)
        try:
            clustering = service.clustering()
            if not clustering or (pq.locked and not pq.is_lock_expired(service.now())):
                self.begin_time = service.now()
                continue_consume = True
                while continue_consume:
                    if pq.dropped:
                        log.warning("the message queue not be able to consume, because it's dropped. %s", mq)
                        break
                    if clustering and not pq.locked:
                        service.try_lock_later_and_reconsume(mq, pq, TRY_LOCK_LATER_IN_LOOP)
                        break
                    if clustering and pq.is_lock_expired(service.now()):
                        service.try_lock_later_and_reconsume(mq, pq, TRY_LOCK_LATER_IN_LOOP)
                        break
                    if service.now() - self.begin_time > MAX_TIME_CONSUME_CONTINUOUSLY:
                        service.submit_consume_request_later(pq, mq, SUBMIT_LATER_WHEN_LOCKED)
                        break
                    consumer = service.consumer_impl.default_mq_push_consumer
                    msgs = pq.take_messages(consumer.consume_message_batch_max_size, service.now())
                    service.consumer_impl.reset_retry_and_namespace(msgs, service.consumer_group)
                    if not msgs:
                        continue_consume = False
                        continue
                    context = ConsumeOrderlyContext(mq)
                    pq.consume_lock.lock()
                    try:
                        if pq.dropped:
                            log.warning("consumeMessage, the message queue not be able to consume: dropped. %s", mq)
                            break
                        self.msgs = msgs
                        self.listen_at = service.now()
                        self.state = ConsumeRequestState.LISTENING
                        answer = yield self
                    finally:
                        pq.consume_lock.unlock()
                    assert answer is not None, "the listener thread must be resumed with the listener's answer"
                    context.auto_commit = answer.auto_commit
                    context.suspend_current_queue_time_millis = answer.suspend_current_queue_time_millis
                    status = answer.status
                    if status is None:  # an exception or null: SUSPEND_CURRENT_QUEUE_A_MOMENT
                        status = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
                    continue_consume = yield from service.process_consume_result(msgs, status, context, self)
            else:
                if pq.dropped:
                    log.warning("the message queue not be able to consume, because it's dropped. %s", mq)
                    return
                service.try_lock_later_and_reconsume(mq, pq, TRY_LOCK_LATER_WHEN_NOT_LOCKED)
        finally:
            service.message_queue_lock.release(mq, self)
            self.state = ConsumeRequestState.DONE


class OrderlyConsumeExecutor(ConsumeExecutor["ConsumeRequest", OrderlyListenerAnswer]):
    """The orderly service's consume thread pool: the concurrent service's pool whose threads may not pass
    a queue's MessageQueueLock that another running thread holds (the driver starts no such request). Its
    ``shutdown`` (R4.4 step 1) closes the running threads but those inside their listener (``orphans``)."""

    def __init__(self, message_queue_lock: MessageQueueLock) -> None:
        super().__init__()
        self.message_queue_lock = message_queue_lock
        self.orphans: dict[
            ConsumeRequest, Generator[object, OrderlyListenerAnswer | None, None]
        ] = {}  # outlived shutdownNow

    def can_start(self, request: ConsumeRequest) -> bool:
        """A pool thread that takes ``request`` gets past ``synchronized (objLock)`` at once: the pq is
        dropped (run returns before the monitor) or no other thread holds the queue's monitor."""
        return request.process_queue.dropped or not self.message_queue_lock.is_held(request.message_queue)

    def start_thread(self, request: ConsumeRequest, now: int) -> None:
        """A pool thread takes ``request`` and runs it up to its first suspension point."""
        if not self.can_start(request):
            raise SchedulerError(f"request {request.rid} would block on the monitor of {request.message_queue}")
        super().start_thread(request, now)

    def shutdown(self) -> None:
        """``shutdownNow`` (R4.4 step 1): the queue is discarded and the running threads are interrupted. A
        thread inside its listener runs on (the listener does not check the interrupt) and moves to
        ``orphans`` with its monitor and consume lock still held; the others end, releasing theirs."""
        listening = [r for r in self.running if r.state is ConsumeRequestState.LISTENING]
        self.orphans.update((r, self.running.pop(r)) for r in listening)
        super().shutdown()

    def orphan_returns(self, request: ConsumeRequest, answer: OrderlyListenerAnswer) -> None:
        """The orphaned listener of ``request`` returns ``answer``; its thread runs to the end: ``commit()`` on
        the pq ``destroy()`` dropped, no ``updateOffset`` (R8.6), and the loop's dropped check ends the run."""
        thread = self.orphans.pop(request)
        value: OrderlyListenerAnswer | None = answer
        try:
            while True:
                thread.send(value)
                value = None
        except StopIteration:
            return


class TryLockLaterTask:
    """The Runnable of ``tryLockLaterAndReconsume`` (R8.5): ``lockOneMQ(mq)``, then the request later."""

    def __init__(self, service: ConsumeMessageOrderlyService, mq: MessageQueue, pq: ProcessQueue) -> None:
        self.service = service
        self.message_queue = mq
        self.process_queue = pq

    def __call__(self) -> None:
        service = self.service
        lock_ok = service.lock_one_mq(self.message_queue)
        delay = SUBMIT_LATER_WHEN_LOCKED if lock_ok else SUBMIT_LATER_WHEN_REFUSED
        service.submit_consume_request_later(self.process_queue, self.message_queue, delay)


class ConsumeMessageOrderlyService:
    """``ConsumeMessageOrderlyService`` (R8.3, R8.5-R8.7, R8.9)."""

    def __init__(self, consumer_impl: DefaultMQPushConsumerImpl, ids: IdSequence) -> None:
        self.consumer_impl = consumer_impl
        self.consumer_group = consumer_impl.default_mq_push_consumer.consumer_group
        self.ids = ids
        self.message_queue_lock = MessageQueueLock()
        self.consume_executor = OrderlyConsumeExecutor(self.message_queue_lock)
        self.stopped = False
        self.future: ScheduledFuture | None = None
        self._task_seq = 0  # names the scheduled tasks; not an object identity of the model

    def now(self) -> int:
        return self.consumer_impl.now()

    def clustering(self) -> bool:
        return self.consumer_impl.default_mq_push_consumer.message_model == "CLUSTERING"

    def _scheduler(self) -> ScheduledExecutorService:
        return self.consumer_impl.mq_client_factory.scheduled_executor_service

    # --- life cycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        if self.clustering():
            self.future = self._scheduler().schedule_at_fixed_rate(
                LOCK_MQ_TASK_NAME, self.lock_mq_periodically, LOCK_MQ_INITIAL_DELAY, REBALANCE_LOCK_INTERVAL
            )

    def lock_mq_periodically(self) -> None:
        """R8.3: ``lockAll`` unless stopped (4.9.3+ catches what it throws, #3861)."""
        if self.stopped:
            return
        try:
            self.consumer_impl.rebalance_impl.lock_all()
        except Exception as e:
            log.error("lockMQPeriodically exception %s", e)

    def shutdown(self) -> None:
        """R4.4 step 1, R8.9: stopped; the scheduler's tasks (lock renewal, pending re-locks) are gone;
        the pool discards its requests; then in CLUSTERING ``unlockAll(false)``."""
        self.stopped = True
        if self.future is not None:
            self.future.cancel()
            self.future = None
        for task in self.try_lock_later_tasks():
            task.cancel()
        self.consume_executor.shutdown()
        if self.clustering():
            self.consumer_impl.rebalance_impl.unlock_all(False)

    # --- submitting ---------------------------------------------------------------------------------

    def _new_request(self, pq: ProcessQueue, mq: MessageQueue) -> ConsumeRequest:
        return ConsumeRequest(self.ids.next_id(), pq, mq, self)

    def submit_consume_request(
        self, msgs: list[MessageExt] | None, process_queue: ProcessQueue, message_queue: MessageQueue, dispatch: bool
    ) -> None:
        """R8.5: one request for the pq, only when ``putMessage`` said ``dispatchToConsume``."""
        if dispatch:
            self.consume_executor.submit(self._new_request(process_queue, message_queue), self.now())

    def submit_consume_request_later(
        self, process_queue: ProcessQueue, message_queue: MessageQueue, suspend_time_millis: int
    ) -> None:
        """``submitConsumeRequestLater``: -1 means ``suspendCurrentQueueTimeMillis``; clamped to
        [10 ms, 30 s]; then ``submitConsumeRequest(null, pq, mq, true)``."""
        time_millis = suspend_time_millis
        if time_millis == -1:
            time_millis = SUSPEND_CURRENT_QUEUE_TIME_MILLIS
        time_millis = min(max(time_millis, 10), 30_000)
        self.consume_executor.submit(self._new_request(process_queue, message_queue), self.now() + time_millis)

    def try_lock_later_and_reconsume(self, mq: MessageQueue, process_queue: ProcessQueue, delay_mills: int) -> None:
        """R8.5: after ``delay_mills``, :class:`TryLockLaterTask`."""
        self._task_seq += 1
        self._scheduler().schedule(
            f"{TRY_LOCK_LATER_TASK}{self._task_seq}", TryLockLaterTask(self, mq, process_queue), delay_mills
        )

    def try_lock_later_tasks(self) -> list[ScheduledFuture]:
        """The pending ``tryLockLaterAndReconsume`` tasks, in scheduling order."""
        return [f for f in self._scheduler().tasks() if isinstance(f.task, TryLockLaterTask)]

    def lock_one_mq(self, mq: MessageQueue) -> bool:
        """``lockOneMQ``: ``lock(mq)`` (R8.2) unless stopped."""
        if self.stopped:
            return False
        return self.consumer_impl.rebalance_impl.lock(mq)

    # --- the result ---------------------------------------------------------------------------------

    def process_consume_result(
        self,
        msgs: list[MessageExt],
        status: ConsumeOrderlyStatus,
        context: ConsumeOrderlyContext,
        request: ConsumeRequest,
    ) -> ProcessResultThread:
        """R8.6. Returns ``continueConsume``; yields the request between ``commit()`` and the dropped
        check with ``updateOffset(increaseOnly=false)``."""
        pq, mq = request.process_queue, request.message_queue
        continue_consume = True
        commit_offset = -1
        suspend = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        if context.auto_commit:
            if status is suspend:
                if self.check_reconsume_times(msgs):
                    pq.make_message_to_consume_again(msgs)
                    self.submit_consume_request_later(pq, mq, context.suspend_current_queue_time_millis)
                    continue_consume = False
                else:
                    commit_offset = pq.commit()
            else:  # COMMIT and ROLLBACK are taken as SUCCESS
                if status is not ConsumeOrderlyStatus.SUCCESS:
                    log.warning("the message queue consume result is illegal, we think you want to ack %s", mq)
                commit_offset = pq.commit()
        elif status is ConsumeOrderlyStatus.COMMIT:
            commit_offset = pq.commit()
        elif status is ConsumeOrderlyStatus.ROLLBACK:
            pq.rollback()
            self.submit_consume_request_later(pq, mq, context.suspend_current_queue_time_millis)
            continue_consume = False
        elif status is suspend and self.check_reconsume_times(msgs):
            pq.make_message_to_consume_again(msgs)
            self.submit_consume_request_later(pq, mq, context.suspend_current_queue_time_millis)
            continue_consume = False
        if commit_offset >= 0:
            request.commit_offset = commit_offset
            request.state = ConsumeRequestState.UPDATING_OFFSET
            yield request  # the rebalance, a pull or another queue's thread may run here
            if not pq.dropped:
                self.consumer_impl.offset_store.update_offset(mq, commit_offset, False)
        return continue_consume

    def get_max_reconsume_times(self) -> int:
        """R8.7: -1 means ``Integer.MAX_VALUE`` for an orderly consumer."""
        times = self.consumer_impl.default_mq_push_consumer.max_reconsume_times
        return INTEGER_MAX_VALUE if times == -1 else times

    def check_reconsume_times(self, msgs: list[MessageExt]) -> bool:
        """R8.7: True (suspend) when some message stays: below the maximum (its local reconsumeTimes goes
        up by one) or at it with a failed forward (likewise)."""
        suspend = False
        for msg in msgs:
            if msg.reconsume_times >= self.get_max_reconsume_times():
                msg.put_property(PROPERTY_RECONSUME_TIME, str(msg.reconsume_times))
                if not self.send_message_back(msg):
                    suspend = True
                    msg.reconsume_times += 1
            else:
                suspend = True
                msg.reconsume_times += 1
        return suspend

    def send_message_back(self, msg: MessageExt) -> bool:
        """R8.7: the client instance's producer sends a copy to ``%RETRY%<group>`` with RECONSUME_TIME =
        reconsumeTimes (4.9.8) or reconsumeTimes + 1 (5.x) and MAX_RECONSUME_TIMES, at delay level
        3 + reconsumeTimes; the broker dead-letters it when RECONSUME_TIME >= MAX (R7.6). The producer
        sends to queue 0 of the retry topic on the one broker; its retries (``retryTimesWhenSendFailed``)
        meet the same fault, so one attempt stands for them. False when the send fails."""
        factory = self.consumer_impl.mq_client_factory
        group_retry_topic = retry_topic(self.consumer_group)
        properties = dict(msg.properties)
        origin = msg.get_property(PROPERTY_ORIGIN_MESSAGE_ID)
        properties[PROPERTY_ORIGIN_MESSAGE_ID] = origin if origin else msg.msg_id
        properties[PROPERTY_RETRY_TOPIC] = msg.topic
        counts_the_send = factory.version.orderly_forward_counts_the_send
        reconsume_time = msg.reconsume_times + 1 if counts_the_send else msg.reconsume_times
        properties[PROPERTY_RECONSUME_TIME] = str(reconsume_time)
        properties[PROPERTY_MAX_RECONSUME_TIMES] = str(self.get_max_reconsume_times())
        properties.pop(PROPERTY_TRANSACTION_PREPARED, None)
        properties[PROPERTY_DELAY_TIME_LEVEL] = str(3 + msg.reconsume_times)
        properties[TRACE_SENT_BACK_AT] = str(self.now())  # (trace for the abstraction, not RocketMQ's)
        # DefaultMQProducerImpl#sendKernelImpl: for a %RETRY% topic the two properties also go into the
        # request header (the properties string was encoded before it clears them).
        header = SendMessageRequestHeader(
            CLIENT_INNER_PRODUCER_GROUP,
            group_retry_topic,
            0,
            properties,
            self.now(),
            reconsume_time,
            self.get_max_reconsume_times(),
        )
        try:
            addr = factory.find_broker_address_in_publish(msg_broker_name(self, msg))
            if addr is None:
                raise SchedulerError("no route to the broker")
            factory.mq_client_api_impl.send_message(addr, header, msg.body)
            return True
        except Exception as e:
            log.error("sendMessageBack exception, group: %s msg: %s: %s", self.consumer_group, msg.msg_id, e)
            return False

    def ready_times(self) -> list[int]:
        return [when for _, when in self.consume_executor.queue.items()]

    def clean_expire_msg_due(self) -> int | None:
        """R6.8: ``ConsumeMessageOrderlyService#start`` schedules no cleanExpireMsg."""
        return None


def msg_broker_name(service: ConsumeMessageOrderlyService, msg: MessageExt) -> str:
    """The broker the producer publishes to: the one broker of the route (the retry topic's, or the
    consumed topic's in BROADCASTING where no retry route is known)."""
    factory = service.consumer_impl.mq_client_factory
    route = factory.topic_route_table.get(retry_topic(service.consumer_group))
    if route is None:
        route = next(iter(factory.topic_route_table.values()))
    return route.broker_name
