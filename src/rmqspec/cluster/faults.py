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

Every fault is logged on stderr with its time and trigger, listed in the closing JSON line, and shows in
the history as the commits it undid (``consumer: "broker"``, ``cause: "failover"``, the offset it fell
back to, null when the flushed file had none).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

KINDS = ("broker-restart",)
TRIGGERS = ("after_messages_pulled", "after_commits", "after_seconds")


class FaultScriptError(ValueError):
    """A fault script that cannot be used; the message names the file and the field."""


@dataclass
class Fault:
    kind: str
    trigger: str
    threshold: float
    down_seconds: float = 0.0

    def describe(self) -> str:
        return f"{self.kind} ({self.trigger.replace('_', ' ')} {self.threshold:g})"


def _number(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e9:
        raise FaultScriptError(f"{where}: expected a number from 0, got {json.dumps(value)}")
    return float(value)


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
        unknown = set(entry) - {"fault", "down_seconds", *TRIGGERS}
        if unknown:
            raise FaultScriptError(f"{where}: unknown field {sorted(unknown)[0]!r}")
        triggers = [t for t in TRIGGERS if t in entry]
        if len(triggers) != 1:
            raise FaultScriptError(f"{where}: expected exactly one of {', '.join(TRIGGERS)}")
        trigger = triggers[0]
        threshold = _number(entry[trigger], f"{where}.{trigger}")
        down = _number(entry.get("down_seconds", 0), f"{where}.down_seconds")
        faults.append(Fault(kind, trigger, threshold, down))
    return faults


def read_faults(path: Path) -> list[Fault]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise FaultScriptError(f"{path}: cannot read: {err}") from None
    return parse_faults(text, str(path))
