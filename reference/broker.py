"""The broker: message store, offset table, request processors, consumer registry and its process life.

Mirrors the RocketMQ 4.9.8 broker classes that consumer offset management runs through:

- :class:`DefaultMessageStore` with :class:`ConsumeQueue`: min/max offsets, ``getMessage`` with the
  status table of R5.5 and tag filtering by hash code, ``getOffsetInQueueByTime`` (R10.3),
  ``checkInDiskByConsumeOffset`` (R3.5; "in disk" is a per-queue flag telling whether unit 0 is
  still in page cache), and the delay-level branch of ``CommitLog#putMessage`` (R7.5 step 8).
- :class:`ScheduleMessageService`: delivers due messages of ``SCHEDULE_TOPIC_XXXX`` to their real
  topic, here ``%RETRY%<group>`` (R7.5, R7.7).
- :class:`ConsumerManageProcessor` (QUERY_CONSUMER_OFFSET with the young-queue rule R3.5,
  UPDATE_CONSUMER_OFFSET R3.4, GET_CONSUMER_LIST_BY_GROUP R9.3), :class:`PullMessageProcessor`
  (R5.4 piggy-backed commit, long-polling hold), :class:`SendMessageProcessor` (CONSUMER_SEND_MSG_BACK
  R7.5, and the producer path with ``handleRetryAndDLQ`` R7.6), :class:`ClientManageProcessor`
  (heartbeat, unregister), :class:`AdminBrokerProcessor` (GET_MAX_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP).
- :class:`ConsumerManager` / :class:`ConsumerGroupInfo` with :class:`Broker2Client`: registration,
  channel close, NOTIFY_CONSUMER_IDS_CHANGED (R9.7).
- :class:`BrokerController`: the process. It loads ``consumerOffset.json`` at start (R3.7) and flushes
  the offset table every 5 s after 10 s (R3.6).
- :class:`BrokerHost`: the machine. Its disk (message store, topic configs, the offset file) survives
  a crash; the controller and everything in its memory does not (R3.6, R3.7).

A slave (slaves, ``Config.slave``) is a second :class:`BrokerHost` with ``BrokerRole.SLAVE``: its store
is a copy of the master's consume queues that the driver advances queue by queue (``HAService``'s
replication, :meth:`DefaultMessageStore.replicate_queue`), its own ConsumerOffsetManager, and
:class:`SlaveSynchronize`, whose ``syncConsumerOffset`` its scheduled executor runs (R3.8). On a slave
``getMessage`` corrects no offset unless ``offsetCheckInSlave`` (``nextOffsetCorrection``, R5.5),
``PullMessageProcessor`` answers PULL_RETRY_IMMEDIATELY for PULL_OFFSET_MOVED then and never stores a
piggy-backed commit (R5.4), and a 5.x slave rejects every pull (``rejectRequest``, SYSTEM_BUSY).
``BrokerHost.version`` (an ``MQVersion``) selects 5.x's young-queue
rule in ``ConsumerManageProcessor.query_consumer_offset`` (R3.5), and ``BrokerHost.fault_injector``
lets a test make a synchronous request's processor fail (answered SYSTEM_ERROR).
``BrokerHost.consumer_list_filter`` lets a test rewrite the consumer list GET_CONSUMER_LIST_BY_GROUP
answers, as a broker that some heartbeats have not reached yet would answer it (S7, R9.3; the
``RebalanceWithoutSelf`` fault); the answer's format and the processor's empty-list rule are unchanged.
"""

from __future__ import annotations

import enum
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

from rmqspec.reference.compat import SpecCompat
from rmqspec.reference.consumer_offset_manager import ConsumerOffsetManager
from rmqspec.reference.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    SCHEDULE_TOPIC,
    TRACE_SENT_BACK_AT,
    MessageExt,
    MessageExtBrokerInner,
    create_message_id,
    decode_message_id,
    tags_string2tags_code,
)
from rmqspec.reference.message_queue import RETRY_GROUP_TOPIC_PREFIX, MessageQueue, dlq_topic, retry_topic
from rmqspec.reference.mq_version import MQVersion
from rmqspec.reference.protocol import (
    SUB_ALL,
    ConsumerSendMsgBackRequestHeader,
    GetConsumerListByGroupRequestHeader,
    GetMaxOffsetRequestHeader,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    PullMessageRequestHeader,
    PullMessageResponseBody,
    PullMessageResponseHeader,
    PullSysFlag,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    RemotingCommand,
    RequestCode,
    ResetOffsetBody,
    ResetOffsetRequestHeader,
    ResponseCode,
    SearchOffsetRequestHeader,
    SendMessageRequestHeader,
    SubscriptionData,
    UnlockBatchRequestBody,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from rmqspec.reference.rebalance_lock_manager import RebalanceLockManager
from rmqspec.reference.remoting import ClientConnection, PendingReply, RemotingConnectException
from rmqspec.reference.scheduler import ScheduledExecutorService, VirtualClock

log = logging.getLogger(__name__)

# MessageStoreConfig.messageDelayLevel (R7.7).
MESSAGE_DELAY_LEVEL: Final = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
FLUSH_CONSUMER_OFFSET_INITIAL_DELAY: Final = 10_000  # BrokerController#initialize (R3.6)
FLUSH_CONSUMER_OFFSET_INTERVAL: Final = 5_000  # BrokerConfig.flushConsumerOffsetInterval (R3.6)
DLQ_NUMS_PER_GROUP: Final = 1  # AbstractSendMessageProcessor (R7.5)
CQ_STORE_UNIT_SIZE: Final = 20  # ConsumeQueue unit: commit-log offset (8), size (4), tags code (8)
MAX_TRANSFER_COUNT_ON_MESSAGE_IN_MEMORY: Final = 32  # MessageStoreConfig (isTheBatchFull)
FLUSH_TASK_NAME: Final = "flushConsumerOffset"
SLAVE_SYNC_TASK_NAME: Final = "slaveSynchronize"  # slaves: BrokerController#handleSlaveSynchronize (R3.8)


class BrokerRole(enum.Enum):
    """``MessageStoreConfig.brokerRole``."""

    ASYNC_MASTER = "ASYNC_MASTER"
    SLAVE = "SLAVE"


def parse_delay_level(text: str = MESSAGE_DELAY_LEVEL) -> dict[int, int]:
    """``ScheduleMessageService#parseDelayLevel``: level (1-based) to milliseconds."""
    unit_ms = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
    return {level: int(item[:-1]) * unit_ms[item[-1]] for level, item in enumerate(text.split(), start=1)}


# --- store ----------------------------------------------------------------------------------------------


class GetMessageStatus(enum.Enum):
    """``GetMessageStatus`` (R5.5)."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass
class GetMessageResult:
    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    message_list: list[MessageExt] = field(default_factory=list)

    @property
    def message_count(self) -> int:
        return len(self.message_list)


class MessageFilter(Protocol):
    def is_matched_by_consume_queue(self, tags_code: int) -> bool: ...


class ExpressionMessageFilter:
    """``ExpressionMessageFilter`` for TAG expressions: ``*`` matches all, else the hash-code set (R5.5)."""

    def __init__(self, subscription_data: SubscriptionData | None) -> None:
        self.subscription_data = subscription_data

    def is_matched_by_consume_queue(self, tags_code: int) -> bool:
        sd = self.subscription_data
        if sd is None or sd.sub_string == SUB_ALL:
            return True
        return tags_code in sd.code_set


@dataclass
class CqUnit:
    commit_log_offset: int
    size: int
    tags_code: int  # for SCHEDULE_TOPIC_XXXX: the delivery timestamp


@dataclass
class ConsumeQueue:
    """A consume queue. ``head_in_page_cache`` stands for "the commit-log bytes of unit 0 are still in
    page cache" (``checkInDiskByCommitOffset`` false); it is set when unit 0 is written and cleared
    when the page cache drops it."""

    topic: str
    queue_id: int
    units: list[CqUnit] = field(default_factory=list)
    min_logic_offset: int = 0
    head_in_page_cache: bool = False

    def get_min_offset_in_queue(self) -> int:
        return self.min_logic_offset

    def get_max_offset_in_queue(self) -> int:
        return len(self.units)

    def put_message_position_info(self, unit: CqUnit) -> int:
        offset = len(self.units)
        self.units.append(unit)
        if offset == 0:
            self.head_in_page_cache = True
        return offset


class DefaultMessageStore:
    """The commit log and consume queues of one broker (a master).

    The commit-log offset of a message is its index in ``commit_log``. Nothing is ever deleted, so
    ``minOffset`` stays 0 (no retention is modelled).
    """

    def __init__(
        self,
        clock: VirtualClock,
        store_host: str,
        message_delay_level: str = MESSAGE_DELAY_LEVEL,
        max_transfer_count_on_message_in_memory: int = MAX_TRANSFER_COUNT_ON_MESSAGE_IN_MEMORY,
        broker_role: BrokerRole = BrokerRole.ASYNC_MASTER,
        offset_check_in_slave: bool = False,
    ) -> None:
        self.clock = clock
        self.store_host = store_host
        self.broker_role = broker_role  # MessageStoreConfig.brokerRole (slaves)
        self.offset_check_in_slave = offset_check_in_slave  # MessageStoreConfig.offsetCheckInSlave (R5.5)
        self.max_transfer_count_on_message_in_memory = max_transfer_count_on_message_in_memory
        self.commit_log: list[MessageExt] = []
        self.consume_queue_table: dict[tuple[str, int], ConsumeQueue] = {}
        self.delay_level_table = parse_delay_level(message_delay_level)
        self.max_delay_level = max(self.delay_level_table)
        self.schedule_message_service = ScheduleMessageService(self)

    def now(self) -> int:
        return self.clock.now()

    def find_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.consume_queue_table.get((topic, queue_id))

    def _get_or_create_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        key = (topic, queue_id)
        if key not in self.consume_queue_table:
            self.consume_queue_table[key] = ConsumeQueue(topic, queue_id)
        return self.consume_queue_table[key]

    def put_message(self, msg: MessageExtBrokerInner) -> MessageExt:
        """``CommitLog#putMessage`` then dispatch to the consume queue. A delay level > 0 stores the
        message in ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1`` with its real topic and queue kept in
        properties, clamped to the largest level (R7.5 step 8)."""
        level = msg.delay_time_level
        if level > 0:
            level = min(level, self.max_delay_level)
            msg.set_delay_time_level(level)
            msg.put_property(PROPERTY_REAL_TOPIC, msg.topic)
            msg.put_property(PROPERTY_REAL_QUEUE_ID, str(msg.queue_id))
            msg.topic = SCHEDULE_TOPIC
            msg.queue_id = level - 1
        stored = MessageExt(
            topic=msg.topic,
            body=msg.body,
            properties=dict(msg.properties),
            queue_id=msg.queue_id,
            commit_log_offset=len(self.commit_log),
            store_timestamp=self.now(),
            born_timestamp=msg.born_timestamp,
            store_host=self.store_host,
            reconsume_times=msg.reconsume_times,
        )
        stored.msg_id = create_message_id(self.store_host, stored.commit_log_offset)
        tags_code = msg.tags_code
        if stored.topic == SCHEDULE_TOPIC:
            tags_code = self.schedule_message_service.compute_deliver_timestamp(level, stored.store_timestamp)
        cq = self._get_or_create_consume_queue(stored.topic, stored.queue_id)
        stored.queue_offset = cq.put_message_position_info(CqUnit(stored.commit_log_offset, len(msg.body), tags_code))
        self.commit_log.append(stored)
        return stored

    def look_message_by_offset(self, commit_log_offset: int) -> MessageExt | None:
        """A copy of the message at ``commit_log_offset``, or None."""
        if 0 <= commit_log_offset < len(self.commit_log):
            return self.commit_log[commit_log_offset].copy()
        return None

    def look_message_by_id(self, msg_id: str) -> MessageExt | None:
        return self.look_message_by_offset(decode_message_id(msg_id)[1])

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.find_consume_queue(topic, queue_id)
        return 0 if cq is None else cq.get_max_offset_in_queue()

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.find_consume_queue(topic, queue_id)
        return 0 if cq is None else cq.get_min_offset_in_queue()

    def check_in_disk_by_consume_offset(self, topic: str, queue_id: int, consume_offset: int) -> bool:
        """R3.5: False when there is no unit at ``consume_offset``; otherwise whether its bytes have
        left page cache. Only unit 0 is ever asked about (the young-queue rule), and only unit 0
        can leave page cache here."""
        cq = self.find_consume_queue(topic, queue_id)
        if cq is None or not cq.min_logic_offset <= consume_offset < cq.get_max_offset_in_queue():
            return False
        return consume_offset == 0 and not cq.head_in_page_cache

    def check_in_mem_by_consume_offset(self, topic: str, queue_id: int, consume_offset: int, batch_size: int) -> bool:
        """R3.5, 5.1.0+: True only when there is a unit at ``consume_offset`` and its bytes are in
        memory (``SelectMappedBufferResult#isInMem``); False for an empty queue. As above, only
        unit 0 can leave page cache here, so ``batch_size`` (1 for the young-queue rule) changes
        nothing."""
        cq = self.find_consume_queue(topic, queue_id)
        if cq is None or not cq.min_logic_offset <= consume_offset < cq.get_max_offset_in_queue():
            return False
        return consume_offset != 0 or cq.head_in_page_cache

    def evict_from_page_cache(self, topic: str, queue_id: int) -> None:
        """The OS drops the page holding message 0 of the queue (commit log grew past the memory ratio)."""
        cq = self.find_consume_queue(topic, queue_id)
        if cq is None or not cq.units or not cq.head_in_page_cache:
            raise ValueError(f"message 0 of {topic}:{queue_id} is not in page cache")
        cq.head_in_page_cache = False

    def retention_delete(self, topic: str, queue_id: int) -> None:
        """Commit-log retention (``cleanExpiredConsumerQueue`` after the commit-log file
        holding the queue's oldest remaining unit was deleted): the queue's minimum logical offset rises
        by one (``correctMinOffset``), R5.5."""
        cq = self.find_consume_queue(topic, queue_id)
        if cq is None or cq.min_logic_offset >= cq.get_max_offset_in_queue():
            raise ValueError(f"{topic}:{queue_id} has no message left to delete")
        cq.min_logic_offset += 1

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int, first_of_equal: bool) -> int:
        """``ConsumeQueue#getOffsetInQueueByTime`` (R10.3): binary search over store times. An exact hit
        wins (``first_of_equal`` moves it to the first of the equal run, see SpecCompat); otherwise the
        neighbour closest in time, the earlier one on a tie; 0 for an empty queue."""
        cq = self.find_consume_queue(topic, queue_id)
        if cq is None or not cq.units:
            return 0

        def store_time(k: int) -> int:
            return self.commit_log[cq.units[k].commit_log_offset].store_timestamp

        low, high = cq.min_logic_offset, len(cq.units) - 1
        target = left = right = -1
        left_value = right_value = -1
        while high >= low:
            mid = (low + high) // 2
            t = store_time(mid)
            if t == timestamp:
                target = mid
                break
            if t > timestamp:
                high, right, right_value = mid - 1, mid, t
            else:
                low, left, left_value = mid + 1, mid, t
        if target != -1:
            while first_of_equal and target > cq.min_logic_offset and store_time(target - 1) == timestamp:
                target -= 1
            return target
        if left_value == -1:
            # Nothing visited (retention deleted every unit): Java computes (fileFromOffset + -1) / 20,
            # which truncates to 0 in the first file (retention).
            return right if right != -1 else 0
        if right_value == -1:
            return left
        return right if abs(timestamp - left_value) > abs(timestamp - right_value) else left

    def next_offset_correction(self, old_offset: int, new_offset: int) -> int:
        """``nextOffsetCorrection`` (R5.5): a slave keeps the requested offset unless offsetCheckInSlave."""
        if self.broker_role is not BrokerRole.SLAVE or self.offset_check_in_slave:
            return new_offset
        return old_offset

    def replicate_queue(self, master: DefaultMessageStore, topic: str, queue_id: int) -> None:
        """Slaves: HA replication brings this (slave) store's copy of one consume queue level with the
        master's: the commit log is copied up to the master's end (HAConnection's transfer) and the queue's
        units dispatched (ReputMessageService); its minOffset follows the master's retention, and whether
        unit 0 is in page cache is the master's too (R3.5). The model replicates queue by queue."""
        for msg in master.commit_log[len(self.commit_log) :]:
            self.commit_log.append(msg.copy())
        source = master.find_consume_queue(topic, queue_id)
        if source is None:
            return
        cq = self._get_or_create_consume_queue(topic, queue_id)
        cq.units = list(source.units)
        cq.min_logic_offset = source.min_logic_offset
        cq.head_in_page_cache = source.head_in_page_cache

    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int,
        message_filter: MessageFilter,
    ) -> GetMessageResult:
        """``DefaultMessageStore#getMessage`` (R5.5); on a slave the corrections go through
        ``nextOffsetCorrection``. Messages are copies."""
        cq = self.find_consume_queue(topic, queue_id)
        correct = self.next_offset_correction
        if cq is None:
            return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, correct(offset, 0), 0, 0)
        min_offset, max_offset = cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()
        if max_offset == 0:
            return GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, correct(offset, 0), min_offset, max_offset)
        if offset < min_offset:
            next_offset = correct(offset, min_offset)
            return GetMessageResult(GetMessageStatus.OFFSET_TOO_SMALL, next_offset, min_offset, max_offset)
        if offset == max_offset:
            return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, min_offset, max_offset)
        if offset > max_offset:
            next_offset = correct(offset, max_offset)
            return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_BADLY, next_offset, min_offset, max_offset)
        result = GetMessageResult(GetMessageStatus.NO_MATCHED_MESSAGE, offset, min_offset, max_offset)
        max_filter_units = max(16_000, max_msg_nums * CQ_STORE_UNIT_SIZE) // CQ_STORE_UNIT_SIZE
        units = cq.units[offset:]
        scanned = 0
        while scanned < len(units) and scanned < max_filter_units:
            unit = units[scanned]
            if self.is_the_batch_full(max_msg_nums, result.message_count):
                break
            scanned += 1
            if not message_filter.is_matched_by_consume_queue(unit.tags_code):
                continue  # the status stays NO_MATCHED_MESSAGE unless something was found
            result.message_list.append(self.commit_log[unit.commit_log_offset].copy())
            result.status = GetMessageStatus.FOUND
        result.next_begin_offset = offset + scanned
        return result

    def is_the_batch_full(self, max_msg_nums: int, message_total: int) -> bool:
        """``isTheBatchFull`` for messages in page cache: ``maxMsgNums``, or 32 messages (the byte
        limits are far above the bodies used here; a batch starting at a cold unit 0 would be capped
        at 8, which no batch of one unit reaches)."""
        if message_total == 0:
            return False
        return max_msg_nums <= message_total or message_total > self.max_transfer_count_on_message_in_memory - 1


class ScheduleMessageService:
    """``ScheduleMessageService``: one queue of ``SCHEDULE_TOPIC_XXXX`` per delay level, delivered in
    due order into the real topic (R7.5 step 8). The delivery offsets are kept with the store and
    updated at once (4.9.8 flushes ``delayOffset.json`` every 10 s; its replay after a crash is not
    modelled)."""

    def __init__(self, store: DefaultMessageStore) -> None:
        self.store = store
        self.offset_table: dict[int, int] = {}

    def compute_deliver_timestamp(self, delay_level: int, store_timestamp: int) -> int:
        return store_timestamp + self.store.delay_level_table[delay_level]

    def pending(self) -> list[tuple[int, MessageExt]]:
        """(deliver timestamp, message) of every message not yet delivered, earliest first; equal
        times in store order."""
        out: list[tuple[int, int, MessageExt]] = []
        for level in self.store.delay_level_table:
            cq = self.store.find_consume_queue(SCHEDULE_TOPIC, level - 1)
            if cq is None:
                continue
            for unit in cq.units[self.offset_table.get(level, 0) :]:
                out.append((unit.tags_code, unit.commit_log_offset, self.store.commit_log[unit.commit_log_offset]))
        out.sort(key=lambda e: (e[0], e[1]))
        return [(due, msg) for due, _, msg in out]

    def next_deliver_timestamp(self) -> int | None:
        pending = self.pending()
        return pending[0][0] if pending else None

    def deliver_due_message(self) -> None:
        """``DeliverDelayedMessageTimerTask``: move the earliest due message to its real topic."""
        heads: list[tuple[int, int, int]] = []
        for level in self.store.delay_level_table:
            cq = self.store.find_consume_queue(SCHEDULE_TOPIC, level - 1)
            offset = self.offset_table.get(level, 0)
            if cq is not None and offset < len(cq.units):
                unit = cq.units[offset]
                heads.append((unit.tags_code, unit.commit_log_offset, level))
        if not heads:
            raise ValueError("no scheduled message")
        due, commit_log_offset, level = min(heads)
        if due > self.store.now():
            raise ValueError(f"the earliest scheduled message is due at {due}, it is {self.store.now()}")
        msg_ext = self.store.look_message_by_offset(commit_log_offset)
        assert msg_ext is not None
        self.store.put_message(self.message_timeup(msg_ext))
        self.offset_table[level] = self.offset_table.get(level, 0) + 1

    @staticmethod
    def message_timeup(msg_ext: MessageExt) -> MessageExtBrokerInner:
        """``ScheduleMessageService#messageTimeup``: the message as it goes to its real topic."""
        inner = MessageExtBrokerInner(
            topic=msg_ext.properties[PROPERTY_REAL_TOPIC],
            body=msg_ext.body,
            properties=dict(msg_ext.properties),
            queue_id=int(msg_ext.properties[PROPERTY_REAL_QUEUE_ID]),
            born_timestamp=msg_ext.born_timestamp,
            reconsume_times=msg_ext.reconsume_times,
            tags_code=tags_string2tags_code(msg_ext.tags),
        )
        inner.clear_property(PROPERTY_DELAY_TIME_LEVEL)
        return inner


# --- configuration ----------------------------------------------------------------------------------


@dataclass
class TopicConfig:
    topic_name: str
    read_queue_nums: int
    write_queue_nums: int


@dataclass
class SubscriptionGroupConfig:
    """``SubscriptionGroupConfig`` defaults (§14)."""

    group_name: str
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    notify_consumer_ids_changed_enable: bool = True


@dataclass
class BrokerDurableConfig:
    """What the broker keeps on disk besides offsets: topics.json and subscriptionGroup.json."""

    topic_config_table: dict[str, TopicConfig] = field(default_factory=dict)
    subscription_group_table: dict[str, SubscriptionGroupConfig] = field(default_factory=dict)

    def create_topic_in_send_message_back_method(self, topic: str, queue_nums: int) -> TopicConfig:
        if topic not in self.topic_config_table:
            self.topic_config_table[topic] = TopicConfig(topic, queue_nums, queue_nums)
        return self.topic_config_table[topic]

    def find_subscription_group_config(self, group: str) -> SubscriptionGroupConfig:
        """Auto-creation is on by default (``autoCreateSubscriptionGroup``)."""
        if group not in self.subscription_group_table:
            self.subscription_group_table[group] = SubscriptionGroupConfig(group)
        return self.subscription_group_table[group]


# --- consumer registry -------------------------------------------------------------------------------


@dataclass(eq=False)
class ClientChannelInfo:
    channel: ClientConnection
    client_id: str
    last_update_timestamp: int = 0


class ConsumerGroupInfo:
    """``ConsumerGroupInfo``: the group's channels (insertion order) and subscriptions."""

    def __init__(self, group_name: str, message_model: str, consume_from_where: str) -> None:
        self.group_name = group_name
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        self.channel_info_table: dict[ClientConnection, ClientChannelInfo] = {}
        self.subscription_table: dict[str, SubscriptionData] = {}

    def get_all_channel(self) -> list[ClientConnection]:
        return list(self.channel_info_table)

    def get_all_client_id(self) -> list[str]:
        return [info.client_id for info in self.channel_info_table.values()]

    def find_subscription_data(self, topic: str) -> SubscriptionData | None:
        return self.subscription_table.get(topic)

    def update_channel(self, info_new: ClientChannelInfo, now: int) -> bool:
        """True when the channel is new to the group."""
        info_old = self.channel_info_table.get(info_new.channel)
        updated = False
        if info_old is None:
            self.channel_info_table[info_new.channel] = info_new
            info_old = info_new
            updated = True
        elif info_old.client_id != info_new.client_id:
            self.channel_info_table[info_new.channel] = info_new
            info_old = info_new
        info_old.last_update_timestamp = now
        return updated

    def update_subscription(self, sub_list: list[SubscriptionData]) -> bool:
        """True when a topic was added or removed; a newer subVersion replaces silently."""
        updated = False
        for sub in sub_list:
            old = self.subscription_table.get(sub.topic)
            if old is None:
                self.subscription_table[sub.topic] = sub
                updated = True
            elif sub.sub_version > old.sub_version:
                self.subscription_table[sub.topic] = sub
        topics = {sub.topic for sub in sub_list}
        for topic in [t for t in self.subscription_table if t not in topics]:
            del self.subscription_table[topic]
            updated = True
        return updated

    def unregister_channel(self, info: ClientChannelInfo) -> bool:
        return self.channel_info_table.pop(info.channel, None) is not None

    def do_channel_close_event(self, channel: ClientConnection) -> bool:
        return self.channel_info_table.pop(channel, None) is not None


class ConsumerManager:
    """``ConsumerManager`` (R4.3, R9.7)."""

    def __init__(self, controller: BrokerController) -> None:
        self.controller = controller
        self.consumer_table: dict[str, ConsumerGroupInfo] = {}

    def get_consumer_group_info(self, group: str) -> ConsumerGroupInfo | None:
        return self.consumer_table.get(group)

    def register_consumer(
        self,
        group: str,
        info: ClientChannelInfo,
        message_model: str,
        consume_from_where: str,
        sub_list: list[SubscriptionData],
        notify_enabled: bool,
    ) -> bool:
        group_info = self.consumer_table.get(group)
        if group_info is None:
            group_info = self.consumer_table[group] = ConsumerGroupInfo(group, message_model, consume_from_where)
        r1 = group_info.update_channel(info, self.controller.now())
        r2 = group_info.update_subscription(sub_list)
        if (r1 or r2) and notify_enabled:
            self.controller.broker2client.consumer_ids_changed(group, group_info.get_all_channel())
        return r1 or r2

    def unregister_consumer(self, group: str, info: ClientChannelInfo, notify_enabled: bool) -> None:
        group_info = self.consumer_table.get(group)
        if group_info is None:
            return
        group_info.unregister_channel(info)
        if not group_info.channel_info_table:
            del self.consumer_table[group]
        if notify_enabled:  # whether or not this channel was listed
            self.controller.broker2client.consumer_ids_changed(group, group_info.get_all_channel())

    def expire_idle_channel(self, channel: ClientConnection) -> None:
        """``scanNotActiveChannel`` finding ``channel`` idle (no heartbeat for 120 s, R4.3): it is removed
        from its group (the group goes when empty) and closed; nobody is notified. The scan visits every
        channel; the driver asks for one at a time (a crashed consumer's channel expires through
        ``do_channel_close_event``, its TCP close, instead)."""
        for group, group_info in list(self.consumer_table.items()):
            if group_info.channel_info_table.pop(channel, None) is not None:
                channel.close()
                if not group_info.channel_info_table:
                    del self.consumer_table[group]

    def do_channel_close_event(self, channel: ClientConnection) -> None:
        """The channel closed or expired (120 s idle, R4.3): drop it and tell the rest of the group."""
        for group, group_info in list(self.consumer_table.items()):
            if group_info.do_channel_close_event(channel):
                if not group_info.channel_info_table:
                    del self.consumer_table[group]
                self.controller.broker2client.consumer_ids_changed(group, group_info.get_all_channel())


class Broker2Client:
    """``Broker2Client`` behind ``DefaultConsumerIdsChangeListener`` (R9.7)."""

    def __init__(self, controller: BrokerController) -> None:
        self.controller = controller

    def consumer_ids_changed(self, group: str, channels: list[ClientConnection]) -> None:
        if not self.controller.notify_consumer_ids_changed_enable:
            return
        for channel in channels:
            self.notify_consumer_ids_changed(channel, group)

    # admin reset
    def reset_offset(
        self, topic: str, group: str, timestamp: int, is_force: bool, queue_id: int, offset: int
    ) -> RemotingCommand:
        """R3.10a (4.9.8 ``Broker2Client#resetOffset``), for the one queue the request names: SYSTEM_ERROR
        without a topic config or without an offset of the group (step 1, step 2's "THe consumer group
        not exist"); the target is ``offset`` when given (the model's abstraction of the timestamp that
        finds it), else ``offsetInQueueByTime`` (-1: maxOffset), a negative one 0; forced or lower than
        the current one, it is taken (step 2). The broker does not write its own table (step 3); it
        pushes RESET_CONSUMER_CLIENT_OFFSET oneway to every channel of the group (step 4), or answers
        CONSUMER_NOT_ONLINE when there is none (step 5)."""
        c = self.controller
        if topic not in c.durable.topic_config_table:
            return RemotingCommand.create_response_command(ResponseCode.SYSTEM_ERROR, f"[{topic}] not exist")
        current = c.consumer_offset_manager.query_offset(group, topic, queue_id)
        if current == -1:
            return RemotingCommand.create_response_command(
                ResponseCode.SYSTEM_ERROR, f"THe consumer group <{group}> not exist"
            )
        if offset >= 0:
            target = offset
        elif timestamp == -1:
            target = c.message_store.get_max_offset_in_queue(topic, queue_id)
        else:
            target = c.message_store.get_offset_in_queue_by_time(
                topic, queue_id, timestamp, c.compat.search_offset_first_equal
            )
        target = max(target, 0)
        chosen = target if is_force or target < current else current
        table = {MessageQueue(topic, c.host.broker_name, queue_id): chosen}
        group_info = c.consumer_manager.get_consumer_group_info(group)
        channels = [] if group_info is None else group_info.get_all_channel()
        if not channels:
            return RemotingCommand.create_response_command(
                ResponseCode.CONSUMER_NOT_ONLINE, f"Consumer not online, so can not reset offset, Group: {group}"
            )
        for channel in channels:
            channel.push_to_client(
                RemotingCommand.create_request_command(
                    RequestCode.RESET_CONSUMER_CLIENT_OFFSET, None, ResetOffsetBody(topic, group, dict(table))
                )
            )
        return RemotingCommand.create_response_command(ResponseCode.SUCCESS, body=ResetOffsetBody(topic, group, table))

    def notify_consumer_ids_changed(self, channel: ClientConnection, group: str) -> None:
        """NOTIFY_CONSUMER_IDS_CHANGED, oneway to the client."""
        channel.notify_client(
            RemotingCommand.create_request_command(
                RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, GetConsumerListByGroupRequestHeader(group)
            )
        )


# --- processors --------------------------------------------------------------------------------------


class ConsumerManageProcessor:
    """``ConsumerManageProcessor`` (R3.4, R3.5, R9.3); ``version`` is the broker's release line."""

    def __init__(self, controller: BrokerController, version: MQVersion | None = None) -> None:
        self.controller = controller
        self.version = version if version is not None else MQVersion()

    def get_consumer_list_by_group(self, request: RemotingCommand) -> RemotingCommand:
        """R9.3 step 2: the clientIds of the group's channels (one per channel, so a clientId two
        consumers share is listed twice, RMQ-11), or SYSTEM_ERROR "no consumer for this group" when
        there is none. ``BrokerHost.consumer_list_filter``, when set, rewrites the list first (a
        registration this broker has not seen yet, S7); an emptied list is then "no consumer" too."""
        assert isinstance(request.header, GetConsumerListByGroupRequestHeader)
        group = request.header.consumer_group
        group_info = self.controller.consumer_manager.get_consumer_group_info(group)
        if group_info is not None:
            client_ids = group_info.get_all_client_id()
            answer_filter = self.controller.host.consumer_list_filter
            if answer_filter is not None:
                client_ids = answer_filter(group, client_ids)
            if client_ids:
                return RemotingCommand.create_response_command(ResponseCode.SUCCESS, body=client_ids)
        return RemotingCommand.create_response_command(
            ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {request.header.consumer_group}"
        )

    def update_consumer_offset(self, channel: ClientConnection, request: RemotingCommand) -> RemotingCommand:
        """R3.4: commit unconditionally (no role or range check), always SUCCESS. A 5.x broker ignores
        the commit while a server-side reset of that queue is pending (R3.4, R3.10b step 5)."""
        h = request.header
        assert isinstance(h, UpdateConsumerOffsetRequestHeader)
        if self.version.server_side_reset and self.controller.consumer_offset_manager.has_offset_reset(
            h.topic, h.consumer_group, h.queue_id
        ):
            return RemotingCommand.create_response_command(ResponseCode.SUCCESS, "Offset has been previously reset")
        self.controller.consumer_offset_manager.commit_offset(
            channel.local_address, h.consumer_group, h.topic, h.queue_id, h.commit_offset
        )
        return RemotingCommand.create_response_command(ResponseCode.SUCCESS)

    def query_consumer_offset(self, request: RemotingCommand) -> RemotingCommand:
        """R3.5: the stored offset; else 0 for a young queue; else QUERY_NOT_FOUND. Young, in 4.9.8:
        never truncated and message 0 absent or still in page cache (``!checkInDiskByConsumeOffset``).
        In 5.x: a request with setZeroIfNotFound=false is never young (5.0.0); otherwise never
        truncated and message 0 present and in memory (``checkInMemByConsumeOffset``, 5.1.0), so an
        empty queue answers QUERY_NOT_FOUND."""
        h = request.header
        assert isinstance(h, QueryConsumerOffsetRequestHeader)
        offset = self.controller.consumer_offset_manager.query_offset(h.consumer_group, h.topic, h.queue_id)
        if offset >= 0:
            return RemotingCommand.create_response_command(
                ResponseCode.SUCCESS, header=QueryConsumerOffsetResponseHeader(offset)
            )
        store = self.controller.message_store
        min_offset = store.get_min_offset_in_queue(h.topic, h.queue_id)
        if self.version.young_queue_needs_head_in_memory:
            if h.set_zero_if_not_found is False:
                return RemotingCommand.create_response_command(
                    ResponseCode.QUERY_NOT_FOUND, "Not found, do not set to zero, maybe this group boot first"
                )
            young = store.check_in_mem_by_consume_offset(h.topic, h.queue_id, 0, 1)
        else:
            young = not store.check_in_disk_by_consume_offset(h.topic, h.queue_id, 0)
        if min_offset <= 0 and young:
            return RemotingCommand.create_response_command(
                ResponseCode.SUCCESS, header=QueryConsumerOffsetResponseHeader(0)
            )
        return RemotingCommand.create_response_command(
            ResponseCode.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"
        )


class PullMessageProcessor:
    """``PullMessageProcessor#processRequest`` (R5.4, R5.5) with its long-polling hold."""

    def __init__(self, controller: BrokerController) -> None:
        self.controller = controller

    def reject_request(self) -> bool:
        """``rejectRequest`` (slaves): from 5.0.0 a slave with slaveReadEnable = false (the default) rejects
        every pull before processing it (answered SYSTEM_BUSY); 4.9.8 never rejects (R5.4)."""
        c = self.controller
        return c.host.version.slave_rejects_pulls and c.message_store.broker_role is BrokerRole.SLAVE

    def process_request(
        self, channel: ClientConnection, request: RemotingCommand, broker_allow_suspend: bool
    ) -> RemotingCommand | None:
        """The response, or None when the request is held (suspended for long polling)."""
        h = request.header
        assert isinstance(h, PullMessageRequestHeader)
        c = self.controller
        c.durable.find_subscription_group_config(h.consumer_group)
        topic_config = c.durable.topic_config_table.get(h.topic)
        if topic_config is None:
            return RemotingCommand.create_response_command(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
        if not 0 <= h.queue_id < topic_config.read_queue_nums:
            return RemotingCommand.create_response_command(
                ResponseCode.SYSTEM_ERROR, f"queueId[{h.queue_id}] is illegal"
            )
        if PullSysFlag.has_subscription_flag(h.sys_flag):
            subscription_data: SubscriptionData = SubscriptionData.build(h.topic, h.subscription, h.sub_version)
        else:  # the early rejections of R5.4: they return before the piggy-backed commit
            group_info = c.consumer_manager.get_consumer_group_info(h.consumer_group)
            if group_info is None:
                return RemotingCommand.create_response_command(
                    ResponseCode.SUBSCRIPTION_NOT_EXIST, "the consumer's group info not exist"
                )
            found = group_info.find_subscription_data(h.topic)
            if found is None:
                return RemotingCommand.create_response_command(
                    ResponseCode.SUBSCRIPTION_NOT_EXIST, "the consumer's subscription not exist"
                )
            if found.sub_version < h.sub_version and not c.compat.pull_ignores_sub_version:
                return RemotingCommand.create_response_command(
                    ResponseCode.SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest"
                )
            subscription_data = found
        if c.host.version.server_side_reset:  # admin reset: R3.10b step 6
            reset_offset = c.consumer_offset_manager.query_then_erase_reset_offset(
                h.topic, h.consumer_group, h.queue_id
            )
            if reset_offset is not None:  # OFFSET_RESET, answered PULL_OFFSET_MOVED; the commit still follows
                reset_response = RemotingCommand.create_response_command(
                    ResponseCode.PULL_OFFSET_MOVED,
                    "OFFSET_RESET",
                    PullMessageResponseHeader(
                        reset_offset,
                        c.message_store.get_min_offset_in_queue(h.topic, h.queue_id),
                        c.message_store.get_max_offset_in_queue(h.topic, h.queue_id),
                    ),
                )
                if broker_allow_suspend and PullSysFlag.has_commit_offset_flag(h.sys_flag):
                    c.consumer_offset_manager.commit_offset(
                        channel.local_address, h.consumer_group, h.topic, h.queue_id, h.commit_offset
                    )
                return reset_response
        result = c.message_store.get_message(
            h.consumer_group,
            h.topic,
            h.queue_id,
            h.queue_offset,
            h.max_msg_nums,
            ExpressionMessageFilter(subscription_data),
        )
        code = self._response_code(result.status, h.queue_offset)
        # A 4.9.8 slave with slaveReadEnable = false sets PULL_RETRY_IMMEDIATELY first, which the status
        # switch above overwrites (R5.4); the suggested broker (the master) is not modelled.
        slave = c.message_store.broker_role is BrokerRole.SLAVE
        next_begin_offset = result.next_begin_offset
        if code == ResponseCode.PULL_OFFSET_MOVED and slave and not c.message_store.offset_check_in_slave:
            next_begin_offset = h.queue_offset  # R5.5 [RMQ-17 fix]: a slave moves no consumer
            code = ResponseCode.PULL_RETRY_IMMEDIATELY
        response: RemotingCommand | None = RemotingCommand.create_response_command(
            code,
            result.status.value,
            PullMessageResponseHeader(next_begin_offset, result.min_offset, result.max_offset),
            PullMessageResponseBody(result.message_list) if code == ResponseCode.SUCCESS else None,
        )
        may_hold = broker_allow_suspend and PullSysFlag.has_suspend_flag(h.sys_flag)
        if may_hold and code == ResponseCode.PULL_NOT_FOUND:
            response = None  # PullRequestHoldService: answered when woken (message arrival or timeout)
        # storeOffsetEnable: brokerAllowSuspend, the commit flag, and not a slave (R5.4)
        if broker_allow_suspend and PullSysFlag.has_commit_offset_flag(h.sys_flag) and not slave:
            c.consumer_offset_manager.commit_offset(
                channel.local_address, h.consumer_group, h.topic, h.queue_id, h.commit_offset
            )
        return response

    @staticmethod
    def _response_code(status: GetMessageStatus, request_offset: int) -> int:
        """R5.5: store status to response code on a master."""
        if status is GetMessageStatus.FOUND:
            return ResponseCode.SUCCESS
        if status in (GetMessageStatus.MESSAGE_WAS_REMOVING, GetMessageStatus.NO_MATCHED_MESSAGE):
            return ResponseCode.PULL_RETRY_IMMEDIATELY
        if status in (GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, GetMessageStatus.NO_MESSAGE_IN_QUEUE):
            return ResponseCode.PULL_OFFSET_MOVED if request_offset != 0 else ResponseCode.PULL_NOT_FOUND
        if status in (GetMessageStatus.OFFSET_FOUND_NULL, GetMessageStatus.OFFSET_OVERFLOW_ONE):
            return ResponseCode.PULL_NOT_FOUND
        return ResponseCode.PULL_OFFSET_MOVED  # OFFSET_OVERFLOW_BADLY, OFFSET_TOO_SMALL

    def execute_request_when_wakeup(self, channel: ClientConnection, request: RemotingCommand) -> RemotingCommand:
        """A held request runs again with ``brokerAllowSuspend = false``: no second commit, no hold."""
        response = self.process_request(channel, request, broker_allow_suspend=False)
        assert response is not None
        return response


class SendMessageProcessor:
    """``SendMessageProcessor``: CONSUMER_SEND_MSG_BACK (R7.5) and SEND_MESSAGE (R7.6)."""

    def __init__(self, controller: BrokerController) -> None:
        self.controller = controller
        self._random = random.Random(0)  # ThreadLocalRandom for the retry queue pick; deterministic

    def consumer_send_msg_back(self, request: RemotingCommand) -> RemotingCommand:
        """R7.5: rebuild the consumed message as a retry message (delay level 3 + reconsumeTimes
        unless the client chose one) or, at reconsumeTimes >= max, as a dead letter."""
        h = request.header
        assert isinstance(h, ConsumerSendMsgBackRequestHeader)
        c = self.controller
        group_config = c.durable.find_subscription_group_config(h.group)
        if group_config.retry_queue_nums <= 0:
            return RemotingCommand.create_response_command(ResponseCode.SUCCESS)  # dropped silently (S19)
        new_topic = retry_topic(h.group)
        queue_id = self._random.randrange(99_999_999) % group_config.retry_queue_nums
        c.durable.create_topic_in_send_message_back_method(new_topic, group_config.retry_queue_nums)
        msg_ext = c.message_store.look_message_by_offset(h.offset)
        if msg_ext is None:
            return RemotingCommand.create_response_command(
                ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {h.offset}"
            )
        if msg_ext.get_property(PROPERTY_RETRY_TOPIC) is None:
            msg_ext.put_property(PROPERTY_RETRY_TOPIC, msg_ext.topic)
        reconsume_times = msg_ext.reconsume_times  # the stored count: the header carries none
        delay_level = h.delay_level
        if reconsume_times >= h.max_reconsume_times or delay_level < 0:
            new_topic = dlq_topic(h.group)
            queue_id = self._random.randrange(99_999_999) % DLQ_NUMS_PER_GROUP
            c.durable.create_topic_in_send_message_back_method(new_topic, DLQ_NUMS_PER_GROUP)
            msg_ext.set_delay_time_level(0)
        else:
            if delay_level == 0:
                delay_level = 3 + reconsume_times
            msg_ext.set_delay_time_level(delay_level)
        inner = MessageExtBrokerInner(
            topic=new_topic,
            body=msg_ext.body,
            properties=dict(msg_ext.properties),
            queue_id=queue_id,
            born_timestamp=msg_ext.born_timestamp,
            reconsume_times=reconsume_times + 1,
            tags_code=tags_string2tags_code(msg_ext.tags),
        )
        origin = msg_ext.get_property(PROPERTY_ORIGIN_MESSAGE_ID)
        inner.put_property(PROPERTY_ORIGIN_MESSAGE_ID, origin if origin else msg_ext.msg_id)
        inner.put_property(TRACE_SENT_BACK_AT, str(c.now()))
        c.message_store.put_message(inner)
        return RemotingCommand.create_response_command(ResponseCode.SUCCESS)

    def send_message(self, request: RemotingCommand) -> RemotingCommand:
        """SEND_MESSAGE; a send to ``%RETRY%<group>`` goes through ``handleRetryAndDLQ`` (R7.6)."""
        h = request.header
        assert isinstance(h, SendMessageRequestHeader)
        assert isinstance(request.body, bytes)
        c = self.controller
        topic, queue_id = h.topic, h.queue_id
        properties = dict(h.properties)
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            group = topic[len(RETRY_GROUP_TOPIC_PREFIX) :]
            group_config = c.durable.find_subscription_group_config(group)
            max_times = group_config.retry_max_times if h.max_reconsume_times is None else h.max_reconsume_times
            if h.reconsume_times >= max_times:
                topic = dlq_topic(group)
                queue_id = self._random.randrange(99_999_999) % DLQ_NUMS_PER_GROUP
                c.durable.create_topic_in_send_message_back_method(topic, DLQ_NUMS_PER_GROUP)
                properties[PROPERTY_DELAY_TIME_LEVEL] = "0"
        elif topic not in c.durable.topic_config_table:
            return RemotingCommand.create_response_command(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        inner = MessageExtBrokerInner(
            topic=topic,
            body=request.body,
            properties=properties,
            queue_id=queue_id,
            born_timestamp=h.born_timestamp,
            reconsume_times=h.reconsume_times,
            tags_code=tags_string2tags_code(properties.get(PROPERTY_TAGS)),
        )
        stored = c.message_store.put_message(inner)
        return RemotingCommand.create_response_command(ResponseCode.SUCCESS, body=stored.msg_id)


class ClientManageProcessor:
    """``ClientManageProcessor``: HEART_BEAT registers, UNREGISTER_CLIENT unregisters (R9.7)."""

    def __init__(self, controller: BrokerController) -> None:
        self.controller = controller

    def heart_beat(self, channel: ClientConnection, request: RemotingCommand) -> RemotingCommand:
        heartbeat = request.body
        assert isinstance(heartbeat, HeartbeatData)
        c = self.controller
        for data in heartbeat.consumer_data_set:
            group_config = c.durable.find_subscription_group_config(data.group_name)
            c.durable.create_topic_in_send_message_back_method(
                retry_topic(data.group_name), group_config.retry_queue_nums
            )
            c.consumer_manager.register_consumer(
                data.group_name,
                ClientChannelInfo(channel, heartbeat.client_id),
                data.message_model,
                data.consume_from_where,
                data.subscription_data_set,
                group_config.notify_consumer_ids_changed_enable,
            )
        return RemotingCommand.create_response_command(ResponseCode.SUCCESS)

    def unregister_client(self, channel: ClientConnection, request: RemotingCommand) -> RemotingCommand:
        h = request.header
        assert isinstance(h, UnregisterClientRequestHeader)
        group_config = self.controller.durable.find_subscription_group_config(h.consumer_group)
        self.controller.consumer_manager.unregister_consumer(
            h.consumer_group, ClientChannelInfo(channel, h.client_id), group_config.notify_consumer_ids_changed_enable
        )
        return RemotingCommand.create_response_command(ResponseCode.SUCCESS)


class AdminBrokerProcessor:
    """GET_MAX_OFFSET and SEARCH_OFFSET_BY_TIMESTAMP (R10.1, R10.3)."""

    def __init__(self, controller: BrokerController) -> None:
        self.controller = controller

    def get_max_offset(self, request: RemotingCommand) -> RemotingCommand:
        h = request.header
        assert isinstance(h, GetMaxOffsetRequestHeader)
        offset = self.controller.message_store.get_max_offset_in_queue(h.topic, h.queue_id)
        return RemotingCommand.create_response_command(ResponseCode.SUCCESS, body=offset)

    def search_offset_by_timestamp(self, request: RemotingCommand) -> RemotingCommand:
        h = request.header
        assert isinstance(h, SearchOffsetRequestHeader)
        offset = self.controller.message_store.get_offset_in_queue_by_time(
            h.topic, h.queue_id, h.timestamp, self.controller.compat.search_offset_first_equal
        )
        return RemotingCommand.create_response_command(ResponseCode.SUCCESS, body=offset)

    def get_all_consumer_offset(self) -> RemotingCommand:
        """GET_ALL_CONSUMER_OFFSET (slaves, R3.8): the memory offset table, encoded as consumerOffset.json
        is (``ConsumerOffsetManager#encode``)."""
        body = self.controller.consumer_offset_manager.encode()
        return RemotingCommand.create_response_command(ResponseCode.SUCCESS, body=body)

    # admin reset
    def reset_offset(self, request: RemotingCommand) -> RemotingCommand:
        """INVOKE_BROKER_TO_RESET_OFFSET: 4.9.8 hands it to ``Broker2Client#resetOffset`` (R3.10a); a 5.x
        broker with ``useServerSideResetOffset`` runs ``resetOffsetInner`` (R3.10b)."""
        h = request.header
        assert isinstance(h, ResetOffsetRequestHeader)
        if not self.controller.host.version.server_side_reset:
            return self.controller.broker2client.reset_offset(
                h.topic, h.group, h.timestamp, h.is_force, h.queue_id, h.offset
            )
        return self.reset_offset_inner(h.topic, h.group, h.queue_id, h.timestamp, h.offset)

    def reset_offset_inner(self, topic: str, group: str, queue_id: int, timestamp: int, offset: int) -> RemotingCommand:
        """R3.10b steps 1-4 for one queue (``queueId >= 0``): the topic must exist; an explicit offset
        must pass the range check (rejected when ``(min >= 0 and offset < min) or offset > max + 1``),
        otherwise the offset is found by timestamp; then ``assignResetOffset``. No ``isForce`` (step 7).
        The subscription group is auto-created here (``findSubscriptionGroupConfig``)."""
        c = self.controller
        store = c.message_store
        if topic not in c.durable.topic_config_table:
            return RemotingCommand.create_response_command(
                ResponseCode.TOPIC_NOT_EXIST, f"Topic {topic} does not exist"
            )
        c.durable.find_subscription_group_config(group)
        if offset != -1:
            low, high = store.get_min_offset_in_queue(topic, queue_id), store.get_max_offset_in_queue(topic, queue_id)
            if (low >= 0 and offset < low) or offset > high + 1:
                return RemotingCommand.create_response_command(
                    ResponseCode.SYSTEM_ERROR, f"Target offset {offset} not in consume queue range [{low}-{high}]"
                )
            target = offset
        else:
            target = store.get_offset_in_queue_by_time(topic, queue_id, timestamp, c.compat.search_offset_first_equal)
        c.consumer_offset_manager.assign_reset_offset(topic, group, queue_id, target)
        return RemotingCommand.create_response_command(ResponseCode.SUCCESS)

    # orderly (R8.1, R8.2)
    def lock_batch_mq(self, request: RemotingCommand) -> RemotingCommand:
        body = request.body
        assert isinstance(body, LockBatchRequestBody)
        locked = self.controller.rebalance_lock_manager.try_lock_batch(body.consumer_group, body.mq_set, body.client_id)
        return RemotingCommand.create_response_command(ResponseCode.SUCCESS, body=LockBatchResponseBody(locked))

    def unlock_batch_mq(self, request: RemotingCommand) -> RemotingCommand:
        body = request.body
        assert isinstance(body, UnlockBatchRequestBody)
        self.controller.rebalance_lock_manager.unlock_batch(body.consumer_group, body.mq_set, body.client_id)
        return RemotingCommand.create_response_command(ResponseCode.SUCCESS)


# --- slaves ------------------------------------------------------------------------------------------


class SlaveSynchronize:
    """``SlaveSynchronize`` (slaves, R3.8): a slave's copy of its master's metadata. Only the consumer
    offsets matter here: ``syncConsumerOffset`` asks the master (GET_ALL_CONSUMER_OFFSET) and applies the
    answer with ``putAll`` on the slave's ``topic@group`` table, so each key the master has replaces the
    slave's whole per-queue map and a key only the slave has survives; then it persists the slave's
    table. ``master_addr`` is the master's address as the name server last gave it: None while the
    master is down (the registration answer names no master), when nothing is synchronized."""

    def __init__(self, controller: BrokerController) -> None:
        self.controller = controller

    @property
    def master_addr(self) -> str | None:
        master = self.controller.host.master
        return None if master is None or not master.is_up() else master.broker_addr

    def sync_all(self) -> None:
        """``syncAll``: topic configs, consumer offsets, delay offsets, subscription groups; only the
        offsets are modelled."""
        self.sync_consumer_offset()

    def sync_consumer_offset(self) -> None:
        master = self.controller.host.master
        if self.master_addr is None or master is None or master.controller is None:
            return
        # BrokerOuterAPI#getAllConsumerOffset
        request = RemotingCommand.create_request_command(RequestCode.GET_ALL_CONSUMER_OFFSET, None)
        response = master.process_sync(self.controller.host.require_master_connection(), request)
        if response.code != ResponseCode.SUCCESS or not isinstance(response.body, str):
            log.error("SyncConsumerOffset Exception, %s", self.master_addr)
            return
        wrapper = ConsumerOffsetManager(self.controller.host.root_dir)
        wrapper.decode(response.body, f"GET_ALL_CONSUMER_OFFSET from {self.master_addr}")
        manager = self.controller.consumer_offset_manager
        manager.offset_table.update(wrapper.offset_table)  # putAll
        manager.persist()


# --- process and machine ---------------------------------------------------------------------------


class BrokerController:
    """One broker process: everything here is memory and dies with a crash."""

    def __init__(self, host: BrokerHost) -> None:
        self.host = host
        self.compat = host.compat
        self.message_store = host.message_store
        self.durable = host.durable
        self.notify_consumer_ids_changed_enable = True  # BrokerConfig default
        self.consumer_offset_manager = ConsumerOffsetManager(host.root_dir)
        self.consumer_manager = ConsumerManager(self)
        self.broker2client = Broker2Client(self)
        self.consumer_manage_processor = ConsumerManageProcessor(self, host.version)
        self.pull_message_processor = PullMessageProcessor(self)
        self.send_message_processor = SendMessageProcessor(self)
        self.client_manage_processor = ClientManageProcessor(self)
        self.admin_broker_processor = AdminBrokerProcessor(self)
        self.scheduled_executor_service = ScheduledExecutorService(host.clock, "BrokerControllerScheduledThread")
        self.rebalance_lock_manager = RebalanceLockManager(host.clock)  # orderly (R8.1): memory only
        self.slave_synchronize = SlaveSynchronize(self)  # slaves (R3.8)

    def now(self) -> int:
        return self.host.clock.now()

    def initialize(self) -> bool:
        """R3.7: load consumerOffset.json (or its .bak); False means the broker cannot start."""
        return self.consumer_offset_manager.load()

    def start(self) -> None:
        """R3.6: persist the offset table every 5 s, first after 10 s. A slave (slaves) instead runs
        ``handleSlaveSynchronize``'s task (R3.8): 4.9.8 ``syncAll`` at 3 s, then every 10 s; 5.x's 3 s task
        from 10 s syncs only once 60 s passed since the last sync, so its runs that sync are the ones kept
        (``MQVersion.slave_sync_times``). A slave's own flush is not run: the slave never restarts, so its
        file is never read."""
        if self.message_store.broker_role is BrokerRole.SLAVE:
            first, period = self.host.version.slave_sync_times
            self.scheduled_executor_service.schedule_at_fixed_rate(
                SLAVE_SYNC_TASK_NAME, self.slave_synchronize.sync_all, first, period
            )
            return
        self.scheduled_executor_service.schedule_at_fixed_rate(
            FLUSH_TASK_NAME,
            self.consumer_offset_manager.persist,
            FLUSH_CONSUMER_OFFSET_INITIAL_DELAY,
            FLUSH_CONSUMER_OFFSET_INTERVAL,
        )

    def process_sync(self, channel: ClientConnection, request: RemotingCommand) -> RemotingCommand:
        fault = self.host.fault_injector
        if fault is not None and fault(request):
            # NettyRemotingAbstract#processRequestCommand: a processor that throws is answered with
            # SYSTEM_ERROR and the exception's text.
            return RemotingCommand.create_response_command(ResponseCode.SYSTEM_ERROR, "injected processor failure")
        code = request.code
        handlers: dict[int, Callable[[], RemotingCommand]] = {
            RequestCode.QUERY_CONSUMER_OFFSET: lambda: self.consumer_manage_processor.query_consumer_offset(request),
            RequestCode.UPDATE_CONSUMER_OFFSET: lambda: self.consumer_manage_processor.update_consumer_offset(
                channel, request
            ),
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: lambda: self.consumer_manage_processor.get_consumer_list_by_group(
                request
            ),
            RequestCode.CONSUMER_SEND_MSG_BACK: lambda: self.send_message_processor.consumer_send_msg_back(request),
            RequestCode.SEND_MESSAGE: lambda: self.send_message_processor.send_message(request),
            RequestCode.HEART_BEAT: lambda: self.client_manage_processor.heart_beat(channel, request),
            RequestCode.UNREGISTER_CLIENT: lambda: self.client_manage_processor.unregister_client(channel, request),
            RequestCode.GET_MAX_OFFSET: lambda: self.admin_broker_processor.get_max_offset(request),
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: lambda: self.admin_broker_processor.search_offset_by_timestamp(
                request
            ),
            RequestCode.LOCK_BATCH_MQ: lambda: self.admin_broker_processor.lock_batch_mq(request),  # orderly
            RequestCode.UNLOCK_BATCH_MQ: lambda: self.admin_broker_processor.unlock_batch_mq(request),  # orderly
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: lambda: self.admin_broker_processor.reset_offset(request),
            RequestCode.GET_ALL_CONSUMER_OFFSET: self.admin_broker_processor.get_all_consumer_offset,  # slaves
        }
        if code not in handlers:
            raise ValueError(f"request code {code} is not handled synchronously")
        return handlers[code]()

    def process_next_request(self, channel: ClientConnection, position: int = 0) -> None:
        """Read and process a request on ``channel``'s wire (oneway or async): the oldest, or the one
        ``position`` places behind it. NettyRemotingAbstract#processRequestCommand hands each request to the
        executor registered for its code (BrokerController#registerProcessor: PULL_MESSAGE on
        pullMessageExecutor, UPDATE_CONSUMER_OFFSET on consumerManageExecutor), so a later request of one
        connection can run before an earlier one (docs/spec.md, "Thread boundaries")."""
        request = channel.read_request(position)
        if request.code == RequestCode.UPDATE_CONSUMER_OFFSET:
            self.consumer_manage_processor.update_consumer_offset(channel, request)  # oneway: no reply
        elif request.code == RequestCode.PULL_MESSAGE and self.pull_message_processor.reject_request():
            # NettyRemotingAbstract#processRequestCommand: a rejected request is answered SYSTEM_BUSY
            busy = RemotingCommand.create_response_command(
                ResponseCode.SYSTEM_BUSY, "[REJECTREQUEST]system busy, start flow control for a while"
            )
            channel.replies[request.opaque] = PendingReply(self.host.incarnation, request, busy)
        elif request.code == RequestCode.PULL_MESSAGE:
            response = self.pull_message_processor.process_request(channel, request, broker_allow_suspend=True)
            channel.replies[request.opaque] = PendingReply(self.host.incarnation, request, response)
        else:
            raise ValueError(f"request code {request.code} is not sent on the wire")


class BrokerHost:
    """The broker machine: a disk that survives crashes and at most one running :class:`BrokerController`."""

    def __init__(
        self,
        clock: VirtualClock,
        root_dir: Path,
        broker_name: str,
        topics: dict[str, int],
        compat: SpecCompat,
        store_host: str | None = None,
        version: MQVersion | None = None,
        broker_addr: str = "broker-a:10911",
        broker_role: BrokerRole = BrokerRole.ASYNC_MASTER,
        offset_check_in_slave: bool = False,
        master: BrokerHost | None = None,
    ) -> None:
        self.clock = clock
        self.root_dir = root_dir
        self.broker_name = broker_name
        self.broker_addr = broker_addr  # the address clients connect to
        # MessageExt.storeHost of what this broker stores: brokerIP1:listenPort, the address it registers, so a
        # client can send a message back to its store host (R7.4, R6.8)
        store_host = broker_addr if store_host is None else store_host
        self.master = master  # slaves: the master this slave replicates (HA) and synchronizes from
        # slaves: the slave's BrokerOuterAPI connection to its master
        self.master_connection = None if master is None else master.connect(store_host)
        self.compat = compat
        self.version = version if version is not None else MQVersion()
        # Lets a test make the request processor throw on a synchronous request (answered SYSTEM_ERROR).
        self.fault_injector: Callable[[RemotingCommand], bool] | None = None
        # Lets a test rewrite the consumer list a GET_CONSUMER_LIST_BY_GROUP answers: (group, clientIds) ->
        # clientIds (a heartbeat that has not reached this broker yet, S7).
        self.consumer_list_filter: Callable[[str, list[str]], list[str]] | None = None
        self.message_store = DefaultMessageStore(
            clock, store_host, broker_role=broker_role, offset_check_in_slave=offset_check_in_slave
        )
        self.durable = BrokerDurableConfig({t: TopicConfig(t, n, n) for t, n in topics.items()})
        self.controller: BrokerController | None = None
        self.connections: list[ClientConnection] = []
        self._incarnation = 0

    # BrokerEndpoint
    def is_up(self) -> bool:
        return self.controller is not None

    @property
    def incarnation(self) -> int:
        """How many times this broker crashed: replies of an older incarnation can never arrive."""
        return self._incarnation

    def require_controller(self) -> BrokerController:
        if self.controller is None:
            raise RemotingConnectException("the broker is down")
        return self.controller

    def process_sync(self, connection: ClientConnection, request: RemotingCommand) -> RemotingCommand:
        return self.require_controller().process_sync(connection, request)

    def require_master_connection(self) -> ClientConnection:
        if self.master_connection is None:
            raise RemotingConnectException(f"{self.broker_addr} is no slave")
        return self.master_connection

    def replicate_queue(self, topic: str, queue_id: int) -> None:
        """Slaves: HA brings this slave's copy of one queue level with its master's (the master must be up)."""
        if self.master is None or not self.master.is_up():
            raise RemotingConnectException(f"{self.broker_addr}: no master to replicate from")
        self.message_store.replicate_queue(self.master.message_store, topic, queue_id)

    def wake_up_held_request(self, connection: ClientConnection, request: RemotingCommand) -> RemotingCommand:
        return self.require_controller().pull_message_processor.execute_request_when_wakeup(connection, request)

    def connect(self, local_address: str) -> ClientConnection:
        connection = ClientConnection(local_address, self, self.broker_addr)
        self.connections.append(connection)
        return connection

    def start(self) -> BrokerController:
        if self.controller is not None:
            raise RuntimeError("the broker is already running")
        controller = BrokerController(self)
        if not controller.initialize():
            raise RuntimeError("broker start failed: consumerOffset.json and its .bak are unreadable (R3.7)")
        controller.start()
        self.controller = controller
        return controller

    def crash(self) -> None:
        """kill -9: memory (offset table, registrations, held pulls, timers) is gone; the disk stays.
        Every client connection breaks."""
        controller = self.require_controller()
        controller.scheduled_executor_service.shutdown()
        self.controller = None
        self._incarnation += 1
        for connection in self.connections:
            connection.break_connection()

    def produce(self, topic: str, queue_id: int, tags: str, body: bytes) -> MessageExt:
        """A producer's SEND_MESSAGE to a given queue."""
        controller = self.require_controller()
        response = controller.send_message_processor.send_message(
            RemotingCommand.create_request_command(
                RequestCode.SEND_MESSAGE,
                SendMessageRequestHeader("PRODUCER", topic, queue_id, {PROPERTY_TAGS: tags}, self.clock.now()),
                body,
            )
        )
        assert isinstance(response.body, str), response.remark
        stored = self.message_store.look_message_by_id(response.body)
        assert stored is not None
        return stored
