"""Fault scripts for ``rmqspec serve-cluster --faults FILE``, and the seeded profiles that draw one
(``--faults PROFILE --seed S``, ``draw_faults``, at the end of the module).

A script is a JSON object ``{"faults": [FAULT, ...]}``; each FAULT fires once, when its trigger holds
(checked every ``TICK_SECONDS`` of the server), in the order given:

``{"fault": "broker-restart", "after_messages_pulled": N | "after_commits": N | "after_seconds": S, "down_seconds": D}``
    the broker process dies (``BrokerHost.crash``: its memory, the offset table included, is gone; the
    disk, with ``consumerOffset.json`` as last flushed, stays), every broker connection is closed, and
    it starts again ``D`` seconds later (default 0) from its disk (R3.6, R3.7). The offsets committed
    since the last flush are lost. The name server stays up. Exactly one trigger: after the broker has
    served ``N`` messages in pull results, after ``N`` changes of a committed offset (piggy-backed or
    explicit, any group), or ``S`` seconds after the server started.

``{"fault": "retention", "topic": T, "queue": Q, "messages": K, <trigger>}``
    commit-log retention deletes the ``K`` oldest messages left in queue ``Q`` of ``T`` (fewer if the queue
    holds fewer): its minimum offset rises (``DefaultMessageStore.retention_delete``, R5.5), so a pull
    below it is answered PULL_OFFSET_MOVED (the client's OFFSET_ILLEGAL, R5.7). The history gets a
    ``skip`` of the deleted offsets with cause ``retention``. ``after_messages_stored: N`` (N messages
    stored since the start) is a trigger for any fault.

``{"fault": "consumer-list-missing", "consumer": C, "for_seconds": S, <trigger>}``
    for ``S`` seconds, GET_CONSUMER_LIST_BY_GROUP answers leave out every clientId of consumer ``C`` (named
    as in the history), as a broker that a heartbeat has not reached yet answers (S7, R9.3;
    ``BrokerHost.consumer_list_filter``, the model's ``RebalanceWithoutSelf``). Nobody is notified; the
    clients meet it at their next rebalance.

``{"fault": "request-error", "request": R, "count": N, "response": E, "remark": M, "consumer": C, <trigger>}``
    the next ``N`` (default 1) requests of code ``R`` (a RequestCode name; ``SEND_MESSAGE`` also covers its
    v2 header, SEND_MESSAGE_V2; SEND_BATCH_MESSAGE is its own) are answered ``E`` (a ResponseCode name;
    default SYSTEM_BUSY with 4.9.8's
    ``[REJECTREQUEST]system busy, start flow control for a while`` for a send, whose processor rejects
    requests while the page cache is busy, and SYSTEM_ERROR with an exception's description, as
    ``NettyRemotingAbstract`` answers a processor that threw, for any other code) without being applied:
    no message stored, no commit, no send-back copy. With ``consumer``, only requests on connections
    whose heartbeat named that instance count. A failed QUERY_CONSUMER_OFFSET of the history's group
    is remembered: if the consumer's next pull of that queue starts above the offset the broker held,
    the history gets the positioning skip with ``fault: "query-error"`` (4.9.8 reads the error as "no
    offset", RMQ-14).

``{"fault": "request-timeout", "request": R, "count": N, "applied": B, "consumer": C, <trigger>}``
    the next ``N`` (default 1) requests of code ``R`` are never answered, so the client's own timeout
    fires; with ``applied: true`` the broker runs them and only the reply is lost (default: dropped on
    arrival, not applied). A swallowed query is remembered as a failed one (above).

``{"fault": "slow-replies", "request": R, "delay_ms": D, "for_seconds": S, "consumer": C, <trigger>}``
    for ``S`` seconds, every reply to a request of code ``R`` (a held pull's too) is written ``D`` ms
    after the broker ran it; other requests and connections are not held up (the reply is scheduled on
    the event loop).

``{"fault": "drop-connection", "consumer": C, <trigger>}``
    closes every broker connection of consumer ``C`` (every broker connection without ``consumer``)
    once; the clients reconnect by themselves. The broker drops the closed channels' registrations
    (``doChannelCloseEvent``); as after a restart, a consumer's re-registration is no ``join`` and its
    absence meanwhile no ``leave``.

``{"fault": "admin-reset", "topic": T, "timestamp": MS | "offsets": {"Q": O, ...}, "force": B, "group": G,
"admin_language": "JAVA" | "CPP", <trigger>}``
    an admin's INVOKE_BROKER_TO_RESET_OFFSET for group ``G`` (default: the history's) on topic ``T``, run as
    4.9.8's ``Broker2Client#resetOffset`` does (the reference's, queue by queue): each write queue's target
    is the offset stored at ``timestamp`` (ms; -1: the queue's end), or ``offsets``' value for the
    queues it names; taken when ``force`` (default true, as ``mqadmin resetOffsetByTime``) or lower
    than the group's offset. It fails (SYSTEM_ERROR) when a queue has no offset of the group, and
    (CONSUMER_NOT_ONLINE) when the group has no connection. The broker does not write its offset table:
    it sends RESET_CONSUMER_CLIENT_OFFSET oneway to each of the group's connections (header ``topic``,
    ``group``, ``timestamp``, ``isForce``: false; body ``ResetOffsetBody``, or ``ResetOffsetBodyForC``,
    a list, when ``admin_language`` is CPP, as 4.9.8 chooses it by the admin request's language). A
    consumer that applies it commits the target: that commit is written with ``cause: "reset"``
    (check-history then accepts the decrease and what it redelivers or, forward, skips).

A ``topic`` or ``consumer`` of ``"*"`` (``ANY``; what a drawn script says) is named when the fault is due: the
history group's first subscribed topic that is not a retry topic, its consumer that registered first; the fault waits
until the group has registered.

Every fault is logged on stderr with its time and trigger, listed in the closing JSON line, and shows in
the history where it changes what the broker holds: a restart as the commits it undid (``consumer:
"broker"``, ``cause: "failover"``, the offset it fell back to, null when the flushed file had none),
retention as a ``retention`` skip, a failed query as a ``query-error`` positioning skip, a reset as the
``reset`` commits of the consumers that applied it. The request faults also log each request they hit.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KINDS = (
    "broker-restart",
    "retention",
    "consumer-list-missing",
    "request-error",
    "request-timeout",
    "slow-replies",
    "drop-connection",
    "admin-reset",
)
TRIGGERS = ("after_messages_pulled", "after_commits", "after_messages_stored", "after_seconds")
# the fields each kind takes besides "fault" and its trigger, and whether each is required
KIND_FIELDS: dict[str, dict[str, bool]] = {
    "broker-restart": {"down_seconds": False},
    "retention": {"topic": True, "queue": True, "messages": True},
    "consumer-list-missing": {"consumer": True, "for_seconds": True},
    "request-error": {"request": True, "count": False, "response": False, "remark": False, "consumer": False},
    "request-timeout": {"request": True, "count": False, "applied": False, "consumer": False},
    "slow-replies": {"request": True, "delay_ms": True, "for_seconds": True, "consumer": False},
    "drop-connection": {"consumer": False},
    "admin-reset": {
        "topic": True,
        "timestamp": False,
        "offsets": False,
        "force": False,
        "group": False,
        "admin_language": False,
    },
}
# RocketMQ 4.9.8's RequestCode values of the requests the broker serves, by name; SEND_MESSAGE is one
# request in two header layouts (SendMessageRequestHeader and its one-letter V2), so it names both.
REQUEST_CODES: dict[str, tuple[int, ...]] = {
    "SEND_MESSAGE": (10, 310),
    "SEND_MESSAGE_V2": (310,),
    "SEND_BATCH_MESSAGE": (320,),
    "PULL_MESSAGE": (11,),
    "QUERY_CONSUMER_OFFSET": (14,),
    "UPDATE_CONSUMER_OFFSET": (15,),
    "SEARCH_OFFSET_BY_TIMESTAMP": (29,),
    "GET_MAX_OFFSET": (30,),
    "GET_MIN_OFFSET": (31,),
    "HEART_BEAT": (34,),
    "UNREGISTER_CLIENT": (35,),
    "CONSUMER_SEND_MSG_BACK": (36,),
    "GET_CONSUMER_LIST_BY_GROUP": (38,),
    "LOCK_BATCH_MQ": (41,),
    "UNLOCK_BATCH_MQ": (42,),
}
# RocketMQ 4.9.8's RemotingSysResponseCode and ResponseCode values, by name (SUCCESS left out: not an error).
RESPONSE_CODES: dict[str, int] = {
    "SYSTEM_ERROR": 1,
    "SYSTEM_BUSY": 2,
    "REQUEST_CODE_NOT_SUPPORTED": 3,
    "TRANSACTION_FAILED": 4,
    "FLUSH_DISK_TIMEOUT": 10,
    "SLAVE_NOT_AVAILABLE": 11,
    "FLUSH_SLAVE_TIMEOUT": 12,
    "MESSAGE_ILLEGAL": 13,
    "SERVICE_NOT_AVAILABLE": 14,
    "VERSION_NOT_SUPPORTED": 15,
    "NO_PERMISSION": 16,
    "TOPIC_NOT_EXIST": 17,
    "TOPIC_EXIST_ALREADY": 18,
    "PULL_NOT_FOUND": 19,
    "PULL_RETRY_IMMEDIATELY": 20,
    "PULL_OFFSET_MOVED": 21,
    "QUERY_NOT_FOUND": 22,
    "SUBSCRIPTION_PARSE_FAILED": 23,
    "SUBSCRIPTION_NOT_EXIST": 24,
    "SUBSCRIPTION_NOT_LATEST": 25,
    "SUBSCRIPTION_GROUP_NOT_EXIST": 26,
    "FILTER_DATA_NOT_EXIST": 27,
    "FILTER_DATA_NOT_LATEST": 28,
    "TRANSACTION_SHOULD_COMMIT": 200,
    "TRANSACTION_SHOULD_ROLLBACK": 201,
    "TRANSACTION_STATE_UNKNOW": 202,
    "TRANSACTION_STATE_GROUP_WRONG": 203,
    "NO_BUYER_ID": 204,
    "NOT_IN_CURRENT_UNIT": 205,
    "CONSUMER_NOT_ONLINE": 206,
    "CONSUME_MSG_TIMEOUT": 207,
    "NO_MESSAGE": 208,
    "FLOW_CONTROL": 215,
}
# What 4.9.8 answers by default: a send is rejected by SendMessageProcessor#rejectRequest (page cache busy),
# any other request meets a processor that threw (NettyRemotingAbstract#processRequestCommand).
REJECT_REMARK = "[REJECTREQUEST]system busy, start flow control for a while"
ERROR_REMARK = "java.lang.RuntimeException: injected by the fault script (request-error)"
ADMIN_LANGUAGES = ("JAVA", "CPP")


def default_response(request: str) -> tuple[int, str]:
    """The response code and remark a request-error without ``response`` answers for ``request``."""
    if request in ("SEND_MESSAGE", "SEND_MESSAGE_V2", "SEND_BATCH_MESSAGE"):
        return RESPONSE_CODES["SYSTEM_BUSY"], REJECT_REMARK
    return RESPONSE_CODES["SYSTEM_ERROR"], ERROR_REMARK


class FaultScriptError(ValueError):
    """A fault script that cannot be used; the message names the file and the field."""


@dataclass
class Fault:
    kind: str
    trigger: str
    threshold: float
    down_seconds: float = 0.0
    topic: str = ""
    queue: int = 0
    messages: int = 0
    consumer: str = ""
    for_seconds: float = 0.0
    request: str = ""  # a REQUEST_CODES name
    count: int = 1
    response: int = 0
    remark: str = ""
    applied: bool = False
    delay_ms: float = 0.0
    timestamp: int | None = None  # admin-reset: ms, -1 the queue's end; None with offsets
    offsets: dict[int, int] = field(default_factory=dict)
    force: bool = True
    group: str = ""
    admin_language: str = "JAVA"

    def describe(self) -> str:
        return f"{self.kind} ({self.trigger.replace('_', ' ')} {self.threshold:g})"

    @property
    def codes(self) -> tuple[int, ...]:
        return REQUEST_CODES.get(self.request, ())


def _number(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e9:
        raise FaultScriptError(f"{where}: expected a number from 0, got {json.dumps(value)}")
    return float(value)


def _whole(value: object, where: str, low: int, high: int = 2**31) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value < high:
        raise FaultScriptError(f"{where}: expected a whole number from {low}, got {json.dumps(value)}")
    return value


def _name(value: object, where: str, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise FaultScriptError(f"{where}: expected {what}, got {json.dumps(value)}")
    return value


def _choice(value: object, where: str, choices: Iterable[str]) -> str:
    names = list(choices)
    if value not in names:
        raise FaultScriptError(f"{where}: expected one of {', '.join(names)}, got {json.dumps(value)}")
    assert isinstance(value, str)
    return value


def _flag(value: object, where: str) -> bool:
    if not isinstance(value, bool):
        raise FaultScriptError(f"{where}: expected true or false, got {json.dumps(value)}")
    return value


def _request_fields(fault: Fault, entry: dict[str, Any], where: str) -> None:
    fault.request = _choice(entry["request"], f"{where}.request", REQUEST_CODES)
    if "consumer" in entry:
        fault.consumer = _name(entry["consumer"], f"{where}.consumer", "a consumer name")
    if "count" in entry:
        fault.count = _whole(entry["count"], f"{where}.count", 1)
    if fault.kind == "request-error":
        code, remark = default_response(fault.request)
        if "response" in entry:
            code = RESPONSE_CODES[_choice(entry["response"], f"{where}.response", RESPONSE_CODES)]
            remark = REJECT_REMARK if code == RESPONSE_CODES["SYSTEM_BUSY"] else ERROR_REMARK
        if "remark" in entry:
            remark = entry["remark"]
            if not isinstance(remark, str):
                raise FaultScriptError(f"{where}.remark: expected a string, got {json.dumps(remark)}")
        fault.response, fault.remark = code, remark
    if "applied" in entry:
        fault.applied = _flag(entry["applied"], f"{where}.applied")
    if fault.kind == "slow-replies":
        fault.delay_ms = _number(entry["delay_ms"], f"{where}.delay_ms")
        fault.for_seconds = _number(entry["for_seconds"], f"{where}.for_seconds")


def _reset_fields(fault: Fault, entry: dict[str, Any], where: str) -> None:
    fault.topic = _name(entry["topic"], f"{where}.topic", "a topic name")
    if ("timestamp" in entry) == ("offsets" in entry):
        raise FaultScriptError(f"{where}: admin-reset needs exactly one of 'timestamp', 'offsets'")
    if "timestamp" in entry:
        fault.timestamp = _whole(entry["timestamp"], f"{where}.timestamp", -1, 2**63)
    else:
        offsets = entry["offsets"]
        if not isinstance(offsets, dict) or not offsets:
            raise FaultScriptError(f'{where}.offsets: expected {{"QUEUE": OFFSET, ...}}, got {json.dumps(offsets)}')
        for key, value in offsets.items():
            if not key.isdigit() or int(key) >= 2**31:
                raise FaultScriptError(f"{where}.offsets: expected queue numbers as keys, got {json.dumps(key)}")
            fault.offsets[int(key)] = _whole(value, f"{where}.offsets.{key}", 0, 2**63)
    if "force" in entry:
        fault.force = _flag(entry["force"], f"{where}.force")
    if "group" in entry:
        fault.group = _name(entry["group"], f"{where}.group", "a consumer group")
    if "admin_language" in entry:
        fault.admin_language = _choice(entry["admin_language"], f"{where}.admin_language", ADMIN_LANGUAGES)


def parse_faults(text: str, source: str) -> list[Fault]:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as err:
        raise FaultScriptError(f"{source}: not JSON: {err}") from None
    if not isinstance(obj, dict) or set(obj) != {"faults"} or not isinstance(obj["faults"], list):
        raise FaultScriptError(f'{source}: expected {{"faults": [...]}}')
    faults = []
    for k, entry in enumerate(obj["faults"]):
        where = f"{source}: faults[{k}]"
        if not isinstance(entry, dict):
            raise FaultScriptError(f"{where}: expected an object")
        kind = entry.get("fault")
        if kind not in KINDS:
            raise FaultScriptError(f"{where}.fault: expected one of {', '.join(KINDS)}, got {json.dumps(kind)}")
        fields = KIND_FIELDS[kind]
        unknown = set(entry) - {"fault", *fields, *TRIGGERS}
        if unknown:
            raise FaultScriptError(f"{where}: unknown field {sorted(unknown)[0]!r} for {kind}")
        missing = [name for name, required in fields.items() if required and name not in entry]
        if missing:
            raise FaultScriptError(f"{where}: {kind} needs {missing[0]!r}")
        triggers = [t for t in TRIGGERS if t in entry]
        if len(triggers) != 1:
            raise FaultScriptError(f"{where}: expected exactly one of {', '.join(TRIGGERS)}")
        trigger = triggers[0]
        fault = Fault(kind, trigger, _number(entry[trigger], f"{where}.{trigger}"))
        fault.down_seconds = _number(entry.get("down_seconds", 0), f"{where}.down_seconds")
        if kind == "retention":
            fault.topic = _name(entry["topic"], f"{where}.topic", "a topic name")
            fault.queue = int(_whole(entry["queue"], f"{where}.queue", 0))
            fault.messages = int(_whole(entry["messages"], f"{where}.messages", 1))
        if kind == "consumer-list-missing":
            fault.consumer = _name(entry["consumer"], f"{where}.consumer", "a consumer name")
            fault.for_seconds = _number(entry["for_seconds"], f"{where}.for_seconds")
        if kind in ("request-error", "request-timeout", "slow-replies"):
            _request_fields(fault, entry, where)
        if kind == "drop-connection" and "consumer" in entry:
            fault.consumer = _name(entry["consumer"], f"{where}.consumer", "a consumer name")
        if kind == "admin-reset":
            _reset_fields(fault, entry, where)
        faults.append(fault)
    return faults


def read_faults(path: Path) -> list[Fault]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise FaultScriptError(f"{path}: cannot read: {err}") from None
    return parse_faults(text, str(path))


# --- seeded profiles -----------------------------------------------------------------------------
# ``--faults PROFILE --seed S`` draws a script instead of reading one: the same profile, seed and horizon give the
# same script, which the run writes beside its history (``<history>.faults.json``) so that ``--faults FILE``
# replays it. A drawn fault names no topic or consumer of the client's (the profile cannot know them): "*" there
# means the history group's subscribed topic (the first its consumers' heartbeats name that is not a retry topic)
# or its consumer that registered first, resolved when the fault is due; until one is known the fault waits.
ANY = "*"
PROFILES: dict[str, tuple[str, ...]] = {
    "calm": (),
    "restarts": ("broker-restart",),
    "requests": ("request-error", "request-timeout", "slow-replies"),
    "membership": ("consumer-list-missing", "drop-connection"),
    "offsets": ("retention", "admin-reset", "broker-restart"),
    "mixed": KINDS,
}
PROFILE_HORIZON = 120.0  # seconds a drawn script spreads its faults over when the run has no --duration
FAULT_SPACING = 30.0  # one fault per 30 s of the horizon on average: a client's 20 s rebalance and 5 s persist
# cycles run at least once between two faults, so each fault's effect is seen before the next
PROFILE_MAX_FAULTS = 12
# the requests the request faults draw from, the ones a consumer's offset handling depends on
PROFILE_REQUESTS = (
    "PULL_MESSAGE",
    "QUERY_CONSUMER_OFFSET",
    "UPDATE_CONSUMER_OFFSET",
    "GET_CONSUMER_LIST_BY_GROUP",
    "CONSUMER_SEND_MSG_BACK",
    "HEART_BEAT",
    "SEND_MESSAGE",
)


def draw_faults(profile: str, seed: int, horizon: float | None, queues: int) -> dict[str, Any]:
    """A fault script ``{"faults": [...]}`` drawn from ``profile`` with ``random.Random(seed)``: about one fault
    per ``FAULT_SPACING`` seconds of ``horizon`` (``PROFILE_HORIZON`` when None), each at ``after_seconds`` in the
    middle 80 % of it, in time order (a script fires its faults in order)."""
    kinds = PROFILES[profile]
    span = PROFILE_HORIZON if horizon is None else horizon
    rng = random.Random(seed)
    if not kinds:
        return {"faults": []}
    count = max(1, min(PROFILE_MAX_FAULTS, round(span / FAULT_SPACING)))
    times = sorted(round(rng.uniform(0.1 * span, 0.9 * span), 1) for _ in range(count))
    return {"faults": [_drawn(rng.choice(kinds), at, rng, queues) for at in times]}


def _drawn(kind: str, at: float, rng: random.Random, queues: int) -> dict[str, Any]:
    entry: dict[str, Any] = {"fault": kind, "after_seconds": at}
    if kind == "broker-restart":
        entry["down_seconds"] = rng.choice((0, 0, 2, 5))
    elif kind == "retention":
        entry.update(topic=ANY, queue=rng.randrange(queues), messages=rng.randint(1, 8))
    elif kind == "consumer-list-missing":
        entry.update(consumer=ANY, for_seconds=rng.choice((5, 15, 30)))
    elif kind == "request-error":
        entry.update(request=rng.choice(PROFILE_REQUESTS), count=rng.randint(1, 3))
    elif kind == "request-timeout":
        entry.update(request=rng.choice(PROFILE_REQUESTS), count=1, applied=rng.random() < 0.5)
    elif kind == "slow-replies":
        entry.update(request=rng.choice(PROFILE_REQUESTS), delay_ms=rng.choice((200, 1000, 3000)), for_seconds=10)
    elif kind == "admin-reset":
        entry.update(topic=ANY, timestamp=rng.choice((0, -1)))  # to the queues' starts (a replay) or ends (a skip)
    return entry


def load_faults(spec: str, seed: int, horizon: float | None, queues: int) -> tuple[list[Fault], dict[str, Any] | None]:
    """``--faults``'s value: an existing file is a script; otherwise a profile name is drawn (the drawn script is
    returned too, to be written beside the history). Raises :class:`FaultScriptError` naming what is wrong."""
    path = Path(spec)
    if path.exists() or spec not in PROFILES:
        if not path.exists():
            names = ", ".join(PROFILES)
            raise FaultScriptError(f"--faults {spec}: no such file, and not a profile (profiles: {names})")
        return read_faults(path), None
    script = draw_faults(spec, seed, horizon, queues)
    return parse_faults(json.dumps(script), f"profile {spec} (seed {seed})"), script
