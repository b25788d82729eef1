"""The system under test as a child process: start it, exchange one JSON line per request with a
per-request timeout, and turn every way it can misbehave into one :class:`SutFailure`.

A SUT can crash (its stdout closes), hang (no reply within the timeout), write garbage (a line that
is not a JSON object), answer a request it was not asked (wrong ``id``) or answer in the wrong shape.
A SUT can also write a line no request asked for (an extra reply). Each failure names the request
that triggered it, what came back, the exit status if it died and the tail of its stderr. A thread
drains stderr into ``sut-stderr.log`` as it comes, so a chatty SUT never blocks, keeping its head and
its tail (:class:`StderrLog`) so a flooding SUT cannot fill the disk.
The process runs in its own session and the whole group is killed on close, and so is every process that
carries its start's mark in its environment (``SUT_MARK``): nothing it started outlives it, not even a
grandchild that called ``setsid``.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shlex
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from rmqspec.conform import protocol as p
from rmqspec.jsonin import InputError, parse

MAX_LINE_BYTES: Final = 16 * 1024 * 1024  # a reply longer than this is garbage, not a slow answer
STDERR_TAIL: Final = 2000  # characters of stderr quoted in a failure report
READ_CHUNK: Final = 1024 * 1024  # bytes read from the SUT's stdout at a time
# sut-stderr.log keeps the first and the last STDERR_KEEP bytes of what the SUT wrote to stderr (all its
# restarts in one conform run together) and says how many bytes in between were dropped. 1 MiB each:
# a JVM adapter's start-up output with a full stack trace is tens of KiB, so the head holds the start
# and the first errors of a run, which usually explain the rest, and the tail the last ten thousand or
# so lines before the end; a run then writes at most 2 MiB of stderr whatever the SUT does and however
# often shrinking restarts it, where a SUT logging every request used to fill gigabytes.
STDERR_KEEP: Final = 1024 * 1024


_VERBS: Final = {
    "crashed": "crashed",
    "hung": "hung",
    "garbage": "wrote garbage",
    "wrong-id": "answered a request it was not asked",
    "bad-reply": "sent a malformed reply",
    "extra-reply": "wrote a line no request asked for",
    "start": "could not be started",
}


@dataclass
class SutFailure(Exception):
    """The SUT broke the protocol. ``kind`` is crashed, hung, garbage, wrong-id, bad-reply, extra-reply
    or start."""

    kind: str
    request: dict[str, Any] | None
    got: str
    detail: str
    stderr_tail: str = ""

    def __str__(self) -> str:
        what = f"on request {p.encode(self.request)}" if self.request is not None else "at start-up"
        text = f"the system under test {_VERBS.get(self.kind, self.kind)} {what}: {self.detail}"
        if self.got:
            text += f"; it wrote {self.got[:500]!r}"
        if self.stderr_tail:
            text += f"\n--- its stderr (tail) ---\n{self.stderr_tail}"
        return text

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "request": self.request, "got": self.got[:2000], "detail": self.detail}


class StderrLog:
    """The SUT's stderr, drained by a thread per process into ``path``: the first ``keep`` bytes go
    to the file as they come, the last ``keep`` bytes after them are held in memory and written by
    :meth:`flush` behind a line saying how many bytes were dropped in between. ``recent`` holds the
    current process's last bytes, for failure reports."""

    RECENT: Final = 8 * STDERR_TAIL

    def __init__(self, path: Path, keep: int = STDERR_KEEP) -> None:
        self.path, self.keep = path, keep
        self.lock = threading.Lock()
        self.base: int | None = None  # the file's size before this run: earlier runs' output is kept
        self.head = 0  # bytes of the head written to the file
        self.tail = bytearray()  # what came after the head (its last ``keep`` bytes once flushed)
        self.dropped = 0
        self.recent = bytearray()
        self.threads: list[threading.Thread] = []

    def attach(self, pipe: Any) -> None:
        """Drain ``pipe`` (a new process's stderr) until it closes."""
        if self.base is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "ab") as f:
                self.base = f.tell()
        with self.lock:
            self.recent = bytearray()
        thread = threading.Thread(target=self._drain, args=(pipe,), name="sut-stderr", daemon=True)
        self.threads = [t for t in self.threads if t.is_alive()] + [thread]
        thread.start()

    def _drain(self, pipe: Any) -> None:
        fd = pipe.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except (OSError, ValueError):
                break
            if not chunk:
                break
            self._add(chunk)
        with contextlib.suppress(OSError):
            pipe.close()

    def _add(self, chunk: bytes) -> None:
        with self.lock:
            self.recent += chunk
            if len(self.recent) > 2 * self.RECENT:
                del self.recent[: -self.RECENT]
            if self.head < self.keep:
                part, chunk = chunk[: self.keep - self.head], chunk[self.keep - self.head :]
                with open(self.path, "ab") as f:
                    f.write(part)
                self.head += len(part)
            self.tail += chunk
            if len(self.tail) > 2 * self.keep:  # trimmed in halves: linear however the SUT writes
                cut = len(self.tail) - self.keep
                del self.tail[:cut]
                self.dropped += cut

    def flush(self, wait: float = 2.0) -> None:
        """Wait (up to ``wait`` seconds) for the draining threads of processes that ended, then
        write the tail behind the head."""
        for thread in self.threads:
            thread.join(wait)
        with self.lock:
            if self.base is None or not self.tail:
                return
            if len(self.tail) > self.keep:
                cut = len(self.tail) - self.keep
                del self.tail[:cut]
                self.dropped += cut
            with open(self.path, "r+b") as f:
                f.truncate(self.base + self.head)
                f.seek(self.base + self.head)
                if self.dropped:
                    f.write(
                        f"\n[rmqspec: {self.dropped} bytes of the SUT's stderr dropped here; "
                        f"the first {self.keep} and the last {self.keep} bytes are kept]\n".encode()
                    )
                f.write(self.tail)

    def recent_text(self) -> str:
        with self.lock:
            return self.recent.decode(errors="replace")


# The environment variable a SUT is started with, its value unique to that start: every process the SUT starts
# inherits it unless it clears its environment, also one that leaves the process group with setsid, so close()
# finds them all in /proc. (A process that clears its environment is beyond reach without a cgroup.)
SUT_MARK: Final = "RMQSPEC_CONFORM_SUT"


def marked_processes(mark: str) -> list[int]:
    """The processes whose environment holds ``SUT_MARK=mark`` (none where /proc cannot be read)."""
    needle = f"{SUT_MARK}={mark}".encode()
    found = []
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError), open(f"/proc/{entry}/environ", "rb") as f:
                    if needle in f.read().split(b"\0"):
                        found.append(int(entry))
    return found


class SutProcess:
    """One running SUT. ``call`` sends a request and returns its checked reply or raises SutFailure."""

    def __init__(self, command: str, timeout: float, stderr_path: Path) -> None:
        self.command, self.timeout, self.stderr_path = command, timeout, stderr_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.buffer = bytearray()  # read from stdout, not yet a line; a bytearray so appending is linear
        self.next_id = 0
        self.requests = 0
        self.stderr = StderrLog(stderr_path)
        self.last_request: dict[str, Any] | None = None  # the request whose reply was read last
        self.mark = f"{os.getpid()}-{id(self)}-{time.monotonic_ns()}"  # in the environment of all it starts

    def start(self) -> dict[str, Any]:
        """Start the process and shake hands; returns the hello result."""
        try:
            argv = shlex.split(self.command)
        except ValueError as e:
            raise SutFailure("start", None, "", f"cannot parse the command {self.command!r}: {e}") from None
        if not argv:
            raise SutFailure("start", None, "", "the command is empty")
        self.stderr_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                env={**os.environ, SUT_MARK: self.mark},
            )
        except OSError as e:
            raise SutFailure("start", None, "", f"cannot run {argv[0]!r}: {e.strerror or e}") from None
        self.stderr.attach(self.proc.stderr)
        self.buffer = bytearray()
        self.last_request = None
        reply = self.call("hello", {"protocol": p.PROTOCOL_VERSION})
        if not reply["ok"]:
            raise SutFailure("start", None, json.dumps(reply), "it refused the hello request")
        return dict(reply.get("result", {}))

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def call(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        request: dict[str, Any] = {"id": self.next_id, "op": op, "args": args}
        self.next_id += 1
        self.requests += 1
        if self.proc is None or self.proc.stdin is None:
            raise SutFailure("crashed", request, "", "it is not running")
        self._check_no_extra_output(request, sent=False)
        try:
            self.proc.stdin.write((p.encode(request) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, ConnectionResetError, ValueError):
            raise self._failure("crashed", request, "", "its stdin closed before the request was written") from None
        line = self._read_line(request)
        self._check_no_extra_output(request, sent=True)
        self.last_request = request
        try:
            reply = parse(line, "the reply", max_bytes=MAX_LINE_BYTES)
        except InputError as e:  # not JSON, nested too deep, an integer too long: the one JSON reader's checks
            raise self._failure(
                "garbage", request, line, f"the reply is not JSON this reader accepts ({e.detail})"
            ) from None
        if isinstance(reply, dict) and "id" in reply and reply.get("id") != request["id"]:
            detail = f"it answered id {reply.get('id')!r}, a request it was not asked (expected {request['id']})"
            raise self._failure("wrong-id", request, line, detail)
        try:
            return p.check_reply(reply, request["id"])
        except p.ProtocolError as e:
            raise self._failure("bad-reply", request, line, str(e)) from None

    def _check_no_extra_output(self, request: dict[str, Any], sent: bool) -> None:
        """One request, one reply line: anything else on stdout is a protocol failure. Checked right
        after a reply (bytes that came with it) and before the next request is sent (bytes that came
        since), so an extra line is reported where it appears instead of being taken for the next reply."""
        assert self.proc is not None and self.proc.stdout is not None
        if not self.buffer:
            fd = self.proc.stdout.fileno()
            ready, _, _ = select.select([fd], [], [], 0)
            if not ready:
                return
            chunk = os.read(fd, READ_CHUNK)
            if not chunk:
                return  # stdout closed: the next write or read reports the crash
            self.buffer += chunk
        got = bytes(self.buffer[:2000]).decode(errors="replace").split("\n")[0]
        if sent:
            detail = "after its reply, another line followed it; every request gets exactly one reply line"
        else:
            previous = f"its reply to {p.encode(self.last_request)}" if self.last_request is not None else "it started"
            detail = f"after {previous}, before this request was sent; every request gets exactly one reply line"
        raise self._failure("extra-reply", request, got, detail)

    def _read_line(self, request: dict[str, Any]) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + self.timeout
        searched = 0  # bytes of the buffer known to hold no newline: each byte is searched once
        while (end := self.buffer.find(b"\n", searched)) < 0:
            searched = len(self.buffer)
            if searched > MAX_LINE_BYTES:
                raise self._failure("garbage", request, "", f"a reply line longer than {MAX_LINE_BYTES} bytes")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                got = self.buffer.decode(errors="replace")
                raise self._failure("hung", request, got, f"no reply within {self.timeout:g} s")
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(fd, READ_CHUNK)
            if not chunk:
                got = self.buffer.decode(errors="replace")
                raise self._failure("crashed", request, got, "its stdout closed before a full reply line")
            self.buffer += chunk
        line = self.buffer[:end]
        del self.buffer[: end + 1]
        return line.decode(errors="replace")

    def _failure(self, kind: str, request: dict[str, Any], got: str, detail: str) -> SutFailure:
        """Stop the process (a SUT that broke the protocol cannot be trusted with the next request)
        and describe what happened, with its exit status and the tail of its stderr."""
        status = self.close()
        if kind == "crashed" and status is not None:
            detail += f" (exit status {status})"
        return SutFailure(kind, request, got, detail, self.stderr_tail())

    def stderr_tail(self) -> str:
        """The end of what the current (or last) process wrote to stderr."""
        return self.stderr.recent_text()[-STDERR_TAIL:].strip()

    def close(self) -> int | None:
        """Close stdin, give the SUT a moment to exit, then kill its process group. Returns the
        exit status (negative for a signal), or None if it was not running."""
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        try:
            if proc.stdin is not None:
                proc.stdin.close()
        except OSError:
            pass
        try:
            status = proc.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            status = None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        for pid in marked_processes(self.mark):  # what left the group (setsid, a daemon's double fork)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if status is None:
            status = proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        self.stderr.flush()
        return status
