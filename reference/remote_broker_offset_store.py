"""``RemoteBrokerOffsetStore``: a CLUSTERING consumer's offsets, kept in memory and committed to the broker.

Mirrors ``org.apache.rocketmq.client.consumer.store.RemoteBrokerOffsetStore`` of 4.9.8 (§2):
``load`` is a no-op (R2.1); ``update_offset`` follows R1.5; ``read_offset(READ_FROM_STORE)`` asks the
broker with QUERY_CONSUMER_OFFSET and seeds memory, mapping a broker error code to -1 and any other
failure to -2 (R2.3, R2.4; in 5.x only QUERY_NOT_FOUND is -1 and other codes are -2, see
``MQVersion``); ``persist``/``persist_all`` send UPDATE_CONSUMER_OFFSET oneway, and a
non-empty ``persist_all`` forgets every queue it was not given (R2.6, R2.7).

Java iterates its ``ConcurrentHashMap`` in an unspecified order; ``persist_all`` sends in
``MessageQueue`` order with retry topics last, so the wire order is reproducible.
"""

from __future__ import annotations

import logging
from collections.abc import Set as AbstractSet

from rmqspec.reference.exceptions import MQClientException
from rmqspec.reference.message_queue import RETRY_GROUP_TOPIC_PREFIX, MessageQueue
from rmqspec.reference.mq_client_instance import MASTER_ID, FindBrokerResult, MQBrokerException, MQClientInstance
from rmqspec.reference.mq_version import MQVersion
from rmqspec.reference.offset_store import OffsetStore, ReadOffsetType, update_offset_table
from rmqspec.reference.protocol import (
    QueryConsumerOffsetRequestHeader,
    ResponseCode,
    UpdateConsumerOffsetRequestHeader,
)
from rmqspec.reference.remoting import RemotingException

log = logging.getLogger(__name__)


def send_order(mq: MessageQueue) -> tuple[bool, MessageQueue]:
    """The order ``persist_all`` walks the table in: user topics first, then retry topics."""
    return (mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX), mq)


class RemoteBrokerOffsetStore(OffsetStore):
    def __init__(self, mq_client_factory: MQClientInstance, group_name: str, version: MQVersion | None = None) -> None:
        self.mq_client_factory = mq_client_factory
        self.group_name = group_name
        self.version = version if version is not None else MQVersion()
        self.offset_table: dict[MessageQueue, int] = {}  # R1.4

    def load(self) -> None:
        """R2.1: nothing is stored locally."""

    def update_offset(self, mq: MessageQueue | None, offset: int, increase_only: bool) -> None:
        """R1.5: a new entry takes ``offset``; else max(old, offset) if ``increase_only``, else overwrite."""
        if mq is None:
            return
        update_offset_table(self.offset_table, mq, offset, increase_only)

    def read_offset(self, mq: MessageQueue | None, type: ReadOffsetType) -> int:
        """R2.3: -1 for no offset, -2 for a failed fetch. Which broker answers count as "no offset"
        is the version switch ``broker_error_reads_as_no_offset``: any error code in 4.9.8, only
        QUERY_NOT_FOUND in 5.x (5.0.0), where every other code is a failed fetch [RMQ-14]. (A null
        ``mq`` gives -3 from 5.0.0; no caller passes one.)"""
        if mq is None:
            return -1
        if type is not ReadOffsetType.READ_FROM_STORE:
            value = self.offset_table.get(mq)
            if value is not None:
                return value
            if type is ReadOffsetType.READ_FROM_MEMORY:
                return -1
        try:
            broker_offset = self.fetch_consume_offset_from_broker(mq)
        except MQBrokerException as e:
            if self.version.broker_error_reads_as_no_offset or e.response_code == ResponseCode.QUERY_NOT_FOUND:
                return -1  # 4.9.8: every broker error code; 5.x: OffsetNotFoundException only
            log.warning("fetchConsumeOffsetFromBroker exception, %s %s", mq, e)
            return -2
        except (RemotingException, MQClientException) as e:
            log.warning("fetchConsumeOffsetFromBroker exception, %s %s", mq, e)
            return -2
        self.update_offset(mq, broker_offset, False)
        return broker_offset

    def fetch_consume_offset_from_broker(self, mq: MessageQueue) -> int:
        """R2.4: QUERY_CONSUMER_OFFSET to the master of ``mq``'s broker, or to any address of the name
        when the route has no master (its slave while the master is down, slaves)."""
        found = self._find_broker(mq)
        if found is None:
            raise MQClientException(f"The broker[{mq.broker_name}] not exist")
        header = QueryConsumerOffsetRequestHeader(self.group_name, mq.topic, mq.queue_id)
        return self.mq_client_factory.mq_client_api_impl.query_consumer_offset(found.broker_addr, header)

    def _find_broker(self, mq: MessageQueue) -> FindBrokerResult | None:
        """``findBrokerAddressInSubscribe(brokerName, MASTER_ID, true)``, then (after the route update,
        which the driver's shared route makes a no-op) ``(..., false)``: any address of the name."""
        factory = self.mq_client_factory
        found = factory.find_broker_address_in_subscribe(mq.broker_name, MASTER_ID, True)
        if found is None:
            found = factory.find_broker_address_in_subscribe(mq.broker_name, MASTER_ID, False)
        return found

    def persist_all(self, mqs: AbstractSet[MessageQueue] | None) -> None:
        """R2.7: send every entry in ``mqs`` oneway; then forget the entries not in ``mqs``. An empty
        set does nothing at all."""
        if not mqs:
            return
        unused: list[MessageQueue] = []
        for mq in sorted(self.offset_table, key=send_order):
            offset = self.offset_table[mq]
            if mq in mqs:
                try:
                    self.update_consume_offset_to_broker(mq, offset, True)
                except (RemotingException, MQClientException) as e:
                    log.error("updateConsumeOffsetToBroker exception, %s %s", mq, e)
            else:
                unused.append(mq)
        for mq in unused:
            del self.offset_table[mq]

    def persist(self, mq: MessageQueue) -> None:
        """R2.6: send the memory value of ``mq`` oneway, if there is one; failures are logged."""
        offset = self.offset_table.get(mq)
        if offset is None:
            return
        try:
            self.update_consume_offset_to_broker(mq, offset, True)
        except (RemotingException, MQClientException) as e:
            log.error("updateConsumeOffsetToBroker exception, %s %s", mq, e)

    def remove_offset(self, mq: MessageQueue) -> None:
        """R2.2: forget the memory entry."""
        self.offset_table.pop(mq, None)

    def clone_offset_table(self, topic: str | None) -> dict[MessageQueue, int]:
        """R1.6."""
        return {mq: v for mq, v in self.offset_table.items() if not topic or not topic.strip() or mq.topic == topic}

    def update_consume_offset_to_broker(self, mq: MessageQueue, offset: int, is_oneway: bool) -> None:
        """R2.5: UPDATE_CONSUMER_OFFSET (to the slave while the route lacks the master, slaves); only the
        oneway form is used by a push consumer (R2.8)."""
        found = self._find_broker(mq)
        if found is None:
            raise MQClientException(f"The broker[{mq.broker_name}] not exist")
        addr = found.broker_addr
        header = UpdateConsumerOffsetRequestHeader(self.group_name, mq.topic, mq.queue_id, offset)
        if not is_oneway:
            raise NotImplementedError("the push consumer never commits synchronously (R2.8)")
        self.mq_client_factory.mq_client_api_impl.update_consumer_offset_oneway(addr, header)
