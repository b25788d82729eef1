"""The reference's push consumers behind protocol version 2 (``docs/oracle.md``, "Protocol version 2:
consumers under test").

Each ``consumer.new`` builds a real ``MQClientInstance`` and ``DefaultMQPushConsumerImpl`` of
``rmqspec.reference`` (its ``RebalancePushImpl``, pull service, consume service, offset store and
scheduled tasks), already deterministic: one :class:`~rmqspec.reference.scheduler.VirtualClock` for
every consumer, executors that run a task only when told, consume threads that are generators resumed
by the driver. What the consumers send goes to :class:`ScriptedBrokerEndpoint`, which the test
drives: every request is recorded by an ``RPCHook`` (so in send order) and reported in the reply's
``sent``; a synchronous request takes the first answer of its code left in the request's ``answers`` whose
``match`` (topic, queueId, group) it fits, an answer without one fitting any (a timeout once none is left);
an asynchronous pull waits until ``pull.reply`` answers it by its number. GET_CONSUMER_LIST_BY_GROUP answers
the list ``cluster.consumers`` set, and heartbeats and
unregistrations succeed; those three are not reported (they carry no offset).

``plant`` switches on one deliberately wrong consumer-level behaviour (:data:`CONSUMER_PLANTS`), so the
tests can show that conform finds each area's divergences.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from rmqspec.conform import protocol as p
from rmqspec.reference.allocate import AllocateMessageQueueAveragely, AllocateMessageQueueAveragelyByCircle
from rmqspec.reference.compat import SpecCompat
from rmqspec.reference.consume_message_concurrently_service import (
    ConsumeConcurrentlyStatus,
    ConsumeMessageConcurrentlyService,
    ConsumeRequestState,
    ListenerAnswer,
)
from rmqspec.reference.consume_message_concurrently_service import ConsumeRequest as ConcurrentRequest
from rmqspec.reference.consume_message_orderly_service import (
    ConsumeMessageOrderlyService,
    ConsumeOrderlyStatus,
    OrderlyListenerAnswer,
    TryLockLaterTask,
)
from rmqspec.reference.consume_message_orderly_service import ConsumeRequest as OrderlyRequest
from rmqspec.reference.default_mq_push_consumer_impl import (
    DefaultMQPushConsumer,
    DefaultMQPushConsumerImpl,
    FixOffsetTask,
    PullRequest,
)
from rmqspec.reference.exceptions import MQClientException
from rmqspec.reference.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_ORIGIN_MESSAGE_ID,
    MessageExt,
)
from rmqspec.reference.message_queue import MessageQueue, retry_topic
from rmqspec.reference.mq_client_instance import (
    LOCK_MQ_TASK_NAME,
    PERSIST_TASK_NAME,
    MQClientInstance,
    PullInvokeCallback,
    TopicRouteData,
)
from rmqspec.reference.mq_version import MQVersion
from rmqspec.reference.process_queue import ProcessQueue
from rmqspec.reference.protocol import (
    ConsumerSendMsgBackRequestHeader,
    GetMaxOffsetRequestHeader,
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
    ResponseCode,
    SearchOffsetRequestHeader,
    SendMessageRequestHeader,
    UnlockBatchRequestBody,
    UpdateConsumerOffsetRequestHeader,
)
from rmqspec.reference.rebalance_impl import RebalancePushImpl, UnlockDelayTask
from rmqspec.reference.remoting import ClientConnection, PendingReply, RemotingException
from rmqspec.reference.scheduler import IdSequence, SchedulerError, VirtualClock

BROKER_NAME: Final = "broker-a"
BROKER_ADDR: Final = "broker-a:10911"

# Deliberately wrong consumer-level behaviours, one or more per area; tests/test_conform_consumers.py
# shows conform finds and shrinks every one.
CONSUMER_PLANTS: Final[dict[str, str]] = {
    "pull_commit_flag_at_zero": "pull path: a CLUSTERING pull sets the commit-offset sysFlag bit for offset 0 (R5.2)",
    "offset_illegal_fixed_at_once": "pull path: OFFSET_ILLEGAL is corrected at once, not 10 s later (4.9.8, R5.7)",
    "rebalance_removal_skips_persist": "rebalance: a queue taken away is dropped without persisting its offset (R9.5)",
    "send_back_failure_counts_as_sent": "consume service: a failed send-back counts as sent; the offset moves (RMQ-03)",
    "dropped_pq_updates_offset": "consume service: a listener ending after its pq's drop updates the offset (RMQ-05)",
    "persist_every_10s": "persistence timers: persistAllConsumerOffset runs every 10 s instead of every 5 s (R4.1)",
    "lock_all_keeps_unlocked": "orderly locks: lockAll leaves a queue the broker refused locked (R8.3)",
}

# Protocol request codes, as reported in ``sent`` and as keys of ``answers``.
CODE_NAMES: Final[dict[int, str]] = {
    RequestCode.PULL_MESSAGE: "PULL_MESSAGE",
    RequestCode.QUERY_CONSUMER_OFFSET: "QUERY_CONSUMER_OFFSET",
    RequestCode.UPDATE_CONSUMER_OFFSET: "UPDATE_CONSUMER_OFFSET",
    RequestCode.GET_MAX_OFFSET: "GET_MAX_OFFSET",
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: "SEARCH_OFFSET_BY_TIMESTAMP",
    RequestCode.LOCK_BATCH_MQ: "LOCK_BATCH_MQ",
    RequestCode.UNLOCK_BATCH_MQ: "UNLOCK_BATCH_MQ",
    RequestCode.CONSUMER_SEND_MSG_BACK: "CONSUMER_SEND_MSG_BACK",
    RequestCode.SEND_MESSAGE: "SEND_MESSAGE",
}
ANSWERED_CODES: Final = tuple(n for c, n in CODE_NAMES.items() if c not in (RequestCode.PULL_MESSAGE,))
UNREPORTED: Final = (RequestCode.HEART_BEAT, RequestCode.UNREGISTER_CLIENT, RequestCode.GET_CONSUMER_LIST_BY_GROUP)
PULL_STATUSES: Final = {
    "FOUND": ResponseCode.SUCCESS,
    "NO_NEW_MSG": ResponseCode.PULL_NOT_FOUND,
    "NO_MATCHED_MSG": ResponseCode.PULL_RETRY_IMMEDIATELY,
    "OFFSET_ILLEGAL": ResponseCode.PULL_OFFSET_MOVED,
}
CONCURRENT_STATUSES: Final = ("CONSUME_SUCCESS", "RECONSUME_LATER")
ORDERLY_STATUSES: Final = ("SUCCESS", "SUSPEND_CURRENT_QUEUE_A_MOMENT")
MESSAGE_MODELS: Final = ("CLUSTERING", "BROADCASTING")
STRATEGIES: Final = {"AVG": AllocateMessageQueueAveragely, "AVG_BY_CIRCLE": AllocateMessageQueueAveragelyByCircle}
# The tasks ``consumer.run`` runs; those marked True name a queue (args.mq).
TASKS: Final[dict[str, bool]] = {
    "rebalance": False,
    "persistOffsets": False,
    "lockAll": False,
    "pull": True,
    "fixOffset": True,
    "tryLockLater": True,
    "unlockDelay": True,
}


def wire_mq(mq: MessageQueue) -> dict[str, Any]:
    return p.mq(mq.topic, mq.broker_name, mq.queue_id)


def _mq(value: Any) -> MessageQueue:
    if not isinstance(value, dict):
        raise p.ProtocolError(f"a message queue must be an object, got {value!r}")
    return MessageQueue(str(value["topic"]), str(value["brokerName"]), int(value["queueId"]))


def _sorted_mqs(mqs: Any) -> list[dict[str, Any]]:
    return sorted((wire_mq(mq) for mq in mqs), key=p.encode)


class _FixesAtOnce(MQVersion):
    """4.9.8 but for the OFFSET_ILLEGAL branch, which corrects at once as 5.2.0 does (a plant)."""

    @property
    def offset_illegal_fixed_at_once(self) -> bool:
        return True


# The request fields an answer's "match" may name, and the header attribute each is read from.
_MATCHED_FIELDS: Final = {"topic": "topic", "queueId": "queue_id", "group": "consumer_group"}


def _matches(code: str, answer: Any, asked: dict[str, Any]) -> bool:
    """Does ``answer`` (an entry of ``answers[code]``) answer a request with the fields ``asked``? An answer without
    ``match`` answers any request of its code; one with it only a request whose fields equal all it names (a lock
    request of one queue has that queue's topic and queueId; one of several queues, lockAll's, none)."""
    if not isinstance(answer, dict):
        raise p.ProtocolError(f"an answer to {code} must be an object, got {answer!r}")
    match = answer.get("match")
    if match is None:
        return True
    if not isinstance(match, dict) or not set(match) <= set(_MATCHED_FIELDS):
        raise p.ProtocolError(
            f"an answer's match to {code} must be an object of {', '.join(_MATCHED_FIELDS)}, got {match!r}"
        )
    return all(key in asked and asked[key] == value for key, value in match.items())


class ScriptedBrokerEndpoint:
    """The broker at the far end of every consumer's connection: it answers synchronous requests from
    the current protocol request's ``answers`` and keeps pulls until ``pull.reply``."""

    incarnation = 1

    def __init__(self) -> None:
        self.answers: dict[str, list[Any]] = {}
        self.consumer_lists: dict[str, list[str]] = {}

    def is_up(self) -> bool:
        return True

    def begin(self, answers: dict[str, list[Any]]) -> None:
        self.answers = {code: list(queue) for code, queue in answers.items()}

    def _next(self, code: str, asked: dict[str, Any]) -> dict[str, Any]:
        """The first answer of ``code`` left whose ``match`` (if any) the request's fields ``asked`` satisfy: the
        broker answers by what a request asks, not by the order the consumer sends them in."""
        queue = self.answers.get(code, [])
        k = next((k for k, a in enumerate(queue) if _matches(code, a, asked)), None)
        if k is None:
            raise RemotingException(f"wait response timeout: no scripted answer left for {code} {asked}")
        answer = queue.pop(k)
        if answer.get("timeout"):
            raise RemotingException(f"wait response timeout ({code})")
        return answer

    def process_sync(self, connection: ClientConnection, request: RemotingCommand) -> RemotingCommand:
        code = request.code
        if code in (RequestCode.HEART_BEAT, RequestCode.UNREGISTER_CLIENT):
            return RemotingCommand.create_response_command(ResponseCode.SUCCESS)
        if code == RequestCode.GET_CONSUMER_LIST_BY_GROUP:
            group = getattr(request.header, "consumer_group", "")
            ids = self.consumer_lists.get(group)
            if not ids:
                return RemotingCommand.create_response_command(ResponseCode.SYSTEM_ERROR, "no consumer for this group")
            return RemotingCommand.create_response_command(ResponseCode.SUCCESS, body=list(ids))
        name = CODE_NAMES.get(code)
        if name is None:
            raise RemotingException(f"the scripted broker does not serve request code {code}")
        h = request.header
        asked = {key: getattr(h, attr) for key, attr in _MATCHED_FIELDS.items() if hasattr(h, attr)}
        body = request.body
        if isinstance(body, LockBatchRequestBody | UnlockBatchRequestBody) and len(body.mq_set) == 1:  # one queue's
            (locked,) = body.mq_set
            asked = {"topic": locked.topic, "queueId": locked.queue_id, "group": body.consumer_group}
        answer = self._next(name, asked)
        if "responseCode" in answer and answer["responseCode"] != ResponseCode.SUCCESS:
            return RemotingCommand.create_response_command(int(answer["responseCode"]), "scripted broker error")
        if code in (
            RequestCode.QUERY_CONSUMER_OFFSET,
            RequestCode.GET_MAX_OFFSET,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
        ):
            if "offset" not in answer:
                raise p.ProtocolError(f"a successful answer to {name} needs offset, got {answer!r}")
            header = QueryConsumerOffsetResponseHeader(int(answer["offset"]))
            if code != RequestCode.QUERY_CONSUMER_OFFSET:
                return RemotingCommand.create_response_command(ResponseCode.SUCCESS, body=int(answer["offset"]))
            return RemotingCommand.create_response_command(ResponseCode.SUCCESS, header=header)
        if code == RequestCode.LOCK_BATCH_MQ:
            body = request.body
            assert isinstance(body, LockBatchRequestBody)
            if answer.get("grantAll"):
                granted = set(body.mq_set)
            elif isinstance(answer.get("granted"), list):
                granted = {_mq(m) for m in answer["granted"]} & set(body.mq_set)
            else:
                raise p.ProtocolError(f"an answer to LOCK_BATCH_MQ needs grantAll or granted, got {answer!r}")
            return RemotingCommand.create_response_command(ResponseCode.SUCCESS, body=LockBatchResponseBody(granted))
        return RemotingCommand.create_response_command(ResponseCode.SUCCESS, body="scripted-msg-id")

    def wake_up_held_request(self, connection: ClientConnection, request: RemotingCommand) -> RemotingCommand:
        raise RemotingException("the scripted broker holds no request")


class _Recorder:
    """The RPCHook of one consumer: every request it sends, in order, as the protocol reports it."""

    def __init__(self, world: ConsumerWorld, handle: str) -> None:
        self.world, self.handle = world, handle

    def do_before_request(self, remote_addr: str, request: RemotingCommand) -> None:
        if request.code in UNREPORTED:
            return
        world, entry = self.world, self.world.consumers[self.handle]
        h = request.header
        name = CODE_NAMES.get(request.code, str(request.code))
        out: dict[str, Any] = {"code": name, "brokerName": BROKER_NAME}
        if isinstance(h, PullMessageRequestHeader):
            clustering = entry.settings.message_model == "CLUSTERING"
            if world.plant == "pull_commit_flag_at_zero" and clustering and h.commit_offset == 0:
                h.sys_flag |= PullSysFlag.FLAG_COMMIT_OFFSET
            number = entry.next_pull
            entry.next_pull += 1
            entry.pulls[number] = request.opaque
            entry.pull_mqs[number] = MessageQueue(h.topic, BROKER_NAME, h.queue_id)
            out |= {"pull": number, "topic": h.topic, "queueId": h.queue_id, "group": h.consumer_group}
            out |= {"queueOffset": h.queue_offset, "maxMsgNums": h.max_msg_nums, "sysFlag": h.sys_flag}
            out["commitOffset"] = h.commit_offset
        elif isinstance(h, QueryConsumerOffsetRequestHeader):
            out |= {"topic": h.topic, "queueId": h.queue_id, "group": h.consumer_group}
        elif isinstance(h, UpdateConsumerOffsetRequestHeader):
            out |= {"topic": h.topic, "queueId": h.queue_id, "group": h.consumer_group}
            out |= {"offset": h.commit_offset, "oneway": True}
        elif isinstance(h, GetMaxOffsetRequestHeader):
            out |= {"topic": h.topic, "queueId": h.queue_id}
        elif isinstance(h, SearchOffsetRequestHeader):
            out |= {"topic": h.topic, "queueId": h.queue_id, "timestamp": h.timestamp}
        elif isinstance(h, ConsumerSendMsgBackRequestHeader):
            out |= {"group": h.group, "msgId": h.origin_msg_id, "delayLevel": h.delay_level}
            out["maxReconsumeTimes"] = h.max_reconsume_times
        elif isinstance(h, SendMessageRequestHeader):
            out |= {"topic": h.topic, "msgId": h.properties.get(PROPERTY_ORIGIN_MESSAGE_ID)}
            out |= {"delayLevel": int(h.properties.get(PROPERTY_DELAY_TIME_LEVEL, "0"))}
            out["reconsumeTimes"] = h.reconsume_times
        elif isinstance(request.body, LockBatchRequestBody | UnlockBatchRequestBody):
            body = request.body
            out |= {"group": body.consumer_group, "clientId": body.client_id, "mqs": _sorted_mqs(body.mq_set)}
        world.sent.append(out)


@dataclass
class _Consumer:
    """One consumer of the protocol: its objects, its pulls by number and its listener calls."""

    settings: DefaultMQPushConsumer
    instance: MQClientInstance
    impl: DefaultMQPushConsumerImpl
    connection: ClientConnection
    pulls: dict[int, int] = field(default_factory=dict)  # pull number -> opaque, while unanswered
    pull_mqs: dict[int, MessageQueue] = field(default_factory=dict)  # pull number -> its queue
    next_pull: int = 0
    calls: dict[int, ConcurrentRequest | OrderlyRequest] = field(default_factory=dict)
    next_call: int = 0


class ConsumerWorld:
    """Every consumer of a sequence, the shared clock and the scripted broker."""

    def __init__(self, version: str, plant: str | None, scratch: Path) -> None:
        self.version, self.plant, self.scratch = version, plant, scratch
        self.clock = VirtualClock(0)
        self.endpoint = ScriptedBrokerEndpoint()
        self.consumers: dict[str, _Consumer] = {}
        self.sent: list[dict[str, Any]] = []
        self.compat = SpecCompat()

    def begin(self, args: dict[str, Any]) -> None:
        self.sent = []
        answers = args.get("answers", {})
        if not isinstance(answers, dict) or any(not isinstance(v, list) for v in answers.values()):
            raise p.ProtocolError("answers of a consumer request must be an object {code: [answer, ...]}")
        self.endpoint.begin(answers)

    def end(self) -> None:
        for entry in self.consumers.values():  # oneway requests are read by nobody: the broker is scripted
            entry.connection.outbound.clear()
            entry.connection.send_sequence.clear()

    def handle(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        method = _OPS.get(op)
        if method is None:
            raise p.ProtocolError(f"unknown op {op!r}")
        self.begin(args)
        try:
            return method(self, args)
        finally:
            self.end()

    def _entry(self, args: dict[str, Any]) -> _Consumer:
        try:
            return self.consumers[args["consumer"]]
        except KeyError:
            raise p.ProtocolError(f"no consumer named {args.get('consumer')!r}") from None

    # --- life cycle -------------------------------------------------------------------------------
    def _new(self, args: dict[str, Any]) -> dict[str, Any]:
        name = args["consumer"]
        if not isinstance(name, str) or name in self.consumers:
            raise p.ProtocolError(f"consumer.new: {name!r} is not a new consumer name")
        topic, group, client_id = str(args["topic"]), str(args["group"]), str(args["clientId"])
        model = args.get("messageModel", "CLUSTERING")
        if model not in MESSAGE_MODELS:
            raise p.ProtocolError(f"messageModel must be one of {list(MESSAGE_MODELS)}")
        cfw = args.get("consumeFromWhere", "CONSUME_FROM_LAST_OFFSET")
        if cfw not in p.CONSUME_FROM_WHERE:
            raise p.ProtocolError(f"consumeFromWhere must be one of {list(p.CONSUME_FROM_WHERE)}")
        strategy = STRATEGIES.get(args.get("strategy", "AVG"))
        if strategy is None:
            raise p.ProtocolError(f"strategy must be one of {sorted(STRATEGIES)}")
        queues = int(args.get("queues", 4))
        mq_version: MQVersion = MQVersion(self.version)
        if self.plant == "offset_illegal_fixed_at_once" and self.version == "4.9.8":
            mq_version = _FixesAtOnce(self.version)
        route = {
            topic: TopicRouteData(BROKER_NAME, BROKER_ADDR, queues),
            retry_topic(group): TopicRouteData(BROKER_NAME, BROKER_ADDR, 1),
        }
        connection = ClientConnection(f"{client_id}:0", self.endpoint, BROKER_ADDR)
        instance = MQClientInstance(client_id, self.clock, connection, route, self.compat, mq_version)
        settings = DefaultMQPushConsumer(
            consumer_group=group,
            allocate_message_queue_strategy=strategy(),
            subscription={topic: "*"},
            message_model=model,
            consume_from_where=cfw,
            consume_timestamp=int(args.get("consumeTimestamp", 0)),
            pull_batch_size=int(args.get("pullBatchSize", 32)),
            consume_message_batch_max_size=int(args.get("consumeMessageBatchMaxSize", 1)),
            max_reconsume_times=int(args.get("maxReconsumeTimes", -1)),
            consume_orderly=bool(args.get("orderly", False)),
        )
        impl = DefaultMQPushConsumerImpl(settings, instance, IdSequence(), self.scratch / "consumer-offsets")
        instance.remoting_client.register_rpc_hook(_Recorder(self, name))
        self.consumers[name] = _Consumer(settings, instance, impl, connection)
        self._plant_into(impl)
        return {}

    def _plant_into(self, impl: DefaultMQPushConsumerImpl) -> None:
        """Switch the planted behaviour on in a new consumer's objects."""
        plant = self.plant
        rebalance = impl.rebalance_impl
        if plant == "rebalance_removal_skips_persist" and isinstance(rebalance, RebalancePushImpl):

            def remove_without_persist(mq: MessageQueue, pq: ProcessQueue) -> bool:
                impl.offset_store.remove_offset(mq)
                return True

            rebalance.remove_unnecessary_message_queue = remove_without_persist  # type: ignore[method-assign]
        service = impl.consume_message_service
        if plant == "send_back_failure_counts_as_sent" and isinstance(service, ConsumeMessageConcurrentlyService):
            send_back = service.send_message_back

            def send_back_ignoring_failure(msg: MessageExt, context: Any) -> bool:
                send_back(msg, context)
                return True

            service.send_message_back = send_back_ignoring_failure  # type: ignore[method-assign]
        if plant == "lock_all_keeps_unlocked":
            lock_all = rebalance.lock_all

            def lock_all_keeping_locks() -> None:
                before = {mq: pq.locked for mq, pq in rebalance.process_queue_table.items()}
                lock_all()
                for mq, pq in rebalance.process_queue_table.items():
                    if before.get(mq):
                        pq.locked = True

            rebalance.lock_all = lock_all_keeping_locks  # type: ignore[method-assign]

    def _start(self, args: dict[str, Any]) -> dict[str, Any]:
        entry = self._entry(args)
        entry.impl.start()
        if self.plant == "persist_every_10s":
            future = entry.instance.scheduled_executor_service.get(PERSIST_TASK_NAME)
            if future is not None:
                future.period = 10_000
        return {}

    def _shutdown(self, args: dict[str, Any]) -> dict[str, Any]:
        self._entry(args).impl.shutdown()
        return {}

    def _consumers(self, args: dict[str, Any]) -> dict[str, Any]:
        ids = args["clientIds"]
        if not isinstance(ids, list) or any(not isinstance(i, str) for i in ids):
            raise p.ProtocolError("cluster.consumers: clientIds must be a list of strings")
        self.endpoint.consumer_lists[str(args["group"])] = list(ids)
        return {}

    def _advance(self, args: dict[str, Any]) -> dict[str, Any]:
        ms = int(args["ms"])
        if ms < 0:
            raise p.ProtocolError("time.advance: ms must not be negative")
        self.clock.advance_to(self.clock.now() + ms)
        return {"now": self.clock.now()}

    # --- tasks ------------------------------------------------------------------------------------
    def _run(self, args: dict[str, Any]) -> dict[str, Any]:
        entry = self._entry(args)
        task = args["task"]
        if task not in TASKS:
            raise p.ProtocolError(f"consumer.run: task must be one of {sorted(TASKS)}, got {task!r}")
        if entry.impl.service_state != "RUNNING":
            return {"ran": False}
        mq = _mq(args["mq"]) if TASKS[task] else None
        instance, now = entry.instance, self.clock.now()
        scheduler = instance.scheduled_executor_service
        if task == "rebalance":
            if not instance.rebalance_service.is_due():
                return {"ran": False}
            instance.rebalance_service.run_once()
            return {"ran": True}
        if task == "pull":
            ready = [r for r, when in instance.pull_message_service.pull_request_queue.items() if when <= now]
            request = next((r for r in ready if r.message_queue == mq and not r.process_queue.dropped), None)
            if request is None:
                return {"ran": False}
            instance.pull_message_service.run_pull_request(request)
            return {"ran": True}
        names = {"persistOffsets": PERSIST_TASK_NAME, "lockAll": LOCK_MQ_TASK_NAME}
        if task in names:
            due = scheduler.due_time(names[task])
            if due is None or due > now:
                return {"ran": False}
            scheduler.run_due(names[task])
            return {"ran": True}
        kinds = {"fixOffset": FixOffsetTask, "tryLockLater": TryLockLaterTask, "unlockDelay": UnlockDelayTask}
        futures = [f for f in scheduler.tasks() if isinstance(f.task, kinds[task]) and f.due <= now]
        futures = [f for f in futures if _task_mq(f.task) == mq]
        if not futures:
            return {"ran": False}
        scheduler.run_due(min(futures, key=lambda f: f.due).name)
        return {"ran": True}

    # --- pulls ------------------------------------------------------------------------------------
    def _pull_reply(self, args: dict[str, Any]) -> dict[str, Any]:
        entry = self._entry(args)
        mq = _mq(args["mq"])
        waiting = [n for n in sorted(entry.pulls) if entry.pull_mqs.get(n) == mq]
        if not waiting:
            raise p.ProtocolError(f"pull.reply: consumer {args['consumer']!r} has no pull of {wire_mq(mq)} waiting")
        number = waiting[0]
        opaque = entry.pulls.pop(number, None)
        remoting = entry.instance.remoting_client
        if opaque is None or opaque not in remoting.response_table:
            raise p.ProtocolError(f"pull.reply: consumer {args['consumer']!r} has no pull {number} waiting")
        answer = args["answer"]
        if not isinstance(answer, dict):
            raise p.ProtocolError("pull.reply: answer must be an object")
        future = remoting.response_table[opaque]
        if not answer.get("timeout"):
            response = self._pull_response(future.request, answer)
            entry.connection.replies[opaque] = PendingReply(self.endpoint.incarnation, future.request, response)
        remoting.process_response(opaque)
        return {"pull": number}

    def _pull_response(self, request: RemotingCommand, answer: dict[str, Any]) -> RemotingCommand:
        if "responseCode" in answer:
            return RemotingCommand.create_response_command(int(answer["responseCode"]), "scripted pull error")
        status = answer.get("status")
        if status not in PULL_STATUSES:
            raise p.ProtocolError(f"pull.reply: answer.status must be one of {sorted(PULL_STATUSES)}")
        header = request.header
        assert isinstance(header, PullMessageRequestHeader)
        response_header = PullMessageResponseHeader(
            int(answer["nextBeginOffset"]), int(answer.get("minOffset", 0)), int(answer.get("maxOffset", 0))
        )
        body = None
        if status == "FOUND":
            offsets = answer.get("msgs", [])
            body = PullMessageResponseBody([self._message(header, int(o)) for o in offsets])
        return RemotingCommand.create_response_command(PULL_STATUSES[status], header=response_header, body=body)

    def _message(self, header: PullMessageRequestHeader, offset: int) -> MessageExt:
        return MessageExt(
            topic=header.topic,
            body=b"m",
            queue_id=header.queue_id,
            queue_offset=offset,
            commit_log_offset=offset,
            store_timestamp=self.clock.now(),
            born_timestamp=self.clock.now(),
            store_host=BROKER_ADDR,
            msg_id=message_id(header.topic, header.queue_id, offset),
        )

    # --- listeners --------------------------------------------------------------------------------
    def _consume_start(self, args: dict[str, Any]) -> dict[str, Any]:
        entry = self._entry(args)
        mq, now = _mq(args["mq"]), self.clock.now()
        if entry.impl.service_state != "RUNNING":
            return {"ran": False}
        service = entry.impl.consume_message_service
        executor = service.consume_executor
        ready = [r for r, when in executor.queue.items() if when <= now and r.message_queue == mq]
        if isinstance(service, ConsumeMessageOrderlyService):
            ready = [r for r in ready if service.consume_executor.can_start(r)]  # type: ignore[arg-type]
        if not ready:
            return {"ran": False}
        request = ready[0]
        executor.start_thread(request, now)  # type: ignore[arg-type]
        return {"ran": True, "listener": self._listening(entry, request)}

    def _listening(self, entry: _Consumer, request: Any) -> dict[str, Any] | None:
        """The listener call ``request`` is in now, numbered, or None if its thread ended."""
        if request not in entry.impl.consume_message_service.consume_executor.running:
            return None
        if request.state is not ConsumeRequestState.LISTENING:
            return None
        number = entry.next_call
        entry.next_call += 1
        entry.calls[number] = request
        return {"call": number, "mq": wire_mq(request.message_queue), "msgs": [m.queue_offset for m in request.msgs]}

    def _consume_finish(self, args: dict[str, Any]) -> dict[str, Any]:
        entry = self._entry(args)
        mq = _mq(args["mq"])
        calls = [n for n, r in sorted(entry.calls.items()) if r.message_queue == mq]
        if not calls:
            raise p.ProtocolError(
                f"consume.finish: consumer {args['consumer']!r} has no listener call on {wire_mq(mq)}"
            )
        number = calls[0]
        request = entry.calls.pop(number, None)
        service = entry.impl.consume_message_service
        executor = service.consume_executor
        if request is None or request not in executor.running:
            raise p.ProtocolError(f"consume.finish: consumer {args['consumer']!r} has no listener call {number}")
        status = args["status"]
        if isinstance(service, ConsumeMessageOrderlyService):
            if status not in ORDERLY_STATUSES:
                raise p.ProtocolError(f"consume.finish: an orderly status is one of {list(ORDERLY_STATUSES)}")
            answer: Any = OrderlyListenerAnswer(ConsumeOrderlyStatus[status], True)
        else:
            if status not in CONCURRENT_STATUSES:
                raise p.ProtocolError(f"consume.finish: a concurrent status is one of {list(CONCURRENT_STATUSES)}")
            ack = int(args.get("ackIndex", 2**31 - 1))
            answer = ListenerAnswer(ConsumeConcurrentlyStatus[status], ack)
            if self.plant == "dropped_pq_updates_offset" and request.process_queue.dropped:
                assert isinstance(request, ConcurrentRequest)
                offset = request.process_queue.remove_message(request.msgs, self.clock.now())
                if offset >= 0:
                    entry.impl.offset_store.update_offset(request.message_queue, offset, True)
        executor.resume(request, answer)  # type: ignore[arg-type]
        while request in executor.running and request.state is ConsumeRequestState.UPDATING_OFFSET:
            executor.resume(request, None)  # type: ignore[arg-type]
        return {"call": number, "next": self._listening(entry, request)}

    # --- observation ------------------------------------------------------------------------------
    def _observe(self, args: dict[str, Any]) -> dict[str, Any]:
        entry = self._entry(args)
        impl, instance = entry.impl, entry.instance
        if impl.service_state != "RUNNING":
            return {"running": False}
        table = impl.rebalance_impl.process_queue_table
        cursors = _pull_cursors(instance)
        pqs = []
        for mq in sorted(table):
            pq = table[mq]
            pqs.append(
                {
                    "mq": wire_mq(mq),
                    "dropped": pq.dropped,
                    "locked": pq.locked,
                    "cached": sorted(pq.msg_tree_map),
                    "inFlight": sorted(pq.consuming_msg_orderly_tree_map),
                    "nextOffset": cursors.get(id(pq)),
                }
            )
        offsets = impl.offset_store.clone_offset_table(None)
        listening = [
            {"call": n, "mq": wire_mq(r.message_queue), "msgs": [m.queue_offset for m in r.msgs]}
            for n, r in sorted(entry.calls.items())
        ]
        return {
            "running": True,
            "owned": _sorted_mqs(table),
            "offsets": sorted(({"mq": wire_mq(mq), "offset": o} for mq, o in offsets.items()), key=p.encode),
            "pqs": pqs,
            "pulls": sorted(entry.pulls),
            "listening": listening,
            "tasks": self._tasks(entry),
        }

    def _tasks(self, entry: _Consumer) -> list[dict[str, Any]]:
        """Every pending task with its due time: what ``consumer.run`` and ``consume.start`` can run."""
        instance, impl = entry.instance, entry.impl
        out: list[dict[str, Any]] = []
        service = instance.rebalance_service
        if not service.stopped:
            out.append({"task": "rebalance", "due": service.due_time()})
        scheduler = instance.scheduled_executor_service
        for name, task in ((PERSIST_TASK_NAME, "persistOffsets"), (LOCK_MQ_TASK_NAME, "lockAll")):
            due = scheduler.due_time(name)
            if due is not None:
                out.append({"task": task, "due": due})
        kinds = {FixOffsetTask: "fixOffset", TryLockLaterTask: "tryLockLater", UnlockDelayTask: "unlockDelay"}
        for future in scheduler.tasks():
            for kind, task in kinds.items():
                if isinstance(future.task, kind):
                    out.append({"task": task, "mq": wire_mq(_task_mq(future.task)), "due": future.due})
        for request, when in instance.pull_message_service.pull_request_queue.items():
            if not request.process_queue.dropped:
                out.append({"task": "pull", "mq": wire_mq(request.message_queue), "due": when})
        for consume, when in impl.consume_message_service.consume_executor.queue.items():
            out.append({"task": "consume", "mq": wire_mq(consume.message_queue), "due": when})
        return sorted(out, key=p.encode)


def message_id(topic: str, queue_id: int, offset: int) -> str:
    """The msgId of a message a FOUND pull carries (the protocol names messages this way)."""
    return f"{topic}-{queue_id}-{offset}"


def _task_mq(task: Any) -> MessageQueue:
    if isinstance(task, FixOffsetTask):
        return task.pull_request.message_queue
    mq: MessageQueue = task.message_queue
    return mq


def _pull_cursors(instance: MQClientInstance) -> dict[int, int]:
    """Each pq's pull cursor (its PullRequest's nextOffset), wherever the request is now: queued, on
    the wire, or waiting in a 4.9.8 OFFSET_ILLEGAL task. Keyed by ``id(pq)``."""
    requests: list[PullRequest] = [r for r, _ in instance.pull_message_service.pull_request_queue.items()]
    for future in instance.remoting_client.response_table.values():
        if isinstance(future.invoke_callback, PullInvokeCallback):
            requests.append(future.invoke_callback.pull_callback.pull_request)
    for scheduled in instance.scheduled_executor_service.tasks():
        if isinstance(scheduled.task, FixOffsetTask):
            requests.append(scheduled.task.pull_request)
    return {id(r.process_queue): r.next_offset for r in requests}


def java_exception(e: BaseException) -> str | None:
    """The Java type a consumer operation's exception stands for, or None if it is not one."""
    if isinstance(e, MQClientException):
        return "MQClientException"
    if isinstance(e, SchedulerError):
        return "IllegalStateException"
    return None


_OPS: Final = {
    "consumer.new": ConsumerWorld._new,
    "consumer.start": ConsumerWorld._start,
    "consumer.shutdown": ConsumerWorld._shutdown,
    "consumer.run": ConsumerWorld._run,
    "consumer.observe": ConsumerWorld._observe,
    "cluster.consumers": ConsumerWorld._consumers,
    "time.advance": ConsumerWorld._advance,
    "pull.reply": ConsumerWorld._pull_reply,
    "consume.start": ConsumerWorld._consume_start,
    "consume.finish": ConsumerWorld._consume_finish,
}
