"""MessageQueue, RocketMQ's queue identity, with Java's natural order and text form.

Mirrors ``org.apache.rocketmq.common.message.MessageQueue`` (docs/rules.md, "Terms"): ordered by topic,
then brokerName (Java string compare, which for the ASCII names used here equals Python's), then
queueId numerically. ``str(mq)`` is the text form that consistent hashing routes on.
"""

from __future__ import annotations

from dataclasses import dataclass

RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"


def retry_topic(group: str) -> str:
    """``MixAll.getRetryTopic``: the topic failed messages of ``group`` are sent back to (R7.8)."""
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    """``MixAll.getDLQTopic``: where messages go after maxReconsumeTimes failures (R7.5)."""
    return DLQ_GROUP_TOPIC_PREFIX + group


@dataclass(frozen=True, order=True, slots=True)
class MessageQueue:
    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return f"MessageQueue [topic={self.topic}, brokerName={self.broker_name}, queueId={self.queue_id}]"
