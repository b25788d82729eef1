"""``ProcessQueue``: the client's snapshot of one owned queue, and the commit watermark it computes.

Mirrors ``org.apache.rocketmq.client.impl.consumer.ProcessQueue`` of 4.9.8 for concurrent
consumption (R6.1-R6.3, R6.5-R6.7): ``msg_tree_map`` (queue offset to message), ``msg_count``,
``msg_size``, ``queue_offset_max``, ``dropped`` (set, never cleared), ``last_pull_timestamp``.
``put_message`` (R6.2) and ``remove_message`` (R6.3) are the two operations the commit offset comes
from: it is the lowest offset still held, or one past the last cached message when none is.
The orderly helpers of R6.4 (``take_messages``, ``commit``, ``rollback``,
``make_message_to_consume_again``, ``clear``) move messages through ``consuming_msg_orderly_tree_map``;
``consume_lock`` is the lock the orderly loop holds while its listener runs (R8.5 step 3) and the orderly
removal tries (R8.8); ``has_temp_message`` is the test of 4.9.8's ``unlockDelay``. ``clean_expired_msg``
is the second way a message leaves a concurrent pq (R6.8): sent back and removed once its listener has
run longer than ``consumeTimeout``; ``contains_message`` is 5.x's test of it (R7.3).

``uid`` is not RocketMQ's: it is the object's identity, minted by the consumer's id sequence, so a
refinement check can tell a re-created ProcessQueue from the one it replaced.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

from rmqspec.reference.allocate import IllegalArgumentError
from rmqspec.reference.message import PROPERTY_CONSUME_START_TIMESTAMP, PROPERTY_MAX_OFFSET, MessageExt

if TYPE_CHECKING:
    from rmqspec.reference.default_mq_push_consumer_impl import DefaultMQPushConsumerImpl

log = logging.getLogger(__name__)

PULL_MAX_IDLE_TIME: Final = 120_000  # rocketmq.client.pull.pullMaxIdleTime (R6.6)
REBALANCE_LOCK_MAX_LIVE_TIME: Final = 30_000  # rocketmq.client.rebalance.lockMaxLiveTime (R6.6)


def java_long(value: int) -> int:
    """``value`` as Java's ``long`` arithmetic leaves it: wrapped into [-2^63, 2^63). Offsets near the
    edges of ``long`` come only from adapter requests (Java's edge); every offset the model uses is
    far inside, where this is the identity."""
    return (value + 2**63) % 2**64 - 2**63


class NoSuchElementError(LookupError):
    """``java.util.NoSuchElementException``: ``commit()`` with nothing in flight (R6.4)."""


class ConsumeLock:
    """``ProcessQueue#consumeLock``: a ``ReentrantLock`` in 4.9.8, a ``ReentrantReadWriteLock`` in 5.x whose
    read side the consume loop takes and whose write side the orderly removal tries (R8.5, R8.8). At most
    one consume thread can want it (the MessageQueueLock monitor serialises a queue's runs), so one flag
    stands for both shapes: ``lock`` by a second holder would block, which the driver never asks for."""

    def __init__(self) -> None:
        self.held = False

    def lock(self) -> None:
        if self.held:
            raise RuntimeError("consumeLock is held: the thread would block")
        self.held = True

    def unlock(self) -> None:
        self.held = False

    def try_lock(self) -> bool:
        """``tryLock(timeout)``: the removal waits at most 1 s (4.9.8) or 500 ms (5.x); a listener still
        running when the rebalance gets here is taken to outlast that wait."""
        if self.held:
            return False
        self.held = True
        return True


class ProcessQueue:
    def __init__(self, uid: int, now: int) -> None:
        self.uid = uid
        self.msg_tree_map: dict[int, MessageExt] = {}  # a TreeMap: keys are read in sorted order
        self.consuming_msg_orderly_tree_map: dict[int, MessageExt] = {}  # orderly messages in flight (R6.1)
        self.msg_count = 0
        self.msg_size = 0
        self.queue_offset_max = 0
        self.dropped = False
        self.locked = False
        self.consuming = False
        self.msg_acc_cnt = 0
        self.last_pull_timestamp = now
        self.last_consume_timestamp = now
        self.last_lock_timestamp = now  # orderly (R6.6, R8.2)
        self.consume_lock = ConsumeLock()  # orderly consume loop (R8.5, R8.8)
        self.try_unlock_times = 0  # incTryUnlockTimes: an orderly removal could not take the consume lock

    def put_message(self, msgs: list[MessageExt]) -> bool:
        """R6.2: insert by queue offset (an existing key is replaced); each new key counts and moves
        ``queue_offset_max`` to that message's offset (the last new one in list order). Returns
        ``dispatchToConsume``."""
        valid = 0
        for msg in msgs:
            old = self.msg_tree_map.get(msg.queue_offset)
            self.msg_tree_map[msg.queue_offset] = msg
            if old is None:
                valid += 1
                self.queue_offset_max = msg.queue_offset
                self.msg_size += len(msg.body)
        self.msg_count += valid
        dispatch_to_consume = False
        if self.msg_tree_map and not self.consuming:
            dispatch_to_consume = True
            self.consuming = True
        if msgs:
            last = msgs[-1]
            max_offset = last.get_property(PROPERTY_MAX_OFFSET)
            acc_total = java_long(int(max_offset) - last.queue_offset) if max_offset is not None else 0
            if acc_total > 0:  # long arithmetic: MAX_OFFSET - queueOffset may overflow (Java's edge)
                self.msg_acc_cnt = acc_total
        return dispatch_to_consume

    def remove_message(self, msgs: list[MessageExt], now: int) -> int:
        """R6.3: drop ``msgs`` from the tree and return the offset to commit: the smallest key still in
        the tree, or ``queue_offset_max + 1`` when it is now empty; -1 if the tree was already empty."""
        self.last_consume_timestamp = now
        if not self.msg_tree_map:
            return -1
        result = java_long(self.queue_offset_max + 1)
        removed = 0
        for msg in msgs:
            if self.msg_tree_map.pop(msg.queue_offset, None) is not None:
                removed += 1
                self.msg_size -= len(msg.body)
        self.msg_count -= removed
        if self.msg_count == 0:
            self.msg_size = 0
        if self.msg_tree_map:
            result = min(self.msg_tree_map)
        return result

    def clean_expired_msg(self, push_consumer: DefaultMQPushConsumerImpl) -> None:
        """R6.8, ``ProcessQueue#cleanExpiredMsg``: nothing for an orderly consumer. Otherwise at most
        ``min(16, |tree|)`` passes: the tree's *first* message is taken only if its ``CONSUME_START_TIME``
        is set (``ConsumeRequest.run`` stamps it, R7.2 step 3) and more than ``consumeTimeout`` old, else
        the loop ends; it is sent back at delay level 3 (``sendMessageBack(msg, 3)``: no broker name, so to
        the message's store host, R7.4) and, if it is still the first key, removed. ``removeMessage``'s result
        is dropped: no ``updateOffset`` here (R6.3). A failed send-back is logged and the message stays; the
        next pass takes it again."""
        if push_consumer.consume_orderly:
            return
        timeout = push_consumer.default_mq_push_consumer.consume_timeout
        for _ in range(min(len(self.msg_tree_map), 16)):
            if not self.msg_tree_map:
                break
            first = self.msg_tree_map[min(self.msg_tree_map)]
            started = first.get_property(PROPERTY_CONSUME_START_TIMESTAMP)
            if not started or push_consumer.now() - int(started) <= timeout:
                break
            msg = first
            try:
                push_consumer.send_message_back(msg, 3, None)
                log.info("send expire msg back. msgId=%s, queueOffset=%s", msg.msg_id, msg.queue_offset)
                if self.msg_tree_map and msg.queue_offset == min(self.msg_tree_map):
                    self.remove_message([msg], push_consumer.now())
            except Exception as e:
                log.error("send expired msg exception: %s", e)

    def contains_message(self, msg: MessageExt) -> bool:
        """5.x ``ProcessQueue#containsMessage``: is the message's queue offset still a key of the tree (R7.3)?"""
        return msg.queue_offset in self.msg_tree_map

    def take_messages(self, batch_size: int, now: int) -> list[MessageExt]:
        """R6.4: move up to ``batch_size`` lowest entries of the tree into the consuming map; when
        none moved, ``consuming`` becomes False (the orderly loop stops until the next put). A
        negative ``batch_size`` throws before anything changes: ``new ArrayList<>(batchSize)``
        (Java's edge; the consume service only passes consumeMessageBatchMaxSize, at least 1)."""
        if batch_size < 0:
            raise IllegalArgumentError(f"Illegal Capacity: {batch_size}")
        self.last_consume_timestamp = now
        taken: list[MessageExt] = []
        for offset in sorted(self.msg_tree_map)[:batch_size]:
            msg = self.msg_tree_map.pop(offset)
            self.consuming_msg_orderly_tree_map[offset] = msg
            taken.append(msg)
        if not taken:
            self.consuming = False
        return taken

    def commit(self) -> int:
        """R6.4: one past the largest offset in the consuming map, which is then emptied and
        uncounted. Java's ``lastKey()`` throws ``NoSuchElementException`` on an empty map."""
        if not self.consuming_msg_orderly_tree_map:
            raise NoSuchElementError("consumingMsgOrderlyTreeMap is empty")
        offset = max(self.consuming_msg_orderly_tree_map)
        self.msg_count -= len(self.consuming_msg_orderly_tree_map)
        if self.msg_count == 0:
            self.msg_size = 0
        else:
            self.msg_size -= sum(len(m.body) for m in self.consuming_msg_orderly_tree_map.values())
        self.consuming_msg_orderly_tree_map.clear()
        return java_long(offset + 1)

    def rollback(self) -> None:
        """R6.4: everything in the consuming map goes back to the tree (replacing same offsets)."""
        self.msg_tree_map.update(self.consuming_msg_orderly_tree_map)
        self.consuming_msg_orderly_tree_map.clear()

    def make_message_to_consume_again(self, msgs: list[MessageExt]) -> None:
        """R6.4: each message leaves the consuming map and is put in the tree, whether or not it was
        in the consuming map; the counters do not change."""
        for msg in msgs:
            self.consuming_msg_orderly_tree_map.pop(msg.queue_offset, None)
            self.msg_tree_map[msg.queue_offset] = msg

    def clear(self) -> None:
        """R6.4: empty both maps and zero the counters and ``queue_offset_max``."""
        self.msg_tree_map.clear()
        self.consuming_msg_orderly_tree_map.clear()
        self.msg_count = 0
        self.msg_size = 0
        self.queue_offset_max = 0

    def has_temp_message(self) -> bool:
        """``hasTempMessage``: the tree (not the consuming map) holds a message (4.9.8 unlockDelay, R8.8)."""
        return bool(self.msg_tree_map)

    def get_max_span(self) -> int:
        """``lastKey - firstKey`` of the tree (consumeConcurrentlyMaxSpan flow control, R5.1)."""
        return java_long(max(self.msg_tree_map) - min(self.msg_tree_map)) if self.msg_tree_map else 0

    def is_pull_expired(self, now: int) -> bool:
        """R6.6: no pull for more than 120 s."""
        return now - self.last_pull_timestamp > PULL_MAX_IDLE_TIME

    def is_lock_expired(self, now: int) -> bool:
        """R6.6: the client-side lock validity, 30 s since the last granted lock."""
        return now - self.last_lock_timestamp > REBALANCE_LOCK_MAX_LIVE_TIME

    def sorted_offsets(self) -> list[int]:
        return sorted(self.msg_tree_map)
