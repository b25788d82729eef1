"""File helpers of ``MixAll`` used by both offset files: ``file2string`` and a crash-safe ``string2file``.

``file2string`` mirrors ``MixAll.file2String`` (R1.10). ``string2file`` is the crash-safe version of
``MixAll.string2File`` (R1.15) and is used for the client's ``offsets.json`` (R1.12, R1.13) and the
broker's ``consumerOffset.json`` (R3.6).

How ``string2file`` differs from 4.9.8 (RMQ-21). 4.9.8 writes ``<name>.tmp`` with no fsync, copies
the readable previous main to ``<name>.bak``, *deletes* main and then renames ``.tmp`` over it, so
a crash between the delete and the rename leaves main missing. Here every file is fsync'd,
``os.replace`` renames ``.tmp`` over main atomically (main is never missing: it holds either the
previous or the new content) and the directory is fsync'd so the rename survives a power loss.
Kept from 4.9.8: the names ``<name>``, ``<name>.bak`` and ``<name>.tmp``; the ``.bak`` is a copy of
the previous main whenever that was readable, even when it was empty or corrupt (R1.16 row 2); the
``.tmp`` is never read. Readers therefore fall back exactly as they do against 4.9.8.

Fault injection: set the module attribute ``crash_after`` to a step name in ``CRASH_POINTS`` (tests
use ``monkeypatch.setattr(mixall, "crash_after", "bak")``) and ``string2file`` raises
``SimulatedCrash`` right after that step, leaving the files exactly as a process killed there would.
It models a process stop, not lost page cache; the fsyncs are what make the two the same.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Final, Literal, TypeAlias

StrPath: TypeAlias = str | os.PathLike[str]

CrashPoint: TypeAlias = Literal["tmp", "bak", "replace"]
CRASH_POINTS: Final[tuple[CrashPoint, ...]] = ("tmp", "bak", "replace")
"""The steps of ``string2file``, in order: ``.tmp`` written and fsync'd; ``.bak`` refreshed (or
skipped because main was unreadable); ``.tmp`` renamed over main (directory not yet fsync'd)."""

crash_after: CrashPoint | None = None
"""Fault injection hook: when set, ``string2file`` raises ``SimulatedCrash`` after that step."""

log = logging.getLogger(__name__)


class SimulatedCrash(BaseException):
    """Raised by ``string2file`` at the step named by ``crash_after``.

    A ``BaseException`` so that no ``except Exception`` in a caller can swallow a simulated crash.
    """


def _read_bytes(path: StrPath) -> bytes | None:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        if not isinstance(e, FileNotFoundError):
            log.warning("cannot read %s: %s", os.fspath(path), e)
        return None


def file2string(path: StrPath) -> str | None:
    """``MixAll.file2String`` (R1.10): the file's text, or None when it is missing or unreadable.

    An empty file gives ``""`` (callers treat it like None). Bytes that are not UTF-8 are replaced
    rather than refused, as Java's ``new String(bytes)`` does, so a garbage file reads as garbage
    text and fails to parse instead of looking missing.
    """
    data = _read_bytes(path)
    return None if data is None else data.decode("utf-8", errors="replace")


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # platforms that cannot open a directory (Windows) have no directory fsync
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _checkpoint(step: CrashPoint) -> None:
    if crash_after == step:
        raise SimulatedCrash(step)


def string2file(content: str, path: StrPath) -> None:
    """Crash-safe ``MixAll.string2File`` (R1.15, RMQ-21): replace the file at ``path`` by ``content``.

    Steps: create the parent directories; write ``<path>.tmp`` (UTF-8) and fsync it; if the
    current main is readable, copy its bytes to ``<path>.bak`` and fsync that; ``os.replace`` the
    ``.tmp`` over main; fsync the directory. An ``OSError`` propagates, as ``IOException`` does.
    """
    main = Path(path)
    tmp = Path(os.fspath(path) + ".tmp")
    bak = Path(os.fspath(path) + ".bak")
    main.parent.mkdir(parents=True, exist_ok=True)
    _write_synced(tmp, content.encode("utf-8"))
    _checkpoint("tmp")
    prev = _read_bytes(main)
    if prev is not None:
        _write_synced(bak, prev)
    _checkpoint("bak")
    os.replace(tmp, main)
    _checkpoint("replace")
    _fsync_directory(main.parent)
