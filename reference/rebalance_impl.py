"""``RebalanceImpl`` / ``RebalancePushImpl`` and ``RebalanceService``: which queues this consumer owns.

Mirrors RocketMQ 4.9.8 (§9, §10):

- ``do_rebalance`` runs ``rebalance_by_topic`` for every subscribed topic, in CLUSTERING including
  ``%RETRY%<group>`` (R9.1). BROADCASTING takes every readable queue (R9.2); CLUSTERING asks the broker
  for the consumer list, sorts both lists and allocates with the strategy; a missing list or a
  throwing strategy leaves the topic alone (R9.3, R11.0, R11.7).
- ``update_process_queue_table_in_rebalance`` (R9.4): Phase A drops the pqs no longer allocated
  (``remove_unnecessary_message_queue``: persist then removeOffset, R9.5; an orderly CLUSTERING consumer
  also needs the pq's consume lock and unlocks the broker lock, else the dropped pq stays in the table
  until a later rebalance removes it, R8.8, both versions); Phase B creates a pq per new
  queue after ``removeDirtyOffset`` and ``computePullFromWhereWithException`` (R10.1), skipping a
  queue whose start is unknown, and dispatches its first pull at once.
- ``RebalancePushImpl.message_queue_changed`` bumps subVersion and heartbeats (R9.6).
- ``RebalanceService`` waits 20 s or until ``wakeup`` (R4.2, R9.7).

Java walks hash maps and sets; here queues are walked in ``MessageQueue`` order and topics in
subscription order (the user's topic, then the retry topic), so runs are reproducible.

``balanced_cid_all`` is not in 4.9.8 (5.2.0 has a ``balanced`` flag): the sorted consumer list of the
last rebalance in which every topic was allocated over that same list (each topic asks the broker
afresh, and a heartbeat sent for an earlier topic's change can add this consumer in between) and
every allocated queue got a pq, else None.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

from rmqspec.reference.allocate import AllocateMessageQueueStrategy
from rmqspec.reference.exceptions import MQClientException
from rmqspec.reference.message_queue import RETRY_GROUP_TOPIC_PREFIX, MessageQueue
from rmqspec.reference.mq_client_instance import MASTER_ID, UNLOCK_DELAY_TASK
from rmqspec.reference.mq_version import MQVersion
from rmqspec.reference.offset_store import ReadOffsetType
from rmqspec.reference.process_queue import ProcessQueue
from rmqspec.reference.protocol import (
    LockBatchRequestBody,
    ResponseCode,
    SubscriptionData,
    UnlockBatchRequestBody,
)
from rmqspec.reference.scheduler import IdSequence, SchedulerError

if TYPE_CHECKING:
    from rmqspec.reference.default_mq_push_consumer_impl import DefaultMQPushConsumerImpl, PullRequest
    from rmqspec.reference.mq_client_instance import MQClientInstance

log = logging.getLogger(__name__)

REBALANCE_WAIT_INTERVAL: Final = 20_000  # rocketmq.client.rebalance.waitInterval (R4.2)
REBALANCE_MIN_INTERVAL: Final = 1_000  # 5.x rocketmq.client.rebalance.minInterval (R4.2)
NEW_PULL_DISPATCH_DELAY: Final = 500  # 5.x updateProcessQueueTableInRebalance: dispatchPullRequest(list, 500)
UNLOCK_DELAY_TIME_MILLS: Final = 20_000  # rocketmq.client.unlockDelayTimeMills (R8.8)

CONSUME_FROM_LAST_OFFSET: Final = "CONSUME_FROM_LAST_OFFSET"
CONSUME_FROM_FIRST_OFFSET: Final = "CONSUME_FROM_FIRST_OFFSET"
CONSUME_FROM_TIMESTAMP: Final = "CONSUME_FROM_TIMESTAMP"
CONSUME_FROM_LAST_LIKE: Final = (
    CONSUME_FROM_LAST_OFFSET,
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET",
)


class RebalanceImpl:
    """The shared part of ``RebalanceImpl`` (push flavour only is used here)."""

    def __init__(
        self,
        consumer_group: str,
        message_model: str,
        strategy: AllocateMessageQueueStrategy,
        mq_client_factory: MQClientInstance,
        ids: IdSequence,
        version: MQVersion | None = None,
    ) -> None:
        self.version = version if version is not None else MQVersion()
        self.consumer_group = consumer_group
        self.message_model = message_model
        self.allocate_message_queue_strategy = strategy
        self.mq_client_factory = mq_client_factory
        self.ids = ids
        self.process_queue_table: dict[MessageQueue, ProcessQueue] = {}
        self.topic_subscribe_info_table: dict[str, set[MessageQueue]] = {}
        self.subscription_inner: dict[str, SubscriptionData] = {}
        self.balanced_cid_all: list[str] | None = None
        self.balanced = True  # 5.x rebalanceByTopic's result, all topics of the last doRebalance

    # hooks of the subclasses
    def remove_unnecessary_message_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        raise NotImplementedError

    def remove_dirty_offset(self, mq: MessageQueue) -> None:
        raise NotImplementedError

    def compute_pull_from_where_with_exception(self, mq: MessageQueue) -> int:
        raise NotImplementedError

    def dispatch_pull_request(self, pull_requests: list[PullRequest]) -> None:
        raise NotImplementedError

    def message_queue_changed(self, topic: str, mq_all: set[MessageQueue], mq_divided: set[MessageQueue]) -> None:
        raise NotImplementedError

    def consume_passively(self) -> bool:
        raise NotImplementedError

    def new_pull_request(self, mq: MessageQueue, pq: ProcessQueue, next_offset: int) -> PullRequest:
        raise NotImplementedError

    def now(self) -> int:
        return self.mq_client_factory.clock.now()

    # --- R9.1 ---------------------------------------------------------------------------------------

    def do_rebalance(self, is_order: bool) -> bool:
        """R9.1. Returns 5.x's ``balanced``: every topic's allocation equals its working queues (5.2.0)."""
        outcomes: list[tuple[list[str], bool] | None] = []
        self.balanced = True
        for topic in list(self.subscription_inner):
            try:
                outcomes.append(self.rebalance_by_topic(topic, is_order))
            except Exception as e:  # caught per topic (R9.1)
                if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                    log.warning("rebalanceByTopic exception %s", e)
                    self.balanced = False
                outcomes.append(None)
        self.truncate_message_queue_not_my_topic()
        self._record_balance(outcomes)
        return self.balanced

    def _record_balance(self, outcomes: list[tuple[list[str], bool] | None]) -> None:
        if self.message_model != "CLUSTERING" or all(o is None for o in outcomes):
            return
        lists = {tuple(o[0]) for o in outcomes if o is not None}
        if any(o is None or not o[1] for o in outcomes) or len(lists) != 1:
            self.balanced_cid_all = None
            return
        self.balanced_cid_all = list(lists.pop())

    def rebalance_by_topic(self, topic: str, is_order: bool) -> tuple[list[str], bool] | None:
        """R9.2/R9.3. Returns (sorted cidAll, every allocated queue has a pq) or None when the topic was
        left alone (CLUSTERING only; BROADCASTING has no consumer list)."""
        mq_set = self.topic_subscribe_info_table.get(topic)
        if self.message_model == "BROADCASTING":
            if mq_set is None:
                log.warning("doRebalance, %s, but the topic[%s] not exist.", self.consumer_group, topic)
                return None
            # orderly (R8.9): 4.9.8 passes isOrder through, so broadcast queues are locked too; 5.3.2 does not
            broadcast_order = is_order and self.version.orderly_locks_in_broadcasting
            if self.update_process_queue_table_in_rebalance(topic, mq_set, broadcast_order):
                self.message_queue_changed(topic, mq_set, mq_set)
            self.balanced = self.balanced and mq_set == self._working_message_queue(topic)
            return None
        cid_all = self.mq_client_factory.find_consumer_id_list(topic, self.consumer_group)
        if mq_set is None or cid_all is None:
            log.warning("doRebalance, %s %s, get consumer id list failed", self.consumer_group, topic)
            return None
        mq_all = sorted(mq_set)
        cid_all = sorted(cid_all)
        try:
            allocate_result = self.allocate_message_queue_strategy.allocate(
                self.consumer_group, self.mq_client_factory.client_id, mq_all, cid_all
            )
        except Exception as e:
            log.error("AllocateMessageQueueStrategy.allocate Exception. %s", e)
            self.balanced = False  # 5.x returns false
            return None
        allocated = set(allocate_result or [])
        if self.update_process_queue_table_in_rebalance(topic, allocated, is_order):
            self.message_queue_changed(topic, mq_set, allocated)
        table = self.process_queue_table
        self.balanced = self.balanced and allocated == self._working_message_queue(topic)
        # a pq an orderly removal could not take out is dropped, not working (5.x getWorkingMessageQueue, R8.8)
        return cid_all, all(mq in table and not (table[mq].dropped and table[mq].try_unlock_times) for mq in allocated)

    def _working_message_queue(self, topic: str) -> set[MessageQueue]:
        """5.x ``getWorkingMessageQueue``: the topic's queues whose pq is in the table and not dropped."""
        return {mq for mq, pq in self.process_queue_table.items() if mq.topic == topic and not pq.dropped}

    def truncate_message_queue_not_my_topic(self) -> None:
        """R9.1 step 2: pqs of unsubscribed topics go, without persist or removeOffset."""
        for mq in [mq for mq in self.process_queue_table if mq.topic not in self.subscription_inner]:
            self.process_queue_table.pop(mq).dropped = True

    def update_process_queue_table_in_rebalance(self, topic: str, mq_set: set[MessageQueue], is_order: bool) -> bool:
        """R9.4 (concurrent push consumer)."""
        changed = False
        for mq in sorted(mq for mq in self.process_queue_table if mq.topic == topic):  # Phase A
            pq = self.process_queue_table[mq]
            # Not allocated any more; or (push only) not pulled for 120 s, so it is re-created below.
            expired = pq.is_pull_expired(self.now()) and self.consume_passively()
            if mq not in mq_set or expired:
                pq.dropped = True
                if self.remove_unnecessary_message_queue(mq, pq):
                    del self.process_queue_table[mq]
                    changed = True
        pull_requests: list[PullRequest] = []
        for mq in sorted(mq_set):  # Phase B
            if mq in self.process_queue_table:
                continue
            if is_order and not self.lock(mq):  # orderly (R8.4): the lock first, else skip this round
                log.warning("doRebalance, %s, add a new mq failed, %s, because lock failed", self.consumer_group, mq)
                continue
            self.remove_dirty_offset(mq)
            # 4.9.8 calls computePullFromWhereWithException and skips the queue on an exception; 5.x
            # calls computePullFromWhere, which catches MQClientException and returns -1, skipped
            # below (R9.4). Both skip the same queues, so the one call serves both versions.
            try:
                next_offset = self.compute_pull_from_where_with_exception(mq)
            except MQClientException as e:
                log.info("doRebalance, %s, compute offset failed, %s: %s", self.consumer_group, mq, e)
                continue
            if next_offset < 0:
                log.warning("doRebalance, %s, add new mq failed, %s", self.consumer_group, mq)
                continue
            # Java builds the ProcessQueue before computing the offset; building it after keeps its
            # identity for queues that are actually added (no behavioural difference).
            pq = ProcessQueue(self.ids.next_id(), self.now())
            pq.locked = True
            self.process_queue_table[mq] = pq
            pull_requests.append(self.new_pull_request(mq, pq, next_offset))
            changed = True
        self.dispatch_pull_request(pull_requests)
        return changed

    # --- orderly: broker locks (R8.2) ------------------------------------------------------------------

    def _master_addr(self, broker_name: str) -> str | None:
        """Locks go to the master only: ``findBrokerAddressInSubscribe(brokerName, MASTER_ID, true)``."""
        found = self.mq_client_factory.find_broker_address_in_subscribe(broker_name, MASTER_ID, True)
        return None if found is None else found.broker_addr

    def _lock_request(self, mqs: set[MessageQueue]) -> LockBatchRequestBody:
        return LockBatchRequestBody(self.consumer_group, self.mq_client_factory.client_id, set(mqs))

    def lock(self, mq: MessageQueue) -> bool:
        """``lock(mq)``: LOCK_BATCH_MQ for {mq}, synchronous; granted queues with a pq get locked and
        a fresh lastLockTimestamp. Any exception means False."""
        addr = self._master_addr(mq.broker_name)
        if addr is None:
            return False
        try:
            locked = self.mq_client_factory.mq_client_api_impl.lock_batch_mq(addr, self._lock_request({mq}))
        except Exception as e:
            log.error("lockBatchMQ exception, %s: %s", mq, e)
            return False
        for mmqq in locked:
            pq = self.process_queue_table.get(mmqq)
            if pq is not None:
                pq.locked = True
                pq.last_lock_timestamp = self.now()
        return mq in locked

    def lock_all(self) -> None:
        """``lockAll``: one LOCK_BATCH_MQ per broker for every queue in the table (5.x: every pq not
        dropped); granted ones are locked with a fresh lastLockTimestamp, the others unlocked. An exception
        changes nothing."""
        mqs = self._lock_batch()
        if not mqs:
            return
        broker_name = next(iter(mqs)).broker_name  # the model's one broker
        addr = self._master_addr(broker_name)
        if addr is None:
            return
        try:
            lock_ok = self.mq_client_factory.mq_client_api_impl.lock_batch_mq(addr, self._lock_request(mqs))
        except Exception as e:
            log.error("lockBatchMQ exception, %s: %s", sorted(mqs), e)
            return
        for mq in lock_ok:
            pq = self.process_queue_table.get(mq)
            if pq is not None:
                pq.locked = True
                pq.last_lock_timestamp = self.now()
        for mq in mqs - lock_ok:
            pq = self.process_queue_table.get(mq)
            if pq is not None:
                pq.locked = False

    def _lock_batch(self) -> set[MessageQueue]:
        """``buildProcessQueueTableByBrokerName`` (one broker here): the table's queues; 5.x skips dropped
        pqs (``MQVersion.lock_all_skips_dropped``)."""
        skip = self.version.lock_all_skips_dropped
        return {mq for mq, pq in self.process_queue_table.items() if not (skip and pq.dropped)}

    def unlock(self, mq: MessageQueue, oneway: bool) -> None:
        """``unlock(mq, oneway)``: UNLOCK_BATCH_MQ for {mq}; ``pq.locked`` is not touched. An exception is
        logged (R8.8)."""
        addr = self._master_addr(mq.broker_name)
        if addr is None:
            return
        body = UnlockBatchRequestBody(self.consumer_group, self.mq_client_factory.client_id, {mq})
        try:
            self.mq_client_factory.mq_client_api_impl.unlock_batch_mq(addr, body, oneway)
        except Exception as e:
            log.error("unlockBatchMQ exception, %s: %s", mq, e)

    def unlock_all(self, oneway: bool) -> None:
        """``unlockAll``: UNLOCK_BATCH_MQ for every queue in the table (5.x: every pq not dropped), then
        ``locked := false`` on each of them. An exception is logged and leaves the pqs as they are."""
        mqs = self._lock_batch()
        if not mqs:
            return
        addr = self._master_addr(next(iter(mqs)).broker_name)
        if addr is None:
            return
        body = UnlockBatchRequestBody(self.consumer_group, self.mq_client_factory.client_id, mqs)
        try:
            self.mq_client_factory.mq_client_api_impl.unlock_batch_mq(addr, body, oneway)
        except Exception as e:
            log.error("unlockBatchMQ exception, %s: %s", sorted(mqs), e)
            return
        for mq in mqs:
            pq = self.process_queue_table.get(mq)
            if pq is not None:
                pq.locked = False

    def destroy(self) -> None:
        """R4.4 step 5: every pq is dropped and the table cleared."""
        for pq in self.process_queue_table.values():
            pq.dropped = True
        self.process_queue_table.clear()


class UnlockDelayTask:
    """The Runnable of 4.9.8's ``unlockDelay`` (R8.8): ``unlock(mq, true)``."""

    def __init__(self, rebalance_impl: RebalanceImpl, mq: MessageQueue) -> None:
        self.rebalance_impl = rebalance_impl
        self.message_queue = mq

    def __call__(self) -> None:
        log.info("unlockDelay, execute at once %s", self.message_queue)
        self.rebalance_impl.unlock(self.message_queue, True)


class RebalancePushImpl(RebalanceImpl):
    """``RebalancePushImpl`` for a concurrent or orderly push consumer."""

    def __init__(
        self,
        consumer_impl: DefaultMQPushConsumerImpl,
        strategy: AllocateMessageQueueStrategy,
        mq_client_factory: MQClientInstance,
        ids: IdSequence,
        version: MQVersion | None = None,
    ) -> None:
        config = consumer_impl.default_mq_push_consumer
        super().__init__(config.consumer_group, config.message_model, strategy, mq_client_factory, ids, version)
        self.consumer_impl = consumer_impl
        self._unlock_delay_seq = 0  # names the unlockDelay tasks; not an object identity of the model

    def consume_passively(self) -> bool:
        return True

    def remove_unnecessary_message_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        """R9.5: persist oneway, then forget the memory entry; True: the pq leaves the table. An orderly
        CLUSTERING consumer (R8.8) returns False, leaving the dropped pq in the table, while its listener
        holds the consume lock: 4.9.8 (:meth:`_remove_orderly_4_9_8`) or 5.x
        (:meth:`try_remove_order_message_queue`), by ``MQVersion.orderly_removal_waits_for_consume_lock``."""
        store = self.consumer_impl.offset_store
        orderly = self.consumer_impl.consume_orderly and self.message_model == "CLUSTERING"
        if orderly and not self.version.orderly_removal_waits_for_consume_lock:
            store.persist(mq)  # commit offset immediately
            return self.try_remove_order_message_queue(mq, pq)
        store.persist(mq)
        store.remove_offset(mq)
        if orderly:
            return self._remove_orderly_4_9_8(mq, pq)
        return True

    def _remove_orderly_4_9_8(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        """4.9.8's orderly branch (R8.8): ``consumeLock.tryLock(1000)``, then ``unlockDelay``; without the
        lock ``incTryUnlockTimes`` and False."""
        if pq.consume_lock.try_lock():
            try:
                return self.unlock_delay(mq, pq)
            finally:
                pq.consume_lock.unlock()
        log.warning("[WRONG]mq is consuming, so can not unlock it, %s. maybe hanged, %s", mq, pq.try_unlock_times)
        pq.try_unlock_times += 1
        return False

    def unlock_delay(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        """4.9.8 ``unlockDelay`` (R8.8): with messages in the tree, ``unlock(mq, true)`` runs 20 s later
        on the client instance's scheduler; otherwise at once. True."""
        if pq.has_temp_message():
            factory = self.mq_client_factory
            self._unlock_delay_seq += 1
            factory.scheduled_executor_service.schedule(
                f"{UNLOCK_DELAY_TASK}{self._unlock_delay_seq}", UnlockDelayTask(self, mq), UNLOCK_DELAY_TIME_MILLS
            )
        else:
            self.unlock(mq, True)
        return True

    def try_remove_order_message_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        """5.x ``tryRemoveOrderMessageQueue`` (R8.8): forced once the dropped pq's lastLockTimestamp is
        more than 20 s old, else ``consumeLock.writeLock().tryLock(500)``; then persist again,
        removeOffset, ``locked := false`` and ``unlock(mq, true)``: True. Otherwise
        ``incTryUnlockTimes`` and False."""
        force_unlock = pq.dropped and self.now() > pq.last_lock_timestamp + UNLOCK_DELAY_TIME_MILLS
        if force_unlock or pq.consume_lock.try_lock():
            try:
                store = self.consumer_impl.offset_store
                store.persist(mq)
                store.remove_offset(mq)
                pq.locked = False
                self.unlock(mq, True)
                return True
            finally:
                if not force_unlock:
                    pq.consume_lock.unlock()
        pq.try_unlock_times += 1
        return False

    def remove_dirty_offset(self, mq: MessageQueue) -> None:
        self.consumer_impl.offset_store.remove_offset(mq)

    def compute_pull_from_where_with_exception(self, mq: MessageQueue) -> int:
        """R10.1: the stored offset if there is one, else by consumeFromWhere. When the store could not
        be read (-2), 4.9.8 returns -1; 5.x throws ``MQClientException`` (code QUERY_NOT_FOUND), as it
        does for any negative result (SYSTEM_ERROR), the version switch ``read_error_throws``.
        ``MQClientException`` from maxOffset/searchOffset propagates in both."""
        config = self.consumer_impl.default_mq_push_consumer
        cfw = config.consume_from_where
        last_offset = self.consumer_impl.offset_store.read_offset(mq, ReadOffsetType.READ_FROM_STORE)
        is_retry = mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
        admin = self.mq_client_factory.mq_admin_impl
        result = -1
        if last_offset >= 0:
            result = last_offset
        elif last_offset != -1:
            result = -1
        elif cfw in CONSUME_FROM_LAST_LIKE:
            result = 0 if is_retry else admin.max_offset(mq)
        elif cfw == CONSUME_FROM_FIRST_OFFSET:
            result = 0
        elif cfw == CONSUME_FROM_TIMESTAMP:
            result = admin.max_offset(mq) if is_retry else admin.search_offset(mq, config.consume_timestamp)
        if result < 0 and self.version.read_error_throws:
            if last_offset < -1:
                raise MQClientException(
                    "Failed to query consume offset from offset store", ResponseCode.QUERY_NOT_FOUND
                )
            raise MQClientException(f"Found unexpected result {result}", ResponseCode.SYSTEM_ERROR)
        return result

    def dispatch_pull_request(self, pull_requests: list[PullRequest]) -> None:
        """4.9.8 pulls at once; 5.x calls ``dispatchPullRequest(pullRequestList, 500)``: 500 ms later (R9.4)."""
        for pull_request in pull_requests:
            if self.version.rebalance_paced:
                self.consumer_impl.execute_pull_request_later(pull_request, NEW_PULL_DISPATCH_DELAY)
            else:
                self.consumer_impl.execute_pull_request_immediately(pull_request)

    def new_pull_request(self, mq: MessageQueue, pq: ProcessQueue, next_offset: int) -> PullRequest:
        from rmqspec.reference.default_mq_push_consumer_impl import PullRequest

        return PullRequest(self.consumer_group, mq, pq, next_offset)

    def message_queue_changed(self, topic: str, mq_all: set[MessageQueue], mq_divided: set[MessageQueue]) -> None:
        """R9.6: a new subVersion, then a heartbeat so the broker learns it (thresholds per topic are
        off by default)."""
        subscription_data = self.subscription_inner.get(topic)
        if subscription_data is not None:
            subscription_data.sub_version = self.now()
        self.mq_client_factory.send_heartbeat_to_all_broker_with_lock()


class RebalanceService:
    """``RebalanceService``: a ``ServiceThread`` that waits ``waitInterval`` or until woken (R4.2)."""

    def __init__(self, mq_client_factory: MQClientInstance) -> None:
        self.mq_client_factory = mq_client_factory
        self.has_notified = False  # ServiceThread#hasNotified
        self.wait_deadline = 0
        self.stopped = True
        self.dead = False  # faults (TaskDies): an Error ended the thread; nothing runs it again
        self.last_rebalance_timestamp = 0  # 5.x lastRebalanceTimestamp (R4.2)

    def start(self) -> None:
        self.stopped = False
        now = self.mq_client_factory.clock.now()
        self.wait_deadline = now + REBALANCE_WAIT_INTERVAL
        self.last_rebalance_timestamp = now  # 5.x: set at construction, here the same instant

    def wakeup(self) -> None:
        if not self.stopped:
            self.has_notified = True

    def _paced(self) -> bool:
        return self.mq_client_factory.version.rebalance_paced

    def is_due(self) -> bool:
        if self.dead:
            return False
        now = self.mq_client_factory.clock.now()
        if self._paced() and now - self.last_rebalance_timestamp < REBALANCE_MIN_INTERVAL:
            return False  # 5.x: waitForRunning(minInterval - interval) first
        return not self.stopped and (self.has_notified or self.wait_deadline <= now)

    def due_time(self) -> int:
        """When ``run`` calls ``doRebalance`` next if nothing else wakes it: the wait's end, or (woken) now; 5.x
        no earlier than minInterval after the last rebalance."""
        now = self.mq_client_factory.clock.now()
        due = now if self.has_notified else self.wait_deadline
        if self._paced():
            due = max(due, self.last_rebalance_timestamp + REBALANCE_MIN_INTERVAL)
        return due

    def run_once(self) -> None:
        """``waitForRunning`` returns (woken or timed out), then ``doRebalance``; the next wait starts: 20 s,
        or 5.x's minInterval (1 s) when the result was not balanced (R4.2)."""
        if not self.is_due():
            raise SchedulerError("the rebalance service is neither woken nor past its wait")
        self.has_notified = False
        now = self.mq_client_factory.clock.now()
        self.wait_deadline = now + REBALANCE_WAIT_INTERVAL
        balanced = self.mq_client_factory.do_rebalance()
        if self._paced():
            self.last_rebalance_timestamp = now
            if not balanced:
                self.wait_deadline = now + REBALANCE_MIN_INTERVAL

    def shutdown(self) -> None:
        self.stopped = True
        self.has_notified = False
