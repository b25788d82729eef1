"""The system under test as a child process: start it, exchange one JSON line per request with a
per-request timeout, and turn every way it can misbehave into one :class:`SutFailure`.

A SUT can crash (its stdout closes), hang (no reply within the timeout), write garbage (a line that
is not a JSON object), answer a request it was not asked (wrong ``id``) or answer in the wrong shape.
Each failure names the request that triggered it, what came back, the exit status if it died and
the tail of its stderr, which is kept in a file rather than a pipe so a chatty SUT cannot block.
The process runs in its own session and the whole group is killed on close, so nothing outlives it.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from rmqspec.conform import protocol as p

MAX_LINE_BYTES: Final = 16 * 1024 * 1024  # a reply longer than this is garbage, not a slow answer
STDERR_TAIL: Final = 2000  # characters of stderr quoted in a failure report


_VERBS: Final = {
    "crashed": "crashed",
    "hung": "hung",
    "garbage": "wrote garbage",
    "wrong-id": "answered a request it was not asked",
    "bad-reply": "sent a malformed reply",
    "start": "could not be started",
}


@dataclass
class SutFailure(Exception):
    """The SUT broke the protocol. ``kind`` is crashed, hung, garbage, wrong-id, bad-reply or start."""

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


class SutProcess:
    """One running SUT. ``call`` sends a request and returns its checked reply or raises SutFailure."""

    def __init__(self, command: str, timeout: float, stderr_path: Path) -> None:
        self.command, self.timeout, self.stderr_path = command, timeout, stderr_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.buffer = b""
        self.next_id = 0
        self.requests = 0
        self.stderr_start = 0

    def start(self) -> dict[str, Any]:
        """Start the process and shake hands; returns the hello result."""
        try:
            argv = shlex.split(self.command)
        except ValueError as e:
            raise SutFailure("start", None, "", f"cannot parse the command {self.command!r}: {e}") from None
        if not argv:
            raise SutFailure("start", None, "", "the command is empty")
        self.stderr_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.stderr_path, "ab") as stderr:
            self.stderr_start = stderr.tell()  # a failure quotes only what this process wrote
            try:
                self.proc = subprocess.Popen(
                    argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, start_new_session=True
                )
            except OSError as e:
                raise SutFailure("start", None, "", f"cannot run {argv[0]!r}: {e.strerror or e}") from None
        self.buffer = b""
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
        try:
            self.proc.stdin.write((p.encode(request) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, ConnectionResetError, ValueError):
            raise self._failure("crashed", request, "", "its stdin closed before the request was written") from None
        line = self._read_line(request)
        try:
            reply = json.loads(line)
        except ValueError as e:
            raise self._failure("garbage", request, line, f"the reply is not JSON ({e})") from None
        if isinstance(reply, dict) and "id" in reply and reply.get("id") != request["id"]:
            detail = f"it answered id {reply.get('id')!r}, a request it was not asked (expected {request['id']})"
            raise self._failure("wrong-id", request, line, detail)
        try:
            return p.check_reply(reply, request["id"])
        except p.ProtocolError as e:
            raise self._failure("bad-reply", request, line, str(e)) from None

    def _read_line(self, request: dict[str, Any]) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + self.timeout
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                got = self.buffer.decode(errors="replace")
                raise self._failure("hung", request, got, f"no reply within {self.timeout:g} s")
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                got = self.buffer.decode(errors="replace")
                raise self._failure("crashed", request, got, "its stdout closed before a full reply line")
            self.buffer += chunk
            if len(self.buffer) > MAX_LINE_BYTES and b"\n" not in self.buffer:
                raise self._failure("garbage", request, "", f"a reply line longer than {MAX_LINE_BYTES} bytes")
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode(errors="replace")

    def _failure(self, kind: str, request: dict[str, Any], got: str, detail: str) -> SutFailure:
        """Stop the process (a SUT that broke the protocol cannot be trusted with the next request)
        and describe what happened, with its exit status and the tail of its stderr."""
        status = self.close()
        if kind == "crashed" and status is not None:
            detail += f" (exit status {status})"
        return SutFailure(kind, request, got, detail, self.stderr_tail())

    def stderr_tail(self) -> str:
        try:
            with open(self.stderr_path, "rb") as f:
                f.seek(self.stderr_start)
                text = f.read().decode(errors="replace")
        except OSError:
            return ""
        return text[-STDERR_TAIL:].strip()

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
        if status is None:
            status = proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        return status
