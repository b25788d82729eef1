"""Messages as the broker stores them and the client receives them: ``MessageExt`` and its properties.

Mirrors ``org.apache.rocketmq.common.message.MessageExt`` / ``MessageExtBrokerInner`` and the
property names of ``MessageConst`` that offset management touches: tags (R5.5, R5.6), the retry
bookkeeping of a sent-back message (``RETRY_TOPIC``, ``ORIGIN_MESSAGE_ID``, ``reconsumeTimes``,
R7.5, R7.8) and the delay level that routes it through ``SCHEDULE_TOPIC_XXXX`` (R7.5 step 8).

A message id here is ``<storeHost>@<commitLogOffset>``: like RocketMQ's (which packs the store
host and the commit-log offset), it names a stored message, and ``look_message_by_id`` finds it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Final

# MessageConst property keys (4.9.8 names).
PROPERTY_TAGS: Final = "TAGS"
PROPERTY_DELAY_TIME_LEVEL: Final = "DELAY"
PROPERTY_RETRY_TOPIC: Final = "RETRY_TOPIC"
PROPERTY_REAL_TOPIC: Final = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID: Final = "REAL_QID"
PROPERTY_ORIGIN_MESSAGE_ID: Final = "ORIGIN_MESSAGE_ID"
PROPERTY_MAX_RECONSUME_TIMES: Final = "MAX_RECONSUME_TIMES"
PROPERTY_CONSUME_START_TIMESTAMP: Final = "CONSUME_START_TIME"
PROPERTY_MIN_OFFSET: Final = "MIN_OFFSET"
PROPERTY_MAX_OFFSET: Final = "MAX_OFFSET"

# Not RocketMQ: provenance the refinement abstraction reads to rebuild the model's ghost field of a
# sent-back message (``Message.sent_back_at``). Nothing in the reference's behaviour reads it.
TRACE_SENT_BACK_AT: Final = "__rmqspec_sentBackAt"

SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"  # TopicValidator.RMQ_SYS_SCHEDULE_TOPIC


def java_string_hash(text: str) -> int:
    """``String#hashCode`` as a signed 32-bit int (for ASCII/BMP text)."""
    h = 0
    for ch in text:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def tags_string2tags_code(tags: str | None) -> int:
    """``MessageExtBrokerInner#tagsString2tagsCode``: the tag's hash code, 0 without a tag."""
    return 0 if not tags else java_string_hash(tags)


def create_message_id(store_host: str, commit_log_offset: int) -> str:
    """``MessageDecoder#createMessageId`` (store host + commit-log offset), in readable form."""
    return f"{store_host}@{commit_log_offset}"


def decode_message_id(msg_id: str) -> tuple[str, int]:
    """``MessageDecoder#decodeMessageId``: (store host, commit-log offset)."""
    host, _, offset = msg_id.rpartition("@")
    return host, int(offset)


@dataclass
class MessageExt:
    """A stored message as both sides see it. The broker keeps its own copies; a pull hands the
    client :meth:`copy` s, so a client-side change (``reconsume_times += 1``, R7.3) stays local."""

    topic: str
    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    queue_id: int = 0
    queue_offset: int = -1
    commit_log_offset: int = -1
    store_timestamp: int = 0
    born_timestamp: int = 0
    store_host: str = ""
    reconsume_times: int = 0
    msg_id: str = ""

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    def get_property(self, name: str) -> str | None:
        return self.properties.get(name)

    def put_property(self, name: str, value: str) -> None:
        self.properties[name] = value

    def clear_property(self, name: str) -> None:
        self.properties.pop(name, None)

    @property
    def delay_time_level(self) -> int:
        return int(self.properties.get(PROPERTY_DELAY_TIME_LEVEL, "0"))

    def set_delay_time_level(self, level: int) -> None:
        self.properties[PROPERTY_DELAY_TIME_LEVEL] = str(level)

    def copy(self) -> MessageExt:
        return copy.deepcopy(self)


@dataclass
class MessageExtBrokerInner(MessageExt):
    """A message on its way into the store (``MessageExtBrokerInner``), with its tags code."""

    tags_code: int = 0
