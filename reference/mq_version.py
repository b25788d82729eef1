"""``MQVersion``: which RocketMQ release line the reference behaves as, and what that changes.

The reference implements RocketMQ 4.9.8; ``MQVersion("5.x")`` switches the few behaviours of the
offset path that 5.x changed (docs/spec.md, "What the version switch changes") to the latest 5.x (5.3.3 /
develop). Each switch is one derived property, read at exactly one place:

- ``broker_error_reads_as_no_offset``, read in ``RemoteBrokerOffsetStore.read_offset`` (R2.3):
  4.9.8 reads any broker error code as -1; 5.x (5.0.0) only QUERY_NOT_FOUND, other codes are -2.
- ``read_error_throws``, read in ``RebalancePushImpl.compute_pull_from_where_with_exception``
  (R10.1): 4.9.8 returns -1 for a failed read (-2); 5.x (5.0.0) throws. 5.x's rebalance calls the
  catching ``computePullFromWhere``, so the queue is skipped as in 4.9.8 (R9.4).
- ``young_queue_needs_head_in_memory``, read in ``ConsumerManageProcessor.query_consumer_offset``
  (R3.5): 4.9.8 tests ``!checkInDiskByConsumeOffset(0)``, so an empty queue answers 0; 5.x (5.1.0)
  tests ``checkInMemByConsumeOffset(0, 1)``, so it answers QUERY_NOT_FOUND; a 5.x broker also
  answers NOT_FOUND to a request with setZeroIfNotFound=false (5.0.0), which no 5.1.0+ client sends.
- ``server_side_reset`` (admin reset), read by the broker's reset, commit and pull processors
  (R3.10a/R3.10b): 4.9.8 pushes the reset to the clients; 5.x keeps a pending reset.
- ``orderly_locks_in_broadcasting`` (orderly), read in ``RebalanceImpl.rebalance_by_topic`` (R8.9):
  4.9.8 locks each queue an orderly BROADCASTING consumer adds; 5.x (5.3.2) takes no locks there.
- ``orderly_removal_waits_for_consume_lock`` (orderly consume loop), read in
  ``RebalancePushImpl.remove_unnecessary_message_queue`` (R8.8): 4.9.8 persists, removes the offset and
  needs the consume lock to unlock (20 s later when messages are cached); 5.x (5.2.0) persists, then
  needs the write lock or a lock 20 s old, and unlocks at once.
- ``slave_rejects_pulls`` (slaves), read in ``PullMessageProcessor.reject_request`` (R5.4): a 4.9.8
  slave serves pulls; a 5.x slave with slaveReadEnable = false rejects them (SYSTEM_BUSY).
- ``slave_sync_times`` (slaves), read in ``BrokerController.start`` (R3.8): the slave's offset sync runs
  at 3 s and every 10 s in 4.9.8, at 61 s and every 63 s in 5.x.
- ``orderly_forward_counts_the_send`` (orderly consume loop), read in
  ``ConsumeMessageOrderlyService.send_message_back`` (R8.7): the forwarded message's RECONSUME_TIME is
  reconsumeTimes in 4.9.8, reconsumeTimes + 1 in 5.x (5.1.1).
- ``send_back_skips_cleaned``, read in ``ConsumeMessageConcurrentlyService.process_consume_result`` (R7.3,
  R6.8): 4.9.8 sends a failed message back even when cleanExpiredMsg already sent it back and removed it;
  5.x (5.1.0) skips a message no longer in its pq (``containsMessage``).

The model (``rmqspec.spec.config.Config``) states the same switches independently; the lockstep
refinement check runs both versions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

V4_9_8: Final = "4.9.8"
V5_X: Final = "5.x"
VERSIONS: Final = (V4_9_8, V5_X)


@dataclass(frozen=True)
class MQVersion:
    name: str = V4_9_8

    def __post_init__(self) -> None:
        if self.name not in VERSIONS:
            raise ValueError(f"RocketMQ version {self.name!r}: the reference implements {', '.join(VERSIONS)}")

    @property
    def broker_error_reads_as_no_offset(self) -> bool:
        """R2.3: 4.9.8 catches every ``MQBrokerException`` as "no offset"; 5.0.0 (commit b6ff649291)
        only ``OffsetNotFoundException``, which ``queryConsumerOffset`` raises for QUERY_NOT_FOUND."""
        return self.name == V4_9_8

    @property
    def read_error_throws(self) -> bool:
        """R10.1: from 5.0.0 ``computePullFromWhereWithException`` throws ``MQClientException`` on a
        failed read (-2) instead of returning -1; 5.0.0's ``updateProcessQueueTableInRebalance`` calls
        ``computePullFromWhere``, which catches it and returns -1 (R9.4, RIP-19 commit 9d8f4c2cc0)."""
        return self.name != V4_9_8

    @property
    def orderly_locks_in_broadcasting(self) -> bool:
        """R8.9 (orderly): 4.9.8's BROADCASTING rebalance passes ``isOrder`` through, so an orderly
        broadcast consumer locks each queue it adds (and never renews); 5.3.2 (commit 2956f6d46b)
        takes no locks in BROADCASTING. Read in ``RebalanceImpl.rebalance_by_topic``."""
        return self.name == V4_9_8

    @property
    def orderly_removal_waits_for_consume_lock(self) -> bool:
        """R8.8 (orderly consume loop): 4.9.8's ``removeUnnecessaryMessageQueue`` persists and removes
        the offset, then ``unlockDelay`` under ``consumeLock.tryLock(1000)``, scheduling the unlock 20 s
        later when ``hasTempMessage()``; 5.2.0 (commit 59e8f9b66e, ``tryRemoveOrderMessageQueue``) persists,
        then under ``consumeLock.writeLock().tryLock(500)``, or unconditionally once the dropped pq's
        ``lastLockTimestamp`` is 20 s old, persists again, removes the offset, clears ``locked`` and unlocks
        at once (oneway). Read in ``RebalancePushImpl.remove_unnecessary_message_queue``."""
        return self.name == V4_9_8

    @property
    def lock_all_skips_dropped(self) -> bool:
        """R8.2 (orderly consume loop): 5.x's ``lockAll`` / ``unlockAll`` batch only the pqs not dropped
        (``RebalanceImpl#buildProcessQueueTableByBrokerName``, every 5.x tag); 4.9.8 takes every key of the
        table. Mirrors ``Config.lock_all_skips_dropped``; read in ``RebalanceImpl.lock_all`` and ``unlock_all``."""
        return self.name != V4_9_8

    @property
    def orderly_forward_counts_the_send(self) -> bool:
        """R8.7 (orderly consume loop): ``ConsumeMessageOrderlyService#sendMessageBack`` sets the forwarded
        message's RECONSUME_TIME to ``reconsumeTimes`` in 4.9.8 and to ``reconsumeTimes + 1`` from 5.1.1
        (commit 7cfffe7f48, apache/rocketmq#6163). Read in ``ConsumeMessageOrderlyService.send_message_back``."""
        return self.name != V4_9_8

    @property
    def send_back_skips_cleaned(self) -> bool:
        """R7.3, R6.8: from 5.1.0 (commit c217d8bb80, apache/rocketmq#5481) ``processConsumeResult`` skips the
        send-back of a failed message its pq no longer holds (``ProcessQueue#containsMessage``): cleanExpiredMsg
        already sent it back and removed it. 4.9.8 sends it back a second time. Mirrors
        ``Config.send_back_skips_cleaned``; read in ``ConsumeMessageConcurrentlyService.process_consume_result``."""
        return self.name != V4_9_8

    # slaves
    @property
    def slave_rejects_pulls(self) -> bool:
        """R5.4 (slaves): from 5.0.0 ``PullMessageProcessor#rejectRequest`` is true on a slave with
        slaveReadEnable = false (the default), so every pull it gets is answered SYSTEM_BUSY; 4.9.8's
        ``rejectRequest`` is false. Mirrors ``not Config.slave_serves_pulls``."""
        return self.name != V4_9_8

    @property
    def slave_sync_times(self) -> tuple[int, int]:
        """R3.8 (slaves): (first run, period) in ms of the slave runs of ``SlaveSynchronize#syncAll`` that
        synchronize. 4.9.8's ``handleSlaveSynchronize`` schedules it at 3 s, then every 10 s; 5.0.0's task runs
        every 3 s from 10 s and syncs only when more than 60 s passed since the last sync (or since the
        controller was built): at 61 s, then every 63 s. Mirrors ``Config.slave_sync_times``."""
        return (3_000, 10_000) if self.name == V4_9_8 else (61_000, 63_000)

    @property
    def young_queue_needs_head_in_memory(self) -> bool:
        """R3.5: the broker's young-queue test is ``checkInMemByConsumeOffset(0, 1)`` from 5.1.0
        (commit 3949f6938e), where 4.9.8 has ``!checkInDiskByConsumeOffset(0)``."""
        return self.name != V4_9_8

    # OFFSET_ILLEGAL (R5.7)
    @property
    def offset_illegal_fixed_at_once(self) -> bool:
        """R5.7: 4.9.8 runs the OFFSET_ILLEGAL correction 10 s later (``executeTaskLater``); 5.2.0
        (apache/rocketmq#7645) at once (``executeTask``) with ``updateAndFreezeOffset``, then
        ``rebalanceImmediately``."""
        return self.name != V4_9_8

    @property
    def rebalance_paced(self) -> bool:
        """R4.2, R9.4: 5.x's ``RebalanceService#run`` waits at least ``minInterval`` (1 s) after the last rebalance,
        its timestamp starting at construction, and 1 s instead of 20 s after an unbalanced result (5.2.0,
        59e8f9b66e); ``RebalanceImpl`` dispatches new pull requests 500 ms later (5.0.0). 4.9.8 does neither."""
        return self.name != V4_9_8

    @property
    def server_side_reset(self) -> bool:
        """R3.10a/R3.10b (admin reset): 4.9.8 resets through the clients
        (Broker2Client, MQClientInstance#resetOffset); 5.x brokers (``useServerSideResetOffset``, on by
        default from 5.2.0, RIP-48) keep a pending reset. Mirrors ``Config.server_side_reset``; read by
        the broker only: ``AdminBrokerProcessor.reset_offset`` (which path), ``ConsumerManageProcessor.
        update_consumer_offset`` (commits ignored while pending) and ``PullMessageProcessor.process_request``
        (``queryThenEraseResetOffset``, answered PULL_OFFSET_MOVED)."""
        return self.name != V4_9_8
