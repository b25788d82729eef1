"""The adapter protocol between ``rmqspec conform`` and a system under test: shapes, names and checks.

A system under test (SUT) is any program that reads one JSON request per line on stdin and writes
one JSON reply per line on stdout, in order::

    -> {"id": 3, "op": "store.read", "args": {"store": "s0", "mq": {...}, "type": "READ_FROM_STORE",
                                               "answers": [{"responseCode": 22}]}}
    <- {"id": 3, "ok": true, "result": {"offset": -1}, "sent": [{"code": "QUERY_CONSUMER_OFFSET", ...}]}

The first request is always ``hello``; the SUT answers with the protocol version, the RocketMQ
version it implements and the components it has (:data:`COMPONENTS`). ``docs/oracle.md`` gives the
whole protocol with an example session; this module is its executable form: the operation table
(:data:`OPS`), the rule each operation's expected answer comes from (for divergence reports), the
check of a reply's shape (:func:`check_reply`), the normal form replies are compared in
(:func:`normalise`) and the coarse kind of difference between two replies (:func:`difference`); where
and how they differ, which names a finding, is :mod:`rmqspec.conform.fingerprint`'s.

A SUT may answer that it does not support an operation (``{"id": n, "unsupported": {"reason":
"..."}}``) or some fields of a result (``"unsupportedFields": ["msgAccCnt"]`` beside ``ok`` and
``result``): conform then stops generating the operation, or stops comparing the fields, for the
rest of the run (:func:`unsupported_fields`, :func:`is_unsupported`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

PROTOCOL_VERSION: Final = 2  # what conform asks for in hello; a version 1 adapter answers 1
PROTOCOL_VERSIONS: Final = (1, 2)

# Components a SUT may declare in its hello reply, and the operations each one brings.
ALLOCATE: Final = "allocate"
PROCESS_QUEUE: Final = "processQueue"
PROCESS_QUEUE_ORDERLY: Final = "processQueue.orderly"
REMOTE_OFFSET_STORE: Final = "remoteOffsetStore"
LOCAL_OFFSET_STORE: Final = "localOffsetStore"
CONSUMER_OFFSET_MANAGER: Final = "consumerOffsetManager"
PULL_FROM_WHERE: Final = "pullFromWhere"
# Protocol version 2: whole push consumers (docs/oracle.md, "Protocol version 2: consumers under test").
PUSH_CONSUMER: Final = "pushConsumer"
PUSH_CONSUMER_ORDERLY: Final = "pushConsumer.orderly"
COMPONENTS_V1: Final = (
    ALLOCATE,
    PROCESS_QUEUE,
    PROCESS_QUEUE_ORDERLY,
    REMOTE_OFFSET_STORE,
    LOCAL_OFFSET_STORE,
    CONSUMER_OFFSET_MANAGER,
    PULL_FROM_WHERE,
)
CONSUMER_COMPONENTS: Final = (PUSH_CONSUMER, PUSH_CONSUMER_ORDERLY)
COMPONENTS: Final = COMPONENTS_V1 + CONSUMER_COMPONENTS
STRATEGIES: Final = ("AVG", "AVG_BY_CIRCLE", "CONSISTENT_HASH", "CONFIG", "MACHINE_ROOM", "MACHINE_ROOM_NEARBY")
VERSIONS: Final = ("4.9.8", "5.x")  # 5.x: the latest 5.x line, as reference.mq_version.MQVersion
READ_TYPES: Final = ("READ_FROM_MEMORY", "READ_FROM_STORE", "MEMORY_FIRST_THEN_STORE")
CONSUME_FROM_WHERE: Final = (
    "CONSUME_FROM_LAST_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET",
)
# Broker request codes a client component may send (RocketMQ RequestCode names).
QUERY_CONSUMER_OFFSET: Final = "QUERY_CONSUMER_OFFSET"
UPDATE_CONSUMER_OFFSET: Final = "UPDATE_CONSUMER_OFFSET"
GET_MAX_OFFSET: Final = "GET_MAX_OFFSET"
SEARCH_OFFSET_BY_TIMESTAMP: Final = "SEARCH_OFFSET_BY_TIMESTAMP"
SUCCESS: Final = 0
SYSTEM_ERROR: Final = 1
QUERY_NOT_FOUND: Final = 22
# What store.damage does to a local offset store's file (R1.9, R1.10, R1.16), and which file.
DAMAGES: Final = ("missing", "empty", "truncated", "corrupt")
DAMAGED_FILES: Final = ("offsets", "bak")
CORRUPT_CONTENT: Final = b"{corrupt"  # what "corrupt" writes: not JSON, not empty


@dataclass(frozen=True)
class Op:
    """One operation: the component that brings it, the handle argument it works on (if any), the
    handle kind it creates (if any), and the rules (docs/rules.md) its answer follows."""

    component: str
    rules: str
    handle: str | None = None  # the args key naming an existing handle
    creates: str | None = None  # the args key naming a handle this op creates


OPS: Final[dict[str, Op]] = {
    "allocate": Op(ALLOCATE, "R11.0-R11.5"),
    "pq.new": Op(PROCESS_QUEUE, "R6.1", creates="pq"),
    "pq.put": Op(PROCESS_QUEUE, "R6.2", handle="pq"),
    "pq.remove": Op(PROCESS_QUEUE, "R6.3", handle="pq"),
    "pq.state": Op(PROCESS_QUEUE, "R6.1, R6.5", handle="pq"),
    "pq.take": Op(PROCESS_QUEUE_ORDERLY, "R6.4 takeMessages", handle="pq"),
    "pq.commit": Op(PROCESS_QUEUE_ORDERLY, "R6.4 commit", handle="pq"),
    "pq.rollback": Op(PROCESS_QUEUE_ORDERLY, "R6.4 rollback", handle="pq"),
    "pq.consumeAgain": Op(PROCESS_QUEUE_ORDERLY, "R6.4 makeMessageToConsumeAgain", handle="pq"),
    "pq.clear": Op(PROCESS_QUEUE_ORDERLY, "R6.4 clear", handle="pq"),
    "store.new": Op(REMOTE_OFFSET_STORE, "R1.4", creates="store"),  # component by args.kind
    "store.load": Op(REMOTE_OFFSET_STORE, "R1.9, R2.1", handle="store"),
    "store.update": Op(REMOTE_OFFSET_STORE, "R1.5", handle="store"),
    "store.read": Op(REMOTE_OFFSET_STORE, "R1.11, R2.3, R2.4", handle="store"),
    "store.persistAll": Op(REMOTE_OFFSET_STORE, "R1.12, R2.7", handle="store"),
    "store.persist": Op(REMOTE_OFFSET_STORE, "R1.13, R2.6", handle="store"),
    "store.remove": Op(REMOTE_OFFSET_STORE, "R1.14, R2.2", handle="store"),
    "store.clone": Op(REMOTE_OFFSET_STORE, "R1.6", handle="store"),
    "store.damage": Op(LOCAL_OFFSET_STORE, "R1.9, R1.10, R1.16", handle="store"),
    "com.new": Op(CONSUMER_OFFSET_MANAGER, "R3.1", creates="com"),
    "com.commit": Op(CONSUMER_OFFSET_MANAGER, "R3.2, R3.4", handle="com"),
    "com.query": Op(CONSUMER_OFFSET_MANAGER, "R3.5", handle="com"),
    "com.persist": Op(CONSUMER_OFFSET_MANAGER, "R3.6", handle="com"),
    "com.restart": Op(CONSUMER_OFFSET_MANAGER, "R3.7", handle="com"),
    "com.table": Op(CONSUMER_OFFSET_MANAGER, "R3.1", handle="com"),
    "pullFromWhere": Op(PULL_FROM_WHERE, "R10.1, R10.4", handle="store"),
    # protocol version 2
    "consumer.new": Op(PUSH_CONSUMER, "R1.3, R4", creates="consumer"),
    "consumer.start": Op(PUSH_CONSUMER, "R1.3, R1.9, R4.1, R4.2", handle="consumer"),
    "consumer.shutdown": Op(PUSH_CONSUMER, "R4.4, R8.9", handle="consumer"),
    "consumer.run": Op(PUSH_CONSUMER, "R4.1, R4.2, R5.1-R5.3, R5.7, R8.3, R8.5, R8.8, R9", handle="consumer"),
    "consumer.observe": Op(PUSH_CONSUMER, "R1.5, R5.7, R6, R9.4", handle="consumer"),
    "cluster.consumers": Op(PUSH_CONSUMER, "R9.3"),
    "time.advance": Op(PUSH_CONSUMER, "R4.1"),
    "pull.reply": Op(PUSH_CONSUMER, "R5.5-R5.7", handle="consumer"),
    "consume.start": Op(PUSH_CONSUMER, "R7.1, R7.2, R8.5", handle="consumer"),
    "consume.finish": Op(PUSH_CONSUMER, "R7.2-R7.4, R8.6, R8.7", handle="consumer"),
}
CONSUMER_OPS: Final = tuple(op for op, spec in OPS.items() if spec.component == PUSH_CONSUMER)
CONTROL_OPS: Final = ("hello", "reset")


class ProtocolError(ValueError):
    """A message that breaks the protocol; ``str`` says what was expected."""


def mq(topic: str, broker_name: str, queue_id: int) -> dict[str, Any]:
    """A MessageQueue on the wire."""
    return {"topic": topic, "brokerName": broker_name, "queueId": queue_id}


def encode(message: dict[str, Any]) -> str:
    """One line of the protocol: compact JSON with a fixed key order, so scripts diff cleanly."""
    return json.dumps(message, sort_keys=True, separators=(",", ":"))


def check_hello(result: Any) -> tuple[str, tuple[str, ...], tuple[str, ...], str]:
    """The (version, components, strategies, implementation) a hello result declares."""
    if not isinstance(result, dict):
        raise ProtocolError(f"hello: result must be an object, got {_show(result)}")
    protocol = result.get("protocol")
    if protocol not in PROTOCOL_VERSIONS or isinstance(protocol, bool):
        raise ProtocolError(f"hello: result.protocol must be one of {list(PROTOCOL_VERSIONS)}, got {_show(protocol)}")
    version = result.get("version")
    if version not in VERSIONS:
        raise ProtocolError(f"hello: result.version must be one of {list(VERSIONS)}, got {_show(version)}")
    components = result.get("components")
    if not isinstance(components, list) or not components or any(c not in COMPONENTS for c in components):
        raise ProtocolError(
            f"hello: result.components must be a non-empty list drawn from {list(COMPONENTS)}, got {_show(components)}"
        )
    strategies = result.get("strategies", list(STRATEGIES) if ALLOCATE in components else [])
    if not isinstance(strategies, list) or any(s not in STRATEGIES for s in strategies):
        raise ProtocolError(f"hello: result.strategies must be a list drawn from {list(STRATEGIES)}")
    if ALLOCATE in components and not strategies:
        raise ProtocolError("hello: a SUT with the allocate component must list at least one strategy")
    if PULL_FROM_WHERE in components and not {REMOTE_OFFSET_STORE, LOCAL_OFFSET_STORE} & set(components):
        raise ProtocolError("hello: pullFromWhere needs an offset store component to read from")
    if protocol == 1 and set(components) & set(CONSUMER_COMPONENTS):
        raise ProtocolError(
            f"hello: the components {list(CONSUMER_COMPONENTS)} need protocol 2, the adapter answered 1"
        )
    if PUSH_CONSUMER_ORDERLY in components and PUSH_CONSUMER not in components:
        raise ProtocolError("hello: pushConsumer.orderly needs pushConsumer (its consumers are made by consumer.new)")
    if PROCESS_QUEUE_ORDERLY in components and PROCESS_QUEUE not in components:
        raise ProtocolError("hello: processQueue.orderly needs processQueue (its operations work on pq.new's queues)")
    implementation = result.get("implementation", "unnamed")
    return version, tuple(components), tuple(strategies), str(implementation)


def check_reply(reply: Any, request_id: int) -> dict[str, Any]:
    """``reply`` if it is a well-formed answer to request ``request_id``; else ``ProtocolError``."""
    if not isinstance(reply, dict):
        raise ProtocolError(f"a reply must be a JSON object, got {_show(reply)}")
    if reply.get("id") != request_id:
        raise ProtocolError(
            f"reply id {_show(reply.get('id'))} answers a request that was not asked (expected id {request_id})"
        )
    if "unsupported" in reply:
        unsupported = reply["unsupported"]
        if not isinstance(unsupported, dict) or not isinstance(unsupported.get("reason", ""), str):
            raise ProtocolError(f'reply.unsupported must be an object {{"reason": "..."}}, got {_show(unsupported)}')
        return reply
    fields = reply.get("unsupportedFields", [])
    if not isinstance(fields, list) or any(not isinstance(name, str) for name in fields):
        raise ProtocolError(f"reply.unsupportedFields must be a list of result field names, got {_show(fields)}")
    ok = reply.get("ok")
    if ok is True:
        if not isinstance(reply.get("result", {}), dict):
            raise ProtocolError(f"reply.result must be an object, got {_show(reply.get('result'))}")
    elif ok is False:
        error = reply.get("error")
        if not isinstance(error, dict) or not isinstance(error.get("type"), str) or not error["type"]:
            raise ProtocolError(f"a reply with ok=false needs error.type (a string), got {_show(error)}")
    else:
        raise ProtocolError(f"reply.ok must be true or false, got {_show(ok)}")
    sent = reply.get("sent", [])
    if not isinstance(sent, list) or any(not isinstance(s, dict) or not isinstance(s.get("code"), str) for s in sent):
        raise ProtocolError(f"reply.sent must be a list of broker requests, each with a code, got {_show(sent)}")
    return reply


def is_unsupported(reply: dict[str, Any]) -> bool:
    """True if the SUT answered that it does not support the operation at all."""
    return "unsupported" in reply


def unsupported_fields(reply: dict[str, Any]) -> tuple[str, ...]:
    """The result fields the SUT says it cannot report (not compared for the rest of the run)."""
    return tuple(reply.get("unsupportedFields", ()))


def normalise(reply: dict[str, Any], ignored: frozenset[str] = frozenset()) -> dict[str, Any]:
    """What two replies are compared on. Error messages are free text, so only the exception type
    counts; broker requests, offset tables and allocation-free lists whose order Java leaves to a
    hash map (``persistAll`` walks a ``ConcurrentHashMap``) are compared as sorted multisets.
    Result fields in ``ignored`` (ones the SUT declared unsupported) are left out."""
    out: dict[str, Any] = {"ok": reply["ok"]}
    if reply["ok"]:
        result = {k: v for k, v in reply.get("result", {}).items() if k not in ignored}
        if "table" in result and isinstance(result["table"], list):
            result["table"] = sorted(result["table"], key=encode)
        out["result"] = result
    else:
        out["error"] = reply["error"]["type"]
    sent = reply.get("sent", [])
    if sent:
        out["sent"] = sorted(sent, key=encode)
    return out


def difference(sut: dict[str, Any], reference: dict[str, Any]) -> str:
    """The kind of difference between two normalised replies that differ: ``outcome:A/B`` (one
    returned, the other threw; A and B are ``ok`` or an exception type, SUT first), ``error:A/B``
    (different exception types), or the differing parts of a result, ``result:f1,f2`` (field names,
    sorted) and ``sent`` (broker requests), joined with ``+``. What a version 1 ``--known`` entry names;
    findings are told apart by the finer :func:`fingerprint.fingerprint`."""
    if sut["ok"] != reference["ok"]:
        return f"outcome:{_outcome(sut)}/{_outcome(reference)}"
    parts = []
    if not sut["ok"] and sut["error"] != reference["error"]:
        parts.append(f"error:{sut['error']}/{reference['error']}")
    if sut["ok"]:
        mine, theirs = sut.get("result", {}), reference.get("result", {})
        fields = sorted(k for k in set(mine) | set(theirs) if mine.get(k, _ABSENT) != theirs.get(k, _ABSENT))
        if fields:
            parts.append("result:" + ",".join(fields))
    if sut.get("sent", []) != reference.get("sent", []):
        parts.append("sent")
    return "+".join(parts) or "none"


_ABSENT: Final = object()


def _outcome(normalised: dict[str, Any]) -> str:
    return "ok" if normalised["ok"] else str(normalised["error"])


def check_request(request: Any, where: str) -> dict[str, Any]:
    """A script line as a request ``{"op": ..., "args": {...}}``; else ``ProtocolError`` naming ``where``."""
    if not isinstance(request, dict):
        raise ProtocolError(f"{where}: a request must be a JSON object, got {_show(request)}")
    op = request.get("op")
    if not isinstance(op, str) or (op not in OPS and op not in CONTROL_OPS):
        raise ProtocolError(f"{where}: op must be one of {sorted(OPS)}, got {_show(op)}")
    args = request.get("args", {})
    if not isinstance(args, dict):
        raise ProtocolError(f"{where}: args must be an object, got {_show(args)}")
    spec = OPS.get(op)
    for key in (spec.handle, spec.creates) if spec else ():
        if key is not None and not isinstance(args.get(key), str):
            raise ProtocolError(f"{where}: {op} needs args.{key}, a handle name (string)")
    return {"op": op, "args": args}


def component_of(request: dict[str, Any]) -> str | None:
    """The component a request exercises (offset-store requests by the kind of store)."""
    op = request["op"]
    if op == "store.new":
        return LOCAL_OFFSET_STORE if request["args"].get("kind") == "local" else REMOTE_OFFSET_STORE
    spec = OPS.get(op)
    return spec.component if spec else None


def _show(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 200 else text[:197] + "..."
