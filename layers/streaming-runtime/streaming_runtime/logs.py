"""Where the function's logs go: Lambda's telemetry log pipe when it provides one, else stdout.

Lambda hands a managed runtime's process (and so an exec wrapper and what it execs) a pipe, its file descriptor
number in ``_LAMBDA_TELEMETRY_LOG_FD``. Each record written there is one CloudWatch event, whatever newlines it
holds, so a multi-line traceback stays one event. The framing is awslambdaric's ``FramedTelemetryLogSink``
(``bootstrap.py``), big-endian:

    frame type (4 bytes) | message length (4 bytes) | timestamp, µs since the epoch (8 bytes) | message (UTF-8)

The frame type says the record's format and level (``0xa55a0003`` a text record of no particular level; the
tables of ``awslambdaric.lambda_runtime_log_utils`` for the others). As awslambdaric does, the variable is removed
from the environment once read (the handler's subprocesses must not write to a descriptor they do not own), and
without it records go to stdout, the lines of an error record joined by ``\\r``.

:func:`setup` also gives the root logger the managed runtime's handler: ``logging`` records reach the same sink,
formatted as awslambdaric formats them (``AWS_LAMBDA_LOG_FORMAT`` text or JSON, ``AWS_LAMBDA_LOG_LEVEL``).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable, MutableMapping, Sequence

    from streaming_runtime.errors import ErrorReport

TELEMETRY_LOG_FD = "_LAMBDA_TELEMETRY_LOG_FD"
LOG_FORMAT = "AWS_LAMBDA_LOG_FORMAT"
LOG_LEVEL = "AWS_LAMBDA_LOG_LEVEL"

# The frame types the runtime writes itself (awslambdaric's ``_TEXT_FRAME_TYPES``/``_JSON_FRAME_TYPES``, whose module
# is imported only when records need their per-level types: it pulls in ``traceback``, which the runtime's start
# does not otherwise pay for).
TEXT_FRAME = (0xA55A0003).to_bytes(4, "big")  # a text record of no particular level
TEXT_ERROR_FRAME = (0xA55A0017).to_bytes(4, "big")
JSON_ERROR_FRAME = (0xA55A0016).to_bytes(4, "big")
#: awslambdaric's text format for ``logging`` records (its ``_setup_logging``), times in UTC.
TEXT_RECORD_FORMAT = "[%(levelname)s]\t%(asctime)s.%(msecs)03dZ\t%(aws_request_id)s\t%(message)s\n"
TEXT_DATE_FORMAT = "%Y-%m-%dT%H:%M:%S"

_request_id = ""  # the invocation being served, for the records' aws_request_id


def frame(frame_type: bytes, message: str, timestamp_us: int) -> bytes:
    """One record of the telemetry log pipe."""
    data = message.encode("utf-8")
    return frame_type + len(data).to_bytes(4, "big") + timestamp_us.to_bytes(8, "big") + data


class LogSink(Protocol):
    def log(self, message: str, frame_type: bytes = TEXT_FRAME) -> None:
        """Write one record."""

    def log_error(self, lines: Sequence[str], frame_type: bytes = TEXT_ERROR_FRAME) -> None:
        """Write an error record made of several lines, as one record."""


class FramedLogSink:
    """Records as frames on Lambda's telemetry log pipe (``fd``)."""

    def __init__(self, fd: int, clock_us: Callable[[], int] = lambda: time.time_ns() // 1000) -> None:
        self.fd = fd
        self._clock_us = clock_us

    def log(self, message: str, frame_type: bytes = TEXT_FRAME) -> None:
        data = memoryview(frame(frame_type, message, self._clock_us()))
        while data:  # a write to a pipe may be partial; a frame must go out whole
            data = data[os.write(self.fd, data) :]

    def log_error(self, lines: Sequence[str], frame_type: bytes = TEXT_ERROR_FRAME) -> None:
        self.log("\n".join(lines), frame_type)


class StandardLogSink:
    """Records on stdout, where Lambda makes each line an event: an error record's lines are joined by ``\\r``."""

    def log(self, message: str, frame_type: bytes = TEXT_FRAME) -> None:
        sys.stdout.write(message)
        sys.stdout.flush()

    def log_error(self, lines: Sequence[str], frame_type: bytes = TEXT_ERROR_FRAME) -> None:
        self.log("\r".join(lines) + "\n")


class RuntimeLog:
    """The runtime's own records (error reports, warnings) on the function's log sink."""

    def __init__(self, sink: LogSink, json_format: bool = False) -> None:
        self.sink = sink
        self.json_format = json_format

    @classmethod
    def standard(cls) -> RuntimeLog:
        return cls(StandardLogSink())

    def error(self, report: ErrorReport) -> None:
        """An error report, as one record (awslambdaric's ``log_error``)."""
        if self.json_format:
            import json

            record = {"timestamp": _utc_now(), "level": "ERROR", **report.to_dict()}
            self.sink.log_error([json.dumps(record, ensure_ascii=False)], JSON_ERROR_FRAME)
        else:
            self.sink.log_error(report.log_lines(), TEXT_ERROR_FRAME)

    def warning(self, message: str) -> None:
        """One of the runtime's own messages (a lost connection, a refused response)."""
        logging.getLogger("streaming_runtime").warning("%s", message)


def setup(environ: MutableMapping[str, str]) -> RuntimeLog:
    """The function's log sink from the environment, the root logger writing to it; call once, at start."""
    fd_text = environ.pop(TELEMETRY_LOG_FD, None)
    if fd_text is not None:
        os.environ.pop(TELEMETRY_LOG_FD, None)  # as awslambdaric: the handler's subprocesses must not inherit it
    sink: LogSink = StandardLogSink()
    if fd_text is not None and fd_text.strip().isdigit():
        sink = FramedLogSink(int(fd_text))
    json_format = environ.get(LOG_FORMAT, "").strip().upper() == "JSON"
    level = _log_level(environ.get(LOG_LEVEL))
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, LambdaLogHandler)]:
        root.removeHandler(handler)  # set up once per process, however often main() runs
    root.addHandler(LambdaLogHandler(sink, json_format=json_format, typed_frames=json_format or bool(level)))
    if level:
        root.setLevel(level)
    return RuntimeLog(sink, json_format)


def set_request_id(request_id: str) -> None:
    """The invocation now being served (its records carry its id)."""
    global _request_id
    _request_id = request_id


class LambdaLogHandler(logging.Handler):
    """The root logger's handler: records formatted as awslambdaric formats them, one record per frame.

    With a JSON format or a log level configured, each frame's type carries the record's level (Lambda filters on
    it), as awslambdaric's ``LambdaLoggerHandlerWithFrameType``; otherwise the default text frame type.
    """

    def __init__(self, sink: LogSink, *, json_format: bool, typed_frames: bool) -> None:
        super().__init__()
        self.sink = sink
        self.typed_frames = typed_frames
        if json_format:
            from awslambdaric.lambda_runtime_log_utils import JsonFormatter

            self.setFormatter(JsonFormatter())
        else:
            formatter = logging.Formatter(TEXT_RECORD_FORMAT, TEXT_DATE_FORMAT)
            formatter.converter = time.gmtime
            self.setFormatter(formatter)
        self.addFilter(_add_request_id)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = self.format(record)  # the JSON formatter also sets the record's frame type
            frame_type = getattr(record, "_frame_type", None)
            if not isinstance(frame_type, bytes):
                frame_type = _text_frame_type(record.levelno) if self.typed_frames else TEXT_FRAME
            self.sink.log(message, frame_type)
        except Exception:
            self.handleError(record)


def _add_request_id(record: logging.LogRecord) -> bool:
    record.aws_request_id = _request_id
    return True


def _text_frame_type(levelno: int) -> bytes:
    from awslambdaric.lambda_runtime_log_utils import _TEXT_FRAME_TYPES

    frame_type: bytes = _TEXT_FRAME_TYPES.get(min(50, max(0, levelno)) // 10 * 10, TEXT_FRAME)
    return frame_type


def _log_level(value: str | None) -> str:
    """``AWS_LAMBDA_LOG_LEVEL`` as a ``logging`` level name (``TRACE`` is ``DEBUG``), or ``""``."""
    name = {"TRACE": "DEBUG"}.get((value or "").strip().upper(), (value or "").strip().upper())
    return name if name in logging.getLevelNamesMapping() else ""


def _utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
