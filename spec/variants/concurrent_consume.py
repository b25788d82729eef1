"""Planted bugs of concurrent consumption (``spec/concurrent_consume.py``): ProcessQueue.removeMessage,
processConsumeResult, the send-back and cleanExpiredMsg."""

from __future__ import annotations

from rmqspec.spec.state import Broker, BrokerQueue, Message, ProcessQueue, lowest_offset
from rmqspec.spec.variants import Variant, planted


@planted("watermark_highest_consumed", breaks=("R6.3",), refuted_by=("INV-2",))
class WatermarkHighestConsumed(Variant):
    """RMQ-01: removeMessage returns the highest removed offset + 1 instead of the lowest still held."""

    def _offset_still_held(self, tree: int, offsets: list[int]) -> int:
        return max(offsets) + 1 if offsets else lowest_offset(tree)


@planted("removal_result_read_before_removal", breaks=("R6.3",), refuted_by=("INV-2b",))
class RemovalResultReadBeforeRemoval(Variant):
    """removeMessage reads the lowest held offset before it removes the batch: while the tree still holds messages,
    a removal of its head answers the head itself, so the commit stays at a message already consumed (one behind)
    until the tree empties."""

    def _remove_message(self, pq: ProcessQueue, offsets: list[int], queue: BrokerQueue) -> tuple[ProcessQueue, int]:
        after, result = super()._remove_message(pq, offsets, queue)
        if result >= 0 and after.tree:
            return after, min(result, lowest_offset(pq.tree))
        return after, result


@planted("commit_before_send_back", breaks=("R7.3",), refuted_by=("INV-9",))
class CommitBeforeSendBack(Variant):
    """RMQ-03: messages whose send-back failed are removed from the pq, so the commit passes them."""

    def _removed_after_consume(self, msgs: tuple[tuple[int, int], ...], back_failed: set[int]) -> list[int]:
        return [o for o, _ in msgs]


@planted("dropped_pq_commits", breaks=("R7.3", "R8.6"), refuted_by=("INV-5",))
class DroppedPqCommits(Variant):
    """RMQ-05: processConsumeResult updates the offset of a dropped pq too (concurrent and orderly)."""

    def _offset_update_applies(self, pq: ProcessQueue | None, uid: int) -> bool:
        return True


@planted("dlq_one_retry_late", breaks=("R7.5",), refuted_by=("INV-10",))
class DlqOneRetryLate(Variant):
    """The broker routes a sent-back message to the DLQ only when reconsumeTimes > max."""

    def _goes_to_dlq(self, times: int) -> bool:
        return times > self.max_reconsume


@planted("send_back_from_ack_index", breaks=("R7.3",), refuted_by=("INV-24",))
class SendBackFromAckIndex(Variant):
    """processConsumeResult reads ackIndex as the number of messages consumed: it sends back from ackIndex, not
    ackIndex + 1, so a whole success still sends its last message back."""

    def _failed_by_answer(self, msgs: tuple[tuple[int, int], ...], ack: int) -> tuple[tuple[int, int], ...]:
        return msgs[max(ack, 0) :]


@planted("dlq_copy_not_stored", breaks=("R7.5",), refuted_by=("INV-24b",))
class DlqCopyNotStored(Variant):
    """The broker answers a send-back at maxReconsumeTimes with SUCCESS but stores no copy in %DLQ%<group> (the
    write to the dead-letter topic is skipped): the client lets the message go and commits past it, and nobody ever
    consumes it again. Send-backs below the maximum are scheduled as before."""

    def _send_back(self, b: Broker, original: Message, now: int, delay_level: int = 0) -> Broker:
        if self._goes_to_dlq(original.reconsume_times):
            return b
        return super()._send_back(b, original, now, delay_level)


@planted("count_not_decremented", breaks=("R6.3",), refuted_by=("INV-1",))
class CountNotDecremented(Variant):
    """ProcessQueue.removeMessage forgets to decrement msgCount."""

    def _msg_count_after_removal(self, count: int, taken: int) -> int:
        return count


@planted("commit_past_cached", breaks=("R6.3",), refuted_by=("INV-16", "INV-9", "FATES"))
class CommitPastCached(Variant):
    """removeMessage returns queueOffsetMax + 2 when the tree empties: the commit passes a message."""

    def _offset_when_tree_empties(self, pq: ProcessQueue) -> int:
        return pq.queue_offset_max + 2


@planted("expired_removed_without_send_back", breaks=("R6.8",), refuted_by=("INV-9",))
class ExpiredRemovedWithoutSendBack(Variant):
    """cleanExpiredMsg removes an expired message without sending it back: nobody handles it."""

    def _send_back_expired(self, b: Broker, msg: Message, now: int) -> tuple[Broker, str]:
        return b, "expired-removed"


@planted("clean_timer_stops", breaks=("R6.8",), refuted_by=("INV-27", "INV-23"))
class CleanTimerStops(Variant):
    """The cleanExpireMsg task runs once and is never re-armed: a message whose listener outlives consumeTimeout
    afterwards is never sent back, and no dead task explains it."""

    def _next_clean_run(self, due: int) -> int | None:
        return None
