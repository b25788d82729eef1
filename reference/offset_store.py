"""The client's ``OffsetStore`` interface and ``ReadOffsetType`` (R1.1, R1.2).

Implementations: ``LocalFileOffsetStore`` (BROADCASTING, R1.7–R1.16) in this package; the broker-backed
``RemoteBrokerOffsetStore`` (CLUSTERING, §2) elsewhere. Operations are the snake_case of the Java
names so each rule can be found from its Java method.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Set as AbstractSet

from rmqspec.reference.message_queue import MessageQueue


class ReadOffsetType(enum.Enum):
    """Where ``read_offset`` looks (R1.2)."""

    READ_FROM_MEMORY = "READ_FROM_MEMORY"
    READ_FROM_STORE = "READ_FROM_STORE"
    MEMORY_FIRST_THEN_STORE = "MEMORY_FIRST_THEN_STORE"


def update_offset_table(table: dict[MessageQueue, int], mq: MessageQueue, offset: int, increase_only: bool) -> None:
    """R1.5, shared by both stores: a new entry takes ``offset`` as given (``increase_only`` does not
    apply to it); an existing one becomes ``max(old, offset)`` under ``increase_only``
    (``MixAll#compareAndIncreaseOnly``), else is overwritten, possibly backwards."""
    old = table.get(mq)
    if old is None or not increase_only or offset > old:
        table[mq] = offset


class OffsetStore(ABC):
    """``org.apache.rocketmq.client.consumer.store.OffsetStore``: the eight operations of R1.1 (4.9.8)."""

    @abstractmethod
    def load(self) -> None:
        """Load persisted offsets into memory; raising makes the consumer's start fail (R1.3)."""

    @abstractmethod
    def update_offset(self, mq: MessageQueue | None, offset: int, increase_only: bool) -> None:
        """Set the in-memory offset of ``mq`` (R1.5)."""

    @abstractmethod
    def read_offset(self, mq: MessageQueue | None, type: ReadOffsetType) -> int:
        """The offset of ``mq`` from memory and/or the store, or a negative sentinel (R1.11, R2.3)."""

    @abstractmethod
    def persist_all(self, mqs: AbstractSet[MessageQueue] | None) -> None:
        """Persist the in-memory offsets of the queues in ``mqs`` (R1.12, R2.7)."""

    @abstractmethod
    def persist(self, mq: MessageQueue) -> None:
        """Persist the in-memory offset of one queue (R1.13, R2.6)."""

    @abstractmethod
    def remove_offset(self, mq: MessageQueue) -> None:
        """Forget the in-memory offset of ``mq`` (R1.14, R2.2)."""

    @abstractmethod
    def clone_offset_table(self, topic: str | None) -> dict[MessageQueue, int]:
        """A snapshot of the in-memory table: all of it if ``topic`` is blank, else that topic's (R1.6)."""

    @abstractmethod
    def update_consume_offset_to_broker(self, mq: MessageQueue, offset: int, is_oneway: bool) -> None:
        """Send ``offset`` for ``mq`` to the broker (R2.5); a no-op for the local store (R1.14)."""
