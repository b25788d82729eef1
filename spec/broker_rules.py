"""Pure broker-side rules that both the model's actions and its invariants consult.

Kept apart from ``model.py`` so that an invariant can ask "what would the broker answer now?"
without running a transition: the QUERY_CONSUMER_OFFSET answer (R3.5), the pull result table
(R5.5), the timestamp search (R10.3) and the retry delay table (R7.7).

These rules are decided here and applied elsewhere: the offset query's answer by ``BrokerMixin`` (``broker.py``)
and ``RebalanceMixin._compute_pull_from_where`` (``rebalance.py``); the pull statuses by ``BrokerMixin._pull_result``,
``PullMixin._receive_pull`` (``pull.py``) and the slave (``slave.py``); the timestamp search by
``computePullFromWhere`` and the reset by time (``admin_reset.py``); the delay table by the send-back
(``concurrent_consume.py``).
"""

from __future__ import annotations

from typing import Final

from rmqspec.spec.state import BrokerQueue, Message, PullResult

# messageDelayLevel "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h" in ms (R7.7).
DELAY_LEVELS_MS: Final = (
    1_000, 5_000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000,
    360_000, 420_000, 480_000, 540_000, 600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000,
)  # fmt: skip

# maxTransferCountOnMessageInMemory: a pull returns at most this many messages (R5.5).
MAX_TRANSFER_COUNT_ON_MESSAGE_IN_MEMORY: Final = 32

QUERY_NOT_FOUND: Final = None  # QUERY_CONSUMER_OFFSET answered code 22

FOUND: Final = "FOUND"
NO_NEW_MSG: Final = "NO_NEW_MSG"
NO_MATCHED_MSG: Final = "NO_MATCHED_MSG"
OFFSET_ILLEGAL: Final = "OFFSET_ILLEGAL"
PULL_ERROR: Final = "ERROR"  # an error response code (e.g. SUBSCRIPTION_NOT_EXIST): onException


def retry_delay_ms(reconsume_times: int) -> int:
    """Delay before a message that has failed ``reconsume_times`` times before is retried: level
    3 + reconsumeTimes, clamped to the table's 18 levels (the broker's send-back (ConcurrentConsumeMixin._goes_to_dlq)
    steps 6 and 8, R7.7)."""
    level = min(3 + reconsume_times, len(DELAY_LEVELS_MS))
    return DELAY_LEVELS_MS[level - 1]


def delay_level_ms(level: int) -> int:
    """Delay of an explicit delay level (1-based), clamped to the table's 18 levels (step 8 of the broker's send-back,
    ConcurrentConsumeMixin._goes_to_dlq)."""
    return DELAY_LEVELS_MS[min(level, len(DELAY_LEVELS_MS)) - 1]


def body_size(message: Message) -> int:
    """A deterministic body length, so ProcessQueue.msgSize accounting (INV-1) is non-trivial."""
    return 16 + (message.origin[1] % 4) * 8


def query_consumer_offset(offset: int | None, queue: BrokerQueue, head_in_memory_rule: bool = False) -> int | None:
    """The QUERY_CONSUMER_OFFSET handler (R3.5): the stored offset if there is one; otherwise 0 for
    a young queue (never truncated, and message 0 "hot"), else QUERY_NOT_FOUND (``None``).

    What "young" means is the version switch ``Config.young_queue_needs_head_in_memory``
    (``head_in_memory_rule``): 4.9.8 asks ``!checkInDiskByConsumeOffset(0)``, true when message 0
    is missing (an empty queue) or hot; 5.1.0+ asks ``checkInMemByConsumeOffset(0, 1)``, true only
    when message 0 exists and is hot, so an empty queue answers QUERY_NOT_FOUND [RMQ-15]."""
    if offset is not None and offset >= 0:
        return offset
    if head_in_memory_rule:
        young = queue.max_offset > 0 and queue.head_hot  # checkInMemByConsumeOffset(0, 1), 5.1.0+
    else:
        young = not (queue.max_offset > 0 and not queue.head_hot)  # !checkInDiskByConsumeOffset(0), 4.9.8
    if queue.min_offset <= 0 and young:
        return 0
    return QUERY_NOT_FOUND


def pull_result(queue: BrokerQueue, offset: int, batch: int, subscription: tuple[str, ...] | None) -> PullResult:
    """DefaultMessageStore#getMessage on a master, as the client sees it (R5.5, the pull-status handling,
    PullMixin._receive_pull).

    Messages whose tag is not subscribed are scanned past; when none of the scanned units match,
    the result is NO_MATCHED_MSG with nextBeginOffset after them.
    """
    high = queue.max_offset
    if offset == high:
        return PullResult(NO_NEW_MSG, (), offset)
    if offset < queue.min_offset or offset > high:
        nxt = queue.min_offset if offset < queue.min_offset else high
        return PullResult(OFFSET_ILLEGAL, (), nxt)
    found: list[int] = []
    o = offset
    while o < high and len(found) < batch:
        if subscription is None or queue.messages[o].tag in subscription:
            found.append(o)
        o += 1
    return PullResult(FOUND if found else NO_MATCHED_MSG, tuple(found), o)


def slave_pull_result(
    queue: BrokerQueue, offset: int, batch: int, subscription: tuple[str, ...] | None, offset_check_in_slave: bool
) -> PullResult:
    """getMessage on a slave, from its copy of the commit log (R5.5) [RMQ-17]. With offsetCheckInSlave false
    (the default) the slave corrects nothing: nextOffsetCorrection keeps the requested offset and
    PULL_OFFSET_MOVED becomes PULL_RETRY_IMMEDIATELY, which the client reads as NO_MATCHED_MSG at the same
    offset. With it true, the slave answers OFFSET_ILLEGAL from its own, possibly lagging, bounds."""
    result = pull_result(queue, offset, batch, subscription)
    if result.status == OFFSET_ILLEGAL and not offset_check_in_slave:
        return PullResult(NO_MATCHED_MSG, (), offset)
    return result


def search_offset(queue: BrokerQueue, timestamp: int) -> int:
    """getOffsetInQueueByTime in 4.9.8 (R10.3): the offset whose store time equals ``timestamp``,
    otherwise the neighbour closest in time (which may lie before it); 0 when the queue is empty.
    On a tie in distance the earlier message wins."""
    messages = queue.messages
    if not messages:
        return 0
    if queue.min_offset >= len(messages):
        # Retention deleted every message. The search visits no unit and lands on -1,
        # which the first file's (fileFromOffset + -1) / CQ_STORE_UNIT_SIZE truncates to 0; the pull
        # at 0 then gets OFFSET_ILLEGAL (R5.5).
        return 0
    low, high = queue.min_offset, len(messages) - 1
    while low <= high:
        mid = (low + high) // 2
        t = messages[mid].store_time
        if t == timestamp:
            while mid > queue.min_offset and messages[mid - 1].store_time == timestamp:
                mid -= 1  # the first message stored at that time
            return mid
        if t < timestamp:
            low = mid + 1
        else:
            high = mid - 1
    # low is the first offset stored after timestamp, high the last stored before it.
    if high < queue.min_offset:
        return low
    if low >= len(messages):
        return high
    before, after = messages[high].store_time, messages[low].store_time
    return high if timestamp - before <= after - timestamp else low
