"""``ConsumeMessageConcurrentlyService``: run the listener on pulled batches, then ack, retry or dead-letter.

Mirrors RocketMQ 4.9.8's concurrent consume service (§7):

- ``submit_consume_request`` splits a pulled list into ``ConsumeRequest`` s of
  ``consumeMessageBatchMaxSize`` messages (R7.1); ``submit_consume_request_later`` hands a request to
  the pool after 5 s (R7.3).
- ``ConsumeRequest.run`` (R7.2) returns at once for a dropped pq, calls the listener, and skips
  ``process_consume_result`` if the pq was dropped meanwhile.
- ``process_consume_result`` (R7.3): messages past ``ackIndex`` are sent back (CLUSTERING, R7.4) or
  dropped (BROADCASTING); those whose send-back failed stay in the pq with ``reconsumeTimes + 1`` and
  are resubmitted after 5 s; the rest leave the pq (``removeMessage``) and the result goes to the
  offset store with ``increaseOnly = true`` unless the pq was dropped. 5.x first skips a failed message
  its pq no longer holds (``containsMessage``: cleanExpiredMsg handled it, R6.8).
- ``start`` schedules ``clean_expire_msg`` on its own ``cleanExpireMsgExecutors`` at a fixed rate of
  ``consumeTimeout``, first after one period (R6.8): ``ProcessQueue.clean_expired_msg`` of every pq of the
  table. ``shutdown`` stops it.

Threads are generators (:class:`ConsumeExecutor`): ``ConsumeRequest.run`` yields where a real thread
can be overtaken: while the listener runs, and between ``removeMessage`` and the dropped-check plus
``updateOffset``. The driver resumes them one at a time.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Generic, Protocol, TypeVar

from rmqspec.reference.message import PROPERTY_CONSUME_START_TIMESTAMP, MessageExt
from rmqspec.reference.message_queue import MessageQueue
from rmqspec.reference.process_queue import ProcessQueue
from rmqspec.reference.remote_broker_offset_store import send_order
from rmqspec.reference.scheduler import DelayQueue, IdSequence, ScheduledExecutorService, SchedulerError

if TYPE_CHECKING:
    from rmqspec.reference.default_mq_push_consumer_impl import DefaultMQPushConsumerImpl

log = logging.getLogger(__name__)

SUBMIT_LATER_DELAY: Final = 5_000  # submitConsumeRequestLater (R7.3)
CLEAN_EXPIRE_MSG_TASK_NAME: Final = "cleanExpireMsg"  # on CleanExpireMsgScheduledThread_ (R6.8)
INTEGER_MAX_VALUE: Final = 2**31 - 1


class ConsumeConcurrentlyStatus(enum.Enum):
    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


class ConsumeRequestState(enum.Enum):
    SUBMITTED = "SUBMITTED"  # in the pool's queue
    LISTENING = "LISTENING"  # the listener is running on a consume thread
    UPDATING_OFFSET = "UPDATING_OFFSET"  # removeMessage done; dropped check and updateOffset next
    DONE = "DONE"


@dataclass
class ConsumeConcurrentlyContext:
    """``ConsumeConcurrentlyContext`` (R7.2 step 4)."""

    message_queue: MessageQueue
    delay_level_when_next_consume: int = 0
    ack_index: int = INTEGER_MAX_VALUE


@dataclass(frozen=True)
class ListenerAnswer:
    """What ``MessageListenerConcurrently#consumeMessage`` returned, and the ackIndex it set."""

    status: ConsumeConcurrentlyStatus | None
    ack_index: int = INTEGER_MAX_VALUE


ConsumeThread = Generator["ConsumeRequest", ListenerAnswer | None, None]


class ConsumeRequest:
    """``ConsumeMessageConcurrentlyService.ConsumeRequest``; ``rid`` is its object identity."""

    def __init__(
        self,
        rid: int,
        msgs: list[MessageExt],
        process_queue: ProcessQueue,
        message_queue: MessageQueue,
        service: ConsumeMessageConcurrentlyService,
    ) -> None:
        self.rid = rid
        self.msgs = msgs
        self.process_queue = process_queue
        self.message_queue = message_queue
        self.service = service
        self.state = ConsumeRequestState.SUBMITTED
        self.remove_result = -1
        self.ready_at = 0  # when the pool may run it (kept for tracing once it runs)

    def __repr__(self) -> str:
        offsets = [m.queue_offset for m in self.msgs]
        return f"ConsumeRequest(rid={self.rid}, mq={self.message_queue}, offsets={offsets}, {self.state.value})"

    def run(self) -> ConsumeThread:
        """R7.2. Yields itself while the listener runs (resumed with its :class:`ListenerAnswer`) and
        again after ``removeMessage`` (resumed with None)."""
        service = self.service
        if self.process_queue.dropped:
            return
        context = ConsumeConcurrentlyContext(self.message_queue)
        service.consumer_impl.reset_retry_and_namespace(self.msgs, service.consumer_group)
        for msg in self.msgs:
            msg.put_property(PROPERTY_CONSUME_START_TIMESTAMP, str(service.consumer_impl.now()))
        self.state = ConsumeRequestState.LISTENING
        answer = yield self
        assert answer is not None, "the listener thread must be resumed with the listener's answer"
        status = answer.status
        context.ack_index = answer.ack_index
        if status is None:  # an exception or a null status counts as RECONSUME_LATER
            status = ConsumeConcurrentlyStatus.RECONSUME_LATER
        if not self.process_queue.dropped:
            yield from service.process_consume_result(status, context, self)
        self.state = ConsumeRequestState.DONE


class PoolRequest(Protocol):
    """What a consume pool runs: a request whose ``run`` is a thread (a generator) the driver resumes."""

    ready_at: int

    def run(self) -> Generator[object, Any, None]: ...


R = TypeVar("R", bound=PoolRequest)  # the request type of a consume pool
A = TypeVar("A")  # what its suspended threads are resumed with


class ConsumeExecutor(Generic[R, A]):
    """The consume thread pool: a work queue (with delayed hand-offs) and the threads now running.
    The orderly service's pool is the same with a per-queue monitor check
    (``consume_message_orderly_service.OrderlyConsumeExecutor``)."""

    def __init__(self) -> None:
        self.queue: DelayQueue[R] = DelayQueue()
        self.running: dict[R, Generator[object, A | None, None]] = {}
        self.shutdown_now = False

    def submit(self, request: R, ready_at: int) -> None:
        if self.shutdown_now:
            raise SchedulerError("RejectedExecutionException: the consume pool is shut down")
        request.ready_at = ready_at
        self.queue.put(request, ready_at)

    def start_thread(self, request: R, now: int) -> None:
        """A pool thread takes ``request`` and runs it up to its first suspension point."""
        self.queue.take(request, now)
        thread: Generator[object, A | None, None] = request.run()
        try:
            next(thread)
        except StopIteration:
            return
        self.running[request] = thread

    def resume(self, request: R, value: A | None) -> None:
        thread = self.running.pop(request)
        try:
            thread.send(value)
        except StopIteration:
            return
        self.running[request] = thread

    def shutdown(self) -> None:
        """``shutdownNow`` (R4.4 step 1): queued requests are discarded, running ones interrupted."""
        self.queue.clear()
        for thread in self.running.values():
            thread.close()
        self.running.clear()
        self.shutdown_now = True


class ConsumeMessageConcurrentlyService:
    def __init__(self, consumer_impl: DefaultMQPushConsumerImpl, ids: IdSequence) -> None:
        self.consumer_impl = consumer_impl
        self.consumer_group = consumer_impl.default_mq_push_consumer.consumer_group
        self.ids = ids
        self.consume_executor: ConsumeExecutor[ConsumeRequest, ListenerAnswer] = ConsumeExecutor()
        self.clean_expire_msg_executors = ScheduledExecutorService(
            consumer_impl.mq_client_factory.clock, "CleanExpireMsgScheduledThread_"
        )

    def start(self) -> None:
        """R6.8: ``cleanExpireMsg`` at a fixed rate of ``consumeTimeout``, first after one period."""
        timeout = self.consumer_impl.default_mq_push_consumer.consume_timeout
        self.clean_expire_msg_executors.schedule_at_fixed_rate(
            CLEAN_EXPIRE_MSG_TASK_NAME, self._clean_expire_msg_task, timeout, timeout
        )

    def _clean_expire_msg_task(self) -> None:
        try:
            self.clean_expire_msg()
        except Exception as e:
            log.error("scheduleAtFixedRate cleanExpireMsg exception: %s", e)

    def clean_expire_msg(self) -> None:
        """R6.8, ``cleanExpireMsg``: ``cleanExpiredMsg`` of every pq of the table. Java walks the
        ``ConcurrentHashMap`` in its hash order; the order shows only in the order of same-time retry copies,
        and this one is the model's: user topics first, then the retry topic (``send_order``, as persistAll)."""
        table = self.consumer_impl.rebalance_impl.process_queue_table
        for mq in sorted(table, key=send_order):
            table[mq].clean_expired_msg(self.consumer_impl)

    def clean_expire_msg_due(self) -> int | None:
        """When the cleanExpireMsg task runs next (None once shut down)."""
        return self.clean_expire_msg_executors.due_time(CLEAN_EXPIRE_MSG_TASK_NAME)

    def shutdown(self) -> None:
        self.consume_executor.shutdown()
        self.clean_expire_msg_executors.shutdown()

    def _new_request(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> ConsumeRequest:
        return ConsumeRequest(self.ids.next_id(), msgs, pq, mq, self)

    def _chunks(self, msgs: list[MessageExt]) -> list[list[MessageExt]]:
        size = self.consumer_impl.default_mq_push_consumer.consume_message_batch_max_size
        return [msgs[k : k + size] for k in range(0, len(msgs), size)]

    def submit_consume_request(
        self, msgs: list[MessageExt], process_queue: ProcessQueue, message_queue: MessageQueue, dispatch: bool
    ) -> None:
        """R7.1: consecutive chunks of ``consumeMessageBatchMaxSize``, in order."""
        now = self.consumer_impl.now()
        for chunk in self._chunks(msgs):
            self.consume_executor.submit(self._new_request(chunk, process_queue, message_queue), now)

    def submit_consume_request_later(
        self, msgs: list[MessageExt], process_queue: ProcessQueue, message_queue: MessageQueue
    ) -> None:
        """R7.3: after 5 s, ``submitConsumeRequest`` of the same messages (built now, handed over then)."""
        ready_at = self.consumer_impl.now() + SUBMIT_LATER_DELAY
        for chunk in self._chunks(msgs):
            self.consume_executor.submit(self._new_request(chunk, process_queue, message_queue), ready_at)

    def process_consume_result(
        self, status: ConsumeConcurrentlyStatus, context: ConsumeConcurrentlyContext, request: ConsumeRequest
    ) -> ConsumeThread:
        """R7.3. Yields the request between ``removeMessage`` and ``updateOffset``."""
        msgs = request.msgs
        if not msgs:
            return
        ack_index = context.ack_index
        if status is ConsumeConcurrentlyStatus.CONSUME_SUCCESS:
            ack_index = min(ack_index, len(msgs) - 1)
        else:
            ack_index = -1
        consumer = self.consumer_impl.default_mq_push_consumer
        if consumer.message_model == "BROADCASTING":
            for msg in msgs[ack_index + 1 :]:
                log.warning("BROADCASTING, the message consume failed, drop it, %s", msg.msg_id)
        else:
            back_failed: list[MessageExt] = []
            skips_cleaned = self.consumer_impl.mq_client_factory.version.send_back_skips_cleaned
            for msg in msgs[ack_index + 1 :]:
                if skips_cleaned and not request.process_queue.contains_message(msg):
                    log.info("Message is not found in its process queue; skip send-back-procedure, %s", msg.msg_id)
                    continue  # 5.x: cleanExpiredMsg already sent it back and removed it (R6.8)
                if not self.send_message_back(msg, context):
                    msg.reconsume_times += 1
                    back_failed.append(msg)
            if back_failed:
                request.msgs = [m for m in msgs if all(m is not f for f in back_failed)]
                self.submit_consume_request_later(back_failed, request.process_queue, request.message_queue)
        offset = request.process_queue.remove_message(request.msgs, self.consumer_impl.now())
        if offset < 0:
            return
        request.remove_result = offset
        request.state = ConsumeRequestState.UPDATING_OFFSET
        yield request  # another thread, or the rebalance, may run here
        if not request.process_queue.dropped:
            self.consumer_impl.offset_store.update_offset(request.message_queue, offset, True)

    def send_message_back(self, msg: MessageExt, context: ConsumeConcurrentlyContext) -> bool:
        """R7.4: True when the broker (or the producer fall-back) took the message."""
        delay_level = context.delay_level_when_next_consume
        try:
            self.consumer_impl.send_message_back(msg, delay_level, context.message_queue.broker_name)
            return True
        except Exception as e:
            log.error("sendMessageBack exception, group: %s msg: %s: %s", self.consumer_group, msg.msg_id, e)
            return False

    def ready_times(self) -> list[int]:
        return [when for _, when in self.consume_executor.queue.items()]
