"""A name server and a broker on 127.0.0.1, speaking RocketMQ 4.x remoting, backed by the reference.

One asyncio loop serves two listeners: the name server (GET_ROUTEINTO_BY_TOPIC, GET_BROKER_CLUSTER_INFO)
and the broker. Every broker request is decoded from its wire header into the reference's typed
header and handed to the reference's processors (``rmqspec.reference.broker``: ConsumerManageProcessor,
PullMessageProcessor, SendMessageProcessor, ClientManageProcessor, AdminBrokerProcessor, the
ConsumerManager with NOTIFY_CONSUMER_IDS_CHANGED), whose answer is encoded back; nothing of the
broker's behaviour is re-implemented here. What the reference leaves to its driver is done here on
the wall clock: ``PullRequestHoldService`` (a held pull is woken when a message arrives on its queue
or when its ``suspendTimeoutMillis`` passes, then runs again without suspension or commit), the
broker's scheduled offset flush (every 5 s after 10 s) and the schedule service's deliveries (the
reference's timers, checked every ``TICK_SECONDS``).

Departures from a real 4.9.8 deployment, each for a documented reason:

* A topic exists from its first route lookup or send (as with ``autoCreateTopicEnable``, without the
  TBW102 detour), with ``queues`` queues; ``%RETRY%<group>`` with the group's retry queue count.
* A compressed message body (sys flag bit 0) is inflated when stored and served uncompressed: the
  reference stores no sys flag, and a send-back copy must stay readable.

Unknown request codes are logged once per code and answered as 4.9.8's ``NettyRemotingAbstract``
does: REQUEST_CODE_NOT_SUPPORTED with the remark `` request type <code> not supported``.

The broker also writes its side of the history (``history_log``), judges each commit it stores where
it alone can (below zero, beyond the queue's end), and runs the fault script (``faults``): a crash and
restart from disk, retention of a queue's head, a consumer list that leaves a member out, requests answered
with an error, never answered or answered late, dropped connections, an admin offset reset.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rmqspec.cluster import wire
from rmqspec.cluster.faults import ANY, Fault
from rmqspec.cluster.history_log import BrokerHistory, consumer_name
from rmqspec.reference.broker import BrokerController, BrokerHost, TopicConfig
from rmqspec.reference.compat import SpecCompat
from rmqspec.reference.consumer_offset_manager import split_topic_at_group
from rmqspec.reference.message import (
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    MessageExt,
)
from rmqspec.reference.message_queue import RETRY_GROUP_TOPIC_PREFIX, MessageQueue
from rmqspec.reference.mq_version import MQVersion
from rmqspec.reference.protocol import (
    ConsumerData,
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
    SubscriptionData,
    UnlockBatchRequestBody,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from rmqspec.reference.remoting import ClientConnection
from rmqspec.reference.scheduler import VirtualClock

log = logging.getLogger("rmqspec.cluster")

BROKER_NAME = "broker-a"
CLUSTER_NAME = "DefaultCluster"
DEFAULT_QUEUES = 4  # BrokerConfig.defaultTopicQueueNums
PERM_READ_WRITE = 6  # PermName.PERM_READ | PERM_WRITE
TICK_SECONDS = 0.05  # how often held pulls, the offset flush and scheduled deliveries are looked at

# RequestCode values of RocketMQ 4.9.8 beyond those the reference names.
GET_MIN_OFFSET = 31
GET_ROUTEINTO_BY_TOPIC = 105
GET_BROKER_CLUSTER_INFO = 106
SEND_MESSAGE_V2 = 310
SEND_BATCH_MESSAGE = 320
REQUEST_CODE_NOT_SUPPORTED = 3  # ResponseCode
MESSAGE_ILLEGAL = 13  # ResponseCode
# SendMessageProcessor#handlePutMessageResult's remark for MESSAGE_ILLEGAL (maxMessageSize's default, 4 MiB)
BATCH_ILLEGAL_REMARK = (
    "the message is illegal, maybe msg body or properties length not matched. "
    "msg body length limit 4194304B, msg properties length limit 32KB."
)
PROPERTY_UNIQ_KEY = "UNIQ_KEY"  # MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: the producer's message id

# SendMessageRequestHeaderV2's one-letter fields (SendMessageRequestHeaderV2#createSendMessageRequestHeaderV1).
SEND_V2_FIELDS = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "maxReconsumeTimes",
    "m": "batch",
}
MESSAGE_MODELS = {0: "BROADCASTING", 1: "CLUSTERING"}  # the C++ client sends the enum's ordinal


class BadRequest(Exception):
    """A request whose header or body cannot be read: answered SYSTEM_ERROR, as the Java broker answers
    a RemotingCommandException from decodeCommandCustomHeader."""


def _field(ext: dict[str, Any], name: str, default: Any = None) -> Any:
    value = ext.get(name, default)
    if value is None:
        raise BadRequest(f"the custom field <{name}> is null")
    return value


def _int(ext: dict[str, Any], name: str, default: int | None = None) -> int:
    value = _field(ext, name, default)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise BadRequest(f"the custom field <{name}> is not an integer: {value!r}") from None


def _str(ext: dict[str, Any], name: str, default: str | None = None) -> str:
    return str(_field(ext, name, default))


def _json_body(body: bytes, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise BadRequest(f"{what} body is not JSON: {err}") from None
    if not isinstance(obj, dict):
        raise BadRequest(f"{what} body is not a JSON object")
    return obj


def _mq_set(obj: dict[str, Any]) -> set[MessageQueue]:
    try:
        return {MessageQueue(str(m["topic"]), str(m["brokerName"]), int(m["queueId"])) for m in obj.get("mqSet") or []}
    except (KeyError, TypeError, ValueError) as err:
        raise BadRequest(f"mqSet is malformed: {err}") from None


def _mq_json(mq: MessageQueue) -> dict[str, Any]:
    return {"brokerName": mq.broker_name, "queueId": mq.queue_id, "topic": mq.topic}


@dataclass
class HeldPull:
    """A pull the broker holds (PullRequestHoldService): answered on arrival or at ``deadline`` (ms)."""

    channel: Channel
    request: RemotingCommand
    topic: str
    queue_id: int
    queue_offset: int
    deadline: float
    swallow: bool = False  # request-timeout with applied: run, never answered


@dataclass(eq=False)
class Channel:
    """One TCP connection to the broker, with the reference's view of it."""

    peer: str
    writer: asyncio.StreamWriter
    connection: ClientConnection
    open: bool = True
    held: list[HeldPull] = field(default_factory=list)
    # (topic, queue) answered QUERY_NOT_FOUND on this channel and not pulled since (consumeFromWhere)
    unpositioned: set[tuple[str, int]] = field(default_factory=set)
    # (topic, queue) whose QUERY_CONSUMER_OFFSET a fault failed on this channel: the offset the broker held
    query_failed: dict[tuple[str, int], int] = field(default_factory=dict)
    names: set[str] = field(default_factory=set)  # the instance names its heartbeats gave (consumer_name)
    opened: float = field(default_factory=lambda: time.time() * 1000)

    def send(self, data: bytes) -> None:
        if self.open and not self.writer.is_closing():
            self.writer.write(data)


@dataclass(eq=False)
class ArmedFault:
    """A request fault that fired: it hits the next ``left`` matching requests, or those until ``until`` (ms)."""

    fault: Fault
    entry: dict[str, Any]  # its line in the closing JSON
    left: int = 0
    until: float = 0.0

    def matches(self, channel: Channel, code: int) -> bool:
        return code in self.fault.codes and (not self.fault.consumer or self.fault.consumer in channel.names)


def scaled_delay_levels(table: dict[int, int], speed: float) -> dict[int, int]:
    """``--speed``: each delay level's milliseconds divided by ``speed`` (at least 1 ms), as a broker.conf
    ``messageDelayLevel`` of shorter levels would set them; the levels and their order stay."""
    return {level: max(1, round(ms / speed)) for level, ms in table.items()}


_push_opaque = itertools.count(1 << 30)  # opaques of the broker's own requests (RESET_CONSUMER_CLIENT_OFFSET)


class _ChannelNotifier:
    """The reference's ClientRequestProcessor for a channel: NOTIFY_CONSUMER_IDS_CHANGED goes out oneway."""

    def __init__(self, server: ClusterServer, channel: Channel) -> None:
        self.server, self.channel = server, channel

    def process_request(self, request: RemotingCommand) -> None:
        header = request.header
        ext: dict[str, str] = {}
        if isinstance(header, GetConsumerListByGroupRequestHeader):
            ext["consumerGroup"] = header.consumer_group
        self.server.stats["notifications"] = self.server.stats.get("notifications", 0) + 1
        self.channel.send(wire.encode_frame(request.code, request.opaque, wire.FLAG_ONEWAY, ext))


class ClusterServer:
    """The name server and the broker. ``start`` binds both; ``serve`` runs until ``stop`` is set."""

    def __init__(
        self,
        store_dir: Path,
        version: str = "4.9.8",
        history: BrokerHistory | None = None,
        queues: int = DEFAULT_QUEUES,
        namesrv_port: int = 9876,
        broker_port: int = 10911,
        faults: list[Fault] | None = None,
        speed: float = 1.0,
    ) -> None:
        self.store_dir = store_dir
        self.speed = speed  # the schedule's delay levels run this many times faster (scaled_delay_levels)
        self.version = version
        self.history = history if history is not None else BrokerHistory(None, version, None)
        self.queues = queues
        self.namesrv_port = namesrv_port
        self.broker_port = broker_port
        self.clock = VirtualClock(int(time.time() * 1000))
        self.host: BrokerHost | None = None
        self.channels: dict[ClientConnection, Channel] = {}
        self.held: list[HeldPull] = []
        self.members: set[str] = set()  # the history group's clientIds as last seen
        self.unsupported_logged: set[int] = set()
        self.stats: dict[str, int] = {}
        self._recorded = 0  # commit-log entries already written to the history
        self.faults = list(faults or [])
        self.faults_done: list[dict[str, Any]] = []
        self.started = time.monotonic()
        self.restart_at: float | None = None  # ms: when a crashed broker starts again
        # clientIds registered when the broker crashed: their re-registration is no join, and their
        # absence while they have not re-registered no leave (a client does not restart with the broker)
        self.awaiting: set[str] = set()
        self._crashed_table: dict[str, dict[int, int]] = {}
        self.armed: list[ArmedFault] = []  # request-error, request-timeout, slow-replies that fired
        # (group, topic, queue) -> the offset an admin reset sent the group's consumers, and its summary line
        self.reset_pending: dict[tuple[str, str, int], tuple[int, dict[str, Any]]] = {}
        # drop-connection: its summary line, the names it cut off and when; a heartbeat on a later connection
        # that names one of them is a reconnection
        self.drop_watch: list[tuple[dict[str, Any], set[str], float]] = []
        self.request_codes: dict[int, int] = {}
        self._servers: list[asyncio.Server] = []
        self._writers: set[asyncio.StreamWriter] = set()

    # --- life ------------------------------------------------------------------------------------

    async def start(self) -> None:
        ns = await asyncio.start_server(self._serve_namesrv, "127.0.0.1", self.namesrv_port)
        broker = await asyncio.start_server(self._serve_broker, "127.0.0.1", self.broker_port)
        self._servers = [ns, broker]
        self.namesrv_port = ns.sockets[0].getsockname()[1]
        self.broker_port = broker.sockets[0].getsockname()[1]
        self.host = BrokerHost(
            self.clock,
            self.store_dir,
            BROKER_NAME,
            {},
            SpecCompat.faithful(),
            version=MQVersion(self.version),
            broker_addr=self.broker_addr,
        )
        store = self.host.message_store
        store.delay_level_table = scaled_delay_levels(store.delay_level_table, self.speed)
        self.host.start()

    @property
    def broker_addr(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    async def serve(self, stop: asyncio.Event, duration: float | None = None) -> None:
        """Run the timers until ``stop`` is set or ``duration`` seconds passed."""
        ends = None if duration is None else time.monotonic() + duration
        while not stop.is_set():
            if ends is not None and time.monotonic() >= ends:
                break
            self.tick()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), TICK_SECONDS)

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        for writer in list(self._writers):
            writer.close()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2.0)
        self.history.close()

    # --- time ------------------------------------------------------------------------------------

    def _advance(self) -> int:
        now = max(int(time.time() * 1000), self.clock.now())
        self.clock.advance_to(now)
        return now

    def tick(self) -> None:
        """Run what is due: the controller's scheduled tasks (the offset flush), the schedule service's
        deliveries, and held pulls whose time is up."""
        now = self._advance()
        self._fire_faults(now)
        assert self.host is not None
        if self.host.controller is None:
            if self.restart_at is None or now < self.restart_at:
                return
            self._start_broker()
        controller = self._controller()
        executor = controller.scheduled_executor_service
        for task in executor.tasks():
            if task.due <= now:
                executor.run_due(task.name)
        store = controller.message_store
        service = store.schedule_message_service
        delivered = False
        while (due := service.next_deliver_timestamp()) is not None and due <= now:
            _, scheduled = service.pending()[0]
            self._record_stored()
            service.deliver_due_message()
            self._record_stored(origin=scheduled)
            delivered = True
        if delivered:
            self._wake_arrivals()
        for held in [h for h in self.held if h.deadline <= now]:
            self._answer_held(held)

    def _controller(self) -> BrokerController:
        assert self.host is not None
        return self.host.require_controller()

    # --- connections -----------------------------------------------------------------------------

    async def _serve_namesrv(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._serve(reader, writer, "name server", self._namesrv_request, None)

    async def _serve_broker(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self.host is not None
        peer = _peer(writer)
        if self.host.controller is None:
            log.warning("broker: closing %s: the broker is down (fault)", peer)
            writer.close()
            return
        channel = Channel(peer, writer, self.host.connect(peer))
        self.stats["broker_connections"] = self.stats.get("broker_connections", 0) + 1
        channel.connection.client_processor = _ChannelNotifier(self, channel)
        self.channels[channel.connection] = channel
        try:
            await self._serve(reader, writer, "broker", lambda f: self._broker_request(channel, f), channel)
        finally:
            self._channel_closed(channel)

    async def _serve(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        role: str,
        handle: Callable[[wire.Frame], bytes | None],
        channel: Channel | None,
    ) -> None:
        peer = _peer(writer)
        self._writers.add(writer)
        try:
            while True:
                frame = await wire.read_frame(reader)
                if frame is None:
                    break
                if frame.is_response:
                    continue  # a client's answer to a broker-initiated request: nothing waits for it
                self.request_codes[frame.code] = self.request_codes.get(frame.code, 0) + 1
                reply = handle(frame)
                if reply is not None and not frame.is_oneway:
                    writer.write(reply)
                    await writer.drain()
        except wire.FrameError as err:
            log.warning("%s: closing %s: %s", role, peer, err)
        except asyncio.IncompleteReadError as err:
            log.warning("%s: closing %s: the stream ended inside a frame (%d bytes read)", role, peer, len(err.partial))
        except (ConnectionError, OSError) as err:
            log.warning("%s: closing %s: %s", role, peer, err)
        finally:
            self._writers.discard(writer)
            if channel is not None:
                channel.open = False
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _channel_closed(self, channel: Channel) -> None:
        channel.open = False
        self.held = [h for h in self.held if h.channel is not channel]
        self.channels.pop(channel.connection, None)
        if self.host is not None and self.host.controller is not None:
            self._advance()
            self.host.controller.consumer_manager.do_channel_close_event(channel.connection)
            self._record_membership()
        with contextlib.suppress(ValueError):
            assert self.host is not None
            self.host.connections.remove(channel.connection)

    # --- name server -----------------------------------------------------------------------------

    def _namesrv_request(self, frame: wire.Frame) -> bytes:
        if frame.code == GET_ROUTEINTO_BY_TOPIC:
            try:
                topic = _str(frame.ext_fields, "topic")
            except BadRequest as err:
                return _response(frame, ResponseCode.SYSTEM_ERROR, str(err))
            config = self._ensure_topic(topic)
            return _response(frame, ResponseCode.SUCCESS, body=self._route_body(config).encode("utf-8"))
        if frame.code == GET_BROKER_CLUSTER_INFO:
            name, cluster = json.dumps(BROKER_NAME), json.dumps(CLUSTER_NAME)
            body = f'{{"brokerAddrTable":{{{name}:{self._broker_data()}}},"clusterAddrTable":{{{cluster}:[{name}]}}}}'
            return _response(frame, ResponseCode.SUCCESS, body=body.encode("utf-8"))
        return self._not_supported(frame, "name server")

    def _broker_data(self) -> str:
        """BrokerData as fastjson writes it: properties in alphabetical order, the Long key unquoted."""
        addr, name, cluster = json.dumps(self.broker_addr), json.dumps(BROKER_NAME), json.dumps(CLUSTER_NAME)
        return f'{{"brokerAddrs":{{0:{addr}}},"brokerName":{name},"cluster":{cluster}}}'

    def _route_body(self, config: TopicConfig) -> str:
        """TopicRouteData as fastjson writes it (RemotingSerializable#toJson)."""
        queue = (
            f'{{"brokerName":{json.dumps(BROKER_NAME)},"perm":{PERM_READ_WRITE},'
            f'"readQueueNums":{config.read_queue_nums},"topicSysFlag":0,"writeQueueNums":{config.write_queue_nums}}}'
        )
        return f'{{"brokerDatas":[{self._broker_data()}],"filterServerTable":{{}},"queueDatas":[{queue}]}}'

    def _ensure_topic(self, topic: str) -> TopicConfig:
        assert self.host is not None
        durable = self.host.durable  # on the broker's disk: the name server answers while the broker is down
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            group = durable.find_subscription_group_config(topic[len(RETRY_GROUP_TOPIC_PREFIX) :])
            config: TopicConfig = durable.create_topic_in_send_message_back_method(topic, group.retry_queue_nums)
            return config
        if topic not in durable.topic_config_table:
            durable.topic_config_table[topic] = TopicConfig(topic, self.queues, self.queues)
        config = durable.topic_config_table[topic]
        return config

    def _not_supported(self, frame: wire.Frame, role: str) -> bytes:
        if frame.code not in self.unsupported_logged:
            self.unsupported_logged.add(frame.code)
            log.warning("%s: request code %d not supported (answered REQUEST_CODE_NOT_SUPPORTED)", role, frame.code)
        return _response(frame, REQUEST_CODE_NOT_SUPPORTED, f" request type {frame.code} not supported")

    # --- broker ----------------------------------------------------------------------------------

    def _broker_request(self, channel: Channel, frame: wire.Frame) -> bytes | None:
        self._advance()
        armed = self._armed_for(channel, frame.code, ("request-error", "request-timeout"))
        if armed is not None:
            reply = self._faulted_request(channel, frame, armed)
        else:
            reply = self._process(channel, frame)
        if self.faults:  # a trigger this request met fires once the reply is written, not a tick later
            asyncio.get_running_loop().call_soon(self._fire_faults_now)
        if reply is not None and not frame.is_oneway:
            slow = self._armed_for(channel, frame.code, ("slow-replies",))
            if slow is not None:
                self._send_later(channel, reply, slow)
                return None
        return reply

    def _process(self, channel: Channel, frame: wire.Frame) -> bytes | None:
        controller = self._controller()
        self._record_stored()
        before = len(controller.message_store.commit_log)
        try:
            reply = self._dispatch(channel, frame)
        except BadRequest as err:
            log.warning("broker: request %d from %s refused: %s", frame.code, channel.peer, err)
            reply = _response(frame, ResponseCode.SYSTEM_ERROR, str(err))
        if len(controller.message_store.commit_log) > before:
            self._record_stored()
            self._wake_arrivals()
        return reply

    def _fire_faults_now(self) -> None:
        self._fire_faults(self._advance())

    def _dispatch(self, channel: Channel, frame: wire.Frame) -> bytes | None:
        c = self._controller()
        ext, code = frame.ext_fields, frame.code
        conn = channel.connection
        if code in (RequestCode.SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE):
            return self._send_message(frame)
        if code == RequestCode.PULL_MESSAGE:
            return self._pull(channel, frame)
        if code == RequestCode.HEART_BEAT:
            beat = self._heartbeat(frame.body)
            self._named(channel, consumer_name(beat.client_id))
            request = RemotingCommand(code, None, beat, opaque=frame.opaque)
            response = c.client_manage_processor.heart_beat(conn, request)
            self._record_membership()
            return _encode(frame, response)
        if code == RequestCode.UNREGISTER_CLIENT:
            group = ext.get("consumerGroup")
            if group:
                header = UnregisterClientRequestHeader(_str(ext, "clientID"), str(group))
                c.client_manage_processor.unregister_client(conn, RemotingCommand(code, header))
                self.awaiting.discard(header.client_id)  # it left before re-registering after a crash
                self._record_membership()
            return _response(frame, ResponseCode.SUCCESS)
        if code == RequestCode.GET_CONSUMER_LIST_BY_GROUP:
            header_list = GetConsumerListByGroupRequestHeader(_str(ext, "consumerGroup"))
            response = c.consumer_manage_processor.get_consumer_list_by_group(RemotingCommand(code, header_list))
            return _encode(frame, response)
        if code == RequestCode.QUERY_CONSUMER_OFFSET:
            header_query = QueryConsumerOffsetRequestHeader(
                _str(ext, "consumerGroup"), _str(ext, "topic"), _int(ext, "queueId")
            )
            if "setZeroIfNotFound" in ext:
                header_query.set_zero_if_not_found = str(ext["setZeroIfNotFound"]).lower() == "true"
            response = c.consumer_manage_processor.query_consumer_offset(RemotingCommand(code, header_query))
            if response.code == ResponseCode.QUERY_NOT_FOUND and header_query.consumer_group == self.history.group:
                channel.unpositioned.add((header_query.topic, header_query.queue_id))
            return _encode(frame, response)
        if code == RequestCode.UPDATE_CONSUMER_OFFSET:
            header_update = UpdateConsumerOffsetRequestHeader(
                _str(ext, "consumerGroup"), _str(ext, "topic"), _int(ext, "queueId"), _int(ext, "commitOffset")
            )
            with self._commit_watch(channel, header_update.consumer_group, header_update.topic, header_update.queue_id):
                response = c.consumer_manage_processor.update_consumer_offset(
                    conn, RemotingCommand(code, header_update)
                )
            return _encode(frame, response)
        if code == RequestCode.GET_MAX_OFFSET:
            header_max = GetMaxOffsetRequestHeader(_str(ext, "topic"), _int(ext, "queueId"))
            response = c.admin_broker_processor.get_max_offset(RemotingCommand(code, header_max))
            return _response(frame, response.code, response.remark, {"offset": str(response.body)})
        if code == GET_MIN_OFFSET:
            offset = c.message_store.get_min_offset_in_queue(_str(ext, "topic"), _int(ext, "queueId"))
            return _response(frame, ResponseCode.SUCCESS, None, {"offset": str(offset)})
        if code == RequestCode.SEARCH_OFFSET_BY_TIMESTAMP:
            header_search = SearchOffsetRequestHeader(_str(ext, "topic"), _int(ext, "queueId"), _int(ext, "timestamp"))
            response = c.admin_broker_processor.search_offset_by_timestamp(RemotingCommand(code, header_search))
            return _response(frame, response.code, response.remark, {"offset": str(response.body)})
        if code == RequestCode.CONSUMER_SEND_MSG_BACK:
            group = _str(ext, "group")
            retry_max = c.durable.find_subscription_group_config(group).retry_max_times
            header_back = ConsumerSendMsgBackRequestHeader(
                _int(ext, "offset"),
                group,
                _int(ext, "delayLevel", 0),
                str(ext.get("originMsgId", "")),
                str(ext.get("originTopic", "")),
                _int(ext, "maxReconsumeTimes", retry_max),
            )
            original = c.message_store.look_message_by_offset(header_back.offset)
            response = c.send_message_processor.consumer_send_msg_back(RemotingCommand(code, header_back))
            self._record_stored(origin=original)
            return _encode(frame, response)
        if code in (RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ):
            obj = _json_body(frame.body, "lock batch")
            group, client_id = _str(obj, "consumerGroup"), _str(obj, "clientId")
            if code == RequestCode.LOCK_BATCH_MQ:
                lock = LockBatchRequestBody(group, client_id, _mq_set(obj))
                response = c.admin_broker_processor.lock_batch_mq(RemotingCommand(code, None, lock))
                assert isinstance(response.body, LockBatchResponseBody)
                body = json.dumps({"lockOKMQSet": [_mq_json(mq) for mq in sorted(response.body.lock_ok_mq_set)]})
                return _response(frame, response.code, response.remark, body=body.encode("utf-8"))
            unlock = UnlockBatchRequestBody(group, client_id, _mq_set(obj))
            response = c.admin_broker_processor.unlock_batch_mq(RemotingCommand(code, None, unlock))
            return _encode(frame, response)
        return self._not_supported(frame, "broker")

    @contextlib.contextmanager
    def _commit_watch(self, channel: Channel, group: str, topic: str, queue_id: int) -> Iterator[None]:
        """Records a commit event when the group's offset of the queue changed inside the block."""
        table = self._controller().consumer_offset_manager.offset_table
        key = f"{topic}@{group}"  # ConsumerOffsetManager's TOPIC_GROUP_SEPARATOR
        before = table.get(key, {}).get(queue_id)
        yield
        after = table.get(key, {}).get(queue_id)
        if after != before:
            self.stats["commits"] = self.stats.get("commits", 0) + 1
            self._judge_commit_live(channel, group, topic, queue_id, after)
            cause: dict[str, str] = {}
            pending = self.reset_pending.get((group, topic, queue_id))
            if pending is not None and pending[0] == after:  # a consumer applying an admin reset (R3.10a)
                del self.reset_pending[(group, topic, queue_id)]
                pending[1]["reset_commits"] = pending[1].get("reset_commits", 0) + 1
                cause["cause"] = "reset"
            if group == self.history.group:
                consumer = self._consumer_of(channel, group)
                self.history.event("commit", consumer=consumer, topic=topic, queue=queue_id, offset=after, **cause)
                if cause:  # applying a reset, a client drops the queue's pq and its next rebalance makes a new one
                    self.history.event("own", consumer=consumer, topic=topic, queue=queue_id, owned=False)
                    self.history.event("own", consumer=consumer, topic=topic, queue=queue_id, owned=True)

    def _judge_commit_live(self, channel: Channel, group: str, topic: str, queue_id: int, offset: int | None) -> None:
        """What the broker alone can decide about a commit, reported at once: below zero (INV-7) or beyond the
        queue's end (INV-16). The broker stores it anyway, as 4.9.8 does (R3.4)."""
        if offset is None:
            return
        end = self._controller().message_store.get_max_offset_in_queue(topic, queue_id)
        problem = "commit_negative (INV-7)" if offset < 0 else "commit_beyond_max (INV-16)" if offset > end else None
        if problem is not None:
            self.stats[problem.split()[0]] = self.stats.get(problem.split()[0], 0) + 1
            log.warning(
                "broker: %s: %s committed %d for %s queue %d of group %s (the queue ends at %d)",
                problem,
                self._consumer_of(channel, group),
                offset,
                topic,
                queue_id,
                group,
                end,
            )

    def _consumer_of(self, channel: Channel, group: str) -> str:
        info = self._controller().consumer_manager.get_consumer_group_info(group)
        if info is not None:
            entry = info.channel_info_table.get(channel.connection)
            if entry is not None:
                return consumer_name(entry.client_id)
        return channel.peer

    def _named(self, channel: Channel, name: str) -> None:
        if name in channel.names:
            return
        channel.names.add(name)
        for entry, names, at in self.drop_watch:
            if channel.opened >= at and name in names and name not in entry["reconnected"]:
                entry["reconnected"].append(name)

    def _heartbeat(self, body: bytes) -> HeartbeatData:
        obj = _json_body(body, "heartbeat")
        consumers: list[ConsumerData] = []
        try:
            for data in obj.get("consumerDataSet") or []:
                model = data.get("messageModel", "CLUSTERING")
                subs = [
                    SubscriptionData.build(str(s["topic"]), s.get("subString"), int(s.get("subVersion", 0)))
                    for s in data.get("subscriptionDataSet") or []
                ]
                group = str(data["groupName"])
                consumers.append(
                    ConsumerData(group, MESSAGE_MODELS.get(model, str(model)), str(data.get("consumeFromWhere")), subs)
                )
                self.history.name_group(group)
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise BadRequest(f"heartbeat body is malformed: {err}") from None
        return HeartbeatData(_str(obj, "clientID"), consumers)

    def _send_message(self, frame: wire.Frame) -> bytes:
        ext = frame.ext_fields
        if frame.code in (SEND_MESSAGE_V2, SEND_BATCH_MESSAGE):  # AbstractSendMessageProcessor#parseRequestHeader
            ext = {SEND_V2_FIELDS[k]: v for k, v in ext.items() if k in SEND_V2_FIELDS}
        # SendMessageProcessor: the header decides, not the code, read as Boolean.parseBoolean reads it (the C++
        # client's "1" is false: its batch is stored as one message)
        if str(ext.get("batch", "false")).lower() == "true":
            return self._send_batch(frame, ext)
        topic = _str(ext, "topic")
        self._ensure_topic(topic)
        body = frame.body
        if _int(ext, "sysFlag", 0) & wire.COMPRESSED_FLAG:
            try:
                body = zlib.decompress(body)
            except zlib.error as err:
                return _response(frame, MESSAGE_ILLEGAL, f"the compressed body does not inflate: {err}")
        max_times = ext.get("maxReconsumeTimes")
        header = SendMessageRequestHeader(
            _str(ext, "producerGroup"),
            topic,
            _int(ext, "queueId"),
            wire.string_to_properties(str(ext.get("properties", ""))),
            _int(ext, "bornTimestamp", 0),
            _int(ext, "reconsumeTimes", 0),
            None if max_times is None else _int(ext, "maxReconsumeTimes"),
        )
        c = self._controller()
        response = c.send_message_processor.send_message(RemotingCommand(frame.code, header, body))
        if response.code != ResponseCode.SUCCESS or not isinstance(response.body, str):
            return _encode(frame, response)
        stored = c.message_store.look_message_by_id(response.body)
        assert stored is not None
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            self._record_stored(origin=self._fallback_origin(header.properties))
        return _response(
            frame,
            ResponseCode.SUCCESS,
            None,
            {
                "msgId": wire.offset_message_id(self.broker_addr, stored.commit_log_offset),
                "queueId": str(stored.queue_id),
                "queueOffset": str(stored.queue_offset),
            },
        )

    def _send_batch(self, frame: wire.Frame, ext: dict[str, Any]) -> bytes:
        """SEND_BATCH_MESSAGE as 4.9.8's ``SendMessageProcessor#asyncSendBatchMessage``: the header is a send's (v1
        or v2 layout), the body ``MessageDecoder#encodeMessages``' messages; they are stored consecutively on the
        header's queue (``CommitLog#asyncPutMessages``, one lock), each with its own properties and the batch's,
        and the answer carries every message's offset msgId, comma-separated, and the first queue offset. A
        batch with a delay level is refused MESSAGE_ILLEGAL, as the commit log refuses it. As in 4.9.8 the
        header's ``batch`` field decides, "true" in any case (``Boolean.parseBoolean``): SEND_MESSAGE with a v1 header
        saying batch is a batch too, SEND_BATCH_MESSAGE without it one message."""
        topic = _str(ext, "topic")
        queue_id = _int(ext, "queueId")
        batch_properties = wire.string_to_properties(str(ext.get("properties", "")))
        try:
            messages = wire.decode_batch(frame.body)
        except ValueError as err:
            raise BadRequest(str(err)) from None
        if not messages:
            raise BadRequest("the batch body holds no message")
        if _int(batch_properties, "DELAY", 0) > 0:
            return _response(frame, MESSAGE_ILLEGAL, BATCH_ILLEGAL_REMARK)
        config = self._ensure_topic(topic)
        if queue_id < 0:  # 4.9.8 picks a random write queue; the reference's runs are repeatable, so the first
            queue_id = 0
        c = self._controller()
        ids, first = [], None
        for m in messages:
            header = SendMessageRequestHeader(
                _str(ext, "producerGroup"),
                topic,
                queue_id % max(config.write_queue_nums, 1),
                {**m.properties, **batch_properties},
                _int(ext, "bornTimestamp", 0),
                _int(ext, "reconsumeTimes", 0),
            )
            response = c.send_message_processor.send_message(RemotingCommand(SEND_BATCH_MESSAGE, header, m.body))
            if response.code != ResponseCode.SUCCESS or not isinstance(response.body, str):
                return _encode(frame, response)
            stored = c.message_store.look_message_by_id(response.body)
            assert stored is not None
            ids.append(wire.offset_message_id(self.broker_addr, stored.commit_log_offset))
            first = stored if first is None else first
        assert first is not None
        ext_out = {"msgId": ",".join(ids), "queueId": str(first.queue_id), "queueOffset": str(first.queue_offset)}
        return _response(frame, ResponseCode.SUCCESS, None, ext_out)

    def _fallback_origin(self, properties: dict[str, str]) -> MessageExt | None:
        """The message a send to ``%RETRY%<group>`` copies, when it is a consumer's fallback for a failed
        CONSUMER_SEND_MSG_BACK (4.9.8's ``DefaultMQPushConsumerImpl#sendMessageBack`` sends the message anew
        with ``ORIGIN_MESSAGE_ID`` and ``RETRY_TOPIC``; ali-ons does the same): the stored message that
        ``ORIGIN_MESSAGE_ID`` names, as an offset message id (store host, port, commit-log offset) or as the
        ``UNIQ_KEY`` its producer gave it, in the topic ``RETRY_TOPIC`` names. None when it names none."""
        origin_id, retry_topic = properties.get(PROPERTY_ORIGIN_MESSAGE_ID), properties.get(PROPERTY_RETRY_TOPIC)
        if not origin_id or not retry_topic:
            return None
        store = self._controller().message_store
        if len(origin_id) == 32:
            with contextlib.suppress(ValueError):
                found = store.look_message_by_offset(int(origin_id[16:], 16))
                if found is not None and found.topic == retry_topic:
                    return found
        for stored in store.commit_log:
            if stored.topic == retry_topic and stored.get_property(PROPERTY_UNIQ_KEY) == origin_id:
                return stored.copy()
        return None

    def _pull(self, channel: Channel, frame: wire.Frame) -> bytes | None:
        ext = frame.ext_fields
        header = PullMessageRequestHeader(
            _str(ext, "consumerGroup"),
            _str(ext, "topic"),
            _int(ext, "queueId"),
            _int(ext, "queueOffset"),
            _int(ext, "maxMsgNums"),
            _int(ext, "sysFlag"),
            _int(ext, "commitOffset", 0),
            _int(ext, "suspendTimeoutMillis", 0),
            None if ext.get("subscription") is None else str(ext["subscription"]),
            _int(ext, "subVersion", 0),
        )
        request = RemotingCommand(frame.code, header, opaque=frame.opaque)
        c = self._controller()
        if (header.topic, header.queue_id) in channel.unpositioned:
            self._record_positioning(channel, header)
        if (header.topic, header.queue_id) in channel.query_failed:
            self._record_failed_query_positioning(channel, header)
        with self._commit_watch(channel, header.consumer_group, header.topic, header.queue_id):
            response = c.pull_message_processor.process_request(channel.connection, request, True)
        self.stats["pulls"] = self.stats.get("pulls", 0) + 1
        if response is None:
            deadline = self.clock.now() + header.suspend_timeout_millis
            held = HeldPull(channel, request, header.topic, header.queue_id, header.queue_offset, deadline)
            self.held.append(held)
            channel.held.append(held)
            return None
        return self._pull_reply(frame.opaque, response)

    def _record_positioning(self, channel: Channel, header: PullMessageRequestHeader) -> None:
        """The first pull of a queue after the broker answered QUERY_NOT_FOUND for it on this channel: the
        consumer positioned itself by consumeFromWhere (R10.4), and a start above the queue's minimum
        offset skips what lies below. Written as the skip a client would declare: ``consume_from_last``
        when it starts at the queue's end, ``consume_from_timestamp`` otherwise (check-history accepts it
        only with a cause the history shows, INV-9a: here the group's first start on the queue)."""
        channel.unpositioned.discard((header.topic, header.queue_id))
        store = self._controller().message_store
        low = store.get_min_offset_in_queue(header.topic, header.queue_id)
        end = store.get_max_offset_in_queue(header.topic, header.queue_id)
        if header.queue_offset > low:
            cause = "consume_from_last" if header.queue_offset == end else "consume_from_timestamp"
            self.history.event(
                "skip",
                topic=header.topic,
                queue=header.queue_id,
                **{"from": low, "to": header.queue_offset},
                cause=cause,
            )

    def _record_failed_query_positioning(self, channel: Channel, header: PullMessageRequestHeader) -> None:
        """The first pull of a queue after a fault failed its offset query on this channel: a start above the
        offset the broker held is the positioning 4.9.8 does when it reads the error as "no offset" (RMQ-14),
        written as a consumeFromWhere skip with ``fault: "query-error"`` (a start at the held offset, after a
        retried query, skips nothing)."""
        held = channel.query_failed.pop((header.topic, header.queue_id))
        if header.consumer_group != self.history.group or header.queue_offset <= held:
            return
        end = self._controller().message_store.get_max_offset_in_queue(header.topic, header.queue_id)
        self.history.event(
            "skip",
            topic=header.topic,
            queue=header.queue_id,
            **{"from": held, "to": header.queue_offset},
            cause="consume_from_last" if header.queue_offset == end else "consume_from_timestamp",
            fault="query-error",
        )

    def _pull_reply(self, opaque: int, response: RemotingCommand) -> bytes:
        ext: dict[str, str] = {}
        if isinstance(response.header, PullMessageResponseHeader):
            ext = {
                "suggestWhichBrokerId": "0",
                "nextBeginOffset": str(response.header.next_begin_offset),
                "minOffset": str(response.header.min_offset),
                "maxOffset": str(response.header.max_offset),
            }
        body = b""
        if isinstance(response.body, PullMessageResponseBody):
            body = b"".join(wire.encode_message(self._wire_message(m)) for m in response.body.messages)
            self.stats["messages_pulled"] = self.stats.get("messages_pulled", 0) + len(response.body.messages)
        return wire.encode_frame(response.code, opaque, wire.FLAG_RESPONSE, ext, body, response.remark)

    def _wire_message(self, m: MessageExt) -> wire.WireMessage:
        return wire.WireMessage(
            topic=m.topic,
            queue_id=m.queue_id,
            queue_offset=m.queue_offset,
            commit_log_offset=m.commit_log_offset,
            body=m.body,
            properties={k: v for k, v in m.properties.items() if not k.startswith("__rmqspec")},
            born_timestamp=m.born_timestamp,
            store_timestamp=m.store_timestamp,
            store_host=self.broker_addr,
            reconsume_times=m.reconsume_times,
        )

    def _answer_held(self, held: HeldPull) -> None:
        """PullRequestHoldService#notifyMessageArriving / the timeout: run the pull again, answer it."""
        self.held.remove(held)
        with contextlib.suppress(ValueError):
            held.channel.held.remove(held)
        if not held.channel.open:
            return
        response = self._controller().pull_message_processor.execute_request_when_wakeup(
            held.channel.connection, held.request
        )
        reply = self._pull_reply(held.request.opaque, response)
        if held.swallow:
            return
        slow = self._armed_for(held.channel, RequestCode.PULL_MESSAGE, ("slow-replies",))
        if slow is not None:
            self._send_later(held.channel, reply, slow)
        else:
            held.channel.send(reply)

    def _wake_arrivals(self) -> None:
        store = self._controller().message_store
        for held in list(self.held):
            if store.get_max_offset_in_queue(held.topic, held.queue_id) > held.queue_offset:
                self._answer_held(held)

    # --- faults ----------------------------------------------------------------------------------

    def _fire_faults(self, now: int) -> None:
        while self.faults:
            fault = self.faults[0]
            if fault.trigger == "after_messages_pulled":
                due = self.stats.get("messages_pulled", 0) >= fault.threshold
            elif fault.trigger == "after_commits":
                due = self.stats.get("commits", 0) >= fault.threshold
            elif fault.trigger == "after_messages_stored":
                due = self.stats.get("stored", 0) >= fault.threshold
            else:
                due = time.monotonic() - self.started >= fault.threshold
            if not due or self.host is None or self.host.controller is None or not self._resolve(fault):
                return
            self.faults.pop(0)
            if fault.kind == "retention":
                self._retention(fault, now)
            elif fault.kind == "consumer-list-missing":
                self._hide_consumer(fault, now)
            elif fault.kind in ("request-error", "request-timeout", "slow-replies"):
                self._arm(fault, now)
            elif fault.kind == "drop-connection":
                self._drop_connections(fault, now)
            elif fault.kind == "admin-reset":
                self._admin_reset(fault, now)
            else:
                self._broker_crash(fault, now)

    def _resolve(self, fault: Fault) -> bool:
        """Name what a drawn fault leaves as "*" (faults.ANY): the topic, the history group's first subscribed topic
        that is not a retry topic; the consumer, the group's consumer that registered first (on the broker as it is
        now: none registered yet after a restart). False while there is none: the fault waits, and the ones after
        it too (a script fires in order)."""
        if ANY not in (fault.topic, fault.consumer):
            return True
        group = fault.group or self.history.group
        info = self._controller().consumer_manager.get_consumer_group_info(group) if group else None
        if info is None:
            return False
        topics = [t for t in info.subscription_table if not t.startswith(RETRY_GROUP_TOPIC_PREFIX)]
        ids = info.get_all_client_id()
        if (fault.topic == ANY and not topics) or (fault.consumer == ANY and not ids):
            return False
        if fault.topic == ANY:
            fault.topic = topics[0]
        if fault.consumer == ANY:
            fault.consumer = consumer_name(ids[0])
        return True

    def _arm(self, fault: Fault, now: int) -> None:
        """A request fault starts: it hits the next ``count`` requests of its code (slow-replies: those of
        the next ``for_seconds``)."""
        entry: dict[str, Any] = {
            "fault": fault.kind,
            "trigger": fault.describe(),
            "time": now,
            "request": fault.request,
        }
        if fault.consumer:
            entry["consumer"] = fault.consumer
        armed = ArmedFault(fault, entry, left=fault.count)
        whose = f" of {fault.consumer}" if fault.consumer else ""
        if fault.kind == "slow-replies":
            armed.until = now + fault.for_seconds * 1000
            entry.update(delay_ms=fault.delay_ms, until=armed.until, delayed=0)
            what = f"replies to {fault.request}{whose} are delayed {fault.delay_ms:g} ms until {armed.until:.0f}"
        elif fault.kind == "request-error":
            entry.update(count=fault.count, response=fault.response, hits=0)
            what = f"the next {fault.count} {fault.request} requests{whose} are answered {fault.response}"
        else:
            entry.update(count=fault.count, applied=fault.applied, hits=0)
            how = "run and never answered" if fault.applied else "never answered nor run"
            what = f"the next {fault.count} {fault.request} requests{whose} are {how}"
        self.armed.append(armed)
        self.faults_done.append(entry)
        log.warning("fault at %d: %s: %s", now, fault.describe(), what)

    def _armed_for(self, channel: Channel, code: int, kinds: tuple[str, ...]) -> ArmedFault | None:
        now = self.clock.now()
        self.armed = [a for a in self.armed if a.fault.kind != "slow-replies" or now < a.until]
        for armed in self.armed:
            if armed.fault.kind in kinds and armed.matches(channel, code):
                return armed
        return None

    def _faulted_request(self, channel: Channel, frame: wire.Frame, armed: ArmedFault) -> bytes | None:
        """A request a request-error or request-timeout hits: answered with the error and not run, or never
        answered (and run only with ``applied``). A failed offset query of the group is remembered."""
        fault = armed.fault
        armed.left -= 1
        armed.entry["hits"] += 1
        if armed.left <= 0:
            self.armed.remove(armed)
        who = self._consumer_of(channel, self.history.group) if self.history.group else channel.peer
        if frame.code == RequestCode.QUERY_CONSUMER_OFFSET:
            self._remember_failed_query(channel, frame)
        if frame.is_oneway:  # no answer is ever written to a oneway request; the client learns nothing
            armed.entry["oneway_hits"] = armed.entry.get("oneway_hits", 0) + 1
        if fault.kind == "request-error":
            log.warning(
                "fault at %d: %s: request %d (opaque %d) of %s answered %d, not run%s",
                self.clock.now(),
                fault.describe(),
                frame.code,
                frame.opaque,
                who,
                fault.response,
                " (oneway: the answer is not sent)" if frame.is_oneway else "",
            )
            return _response(frame, fault.response, fault.remark)
        log.warning(
            "fault at %d: %s: request %d (opaque %d) of %s %s",
            self.clock.now(),
            fault.describe(),
            frame.code,
            frame.opaque,
            who,
            "run, its reply dropped" if fault.applied else "dropped, not run",
        )
        if fault.applied:
            held = len(self.held)
            self._process(channel, frame)
            for pull in self.held[held:]:
                pull.swallow = True
        return None

    def _remember_failed_query(self, channel: Channel, frame: wire.Frame) -> None:
        ext = frame.ext_fields
        try:
            header = QueryConsumerOffsetRequestHeader(
                _str(ext, "consumerGroup"), _str(ext, "topic"), _int(ext, "queueId")
            )
        except BadRequest:
            return
        if header.consumer_group != self.history.group:
            return
        would = self._controller().consumer_manage_processor.query_consumer_offset(
            RemotingCommand(RequestCode.QUERY_CONSUMER_OFFSET, header)
        )
        key = (header.topic, header.queue_id)
        if would.code == ResponseCode.SUCCESS and isinstance(would.header, QueryConsumerOffsetResponseHeader):
            channel.query_failed[key] = would.header.offset
        else:  # no offset either way: the client positions by consumeFromWhere as after QUERY_NOT_FOUND
            channel.unpositioned.add(key)

    def _send_later(self, channel: Channel, reply: bytes, armed: ArmedFault) -> None:
        armed.entry["delayed"] += 1
        asyncio.get_running_loop().call_later(armed.fault.delay_ms / 1000, channel.send, reply)

    def _drop_connections(self, fault: Fault, now: int) -> None:
        """Close the broker connections of ``fault.consumer`` (every one without it). The clients reconnect by
        themselves; their re-registration is no join and their absence meanwhile no leave."""
        group = self.history.group
        info = None if group is None else self._controller().consumer_manager.get_consumer_group_info(group)
        chosen = [ch for ch in self.channels.values() if not fault.consumer or fault.consumer in ch.names]
        for channel in chosen:
            registered = None if info is None else info.channel_info_table.get(channel.connection)
            if registered is not None:
                self.awaiting.add(registered.client_id)
            channel.open = False
            channel.writer.close()
        names = set().union(*(ch.names for ch in chosen))
        entry: dict[str, Any] = {
            "fault": fault.kind,
            "trigger": fault.describe(),
            "time": now,
            "connections": len(chosen),
            "consumers": sorted(names),
            "messages_pulled": self.stats.get("messages_pulled", 0),
            "broker_connections": self.stats.get("broker_connections", 0),
            "reconnected": [],
        }
        if fault.consumer:
            entry["consumer"] = fault.consumer
        self.faults_done.append(entry)
        self.drop_watch.append((entry, names, time.time() * 1000))
        log.warning(
            "fault at %d: %s: %d broker connections of %s closed",
            now,
            fault.describe(),
            len(chosen),
            fault.consumer or "every client",
        )

    def _admin_reset(self, fault: Fault, now: int) -> None:
        """INVOKE_BROKER_TO_RESET_OFFSET as 4.9.8 runs it (``Broker2Client#resetOffset``, the reference's, for
        each write queue or each queue of ``offsets``): the broker's table is not written; one
        RESET_CONSUMER_CLIENT_OFFSET goes oneway to each channel of the group with the whole table, and a
        consumer's commit of a queue's target is written with cause ``reset``."""
        c = self._controller()
        group = fault.group or self.history.group or ""
        entry: dict[str, Any] = {"fault": fault.kind, "trigger": fault.describe(), "time": now, "group": group}
        self.faults_done.append(entry)
        config = c.durable.topic_config_table.get(fault.topic)
        if fault.timestamp is None:
            queues = sorted(fault.offsets)
        else:
            queues = list(range(config.write_queue_nums)) if config is not None else [0]
        table: dict[MessageQueue, int] = {}
        code, remark = ResponseCode.SUCCESS, None
        for queue_id in queues:
            response = c.broker2client.reset_offset(
                fault.topic,
                group,
                -1 if fault.timestamp is None else fault.timestamp,
                fault.force,
                queue_id,
                fault.offsets.get(queue_id, -1),
            )
            if response.code != ResponseCode.SUCCESS:
                code, remark = response.code, response.remark
                break
            assert isinstance(response.body, ResetOffsetBody)
            table.update(response.body.offset_table)
        for channel in self.channels.values():  # the reference's pushes, one per queue: sent below as one
            channel.connection.inbound.clear()
        entry["response"] = code
        if code != ResponseCode.SUCCESS:
            entry["remark"] = remark
            log.warning("fault at %d: %s: the reset failed: %d %s", now, fault.describe(), code, remark)
            return
        info = c.consumer_manager.get_consumer_group_info(group)
        by_connection = {ch.connection: ch for ch in self.channels.values()}
        targets = [by_connection[conn] for conn in (info.get_all_channel() if info else []) if conn in by_connection]
        frame = wire.encode_frame(
            RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
            next(_push_opaque),
            wire.FLAG_ONEWAY,
            {
                "topic": fault.topic,
                "group": group,
                "timestamp": str(0 if fault.timestamp is None else fault.timestamp),
                "isForce": "false",  # Broker2Client#resetOffset never sets it on the request it sends
            },
            _reset_body(table, fault.admin_language == "CPP"),
        )
        for channel in targets:
            channel.send(frame)
        for mq, offset in table.items():
            self.reset_pending[(group, mq.topic, mq.queue_id)] = (offset, entry)
        entry.update(
            offsets={str(mq.queue_id): offset for mq, offset in sorted(table.items(), key=lambda kv: kv[0].queue_id)},
            sent_to=sorted(consumer_name(self._client_id(ch, group)) for ch in targets),
            reset_commits=0,
        )
        log.warning(
            "fault at %d: %s: RESET_CONSUMER_CLIENT_OFFSET (%s body) for %s of group %s sent to %d connections: %s",
            now,
            fault.describe(),
            fault.admin_language,
            fault.topic,
            group,
            len(targets),
            entry["offsets"],
        )

    def _client_id(self, channel: Channel, group: str) -> str:
        info = self._controller().consumer_manager.get_consumer_group_info(group)
        registered = None if info is None else info.channel_info_table.get(channel.connection)
        return channel.peer if registered is None else registered.client_id

    def _hide_consumer(self, fault: Fault, now: int) -> None:
        """GET_CONSUMER_LIST_BY_GROUP leaves ``fault.consumer`` out until ``now + for_seconds``."""
        assert self.host is not None
        hidden, until = fault.consumer, now + fault.for_seconds * 1000

        def answer_filter(group: str, client_ids: list[str]) -> list[str]:
            if self.clock.now() >= until:
                return client_ids
            return [c for c in client_ids if consumer_name(c) != hidden]

        self.host.consumer_list_filter = answer_filter
        self.faults_done.append({"fault": fault.kind, "trigger": fault.describe(), "time": now, "until": until})
        log.warning("fault at %d: %s: consumer lists leave out %s until %d", now, fault.describe(), hidden, until)

    def _retention(self, fault: Fault, now: int) -> None:
        """Commit-log retention deletes the oldest messages of one queue; the history skips them."""
        store = self._controller().message_store
        first = store.get_min_offset_in_queue(fault.topic, fault.queue)
        for _ in range(fault.messages):
            if store.get_min_offset_in_queue(fault.topic, fault.queue) >= store.get_max_offset_in_queue(
                fault.topic, fault.queue
            ):
                break
            store.retention_delete(fault.topic, fault.queue)
        last = store.get_min_offset_in_queue(fault.topic, fault.queue)
        if last > first:
            self.history.event(
                "skip", topic=fault.topic, queue=fault.queue, **{"from": first, "to": last}, cause="retention"
            )
        self.faults_done.append(
            {"fault": fault.kind, "trigger": fault.describe(), "time": now, "deleted": [first, last]}
        )
        log.warning(
            "fault at %d: %s: %s queue %d offsets [%d, %d) deleted",
            now,
            fault.describe(),
            fault.topic,
            fault.queue,
            first,
            last,
        )

    def _broker_crash(self, fault: Fault, now: int) -> None:
        """kill -9 of the broker process: its memory goes, its disk stays; every broker connection closes.
        It starts again at once, or after ``down_seconds`` (in ``tick``)."""
        assert self.host is not None
        before = self._controller().consumer_offset_manager.clone_table()
        self.host.crash()
        self.awaiting |= self.members
        self.held.clear()
        for channel in list(self.channels.values()):
            channel.open = False
            channel.writer.close()
        self.restart_at = now + fault.down_seconds * 1000
        self._crashed_table = before
        entry = {"fault": fault.kind, "trigger": fault.describe(), "time": now, "down_seconds": fault.down_seconds}
        self.faults_done.append(entry)
        log.warning(
            "fault at %d: %s: the broker crashed, %d connections closed", now, fault.describe(), len(self.channels)
        )
        if fault.down_seconds == 0:
            self._start_broker()

    def _start_broker(self) -> None:
        """The broker starts from its disk; each offset of the history's group that the crash undid is
        written as a commit by ``broker`` with cause ``failover`` (the value it fell back to)."""
        assert self.host is not None
        self.restart_at = None
        controller = self.host.start()
        after = controller.consumer_offset_manager.clone_table()
        before = self._crashed_table
        reverted = 0
        for key in sorted(set(before) | set(after)):
            split = split_topic_at_group(key)
            if split is None or split[1] != self.history.group:
                continue
            old, new = before.get(key, {}), after.get(key, {})
            for queue_id in sorted(set(old) | set(new)):
                if old.get(queue_id) != new.get(queue_id):
                    reverted += 1
                    self.history.event(
                        "commit",
                        consumer="broker",
                        topic=split[0],
                        queue=queue_id,
                        offset=new.get(queue_id),
                        cause="failover",
                    )
        self.faults_done[-1]["offsets_reverted"] = reverted
        log.warning("fault: the broker started again from its disk; %d offsets of the group fell back", reverted)

    # --- history ---------------------------------------------------------------------------------

    def _record_stored(self, origin: MessageExt | None = None) -> None:
        """A produce event for every message stored since the last call; ``origin`` is the message they
        copy (a send-back's, or a scheduled delivery's)."""
        store = self._controller().message_store
        new = store.commit_log[self._recorded :]
        self._recorded = len(store.commit_log)
        for stored in new:
            self.stats["stored"] = self.stats.get("stored", 0) + 1
            fields: dict[str, Any] = {"topic": stored.topic, "queue": stored.queue_id, "offset": stored.queue_offset}
            if origin is not None:
                fields["origin"] = {"topic": origin.topic, "queue": origin.queue_id, "offset": origin.queue_offset}
            if stored.get_property(PROPERTY_TAGS):
                fields["tags"] = stored.get_property(PROPERTY_TAGS)
            self.history.event("produce", **fields)

    def _record_membership(self) -> None:
        group = self.history.group
        if group is None:
            return
        info = self._controller().consumer_manager.get_consumer_group_info(group)
        now = set() if info is None else set(info.get_all_client_id())
        self.awaiting -= now
        for client_id in sorted(now - self.members):
            self.history.event("join", consumer=consumer_name(client_id), client_id=client_id)
        for client_id in sorted(self.members - now - self.awaiting):
            self.history.event("leave", consumer=consumer_name(client_id), client_id=client_id)
        self.members = now | self.awaiting

    def summary(self) -> dict[str, Any]:
        return {
            "requests": {str(k): v for k, v in sorted(self.request_codes.items())},
            **self.stats,
            "history_events": dict(self.history.counts),
            "faults": self.faults_done,
        }


def _peer(writer: asyncio.StreamWriter) -> str:
    info = writer.get_extra_info("peername")
    return f"{info[0]}:{info[1]}" if isinstance(info, tuple) and len(info) >= 2 else str(info)


def _response(
    frame: wire.Frame, code: int, remark: str | None = None, ext: dict[str, str] | None = None, body: bytes = b""
) -> bytes:
    return wire.encode_frame(code, frame.opaque, wire.FLAG_RESPONSE, ext, body, remark)


def _reset_body(table: dict[MessageQueue, int], for_c: bool) -> bytes:
    """RESET_CONSUMER_CLIENT_OFFSET's body as fastjson writes it: ``ResetOffsetBody`` (a map whose keys are
    MessageQueue objects, written unquoted) or ``ResetOffsetBodyForC`` (a list of MessageQueueForC)."""
    rows = sorted(table.items(), key=lambda kv: kv[0].queue_id)
    if for_c:
        items = [
            {"brokerName": mq.broker_name, "offset": offset, "queueId": mq.queue_id, "topic": mq.topic}
            for mq, offset in rows
        ]
        return json.dumps({"offsetTable": items}, separators=(",", ":")).encode("utf-8")
    pairs = ",".join(f"{json.dumps(_mq_json(mq), separators=(',', ':'))}:{offset}" for mq, offset in rows)
    return ('{"offsetTable":{' + pairs + "}}").encode("utf-8")


def _encode(frame: wire.Frame, response: RemotingCommand) -> bytes:
    """A reference response on the wire: typed headers as string extFields, bodies as JSON."""
    ext: dict[str, str] = {}
    body = b""
    if isinstance(response.header, QueryConsumerOffsetResponseHeader):
        ext["offset"] = str(response.header.offset)
    if isinstance(response.body, list):  # GET_CONSUMER_LIST_BY_GROUP
        body = json.dumps({"consumerIdList": response.body}).encode("utf-8")
    return _response(frame, response.code, response.remark, ext, body)
