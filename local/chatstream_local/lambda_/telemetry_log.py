"""Lambda's telemetry log pipe, the service's end: the records a runtime writes to ``_LAMBDA_TELEMETRY_LOG_FD``.

Lambda gives a managed runtime's process the write end of a pipe and makes each record written there one CloudWatch
event, newlines and all (so a traceback stays one event). A record is framed as awslambdaric's
``FramedTelemetryLogSink`` writes it, big-endian:

    frame type (4 bytes, 0xa55a00NN) | message length (4 bytes) | timestamp, µs since the epoch (8 bytes) | message

:func:`read_records` reads them back until every writer has closed the pipe; :func:`split_records` takes them from
what has been read so far (an execution environment's pump, which must have every record of an invocation in before
it writes the invocation's ``END`` line).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

TELEMETRY_LOG_FD = "_LAMBDA_TELEMETRY_LOG_FD"
FRAME_MAGIC = 0xA55A  # the high half of every frame type
_HEADER_SIZE = 16
_MAX_RECORD = 256 * 1024 * 1024  # a length beyond this is not a frame: the stream is not framed after all


class MalformedFrame(ValueError):
    """Bytes on the pipe that are not a telemetry log frame."""


@dataclass(frozen=True)
class TelemetryRecord:
    """One record: its frame type (format and level), when it was written, and its text."""

    frame_type: int
    timestamp_us: int
    message: str


def split_records(data: bytes) -> tuple[list[TelemetryRecord], bytes, MalformedFrame | None]:
    """The whole records at the start of ``data``; the bytes after them (the start of a record not yet whole); and
    the error at the first bytes that are not a frame, if any (nothing after them is read)."""
    records: list[TelemetryRecord] = []
    offset = 0
    while len(data) - offset >= _HEADER_SIZE:
        header = data[offset : offset + _HEADER_SIZE]
        frame_type = int.from_bytes(header[:4], "big")
        length = int.from_bytes(header[4:8], "big")
        if frame_type >> 16 != FRAME_MAGIC or length > _MAX_RECORD:
            return records, b"", MalformedFrame(f"not a telemetry log frame: {header!r}")
        end = offset + _HEADER_SIZE + length
        if end > len(data):
            break
        message = data[offset + _HEADER_SIZE : end].decode("utf-8", "replace")
        records.append(TelemetryRecord(frame_type, int.from_bytes(header[8:16], "big"), message))
        offset = end
    return records, data[offset:], None


def cut_short(rest: bytes) -> MalformedFrame:
    """The error for ``rest``, what was left of the stream when it ended: a frame's header or record cut short."""
    if len(rest) < _HEADER_SIZE:
        return MalformedFrame(f"the stream ended inside a frame header ({len(rest)} of {_HEADER_SIZE} bytes)")
    length = int.from_bytes(rest[4:8], "big")
    return MalformedFrame(f"the stream ended inside a record ({len(rest) - _HEADER_SIZE} of {length} bytes)")


def read_records(stream: IO[bytes]) -> Iterator[TelemetryRecord]:
    """The records on ``stream``, each as soon as it is whole; ends at the end of the stream.

    Raises :class:`MalformedFrame` at bytes that are not a frame (or a frame cut short by the end of the stream).
    """
    rest = b""
    read = getattr(stream, "read1", stream.read)  # a buffered pipe's read1 returns what has arrived, not 64 KB
    while chunk := read(65536):
        records, rest, error = split_records(rest + chunk)
        yield from records
        if error is not None:
            raise error
    if rest:
        raise cut_short(rest)
