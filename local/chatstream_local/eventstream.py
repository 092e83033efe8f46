"""Encoder for the AWS event stream framing (``application/vnd.amazon.eventstream``).

One message on the wire::

    total length   u32 big-endian   (the whole message, CRCs included)
    headers length u32 big-endian
    prelude CRC32  u32 big-endian   (of the 8 bytes above)
    headers        name length u8, name (UTF-8), value type u8, value
    payload        bytes
    message CRC32  u32 big-endian   (of everything before it, prelude CRC included)

Only string headers (value type 7: u16 length, UTF-8 bytes) are written: they are all that
Bedrock's ``ConverseStream`` and Lambda's ``InvokeWithResponseStream`` use. botocore's ``EventStreamBuffer``
is the decoder these frames are tested against, so a wrong length or CRC is caught by the client's own parser.
"""

from __future__ import annotations

import json
import struct
import zlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

STRING_HEADER_TYPE = 7
JSON_CONTENT_TYPE = "application/json"
PRELUDE_LENGTH = 12
CRC_LENGTH = 4
MAX_HEADER_NAME_LENGTH = 255
MAX_HEADER_VALUE_LENGTH = 32767


def _crc32(data: bytes, crc: int = 0) -> int:
    return zlib.crc32(data, crc) & 0xFFFFFFFF


def encode_headers(headers: Sequence[tuple[str, str]]) -> bytes:
    """Encode ``(name, value)`` pairs as event stream string headers, in order."""
    out = bytearray()
    for name, value in headers:
        raw_name = name.encode("utf-8")
        raw_value = value.encode("utf-8")
        if not 0 < len(raw_name) <= MAX_HEADER_NAME_LENGTH:
            raise ValueError(f"event stream header name must be 1..{MAX_HEADER_NAME_LENGTH} bytes: {name!r}")
        if len(raw_value) > MAX_HEADER_VALUE_LENGTH:
            raise ValueError(f"event stream header value too long for {name!r}")
        out += struct.pack("!B", len(raw_name)) + raw_name
        out += struct.pack("!BH", STRING_HEADER_TYPE, len(raw_value)) + raw_value
    return bytes(out)


def encode_message(headers: Sequence[tuple[str, str]], payload: bytes) -> bytes:
    """Frame one event stream message: prelude, prelude CRC, headers, payload, message CRC."""
    raw_headers = encode_headers(headers)
    total_length = PRELUDE_LENGTH + len(raw_headers) + len(payload) + CRC_LENGTH
    prelude = struct.pack("!II", total_length, len(raw_headers))
    prelude += struct.pack("!I", _crc32(prelude))
    body = prelude + raw_headers + payload
    return body + struct.pack("!I", _crc32(body))


def _json(payload: Mapping[str, Any]) -> bytes:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def encode_event(event_type: str, payload: Mapping[str, Any]) -> bytes:
    """An ``event`` message; the JSON payload is the event member's own shape (not wrapped in its name)."""
    headers = [
        (":event-type", event_type),
        (":content-type", JSON_CONTENT_TYPE),
        (":message-type", "event"),
    ]
    return encode_message(headers, _json(payload))


def encode_blob_event(event_type: str, payload: bytes, content_type: str = "application/octet-stream") -> bytes:
    """An ``event`` message whose payload is the raw bytes of a blob member (``eventpayload``), e.g. Lambda's
    ``PayloadChunk``."""
    headers = [
        (":event-type", event_type),
        (":content-type", content_type),
        (":message-type", "event"),
    ]
    return encode_message(headers, payload)


def encode_exception(exception_type: str, payload: Mapping[str, Any]) -> bytes:
    """An ``exception`` message (a modeled error inside the stream, e.g. ``modelStreamErrorException``)."""
    headers = [
        (":exception-type", exception_type),
        (":content-type", JSON_CONTENT_TYPE),
        (":message-type", "exception"),
    ]
    return encode_message(headers, _json(payload))
