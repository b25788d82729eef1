"""Fault scripts for ``rmqspec serve-cluster --faults FILE``.

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

Every fault is logged on stderr with its time and trigger, listed in the closing JSON line, and shows in
the history as the commits it undid (``consumer: "broker"``, ``cause: "failover"``, the offset it fell
back to, null when the flushed file had none).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

KINDS = ("broker-restart", "retention", "consumer-list-missing")
TRIGGERS = ("after_messages_pulled", "after_commits", "after_messages_stored", "after_seconds")
# the fields each kind takes besides "fault" and its trigger, and whether each is required
KIND_FIELDS: dict[str, dict[str, bool]] = {
    "broker-restart": {"down_seconds": False},
    "retention": {"topic": True, "queue": True, "messages": True},
    "consumer-list-missing": {"consumer": True, "for_seconds": True},
}


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

    def describe(self) -> str:
        return f"{self.kind} ({self.trigger.replace('_', ' ')} {self.threshold:g})"


def _number(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e9:
        raise FaultScriptError(f"{where}: expected a number from 0, got {json.dumps(value)}")
    return float(value)


def _whole(value: object, where: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value < 2**31:
        raise FaultScriptError(f"{where}: expected a whole number from {low}, got {json.dumps(value)}")
    return value


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
            topic = entry["topic"]
            if not isinstance(topic, str) or not topic:
                raise FaultScriptError(f"{where}.topic: expected a topic name, got {json.dumps(topic)}")
            fault.topic = topic
            fault.queue = int(_whole(entry["queue"], f"{where}.queue", 0))
            fault.messages = int(_whole(entry["messages"], f"{where}.messages", 1))
        if kind == "consumer-list-missing":
            consumer = entry["consumer"]
            if not isinstance(consumer, str) or not consumer:
                raise FaultScriptError(f"{where}.consumer: expected a consumer name, got {json.dumps(consumer)}")
            fault.consumer = consumer
            fault.for_seconds = _number(entry["for_seconds"], f"{where}.for_seconds")
        faults.append(fault)
    return faults


def read_faults(path: Path) -> list[Fault]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise FaultScriptError(f"{path}: cannot read: {err}") from None
    return parse_faults(text, str(path))
