"""One invocation: what the handler returns, and how it reaches the Runtime API."""

from __future__ import annotations

import base64
import json
import os
import time
from typing import TYPE_CHECKING, Any

import pytest

from streaming_runtime import StreamingResponse
from streaming_runtime.context import Invocation
from streaming_runtime.dispatch import handle_invocation
from streaming_runtime.streaming import ChunkedBody

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    from streaming_runtime.errors import ErrorReport

URL_EVENT = {"version": "2.0", "rawPath": "/chat", "requestContext": {"http": {"method": "POST", "path": "/chat"}}}


class RecordingClient:
    """Stands in for RuntimeClient: records what the runtime would send, chunk by chunk."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.chunks: list[bytes] = []
        self.trailers: Mapping[str, str] | None = None
        self.fail_at: int | None = None  # a write fails once this many chunks were delivered

    def post_response(self, request_id: str, body: bytes, content_type: str) -> None:
        self.calls.append(("response", (request_id, body, content_type)))

    def post_error(self, request_id: str, error: ErrorReport) -> None:
        self.calls.append(("error", (request_id, error.to_dict())))

    def begin_stream(self, request_id: str, content_type: str) -> ChunkedBody:
        self.calls.append(("stream", (request_id, content_type)))
        return ChunkedBody(self._receive)

    def end_stream(self, body: ChunkedBody, trailers: Mapping[str, str] | None = None) -> None:
        if body.failed:
            self.calls.append(("dropped", None))
            return
        if not body.closed:
            body.close(trailers)
        self.calls.append(("end", None))

    def _receive(self, framed: bytes) -> None:
        if self.fail_at is not None and len(self.chunks) >= self.fail_at:
            raise BrokenPipeError(32, "Broken pipe")
        size, _, rest = framed.partition(b"\r\n")
        if int(size, 16):
            self.chunks.append(rest[:-2])
        else:
            self.trailers = dict(
                line.split(": ", 1)
                for line in rest.decode().split("\r\n")
                if line  # type: ignore[misc]
            )

    @property
    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.calls]


def invocation(event: object, **headers: str) -> Invocation:
    return Invocation(
        "req-1",
        int(time.time() * 1000) + 60_000,
        json.dumps(event).encode(),
        content_type="application/json",
        **headers,
    )


def run(handler: Callable[[Any, Any], object], event: object) -> RecordingClient:
    client = RecordingClient()
    handle_invocation(client, handler, invocation(event))  # type: ignore[arg-type]
    return client


def test_streaming_response_goes_out_with_its_prelude() -> None:
    # GIVEN a handler returning a StreamingResponse
    def handler(event: Any, context: Any) -> StreamingResponse:
        return StreamingResponse(418, {"X-A": "1"}, ["c=1"], iter(["tea", b"", b"pot"]))

    # WHEN invoked
    client = run(handler, {"any": "event"})
    # THEN an HTTP integration stream: prelude chunk, then each non-empty item as its own chunk
    assert client.calls[0] == ("stream", ("req-1", "application/vnd.awslambda.http-integration-response"))
    assert json.loads(client.chunks[0][:-8]) == {"statusCode": 418, "headers": {"X-A": "1"}, "cookies": ["c=1"]}
    assert client.chunks[0].endswith(b"\x00" * 8)
    assert client.chunks[1:] == [b"tea", b"pot"]
    assert client.trailers == {}
    assert client.kinds[-1] == "end"


def test_generator_for_function_url_is_an_octet_stream() -> None:
    # GIVEN a generator handler and a Function URL event
    def handler(event: Any, context: Any) -> Iterator[str]:
        yield "a"
        yield "é"

    client = run(handler, URL_EVENT)
    # WHEN invoked THEN a 200 application/octet-stream HTTP stream
    assert json.loads(client.chunks[0][:-8])["headers"] == {"Content-Type": "application/octet-stream"}
    assert client.chunks[1:] == [b"a", "é".encode()]


def test_generator_for_other_events_streams_raw_bytes() -> None:
    # GIVEN a generator handler and a non-HTTP event
    def handler(event: Any, context: Any) -> Iterator[bytes]:
        yield b"\x00\x01"

    client = run(handler, {"Records": []})
    # WHEN invoked THEN raw bytes, no prelude
    assert client.calls[0] == ("stream", ("req-1", "application/octet-stream"))
    assert client.chunks == [b"\x00\x01"]


def test_status_dict_for_function_url_is_streamed_with_a_prelude() -> None:
    # GIVEN a handler returning a Function URL style dict, base64 body
    def handler(event: Any, context: Any) -> dict[str, object]:
        return {"statusCode": 200, "body": base64.b64encode(b"\xff\xfe").decode(), "isBase64Encoded": True}

    client = run(handler, URL_EVENT)
    # WHEN invoked THEN the prelude carries the status and the body is the decoded bytes
    assert json.loads(client.chunks[0][:-8])["statusCode"] == 200
    assert client.chunks[1:] == [b"\xff\xfe"]


@pytest.mark.parametrize("event", [{"Records": []}, URL_EVENT])
def test_plain_value_is_a_buffered_response(event: object) -> None:
    # GIVEN a handler returning a dict without statusCode
    client = run(lambda event, context: {"answer": 42}, event)
    # WHEN invoked THEN one buffered JSON response
    assert client.calls == [("response", ("req-1", b'{"answer": 42}', "application/json"))]


def test_error_before_the_first_byte_is_posted_as_an_invocation_error() -> None:
    # GIVEN a StreamingResponse whose body fails before its first item
    closed = []

    def body() -> Iterator[str]:
        try:
            raise LookupError("turn 3 not found")
            yield "never"
        finally:
            closed.append(True)

    client = run(lambda event, context: StreamingResponse(body=body()), URL_EVENT)
    # WHEN invoked THEN nothing was streamed: the error went to /error with the standard body
    assert client.kinds == ["error"]
    request_id, error = client.calls[0][1]
    assert request_id == "req-1"
    assert (error["errorType"], error["errorMessage"], error["requestId"]) == (
        "LookupError",
        "turn 3 not found",
        "req-1",
    )
    assert closed == [True]


def test_handler_raising_directly_is_an_invocation_error() -> None:
    # GIVEN a handler that raises WHEN invoked THEN /error with its type
    def handler(event: Any, context: Any) -> None:
        raise PermissionError("denied")

    client = run(handler, {})
    assert client.kinds == ["error"]
    assert client.calls[0][1][1]["errorType"] == "PermissionError"


def test_error_mid_stream_ends_with_trailers_and_closes_the_body() -> None:
    # GIVEN a generator that yields, then raises
    finished = []

    def handler(event: Any, context: Any) -> Iterator[str]:
        try:
            yield "partial"
            raise ConnectionError("token log gone")
        finally:
            finished.append(True)

    client = run(handler, URL_EVENT)
    # WHEN invoked THEN the partial body was delivered, then error trailers, and the stream was ended
    assert client.chunks[1:] == [b"partial"]
    assert client.trailers is not None
    assert client.trailers["Lambda-Runtime-Function-Error-Type"] == "ConnectionError"
    body = json.loads(base64.b64decode(client.trailers["Lambda-Runtime-Function-Error-Body"]))
    assert body["errorMessage"] == "token log gone"
    assert client.kinds == ["stream", "end"]
    assert finished == [True]


def test_bad_body_item_mid_stream_is_reported_in_trailers() -> None:
    # GIVEN a body that yields something that is neither str nor bytes
    client = run(lambda event, context: StreamingResponse(body=["ok", 7]), URL_EVENT)
    # WHEN invoked THEN the stream ends with a TypeError in the trailers
    assert client.chunks[1:] == [b"ok"]
    assert client.trailers is not None and client.trailers["Lambda-Runtime-Function-Error-Type"] == "TypeError"


def test_unserializable_value_is_a_marshal_error() -> None:
    # GIVEN a handler returning something JSON cannot hold WHEN invoked THEN Runtime.MarshalError
    client = run(lambda event, context: {"when": object()}, {})
    assert client.calls[0][1][1]["errorType"] == "Runtime.MarshalError"


@pytest.mark.parametrize(
    "result",
    [
        StreamingResponse(headers={"x-a": "b\r\nInjected: yes"}, body=["hi"]),
        StreamingResponse(cookies=["c=1\r\nX-Evil: 1"], body=["hi"]),
        {"statusCode": 200, "headers": {"X-N": 1}, "body": "hi"},
    ],
    ids=["header-with-crlf", "cookie-with-crlf", "url-dict-with-a-number"],
)
def test_a_header_no_header_line_can_carry_is_a_marshal_error_before_the_stream(result: object) -> None:
    # GIVEN a handler whose response has a header or cookie that cannot be sent as it is
    # WHEN invoked for a Function URL
    client = run(lambda event, context: result, URL_EVENT)
    # THEN nothing is streamed: Runtime.MarshalError goes to /invocation/{id}/error
    assert client.kinds == ["error"]
    assert client.calls[0][1][1]["errorType"] == "Runtime.MarshalError"


def test_trace_id_is_propagated(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN an invocation with a trace header (and a stale trace id from a previous one)
    monkeypatch.setenv("_X_AMZN_TRACE_ID", "Root=stale")
    seen = []
    client = RecordingClient()
    # WHEN invoked
    handle_invocation(
        client,  # type: ignore[arg-type]
        lambda event, context: seen.append(os.environ.get("_X_AMZN_TRACE_ID")),
        invocation({}, trace_id="Root=1-abc;Sampled=1"),
    )
    handle_invocation(
        client,  # type: ignore[arg-type]
        lambda event, context: seen.append(os.environ.get("_X_AMZN_TRACE_ID")),
        invocation({}),
    )
    # THEN the handler sees it as _X_AMZN_TRACE_ID, and an invocation without one sees none
    assert seen == ["Root=1-abc;Sampled=1", None]


def test_a_body_whose_close_raises_still_ends_the_stream_with_that_error() -> None:
    # GIVEN a body whose iteration ends normally but whose close() raises
    class Body:
        def __init__(self) -> None:
            self.items = iter(["a", "b"])

        def __iter__(self) -> Body:
            return self

        def __next__(self) -> str:
            return next(self.items)

        def close(self) -> None:
            raise RuntimeError("the cursor would not close")

    # WHEN it is streamed
    client = run(lambda event, context: StreamingResponse(body=Body()), URL_EVENT)
    # THEN every item was delivered and the stream still ended, with the close's error in its trailers
    assert client.chunks[1:] == [b"a", b"b"]
    assert client.kinds == ["stream", "end"]
    assert client.trailers is not None
    assert client.trailers["Lambda-Runtime-Function-Error-Type"] == "RuntimeError"
    body = json.loads(base64.b64decode(client.trailers["Lambda-Runtime-Function-Error-Body"]))
    assert body["errorMessage"] == "the cursor would not close"


def test_a_failed_write_drops_the_connection_and_closes_the_body() -> None:
    # GIVEN a generator that keeps yielding, and a connection that breaks after the prelude and one chunk
    closed = []

    def handler(event: Any, context: Any) -> Iterator[str]:
        try:
            while True:
                yield "more"
        finally:
            closed.append(True)

    client = RecordingClient()
    client.fail_at = 2
    # WHEN it is streamed THEN the write's error reaches the caller (the loop), the generator was closed, and the
    # connection was dropped rather than ended (nothing more is written to it)
    with pytest.raises(BrokenPipeError):
        handle_invocation(client, handler, invocation(URL_EVENT))  # type: ignore[arg-type]
    assert closed == [True]
    assert client.kinds == ["stream", "dropped"]
    assert client.trailers is None


def test_a_system_exit_mid_stream_ends_the_stream_then_goes_on() -> None:
    # GIVEN a generator that yields, then raises SystemExit (not an Exception)
    def handler(event: Any, context: Any) -> Iterator[str]:
        yield "bye"
        raise SystemExit(3)

    client = RecordingClient()
    # WHEN it is streamed THEN the stream still ended, naming SystemExit, and the exit goes on to the loop
    with pytest.raises(SystemExit):
        handle_invocation(client, handler, invocation(URL_EVENT))  # type: ignore[arg-type]
    assert client.chunks[1:] == [b"bye"]
    assert client.kinds == ["stream", "end"]
    assert client.trailers is not None and client.trailers["Lambda-Runtime-Function-Error-Type"] == "SystemExit"


def test_a_generator_raising_in_close_after_a_failed_write_is_logged_and_the_write_error_goes_on(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # GIVEN a generator that raises from its finally, and a connection that breaks after the prelude and one chunk
    def handler(event: Any, context: Any) -> Iterator[str]:
        try:
            while True:
                yield "more"
        finally:
            raise RuntimeError("cleanup failed")

    client = RecordingClient()
    client.fail_at = 2
    # WHEN it is streamed THEN the connection's error is what reaches the loop (it serves the next invocation),
    # the connection was dropped, and the generator's own failure was logged, not lost
    with pytest.raises(BrokenPipeError):
        handle_invocation(client, handler, invocation(URL_EVENT))  # type: ignore[arg-type]
    assert client.kinds == ["stream", "dropped"]
    assert "[ERROR] RuntimeError: cleanup failed" in capsys.readouterr().out
