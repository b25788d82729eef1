"""The broker's side of a serve-cluster history, the naming rule both sides share, and the merge.

The broker writes, in check-history's format (docs/oracle.md, "History checking"), what it sees:
``produce`` (every message stored, with ``origin`` for the copies a send-back and the schedule
service make), ``commit`` (every change of the group's committed offset, piggy-backed on a pull or
explicit), ``join`` and ``leave`` (a clientId appearing in or leaving the group's registration). A
client-side helper writes ``deliver`` lines (no header) for what its listener was handed;
:func:`merge_histories` puts the broker's file and the listeners' files into one history ordered by
time. Times are wall-clock milliseconds (floats) on one machine, so both sides share a clock.

Consumers are named by :func:`consumer_name`: the instance name inside the clientId
(``ip@instance`` for ali-ons, ``ip@pid#instance`` for the C++ client). A listener helper writes the
instance name it gave its client, so both sides name the consumer alike.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import IO, Any

from rmqspec.properties.history import FORMAT

HISTORY_VERSION = 1


def now_ms() -> float:
    """Wall-clock milliseconds with sub-millisecond precision (the history's time)."""
    return time.time() * 1000.0


def consumer_name(client_id: str) -> str:
    """The instance name inside a clientId: after the first ``@``, then after a ``#`` if any."""
    rest = client_id.split("@", 1)[1] if "@" in client_id else client_id
    return rest.split("#", 1)[1] if "#" in rest else rest


class BrokerHistory:
    """Appends the broker's events to a file, one JSON line each, flushed at once. The header needs
    the group, which the first consumer heartbeat names when ``group`` is not given: events before it
    wait in memory."""

    def __init__(self, path: Path | None, rocketmq: str, group: str | None) -> None:
        self.path = path
        self.rocketmq = rocketmq
        self.group = group
        self._pending: list[dict[str, Any]] = []
        self._out: IO[str] | None = None
        self.counts: dict[str, int] = {}
        if path is not None:
            self._out = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed by close()
            if group is not None:
                self._write_header()

    def _write_header(self) -> None:
        assert self._out is not None and self.group is not None
        header = {
            "format": FORMAT,
            "version": HISTORY_VERSION,
            "mode": "CLUSTERING",
            "consumption": "concurrent",
            "rocketmq": self.rocketmq,
            "group": self.group,
            "producer": "rmqspec serve-cluster",
        }
        self._out.write(json.dumps(header) + "\n")
        for event in self._pending:
            self._out.write(json.dumps(event) + "\n")
        self._pending.clear()
        self._out.flush()

    def name_group(self, group: str) -> None:
        """The group the history is about, when it was not given: the first one seen."""
        if self.group is None:
            self.group = group
            if self._out is not None:
                self._write_header()

    def event(self, event_type: str, **fields: Any) -> None:
        self.counts[event_type] = self.counts.get(event_type, 0) + 1
        if self._out is None:
            return
        event = {"time": now_ms(), "type": event_type, **fields}
        if self.group is None:
            self._pending.append(event)
            return
        self._out.write(json.dumps(event) + "\n")
        self._out.flush()

    def close(self, fallback_group: str = "none") -> None:
        """Flush and close; a history whose group never showed gets ``fallback_group``."""
        if self._out is None:
            return
        if self.group is None:
            self.group = fallback_group
            self._write_header()
        self._out.close()
        self._out = None


def merge_histories(broker_file: Path, listener_files: list[Path], out: Path) -> int:
    """One history from the broker's file (header first) and the listeners' event lines, ordered by
    time; at equal times the broker's events come first (a message is stored before it is pulled).
    Returns the number of events written. Raises ValueError naming the file and line of a bad line."""
    events: list[tuple[float, int, int, str]] = []
    with open(broker_file, encoding="utf-8") as fh:
        header = fh.readline()
        if not header.strip():
            raise ValueError(f"{broker_file}: line 1: no header")
        sources = [(broker_file, fh.readlines(), 0, 2)]
    for k, path in enumerate(listener_files, start=1):
        with open(path, encoding="utf-8") as fh:
            sources.append((path, fh.readlines(), k, 1))
    for path, lines, rank, first_line in sources:
        for lineno, line in enumerate(lines, start=first_line):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                stamp = float(obj["time"])
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
                raise ValueError(f"{path}: line {lineno}: not an event with a time: {err}") from None
            events.append((stamp, rank, len(events), line.rstrip("\n")))
    events.sort()
    with open(out, "w", encoding="utf-8") as fh:
        fh.write(header if header.endswith("\n") else header + "\n")
        for _, _, _, line in events:
            fh.write(line + "\n")
    return len(events)
