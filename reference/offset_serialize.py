"""The canonical strict-JSON formats of the two offset files, with encoders and checking decoders.

RocketMQ 4.9.8 writes both files with fastjson, which is not RFC 8259 JSON: the client's
``OffsetSerializeWrapper`` uses a JSON object as a map key (R1.8) and the broker writes integer map
keys unquoted (R3.6). Following the advice of R1.8, this package also keeps its own canonical format,
readable by any JSON tool. ``fastjson_format`` writes the real format and reads both; the file stores
write the real format unless told ``file_format="canonical"``.

Client file ``<dir>/<clientId>/<group>/offsets.json`` (R1.7, R1.8), one entry per queue, entries in
``MessageQueue`` order (topic, brokerName, queueId)::

    {"offsetTable": [{"brokerName": "broker-a", "offset": 42, "queueId": 0, "topic": "T"}, ...]}

Broker file ``<storePathRootDir>/config/consumerOffset.json`` (R3.1, R3.6), keys ``"topic@group"``
then the queue id as a decimal string, both in ascending order (queue ids numerically)::

    {"offsetTable": {"T@G": {"0": 123, "1": 45}}}

Encoders are deterministic (fixed key order, two-space indent, final newline) and refuse values the
decoders would refuse, so a written file always reads back. Decoders are strict: no unknown, missing
or duplicate keys, no duplicate queues, queue ids within Java ``int``, offsets within Java ``long``,
no floats, booleans, NaN or Infinity. Every failure is an ``OffsetFileFormatError`` whose message
names the file, the line and what was expected, e.g.
``offsets.json: line 14: entry 3: queueId must be an integer, got "0"``.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Mapping
from typing import Any, Final

from rmqspec.reference.message_queue import MessageQueue

OFFSET_TABLE: Final = "offsetTable"
TOPIC_GROUP_SEPARATOR: Final = "@"
INT_MIN: Final = -(2**31)
INT_MAX: Final = 2**31 - 1
LONG_MIN: Final = -(2**63)
LONG_MAX: Final = 2**63 - 1
_INDENT: Final = 2
_CLIENT_ENTRY_KEYS: Final = ("topic", "brokerName", "queueId", "offset")


class OffsetFileFormatError(ValueError):
    """An unreadable offset file; ``str()`` is ``<file>: line <n>: <detail>``.

    Readers that know the column (``fastjson_format``) pass it, and ``str()`` is then
    ``<file>: line <n>, column <c>: <detail>``.
    """

    def __init__(self, source: str, line: int, detail: str, column: int | None = None) -> None:
        where = f"line {line}" if column is None else f"line {line}, column {column}"
        super().__init__(f"{source}: {where}: {detail}")
        self.source = source
        self.line = line
        self.column = column
        self.detail = detail


# --- strict JSON parsing that remembers line numbers -------------------------------------------------

_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_STRING = re.compile(r'"(?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"')
_QUEUE_ID_KEY = re.compile(r"0|-?[1-9][0-9]{0,9}")
_MAX_DEPTH: Final = 32
_MAX_NUMBER_CHARS: Final = 24  # longer than any Java long; also keeps int() far from its digit limit


class _Object(dict[str, Any]):
    """A parsed JSON object that remembers its first line and the line of each key."""

    def __init__(self, line: int) -> None:
        super().__init__()
        self.line = line
        self.key_lines: dict[str, int] = {}


class _Array(list[Any]):
    """A parsed JSON array that remembers its first line and the line of each item."""

    def __init__(self, line: int) -> None:
        super().__init__()
        self.line = line
        self.item_lines: list[int] = []


class _Parser:
    """RFC 8259 JSON, rejecting duplicate keys; syntax errors are ``json.JSONDecodeError``."""

    def __init__(self, text: str, source: str) -> None:
        self.text = text
        self.source = source
        self._newlines = [m.start() for m in re.finditer("\n", text)]

    def line_of(self, pos: int) -> int:
        return bisect.bisect_left(self._newlines, pos) + 1

    def parse(self) -> tuple[Any, int]:
        """The top-level value and the line it starts on."""
        pos = self._skip(0)
        line = self.line_of(pos)
        value, pos = self._value(pos, 0)
        pos = self._skip(pos)
        if pos != len(self.text):
            raise json.JSONDecodeError("Extra data", self.text, pos)
        return value, line

    def _skip(self, pos: int) -> int:
        m = _WS.match(self.text, pos)
        return pos if m is None else m.end()

    def _value(self, pos: int, depth: int) -> tuple[Any, int]:
        text = self.text
        if depth > _MAX_DEPTH:
            raise json.JSONDecodeError("Nesting too deep", text, pos)
        if text.startswith("{", pos):
            return self._object(pos, depth)
        if text.startswith("[", pos):
            return self._array(pos, depth)
        if text.startswith('"', pos):
            return self._string(pos)
        for literal, value in (("true", True), ("false", False), ("null", None)):
            if text.startswith(literal, pos):
                return value, pos + len(literal)
        m = _NUMBER.match(text, pos)
        if m is None:
            raise json.JSONDecodeError("Expecting value", text, pos)
        if len(m.group()) > _MAX_NUMBER_CHARS:
            raise json.JSONDecodeError("Number too long", text, pos)
        if m.group(1) or m.group(2):
            return float(m.group()), m.end()
        return int(m.group()), m.end()

    def _string(self, pos: int) -> tuple[str, int]:
        m = _STRING.match(self.text, pos)
        if m is None:
            raise json.JSONDecodeError("Unterminated string or invalid escape", self.text, pos)
        decoded: str = json.loads(m.group())  # the token is already validated; json only unescapes it
        return decoded, m.end()

    def _object(self, start: int, depth: int) -> tuple[_Object, int]:
        text = self.text
        obj = _Object(self.line_of(start))
        pos = self._skip(start + 1)
        if text.startswith("}", pos):
            return obj, pos + 1
        while True:
            if not text.startswith('"', pos):
                raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, pos)
            key_line = self.line_of(pos)
            key, pos = self._string(pos)
            if key in obj:
                raise OffsetFileFormatError(self.source, key_line, f"duplicate key {json.dumps(key)}")
            pos = self._skip(pos)
            if not text.startswith(":", pos):
                raise json.JSONDecodeError("Expecting ':' delimiter", text, pos)
            obj[key], pos = self._value(self._skip(pos + 1), depth + 1)
            obj.key_lines[key] = key_line
            pos = self._skip(pos)
            if text.startswith("}", pos):
                return obj, pos + 1
            if not text.startswith(",", pos):
                raise json.JSONDecodeError("Expecting ',' delimiter", text, pos)
            pos = self._skip(pos + 1)

    def _array(self, start: int, depth: int) -> tuple[_Array, int]:
        text = self.text
        arr = _Array(self.line_of(start))
        pos = self._skip(start + 1)
        if text.startswith("]", pos):
            return arr, pos + 1
        while True:
            arr.item_lines.append(self.line_of(pos))
            item, pos = self._value(pos, depth + 1)
            arr.append(item)
            pos = self._skip(pos)
            if text.startswith("]", pos):
                return arr, pos + 1
            if not text.startswith(",", pos):
                raise json.JSONDecodeError("Expecting ',' delimiter", text, pos)
            pos = self._skip(pos + 1)


def _parse(content: str, source: str) -> tuple[Any, int]:
    try:
        return _Parser(content, source).parse()
    except json.JSONDecodeError as e:
        raise OffsetFileFormatError(source, e.lineno, f"invalid JSON at column {e.colno}: {e.msg}") from e


# --- checks shared by both formats -------------------------------------------------------------------


def _show(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _check_keys(obj: _Object, expected: tuple[str, ...], where: str, source: str) -> None:
    for key in obj:
        if key not in expected:
            wanted = ", ".join(expected)
            raise OffsetFileFormatError(
                source, obj.key_lines[key], f"{where}unexpected key {json.dumps(key)} (expected {wanted})"
            )
    for key in expected:
        if key not in obj:
            raise OffsetFileFormatError(source, obj.line, f"{where}missing key {json.dumps(key)}")


def _check_integer(value: Any, low: int, high: int, what: str) -> str | None:
    """Why ``value`` is not an integer in ``[low, high]``, or None if it is (bool is not an integer)."""
    if type(value) is not int:
        return f"{what} must be an integer, got {_show(value)}"
    if not low <= value <= high:
        java_type = "int" if high == INT_MAX else "long"
        return f"{what} must fit a Java {java_type}, got {value}"
    return None


def _root_table(content: str, source: str) -> tuple[Any, int]:
    """The ``offsetTable`` value and the line of its key."""
    root, line = _parse(content, source)
    if not isinstance(root, _Object):
        raise OffsetFileFormatError(source, line, 'expected an object {"offsetTable": ...} at the top level')
    _check_keys(root, (OFFSET_TABLE,), "", source)
    return root[OFFSET_TABLE], root.key_lines[OFFSET_TABLE]


# --- client file: OffsetSerializeWrapper ---------------------------------------------------------------


def encode_client_offset_table(offset_table: Mapping[MessageQueue, int]) -> str:
    """The canonical text of a client ``offsets.json`` (R1.8): entries in ``MessageQueue`` order.

    Raises ``ValueError`` for a value the decoder would refuse, so a written file always reads back.
    """
    entries: list[dict[str, Any]] = []
    for mq in sorted(offset_table):
        offset = offset_table[mq]
        problem = (
            (None if isinstance(mq.topic, str) else f"{mq}: topic must be a string")
            or (None if isinstance(mq.broker_name, str) else f"{mq}: brokerName must be a string")
            or _check_integer(mq.queue_id, INT_MIN, INT_MAX, f"{mq}: queueId")
            or _check_integer(offset, LONG_MIN, LONG_MAX, f"{mq}: offset")
        )
        if problem:
            raise ValueError(problem)
        entries.append({"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": offset})
    return json.dumps({OFFSET_TABLE: entries}, indent=_INDENT, sort_keys=True) + "\n"


def decode_client_offset_table(content: str, source: str = "<string>") -> dict[MessageQueue, int]:
    """Parse a canonical client ``offsets.json``; ``source`` names the file in error messages.

    Raises ``OffsetFileFormatError``. Entries are numbered from 1 in messages.
    """
    table, table_line = _root_table(content, source)
    if not isinstance(table, _Array):
        raise OffsetFileFormatError(source, table_line, "offsetTable must be a list of queue entries")
    result: dict[MessageQueue, int] = {}
    for index, (entry, entry_line) in enumerate(zip(table, table.item_lines, strict=True), start=1):
        where = f"entry {index}: "
        if not isinstance(entry, _Object):
            raise OffsetFileFormatError(
                source, entry_line, f"{where}expected an object with keys {', '.join(_CLIENT_ENTRY_KEYS)}"
            )
        _check_keys(entry, _CLIENT_ENTRY_KEYS, where, source)
        for key in ("topic", "brokerName"):
            if not isinstance(entry[key], str):
                raise OffsetFileFormatError(
                    source, entry.key_lines[key], f"{where}{key} must be a string, got {_show(entry[key])}"
                )
        for key, low, high in (("queueId", INT_MIN, INT_MAX), ("offset", LONG_MIN, LONG_MAX)):
            problem = _check_integer(entry[key], low, high, key)
            if problem:
                raise OffsetFileFormatError(source, entry.key_lines[key], where + problem)
        mq = MessageQueue(entry["topic"], entry["brokerName"], entry["queueId"])
        if mq in result:
            raise OffsetFileFormatError(source, entry.line, f"{where}duplicate entry for {mq}")
        result[mq] = entry["offset"]
    return result


# --- broker file: ConsumerOffsetManager ------------------------------------------------------------------


def encode_broker_offset_table(offset_table: Mapping[str, Mapping[int, int]]) -> str:
    """The canonical text of a broker ``consumerOffset.json`` (R3.6): keys sorted, queue ids numerically.

    Raises ``ValueError`` for a value the decoder would refuse, so a written file always reads back.
    """
    document: dict[str, dict[str, int]] = {}
    for key in sorted(offset_table):
        if not isinstance(key, str) or TOPIC_GROUP_SEPARATOR not in key:
            raise ValueError(f'key {key!r} must be a string of the form "topic@group"')
        queues: dict[str, int] = {}
        for queue_id in sorted(offset_table[key]):
            offset = offset_table[key][queue_id]
            problem = _check_integer(queue_id, INT_MIN, INT_MAX, f"{key}: queue id") or _check_integer(
                offset, LONG_MIN, LONG_MAX, f"{key}: offset of queue {queue_id}"
            )
            if problem:
                raise ValueError(problem)
            queues[str(queue_id)] = offset
        document[key] = queues
    return json.dumps({OFFSET_TABLE: document}, indent=_INDENT) + "\n"


def decode_broker_offset_table(content: str, source: str = "<string>") -> dict[str, dict[int, int]]:
    """Parse a canonical broker ``consumerOffset.json``; ``source`` names the file in error messages.

    Raises ``OffsetFileFormatError``.
    """
    table, table_line = _root_table(content, source)
    if not isinstance(table, _Object):
        raise OffsetFileFormatError(source, table_line, 'offsetTable must be an object keyed by "topic@group"')
    result: dict[str, dict[int, int]] = {}
    for key, queues in table.items():
        key_line = table.key_lines[key]
        if TOPIC_GROUP_SEPARATOR not in key:
            raise OffsetFileFormatError(source, key_line, f'key {json.dumps(key)} must have the form "topic@group"')
        if not isinstance(queues, _Object):
            raise OffsetFileFormatError(
                source,
                key_line,
                f"{key}: expected an object mapping queue ids to offsets, got {_show(queues)}",
            )
        offsets: dict[int, int] = {}
        for queue_key, offset in queues.items():
            line = queues.key_lines[queue_key]
            if not _QUEUE_ID_KEY.fullmatch(queue_key) or not INT_MIN <= int(queue_key) <= INT_MAX:
                raise OffsetFileFormatError(
                    source, line, f"{key}: queue id {json.dumps(queue_key)} must be a Java int in decimal"
                )
            problem = _check_integer(offset, LONG_MIN, LONG_MAX, f"{key}: offset of queue {queue_key}")
            if problem:
                raise OffsetFileFormatError(source, line, problem)
            offsets[int(queue_key)] = offset
        result[key] = offsets
    return result
