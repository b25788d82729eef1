"""The remoting protocol between consumer and broker: codes, sys flags, headers and ``RemotingCommand``.

Mirrors ``RequestCode``, ``ResponseCode``, ``PullSysFlag`` (R5.3) and the request headers of the
calls offset management uses (docs/rules.md): PULL_MESSAGE (R5.2), QUERY_CONSUMER_OFFSET (R3.5),
UPDATE_CONSUMER_OFFSET (R3.4), CONSUMER_SEND_MSG_BACK (R7.4), GET_CONSUMER_LIST_BY_GROUP (R9.3),
HEART_BEAT and UNREGISTER_CLIENT (R9.7), GET_MAX_OFFSET and SEARCH_OFFSET_BY_TIMESTAMP (R10.1),
NOTIFY_CONSUMER_IDS_CHANGED (R9.7) and SEND_MESSAGE (the producer fall-back, R7.4/R7.6).
Headers are typed dataclasses instead of string maps; bodies are Python objects.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Final

from rmqspec.reference.message import MessageExt, tags_string2tags_code
from rmqspec.reference.message_queue import MessageQueue

SUB_ALL: Final = "*"


class RequestCode:
    SEND_MESSAGE: Final = 10
    PULL_MESSAGE: Final = 11
    QUERY_CONSUMER_OFFSET: Final = 14
    UPDATE_CONSUMER_OFFSET: Final = 15
    SEARCH_OFFSET_BY_TIMESTAMP: Final = 29
    GET_MAX_OFFSET: Final = 30
    HEART_BEAT: Final = 34
    UNREGISTER_CLIENT: Final = 35
    CONSUMER_SEND_MSG_BACK: Final = 36
    GET_CONSUMER_LIST_BY_GROUP: Final = 38
    NOTIFY_CONSUMER_IDS_CHANGED: Final = 40
    LOCK_BATCH_MQ: Final = 41  # orderly (R8.2)
    UNLOCK_BATCH_MQ: Final = 42  # orderly (R8.2)
    GET_ALL_CONSUMER_OFFSET: Final = 43  # slaves: SlaveSynchronize#syncConsumerOffset (R3.8)
    RESET_CONSUMER_CLIENT_OFFSET: Final = 220  # admin reset: broker to client (R3.10a)
    INVOKE_BROKER_TO_RESET_OFFSET: Final = 222  # admin reset: admin to broker (R3.10a/b)


class ResponseCode:
    SUCCESS: Final = 0
    SYSTEM_ERROR: Final = 1
    SYSTEM_BUSY: Final = 2  # slaves: a 5.x slave's rejectRequest for a pull
    TOPIC_NOT_EXIST: Final = 17
    PULL_NOT_FOUND: Final = 19
    PULL_RETRY_IMMEDIATELY: Final = 20
    PULL_OFFSET_MOVED: Final = 21
    QUERY_NOT_FOUND: Final = 22
    SUBSCRIPTION_NOT_EXIST: Final = 24
    SUBSCRIPTION_NOT_LATEST: Final = 25
    SUBSCRIPTION_GROUP_NOT_EXIST: Final = 26
    CONSUMER_NOT_ONLINE: Final = 206  # admin reset: Broker2Client#resetOffset (R3.10a step 5)


class PullSysFlag:
    """R5.3 bits of ``PullMessageRequestHeader.sysFlag``."""

    FLAG_COMMIT_OFFSET: Final = 0x1
    FLAG_SUSPEND: Final = 0x2
    FLAG_SUBSCRIPTION: Final = 0x4
    FLAG_CLASS_FILTER: Final = 0x8

    @staticmethod
    def build_sys_flag(commit_offset: bool, suspend: bool, subscription: bool, class_filter: bool) -> int:
        flag = 0
        if commit_offset:
            flag |= PullSysFlag.FLAG_COMMIT_OFFSET
        if suspend:
            flag |= PullSysFlag.FLAG_SUSPEND
        if subscription:
            flag |= PullSysFlag.FLAG_SUBSCRIPTION
        if class_filter:
            flag |= PullSysFlag.FLAG_CLASS_FILTER
        return flag

    @staticmethod
    def clear_commit_offset_flag(flag: int) -> int:
        """R5.3 (slaves): ``pullKernelImpl`` clears the flag for a slave's address."""
        return flag & ~PullSysFlag.FLAG_COMMIT_OFFSET

    @staticmethod
    def has_commit_offset_flag(flag: int) -> bool:
        return bool(flag & PullSysFlag.FLAG_COMMIT_OFFSET)

    @staticmethod
    def has_suspend_flag(flag: int) -> bool:
        return bool(flag & PullSysFlag.FLAG_SUSPEND)

    @staticmethod
    def has_subscription_flag(flag: int) -> bool:
        return bool(flag & PullSysFlag.FLAG_SUBSCRIPTION)


@dataclass
class SubscriptionData:
    """``SubscriptionData`` for tag expressions (``FilterAPI.buildSubscriptionData``): ``"*"`` or
    ``"A || B"``; ``code_set`` holds the tags' hash codes the broker filters on (R5.5)."""

    topic: str
    sub_string: str
    sub_version: int
    tags_set: set[str] = field(default_factory=set)
    code_set: set[int] = field(default_factory=set)

    @classmethod
    def build(cls, topic: str, sub_string: str | None, sub_version: int) -> SubscriptionData:
        expression = (sub_string or "").strip()
        if not expression or expression == SUB_ALL:
            return cls(topic, SUB_ALL, sub_version)
        tags = {t.strip() for t in expression.split("||") if t.strip()}
        return cls(topic, expression, sub_version, tags, {tags_string2tags_code(t) for t in tags})


@dataclass
class ConsumerData:
    """One consumer group in a heartbeat (``ConsumerData``)."""

    group_name: str
    message_model: str
    consume_from_where: str
    subscription_data_set: list[SubscriptionData]


@dataclass
class HeartbeatData:
    client_id: str
    consumer_data_set: list[ConsumerData]


@dataclass
class PullMessageRequestHeader:
    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int
    sys_flag: int
    commit_offset: int
    suspend_timeout_millis: int
    subscription: str | None
    sub_version: int


@dataclass
class PullMessageResponseHeader:
    next_begin_offset: int
    min_offset: int
    max_offset: int


@dataclass
class QueryConsumerOffsetRequestHeader:
    consumer_group: str
    topic: str
    queue_id: int
    # 5.0.0+ header field (R3.5): False makes a 5.x broker answer QUERY_NOT_FOUND instead of the
    # young-queue 0. Only 5.0.0's client sent it (False); 4.9.8 and 5.1.0+ clients leave it unset.
    set_zero_if_not_found: bool | None = None


@dataclass
class QueryConsumerOffsetResponseHeader:
    offset: int


@dataclass
class UpdateConsumerOffsetRequestHeader:
    consumer_group: str
    topic: str
    queue_id: int
    commit_offset: int


@dataclass
class ConsumerSendMsgBackRequestHeader:
    """R7.4: the stored message is named by its commit-log offset; there is no reconsumeTimes."""

    offset: int
    group: str
    delay_level: int
    origin_msg_id: str
    origin_topic: str
    max_reconsume_times: int


@dataclass
class SendMessageRequestHeader:
    producer_group: str
    topic: str
    queue_id: int
    properties: dict[str, str]
    born_timestamp: int
    reconsume_times: int = 0
    max_reconsume_times: int | None = None


@dataclass
class GetConsumerListByGroupRequestHeader:
    consumer_group: str


@dataclass
class UnregisterClientRequestHeader:
    client_id: str
    consumer_group: str


@dataclass
class GetMaxOffsetRequestHeader:
    topic: str
    queue_id: int


@dataclass
class SearchOffsetRequestHeader:
    topic: str
    queue_id: int
    timestamp: int


_opaque = itertools.count(1)


@dataclass
class ResetOffsetRequestHeader:
    """Admin reset: INVOKE_BROKER_TO_RESET_OFFSET (R3.10a, R3.10b). 4.9.8's header has
    {topic, group, timestamp, isForce}; 5.x adds ``queueId`` and ``offset`` (-1: by timestamp). The
    reference sends one queue, as the model does; a 4.9.8 reset by offset carries the offset itself
    (the model's abstraction: the timestamp that finds it)."""

    topic: str
    group: str
    timestamp: int
    is_force: bool = True
    queue_id: int = -1
    offset: int = -1


@dataclass
class ResetOffsetBody:
    """Admin reset: ``ResetOffsetBody{offsetTable}`` of RESET_CONSUMER_CLIENT_OFFSET
    (R3.10a step 4); the header {topic, group, timestamp, isForce} is kept beside it."""

    topic: str
    group: str
    offset_table: dict[MessageQueue, int]


@dataclass(eq=False)
class RemotingCommand:
    """A request or a response. ``ext_fields`` carries what an ``RPCHook`` adds to a request."""

    code: int
    header: object = None
    body: object = None
    remark: str | None = None
    opaque: int = field(default_factory=lambda: next(_opaque))
    ext_fields: dict[str, str] = field(default_factory=dict)

    @classmethod
    def create_request_command(cls, code: int, header: object, body: object = None) -> RemotingCommand:
        return cls(code, header, body)

    @classmethod
    def create_response_command(
        cls, code: int, remark: str | None = None, header: object = None, body: object = None
    ) -> RemotingCommand:
        return cls(code, header, body, remark)


@dataclass
class PullMessageResponseBody:
    """The decoded messages of a FOUND pull (``MessageDecoder.decodes`` on the client)."""

    messages: list[MessageExt]


# --- orderly (R8.1, R8.2): the bodies of LOCK_BATCH_MQ and UNLOCK_BATCH_MQ -----------------------------
@dataclass
class LockBatchRequestBody:
    consumer_group: str
    client_id: str
    mq_set: set[MessageQueue]


@dataclass
class UnlockBatchRequestBody:
    consumer_group: str
    client_id: str
    mq_set: set[MessageQueue]


@dataclass
class LockBatchResponseBody:
    lock_ok_mq_set: set[MessageQueue]
