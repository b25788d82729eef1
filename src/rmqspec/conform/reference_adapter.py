"""The reference implementation behind the adapter protocol: what ``rmqspec serve-reference`` serves
and what ``rmqspec conform`` compares a system under test with.

Each request is carried out on the real ``rmqspec.reference`` classes (``ProcessQueue``, the two
offset stores, ``ConsumerOffsetManager`` with ``ConsumerManageProcessor``'s young-queue rule,
``RebalancePushImpl.compute_pull_from_where_with_exception``, the allocation strategies). The broker
a client component talks to is scripted: every request it sends is recorded, and each one that
waits for a reply takes the next of the request's ``answers`` (a timeout once they run out). Files
(local offset stores, broker offset files) live in a private scratch directory that ``reset`` empties.

At the edges of their inputs the answers are the 4.9.8 classes' (docs/oracle.md, "Edges of the inputs"). The reference
classes themselves answer CONFIG with no list as ``null`` and MACHINE_ROOM_NEARBY around it with
``NullPointerException`` (R11.4, R11.6), a negative orderly batch size with
``IllegalArgumentException`` (R6.4), and wrap ``long`` arithmetic in msgAccCnt (R6.2). What only an
adapter request can produce is answered here: a broker SUCCESS reply without a header throws
``NullPointerException`` in ``MQClientAPIImpl`` (R2.3); a ``null`` clientId hashes as ``"null-<i>"``
on the consistent-hash ring (R11.3); ``consumeTimestamp`` is floored to whole seconds, as the
``yyyyMMddHHmmss`` string a real consumer holds (R10.2).

``plant`` switches on one deliberately wrong behaviour (:data:`PLANTS`), or two at once
(:data:`COMBINED_PLANTS`), so the tests can show that ``conform`` finds divergences, each of them;
it is never on unless asked for.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Final, TextIO, cast

from rmqspec import __version__
from rmqspec.conform import protocol as p
from rmqspec.conform.consumer_reference import CONSUMER_PLANTS, ConsumerWorld
from rmqspec.jsonin import InputError, parse
from rmqspec.reference.allocate import (
    AllocateMachineRoomNearby,
    AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle,
    AllocateMessageQueueByConfig,
    AllocateMessageQueueByMachineRoom,
    AllocateMessageQueueConsistentHash,
    AllocateMessageQueueStrategy,
    IllegalArgumentError,
    NullPointerError,
    md5_hash,
)
from rmqspec.reference.broker import ConsumerManageProcessor
from rmqspec.reference.consumer_offset_manager import ConsumerOffsetManager
from rmqspec.reference.exceptions import MQClientException
from rmqspec.reference.local_file_offset_store import LocalFileOffsetStore
from rmqspec.reference.message import PROPERTY_MAX_OFFSET, MessageExt
from rmqspec.reference.message_queue import MessageQueue
from rmqspec.reference.mq_client_instance import MASTER_ID, FindBrokerResult, MQAdminImpl, MQBrokerException
from rmqspec.reference.mq_version import MQVersion
from rmqspec.reference.offset_store import OffsetStore, ReadOffsetType
from rmqspec.reference.process_queue import NoSuchElementError, ProcessQueue
from rmqspec.reference.protocol import (
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    RemotingCommand,
    RequestCode,
    UpdateConsumerOffsetRequestHeader,
)
from rmqspec.reference.rebalance_impl import RebalancePushImpl
from rmqspec.reference.remote_broker_offset_store import RemoteBrokerOffsetStore
from rmqspec.reference.remoting import RemotingException

# Deliberately wrong behaviours, each a bug a real client could have; tests/test_conform.py shows
# conform finds every one.
PLANTS: Final[dict[str, str]] = {
    "remove_returns_highest_plus_one": "pq.remove answers the highest removed offset + 1, not the lowest held (RMQ-01)",
    "update_ignores_increase_only": "store.update overwrites a larger offset even with increaseOnly (R1.5)",
    "read_error_code_as_minus_two": "store.read answers -2, not -1, for a broker error code (R2.3, 4.9.8)",
    "persist_all_keeps_unused": "store.persistAll keeps the entries of queues it was not given (R2.7)",
    "allocate_sorts_cid_all": "allocate sorts cidAll itself; the strategy must take the list as given (R9.3)",
    "orderly_commit_returns_last_key": "pq.commit answers the largest in-flight offset, not one past it (R6.4)",
    "young_queue_not_found": "com.query answers QUERY_NOT_FOUND for a young queue instead of 0 (R3.5)",
    "declares_5x_behaves_4_9_8": "hello declares 5.x but every version switch behaves as 4.9.8 (docs/spec.md)",
    "config_null_as_empty": "allocate answers [] for CONFIG with no list, not null (R11.4; Java's edge)",
    "success_without_header_as_not_found": "a SUCCESS broker reply without a header reads as -1, not -2 (R2.3, §17)",
    "acc_count_without_overflow": "pq.put computes msgAccCnt without long overflow (R6.2; Java's edge)",
    "negative_batch_takes_nothing": "pq.take with a negative batch size takes nothing instead of throwing (R6.4, §17)",
    "load_ignores_bak": "store.load of a local store never falls back to offsets.json.bak (R1.10)",
    "store_two_bugs": "update_ignores_increase_only and persist_all_keeps_unused at once: two differences of "
    "store.clone, an offset changed and an entry only the SUT keeps (R1.5, R2.7)",
}
# Plants that switch on several of the others at once (an adapter with two bugs on one operation).
COMBINED_PLANTS: Final[dict[str, tuple[str, ...]]] = {
    "store_two_bugs": ("update_ignores_increase_only", "persist_all_keeps_unused"),
}

# Java exception names for the reference's exceptions, as they appear in error.type.
_JAVA_EXCEPTIONS: Final[dict[type[BaseException], str]] = {
    IllegalArgumentError: "IllegalArgumentException",
    NullPointerError: "NullPointerException",
    MQClientException: "MQClientException",
    NoSuchElementError: "NoSuchElementException",
}
_JAVA_EXCEPTION_TYPES: Final = tuple(_JAVA_EXCEPTIONS)
# Every plant serve-reference accepts: the component-level ones and the consumer-level ones.
ALL_PLANTS: Final[dict[str, str]] = {**PLANTS, **CONSUMER_PLANTS}


class ScriptedBroker:
    """The broker as the test decides it: records requests, answers from the request's script."""

    def __init__(self, plant: str | None = None) -> None:
        self.sent: list[dict[str, Any]] = []
        self.answers: list[dict[str, Any]] = []
        self.answered_with_code = False
        self.plant = plant

    def begin(self, answers: list[dict[str, Any]]) -> None:
        self.sent, self.answers, self.answered_with_code = [], list(answers), False

    def _answer(self) -> int:
        """The next scripted answer: an offset, or the exception its error stands for."""
        if not self.answers:
            raise RemotingException("wait response timeout (no scripted answer left)")
        answer = self.answers.pop(0)
        if "offset" in answer:
            return int(answer["offset"])
        if "responseCode" in answer:
            code = int(answer["responseCode"])
            # SUCCESS without a header: the Long offset unboxes null, an NPE (Java's edge)
            if code == p.SUCCESS and self.plant != "success_without_header_as_not_found":
                raise RemotingException("NullPointerException: a SUCCESS reply without a response header")
            self.answered_with_code = True
            raise MQBrokerException(code, "scripted broker error")
        raise RemotingException("wait response timeout")

    # MQClientAPIImpl's methods, as the offset store and MQAdminImpl call them; addresses are broker names.
    def query_consumer_offset(self, addr: str, header: QueryConsumerOffsetRequestHeader) -> int:
        self.sent.append(_request(p.QUERY_CONSUMER_OFFSET, addr, header.topic, header.queue_id, header.consumer_group))
        return self._answer()

    def update_consumer_offset_oneway(self, addr: str, header: UpdateConsumerOffsetRequestHeader) -> None:
        request = _request(p.UPDATE_CONSUMER_OFFSET, addr, header.topic, header.queue_id, header.consumer_group)
        self.sent.append({**request, "offset": header.commit_offset, "oneway": True})

    def get_max_offset(self, addr: str, topic: str, queue_id: int) -> int:
        self.sent.append(_request(p.GET_MAX_OFFSET, addr, topic, queue_id))
        return self._answer()

    def search_offset(self, addr: str, topic: str, queue_id: int, timestamp: int) -> int:
        self.sent.append({**_request(p.SEARCH_OFFSET_BY_TIMESTAMP, addr, topic, queue_id), "timestamp": timestamp})
        return self._answer()


def _request(code: str, broker_name: str, topic: str, queue_id: int, group: str | None = None) -> dict[str, Any]:
    request = {"code": code, "brokerName": broker_name, "topic": topic, "queueId": queue_id}
    if group is not None:
        request["group"] = group
    return request


class _ScriptedClientFactory:
    """The parts of ``MQClientInstance`` the offset stores and ``MQAdminImpl`` use."""

    def __init__(self, broker: ScriptedBroker) -> None:
        self.mq_client_api_impl = broker
        self.mq_admin_impl = MQAdminImpl(cast(Any, self))

    def find_broker_address_in_subscribe(
        self, broker_name: str, broker_id: int = MASTER_ID, only_this_broker: bool = False
    ) -> FindBrokerResult:
        return FindBrokerResult(broker_name, False)  # one master, addressed by its name

    def find_broker_address_in_publish(self, broker_name: str) -> str:
        return broker_name


class _StoreFacts:
    """The message store as ``com.query`` describes it: min and max offset, and whether message 0
    is still in page cache (the young-queue rule, R3.5)."""

    def __init__(self, min_offset: int, max_offset: int, offset0_in_memory: bool) -> None:
        self.min_offset, self.max_offset, self.offset0_in_memory = min_offset, max_offset, offset0_in_memory

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.min_offset

    def _has(self, offset: int) -> bool:
        return self.min_offset <= offset < self.max_offset

    def check_in_disk_by_consume_offset(self, topic: str, queue_id: int, offset: int) -> bool:
        return self._has(offset) and not (offset == 0 and self.offset0_in_memory)

    def check_in_mem_by_consume_offset(self, topic: str, queue_id: int, offset: int, batch: int = 1) -> bool:
        return self._has(offset) and offset == 0 and self.offset0_in_memory


class ReferenceAdapter:
    """Answers protocol requests with the reference implementation."""

    def __init__(self, version: str = "4.9.8", plant: str | None = None) -> None:
        if version not in p.VERSIONS:
            raise ValueError(f"version {version!r} is not implemented; accepted: {', '.join(p.VERSIONS)}")
        if plant is not None and plant not in ALL_PLANTS:
            raise ValueError(f"unknown plant {plant!r}; accepted: {', '.join(sorted(ALL_PLANTS))}")
        self.version, self.plant = version, plant
        self.plants = frozenset(COMBINED_PLANTS.get(plant, (plant,))) if plant is not None else frozenset()
        self.mq_version = MQVersion("4.9.8" if plant == "declares_5x_behaves_4_9_8" else version)
        self.broker = ScriptedBroker(plant)
        self.factory = _ScriptedClientFactory(self.broker)
        self.scratch = Path(tempfile.mkdtemp(prefix="rmqspec-serve-"))
        self.pqs: dict[str, ProcessQueue] = {}
        self.stores: dict[str, OffsetStore] = {}
        self.coms: dict[str, ConsumerOffsetManager] = {}
        self._uids = 0
        self.consumers = ConsumerWorld(version, plant, self.scratch)

    def hello(self, asked: Any = 1) -> dict[str, Any]:
        """Protocol 2 (with the consumer components) to a driver that asks for it, else 1."""
        protocol = 2 if isinstance(asked, int) and not isinstance(asked, bool) and asked >= 2 else 1
        return {
            "protocol": protocol,
            "implementation": f"rmqspec {__version__} reference" + (f" (planted: {self.plant})" if self.plant else ""),
            "version": self.version,
            "components": list(p.COMPONENTS if protocol == 2 else p.COMPONENTS_V1),
            "strategies": list(p.STRATEGIES),
        }

    def reset(self) -> None:
        """Forget every handle and file, as at start-up."""
        self.pqs.clear()
        self.stores.clear()
        self.coms.clear()
        shutil.rmtree(self.scratch, ignore_errors=True)
        self.scratch.mkdir(parents=True)
        self.consumers = ConsumerWorld(self.version, self.plant, self.scratch)

    def close(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)

    def handle(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """The reply (without ``id``) to one request. A malformed request is an error reply of type
        ``ProtocolError``; a Java exception of the method is an error reply of its Java type."""
        if op in p.CONSUMER_OPS:
            return self._consumer_request(op, args)
        self.broker.begin(args.get("answers") or [])
        try:
            if op == "hello":
                result: dict[str, Any] = self.hello(args.get("protocol", 1))
            elif op == "reset":
                self.reset()
                result = {}
            else:
                method = _HANDLERS.get(op)
                if method is None:
                    raise p.ProtocolError(f"unknown op {op!r}")
                result = method(self, args)
        except _JAVA_EXCEPTION_TYPES as e:
            java_type = next(name for cls, name in _JAVA_EXCEPTIONS.items() if isinstance(e, cls))
            return {"ok": False, "error": {"type": java_type, "message": str(e)}, "sent": self.broker.sent}
        except (p.ProtocolError, KeyError, TypeError, ValueError, OverflowError, AttributeError) as e:
            # OverflowError: a number too large for what it sizes (1e400 as an offset, 10**30 bytes);
            # AttributeError: a value of the wrong JSON type where an object is expected.
            detail = f"missing argument {e}" if isinstance(e, KeyError) else str(e)
            return {"ok": False, "error": {"type": "ProtocolError", "message": f"{op}: {detail}"}}
        return {"ok": True, "result": result, "sent": self.broker.sent}

    def _consumer_request(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """A protocol 2 request, carried out by the reference's own push consumers."""
        world = self.consumers
        try:
            result = world.handle(op, args)
        except MQClientException as e:
            return {"ok": False, "error": {"type": "MQClientException", "message": str(e)}, "sent": world.sent}
        except (p.ProtocolError, KeyError, TypeError, ValueError, OverflowError, AttributeError) as e:
            detail = f"missing argument {e}" if isinstance(e, KeyError) else str(e)
            return {"ok": False, "error": {"type": "ProtocolError", "message": f"{op}: {detail}"}}
        return {"ok": True, "result": result, "sent": world.sent}

    # --- allocate (R11) ----------------------------------------------------------------------------
    def _allocate(self, args: dict[str, Any]) -> dict[str, Any]:
        strategy = _strategy(args)
        mq_all = None if args.get("mqAll") is None else [_mq(m) for m in args["mqAll"]]
        cid_all = args.get("cidAll")
        if self.plant == "allocate_sorts_cid_all" and cid_all:
            cid_all = sorted(cid_all, key=str)
        queues = strategy.allocate(args.get("consumerGroup", ""), args.get("currentCID"), mq_all, cid_all)  # type: ignore[arg-type]
        if queues is None and self.plant == "config_null_as_empty":
            queues = []
        return {"queues": None if queues is None else [_wire_mq(q) for q in queues]}

    # --- ProcessQueue (R6) -------------------------------------------------------------------------
    def _pq_new(self, args: dict[str, Any]) -> dict[str, Any]:
        self._uids += 1
        self.pqs[args["pq"]] = ProcessQueue(self._uids, now=0)
        return {}

    def _pq(self, args: dict[str, Any]) -> ProcessQueue:
        try:
            return self.pqs[args["pq"]]
        except KeyError:
            raise p.ProtocolError(f"no ProcessQueue named {args['pq']!r}") from None

    def _pq_put(self, args: dict[str, Any]) -> dict[str, Any]:
        pq, msgs = self._pq(args), _messages(args["msgs"])
        dispatch = pq.put_message(msgs)
        top = msgs[-1].get_property(PROPERTY_MAX_OFFSET) if msgs else None
        if self.plant == "acc_count_without_overflow" and top is not None and int(top) - msgs[-1].queue_offset > 0:
            pq.msg_acc_cnt = int(top) - msgs[-1].queue_offset
        return {"dispatchToConsume": dispatch}

    def _pq_remove(self, args: dict[str, Any]) -> dict[str, Any]:
        msgs = _messages(args["msgs"])
        offset = self._pq(args).remove_message(msgs, now=0)
        if self.plant == "remove_returns_highest_plus_one" and offset != -1 and msgs:
            offset = max(m.queue_offset for m in msgs) + 1
        return {"offset": offset}

    def _pq_state(self, args: dict[str, Any]) -> dict[str, Any]:
        pq = self._pq(args)
        return {
            "msgCount": pq.msg_count,
            "msgSize": pq.msg_size,
            "queueOffsetMax": pq.queue_offset_max,
            "maxSpan": pq.get_max_span(),
            "msgAccCnt": pq.msg_acc_cnt,
            "consuming": pq.consuming,
            "cached": sorted(pq.msg_tree_map),
            "inFlight": sorted(pq.consuming_msg_orderly_tree_map),
        }

    def _pq_take(self, args: dict[str, Any]) -> dict[str, Any]:
        pq, batch_size = self._pq(args), int(args["batchSize"])
        if batch_size < 0 and self.plant == "negative_batch_takes_nothing":
            batch_size = 0
        return {"offsets": [m.queue_offset for m in pq.take_messages(batch_size, now=0)]}

    def _pq_commit(self, args: dict[str, Any]) -> dict[str, Any]:
        offset = self._pq(args).commit()
        return {"offset": offset - 1 if self.plant == "orderly_commit_returns_last_key" else offset}

    def _pq_rollback(self, args: dict[str, Any]) -> dict[str, Any]:
        self._pq(args).rollback()
        return {}

    def _pq_consume_again(self, args: dict[str, Any]) -> dict[str, Any]:
        self._pq(args).make_message_to_consume_again(_messages(args["msgs"]))
        return {}

    def _pq_clear(self, args: dict[str, Any]) -> dict[str, Any]:
        self._pq(args).clear()
        return {}

    # --- offset stores (R1, R2) --------------------------------------------------------------------
    def _store_new(self, args: dict[str, Any]) -> dict[str, Any]:
        kind, group = args.get("kind"), args["group"]
        if kind == "remote":
            self.stores[args["store"]] = RemoteBrokerOffsetStore(cast(Any, self.factory), group, self.mq_version)
        elif kind == "local":
            self.stores[args["store"]] = LocalFileOffsetStore(args["clientId"], group, self.scratch / "client")
        else:
            raise p.ProtocolError(f"store.new: kind must be 'remote' or 'local', got {kind!r}")
        return {}

    def _store(self, args: dict[str, Any]) -> OffsetStore:
        try:
            return self.stores[args["store"]]
        except KeyError:
            raise p.ProtocolError(f"no offset store named {args['store']!r}") from None

    def _store_load(self, args: dict[str, Any]) -> dict[str, Any]:
        store = self._store(args)
        if self.plant == "load_ignores_bak" and isinstance(store, LocalFileOffsetStore):
            Path(f"{store.store_path}.bak").unlink(missing_ok=True)
        store.load()
        return {}

    def _store_update(self, args: dict[str, Any]) -> dict[str, Any]:
        increase_only = bool(args["increaseOnly"]) and "update_ignores_increase_only" not in self.plants
        self._store(args).update_offset(_mq(args["mq"]), int(args["offset"]), increase_only)
        return {}

    def _store_read(self, args: dict[str, Any]) -> dict[str, Any]:
        offset = self._store(args).read_offset(_mq(args["mq"]), ReadOffsetType(args["type"]))
        if self.plant == "read_error_code_as_minus_two" and offset == -1 and self.broker.answered_with_code:
            offset = -2
        return {"offset": offset}

    def _store_persist_all(self, args: dict[str, Any]) -> dict[str, Any]:
        store = self._store(args)
        before = store.clone_offset_table(None)
        store.persist_all({_mq(m) for m in args["mqs"]})
        if "persist_all_keeps_unused" in self.plants:
            for queue, offset in before.items():
                store.update_offset(queue, offset, True)
        return {}

    def _store_persist(self, args: dict[str, Any]) -> dict[str, Any]:
        self._store(args).persist(_mq(args["mq"]))
        return {}

    def _store_remove(self, args: dict[str, Any]) -> dict[str, Any]:
        self._store(args).remove_offset(_mq(args["mq"]))
        return {}

    def _store_damage(self, args: dict[str, Any]) -> dict[str, Any]:
        """Damage a local store's ``offsets.json`` or its ``.bak`` between writes (R1.16)."""
        store = self._store(args)
        if not isinstance(store, LocalFileOffsetStore):
            raise p.ProtocolError(f"store.damage: {args['store']!r} is not a local offset store")
        damage, which = args.get("damage"), args.get("file")
        if damage not in p.DAMAGES or which not in p.DAMAGED_FILES:
            raise p.ProtocolError(
                f"store.damage: damage must be one of {list(p.DAMAGES)} and file one of {list(p.DAMAGED_FILES)}"
            )
        damage_file(Path(f"{store.store_path}.bak") if which == "bak" else store.store_path, str(damage))
        return {}

    def _store_clone(self, args: dict[str, Any]) -> dict[str, Any]:
        table = self._store(args).clone_offset_table(args.get("topic"))
        return {"table": [{"mq": _wire_mq(q), "offset": o} for q, o in sorted(table.items())]}

    # --- ConsumerOffsetManager (R3) ----------------------------------------------------------------
    def _com_new(self, args: dict[str, Any]) -> dict[str, Any]:
        self.coms[args["com"]] = ConsumerOffsetManager(self.scratch / "broker" / args["com"])
        return {}

    def _com(self, args: dict[str, Any]) -> ConsumerOffsetManager:
        try:
            return self.coms[args["com"]]
        except KeyError:
            raise p.ProtocolError(f"no ConsumerOffsetManager named {args['com']!r}") from None

    def _com_commit(self, args: dict[str, Any]) -> dict[str, Any]:
        com = self._com(args)
        com.commit_offset(
            args.get("clientHost", "127.0.0.1"), args["group"], args["topic"], int(args["queueId"]), int(args["offset"])
        )
        return {}

    def _com_query(self, args: dict[str, Any]) -> dict[str, Any]:
        facts = _StoreFacts(int(args["minOffset"]), int(args["maxOffset"]), bool(args["offset0InMemory"]))
        controller = SimpleNamespace(consumer_offset_manager=self._com(args), message_store=facts)
        header = QueryConsumerOffsetRequestHeader(args["group"], args["topic"], int(args["queueId"]))
        header.set_zero_if_not_found = args.get("setZeroIfNotFound")  # absent (null) unless a 5.0.0 client
        request = RemotingCommand.create_request_command(RequestCode.QUERY_CONSUMER_OFFSET, header)
        processor = ConsumerManageProcessor(cast(Any, controller), self.mq_version)
        response = processor.query_consumer_offset(request)
        if (
            self.plant == "young_queue_not_found"
            and controller.consumer_offset_manager.query_offset(header.consumer_group, header.topic, header.queue_id)
            < 0
        ):
            return {"responseCode": p.QUERY_NOT_FOUND}
        if response.code == p.SUCCESS:
            assert isinstance(response.header, QueryConsumerOffsetResponseHeader)
            return {"responseCode": p.SUCCESS, "offset": response.header.offset}
        return {"responseCode": response.code}

    def _com_persist(self, args: dict[str, Any]) -> dict[str, Any]:
        self._com(args).persist()
        return {}

    def _com_restart(self, args: dict[str, Any]) -> dict[str, Any]:
        old = self._com(args)
        fresh = ConsumerOffsetManager(old.store_path_root_dir)
        self.coms[args["com"]] = fresh
        return {"loaded": fresh.load()}

    def _com_table(self, args: dict[str, Any]) -> dict[str, Any]:
        rows: list[dict[str, Any]] = []
        for key, queues in self._com(args).clone_table().items():
            topic, _, group = key.partition("@")
            rows.extend({"topic": topic, "group": group, "queueId": q, "offset": o} for q, o in queues.items())
        return {"table": rows}

    # --- computePullFromWhere (R10.1) --------------------------------------------------------------
    def _pull_from_where(self, args: dict[str, Any]) -> dict[str, Any]:
        cfw = args["consumeFromWhere"]
        if cfw not in p.CONSUME_FROM_WHERE:
            raise p.ProtocolError(f"consumeFromWhere must be one of {list(p.CONSUME_FROM_WHERE)}, got {cfw!r}")
        config = SimpleNamespace(
            consumer_group=args.get("group", "G"),
            message_model="CLUSTERING",
            consume_from_where=cfw,
            consume_timestamp=_whole_seconds(int(args.get("consumeTimestamp", 0))),
        )
        consumer = SimpleNamespace(default_mq_push_consumer=config, offset_store=self._store(args))
        rebalance = RebalancePushImpl(
            cast(Any, consumer),
            AllocateMessageQueueAveragely(),
            cast(Any, self.factory),
            cast(Any, None),
            self.mq_version,
        )
        return {"offset": rebalance.compute_pull_from_where_with_exception(_mq(args["mq"]))}


_HANDLERS: Final = {
    "allocate": ReferenceAdapter._allocate,
    "pq.new": ReferenceAdapter._pq_new,
    "pq.put": ReferenceAdapter._pq_put,
    "pq.remove": ReferenceAdapter._pq_remove,
    "pq.state": ReferenceAdapter._pq_state,
    "pq.take": ReferenceAdapter._pq_take,
    "pq.commit": ReferenceAdapter._pq_commit,
    "pq.rollback": ReferenceAdapter._pq_rollback,
    "pq.consumeAgain": ReferenceAdapter._pq_consume_again,
    "pq.clear": ReferenceAdapter._pq_clear,
    "store.new": ReferenceAdapter._store_new,
    "store.load": ReferenceAdapter._store_load,
    "store.update": ReferenceAdapter._store_update,
    "store.read": ReferenceAdapter._store_read,
    "store.persistAll": ReferenceAdapter._store_persist_all,
    "store.persist": ReferenceAdapter._store_persist,
    "store.remove": ReferenceAdapter._store_remove,
    "store.clone": ReferenceAdapter._store_clone,
    "store.damage": ReferenceAdapter._store_damage,
    "com.new": ReferenceAdapter._com_new,
    "com.commit": ReferenceAdapter._com_commit,
    "com.query": ReferenceAdapter._com_query,
    "com.persist": ReferenceAdapter._com_persist,
    "com.restart": ReferenceAdapter._com_restart,
    "com.table": ReferenceAdapter._com_table,
    "pullFromWhere": ReferenceAdapter._pull_from_where,
}
assert set(_HANDLERS) | set(p.CONSUMER_OPS) == set(p.OPS), "every protocol op has a reference handler"


def damage_file(path: Path, damage: str) -> None:
    """Do ``damage`` (one of :data:`protocol.DAMAGES`) to the file at ``path``: delete it, empty it,
    keep its first half (a JSON object cut anywhere is not JSON), or replace it with
    :data:`protocol.CORRUPT_CONTENT`. A file that does not exist stays missing, except for
    ``corrupt``, which creates it."""
    if damage == "missing":
        path.unlink(missing_ok=True)
        return
    if damage != "corrupt" and not path.exists():
        return
    content = path.read_bytes() if path.exists() else b""
    path.parent.mkdir(parents=True, exist_ok=True)
    new = {"empty": b"", "truncated": content[: len(content) // 2], "corrupt": p.CORRUPT_CONTENT}[damage]
    tmp = path.with_name(path.name + ".damage")
    tmp.write_bytes(new)
    os.replace(tmp, path)


def _whole_seconds(millis: int) -> int:
    """``consumeTimestamp`` as a 4.9.8 consumer holds it: a yyyyMMddHHmmss string, so whole seconds (R10.2)."""
    return millis - millis % 1000


def _strategy(args: dict[str, Any]) -> AllocateMessageQueueStrategy:
    name = args.get("strategy")
    if name == "AVG":
        return AllocateMessageQueueAveragely()
    if name == "AVG_BY_CIRCLE":
        return AllocateMessageQueueAveragelyByCircle()
    if name == "CONSISTENT_HASH":
        return _NullClientIdConsistentHash(int(args.get("virtualNodeCnt", 10)))
    if name == "CONFIG":
        queues = args.get("messageQueueList")
        return AllocateMessageQueueByConfig(None if queues is None else [_mq(m) for m in queues])
    if name == "MACHINE_ROOM":
        idcs = args.get("consumeridcs")
        return AllocateMessageQueueByMachineRoom(None if idcs is None else list(idcs))
    if name == "MACHINE_ROOM_NEARBY":
        inner = args.get("inner", "AVG")
        if isinstance(inner, dict):  # a nested strategy with its own arguments
            inner_strategy = _strategy(inner)
        elif inner == "MACHINE_ROOM_NEARBY":
            raise p.ProtocolError(
                'inner "MACHINE_ROOM_NEARBY" needs its own arguments: give inner as an object '
                '{"strategy": "MACHINE_ROOM_NEARBY", "inner": ..., "brokerRooms": ..., "consumerRooms": ...}'
            )
        else:
            inner_strategy = _strategy({**args, "strategy": inner})
        rooms = _RoomTable(args.get("brokerRooms", {}), args.get("consumerRooms", {}))
        return AllocateMachineRoomNearby(inner_strategy, rooms)
    raise p.ProtocolError(f"strategy must be one of {list(p.STRATEGIES)}, got {name!r}")


class _NullClientIdConsistentHash(AllocateMessageQueueConsistentHash):
    """CONSISTENT_HASH with Java's treatment of a ``null`` clientId in cidAll (R11.3; Java's edge):
    its virtual nodes hash as ``"null-0"``, ``"null-1"``, ...; the next node added after it throws
    ``NullPointerException`` (``getExistingReplicas`` calls ``getKey().equals`` on the null id's nodes);
    and no current consumer owns what routes to it."""

    def allocate(self, consumer_group: str, current_cid: str, mq_all: Any, cid_all: Any) -> list[MessageQueue]:
        if not cid_all or None not in cid_all:
            return super().allocate(consumer_group, current_cid, mq_all, cid_all)
        if not self.check(consumer_group, current_cid, mq_all, cid_all):
            return []
        if self.virtual_node_cnt > 0 and cid_all.index(None) < len(cid_all) - 1:
            raise NullPointerError("VirtualNode#isVirtualNodeOf: the null clientId's node has no key")
        null_id = "\0null"  # a stand-in no real clientId equals: the ids are compared, never hashed, as they are
        while any(cid is not None and cid.startswith(null_id) for cid in cid_all):
            null_id += "\0"

        def hash_key(key: str) -> int:
            return md5_hash("null" + key[len(null_id) :] if key.startswith(null_id + "-") else key)

        ids = [null_id if cid is None else cid for cid in cid_all]
        return AllocateMessageQueueConsistentHash(self.virtual_node_cnt, hash_key).allocate(
            consumer_group, current_cid, mq_all, ids
        )


class _RoomTable:
    """A ``MachineRoomResolver`` from two tables: broker name to room, client id to room."""

    def __init__(self, broker_rooms: dict[str, str], consumer_rooms: dict[str, str]) -> None:
        self.broker_rooms, self.consumer_rooms = broker_rooms, consumer_rooms

    def broker_deploy_in(self, message_queue: MessageQueue) -> str | None:
        return self.broker_rooms.get(message_queue.broker_name)

    def consumer_deploy_in(self, client_id: str) -> str | None:
        return self.consumer_rooms.get(client_id)


def _mq(wire: Any) -> MessageQueue:
    if not isinstance(wire, dict):
        raise p.ProtocolError(f"a message queue must be an object {{topic, brokerName, queueId}}, got {wire!r}")
    return MessageQueue(str(wire["topic"]), str(wire["brokerName"]), int(wire["queueId"]))


def _wire_mq(queue: MessageQueue) -> dict[str, Any]:
    return p.mq(queue.topic, queue.broker_name, queue.queue_id)


def _messages(wire: Any) -> list[MessageExt]:
    """Messages as ProcessQueue sees them: queue offset, body length, and the MAX_OFFSET property."""
    if not isinstance(wire, list):
        raise p.ProtocolError(f"msgs must be a list of {{queueOffset, bodySize[, maxOffset]}}, got {wire!r}")
    msgs = []
    for m in wire:
        properties = {PROPERTY_MAX_OFFSET: str(m["maxOffset"])} if m.get("maxOffset") is not None else {}
        msgs.append(MessageExt("T", b"x" * int(m["bodySize"]), properties, queue_offset=int(m["queueOffset"])))
    return msgs


def serve(lines: Iterable[str], out: TextIO, version: str = "4.9.8", plant: str | None = None) -> None:
    """Answer protocol requests, one JSON line each, until the input ends (``rmqspec serve-reference``)."""
    adapter = ReferenceAdapter(version, plant)
    try:
        for line in lines:
            if not line.strip():
                continue
            try:
                request = parse(line, "request")
            except InputError as e:
                request = {"op": None, "bad": e.what if e.column is None else f"{e.what} (column {e.column})"}
            if not isinstance(request, dict):
                request = {"op": None, "bad": "a request must be a JSON object"}
            if "bad" in request or not isinstance(request.get("args", {}), dict):
                reply: dict[str, Any] = {
                    "ok": False,
                    "error": {"type": "ProtocolError", "message": request.get("bad", "args must be an object")},
                }
            else:
                reply = adapter.handle(str(request.get("op")), request.get("args", {}))
            reply["id"] = request.get("id")
            out.write(p.encode(reply) + "\n")
            out.flush()
    finally:
        adapter.close()
