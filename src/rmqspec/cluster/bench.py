"""``rmqspec bench-cluster``: messages per second through ``serve-cluster``, measured on the wire.

It starts ``rmqspec serve-cluster`` as a subprocess (the real server, with its history written, as a judged run writes
it) and drives it with raw-protocol clients on loopback, in one asyncio loop of this process:

1. **sequential**: one producer, one SEND_MESSAGE_V2 at a time, for a quarter of the budget: the rate a synchronous
   producer (both installable clients' producers are) can reach.
2. **pipelined with consumers**: one producer keeping ``in_flight`` sends on the wire (64 by default), and
   ``consumers`` consumers, each pulling its own queue from offset 0 with long polling (1 s) and the piggy-backed
   commit of its cursor (R5.2), for the rest of the budget.

It prints the rates of both phases measured in this run and their ratio, the consumers' pull rate and how far behind
they ended, the server's resident memory before and after (from ``/proc``), what a ten-minute run at the measured rate
moves against the 1,000,000-message goal, and the history's size. Both sides share the machine's cores: the figures
say so beside the machine's load.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from rmqspec.cluster import wire

SEND_MESSAGE_V2 = 310
PULL_MESSAGE = 11
HEART_BEAT = 34
TOPIC = "BenchTopic"
GROUP = "BenchGroup"
BODY = b"x" * 100  # a 100-byte body, the size of the clients' example messages
PULL_BATCH = 32  # the clients' pullBatchSize default
PULL_SUSPEND_MS = 1_000
TEN_MINUTES = 600.0
GOAL = 1_000_000  # messages a ten-minute run should move (docs/oracle.md, performance)
START_TIMEOUT = 60.0


class BenchError(Exception):
    """The server could not be started or stopped: the message says what happened."""


def _send_header(queue: int) -> dict[str, str]:
    # SendMessageRequestHeaderV2: a producerGroup, b topic, c defaultTopic, d defaultTopicQueueNums, e queueId,
    # f sysFlag, g bornTimestamp, h flag, i properties
    return {"a": "BenchProducer", "b": TOPIC, "c": "TBW102", "d": "4", "e": str(queue), "f": "0",
            "g": str(int(time.time() * 1000)), "h": "0", "i": ""}  # fmt: skip


def _pull_header(queue: int, offset: int) -> dict[str, str]:
    commit = offset > 0  # an offset of 0 is never piggy-backed (S10)
    return {"consumerGroup": GROUP, "topic": TOPIC, "queueId": str(queue), "queueOffset": str(offset),
            "maxMsgNums": str(PULL_BATCH), "sysFlag": str(7 if commit else 6), "commitOffset": str(offset),
            "suspendTimeoutMillis": str(PULL_SUSPEND_MS), "subscription": "*", "subVersion": "0"}  # fmt: skip


def _heartbeat(client_id: str) -> bytes:
    consumer = {"groupName": GROUP, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                "subscriptionDataSet": [{"topic": TOPIC, "subString": "*", "subVersion": 1}]}  # fmt: skip
    return json.dumps({"clientID": client_id, "producerDataSet": [], "consumerDataSet": [consumer]}).encode()


class _Connection:
    """One broker connection: requests by opaque, replies matched by a reader task."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.waiting: dict[int, asyncio.Future[wire.Frame]] = {}
        self.opaque = 0
        self.task = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def open(cls, address: str) -> _Connection:
        host, port = address.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        return cls(reader, writer)

    async def _read(self) -> None:
        while True:
            frame = await wire.read_frame(self.reader)
            if frame is None:
                break
            future = self.waiting.pop(frame.opaque, None)
            if frame.is_response and future is not None and not future.done():
                future.set_result(frame)
        for future in self.waiting.values():
            if not future.done():
                future.set_exception(ConnectionError("the broker closed the connection"))

    def call(self, code: int, ext: dict[str, str], body: bytes = b"") -> asyncio.Future[wire.Frame]:
        self.opaque += 1
        future: asyncio.Future[wire.Frame] = asyncio.get_running_loop().create_future()
        self.waiting[self.opaque] = future
        self.writer.write(wire.encode_frame(code, self.opaque, 0, ext, body))
        return future

    async def close(self) -> None:
        self.task.cancel()
        self.writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.wait_closed()


async def _produce(address: str, seconds: float, in_flight: int, queues: int) -> int:
    """Sends kept ``in_flight`` on the wire for ``seconds``; the number stored (answered SUCCESS)."""
    conn = await _Connection.open(address)
    stored, sent = 0, 0
    ends = time.monotonic() + seconds
    pending: set[asyncio.Future[wire.Frame]] = set()
    try:
        while True:
            while len(pending) < in_flight and time.monotonic() < ends:
                pending.add(conn.call(SEND_MESSAGE_V2, _send_header(sent % queues), BODY))
                sent += 1
            if not pending:
                return stored
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            stored += sum(1 for f in done if f.result().code == 0)
    finally:
        await conn.close()


async def _consume(address: str, queue: int, stop: asyncio.Event, pulled: list[int]) -> None:
    """Pull ``queue`` from 0 until ``stop``, adding what each pull served to ``pulled[queue]``."""
    conn = await _Connection.open(address)
    offset = 0
    try:
        # a heartbeat names the group, so the history records the piggy-backed commits as a judged run's does
        await conn.call(HEART_BEAT, {}, _heartbeat(f"127.0.0.1@bench{queue}"))
        while not stop.is_set():
            reply = await conn.call(PULL_MESSAGE, _pull_header(queue, offset))
            if reply.code == 0:  # FOUND
                pulled[queue] += len(wire.decode_messages(reply.body))
            offset = int(reply.ext_fields.get("nextBeginOffset", offset))
    finally:
        await conn.close()


async def _measure(address: str, seconds: float, in_flight: int, consumers: int) -> dict[str, float]:
    quarter = seconds / 4
    began = time.monotonic()
    sequential = await _produce(address, quarter, 1, consumers)
    sequential_seconds = time.monotonic() - began
    stop = asyncio.Event()
    pulled = [0] * consumers
    tasks = [asyncio.get_running_loop().create_task(_consume(address, q, stop, pulled)) for q in range(consumers)]
    began = time.monotonic()
    pipelined = await _produce(address, seconds - quarter, in_flight, consumers)
    pipelined_seconds = time.monotonic() - began
    caught_up = time.monotonic() + 5.0  # let the consumers finish what was stored, for at most 5 s
    while sum(pulled) < sequential + pipelined and time.monotonic() < caught_up:
        await asyncio.sleep(0.05)
    consumed_seconds = time.monotonic() - began
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {
        "sequential": sequential,
        "sequential_seconds": sequential_seconds,
        "pipelined": pipelined,
        "pipelined_seconds": pipelined_seconds,
        "pulled": sum(pulled),
        "consumed_seconds": consumed_seconds,
    }


def _rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _start(root: Path, consumers: int) -> tuple[subprocess.Popen[str], str]:
    cmd = [sys.executable, "-m", "rmqspec.cli", "serve-cluster", "--port", "0", "--broker-port", "0", "--queues",
           str(consumers), "--history", str(root / "broker.jsonl"), "--store", str(root / "store")]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT)  # a server that hangs must not hang the bench
    line = proc.stdout.readline() if ready else ""
    if not line.startswith("serve-cluster: name server "):
        proc.kill()
        proc.wait()
        what = f"first line: {line.strip()!r}" if ready else f"nothing printed within {START_TIMEOUT:g} s"
        raise BenchError(f"serve-cluster did not start ({what}, exit {proc.poll()})")
    return proc, line.split("broker ")[1].split(",")[0]


def run_bench_cluster(seconds: float, in_flight: int, consumers: int) -> Iterator[str]:
    """The bench's lines, as they are measured."""
    with tempfile.TemporaryDirectory(prefix="rmqspec-bench-cluster-") as scratch:
        root = Path(scratch)
        proc, broker = _start(root, consumers)
        try:
            rss_before = _rss_kib(proc.pid)
            yield (
                f"serve-cluster pid {proc.pid} at {broker}; {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; "
                f"{seconds:g} s: a quarter sequential, the rest {in_flight} in flight with {consumers} consumers"
            )
            f = asyncio.run(_measure(broker, seconds, in_flight, consumers))
            rss_after = _rss_kib(proc.pid)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(START_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                raise BenchError("serve-cluster did not stop within 60 s of SIGTERM") from None
        seq_rate = f["sequential"] / f["sequential_seconds"]
        pipe_rate = f["pipelined"] / f["pipelined_seconds"]
        pull_rate = f["pulled"] / f["consumed_seconds"]
        stored = int(f["sequential"] + f["pipelined"])
        yield f"sequential sends: {int(f['sequential'])} in {f['sequential_seconds']:.1f} s, {seq_rate:,.0f} messages/s"
        yield (
            f"pipelined sends ({in_flight} in flight) with {consumers} consumers: {int(f['pipelined'])} in "
            f"{f['pipelined_seconds']:.1f} s, {pipe_rate:,.0f} messages/s ({pipe_rate / seq_rate:.2f}x sequential)"
        )
        yield (
            f"consumers: {int(f['pulled'])} of {stored} pulled in {f['consumed_seconds']:.1f} s, {pull_rate:,.0f} "
            f"messages/s, {stored - int(f['pulled'])} behind at the end"
        )
        moved = pipe_rate * TEN_MINUTES
        verdict = "meets" if moved >= GOAL else "misses"
        yield f"a ten-minute run at the pipelined rate moves {moved:,.0f} messages: {verdict} the {GOAL:,} goal"
        if rss_before is not None and rss_after is not None:
            per = (rss_after - rss_before) * 1024 / max(stored, 1)
            yield (
                f"server memory: {rss_before / 1024:.0f} MiB before, {rss_after / 1024:.0f} MiB after {stored} "
                f"messages ({per:,.0f} bytes a message: the reference's store keeps every message in memory)"
            )
        history = root / "broker.jsonl"
        lines = len(history.read_text(encoding="utf-8").splitlines()) if history.exists() else 0
        yield f"history: {lines} lines, {history.stat().st_size if history.exists() else 0:,} bytes; server exit {code}"
        yield json.dumps({"bench-cluster": {**f, "seconds": seconds, "in_flight": in_flight, "consumers": consumers,
                                            "rss_kib_before": rss_before, "rss_kib_after": rss_after}})  # fmt: skip
