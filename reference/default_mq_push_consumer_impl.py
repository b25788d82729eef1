"""``DefaultMQPushConsumerImpl``: the push consumer's pull loop, start, shutdown and send-back.

Mirrors RocketMQ 4.9.8:

- :class:`DefaultMQPushConsumer`: the user-facing settings (§14 defaults).
- :class:`PullRequest` and :class:`PullMessageService`: one PullRequest circulates per ProcessQueue;
  ``execute_pull_request_immediately``/``_later`` make it runnable now or after a delay.
- ``DefaultMQPushConsumerImpl.pull_message`` (R5.1 preconditions, R5.2 piggy-backed commit) and
  :class:`PullCallback` (R5.7: FOUND puts and submits; NO_NEW_MSG / NO_MATCHED_MSG run
  ``correct_tags_offset``, R6.7; OFFSET_ILLEGAL drops the pq and fixes the offset 10 s later;
  an exception pulls again after 1 s).
- :class:`PullAPIWrapper`: ``pullKernelImpl`` (R5.3) and ``processPullResult`` (client tag re-filter,
  R5.6).
- ``start`` (R1.3 store choice, R7.8 retry subscription, R9.7 heartbeat + rebalanceImmediately) and
  ``shutdown`` in the order of R4.4.
- ``send_message_back`` (R7.4) with the producer fall-back to ``%RETRY%<group>``.
- Orderly consumers (``consume_orderly``, a ``MessageListenerOrderly``) consume through
  ``ConsumeMessageOrderlyService`` (R8.5-R8.7); a pq that the orderly removal left dropped in the table
  (R8.8) keeps its PullRequest circulating until ``pullMessage`` discards it (R5.1 step 1).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from rmqspec.reference.allocate import AllocateMessageQueueStrategy
from rmqspec.reference.consume_message_concurrently_service import ConsumeMessageConcurrentlyService
from rmqspec.reference.consume_message_orderly_service import ConsumeMessageOrderlyService
from rmqspec.reference.exceptions import MQClientException
from rmqspec.reference.local_file_offset_store import LocalFileOffsetStore
from rmqspec.reference.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_MAX_OFFSET,
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_MIN_OFFSET,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    MessageExt,
)
from rmqspec.reference.message_queue import MessageQueue, retry_topic
from rmqspec.reference.mq_client_instance import (
    FIX_OFFSET_TASK,
    MASTER_ID,
    MQClientInstance,
    PullResult,
    PullStatus,
)
from rmqspec.reference.offset_store import OffsetStore, ReadOffsetType
from rmqspec.reference.process_queue import ProcessQueue
from rmqspec.reference.protocol import (
    SUB_ALL,
    ConsumerData,
    PullMessageRequestHeader,
    PullSysFlag,
    SendMessageRequestHeader,
    SubscriptionData,
)
from rmqspec.reference.rebalance_impl import RebalancePushImpl
from rmqspec.reference.remote_broker_offset_store import RemoteBrokerOffsetStore
from rmqspec.reference.remoting import RemotingException
from rmqspec.reference.scheduler import DelayQueue, IdSequence, SchedulerError

log = logging.getLogger(__name__)

CLUSTERING: Final = "CLUSTERING"
BROADCASTING: Final = "BROADCASTING"
# pullTimeDelayMillsWhenException: DefaultMQPushConsumerImpl's constructor overwrites its field's 3000 with
# DefaultMQPushConsumer's, ClientConfig's 1000 (DefaultMQPushConsumerImpl.java:124, ClientConfig.java:58).
PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION: Final = 1_000
PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL: Final = 50
PULL_TIME_DELAY_MILLS_WHEN_SUSPEND: Final = 1_000
BROKER_SUSPEND_MAX_TIME_MILLIS: Final = 15_000
OFFSET_ILLEGAL_FIX_DELAY: Final = 10_000  # R5.7, 4.9.x


@dataclass
class DefaultMQPushConsumer:
    """The settings of a ``DefaultMQPushConsumer`` (§14). ``subscription`` maps topic to a tag
    expression; ``consume_timestamp`` is in (logical) milliseconds instead of ``yyyyMMddHHmmss``."""

    consumer_group: str
    allocate_message_queue_strategy: AllocateMessageQueueStrategy
    subscription: dict[str, str] = field(default_factory=dict)
    message_model: str = CLUSTERING
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    consume_timestamp: int = 0
    pull_batch_size: int = 32
    consume_message_batch_max_size: int = 1
    pull_threshold_for_queue: int = 1000
    pull_threshold_size_for_queue: int = 100  # MiB
    consume_concurrently_max_span: int = 2000
    max_reconsume_times: int = -1
    pull_interval: int = 0
    post_subscription_when_pull: bool = False
    # orderly: registering a MessageListenerOrderly (Java decides by the listener's type): the consumer
    # consumes through ConsumeMessageOrderlyService (R8.5-R8.8).
    consume_orderly: bool = False
    # consumeTimeout (R6.8), in logical ms here (RocketMQ counts minutes, default 15): the period of the
    # concurrent consume service's cleanExpireMsg task and the listener age past which it sends a message back.
    consume_timeout: int = 15 * 60_000


@dataclass(eq=False)
class PullRequest:
    """``PullRequest``. ``ready_at`` (not RocketMQ's) remembers when the pull service last made it
    runnable, for tracing."""

    consumer_group: str
    message_queue: MessageQueue
    process_queue: ProcessQueue
    next_offset: int
    previously_locked: bool = False
    ready_at: int = 0


class PullMessageService:
    """``PullMessageService``: its ``pullRequestQueue`` plus the delayed hand-offs of
    ``executePullRequestLater``. The driver picks which runnable request the pull thread takes."""

    def __init__(self, mq_client_factory: MQClientInstance) -> None:
        self.mq_client_factory = mq_client_factory
        self.pull_request_queue: DelayQueue[PullRequest] = DelayQueue()
        self.stopped = True

    def start(self) -> None:
        self.stopped = False

    def shutdown(self) -> None:
        self.stopped = True
        self.pull_request_queue.clear()

    def _live(self, pull_request: PullRequest) -> bool:
        """A dropped pq's request is discarded when the pull thread takes it (R5.1 step 1); it is
        forgotten at once, except while the pq is still in an orderly consumer's table (R8.8), where
        the model keeps it until ``pullMessage`` returns."""
        pq = pull_request.process_queue
        if not pq.dropped:
            return True
        consumer = self.mq_client_factory.consumer_table.get(pull_request.consumer_group)
        return (
            consumer is not None
            and consumer.consume_orderly
            and consumer.rebalance_impl.process_queue_table.get(pull_request.message_queue) is pq
        )

    def _put(self, pull_request: PullRequest, ready_at: int) -> None:
        if self.stopped:
            return
        self.pull_request_queue.remove_if(lambda r: not self._live(r))
        if self._live(pull_request):
            pull_request.ready_at = ready_at
            self.pull_request_queue.put(pull_request, ready_at)

    def execute_pull_request_immediately(self, pull_request: PullRequest) -> None:
        self._put(pull_request, self.mq_client_factory.clock.now())

    def execute_pull_request_later(self, pull_request: PullRequest, time_delay: int) -> None:
        self._put(pull_request, self.mq_client_factory.clock.now() + time_delay)

    def pending(self) -> list[PullRequest]:
        return [r for r, _ in self.pull_request_queue.items() if self._live(r)]

    def ready_times(self) -> list[int]:
        return [when for r, when in self.pull_request_queue.items() if self._live(r)]

    def run_flow_control_retries(self) -> None:
        """The pull thread's flow-control retries up to now (R5.1 steps 2 and 5), which the driver runs
        at every clock advance: a runnable request whose pq is over a flow-control threshold is taken
        every 50 ms, and each run only sets ``lastPullTimestamp`` and re-queues it 50 ms later. The
        retries of one advance are folded into the last one, at the new time, and the request stays
        runnable (the run that finds room is the next ``run_pull_request``), so flow control alone
        never makes a pq pull-expired (R6.6, R9.4)."""
        now = self.mq_client_factory.clock.now()
        for pull_request, ready_at in self.pull_request_queue.items():
            pq = pull_request.process_queue
            if ready_at > now or pq.dropped:
                continue
            consumer = self.mq_client_factory.consumer_table.get(pull_request.consumer_group)
            if consumer is not None and consumer.is_flow_controlled(pq):
                pq.last_pull_timestamp = now

    def run_pull_request(self, pull_request: PullRequest) -> None:
        """The pull thread takes ``pull_request`` (it must be runnable) and pulls."""
        self.pull_request_queue.take(pull_request, self.mq_client_factory.clock.now())
        consumer = self.mq_client_factory.consumer_table.get(pull_request.consumer_group)
        if consumer is None:
            raise SchedulerError(f"no consumer of group {pull_request.consumer_group}")
        consumer.pull_message(pull_request)


class PullAPIWrapper:
    """``PullAPIWrapper``."""

    def __init__(self, mq_client_factory: MQClientInstance, consumer_group: str) -> None:
        self.mq_client_factory = mq_client_factory
        self.consumer_group = consumer_group

    def pull_kernel_impl(
        self,
        mq: MessageQueue,
        sub_expression: str | None,
        sub_version: int,
        offset: int,
        max_nums: int,
        sys_flag: int,
        commit_offset: int,
        broker_suspend_max_time_millis: int,
        pull_callback: PullCallback,
    ) -> None:
        """R5.3: to the master (``recalculatePullFromWhichNode``: the master, as every slave suggests with
        slaveReadEnable = false), or to any address of the name when the route lacks it (its slave while
        the master is down, slaves); for a slave's address the commit flag is cleared."""
        found = self.mq_client_factory.find_broker_address_in_subscribe(mq.broker_name, MASTER_ID, False)
        if found is None:
            raise MQClientException(f"The broker[{mq.broker_name}] not exist")
        addr = found.broker_addr
        if found.slave:
            sys_flag = PullSysFlag.clear_commit_offset_flag(sys_flag)
        header = PullMessageRequestHeader(
            self.consumer_group,
            mq.topic,
            mq.queue_id,
            offset,
            max_nums,
            sys_flag,
            commit_offset,
            broker_suspend_max_time_millis,
            sub_expression,
            sub_version,
        )
        self.mq_client_factory.mq_client_api_impl.pull_message_async(addr, header, pull_callback)

    def process_pull_result(
        self, mq: MessageQueue, pull_result: PullResult, subscription_data: SubscriptionData
    ) -> PullResult:
        """R5.6: FOUND messages are filtered again by tag (the broker matched hash codes only)."""
        if pull_result.pull_status is PullStatus.FOUND:
            msgs = pull_result.msg_found_list
            if subscription_data.tags_set:
                msgs = [m for m in msgs if m.tags is not None and m.tags in subscription_data.tags_set]
            for msg in msgs:
                msg.put_property(PROPERTY_MIN_OFFSET, str(pull_result.min_offset))
                msg.put_property(PROPERTY_MAX_OFFSET, str(pull_result.max_offset))
            pull_result.msg_found_list = msgs
        return pull_result


class PullCallback:
    """The anonymous ``PullCallback`` of ``pullMessage`` (R5.7), bound to one PullRequest."""

    def __init__(
        self, consumer: DefaultMQPushConsumerImpl, pull_request: PullRequest, subscription_data: SubscriptionData
    ) -> None:
        self.consumer = consumer
        self.pull_request = pull_request
        self.subscription_data = subscription_data

    def on_success(self, pull_result: PullResult) -> None:
        consumer, pull_request = self.consumer, self.pull_request
        pq = pull_request.process_queue
        pull_result = consumer.pull_api_wrapper.process_pull_result(
            pull_request.message_queue, pull_result, self.subscription_data
        )
        status = pull_result.pull_status
        if status is PullStatus.FOUND:  # no dropped check: its requests return at once (R7.2)
            pull_request.next_offset = pull_result.next_begin_offset
            if not pull_result.msg_found_list:
                consumer.execute_pull_request_immediately(pull_request)
                return
            dispatch = pq.put_message(pull_result.msg_found_list)
            consumer.consume_message_service.submit_consume_request(
                pull_result.msg_found_list, pq, pull_request.message_queue, dispatch
            )
            interval = consumer.default_mq_push_consumer.pull_interval
            if interval > 0:
                consumer.execute_pull_request_later(pull_request, interval)
            else:
                consumer.execute_pull_request_immediately(pull_request)
        elif status in (PullStatus.NO_NEW_MSG, PullStatus.NO_MATCHED_MSG):
            pull_request.next_offset = pull_result.next_begin_offset
            consumer.correct_tags_offset(pull_request)
            consumer.execute_pull_request_immediately(pull_request)
        elif status is PullStatus.OFFSET_ILLEGAL:
            log.warning("the pull request offset illegal, %s", pull_request.message_queue)
            live = consumer.rebalance_impl.process_queue_table.get(pull_request.message_queue) is pq and not pq.dropped
            pull_request.next_offset = pull_result.next_begin_offset
            pq.dropped = True
            factory = consumer.mq_client_factory
            if factory.version.offset_illegal_fixed_at_once:  # 5.2.0+: executeTask, then rebalanceImmediately
                consumer.fix_offset_illegal(pull_request)
                factory.rebalance_immediately()
            else:
                factory.execute_task_later(
                    f"{FIX_OFFSET_TASK}{pull_request.message_queue}-{pq.uid}",
                    FixOffsetTask(consumer, pull_request, live),
                    OFFSET_ILLEGAL_FIX_DELAY,
                )

    def on_exception(self, e: Exception) -> None:
        log.warning("execute the pull request exception: %s", e)
        self.consumer.execute_pull_request_later(self.pull_request, PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION)


class FixOffsetTask:
    """The Runnable of the 4.9.8 OFFSET_ILLEGAL branch (R5.7). ``live`` is not RocketMQ's: it records,
    for the abstraction (INV-17), whether the pq was still in the table when the result arrived."""

    def __init__(self, consumer: DefaultMQPushConsumerImpl, pull_request: PullRequest, live: bool) -> None:
        self.consumer = consumer
        self.pull_request = pull_request
        self.live = live

    def __call__(self) -> None:
        self.consumer.fix_offset_illegal(self.pull_request)


class DefaultMQPushConsumerImpl:
    def __init__(
        self,
        default_mq_push_consumer: DefaultMQPushConsumer,
        mq_client_factory: MQClientInstance,
        ids: IdSequence,
        local_offset_store_dir: Path,
    ) -> None:
        self.default_mq_push_consumer = default_mq_push_consumer
        self.mq_client_factory = mq_client_factory
        self.ids = ids
        self.local_offset_store_dir = local_offset_store_dir
        self.rebalance_impl = RebalancePushImpl(
            self,
            default_mq_push_consumer.allocate_message_queue_strategy,
            mq_client_factory,
            ids,
            mq_client_factory.version,
        )
        self.pull_api_wrapper = PullAPIWrapper(mq_client_factory, default_mq_push_consumer.consumer_group)
        self.consume_orderly = default_mq_push_consumer.consume_orderly
        self.consume_message_service: ConsumeMessageConcurrentlyService | ConsumeMessageOrderlyService
        if self.consume_orderly:
            self.consume_message_service = ConsumeMessageOrderlyService(self, ids)
        else:
            self.consume_message_service = ConsumeMessageConcurrentlyService(self, ids)
        # Not RocketMQ's: the last PullRequest that pullMessage discarded, by pq uid, so the abstraction
        # can still show the cursor of a dropped pq that an orderly removal left in the table (R8.8).
        self.discarded_pull_requests: dict[int, PullRequest] = {}
        # Chosen by message model in start() (R1.3); a remote store until then.
        self.offset_store: OffsetStore = RemoteBrokerOffsetStore(
            mq_client_factory, default_mq_push_consumer.consumer_group, mq_client_factory.version
        )
        self.service_state = "CREATE_JUST"
        self.pause = False  # admin reset: set by suspend() (R3.10a step 1)

    def now(self) -> int:
        return self.mq_client_factory.clock.now()

    # --- life cycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        """``DefaultMQPushConsumerImpl#start``."""
        if self.service_state != "CREATE_JUST":
            raise MQClientException(f"The PushConsumer service state not OK, maybe started once, {self.service_state}")
        self.service_state = "START_FAILED"
        config = self.default_mq_push_consumer
        self.copy_subscription()
        self.rebalance_impl.message_model = config.message_model
        if config.message_model == BROADCASTING:  # R1.3
            self.offset_store = LocalFileOffsetStore(
                self.mq_client_factory.client_id, config.consumer_group, self.local_offset_store_dir
            )
        else:
            self.offset_store = RemoteBrokerOffsetStore(
                self.mq_client_factory, config.consumer_group, self.mq_client_factory.version
            )
        self.offset_store.load()  # R1.9 / R2.1; an exception fails the start
        self.consume_message_service.start()  # orderly: lockMQPeriodically (R8.3)
        if not self.mq_client_factory.register_consumer(config.consumer_group, self):
            raise MQClientException(f"The consumer group[{config.consumer_group}] has been created before")
        self.mq_client_factory.start()
        self.service_state = "RUNNING"
        self.update_topic_subscribe_info_when_subscription_changed()
        self.mq_client_factory.send_heartbeat_to_all_broker_with_lock()
        self.mq_client_factory.rebalance_immediately()

    def copy_subscription(self) -> None:
        """The user's subscriptions, plus ``%RETRY%<group>`` with ``*`` in CLUSTERING (R7.8)."""
        config = self.default_mq_push_consumer
        now = self.now()
        for topic, expression in config.subscription.items():
            self.rebalance_impl.subscription_inner[topic] = SubscriptionData.build(topic, expression, now)
        if config.message_model == CLUSTERING:
            topic = retry_topic(config.consumer_group)
            self.rebalance_impl.subscription_inner[topic] = SubscriptionData.build(topic, SUB_ALL, now)

    def update_topic_subscribe_info_when_subscription_changed(self) -> None:
        for topic in self.rebalance_impl.subscription_inner:
            mq_set = self.mq_client_factory.topic_subscribe_info(topic)
            if mq_set is not None:
                self.rebalance_impl.topic_subscribe_info_table[topic] = mq_set

    def shutdown(self) -> None:
        """R4.4: stop consuming (queued requests discarded), persist, unregister, close the
        instance, then drop every pq."""
        if self.service_state != "RUNNING":
            return
        self.consume_message_service.shutdown()  # orderly: then unlockAll(false) in CLUSTERING (R4.4, R8.9)
        self.persist_consumer_offset()
        self.mq_client_factory.unregister_consumer(self.default_mq_push_consumer.consumer_group)
        self.mq_client_factory.shutdown()
        self.rebalance_impl.destroy()
        self.service_state = "SHUTDOWN_ALREADY"

    # --- suspend and resume (admin reset) ------------------------------------------

    def suspend(self) -> None:
        """R3.10a step 1: ``pause = true``; pulls re-queue themselves, ``doRebalance`` does nothing."""
        self.pause = True

    def resume(self) -> None:
        """R3.10a step 5: ``pause = false`` and a rebalance now. Java calls ``doRebalance()`` in this
        thread; here the rebalance service is woken and the driver runs it as the next ``Rebalance``
        step, as the model does (docs/spec.md, section admin_reset: the reset's oneway persist and the rebalance's
        QUERY_CONSUMER_OFFSET reach the broker in either order; running it at once is one of those
        interleavings)."""
        self.pause = False
        self.mq_client_factory.rebalance_immediately()

    def update_consume_offset(self, mq: MessageQueue, offset: int) -> None:
        """``updateConsumeOffset``: ``offsetStore.updateOffset(mq, offset, false)`` (R3.10a step 4)."""
        self.offset_store.update_offset(mq, offset, False)

    # --- offsets ------------------------------------------------------------------------------------

    def persist_consumer_offset(self) -> None:
        """R4.1: ``persistAll(keys(processQueueTable))``; skipped unless RUNNING."""
        if self.service_state != "RUNNING":
            log.warning("persistConsumerOffset: the consumer service state is %s", self.service_state)
            return
        self.offset_store.persist_all(set(self.rebalance_impl.process_queue_table))

    def correct_tags_offset(self, pull_request: PullRequest) -> None:
        """R5.7: with nothing cached, the pull cursor becomes the offset (increase only)."""
        if pull_request.process_queue.msg_count == 0:
            self.offset_store.update_offset(pull_request.message_queue, pull_request.next_offset, True)

    def fix_offset_illegal(self, pull_request: PullRequest) -> None:
        """R5.7 OFFSET_ILLEGAL, 10 s later (4.9.8) or at once (5.2.0+): overwrite, persist, remove the
        pq the table holds for the queue now, whichever it is. 5.2.0's ``updateAndFreezeOffset`` is a
        plain overwrite here: the freeze lasts until the ``removeOffset`` below, inside this task."""
        mq = pull_request.message_queue
        self.offset_store.update_offset(mq, pull_request.next_offset, False)
        self.offset_store.persist(mq)
        pq = self.rebalance_impl.process_queue_table.pop(mq, None)
        if pq is not None:
            pq.dropped = True
            self.rebalance_impl.balanced_cid_all = None  # (abstraction: the table misses an allocated queue)
            self.rebalance_impl.remove_unnecessary_message_queue(mq, pq)

    # --- pull ---------------------------------------------------------------------------------------

    def execute_pull_request_immediately(self, pull_request: PullRequest) -> None:
        self.mq_client_factory.pull_message_service.execute_pull_request_immediately(pull_request)

    def execute_pull_request_later(self, pull_request: PullRequest, time_delay: int) -> None:
        self.mq_client_factory.pull_message_service.execute_pull_request_later(pull_request, time_delay)

    def pull_message(self, pull_request: PullRequest) -> None:
        """R5.1 (concurrent consumer) and R5.2."""
        pq = pull_request.process_queue
        if pq.dropped:
            self.discarded_pull_requests[pq.uid] = pull_request  # (for the abstraction only)
            return
        pq.last_pull_timestamp = self.now()
        if self.service_state != "RUNNING":
            self.execute_pull_request_later(pull_request, PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION)
            return
        if self.pause:  # admin reset: R3.10a step 1, PULL_TIME_DELAY_MILLS_WHEN_SUSPEND
            self.execute_pull_request_later(pull_request, PULL_TIME_DELAY_MILLS_WHEN_SUSPEND)
            return
        config = self.default_mq_push_consumer
        if self.is_flow_controlled(pq):
            self.execute_pull_request_later(pull_request, PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL)
            return
        if self.consume_orderly and not self._orderly_pull_ready(pull_request):  # orderly: R5.1 step 6
            return
        subscription_data = self.rebalance_impl.subscription_inner.get(pull_request.message_queue.topic)
        if subscription_data is None:
            self.execute_pull_request_later(pull_request, PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION)
            return
        commit_offset_enable = False
        commit_offset_value = 0
        if config.message_model == CLUSTERING:
            commit_offset_value = self.offset_store.read_offset(
                pull_request.message_queue, ReadOffsetType.READ_FROM_MEMORY
            )
            commit_offset_enable = commit_offset_value > 0  # strictly > 0 (R5.2)
        sub_expression = subscription_data.sub_string if config.post_subscription_when_pull else None
        sys_flag = PullSysFlag.build_sys_flag(commit_offset_enable, True, sub_expression is not None, False)
        try:
            self.pull_api_wrapper.pull_kernel_impl(
                pull_request.message_queue,
                sub_expression,
                subscription_data.sub_version,
                pull_request.next_offset,
                config.pull_batch_size,
                sys_flag,
                commit_offset_value,
                BROKER_SUSPEND_MAX_TIME_MILLIS,
                PullCallback(self, pull_request, subscription_data),
            )
        except (RemotingException, MQClientException) as e:
            log.error("pullKernelImpl exception: %s", e)
            self.execute_pull_request_later(pull_request, PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION)

    def is_flow_controlled(self, pq: ProcessQueue) -> bool:
        """R5.1 step 5: the cached count or size of ``pq`` is over its threshold, or (concurrently
        only) its span; ``pullMessage`` then only re-queues the request 50 ms later."""
        config = self.default_mq_push_consumer
        return (
            pq.msg_count > config.pull_threshold_for_queue
            or pq.msg_size // (1024 * 1024) > config.pull_threshold_size_for_queue
            or (not self.consume_orderly and pq.get_max_span() > config.consume_concurrently_max_span)
        )

    def _orderly_pull_ready(self, pull_request: PullRequest) -> bool:
        """R5.1 step 6: an unlocked pq retries in 1 s; the first pull of a locked one re-reads the
        offset (``computePullFromWhereWithException``) and marks the request ``previouslyLocked``.
        An exception retries in 1 s. 4.9.8 checks nothing else: a failed read that it maps to -1
        (R10.1) becomes the next offset, and the pull at -1 meets OFFSET_ILLEGAL; 5.x throws on it."""
        pq = pull_request.process_queue
        if not pq.locked:
            self.execute_pull_request_later(pull_request, PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION)
            return False
        if pull_request.previously_locked:
            return True
        try:
            offset = self.rebalance_impl.compute_pull_from_where_with_exception(pull_request.message_queue)
        except (MQClientException, RemotingException) as e:
            log.error("Failed to compute pull offset, pullRequest: %s: %s", pull_request.message_queue, e)
            self.execute_pull_request_later(pull_request, PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION)
            return False
        pull_request.previously_locked = True
        pull_request.next_offset = offset
        return True

    # --- rebalance and heartbeat --------------------------------------------------------------------

    def do_rebalance(self) -> bool:
        """Only when not paused (R3.10a step 1); 5.x's ``tryRebalance`` counts a paused consumer as unbalanced."""
        if not self.pause:
            return self.rebalance_impl.do_rebalance(self.consume_orderly)
        return False

    def consumer_data(self) -> ConsumerData:
        config = self.default_mq_push_consumer
        return ConsumerData(
            config.consumer_group,
            config.message_model,
            config.consume_from_where,
            list(self.rebalance_impl.subscription_inner.values()),
        )

    # --- consume support ----------------------------------------------------------------------------

    def get_max_reconsume_times(self) -> int:
        """-1 means 16 for a concurrent consumer (R7.4)."""
        times = self.default_mq_push_consumer.max_reconsume_times
        return 16 if times == -1 else times

    def reset_retry_and_namespace(self, msgs: list[MessageExt], consumer_group: str) -> None:
        """R7.8: a retry message gets its original topic back before the listener sees it."""
        group_retry_topic = retry_topic(consumer_group)
        for msg in msgs:
            original = msg.get_property(PROPERTY_RETRY_TOPIC)
            if original is not None and msg.topic == group_retry_topic:
                msg.topic = original

    def send_message_back(self, msg: MessageExt, delay_level: int, broker_name: str | None) -> None:
        """R7.4: CONSUMER_SEND_MSG_BACK to the master; on failure, the producer sends a copy to
        ``%RETRY%<group>`` at delay level ``3 + reconsumeTimes``. Raises if both fail. Without a broker
        name (``DefaultMQPushConsumer#sendMessageBack(msg, delayLevel)``, cleanExpiredMsg's call, R6.8) the
        request goes to the message's store host, and the fall-back to the master of the retry topic's
        route (the producer's own lookup)."""
        factory = self.mq_client_factory
        group = self.default_mq_push_consumer.consumer_group
        if broker_name is None:
            route = factory.topic_route_table.get(retry_topic(group))
            publish_name = None if route is None else route.broker_name
        else:
            publish_name = broker_name
        try:
            addr = factory.find_broker_address_in_publish(broker_name) if broker_name is not None else msg.store_host
            if not addr:
                raise MQClientException(f"The broker[{broker_name}] not exist")
            factory.mq_client_api_impl.consumer_send_message_back(
                addr, msg, group, delay_level, self.get_max_reconsume_times()
            )
        except Exception as e:
            log.error("sendMessageBack Exception, %s: %s", group, e)
            properties = dict(msg.properties)
            origin = msg.get_property(PROPERTY_ORIGIN_MESSAGE_ID)
            properties[PROPERTY_ORIGIN_MESSAGE_ID] = origin if origin else msg.msg_id
            properties[PROPERTY_RETRY_TOPIC] = msg.topic
            properties[PROPERTY_MAX_RECONSUME_TIMES] = str(self.get_max_reconsume_times())
            properties[PROPERTY_DELAY_TIME_LEVEL] = str(3 + msg.reconsume_times)
            header = SendMessageRequestHeader(
                "CLIENT_INNER_PRODUCER",
                retry_topic(group),
                0,
                properties,
                msg.born_timestamp,
                msg.reconsume_times + 1,
                self.get_max_reconsume_times(),
            )
            addr = (None if publish_name is None else factory.find_broker_address_in_publish(publish_name)) or ""
            factory.mq_client_api_impl.send_message(addr, header, msg.body)
