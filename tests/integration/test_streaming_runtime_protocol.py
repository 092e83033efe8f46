"""The streaming runtime layer, run as Lambda runs it (exec wrapper + interpreter), against a fake
Runtime API on 127.0.0.1 that records what arrives on the wire: every chunk as it comes, headers,
trailers, buffered responses and error reports."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import queue
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.fixtures.handlers.streaming_handlers import large_body

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

REPO = Path(__file__).resolve().parents[2]
LAYER = REPO / "layers" / "streaming-runtime"
WRAPPER = LAYER / "bin" / "chatstream-streaming"
TASK_ROOT = REPO / "tests" / "fixtures" / "handlers"
FUNCTION_ARN = "arn:aws:lambda:us-east-1:123456789012:function:RelayFunction"
WAIT = 20.0  # seconds to wait for something the runtime must do
BUFFERED_RESPONSE_LIMIT = 6 * 1024 * 1024  # Lambda's quota for a buffered response


class Recorded:
    """One thing the runtime sent: ``kind`` is next, stream-start, chunk, stream-end, response, error, init-error."""

    def __init__(self, kind: str, request_id: str | None, headers: dict[str, str], body: bytes = b"") -> None:
        self.kind = kind
        self.request_id = request_id
        self.headers = headers
        self.body = body
        self.at = time.monotonic()


class FakeRuntimeAPI:
    """A Runtime API: hands out queued invocations on /next and records every request, chunk by chunk."""

    def __init__(self) -> None:
        self.pending: queue.Queue[tuple[str, bytes, dict[str, str]]] = queue.Queue()
        self.recorded: queue.Queue[Recorded] = queue.Queue()
        self.stopping = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), RuntimeAPIHandler)
        self.server.api = self  # RuntimeAPIHandler reaches the fake through its server
        self.server.daemon_threads = True
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def invoke(self, event: object, *, deadline_ms: int | None = None, headers: dict[str, str] | None = None) -> str:
        request_id = str(uuid.uuid4())
        deadline = deadline_ms if deadline_ms is not None else int(time.time() * 1000) + 300_000
        all_headers = {
            "Lambda-Runtime-Aws-Request-Id": request_id,
            "Lambda-Runtime-Deadline-Ms": str(deadline),
            "Lambda-Runtime-Invoked-Function-Arn": FUNCTION_ARN,
            "Content-Type": "application/json",
            **(headers or {}),
        }
        self.pending.put((request_id, json.dumps(event).encode(), all_headers))
        return request_id

    def next_record(self, request_id: str | None = None, kinds: tuple[str, ...] = ()) -> Recorded:
        """The next recorded request (for ``request_id``, of one of ``kinds``), waiting for it to arrive."""
        deadline = time.monotonic() + WAIT
        while True:
            try:
                record = self.recorded.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"the runtime sent no {kinds or 'request'} for {request_id} in {WAIT}s") from None
            if (request_id is None or record.request_id == request_id) and (not kinds or record.kind in kinds):
                return record

    def __enter__(self) -> FakeRuntimeAPI:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()


class RuntimeAPIHandler(BaseHTTPRequestHandler):
    """The fake Runtime API's request handler; ``self.server.api`` is the FakeRuntimeAPI."""

    server: Any

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.server.api.recorded.put(Recorded("next", None, dict(self.headers.items())))
        while not self.server.api.stopping.is_set():
            try:
                request_id, body, headers = self.server.api.pending.get(timeout=0.2)
            except queue.Empty:
                continue
            self.send_response(200)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.close_connection = True

    def do_POST(self) -> None:
        parts = self.path.strip("/").split("/")  # 2018-06-01/runtime/invocation/{id}/response
        headers = dict(self.headers.items())
        if parts[2:] == ["init", "error"]:
            self.server.api.recorded.put(Recorded("init-error", None, headers, self._read_body()))
        elif parts[4] == "error":
            self.server.api.recorded.put(Recorded("error", parts[3], headers, self._read_body()))
        elif headers.get("Transfer-Encoding") == "chunked":
            self._record_stream(parts[3], headers)
        elif int(headers.get("Content-Length", "0")) > BUFFERED_RESPONSE_LIMIT:
            self._refuse_unread(parts[3], headers)
            return
        else:
            self.server.api.recorded.put(Recorded("response", parts[3], headers, self._read_body()))
        self.send_response(202)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def _refuse_unread(self, request_id: str, headers: dict[str, str]) -> None:
        """413 before reading the body, then close the connection, as the local Runtime API refuses one over 6 MB."""
        self.server.api.recorded.put(Recorded("refused", request_id, headers))
        self.send_response(413)
        self.send_header("Content-Length", "2")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(b"{}")
        self.close_connection = True

    def _read_body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length", "0")))

    def _record_stream(self, request_id: str, headers: dict[str, str]) -> None:
        self.server.api.recorded.put(Recorded("stream-start", request_id, headers))
        while True:
            size = int(self.rfile.readline().split(b";")[0], 16)
            if size == 0:
                break
            chunk = self.rfile.read(size)
            assert self.rfile.readline() == b"\r\n"
            self.server.api.recorded.put(Recorded("chunk", request_id, {}, chunk))
        trailers = {}
        while (line := self.rfile.readline().decode("latin-1")) not in ("\r\n", ""):
            name, _, value = line.partition(":")
            trailers[name.strip()] = value.strip()
        self.server.api.recorded.put(Recorded("stream-end", request_id, trailers))


class RuntimeProcess:
    """The layer's exec wrapper started the way Lambda starts it: ``wrapper <interpreter> <args…>``."""

    def __init__(self, api: FakeRuntimeAPI, handler: str, log: Path) -> None:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": str(LAYER),
            "AWS_LAMBDA_RUNTIME_API": api.address,
            "_HANDLER": handler,
            "LAMBDA_TASK_ROOT": str(TASK_ROOT),
            "AWS_LAMBDA_FUNCTION_NAME": "RelayFunction",
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "512",
            "AWS_LAMBDA_LOG_GROUP_NAME": "/aws/lambda/RelayFunction",
            "AWS_LAMBDA_LOG_STREAM_NAME": "2025/01/01/[$LATEST]0123456789abcdef",
        }
        self.log = log
        self._log_file = log.open("wb")
        self.started_at = time.monotonic()
        # The managed runtime's own arguments follow the interpreter; the wrapper ignores them.
        self.process = subprocess.Popen(
            [str(WRAPPER), sys.executable, "/var/runtime/bootstrap.py"],
            env=env,
            cwd=str(TASK_ROOT),
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
        )

    def output(self) -> str:
        self._log_file.flush()
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log_file.close()


@pytest.fixture(scope="module")
def api() -> Iterator[FakeRuntimeAPI]:
    with FakeRuntimeAPI() as fake:
        yield fake


@pytest.fixture(scope="module")
def runtime(api: FakeRuntimeAPI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RuntimeProcess]:
    """One runtime process serves every test in this module, in turn, as one execution environment."""
    process = RuntimeProcess(api, "streaming_handlers.route", tmp_path_factory.mktemp("runtime") / "log")
    first_next = api.next_record(kinds=("next",))
    start_ms = (first_next.at - process.started_at) * 1000
    sys.stderr.write(f"\nstreaming runtime: process start -> first /next: {start_ms:.1f} ms\n")
    yield process
    process.stop()


def url_event(case: str, **extra: object) -> dict[str, object]:
    """A Function URL (payload format 2.0) request event."""
    return {
        "version": "2.0",
        "rawPath": "/chat",
        "rawQueryString": "",
        "headers": {"content-type": "application/json"},
        "requestContext": {"http": {"method": "POST", "path": "/chat", "sourceIp": "127.0.0.1", "userAgent": "t"}},
        "body": json.dumps({"case": case}),
        "isBase64Encoded": False,
        "case": case,
        **extra,
    }


class Stream:
    def __init__(self, start: Recorded, chunks: list[bytes], trailers: dict[str, str]) -> None:
        self.headers = start.headers
        self.chunks = chunks
        self.trailers = trailers

    @property
    def body(self) -> bytes:
        return b"".join(self.chunks)

    def split_prelude(self) -> tuple[dict[str, Any], bytes]:
        prelude, sep, body = self.body.partition(b"\x00" * 8)
        assert sep, "no 8-NUL delimiter after the prelude"
        return json.loads(prelude), body


def read_stream(api: FakeRuntimeAPI, request_id: str) -> Stream:
    start = api.next_record(request_id, ("stream-start", "error", "response"))
    assert start.kind == "stream-start", f"expected a streamed response, got {start.kind}: {start.body!r}"
    chunks = []
    while (record := api.next_record(request_id, ("chunk", "stream-end"))).kind == "chunk":
        chunks.append(record.body)
    return Stream(start, chunks, record.headers)


def test_start_time_process_to_first_next(runtime: RuntimeProcess, api: FakeRuntimeAPI) -> None:
    # GIVEN the runtime process started through the exec wrapper (the fixture measured start -> first /next)
    # WHEN an invocation is served
    request_id = api.invoke({"case": "echo", "n": 1})
    # THEN it was the handler from _HANDLER under LAMBDA_TASK_ROOT that answered
    record = api.next_record(request_id, ("response", "error"))
    assert record.kind == "response", runtime.output()
    assert json.loads(record.body) == {"echo": {"case": "echo", "n": 1}}


def test_streaming_request_headers(runtime: RuntimeProcess, api: FakeRuntimeAPI) -> None:
    # GIVEN a handler that returns a StreamingResponse
    # WHEN it is invoked through a Function URL
    stream = read_stream(api, api.invoke(url_event("http_response")))
    # THEN the runtime posts a chunked, streaming-mode HTTP integration response that declares the error trailers
    assert stream.headers["Lambda-Runtime-Function-Response-Mode"] == "streaming"
    assert stream.headers["Transfer-Encoding"] == "chunked"
    assert stream.headers["Content-Type"] == "application/vnd.awslambda.http-integration-response"
    assert stream.headers["Trailer"] == "Lambda-Runtime-Function-Error-Type, Lambda-Runtime-Function-Error-Body"
    assert stream.trailers == {}


def test_first_chunk_arrives_before_the_handler_produces_the_second(
    runtime: RuntimeProcess, api: FakeRuntimeAPI, tmp_path: Path
) -> None:
    # GIVEN a generator handler that yields, then waits on a gate only this test opens, then yields again
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    request_id = api.invoke(url_event("gated", gate=str(gate)))
    # WHEN the first chunks reach the Runtime API (the prelude, then chunk 1), with the handler still waiting
    api.next_record(request_id, ("stream-start",))
    prelude = api.next_record(request_id, ("chunk",))
    first = api.next_record(request_id, ("chunk",))
    assert first.body == b"chunk-1\n"
    with gate.open("wb") as opened:  # only now may the handler produce chunk 2
        opened.write(b"go")
    # THEN chunk 2 follows in its own chunk, and the stream ends cleanly
    second = api.next_record(request_id, ("chunk", "stream-end"))
    assert second.kind == "chunk"
    assert second.body == b"chunk-2\n"
    assert api.next_record(request_id, ("chunk", "stream-end")).headers == {}
    assert json.loads(prelude.body.rstrip(b"\x00")) == {
        "statusCode": 200,
        "headers": {"Content-Type": "application/octet-stream"},
        "cookies": [],
    }


def test_prelude_carries_status_headers_and_cookies(runtime: RuntimeProcess, api: FakeRuntimeAPI) -> None:
    # GIVEN a StreamingResponse with status 201, headers and two cookies
    # WHEN it is streamed
    prelude, body = read_stream(api, api.invoke(url_event("http_response"))).split_prelude()
    # THEN the prelude carries them, and the body follows the 8 NULs (the empty item skipped)
    assert prelude == {
        "statusCode": 201,
        "headers": {"Content-Type": "text/event-stream; charset=utf-8", "X-Chatstream": "yes"},
        "cookies": ["session=abc; Path=/; HttpOnly", "theme=dark"],
    }
    assert body == b"event: meta\ndata: {}\n\ndata: bytes\n\n"


def test_binary_and_unicode_bodies_arrive_intact(runtime: RuntimeProcess, api: FakeRuntimeAPI) -> None:
    # GIVEN a body of every byte value and a str with non-ASCII characters
    stream = read_stream(api, api.invoke(url_event("binary_and_unicode")))
    # WHEN it is streamed THEN the bytes are exact and the str is UTF-8, each item its own chunk
    _, body = stream.split_prelude()
    assert body == bytes(range(256)) + "héllo ✓ 🚀 中文".encode()
    assert stream.chunks[-2:] == [bytes(range(256)), "héllo ✓ 🚀 中文".encode()]


def test_ten_megabyte_body_arrives_intact(runtime: RuntimeProcess, api: FakeRuntimeAPI) -> None:
    # GIVEN a handler that streams 10 MB in 64 KiB pieces
    stream = read_stream(api, api.invoke(url_event("large")))
    # WHEN it is streamed THEN every byte arrives, in order
    _, body = stream.split_prelude()
    assert len(body) == 10 * 1024 * 1024
    assert hashlib.sha256(body).hexdigest() == hashlib.sha256(large_body()).hexdigest()
    assert stream.trailers == {}


def test_error_before_first_byte_is_an_invocation_error(runtime: RuntimeProcess, api: FakeRuntimeAPI) -> None:
    # GIVEN a generator handler that raises before yielding anything
    request_id = api.invoke(url_event("fail_before_first_byte"))
    # WHEN it is invoked
    record = api.next_record(request_id, ("error", "stream-start", "response"))
    # THEN nothing is streamed: the runtime posts the standard error body to /invocation/{id}/error
    assert record.kind == "error"
    assert record.headers["Lambda-Runtime-Function-Error-Type"] == "ValueError"
    error = json.loads(record.body)
    assert error["errorType"] == "ValueError"
    assert error["errorMessage"] == "no such session: s-404"
    assert error["requestId"] == request_id
    assert any("fail_before_first_byte" in frame for frame in error["stackTrace"])
    # AND X-Ray gets the cause, shaped as awslambdaric's: the exception and the handler's frames
    cause = json.loads(record.headers["Lambda-Runtime-Function-XRay-Error-Cause"])
    (exception,) = cause["exceptions"]
    assert (exception["type"], exception["message"]) == ("ValueError", "no such session: s-404")
    assert "fail_before_first_byte" in [frame["label"] for frame in exception["stack"]]
    assert cause["working_directory"] == str(TASK_ROOT)


def test_error_mid_stream_ends_with_trailers(runtime: RuntimeProcess, api: FakeRuntimeAPI) -> None:
    # GIVEN a handler that yields one chunk and then raises
    request_id = api.invoke(url_event("fail_mid_stream"))
    # WHEN it is invoked
    stream = read_stream(api, request_id)
    # THEN what was produced was delivered, and the stream ends with the error type and base64 JSON body
    _, body = stream.split_prelude()
    assert body == b"partial reply"
    assert stream.trailers["Lambda-Runtime-Function-Error-Type"] == "RuntimeError"
    error = json.loads(base64.b64decode(stream.trailers["Lambda-Runtime-Function-Error-Body"]))
    assert error["errorType"] == "RuntimeError"
    assert error["errorMessage"] == "the token log went away"
    assert error["requestId"] == request_id


def test_loop_survives_an_error_and_serves_the_next_invocation(runtime: RuntimeProcess, api: FakeRuntimeAPI) -> None:
    # GIVEN a handler that raised on the previous invocation
    failed = api.invoke({"case": "plain_raise"})
    assert api.next_record(failed, ("error", "response")).kind == "error"
    # WHEN the next invocation comes
    served = api.invoke({"case": "echo", "after": "error"})
    # THEN the same process serves it
    record = api.next_record(served, ("error", "response"))
    assert record.kind == "response"
    assert json.loads(record.body) == {"echo": {"case": "echo", "after": "error"}}
    assert runtime.process.poll() is None


def test_context_has_deadline_identity_and_trace(runtime: RuntimeProcess, api: FakeRuntimeAPI) -> None:
    # GIVEN an invocation whose deadline is an hour away, with a trace header
    deadline = int(time.time() * 1000) + 3_600_000
    trace = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
    request_id = api.invoke({"case": "context_info"}, deadline_ms=deadline, headers={"Lambda-Runtime-Trace-Id": trace})
    # WHEN the handler reads its context
    info = json.loads(api.next_record(request_id, ("response", "error")).body)
    # THEN the remaining time counts down to that deadline, and the rest comes from headers and environment
    assert 0 < info["remaining_ms"] <= 3_600_000
    assert info["aws_request_id"] == request_id
    assert info["invoked_function_arn"] == FUNCTION_ARN
    assert info["function_name"] == "RelayFunction"
    assert info["memory_limit_in_mb"] == "512"
    assert info["log_group_name"] == "/aws/lambda/RelayFunction"
    assert info["trace_id"] == trace


def test_passed_deadline_leaves_no_time(runtime: RuntimeProcess, api: FakeRuntimeAPI) -> None:
    # GIVEN an invocation whose deadline has already passed
    request_id = api.invoke({"case": "context_info"}, deadline_ms=int(time.time() * 1000) - 1000)
    # WHEN the handler asks THEN it has no time left
    assert json.loads(api.next_record(request_id, ("response", "error")).body)["remaining_ms"] == 0


def test_plain_value_for_a_non_http_event_is_buffered(runtime: RuntimeProcess, api: FakeRuntimeAPI) -> None:
    # GIVEN a handler returning a dict for a non-HTTP event
    request_id = api.invoke({"case": "echo", "text": "héllo"})
    # WHEN it is invoked
    record = api.next_record(request_id, ("response", "stream-start", "error"))
    # THEN it is one buffered JSON response, not a stream
    assert record.kind == "response"
    assert record.headers["Content-Type"] == "application/json"
    assert "Lambda-Runtime-Function-Response-Mode" not in record.headers
    assert json.loads(record.body) == {"echo": {"case": "echo", "text": "héllo"}}


def test_generator_for_a_non_http_event_streams_raw_bytes(runtime: RuntimeProcess, api: FakeRuntimeAPI) -> None:
    # GIVEN a generator handler and an event that is not a Function URL request
    stream = read_stream(api, api.invoke({"case": "raw_stream"}))
    # WHEN it is streamed THEN the body is the raw bytes, with no HTTP prelude
    assert stream.headers["Content-Type"] == "application/octet-stream"
    assert stream.body == b"raw-1 raw-2"


def test_status_dict_for_a_function_url_event_becomes_a_prelude(runtime: RuntimeProcess, api: FakeRuntimeAPI) -> None:
    # GIVEN a handler that returns a Function URL style dict
    prelude, body = read_stream(api, api.invoke(url_event("url_dict"))).split_prelude()
    # WHEN it is streamed THEN status and headers go in the prelude and the body after it
    assert prelude == {"statusCode": 404, "headers": {"Content-Type": "application/json"}, "cookies": []}
    assert body == b'{"error":"not_found"}'


def test_a_buffered_response_refused_unread_is_logged_and_not_sent_again(
    runtime: RuntimeProcess, api: FakeRuntimeAPI
) -> None:
    # GIVEN a handler that returns 7 MB for a non-HTTP event, on the runtime's kept-alive connection
    request_id = api.invoke({"case": "oversized"})
    # WHEN the Runtime API answers the post with 413 before reading its body, and closes the connection
    assert api.next_record(request_id, ("refused", "response", "error")).kind == "refused"
    # THEN the runtime does not post it again: what it does next is ask for the next invocation
    assert api.next_record(kinds=("refused", "response", "next")).kind == "next"
    # AND the 413 is what it logged
    assert f"/invocation/{request_id}/response answered 413" in runtime.output()


def test_a_header_value_with_crlf_is_a_marshal_error_before_the_stream(
    runtime: RuntimeProcess, api: FakeRuntimeAPI
) -> None:
    # GIVEN a handler whose StreamingResponse has a header value holding CR LF and another header line
    request_id = api.invoke(url_event("header_injection"))
    # WHEN it is invoked
    record = api.next_record(request_id, ("error", "stream-start", "response"))
    # THEN nothing is streamed: the runtime posts Runtime.MarshalError to /invocation/{id}/error
    assert record.kind == "error"
    assert record.headers["Lambda-Runtime-Function-Error-Type"] == "Runtime.MarshalError"
    assert "header 'x-a' has '\\r' at 1" in json.loads(record.body)["errorMessage"]


@pytest.mark.parametrize(
    ("handler", "error_type", "message"),
    [
        ("broken_handlers.handler", "RuntimeError", "cannot initialize: CHATSTREAM_TABLE is not set"),
        ("no_such_module.handler", "Runtime.ImportModuleError", "Unable to import module 'no_such_module'"),
        ("streaming_handlers.no_such_function", "Runtime.HandlerNotFound", "Handler 'no_such_function' missing"),
    ],
)
def test_init_error_is_reported_and_the_process_exits(
    tmp_path: Path, handler: str, error_type: str, message: str
) -> None:
    # GIVEN a handler that cannot be loaded
    with FakeRuntimeAPI() as api:
        process = RuntimeProcess(api, handler, tmp_path / "log")
        try:
            # WHEN the runtime starts
            record = api.next_record(kinds=("init-error", "next"))
            # THEN it reports an init error (before asking for any invocation) and exits non-zero
            assert record.kind == "init-error", process.output()
            assert record.headers["Lambda-Runtime-Function-Error-Type"] == error_type
            error = json.loads(record.body)
            assert error["errorType"] == error_type
            assert message in error["errorMessage"]
            assert process.process.wait(timeout=WAIT) == 1
        finally:
            process.stop()
