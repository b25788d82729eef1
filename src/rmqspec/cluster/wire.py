"""RocketMQ 4.x remoting frames and the stored-message layout of a pull body, strict and bounded.

A frame (``RemotingCommand#encode`` / ``#decode`` of RocketMQ 4.9.8) is::

    int32 total length (everything after this field)
    int32 header length, whose high byte is the serialize type (0 = JSON, the only one accepted here)
    header: UTF-8 JSON {code, language, version, opaque, flag, remark, extFields}
    body: the rest

``flag`` bit 0 marks a response, bit 1 a oneway request. Requests may carry extFields values as
strings or numbers (the C++ client writes some as JSON numbers); responses carry strings only, as
the Java broker's ``HashMap<String, String>`` does (the C++ client reads a response field only when
it is a string).

Bounds (a frame beyond them closes its connection, never the server): a frame is at most
``MAX_FRAME_BYTES`` (16 MiB, RocketMQ's default ``com.rocketmq.remoting.frameMaxLength``) and its
header at most ``MAX_HEADER_BYTES`` (1 MiB: a header holds at most a message's properties, which
RocketMQ caps at 32 KiB, plus a few short fields). The header must be a JSON object with an integer
``code``, ``opaque`` and ``flag``; ``extFields``, when present, an object of strings, numbers or booleans.

A message in a pull body (``MessageDecoder#decode``, IPv4 hosts) is: store size, magic code, body
CRC, queue id, flag (int32 each), queue offset, commit-log offset (int64), sys flag (int32), born
timestamp (int64), born host (4 address bytes, int32 port), store timestamp (int64), store host (as
born host), reconsume times (int32), prepared-transaction offset (int64), body (int32 length + bytes),
topic (int8 length + bytes), properties (int16 length + ``name\\x01value\\x02`` pairs).
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any, Final

MAX_FRAME_BYTES: Final = 16 * 1024 * 1024  # RocketMQ's default frameMaxLength
MAX_HEADER_BYTES: Final = 1024 * 1024
SERIALIZE_JSON: Final = 0
FLAG_RESPONSE: Final = 0x1  # RemotingCommand RPC_TYPE bit
FLAG_ONEWAY: Final = 0x2  # RemotingCommand RPC_ONEWAY bit
LANGUAGE: Final = "JAVA"
# MQVersion.CURRENT_VERSION of a 4.9.8 broker: the ordinal of Version.V4_9_8 (a client only logs it).
BROKER_VERSION: Final = 401

MESSAGE_MAGIC_CODE: Final = -626843481  # MessageDecoder.MESSAGE_MAGIC_CODE (0xDAA320A7)
NAME_VALUE_SEPARATOR: Final = "\x01"
PROPERTY_SEPARATOR: Final = "\x02"
COMPRESSED_FLAG: Final = 0x1  # MessageSysFlag.COMPRESSED_FLAG: the body is zlib-deflated
MAX_TOPIC_BYTES: Final = 127  # the topic length is one signed byte
MAX_PROPERTIES_BYTES: Final = 32767  # the properties length is one signed short


class FrameError(Exception):
    """A frame that breaks the protocol: its connection is closed."""


@dataclass
class Frame:
    """One decoded frame. ``ext_fields`` values are kept as the sender typed them."""

    code: int
    opaque: int
    flag: int
    remark: str | None = None
    ext_fields: dict[str, Any] = field(default_factory=dict)
    body: bytes = b""
    language: str = LANGUAGE
    version: int = 0

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)


def parse_header(header: bytes) -> Frame:
    """The header of a frame, checked; raises FrameError naming what is wrong."""
    try:
        obj = json.loads(header.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise FrameError(f"header is not UTF-8 JSON: {err}") from None
    if not isinstance(obj, dict):
        raise FrameError("header is not a JSON object")
    values: dict[str, int] = {}
    for name in ("code", "opaque", "flag"):
        value = obj.get(name, 0 if name == "flag" else None)
        if not isinstance(value, int) or isinstance(value, bool) or not -(2**31) <= value < 2**31:
            raise FrameError(f"header field {name!r} is not a 32-bit integer: {value!r}")
        values[name] = value
    ext = obj.get("extFields")
    if ext is None:
        ext = {}
    if not isinstance(ext, dict) or not all(isinstance(v, str | int | float | bool) or v is None for v in ext.values()):
        raise FrameError("header field 'extFields' is not an object of strings and numbers")
    remark = obj.get("remark")
    version = obj.get("version", 0)
    language = obj.get("language", "")
    return Frame(
        code=values["code"],
        opaque=values["opaque"],
        flag=values["flag"],
        remark=remark if isinstance(remark, str) else None,
        ext_fields={k: v for k, v in ext.items() if v is not None},
        version=version if isinstance(version, int) and not isinstance(version, bool) else 0,
        language=language if isinstance(language, str) else "",
    )


def decode_frame(data: bytes) -> Frame:
    """A frame from its bytes after the total-length field (``data`` is that long)."""
    if len(data) < 4:
        raise FrameError(f"frame of {len(data)} bytes has no header length")
    (header_word,) = struct.unpack_from(">I", data, 0)
    serialize_type = header_word >> 24
    header_length = header_word & 0xFFFFFF
    if serialize_type != SERIALIZE_JSON:
        raise FrameError(f"serialize type {serialize_type} is not supported (only 0, JSON)")
    if header_length > MAX_HEADER_BYTES:
        raise FrameError(f"header of {header_length} bytes exceeds {MAX_HEADER_BYTES}")
    if 4 + header_length > len(data):
        raise FrameError(f"header length {header_length} exceeds the frame's {len(data) - 4} bytes")
    frame = parse_header(data[4 : 4 + header_length])
    frame.body = data[4 + header_length :]
    return frame


async def read_frame(reader: asyncio.StreamReader) -> Frame | None:
    """The next frame, or None at a clean end of stream (between frames). A stream that ends inside
    a frame raises ``asyncio.IncompleteReadError``; a frame out of bounds raises FrameError."""
    try:
        prefix = await reader.readexactly(4)
    except asyncio.IncompleteReadError as err:
        if not err.partial:
            return None
        raise
    (total,) = struct.unpack(">I", prefix)
    if total > MAX_FRAME_BYTES:
        raise FrameError(f"frame of {total} bytes exceeds {MAX_FRAME_BYTES}")
    return decode_frame(await reader.readexactly(total))


def encode_frame(
    code: int,
    opaque: int,
    flag: int,
    ext_fields: dict[str, str] | None = None,
    body: bytes = b"",
    remark: str | None = None,
) -> bytes:
    """A frame's bytes, JSON-serialized as a 4.9.8 broker writes them."""
    header = json.dumps(
        {
            "code": code,
            "extFields": ext_fields or {},
            "flag": flag,
            "language": LANGUAGE,
            "opaque": opaque,
            "remark": remark,
            "serializeTypeCurrentRPC": "JSON",
            "version": BROKER_VERSION,
        },
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode("utf-8")
    return struct.pack(">II", 4 + len(header) + len(body), len(header)) + header + body


# --- messages ----------------------------------------------------------------------------------------


def string_to_properties(text: str) -> dict[str, str]:
    """``MessageDecoder#string2messageProperties``: pairs without a separator are dropped."""
    out: dict[str, str] = {}
    for item in text.split(PROPERTY_SEPARATOR):
        name, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if sep and name:
            out[name] = value
    return out


def properties_to_string(properties: dict[str, str]) -> str:
    return "".join(f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in properties.items())


def host_bytes(address: str) -> tuple[bytes, int]:
    """``ip:port`` as 4 address bytes and the port."""
    host, _, port = address.rpartition(":")
    try:
        return socket.inet_aton(host), int(port)
    except (OSError, ValueError):
        return b"\x7f\x00\x00\x01", 0


def offset_message_id(store_host: str, commit_log_offset: int) -> str:
    """``MessageDecoder#createMessageId``: store address, port and commit-log offset in upper-case hex."""
    address, port = host_bytes(store_host)
    return (address + struct.pack(">iq", port, commit_log_offset)).hex().upper()


@dataclass
class WireMessage:
    """What a pull body carries for one message."""

    topic: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    body: bytes
    properties: dict[str, str]
    born_timestamp: int = 0
    store_timestamp: int = 0
    born_host: str = "127.0.0.1:0"
    store_host: str = "127.0.0.1:0"
    reconsume_times: int = 0
    flag: int = 0
    sys_flag: int = 0


def encode_message(m: WireMessage) -> bytes:
    """One message in the layout of ``MessageDecoder#decode`` (IPv4 hosts)."""
    topic = m.topic.encode("utf-8")[:MAX_TOPIC_BYTES]
    props = properties_to_string(m.properties).encode("utf-8")[:MAX_PROPERTIES_BYTES]
    born_addr, born_port = host_bytes(m.born_host)
    store_addr, store_port = host_bytes(m.store_host)
    rest = b"".join(
        (
            struct.pack(
                ">iiiqqiq",
                zlib.crc32(m.body) & 0x7FFFFFFF,
                m.queue_id,
                m.flag,
                m.queue_offset,
                m.commit_log_offset,
                m.sys_flag,
                m.born_timestamp,
            ),
            born_addr,
            struct.pack(">iq", born_port, m.store_timestamp),
            store_addr,
            struct.pack(">iiqi", store_port, m.reconsume_times, 0, len(m.body)),
            m.body,
            struct.pack(">b", len(topic)),
            topic,
            struct.pack(">h", len(props)),
            props,
        )
    )
    size = 8 + len(rest)
    return struct.pack(">ii", size, MESSAGE_MAGIC_CODE) + rest


@dataclass
class BatchMessage:
    """One message of a SEND_BATCH_MESSAGE body."""

    flag: int
    body: bytes
    properties: dict[str, str]


def encode_batch(messages: list[BatchMessage]) -> bytes:
    """``MessageDecoder#encodeMessages``: per message its total size, magic code and body CRC (both 0, as the
    client writes them), flag, body (int32 length + bytes) and properties (int16 length + pairs)."""
    out = []
    for m in messages:
        props = properties_to_string(m.properties).encode("utf-8")
        size = 4 * 5 + len(m.body) + 2 + len(props)
        out.append(
            struct.pack(">iiiii", size, 0, 0, m.flag, len(m.body)) + m.body + struct.pack(">h", len(props)) + props
        )
    return b"".join(out)


def decode_batch(data: bytes) -> list[BatchMessage]:
    """``MessageDecoder#decodeMessages``, the inverse of :func:`encode_batch`; raises ValueError naming the byte
    where a message is truncated or malformed (the total size and the magic code are not read, as 4.9.8)."""
    out: list[BatchMessage] = []
    pos = 0
    try:
        while pos < len(data):
            _size, _magic, _crc, flag, body_len = struct.unpack_from(">iiiii", data, pos)
            p = pos + 20
            if body_len < 0 or p + body_len > len(data):
                raise ValueError(f"batch message at byte {pos}: body of {body_len} bytes runs past the end")
            body = data[p : p + body_len]
            p += body_len
            (props_len,) = struct.unpack_from(">h", data, p)
            p += 2
            if props_len < 0 or p + props_len > len(data):
                raise ValueError(f"batch message at byte {pos}: properties of {props_len} bytes run past the end")
            props = string_to_properties(data[p : p + props_len].decode("utf-8"))
            out.append(BatchMessage(flag, body, props))
            pos = p + props_len
    except (struct.error, UnicodeDecodeError) as err:
        raise ValueError(f"batch body truncated or malformed at byte {pos}: {err}") from None
    return out


def decode_messages(data: bytes) -> list[WireMessage]:
    """The messages of a pull body (the inverse of :func:`encode_message`); raises ValueError."""
    out: list[WireMessage] = []
    pos = 0
    try:
        while pos < len(data):
            size, _magic, _crc, queue_id, flag, queue_offset, cl_offset, sys_flag, born_ts = struct.unpack_from(
                ">iiiiiqqiq", data, pos
            )
            p = pos + 48
            born = socket.inet_ntoa(data[p : p + 4])
            (born_port, store_ts) = struct.unpack_from(">iq", data, p + 4)
            p += 16
            store = socket.inet_ntoa(data[p : p + 4])
            store_port, reconsume, _prepared, body_len = struct.unpack_from(">iiqi", data, p + 4)
            p += 24
            body = data[p : p + body_len]
            p += body_len
            (topic_len,) = struct.unpack_from(">b", data, p)
            topic = data[p + 1 : p + 1 + topic_len].decode("utf-8")
            p += 1 + topic_len
            (props_len,) = struct.unpack_from(">h", data, p)
            props = string_to_properties(data[p + 2 : p + 2 + props_len].decode("utf-8"))
            p += 2 + props_len
            if p > len(data):
                raise ValueError(f"pull body truncated or malformed at byte {pos}: {p - len(data)} bytes missing")
            if p - pos != size:
                raise ValueError(f"message at byte {pos}: store size {size} but {p - pos} bytes decoded")
            out.append(
                WireMessage(
                    topic,
                    queue_id,
                    queue_offset,
                    cl_offset,
                    body,
                    props,
                    born_ts,
                    store_ts,
                    f"{born}:{born_port}",
                    f"{store}:{store_port}",
                    reconsume,
                    flag,
                    sys_flag,
                )
            )
            pos = p
    except (struct.error, UnicodeDecodeError, OSError) as err:
        raise ValueError(f"pull body truncated or malformed at byte {pos}: {err}") from None
    return out
