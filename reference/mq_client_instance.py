"""``MQClientInstance`` (the per-clientId client factory) and ``MQClientAPIImpl`` (its RPCs).

Mirrors RocketMQ 4.9.8:

- :class:`MQClientInstance`: the scheduled tasks of R4.1 (``persistAllConsumerOffset`` every 5 s after
  10 s; heartbeat every 30 s after 1 s), the ``PullMessageService`` and ``RebalanceService`` (R4.2),
  ``findConsumerIdList`` (R9.3 step 2), ``sendHeartbeatToAllBrokerWithLock``, ``unregisterConsumer``
  and ``rebalanceImmediately`` (R9.7). The topic route (name server) names one broker name; its
  addresses (``brokerAddrs``: the master, id 0, and with a slave, id 1) are a table the driver shares
  with every client, so a master's death and return are seen at once (slaves: ``brokerAddrTable``,
  ``findBrokerAddressInSubscribe`` with its fall-back to any address, ``selectBrokerAddr``).
- :class:`MQClientAPIImpl`: request building and response mapping, e.g. ``processPullResponse``
  (R5.5 response code to ``PullStatus``) and ``queryConsumerOffset`` (any non-SUCCESS code raises
  ``MQBrokerException``, R2.3/R2.4).
- :class:`MQAdminImpl`: ``maxOffset`` and ``searchOffset`` (R10.1), re-thrown as ``MQClientException``.
- :class:`ClientRemotingProcessor`: NOTIFY_CONSUMER_IDS_CHANGED from the broker (R9.7) and, full
  admin reset, RESET_CONSUMER_CLIENT_OFFSET (R3.10a), which runs ``MQClientInstance#resetOffset``;
  its 10 s sleep is a scheduler task (:class:`ResetOffsetTask`), a timer that fires on time.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from rmqspec.reference.exceptions import MQClientException
from rmqspec.reference.message import MessageExt
from rmqspec.reference.message_queue import MessageQueue
from rmqspec.reference.mq_version import MQVersion
from rmqspec.reference.protocol import (
    ConsumerSendMsgBackRequestHeader,
    GetConsumerListByGroupRequestHeader,
    GetMaxOffsetRequestHeader,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    PullMessageRequestHeader,
    PullMessageResponseBody,
    PullMessageResponseHeader,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    RemotingCommand,
    RequestCode,
    ResetOffsetBody,
    ResponseCode,
    SearchOffsetRequestHeader,
    SendMessageRequestHeader,
    UnlockBatchRequestBody,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from rmqspec.reference.remoting import ClientConnection, NettyRemotingClient, RemotingException, ResponseFuture
from rmqspec.reference.scheduler import ScheduledExecutorService, VirtualClock

if TYPE_CHECKING:
    from rmqspec.reference.compat import SpecCompat
    from rmqspec.reference.default_mq_push_consumer_impl import (
        DefaultMQPushConsumerImpl,
        PullCallback,
        PullMessageService,
    )
    from rmqspec.reference.rebalance_impl import RebalanceService

log = logging.getLogger(__name__)

PERSIST_CONSUMER_OFFSET_INITIAL_DELAY: Final = 10_000  # MQClientInstance#startScheduledTask (R4.1)
PERSIST_CONSUMER_OFFSET_INTERVAL: Final = 5_000  # ClientConfig.persistConsumerOffsetInterval
HEARTBEAT_INITIAL_DELAY: Final = 1_000
HEARTBEAT_BROKER_INTERVAL: Final = 30_000  # ClientConfig.heartbeatBrokerInterval
PERSIST_TASK_NAME: Final = "persistAllConsumerOffset"
HEARTBEAT_TASK_NAME: Final = "sendHeartbeatToAllBroker"
FIX_OFFSET_TASK: Final = "fixOffsetIllegal-"  # prefix of the 4.9.8 OFFSET_ILLEGAL tasks (R5.7)
LOCK_MQ_TASK_NAME: Final = "lockMQPeriodically"  # orderly: ConsumeMessageOrderlyService's lockAll (R8.3)
TRY_LOCK_LATER_TASK: Final = "tryLockLaterAndReconsume-"  # orderly consume loop: prefix of the re-lock tasks (R8.5)
UNLOCK_DELAY_TASK: Final = "unlockDelay-"  # orderly consume loop, 4.9.8: prefix of the delayed unlocks (R8.8)
RESET_OFFSET_TASK: Final = "resetOffset-"  # admin reset: prefix of the sleeping resetOffset (R3.10a)
RESET_OFFSET_SLEEP: Final = 10_000  # MQClientInstance#resetOffset's Thread.sleep(10000) (R3.10a step 3)
MASTER_ID: Final = 0


class MQBrokerException(Exception):
    """``MQBrokerException``: the broker answered with a non-SUCCESS code."""

    def __init__(self, response_code: int, error_message: str | None) -> None:
        super().__init__(f"CODE: {response_code} DESC: {error_message}")
        self.response_code = response_code
        self.error_message = error_message


class PullStatus(enum.Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


@dataclass
class PullResult:
    pull_status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    msg_found_list: list[MessageExt] = field(default_factory=list)


@dataclass
class TopicRouteData:
    """The name server's route of a topic: one broker name with its read queue count. ``broker_addrs``
    is its ``BrokerData.brokerAddrs`` (brokerId to address); None means the master ``broker_addr`` only.
    The driver shares one table among routes and mutates it as brokers die and return."""

    broker_name: str
    broker_addr: str
    read_queue_nums: int
    broker_addrs: dict[int, str] | None = None

    def addrs(self) -> dict[int, str]:
        return {MASTER_ID: self.broker_addr} if self.broker_addrs is None else self.broker_addrs

    def select_broker_addr(self) -> str | None:
        """``BrokerData#selectBrokerAddr``: the master's address, else any (the first) of the others."""
        addrs = self.addrs()
        if MASTER_ID in addrs:
            return addrs[MASTER_ID]
        return next(iter(sorted(addrs.items())), (None, None))[1]


@dataclass(frozen=True)
class FindBrokerResult:
    """``FindBrokerResult``: an address and whether it is a slave's."""

    broker_addr: str
    slave: bool


class PullInvokeCallback:
    """The ``InvokeCallback`` of ``pullMessageAsync``: map the reply and hand it to the PullCallback."""

    def __init__(self, api: MQClientAPIImpl, pull_callback: PullCallback) -> None:
        self.api = api
        self.pull_callback = pull_callback

    def __call__(self, future: ResponseFuture) -> None:
        response = future.response_command
        if response is None:
            self.pull_callback.on_exception(future.cause or RemotingException("no response"))
            return
        try:
            pull_result = self.api.process_pull_response(response)
        except MQBrokerException as e:
            self.pull_callback.on_exception(e)
            return
        self.pull_callback.on_success(pull_result)


class MQClientAPIImpl:
    """``MQClientAPIImpl``: one method per request the consumer sends."""

    def __init__(self, remoting_client: NettyRemotingClient) -> None:
        self.remoting_client = remoting_client

    def pull_message_async(self, addr: str, header: PullMessageRequestHeader, pull_callback: PullCallback) -> None:
        request = RemotingCommand.create_request_command(RequestCode.PULL_MESSAGE, header)
        self.remoting_client.invoke_async(request, PullInvokeCallback(self, pull_callback), addr)

    @staticmethod
    def process_pull_response(response: RemotingCommand) -> PullResult:
        """R5.5 last column: response code to client ``PullStatus``; other codes raise."""
        status = {
            ResponseCode.SUCCESS: PullStatus.FOUND,
            ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
            ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
            ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
        }.get(response.code)
        if status is None:
            raise MQBrokerException(response.code, response.remark)
        header = response.header
        assert isinstance(header, PullMessageResponseHeader)
        messages = response.body.messages if isinstance(response.body, PullMessageResponseBody) else []
        return PullResult(status, header.next_begin_offset, header.min_offset, header.max_offset, messages)

    def query_consumer_offset(self, addr: str, header: QueryConsumerOffsetRequestHeader) -> int:
        response = self.remoting_client.invoke_sync(
            RemotingCommand.create_request_command(RequestCode.QUERY_CONSUMER_OFFSET, header), addr
        )
        if response.code != ResponseCode.SUCCESS:
            raise MQBrokerException(response.code, response.remark)
        assert isinstance(response.header, QueryConsumerOffsetResponseHeader)
        return response.header.offset

    def update_consumer_offset_oneway(self, addr: str, header: UpdateConsumerOffsetRequestHeader) -> None:
        self.remoting_client.invoke_oneway(
            RemotingCommand.create_request_command(RequestCode.UPDATE_CONSUMER_OFFSET, header), addr
        )

    def get_consumer_id_list_by_group(self, addr: str, consumer_group: str) -> list[str]:
        response = self.remoting_client.invoke_sync(
            RemotingCommand.create_request_command(
                RequestCode.GET_CONSUMER_LIST_BY_GROUP, GetConsumerListByGroupRequestHeader(consumer_group)
            ),
            addr,
        )
        if response.code != ResponseCode.SUCCESS:
            raise MQBrokerException(response.code, response.remark)
        assert isinstance(response.body, list)
        return list(response.body)

    def consumer_send_message_back(
        self,
        addr: str,
        msg: MessageExt,
        consumer_group: str,
        delay_level: int,
        max_consume_retry_times: int,
    ) -> None:
        """R7.4: the header names the stored message by commit-log offset (no reconsumeTimes)."""
        header = ConsumerSendMsgBackRequestHeader(
            msg.commit_log_offset,
            consumer_group,
            delay_level,
            msg.msg_id,
            msg.topic,
            max_consume_retry_times,
        )
        response = self.remoting_client.invoke_sync(
            RemotingCommand.create_request_command(RequestCode.CONSUMER_SEND_MSG_BACK, header), addr
        )
        if response.code != ResponseCode.SUCCESS:
            raise MQBrokerException(response.code, response.remark)

    def send_message(self, addr: str, header: SendMessageRequestHeader, body: bytes) -> str:
        response = self.remoting_client.invoke_sync(
            RemotingCommand.create_request_command(RequestCode.SEND_MESSAGE, header, body), addr
        )
        if response.code != ResponseCode.SUCCESS:
            raise MQBrokerException(response.code, response.remark)
        return str(response.body)

    def send_heartbeat(self, addr: str, heartbeat_data: HeartbeatData) -> None:
        response = self.remoting_client.invoke_sync(
            RemotingCommand.create_request_command(RequestCode.HEART_BEAT, None, heartbeat_data), addr
        )
        if response.code != ResponseCode.SUCCESS:
            raise MQBrokerException(response.code, response.remark)

    def unregister_client(self, addr: str, client_id: str, consumer_group: str) -> None:
        response = self.remoting_client.invoke_sync(
            RemotingCommand.create_request_command(
                RequestCode.UNREGISTER_CLIENT, UnregisterClientRequestHeader(client_id, consumer_group)
            ),
            addr,
        )
        if response.code != ResponseCode.SUCCESS:
            raise MQBrokerException(response.code, response.remark)

    def get_max_offset(self, addr: str, topic: str, queue_id: int) -> int:
        response = self.remoting_client.invoke_sync(
            RemotingCommand.create_request_command(
                RequestCode.GET_MAX_OFFSET, GetMaxOffsetRequestHeader(topic, queue_id)
            ),
            addr,
        )
        if response.code != ResponseCode.SUCCESS:
            raise MQBrokerException(response.code, response.remark)
        assert isinstance(response.body, int)
        return response.body

    def search_offset(self, addr: str, topic: str, queue_id: int, timestamp: int) -> int:
        response = self.remoting_client.invoke_sync(
            RemotingCommand.create_request_command(
                RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, SearchOffsetRequestHeader(topic, queue_id, timestamp)
            ),
            addr,
        )
        if response.code != ResponseCode.SUCCESS:
            raise MQBrokerException(response.code, response.remark)
        assert isinstance(response.body, int)
        return response.body

    # orderly (R8.2)
    def lock_batch_mq(self, addr: str, request_body: LockBatchRequestBody) -> set[MessageQueue]:
        response = self.remoting_client.invoke_sync(
            RemotingCommand.create_request_command(RequestCode.LOCK_BATCH_MQ, None, request_body), addr
        )
        if response.code != ResponseCode.SUCCESS:
            raise MQBrokerException(response.code, response.remark)
        assert isinstance(response.body, LockBatchResponseBody)
        return set(response.body.lock_ok_mq_set)

    def unlock_batch_mq(self, addr: str, request_body: UnlockBatchRequestBody, oneway: bool) -> None:
        """UNLOCK_BATCH_MQ. A oneway one (the orderly removal's ``unlock(mq, true)``, R8.8) reaches the
        broker at once, ahead of whatever waits on the connection, and is lost when the broker is down:
        the model's connection carries commits and pulls only (docs/spec.md, section client_locks), so the reference
        delivers it synchronously and ignores the answer."""
        request = RemotingCommand.create_request_command(RequestCode.UNLOCK_BATCH_MQ, None, request_body)
        if oneway:
            try:
                self.remoting_client.invoke_sync(request, addr)
            except RemotingException as e:
                log.info("oneway unlockBatchMQ lost: %s", e)
            return
        response = self.remoting_client.invoke_sync(request, addr)
        if response.code != ResponseCode.SUCCESS:
            raise MQBrokerException(response.code, response.remark)


class MQAdminImpl:
    """``MQAdminImpl#maxOffset``/``#searchOffset`` (R10.1): any failure becomes ``MQClientException``."""

    def __init__(self, factory: MQClientInstance) -> None:
        self.factory = factory

    def _addr(self, mq: MessageQueue) -> str:
        addr = self.factory.find_broker_address_in_publish(mq.broker_name)
        if addr is None:
            raise MQClientException(f"The broker[{mq.broker_name}] not exist")
        return addr

    def max_offset(self, mq: MessageQueue) -> int:
        try:
            return self.factory.mq_client_api_impl.get_max_offset(self._addr(mq), mq.topic, mq.queue_id)
        except (RemotingException, MQBrokerException) as e:
            raise MQClientException(f"Invoke Broker[{mq.broker_name}] exception") from e

    def search_offset(self, mq: MessageQueue, timestamp: int) -> int:
        try:
            return self.factory.mq_client_api_impl.search_offset(self._addr(mq), mq.topic, mq.queue_id, timestamp)
        except (RemotingException, MQBrokerException) as e:
            raise MQClientException(f"Invoke Broker[{mq.broker_name}] exception") from e


class ClientRemotingProcessor:
    """``ClientRemotingProcessor``: requests the broker pushes to the client."""

    def __init__(self, factory: MQClientInstance) -> None:
        self.factory = factory

    def process_request(self, request: RemotingCommand) -> None:
        if request.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
            self.factory.rebalance_immediately()  # R9.7
        elif request.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET:
            self.reset_offset(request)

    def reset_offset(self, request: RemotingCommand) -> None:
        """Admin reset: ``ClientRemotingProcessor#resetOffset`` decodes the
        ``ResetOffsetBody`` and calls ``MQClientInstance#resetOffset`` (R3.10a)."""
        body = request.body
        assert isinstance(body, ResetOffsetBody)
        self.factory.reset_offset(body.topic, body.group, dict(body.offset_table))


class ResetOffsetTask:
    """Admin reset: the rest of ``MQClientInstance#resetOffset`` after its 10 s sleep
    (R3.10a steps 4-5): for each mq of ``processQueueTable`` with that topic and an entry in the table,
    ``updateOffset(mq, v, increaseOnly=false)``, ``removeUnnecessaryMessageQueue`` (persist oneway,
    ``removeOffset``) and removal from the table; finally ``resume()``."""

    def __init__(self, consumer: DefaultMQPushConsumerImpl, topic: str, offset_table: dict[MessageQueue, int]) -> None:
        self.consumer = consumer
        self.topic = topic
        self.offset_table = offset_table

    def __call__(self) -> None:
        consumer = self.consumer
        table = consumer.rebalance_impl.process_queue_table
        try:
            for mq in sorted(table):
                pq = table[mq]
                if mq.topic != self.topic or mq not in self.offset_table:
                    continue
                consumer.update_consume_offset(mq, self.offset_table[mq])
                consumer.rebalance_impl.remove_unnecessary_message_queue(mq, pq)
                del table[mq]
                consumer.rebalance_impl.balanced_cid_all = None  # (abstraction: an allocated queue is missing)
        finally:
            consumer.resume()


class MQClientInstance:
    """One client process's ``MQClientInstance``."""

    def __init__(
        self,
        client_id: str,
        clock: VirtualClock,
        connection: ClientConnection,
        topic_route_table: dict[str, TopicRouteData],
        compat: SpecCompat,
        version: MQVersion | None = None,
        other_connections: list[ClientConnection] | None = None,
    ) -> None:
        """``connection`` is the wire to the master; ``other_connections`` (slaves) the wires to the other
        addresses of the broker name, which the network keeps like the master's."""
        # Imported here: the pull and rebalance services import this module for typing.
        from rmqspec.reference.default_mq_push_consumer_impl import PullMessageService
        from rmqspec.reference.rebalance_impl import RebalanceService

        self.client_id = client_id
        self.clock = clock
        self.compat = compat
        self.version = version if version is not None else MQVersion()  # the client library's release line
        self.connection = connection
        self.remoting_client = NettyRemotingClient(connection, other_connections)
        self.mq_client_api_impl = MQClientAPIImpl(self.remoting_client)
        self.mq_admin_impl = MQAdminImpl(self)
        self.client_remoting_processor = ClientRemotingProcessor(self)
        self.topic_route_table = topic_route_table
        self.consumer_table: dict[str, DefaultMQPushConsumerImpl] = {}
        self.scheduled_executor_service = ScheduledExecutorService(clock, "MQClientFactoryScheduledThread")
        self.pull_message_service: PullMessageService = PullMessageService(self)
        self.rebalance_service: RebalanceService = RebalanceService(self)
        self.started = False

    # --- life cycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        if self.started:
            return
        for channel in self.remoting_client.connections():  # slaves: the slave's broker notifies too
            channel.client_processor = self.client_remoting_processor
        self.start_scheduled_task()
        self.pull_message_service.start()
        self.rebalance_service.start()
        self.started = True

    def start_scheduled_task(self) -> None:
        """R4.1 (the name-server, route and thread-pool tasks are not modelled)."""
        self.scheduled_executor_service.schedule_at_fixed_rate(
            HEARTBEAT_TASK_NAME, self._heartbeat_task, HEARTBEAT_INITIAL_DELAY, HEARTBEAT_BROKER_INTERVAL
        )
        self.scheduled_executor_service.schedule_at_fixed_rate(
            PERSIST_TASK_NAME,
            self.persist_all_consumer_offset,
            PERSIST_CONSUMER_OFFSET_INITIAL_DELAY,
            PERSIST_CONSUMER_OFFSET_INTERVAL,
        )

    def _heartbeat_task(self) -> None:
        self.send_heartbeat_to_all_broker_with_lock()

    def shutdown(self) -> None:
        """Only once no consumer uses the instance any more (R4.4 step 4)."""
        if self.consumer_table or not self.started:
            return
        self.pull_message_service.shutdown()
        self.scheduled_executor_service.shutdown()
        self.remoting_client.shutdown()
        self.rebalance_service.shutdown()
        self.started = False

    # --- registry -----------------------------------------------------------------------------------

    def register_consumer(self, group: str, consumer: DefaultMQPushConsumerImpl) -> bool:
        if group in self.consumer_table:
            return False
        self.consumer_table[group] = consumer
        return True

    def unregister_consumer(self, group: str) -> None:
        """Forget the consumer and send UNREGISTER_CLIENT to every address of ``brokerAddrTable`` (R4.4
        step 3; with a slave, to it too)."""
        self.consumer_table.pop(group, None)
        for addr in self._broker_addrs():
            try:
                self.mq_client_api_impl.unregister_client(addr, self.client_id, group)
            except (RemotingException, MQBrokerException) as e:
                log.warning("unregister client exception from broker: %s %s", addr, e)

    @property
    def broker_addr_table(self) -> dict[str, dict[int, str]]:
        """``brokerAddrTable``: broker name to (brokerId to address), as the routes give it now."""
        table: dict[str, dict[int, str]] = {}
        for route in self.topic_route_table.values():
            table.setdefault(route.broker_name, {}).update(route.addrs())
        return {name: dict(sorted(addrs.items())) for name, addrs in table.items()}

    def _broker_addrs(self) -> list[str]:
        """Every address of ``brokerAddrTable``, each broker name's in brokerId order (HashMap order)."""
        return [addr for addrs in self.broker_addr_table.values() for addr in addrs.values()]

    # --- routes -------------------------------------------------------------------------------------

    def topic_subscribe_info(self, topic: str) -> set[MessageQueue] | None:
        """``topicRouteData2TopicSubscribeInfo``: every readable queue of the topic (R9.2)."""
        route = self.topic_route_table.get(topic)
        if route is None:
            return None
        return {MessageQueue(topic, route.broker_name, q) for q in range(route.read_queue_nums)}

    def find_broker_address_in_subscribe(
        self, broker_name: str, broker_id: int = MASTER_ID, only_this_broker: bool = False
    ) -> FindBrokerResult | None:
        """``findBrokerAddressInSubscribe`` (R2.4, R2.5, R5.3): ``broker_id``'s address; for a slave id,
        also the next id; unless ``only_this_broker``, any address of the name (the first in the
        table), e.g. its slave's while the route lacks the master (slaves)."""
        table = self.broker_addr_table.get(broker_name)
        if not table:
            return None
        addr = table.get(broker_id)
        slave = broker_id != MASTER_ID
        if addr is None and slave:
            addr = table.get(broker_id + 1)
        if addr is None and not only_this_broker:
            first_id, addr = next(iter(table.items()))
            slave = first_id != MASTER_ID
        return None if addr is None else FindBrokerResult(addr, slave)

    def find_broker_address_in_publish(self, broker_name: str) -> str | None:
        """``findBrokerAddressInPublish``: the master's address only."""
        return self.broker_addr_table.get(broker_name, {}).get(MASTER_ID)

    def find_broker_addr_by_topic(self, topic: str) -> str | None:
        """``findBrokerAddrByTopic``: the route's one broker, ``selectBrokerAddr`` (the master's address
        while the route has it, else its slave's)."""
        route = self.topic_route_table.get(topic)
        return None if route is None else route.select_broker_addr()

    # --- tasks --------------------------------------------------------------------------------------

    def persist_all_consumer_offset(self) -> None:
        """R4.1: ``persistConsumerOffset`` of every registered consumer."""
        for consumer in list(self.consumer_table.values()):
            consumer.persist_consumer_offset()

    def send_heartbeat_to_all_broker_with_lock(self) -> None:
        heartbeat = HeartbeatData(self.client_id, [c.consumer_data() for c in self.consumer_table.values()])
        if not heartbeat.consumer_data_set:
            return
        for addr in self._broker_addrs():  # sendHeartbeatToAllBroker: master and slave alike (slaves)
            try:
                self.mq_client_api_impl.send_heartbeat(addr, heartbeat)
            except (RemotingException, MQBrokerException) as e:
                log.info("send heart beat to broker[%s] exception: %s", addr, e)

    def find_consumer_id_list(self, topic: str, group: str) -> list[str] | None:
        """R9.3 step 2: any error gives None, including the broker's SYSTEM_ERROR "no consumer for
        this group" (R11.0): the rebalance then keeps every pq of the topic."""
        addr = self.find_broker_addr_by_topic(topic)
        if addr is None:
            return None
        try:
            return self.mq_client_api_impl.get_consumer_id_list_by_group(addr, group)
        except (MQBrokerException, RemotingException) as e:
            log.warning("getConsumerIdListByGroup exception, %s %s", addr, e)
            return None

    def rebalance_immediately(self) -> None:
        self.rebalance_service.wakeup()

    def do_rebalance(self) -> bool:
        """Every consumer's ``tryRebalance``; 5.x's balanced result (R4.2)."""
        balanced = True
        for consumer in list(self.consumer_table.values()):
            if not consumer.do_rebalance():
                balanced = False
        return balanced

    def next_deadlines(self) -> list[int]:
        """Every time at which something of this process becomes due (for the clock's next tick)."""
        times = list(self.scheduled_executor_service.due_times())
        if not self.rebalance_service.dead:  # faults (TaskDies): a dead rebalance thread waits for nothing
            times.append(self.rebalance_service.due_time())
        times.extend(self.pull_message_service.ready_times())
        for consumer in self.consumer_table.values():
            times.extend(consumer.consume_message_service.ready_times())
        times.extend(due for _, due in self._clean_expire_msg_times())
        return times

    def timers(self) -> list[tuple[str, int]]:
        """The timers that must fire on time: (name, due)."""
        out = [(f"client {self.client_id}: {name}", due) for name, due in self._task_times()]
        out.extend(self._fix_offset_times())  # OFFSET_ILLEGAL
        out.extend(self._orderly_task_times())  # orderly consume loop
        out.extend(self._clean_expire_msg_times())  # R6.8
        sleeping = self.sleeping_reset()  # admin reset: the 10 s sleep ends on time
        if sleeping is not None:
            out.append((f"client {self.client_id}: resetOffset sleep", sleeping[0]))
        if not self.rebalance_service.dead:  # faults (TaskDies)
            out.append((f"client {self.client_id}: rebalance wait", self.rebalance_service.wait_deadline))
        return out

    def _task_times(self) -> list[tuple[str, int]]:
        return [
            (name, due)
            for name in (PERSIST_TASK_NAME, HEARTBEAT_TASK_NAME, LOCK_MQ_TASK_NAME)
            if (due := self.scheduled_executor_service.due_time(name)) is not None
        ]

    def _clean_expire_msg_times(self) -> list[tuple[str, int]]:
        """R6.8: each concurrent consumer's cleanExpireMsg task, on the consume service's own executor."""
        out: list[tuple[str, int]] = []
        for consumer in self.consumer_table.values():
            due = consumer.consume_message_service.clean_expire_msg_due()
            if due is not None:
                out.append((f"client {self.client_id}: cleanExpireMsg", due))
        return out

    def _orderly_task_times(self) -> list[tuple[str, int]]:
        """Orderly consume loop: the re-lock tasks (R8.5) and 4.9.8's delayed unlocks (R8.8) are timers."""
        return [
            (f"client {self.client_id}: {f.name}", f.due)
            for f in self.scheduled_executor_service.tasks()
            if f.name.startswith((TRY_LOCK_LATER_TASK, UNLOCK_DELAY_TASK))
        ]

    def _fix_offset_times(self) -> list[tuple[str, int]]:
        """The 4.9.8 OFFSET_ILLEGAL tasks (R5.7) are timers too: they fire on time."""
        tasks = self.scheduled_executor_service.tasks()
        return [(f"client {self.client_id}: {f.name}", f.due) for f in tasks if f.name.startswith(FIX_OFFSET_TASK)]

    # admin reset
    def reset_offset(self, topic: str, group: str, offset_table: dict[MessageQueue, int]) -> None:
        """``MQClientInstance#resetOffset`` (4.9.8, ``synchronized``; push consumers only), R3.10a steps
        1-3: ``suspend()``; every pq of that topic whose mq is in the table is set dropped and
        cleared (it stays in ``processQueueTable``); then the 10 s sleep, which is the
        :class:`ResetOffsetTask` due 10 s from now. The driver delivers no second push while one
        sleeps: the method is synchronized, so the remoting thread would block."""
        consumer = self.consumer_table.get(group)
        if consumer is None:
            log.info("[reset-offset] consumer does not exist. group=%s", group)
            return
        if self.sleeping_reset() is not None:
            raise RuntimeError("resetOffset is synchronized: a reset already sleeps")
        consumer.suspend()
        for mq, pq in consumer.rebalance_impl.process_queue_table.items():
            if mq.topic == topic and mq in offset_table and not pq.dropped:
                pq.dropped = True
                pq.clear()
                consumer.rebalance_impl.balanced_cid_all = None  # (abstraction: an allocated queue is missing)
        name = f"{RESET_OFFSET_TASK}{topic}@{group}"
        self.scheduled_executor_service.schedule(
            name, ResetOffsetTask(consumer, topic, offset_table), RESET_OFFSET_SLEEP
        )

    def sleeping_reset(self) -> tuple[int, ResetOffsetTask] | None:
        """Admin reset: the reset that sleeps now, with the end of its sleep."""
        for f in self.scheduled_executor_service.tasks():
            if isinstance(f.task, ResetOffsetTask):
                return f.due, f.task
        return None

    def execute_task_later(self, name: str, task: Callable[[], None], delay: int) -> None:
        self.scheduled_executor_service.schedule(name, task, delay)
