"""Lambda's telemetry log pipe, the service's end: the records a runtime writes to ``_LAMBDA_TELEMETRY_LOG_FD``.

Lambda gives a managed runtime's process the write end of a pipe and makes each record written there one CloudWatch
event, newlines and all (so a traceback stays one event). A record is framed as awslambdaric's
``FramedTelemetryLogSink`` writes it, big-endian:

    frame type (4 bytes, 0xa55a00NN) | message length (4 bytes) | timestamp, µs since the epoch (8 bytes) | message

:func:`read_records` reads them back until every writer has closed the pipe.
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


def read_records(stream: IO[bytes]) -> Iterator[TelemetryRecord]:
    """The records on ``stream``, each as soon as it is whole; ends at the end of the stream.

    Raises :class:`MalformedFrame` at bytes that are not a frame (or a frame cut short by the end of the stream).
    """
    while True:
        header = _read_exactly(stream, _HEADER_SIZE)
        if not header:
            return
        if len(header) < _HEADER_SIZE:
            raise MalformedFrame(f"the stream ended inside a frame header ({len(header)} of {_HEADER_SIZE} bytes)")
        frame_type = int.from_bytes(header[:4], "big")
        length = int.from_bytes(header[4:8], "big")
        if frame_type >> 16 != FRAME_MAGIC or length > _MAX_RECORD:
            raise MalformedFrame(f"not a telemetry log frame: {header!r}")
        message = _read_exactly(stream, length)
        if len(message) < length:
            raise MalformedFrame(f"the stream ended inside a record ({len(message)} of {length} bytes)")
        yield TelemetryRecord(frame_type, int.from_bytes(header[8:16], "big"), message.decode("utf-8", "replace"))


def _read_exactly(stream: IO[bytes], size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            break
        data += chunk
    return data
