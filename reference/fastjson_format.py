"""RocketMQ 4.9.8's real offset files: exact writers of fastjson's text and a lenient reader of it.

RocketMQ writes both offset files with ``JSON.toJSONString(obj, PrettyFormat)`` of fastjson
1.2.69 (``RemotingSerializable.toJson(obj, true)``), then ``MixAll.string2File`` (R1.15). The text
is not RFC 8259 JSON. The writers here produce the same characters for the same table; the reader
also accepts the canonical strict-JSON format of ``offset_serialize``, so a table can be loaded from
a real broker's or client's file, or from one of ours.

What fastjson writes (``⇥`` stands for one TAB character; there is no final newline):

* A bean (the root object, and a ``MessageQueue``) is ``{``, a newline, its properties one per line
  in alphabetical order as ``"name":value`` (no space after the colon), each line indented one TAB
  deeper than the bean, then a newline at the bean's own depth and ``}``. Commas end the lines.
* A map is ``{``, its entries in the map's iteration order, ``}``. An entry with a string key starts
  on a new line one TAB deeper (``"key":value``); an entry with any other key does **not** start a
  new line: the key is written as a value (an unquoted integer, or a whole bean) followed by
  ``:value``. A non-empty map's ``}`` goes on a new line at the map's depth; an empty map is ``{}``.
* Numbers are plain decimals (no ``L`` suffix), ``AtomicLong`` included. Strings are double-quoted;
  ``"`` ``\\`` and ``\\b \\f \\n \\r \\t`` get their short escapes, the other characters below U+0020,
  U+007F–U+009F, U+2028 and U+2029 become ``\\uXXXX`` (upper-case hex), everything else is raw.

Broker ``<storePathRootDir>/config/consumerOffset.json`` (R3.1, R3.6): the ``ConsumerOffsetManager``
bean, whose only property in 4.9.8 is ``offsetTable``, keys ``"topic@group"``, queue ids unquoted::

    {
    ⇥"offsetTable":{
    ⇥⇥"TopicTest@G":{0:123,1:45
    ⇥⇥},
    ⇥⇥"%RETRY%G@G":{0:0
    ⇥⇥}
    ⇥}
    }

Client ``<dir>/<clientId>/<group>/offsets.json`` (R1.7, R1.8): the ``OffsetSerializeWrapper`` bean,
whose ``offsetTable`` maps a ``MessageQueue`` bean, pretty-printed inside the key, to a number::

    {
    ⇥"offsetTable":{{
    ⇥⇥⇥"brokerName":"broker-a",
    ⇥⇥⇥"queueId":0,
    ⇥⇥⇥"topic":"TopicTest"
    ⇥⇥}:42,{
    ⇥⇥⇥"brokerName":"broker-a",
    ⇥⇥⇥"queueId":1,
    ⇥⇥⇥"topic":"TopicTest"
    ⇥⇥}:40
    ⇥}
    }

An empty table is ``{\\n⇥"offsetTable":{}\\n}`` in both files. Both tables are Java
``ConcurrentHashMap`` objects, so a real file lists entries in hash-bucket order, which depends on
the map's capacity and history, not on the table alone. ``write_broker_offset_file`` and
``write_client_offset_file`` write entries in the order of the mapping they are given;
``encode_*_offset_file`` (what the file stores use) sort them first (keys as strings, queue ids
numerically, queues in ``MessageQueue`` order), so our files are deterministic.

RocketMQ 5.x writes the broker file with two more properties, ``dataVersion`` and
``groupTopicMap``, before ``offsetTable``; ``pullOffsetTable`` has no getter and is never written.

The reader accepts fastjson's text and the canonical text: any of fastjson's whitespace (space, TAB,
CR, LF, form feed, backspace, so CRLF files too) anywhere between tokens, a leading byte-order mark,
single- or double-quoted strings, bare field names (``offsetTable`` without quotes), integer keys
quoted or not, ``MessageQueue`` objects as keys (fastjson) or a list of entries (canonical), entries
in any order. Like fastjson it ignores unknown top-level properties (5.x ``dataVersion``) and reads
a root without ``offsetTable`` as an empty table. It is stricter than fastjson where leniency would
hide damage: a duplicate key, a string or decimal where an integer belongs, a value out of the Java
``int`` / ``long`` range, ``null`` for a table or an offset, comments, missing or extra commas and
trailing text are refused. Every refusal is an ``OffsetFileFormatError`` naming the file, the line
and column, and what was expected, e.g. ``consumerOffset.json: line 3, column 12: T@G: offset of
queue 0 must be an integer (a Java long), got the string "5"``.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal, TypeAlias

from rmqspec.reference.message_queue import MessageQueue
from rmqspec.reference.offset_serialize import (
    INT_MAX,
    INT_MIN,
    LONG_MAX,
    LONG_MIN,
    OFFSET_TABLE,
    TOPIC_GROUP_SEPARATOR,
    OffsetFileFormatError,
    encode_broker_offset_table,
    encode_client_offset_table,
)

OffsetFileFormat: TypeAlias = Literal["fastjson", "canonical"]
FASTJSON: Final = "fastjson"
CANONICAL: Final = "canonical"
OFFSET_FILE_FORMATS: Final[tuple[OffsetFileFormat, ...]] = ("fastjson", "canonical")
DEFAULT_OFFSET_FILE_FORMAT: Final[OffsetFileFormat] = "fastjson"

_MESSAGE_QUEUE_FIELDS: Final = ("brokerName", "queueId", "topic")  # fastjson's alphabetical order
_CANONICAL_ENTRY_FIELDS: Final = ("topic", "brokerName", "queueId", "offset")


def check_file_format(file_format: str) -> OffsetFileFormat:
    """``file_format`` if it names a known format, else ``ValueError`` listing the known ones."""
    for known in OFFSET_FILE_FORMATS:
        if file_format == known:
            return known
    raise ValueError(f"unknown offset file format {file_format!r}; expected one of {', '.join(OFFSET_FILE_FORMATS)}")


# --- writers --------------------------------------------------------------------------------------------

# What fastjson 1.2.69 escapes in a double-quoted string (SerializeWriter#writeStringWithDoubleQuote).
_NEEDS_ESCAPE = re.compile('[\x00-\x1f"\\\\\x7f-\x9f\u2028\u2029]')
_SHORT_ESCAPES: Final = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _escape_char(match: re.Match[str]) -> str:
    char = match.group()
    return _SHORT_ESCAPES.get(char) or f"\\u{ord(char):04X}"


def quote_string(text: str) -> str:
    """``text`` as fastjson writes a string: double quotes, its escapes and nothing else escaped."""
    return '"' + _NEEDS_ESCAPE.sub(_escape_char, text) + '"'


def _problem_with_integer(value: object, low: int, high: int, what: str) -> str | None:
    if type(value) is not int:
        return f"{what} must be an integer, got {value!r}"
    if not low <= value <= high:
        return f"{what} must fit a Java {'int' if high == INT_MAX else 'long'}, got {value}"
    return None


_SURROGATE = re.compile("[\ud800-\udfff]")


def _problem_with_text(value: object, what: str) -> str | None:
    if not isinstance(value, str):
        return f"{what} must be a string, got {value!r}"
    if _SURROGATE.search(value):
        return f"{what} must not contain a lone surrogate (it cannot be written as UTF-8), got {value!r}"
    return None


def _check_broker_table(offset_table: Mapping[str, Mapping[int, int]]) -> None:
    for key, queues in offset_table.items():
        if not isinstance(key, str) or TOPIC_GROUP_SEPARATOR not in key:
            raise ValueError(f'key {key!r} must be a string of the form "topic@group"')
        problem = _problem_with_text(key, "key")
        if problem:
            raise ValueError(problem)
        for queue_id, offset in queues.items():
            problem = _problem_with_integer(queue_id, INT_MIN, INT_MAX, f"{key}: queue id") or _problem_with_integer(
                offset, LONG_MIN, LONG_MAX, f"{key}: offset of queue {queue_id}"
            )
            if problem:
                raise ValueError(problem)


def _check_client_table(offset_table: Mapping[MessageQueue, int]) -> None:
    for mq, offset in offset_table.items():
        problem = (
            _problem_with_text(mq.topic, f"{mq}: topic")
            or _problem_with_text(mq.broker_name, f"{mq}: brokerName")
            or _problem_with_integer(mq.queue_id, INT_MIN, INT_MAX, f"{mq}: queueId")
            or _problem_with_integer(offset, LONG_MIN, LONG_MAX, f"{mq}: offset")
        )
        if problem:
            raise ValueError(problem)


_EMPTY_FILE: Final = '{\n\t"offsetTable":{}\n}'


def write_broker_offset_file(offset_table: Mapping[str, Mapping[int, int]]) -> str:
    """The text 4.9.8 writes to ``consumerOffset.json`` for this table, entries in the mapping's order (R3.6).

    Raises ``ValueError`` for a value the reader would refuse, so a written file always reads back.
    """
    _check_broker_table(offset_table)
    if not offset_table:
        return _EMPTY_FILE
    parts = ['{\n\t"offsetTable":{']
    for index, (key, queues) in enumerate(offset_table.items()):
        parts.append(",\n\t\t" if index else "\n\t\t")
        parts.append(quote_string(key) + ":{")
        parts.append(",".join(f"{queue_id}:{offset}" for queue_id, offset in queues.items()))
        parts.append("\n\t\t}" if queues else "}")  # an integer-keyed map's entries share one line
    parts.append("\n\t}\n}")
    return "".join(parts)


def write_client_offset_file(offset_table: Mapping[MessageQueue, int]) -> str:
    """The text 4.9.8 writes to ``offsets.json`` for this table, entries in the mapping's order (R1.8).

    Raises ``ValueError`` for a value the reader would refuse, so a written file always reads back.
    """
    _check_client_table(offset_table)
    if not offset_table:
        return _EMPTY_FILE
    entries = (
        f'{{\n\t\t\t"brokerName":{quote_string(mq.broker_name)},\n\t\t\t"queueId":{mq.queue_id},'
        f'\n\t\t\t"topic":{quote_string(mq.topic)}\n\t\t}}:{offset}'
        for mq, offset in offset_table.items()
    )
    return '{\n\t"offsetTable":{' + ",".join(entries) + "\n\t}\n}"


def encode_broker_offset_file(
    offset_table: Mapping[str, Mapping[int, int]], file_format: OffsetFileFormat = DEFAULT_OFFSET_FILE_FORMAT
) -> str:
    """The broker file text in ``file_format``, keys sorted and queue ids in numeric order (deterministic)."""
    if check_file_format(file_format) == CANONICAL:
        return encode_broker_offset_table(offset_table)
    _check_broker_table(offset_table)  # before sorting, so a bad key fails with the same message
    return write_broker_offset_file({key: dict(sorted(offset_table[key].items())) for key in sorted(offset_table)})


def encode_client_offset_file(
    offset_table: Mapping[MessageQueue, int], file_format: OffsetFileFormat = DEFAULT_OFFSET_FILE_FORMAT
) -> str:
    """The client file text in ``file_format``, queues in ``MessageQueue`` order (deterministic)."""
    if check_file_format(file_format) == CANONICAL:
        return encode_client_offset_table(offset_table)
    _check_client_table(offset_table)
    return write_client_offset_file({mq: offset_table[mq] for mq in sorted(offset_table)})


# --- lenient parsing that remembers where every value starts -----------------------------------------------

NodeKind: TypeAlias = Literal["object", "array", "string", "name", "integer", "decimal", "true", "false", "null"]


@dataclass(slots=True)
class Node:
    """One parsed value and the line and column (both from 1) where it starts.

    ``value`` holds a scalar: the text of a string or bare name, the int of an integer, the text of
    a decimal. An object keeps its ``members`` as (key, value) pairs in file order, since a key may
    itself be an object; an array keeps its ``items``.
    """

    kind: NodeKind
    line: int
    column: int
    value: str | int | None = None
    members: list[tuple[Node, Node]] = field(default_factory=list)
    items: list[Node] = field(default_factory=list)

    def describe(self) -> str:
        """The value for an error message: ``the string "5"``, ``an object``, ``null``."""
        if self.kind == "string":
            shown = json.dumps(self.value, ensure_ascii=False)
            return "the string " + (shown if len(shown) <= 40 else shown[:37] + '..."')
        if self.kind == "name":
            return f"the bare word {self.value}"
        if self.kind in ("integer", "decimal"):
            return f"the number {self.value}"
        if self.kind in ("object", "array"):
            return f"an {self.kind}"
        return self.kind


_BOM: Final = "\ufeff"
_WHITESPACE = re.compile("[ \t\n\r\f\b]*")  # JSONLexerBase#skipWhitespace
_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_NUMBER_START: Final = "-0123456789"
_NAME = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_PLAIN_RUN = {'"': re.compile(r'[^"\\\x00-\x1f]*'), "'": re.compile(r"[^'\\\x00-\x1f]*")}
_SIMPLE_ESCAPES: Final = dict(zip("\"'\\/bfnrt", "\"'\\/\b\f\n\r\t", strict=True))  # after a backslash
_HEX4 = re.compile("[0-9a-fA-F]{4}")
_LITERALS: Final[dict[str, NodeKind]] = {"true": "true", "false": "false", "null": "null"}
_MAX_DEPTH: Final = 32
_MAX_NUMBER_CHARS: Final = 24  # longer than any Java long; also keeps int() far from its digit limit


class _Parser:
    def __init__(self, text: str, source: str) -> None:
        self.text = text
        self.source = source
        self._newlines = [m.start() for m in re.finditer("\n", text)]

    # positions and errors

    def where(self, pos: int) -> tuple[int, int]:
        line = bisect.bisect_left(self._newlines, pos) + 1
        line_start = self._newlines[line - 2] + 1 if line > 1 else 0
        return line, pos - line_start + 1

    def fail(self, pos: int, detail: str) -> OffsetFileFormatError:
        line, column = self.where(pos)
        return OffsetFileFormatError(self.source, line, detail, column)

    def got(self, pos: int) -> str:
        if pos >= len(self.text):
            return "the end of the file"
        char = self.text[pos]
        return repr(char) if char.isprintable() else f"the character U+{ord(char):04X}"

    def skip(self, pos: int) -> int:
        m = _WHITESPACE.match(self.text, pos)
        return pos if m is None else m.end()

    def node(self, kind: NodeKind, pos: int, value: str | int | None = None) -> Node:
        line, column = self.where(pos)
        return Node(kind, line, column, value)

    # grammar

    def document(self) -> Node:
        pos = self.skip(1 if self.text.startswith(_BOM) else 0)
        if not self.text.startswith("{", pos):
            raise self.fail(pos, f"expected '{{' to start the offset file, got {self.got(pos)}")
        root, pos = self.object(pos, 0)
        pos = self.skip(pos)
        if pos != len(self.text):
            raise self.fail(pos, f"expected the end of the file after the closing '}}', got {self.got(pos)}")
        return root

    def value(self, pos: int, depth: int) -> tuple[Node, int]:
        char = self.text[pos : pos + 1]
        if char == "{":
            return self.object(pos, depth)
        if char == "[":
            return self.array(pos, depth)
        if char in ('"', "'"):
            return self.string(pos)
        if char and char in _NUMBER_START:
            return self.number(pos)
        m = _NAME.match(self.text, pos)
        literal = None if m is None else _LITERALS.get(m.group())
        if m is not None and literal is not None:
            return self.node(literal, pos), m.end()
        raise self.fail(
            pos, f"expected a value (number, string, object, array, true, false or null), got {self.got(pos)}"
        )

    def key(self, pos: int, depth: int) -> tuple[Node, int]:
        char = self.text[pos : pos + 1]
        if char in ('"', "'"):
            return self.string(pos)
        if char and char in _NUMBER_START:
            return self.number(pos)
        if char == "{":
            return self.object(pos, depth)
        m = _NAME.match(self.text, pos)
        if m is not None:
            return self.node("name", pos, m.group()), m.end()
        raise self.fail(pos, f"expected a key (a quoted name, a number or an object), got {self.got(pos)}")

    def object(self, start: int, depth: int) -> tuple[Node, int]:
        if depth >= _MAX_DEPTH:
            raise self.fail(start, f"objects and arrays nested deeper than {_MAX_DEPTH} levels")
        text = self.text
        obj = self.node("object", start)
        pos = self.skip(start + 1)
        if text.startswith("}", pos):
            return obj, pos + 1
        while True:
            key, pos = self.key(pos, depth + 1)
            pos = self.skip(pos)
            if not text.startswith(":", pos):
                raise self.fail(pos, f"expected ':' after a key, got {self.got(pos)}")
            value, pos = self.value(self.skip(pos + 1), depth + 1)
            obj.members.append((key, value))
            pos = self.skip(pos)
            if text.startswith("}", pos):
                return obj, pos + 1
            if not text.startswith(",", pos):
                raise self.fail(pos, f"expected ',' or '}}' after a value in an object, got {self.got(pos)}")
            pos = self.skip(pos + 1)

    def array(self, start: int, depth: int) -> tuple[Node, int]:
        if depth >= _MAX_DEPTH:
            raise self.fail(start, f"objects and arrays nested deeper than {_MAX_DEPTH} levels")
        text = self.text
        arr = self.node("array", start)
        pos = self.skip(start + 1)
        if text.startswith("]", pos):
            return arr, pos + 1
        while True:
            item, pos = self.value(pos, depth + 1)
            arr.items.append(item)
            pos = self.skip(pos)
            if text.startswith("]", pos):
                return arr, pos + 1
            if not text.startswith(",", pos):
                raise self.fail(pos, f"expected ',' or ']' after a value in an array, got {self.got(pos)}")
            pos = self.skip(pos + 1)

    def string(self, start: int) -> tuple[Node, int]:
        text = self.text
        quote = text[start]
        plain = _PLAIN_RUN[quote]
        chunks: list[str] = []
        pos = start + 1
        while True:
            m = plain.match(text, pos)
            assert m is not None  # the pattern matches the empty string
            chunks.append(m.group())
            pos = m.end()
            if pos >= len(text):
                raise self.fail(start, f"the string starting here has no closing {quote}")
            char = text[pos]
            if char == quote:
                return self.node("string", start, "".join(chunks)), pos + 1
            if char != "\\":
                raise self.fail(pos, f"{self.got(pos)} inside a string must be written as an escape")
            escaped = text[pos + 1 : pos + 2]
            if escaped in _SIMPLE_ESCAPES:
                chunks.append(_SIMPLE_ESCAPES[escaped])
                pos += 2
            elif escaped == "u" and _HEX4.fullmatch(text, pos + 2, pos + 6):
                code = int(text[pos + 2 : pos + 6], 16)
                pos += 6
                low = text[pos + 2 : pos + 6] if text.startswith("\\u", pos) else ""
                if 0xD800 <= code <= 0xDBFF and _HEX4.fullmatch(low) and 0xDC00 <= int(low, 16) <= 0xDFFF:
                    code = 0x10000 + ((code - 0xD800) << 10) + (int(low, 16) - 0xDC00)  # a surrogate pair
                    pos += 6
                if 0xD800 <= code <= 0xDFFF:
                    raise self.fail(pos - 6, f"\\u{code:04X} is half of a surrogate pair, without the other half")
                chunks.append(chr(code))
            else:
                raise self.fail(
                    pos, "invalid escape in a string: expected one of \\\" \\' \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX"
                )

    def number(self, start: int) -> tuple[Node, int]:
        m = _NUMBER.match(self.text, start)
        if m is None:
            raise self.fail(start, f"expected a digit after '-', got {self.got(start + 1)}")
        if len(m.group()) > _MAX_NUMBER_CHARS:
            raise self.fail(start, f"a number longer than {_MAX_NUMBER_CHARS} characters")
        if m.group(1) or m.group(2):
            return self.node("decimal", start, m.group()), m.end()
        return self.node("integer", start, int(m.group())), m.end()


def parse_fastjson(content: str, source: str = "<string>") -> Node:
    """Parse fastjson-style text whose top level is an object; raises ``OffsetFileFormatError``."""
    return _Parser(content, source).document()


# --- from parsed values to offset tables --------------------------------------------------------------------


def _fail(node: Node, source: str, detail: str) -> OffsetFileFormatError:
    return OffsetFileFormatError(source, node.line, detail, node.column)


def _field_name(key: Node) -> str | None:
    """The name of a property key (quoted or bare), or None for a number or object key."""
    return key.value if key.kind in ("string", "name") and isinstance(key.value, str) else None


def _first_at(node: Node) -> str:
    return f"first at line {node.line}, column {node.column}"


def _properties(obj: Node, source: str, where: str) -> Iterator[tuple[str, Node, Node]]:
    """(name, key, value) of each property of a bean-like object; refuses non-name and duplicate keys."""
    first_keys: dict[str, Node] = {}
    for key, value in obj.members:
        name = _field_name(key)
        if name is None:
            raise _fail(key, source, f"{where}expected a property name, got {key.describe()}")
        if name in first_keys:
            raise _fail(key, source, f'{where}duplicate key "{name}" ({_first_at(first_keys[name])})')
        first_keys[name] = key
        yield name, key, value


def _offset_table_node(root: Node, source: str) -> Node | None:
    """The ``offsetTable`` value, or None when the root has none (fastjson then keeps the empty default)."""
    table = None
    for name, _key, value in _properties(root, source, ""):
        if name == OFFSET_TABLE:
            table = value  # other properties (5.x dataVersion, groupTopicMap) are ignored, as fastjson does
    return table


def _integer(node: Node, source: str, low: int, high: int, what: str) -> int:
    java_type = "int" if high == INT_MAX else "long"
    if node.kind != "integer" or not isinstance(node.value, int):
        raise _fail(node, source, f"{what} must be an integer (a Java {java_type}), got {node.describe()}")
    if not low <= node.value <= high:
        raise _fail(node, source, f"{what} must fit a Java {java_type}, got {node.value}")
    return node.value


_CANONICAL_QUEUE_ID = re.compile(r"0|-?[1-9][0-9]{0,9}")


def _queue_id_key(key: Node, source: str, where: str) -> int:
    """A broker queue-id key: unquoted (fastjson) or a quoted decimal (canonical)."""
    if key.kind == "string" and isinstance(key.value, str) and _CANONICAL_QUEUE_ID.fullmatch(key.value):
        if INT_MIN <= int(key.value) <= INT_MAX:
            return int(key.value)
    elif key.kind == "integer":
        return _integer(key, source, INT_MIN, INT_MAX, f"{where}queue id")
    raise _fail(key, source, f"{where}queue id must be a Java int, got {key.describe()}")


def read_broker_offset_file(content: str, source: str = "<string>") -> dict[str, dict[int, int]]:
    """The table of a broker ``consumerOffset.json`` in fastjson's or the canonical format (R3.6).

    ``source`` names the file in error messages. Raises ``OffsetFileFormatError``.
    """
    table = _offset_table_node(parse_fastjson(content, source), source)
    result: dict[str, dict[int, int]] = {}
    if table is None:
        return result
    if table.kind != "object":
        raise _fail(table, source, f'offsetTable must be an object keyed by "topic@group", got {table.describe()}')
    first_keys: dict[str, Node] = {}
    for key, queues in table.members:
        name = _field_name(key)
        if name is None:
            raise _fail(key, source, f'expected a "topic@group" key, got {key.describe()}')
        if TOPIC_GROUP_SEPARATOR not in name:
            raise _fail(key, source, f'key {json.dumps(name)} must have the form "topic@group"')
        if name in first_keys:
            raise _fail(key, source, f"duplicate key {json.dumps(name)} ({_first_at(first_keys[name])})")
        first_keys[name] = key
        if queues.kind != "object":
            detail = f"{name}: expected an object mapping queue ids to offsets, got {queues.describe()}"
            raise _fail(queues, source, detail)
        offsets: dict[int, int] = {}
        first_queue_keys: dict[int, Node] = {}
        for queue_key, offset in queues.members:
            queue_id = _queue_id_key(queue_key, source, f"{name}: ")
            if queue_id in offsets:
                first = _first_at(first_queue_keys[queue_id])
                raise _fail(queue_key, source, f"{name}: duplicate queue id {queue_id} ({first})")
            first_queue_keys[queue_id] = queue_key
            offsets[queue_id] = _integer(offset, source, LONG_MIN, LONG_MAX, f"{name}: offset of queue {queue_id}")
        result[name] = offsets
    return result


def _message_queue_fields(obj: Node, source: str, where: str, expected: tuple[str, ...]) -> dict[str, Node]:
    """The properties of a ``MessageQueue`` key or canonical entry: exactly ``expected``, each once."""
    fields: dict[str, Node] = {}
    for name, key, value in _properties(obj, source, where):
        if name not in expected:
            raise _fail(key, source, f'{where}unexpected key "{name}" (expected {", ".join(expected)})')
        fields[name] = value
    for name in expected:
        if name not in fields:
            raise _fail(obj, source, f'{where}missing key "{name}" (expected {", ".join(expected)})')
    for name in ("topic", "brokerName"):
        if fields[name].kind != "string":
            raise _fail(fields[name], source, f"{where}{name} must be a string, got {fields[name].describe()}")
    return fields


def _message_queue(fields: dict[str, Node], source: str, where: str) -> MessageQueue:
    queue_id = _integer(fields["queueId"], source, INT_MIN, INT_MAX, f"{where}queueId")
    return MessageQueue(str(fields["topic"].value), str(fields["brokerName"].value), queue_id)


def read_client_offset_file(content: str, source: str = "<string>") -> dict[MessageQueue, int]:
    """The table of a client ``offsets.json`` in fastjson's or the canonical format (R1.8).

    ``source`` names the file in error messages. Raises ``OffsetFileFormatError``.
    """
    table = _offset_table_node(parse_fastjson(content, source), source)
    result: dict[MessageQueue, int] = {}
    if table is None:
        return result
    first_nodes: dict[MessageQueue, Node] = {}

    def add(mq: MessageQueue, node: Node, offset: int, where: str) -> None:
        if mq in result:
            raise _fail(node, source, f"{where}duplicate entry for {mq} ({_first_at(first_nodes[mq])})")
        first_nodes[mq] = node
        result[mq] = offset

    if table.kind == "array":  # the canonical format: a list of entries
        for index, entry in enumerate(table.items, start=1):
            where = f"entry {index}: "
            if entry.kind != "object":
                expected = ", ".join(_CANONICAL_ENTRY_FIELDS)
                raise _fail(entry, source, f"{where}expected an object with keys {expected}, got {entry.describe()}")
            fields = _message_queue_fields(entry, source, where, _CANONICAL_ENTRY_FIELDS)
            mq = _message_queue(fields, source, where)
            add(mq, entry, _integer(fields["offset"], source, LONG_MIN, LONG_MAX, f"{where}offset"), where)
        return result
    if table.kind != "object":
        raise _fail(
            table,
            source,
            f"offsetTable must be an object keyed by MessageQueue objects, or a list, got {table.describe()}",
        )
    for key, offset in table.members:
        if key.kind != "object":
            raise _fail(
                key,
                source,
                'expected a MessageQueue object {"brokerName":...,"queueId":...,"topic":...} as the key, '
                f"got {key.describe()}",
            )
        where = "MessageQueue key: "
        mq = _message_queue(_message_queue_fields(key, source, where, _MESSAGE_QUEUE_FIELDS), source, where)
        add(mq, key, _integer(offset, source, LONG_MIN, LONG_MAX, f"offset of {mq}"), "")
    return result
