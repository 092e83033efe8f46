"""The function's log sink: framed records on a pipe standing in for Lambda's telemetry log fd, or stdout."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from typing import TYPE_CHECKING

import pytest
from awslambdaric.lambda_runtime_log_utils import _JSON_FRAME_TYPES, _TEXT_FRAME_TYPES

from streaming_runtime import bootstrap, logs
from streaming_runtime.errors import ErrorReport

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


class Pipe:
    """A pipe whose write end the runtime gets as ``_LAMBDA_TELEMETRY_LOG_FD``; the test decodes what arrives."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)

    def frames(self) -> list[tuple[bytes, int, str]]:
        """Every frame written so far: (frame type, timestamp in µs, message)."""
        data = b""
        while True:
            try:
                chunk = os.read(self.read_fd, 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                break
            data += chunk
        frames = []
        while data:
            frame_type, length = data[:4], int.from_bytes(data[4:8], "big")
            timestamp = int.from_bytes(data[8:16], "big")
            message = data[16 : 16 + length]
            assert len(message) == length, "a frame was cut short"
            frames.append((frame_type, timestamp, message.decode("utf-8")))
            data = data[16 + length :]
        return frames

    def close(self) -> None:
        for fd in (self.read_fd, self.write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


@pytest.fixture
def pipe() -> Iterator[Pipe]:
    fake = Pipe()
    yield fake
    fake.close()


def test_the_frame_types_are_awslambdarics() -> None:
    # The constants the runtime writes without importing awslambdaric's log module are that module's own values.
    assert bytes.fromhex("a55a0003") == _TEXT_FRAME_TYPES[logging.NOTSET] == logs.TEXT_FRAME
    assert _TEXT_FRAME_TYPES[logging.ERROR] == logs.TEXT_ERROR_FRAME
    assert _JSON_FRAME_TYPES[logging.ERROR] == logs.JSON_ERROR_FRAME


def test_a_frame_is_type_length_timestamp_message() -> None:
    # GIVEN a message with a multi-byte character WHEN framed THEN big-endian type, UTF-8 length, µs timestamp, text
    framed = logs.frame(logs.TEXT_FRAME, "héllo\nwörld", 1_700_000_000_123_456)
    assert framed[:4] == bytes.fromhex("a55a0003")
    assert framed[4:8] == len("héllo\nwörld".encode()).to_bytes(4, "big")
    assert framed[8:16] == (1_700_000_000_123_456).to_bytes(8, "big")
    assert framed[16:] == "héllo\nwörld".encode()


def test_an_error_report_is_one_frame(pipe: Pipe) -> None:
    # GIVEN the runtime set up with a telemetry log fd
    environ = {logs.TELEMETRY_LOG_FD: str(pipe.write_fd)}
    log = logs.setup(environ)
    report = ErrorReport("KeyError", "'message'", ['  File "app.py", line 3, in handler\n    event["message"]\n'])
    before_us = time.time_ns() // 1000
    # WHEN it logs an error with a multi-line stack
    log.error(report)
    # THEN one frame holds the whole record, lines joined by newlines, typed as a text error, stamped now
    ((frame_type, timestamp, message),) = pipe.frames()
    assert frame_type == logs.TEXT_ERROR_FRAME
    assert before_us <= timestamp <= time.time_ns() // 1000
    assert message.split("\n") == report.log_lines()
    # AND the variable is gone from the environment the handler will see, as awslambdaric removes it
    assert logs.TELEMETRY_LOG_FD not in environ


def test_logging_records_go_through_the_sink_one_frame_each(pipe: Pipe) -> None:
    # GIVEN the runtime set up with a telemetry log fd, an invocation being served
    logs.setup({logs.TELEMETRY_LOG_FD: str(pipe.write_fd)})
    logs.set_request_id("req-7")
    # WHEN the handler logs a traceback through the standard library
    try:
        raise ValueError("two\nlines")
    except ValueError:
        logging.getLogger("app").exception("the turn failed")
    # THEN it is one frame in awslambdaric's text format, traceback included
    ((frame_type, _, message),) = pipe.frames()
    assert frame_type == logs.TEXT_FRAME  # no log level configured: the default frame type, as awslambdaric
    level, stamp, request_id, text = message.split("\t", 3)
    assert (level, request_id) == ("[ERROR]", "req-7")
    assert stamp.endswith("Z")
    assert text.startswith("the turn failed\nTraceback (most recent call last):")
    assert "ValueError: two\nlines" in text


def test_a_configured_log_level_filters_and_types_the_frames(pipe: Pipe) -> None:
    # GIVEN AWS_LAMBDA_LOG_LEVEL=INFO (Lambda's advanced logging controls)
    logs.setup({logs.TELEMETRY_LOG_FD: str(pipe.write_fd), logs.LOG_LEVEL: "INFO"})
    # WHEN records of three levels are logged
    logger = logging.getLogger("app")
    logger.debug("dropped")
    logger.info("kept")
    logger.warning("kept too")
    # THEN the level filters, and each frame's type carries its level
    frames = pipe.frames()
    expected = [_TEXT_FRAME_TYPES[logging.INFO], _TEXT_FRAME_TYPES[logging.WARNING]]
    assert [frame_type for frame_type, _, _ in frames] == expected


def test_json_log_format_writes_json_records(pipe: Pipe) -> None:
    # GIVEN AWS_LAMBDA_LOG_FORMAT=JSON
    log = logs.setup({logs.TELEMETRY_LOG_FD: str(pipe.write_fd), logs.LOG_FORMAT: "JSON"})
    logs.set_request_id("req-8")
    # WHEN a record and an error report are logged
    logging.getLogger("app").warning("careful")
    log.error(ErrorReport("KeyError", "'message'", request_id="req-8"))
    # THEN both are JSON documents in JSON-typed frames
    (warning_type, _, warning), (error_type, _, error) = pipe.frames()
    assert warning_type == _JSON_FRAME_TYPES[logging.WARNING]
    assert json.loads(warning)["message"] == "careful" and json.loads(warning)["requestId"] == "req-8"
    assert error_type == _JSON_FRAME_TYPES[logging.ERROR]
    assert json.loads(error)["errorType"] == "KeyError" and json.loads(error)["level"] == "ERROR"


def test_without_the_fd_records_go_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN no telemetry log fd
    log = logs.setup({})
    # WHEN an error with a multi-line stack is logged
    log.error(ErrorReport("KeyError", "'message'", ['  File "app.py", line 3\n    x\n']))
    # THEN it is one stdout line, its lines joined by \r (awslambdaric's StandardLogSink)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.count("\r") == 3
    assert out.startswith("[ERROR] KeyError: 'message'\rTraceback (most recent call last):")


def test_an_init_error_reaches_the_telemetry_fd(pipe: Pipe, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # GIVEN the runtime started with a telemetry log fd and a handler module that does not exist
    posted: list[ErrorReport] = []

    class Client:
        def __init__(self, address: str) -> None:
            pass

        def post_init_error(self, report: ErrorReport) -> None:
            posted.append(report)

    monkeypatch.setattr(bootstrap, "RuntimeClient", Client)
    env = {
        "AWS_LAMBDA_RUNTIME_API": "127.0.0.1:9001",
        "_HANDLER": "no_such_module.handler",
        "LAMBDA_TASK_ROOT": str(tmp_path),
        logs.TELEMETRY_LOG_FD: str(pipe.write_fd),
    }
    # WHEN it starts THEN the init error is one framed record on the fd
    assert bootstrap.main(env) == 1
    ((frame_type, _, message),) = pipe.frames()
    assert frame_type == logs.TEXT_ERROR_FRAME
    assert message.startswith("[ERROR] Runtime.ImportModuleError: Unable to import module 'no_such_module'")
    assert posted[0].error_type == "Runtime.ImportModuleError"
