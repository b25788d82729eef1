"""The one way rmqspec reads JSON it did not write itself: configs, conform scripts, campaign
manifests and batches, traces and histories.

Every failure of such input is an :class:`InputError` whose ``str()`` is one line,
``"<where>: line L: <what> (column C)"``, naming the file, the line and what to fix, never a
traceback. Before ``json.loads`` sees the text, :func:`parse` refuses what the standard library
would reject with something other than ``JSONDecodeError``, or could not survive at all:

* bytes that are not UTF-8 (the error names the line and the byte);
* more than ``max_bytes`` of text (a bound on the memory one document can take);
* arrays and objects nested deeper than :data:`MAX_DEPTH` (the C scanner recurses once per level and
  raises ``RecursionError`` near ``sys.getrecursionlimit()``), found by a linear scan of the
  brackets outside strings;
* integers longer than ``sys.get_int_max_str_digits()`` digits (``int()`` raises ``ValueError``).
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterator
from itertools import accumulate
from typing import Any, BinaryIO

# No input of rmqspec nests deeper than about six levels (a batch row's violation list). 100 leaves
# room for any honest producer and stays far below the interpreter's recursion limit (1000), which
# the C scanner and json.dumps both count against.
MAX_DEPTH = 100

# A whole document (a config, a manifest, a conform script) read at once. Python's JSON objects take
# roughly ten times their text in memory, so 256 MiB of text is a few GiB: beyond it the input is
# more likely garbage than a real file, and the message says how to proceed.
MAX_DOCUMENT_BYTES = 256 * 1024 * 1024

# One line of a JSON Lines file (a trace event, a history event, a batch row): the longest honest
# line is a batch row of a few KiB; 64 MiB bounds the memory of one line without ever rejecting one.
MAX_LINE_BYTES = 64 * 1024 * 1024

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_STRING_OR_LONG_DIGITS = r'"[^"\\]*(?:\\.[^"\\]*)*"|(-?[0-9]{%d,})'


class InputError(ValueError):
    """Bad input: ``where`` (a file, or an argument), ``line`` and ``column`` (1-based, or None when
    the whole input is at fault) and ``what`` is wrong. ``str()`` is ``"<where>: <detail>"``."""

    def __init__(self, where: str, what: str, line: int | None = None, column: int | None = None) -> None:
        super().__init__(where, what, line, column)
        self.where = where
        self.what = what
        self.line = line
        self.column = column

    @property
    def detail(self) -> str:
        """The message without ``where``: ``"line L: <what> (column C)"``."""
        at = f"line {self.line}: " if self.line is not None else ""
        column = f" (column {self.column})" if self.column is not None else ""
        return f"{at}{self.what}{column}"

    def __str__(self) -> str:
        return f"{self.where}: {self.detail}"


def _line_and_column(text: str, offset: int, first_line: int) -> tuple[int, int]:
    line_start = text.rfind("\n", 0, offset) + 1
    return first_line + text.count("\n", 0, offset), offset - line_start + 1


def _decode(data: bytes, where: str, first_line: int) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line_start = data.rfind(b"\n", 0, err.start) + 1
        raise InputError(
            where,
            f"not UTF-8 text ({err.reason}: byte 0x{data[err.start]:02x}); save the file as UTF-8",
            first_line + data.count(b"\n", 0, err.start),
            err.start - line_start + 1,
        ) from None


def depth(text: str) -> int:
    """How deeply arrays and objects nest in JSON ``text`` (brackets inside strings do not count).
    Linear: the strings and every other non-bracket character are removed by regular expressions,
    then a running sum over what is left."""
    if text.count("[") + text.count("{") <= 1:
        return text.count("[") + text.count("{")
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def _check_depth(text: str, where: str, first_line: int) -> None:
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return  # the common case, decided by two C-speed counts
    if depth(text) <= MAX_DEPTH:
        return
    # Find where the limit is crossed, to name the line: walk the text once more, strings skipped.
    level, i, n = 0, 0, len(text)
    while i < n:
        m = _STRING.match(text, i) if text[i] == '"' else None
        if m is not None:
            i = m.end()
            continue
        c = text[i]
        if c in "[{":
            level += 1
            if level > MAX_DEPTH:
                line, column = _line_and_column(text, i, first_line)
                raise InputError(
                    where,
                    f"not JSON this reader accepts: arrays and objects nested more than {MAX_DEPTH} deep",
                    line,
                    column,
                )
        elif c in "]}":
            level -= 1
        i += 1
    raise InputError(  # pragma: no cover - depth() found the limit crossed, so the walk does
        where, f"not JSON this reader accepts: arrays and objects nested more than {MAX_DEPTH} deep", first_line
    )


def _long_integer(text: str, where: str, first_line: int) -> InputError | None:
    limit = sys.get_int_max_str_digits()
    if limit == 0:
        return None
    for m in re.finditer(_STRING_OR_LONG_DIGITS % (limit + 1), text, re.DOTALL):
        if m.group(1) is not None:
            line, column = _line_and_column(text, m.start(1), first_line)
            digits = len(m.group(1).lstrip("-"))
            return InputError(
                where,
                f"an integer of {digits} digits; at most {limit} are accepted (write it as a string if it is an id)",
                line,
                column,
            )
    return None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON; write null or a finite number")


_STRICT = json.JSONDecoder(parse_constant=_refuse_constant)


def parse(
    text: str | bytes,
    where: str,
    *,
    line: int | None = None,
    max_bytes: int = MAX_DOCUMENT_BYTES,
    allow_nan: bool = True,
) -> Any:
    """The JSON value in ``text`` (bytes are decoded as UTF-8). ``where`` names the input in errors;
    ``line`` says the text is that line of a JSON Lines file (errors then name it; otherwise they name
    the line within ``text``). ``allow_nan=False`` refuses ``NaN`` and ``Infinity``, which are not
    JSON. Raises :class:`InputError`."""
    first_line = 1 if line is None else line
    size = len(text)
    if size > max_bytes:
        raise InputError(
            where,
            f"{size} bytes, more than the {max_bytes} this reader accepts; is this the right file?",
            line,
        )
    if isinstance(text, (bytes, bytearray)):
        text = _decode(bytes(text), where, first_line)
    if not text.strip():
        raise InputError(where, "empty; expected a JSON value", line)
    _check_depth(text, where, first_line)
    try:
        return json.loads(text) if allow_nan else _STRICT.decode(text)
    except json.JSONDecodeError as err:
        line, column = _line_and_column(text, err.pos, first_line)
        raise InputError(where, f"not JSON: {err.msg}", line, column) from None
    except RecursionError:  # pragma: no cover - _check_depth refuses what could recurse this deep
        raise InputError(where, "not JSON this reader accepts: nested too deeply", first_line) from None
    except ValueError as err:
        long = _long_integer(text, where, first_line)
        if long is not None:
            raise long from None
        raise InputError(where, f"not JSON: {err}", line) from None


def read_file(path: str | os.PathLike[str], what: str, *, max_bytes: int = MAX_DOCUMENT_BYTES) -> Any:
    """The JSON value in the file at ``path``; ``what`` says what the file should be, for the error
    when it cannot be opened (e.g. ``"a config"``). Raises :class:`InputError`."""
    where = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as err:
        raise InputError(where, f"cannot read {what}: {err.strerror or err}") from None
    return parse(data, where, max_bytes=max_bytes)


def iter_lines(
    source: str | os.PathLike[str] | bytes,
    where: str,
    *,
    max_line_bytes: int = MAX_LINE_BYTES,
    allow_nan: bool = True,
) -> Iterator[tuple[int, Any]]:
    """(line number, JSON value) for every non-blank line of a JSON Lines file (a path) or of bytes
    already read; errors name ``where`` and the line. Raises :class:`InputError`, and for a path
    that cannot be opened, :class:`InputError` too."""
    if isinstance(source, (bytes, bytearray)):
        yield from _values(iter(bytes(source).split(b"\n")), where, max_line_bytes, allow_nan)
        return
    try:
        fh: BinaryIO = open(source, "rb")  # noqa: SIM115 - closed below, after the generator's last line
    except OSError as err:
        raise InputError(where, f"cannot read: {err.strerror or err}") from None
    with fh:
        yield from _values(_bounded_lines(fh, max_line_bytes), where, max_line_bytes, allow_nan)


def _bounded_lines(fh: BinaryIO, max_line_bytes: int) -> Iterator[bytes]:
    """The lines of ``fh``; a line longer than the bound is cut just past it (parse then refuses it)
    so that one endless line never has to fit in memory."""
    while True:
        raw = fh.readline(max_line_bytes + 1)
        if not raw:
            return
        if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
            yield raw
            while True:  # skip the rest of the over-long line
                rest = fh.readline(1 << 20)
                if not rest or rest.endswith(b"\n"):
                    break
            continue
        yield raw


def _values(lines: Iterator[bytes], where: str, max_line_bytes: int, allow_nan: bool) -> Iterator[tuple[int, Any]]:
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        yield n, parse(raw, where, line=n, max_bytes=max_line_bytes, allow_nan=allow_nan)


__all__ = ["MAX_DEPTH", "InputError", "depth", "iter_lines", "parse", "read_file"]
