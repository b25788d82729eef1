"""The one way rmqspec writes a result file: whole or not at all.

:func:`write_atomic` writes the text to ``<name>.tmp`` beside the file, flushes it to disk and renames it
over the file, so a reader never sees a file half-written (a full disk, a kill mid-write): the file is the
old one or the new one, and a failed write leaves no ``.tmp`` behind. Its ``OSError`` names the file the
caller asked for (not the ``.tmp``), so the message a command prints says which result could not be written.
:func:`check_writable` and :func:`check_directory` refuse an output before the work that would fill it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from contextlib import suppress
from pathlib import Path


def write_atomic(path: str | os.PathLike[str], text: str | Iterable[str]) -> None:
    """Write ``text`` (a string, or pieces written in turn) to ``path`` atomically (module docstring). Raises
    OSError with ``filename`` the path."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            for piece in [text] if isinstance(text, str) else text:
                f.write(piece)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as err:
        with suppress(OSError):
            tmp.unlink()
        raise OSError(err.errno, err.strerror, str(path)) from None


def check_writable(path: str | os.PathLike[str]) -> str | None:
    """Why a file cannot be written at ``path`` (its directory missing or not writable, the path a directory),
    or None. Creates nothing."""
    path = Path(path)
    directory = path.parent
    if path.is_dir():
        return "is a directory"
    if not directory.is_dir():
        return f"no such directory {directory}"
    if not os.access(directory, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        return "permission denied"
    return None


def check_directory(path: str | os.PathLike[str]) -> str | None:
    """Why files cannot be written in the directory ``path`` (it, or the nearest of its parents that exists, is
    not a directory or not writable), or None. Creates nothing."""
    path = Path(path)
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing}: permission denied"
    return None


__all__ = ["check_directory", "check_writable", "write_atomic"]
