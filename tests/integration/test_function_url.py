"""The local Function URL in front of the local Runtime API, driven by real HTTP clients (httpx, curl)."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from chatstream_local.iam import iam_identity
from chatstream_local.lambda_.cors import FunctionUrlCors
from chatstream_local.lambda_.function_url import FunctionUrlServer, RecordedError
from chatstream_local.lambda_.service import LocalLambda
from tests.fixtures.local_handlers.specs import buffered, on_layer, streamed, wait_until
from tests.fixtures.local_handlers.streaming import BINARY, UNICODE
from tests.support import require_or_skip

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

pytestmark = pytest.mark.integration

SPECS = [
    streamed("gated", "gated"),
    streamed("prelude", "prelude"),
    streamed("unicode", "unicode_text"),
    streamed("binary", "binary"),
    streamed("big", "big"),
    streamed("fail-before", "fail_before"),
    streamed("fail-mid", "fail_mid"),
    streamed("ignore-disconnect", "ignore_disconnect"),
    streamed("echo-event", "echo_event"),
    streamed("echo-body", "echo_body"),
    streamed("echo-body-reserved-0", "echo_body", reserved_concurrency=0),
    buffered("buffered-http", "http_response"),
    buffered("buffered-list", "plain_list"),
    buffered("buffered-fail", "fail"),
    buffered("buffered-bad-header", "bad_header"),
    buffered("buffered-no-content", "no_content"),
    streamed("no-content", "no_content"),
    on_layer("layer-gated", "gated"),
    on_layer("layer-fail-mid", "fail_mid"),
    on_layer("layer-fail-before", "fail_before"),
]


@pytest.fixture(scope="module")
def local() -> Iterator[LocalLambda]:
    with LocalLambda(SPECS) as running:
        yield running


@pytest.fixture
def url_for(local: LocalLambda) -> Iterator[Callable[..., FunctionUrlServer]]:
    servers: list[FunctionUrlServer] = []

    def make(name: str, **options: Any) -> FunctionUrlServer:
        server = FunctionUrlServer(local, name, **options).start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=30) as client:
        yield client


@pytest.mark.parametrize("function", ["gated", "layer-gated"])
def test_the_first_chunk_reaches_the_client_before_the_handler_produces_the_second(
    function: str, url_for: Callable[..., FunctionUrlServer], http: httpx.Client, tmp_path: Path
) -> None:
    # GIVEN a handler that yields "first", then waits for a signal file, then yields "second"
    server = url_for(function)
    signal = tmp_path / "signal"

    # WHEN a client reads the response as it streams
    with http.stream("GET", f"{server.url}/stream", params={"signal": str(signal)}) as response:
        received = b""
        chunks = response.iter_raw()
        while b"first\n" not in received:
            received += next(chunks)

        # THEN "first" is here while the handler still waits
        assert b"second" not in received
        assert response.headers["content-type"] == "text/event-stream"
        assert response.headers["transfer-encoding"] == "chunked"

        # AND after the signal the rest arrives
        signal.touch()
        received += b"".join(chunks)
    assert received == b"first\nsecond\n"


def test_curl_sees_the_first_line_before_the_handler_goes_on(
    url_for: Callable[..., FunctionUrlServer], tmp_path: Path
) -> None:
    # GIVEN curl -N reading a gated stream
    require_or_skip(shutil.which("curl") is not None, "curl is not installed")
    server = url_for("gated")
    signal = tmp_path / "signal"
    with subprocess.Popen(
        ["curl", "-sN", f"{server.url}/?signal={signal}"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    ) as curl:
        assert curl.stdout is not None
        # WHEN the first line is printed
        first = curl.stdout.readline()
        # THEN the handler has not been let go yet; once it is, the second line follows and curl exits
        assert first == b"first\n"
        signal.touch()
        assert curl.stdout.read() == b"second\n"
        assert curl.wait(timeout=20) == 0


def test_status_headers_and_cookies_come_from_the_prelude(
    url_for: Callable[..., FunctionUrlServer], http: httpx.Client
) -> None:
    # WHEN a streaming handler answers 201 with headers and two cookies
    response = http.get(f"{url_for('prelude').url}/")

    # THEN the client sees them as an ordinary HTTP response
    assert response.status_code == 201
    assert response.headers["x-custom"] == "yes"
    assert response.headers["cache-control"] == "no-cache"
    assert response.headers.get_list("set-cookie") == ["session=abc; Path=/; HttpOnly", "theme=dark"]
    assert response.text == "hello from the prelude"


def test_unicode_and_binary_bodies_arrive_byte_for_byte(
    url_for: Callable[..., FunctionUrlServer], http: httpx.Client
) -> None:
    # WHEN handlers stream UTF-8 text split inside a character, and binary data with NUL bytes
    text = http.get(f"{url_for('unicode').url}/")
    data = http.get(f"{url_for('binary').url}/")

    # THEN both arrive unaltered
    assert text.text == UNICODE
    assert data.content == BINARY + b"\x00" * 9
    assert data.headers["content-type"] == "application/octet-stream"


def test_a_10_mb_body_streams_through(url_for: Callable[..., FunctionUrlServer], http: httpx.Client) -> None:
    # WHEN a handler streams 10 MB in 64 KiB pieces
    response = http.get(f"{url_for('big').url}/")

    # THEN all of it arrives, in order
    piece = 64 * 1024
    expected = b"".join(bytes([i % 256]) * piece for i in range(160))
    assert len(response.content) == 10 * 1024 * 1024
    assert response.content == expected


@pytest.mark.parametrize("function", ["fail-before", "layer-fail-before"])
def test_an_error_before_the_first_byte_is_a_502(
    function: str, url_for: Callable[..., FunctionUrlServer], http: httpx.Client
) -> None:
    # WHEN the handler fails before producing anything
    told: list[RecordedError] = []
    server = url_for(function, on_error=told.append)
    response = http.get(f"{server.url}/")

    # THEN the client gets the Function URL's 502, and the error is recorded and told, with the function's own
    # error in one line
    assert response.status_code == 502
    assert response.json() == {"Message": "Internal Server Error"}
    assert [(e.phase, e.error.document()["errorType"]) for e in server.errors] == [("before_response", "KeyError")]
    assert told == list(server.errors)
    line = told[0].describe(function)
    assert line.startswith(f"{function} request {told[0].request_id}: 502 before the first byte: KeyError: ")
    assert "\n" not in line


@pytest.mark.parametrize("function", ["fail-mid", "layer-fail-mid"])
def test_an_error_mid_stream_ends_the_clients_stream(
    function: str, url_for: Callable[..., FunctionUrlServer], http: httpx.Client
) -> None:
    # WHEN the handler fails after its first bytes
    server = url_for(function)
    response = http.get(f"{server.url}/")

    # THEN the client got the bytes sent so far and its stream ended; the trailers' error is recorded
    assert response.status_code == 200
    assert response.text == "partial "
    assert len(server.errors) == 1
    recorded = server.errors[0]
    assert recorded.phase == "mid_stream"
    assert recorded.error.error_type == "RuntimeError"
    assert recorded.error.document()["errorMessage"] == "the stream broke"
    assert recorded.describe(function).endswith(": the stream ended early: RuntimeError: the stream broke")


def test_a_client_that_disconnects_does_not_stop_the_invocation(
    url_for: Callable[..., FunctionUrlServer], http: httpx.Client, tmp_path: Path
) -> None:
    # GIVEN a streaming response the client reads the start of
    server = url_for("ignore-disconnect")
    signal, marker = tmp_path / "signal", tmp_path / "marker"
    params = {"signal": str(signal), "marker": str(marker)}
    with http.stream("GET", f"{server.url}/", params=params) as response:
        assert next(response.iter_raw()).startswith(b"first")
    # WHEN the client has gone (the stream is closed) and the handler goes on writing
    signal.touch()

    # THEN the handler still runs to its end
    wait_until(marker.exists, what="the handler to write its marker")
    assert marker.read_text() == "completed"


def test_the_event_is_payload_format_2_0(url_for: Callable[..., FunctionUrlServer], http: httpx.Client) -> None:
    # GIVEN a handler that returns its event
    server = url_for("echo-event")

    # WHEN a client POSTs JSON with a query string, repeated headers and cookies
    response = http.post(
        f"{server.url}/chat/path?a=1&b=two&a=3",
        content=json.dumps({"message": "héllo"}).encode(),
        headers=[
            ("Content-Type", "application/json"),
            ("X-Multi", "one"),
            ("X-Multi", "two"),
            ("Cookie", "c1=v1; c2=v2"),
            ("User-Agent", "tests/1.0"),
        ],
    )

    # THEN the event has the shape Lambda gives a Function URL handler
    event = response.json()
    assert event["version"] == "2.0"
    assert event["routeKey"] == "$default"
    assert event["rawPath"] == "/chat/path"
    assert event["rawQueryString"] == "a=1&b=two&a=3"
    assert event["queryStringParameters"] == {"a": "1,3", "b": "two"}
    assert event["cookies"] == ["c1=v1", "c2=v2"]
    assert event["headers"]["x-multi"] == "one,two"
    assert event["headers"]["content-type"] == "application/json"
    assert "cookie" not in event["headers"]
    assert all(name == name.lower() for name in event["headers"])
    assert event["body"] == json.dumps({"message": "héllo"})
    assert event["isBase64Encoded"] is False
    context = event["requestContext"]
    assert context["http"] == {
        "method": "POST",
        "path": "/chat/path",
        "protocol": "HTTP/1.1",
        "sourceIp": "127.0.0.1",
        "userAgent": "tests/1.0",
    }
    assert context["routeKey"] == "$default"
    assert context["stage"] == "$default"
    assert context["apiId"] == server.url_id
    assert context["accountId"] == "anonymous"
    assert isinstance(context["timeEpoch"], int)
    assert context["requestId"]
    assert "authorizer" not in context


def test_a_binary_request_body_is_base64_encoded(url_for: Callable[..., FunctionUrlServer], http: httpx.Client) -> None:
    # WHEN a client sends binary content
    server = url_for("echo-event")
    payload = bytes(range(256))
    event = http.post(f"{server.url}/", content=payload, headers={"content-type": "application/octet-stream"}).json()

    # THEN the handler gets it base64-encoded
    assert event["isBase64Encoded"] is True
    assert base64.b64decode(event["body"]) == payload

    # AND so is a form post (what `curl -d` sends) and a body without a content type, as Lambda sends them
    for headers in ({"content-type": "application/x-www-form-urlencoded"}, {}):
        event = http.post(f"{server.url}/", content=b'{"message":"hi"}', headers=headers).json()
        assert event["isBase64Encoded"] is True and base64.b64decode(event["body"]) == b'{"message":"hi"}'
    # AND text/* and JSON bodies come as text
    for content_type in ("text/plain; charset=utf-8", "application/json"):
        event = http.post(f"{server.url}/", content="héllo".encode(), headers={"content-type": content_type}).json()
        assert (event["isBase64Encoded"], event["body"]) == (False, "héllo")

    # AND the bytes make the round trip through a handler that returns them
    echoed = http.post(f"{url_for('echo-body').url}/", content=payload, headers={"content-type": "image/png"})
    assert echoed.content == payload


def test_the_caller_identity_is_in_the_authorizer(
    url_for: Callable[..., FunctionUrlServer], http: httpx.Client
) -> None:
    # GIVEN a Function URL whose callers are told apart by a header (two IAM principals)
    alice = iam_identity("arn:aws:iam::123456789012:user/alice")
    bob = iam_identity("arn:aws:iam::123456789012:user/bob")
    server = url_for(
        "echo-event",
        identity=alice,
        identity_resolver=lambda headers: bob if headers.get("x-caller") == "bob" else None,
    )

    # WHEN each calls
    as_alice = http.get(f"{server.url}/").json()["requestContext"]
    as_bob = http.get(f"{server.url}/", headers={"x-caller": "bob"}).json()["requestContext"]

    # THEN each request carries its caller's identity
    assert as_alice["authorizer"]["iam"]["userArn"] == "arn:aws:iam::123456789012:user/alice"
    assert as_bob["authorizer"]["iam"]["userArn"] == "arn:aws:iam::123456789012:user/bob"
    assert as_alice["authorizer"]["iam"]["userId"] != as_bob["authorizer"]["iam"]["userId"]
    assert as_alice["accountId"] == "123456789012"


def test_buffered_mode_returns_the_handlers_http_response(
    url_for: Callable[..., FunctionUrlServer], http: httpx.Client
) -> None:
    # WHEN a buffered (awslambdaric) function returns a Function URL response object
    response = http.get(f"{url_for('buffered-http', invoke_mode='BUFFERED').url}/some/path")

    # THEN its status, headers, cookies and body are the HTTP response
    assert response.status_code == 203
    assert response.headers["x-handler"] == "buffered"
    assert response.headers.get_list("set-cookie") == ["flavour=oat; Path=/", "size=large"]
    assert response.text == "buffered: /some/path"


def test_buffered_mode_returns_other_results_as_json(
    url_for: Callable[..., FunctionUrlServer], http: httpx.Client
) -> None:
    response = http.get(f"{url_for('buffered-list', invoke_mode='BUFFERED').url}/")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == [1, 2, 3]


def test_buffered_mode_function_error_is_a_502(url_for: Callable[..., FunctionUrlServer], http: httpx.Client) -> None:
    server = url_for("buffered-fail", invoke_mode="BUFFERED")
    response = http.get(f"{server.url}/")
    assert response.status_code == 502
    assert response.json() == {"Message": "Internal Server Error"}
    assert server.errors[0].error.error_type == "ValueError"


def test_a_response_stream_url_reads_a_buffered_reply_in_the_buffered_format(
    url_for: Callable[..., FunctionUrlServer], http: httpx.Client
) -> None:
    # WHEN a RESPONSE_STREAM URL fronts a function whose runtime answers without streaming
    response = http.get(f"{url_for('buffered-http').url}/x")

    # THEN the response object is still honoured
    assert response.status_code == 203
    assert response.text == "buffered: /x"


def test_a_request_body_over_6_mb_is_refused(url_for: Callable[..., FunctionUrlServer], http: httpx.Client) -> None:
    response = http.post(f"{url_for('echo-body').url}/", content=b"x" * (6 * 1024 * 1024 + 1))
    assert response.status_code == 413


def test_head_gets_the_status_and_headers_without_a_body(
    url_for: Callable[..., FunctionUrlServer], http: httpx.Client
) -> None:
    response = http.head(f"{url_for('prelude').url}/")
    assert response.status_code == 201
    assert response.headers["x-custom"] == "yes"
    assert response.content == b""


@pytest.mark.parametrize("method", ["TRACE", "QUERY", "PROPFIND"])
def test_every_method_reaches_the_function(
    url_for: Callable[..., FunctionUrlServer], http: httpx.Client, method: str
) -> None:
    # GIVEN a handler that returns its event WHEN a method http.server has no handler for is used
    response = http.request(method, f"{url_for('echo-event').url}/x")
    # THEN the function answers it (the relay answers 405 to a method it does not serve), not the front end's 501
    assert response.status_code == 200, response.text[:200]
    assert response.json()["requestContext"]["http"]["method"] == method


def test_with_cors_the_url_answers_preflights_itself_and_marks_responses_for_allowed_origins(
    url_for: Callable[..., FunctionUrlServer], http: httpx.Client
) -> None:
    # GIVEN a URL whose CORS allows one origin (as template.yaml's FunctionUrlConfig.Cors spells it)
    cors = FunctionUrlCors.from_config(
        {
            "AllowOrigins": "https://app.example",  # a CommaDelimitedList parameter, resolved
            "AllowMethods": ["GET", "POST"],
            "AllowHeaders": ["content-type", "authorization"],
            "ExposeHeaders": ["x-chatstream-session-id"],
            "MaxAge": 300,
        }
    )
    server = url_for("echo-event", cors=cors)
    preflight = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization"}
    # WHEN the allowed origin's browser sends a preflight
    answer = http.options(f"{server.url}/v1/responses", headers={"Origin": "https://app.example", **preflight})
    # THEN the URL answers it, without the function (which would echo its event)
    assert answer.status_code == 200 and answer.content == b""
    assert answer.headers["access-control-allow-origin"] == "https://app.example"
    assert answer.headers["access-control-allow-methods"] == "GET,POST"
    assert answer.headers["access-control-allow-headers"] == "content-type,authorization"
    assert answer.headers["access-control-max-age"] == "300"
    # AND the actual request's response names the origin and the headers its script may read
    response = http.post(f"{server.url}/v1/responses", headers={"Origin": "https://app.example"}, content=b"{}")
    assert response.json()["requestContext"]["http"]["method"] == "POST"
    assert response.headers["access-control-allow-origin"] == "https://app.example"
    assert response.headers["access-control-expose-headers"] == "x-chatstream-session-id"
    # AND another origin gets no CORS headers, so its browser keeps the response from its page
    other = {"Origin": "https://elsewhere.example"}
    assert "access-control-allow-origin" not in http.options(server.url, headers={**other, **preflight}).headers
    assert "access-control-allow-origin" not in http.post(server.url, headers=other, content=b"{}").headers
    # AND an OPTIONS that is not a preflight reaches the function
    assert http.options(server.url).json()["requestContext"]["http"]["method"] == "OPTIONS"


def test_a_function_at_its_reserved_concurrency_is_a_429_and_does_not_run(
    url_for: Callable[..., FunctionUrlServer], http: httpx.Client, local: LocalLambda
) -> None:
    # WHEN a URL's function has a reserved concurrency of 0 (Lambda throttles every invocation)
    response = http.post(url_for("echo-body-reserved-0").url, content=b"hello")

    # THEN the URL answers 429, as Lambda does, and the function never ran
    assert (response.status_code, response.json()) == (429, {"Message": "Rate Exceeded."})
    assert local.stats()["echo-body-reserved-0"].environments_started == 0


def test_a_header_http_cannot_carry_is_a_502_recorded_never_sent(
    url_for: Callable[..., FunctionUrlServer], http: httpx.Client
) -> None:
    # GIVEN a function whose response has a header value with a line break in it
    server = url_for("buffered-bad-header", invoke_mode="BUFFERED")
    # WHEN a client calls it
    response = http.get(f"{server.url}/")
    # THEN it gets a 502, no injected header, and the error is recorded as the function's
    assert response.status_code == 502 and "injected" not in response.headers
    (recorded,) = server.errors
    assert recorded.error.error_type == "Function.InvalidResponseHeader" and recorded.phase == "before_response"


@pytest.mark.parametrize(("function", "mode"), [("no-content", "RESPONSE_STREAM"), ("buffered-no-content", "BUFFERED")])
def test_a_204_is_sent_without_a_body_and_the_connection_stays_usable(
    url_for: Callable[..., FunctionUrlServer], http: httpx.Client, function: str, mode: str
) -> None:
    # GIVEN a function that answers 204 with a body
    server = url_for(function, invoke_mode=mode)
    # WHEN a client calls it twice on one kept-alive connection
    first, second = http.get(f"{server.url}/"), http.get(f"{server.url}/")
    # THEN each is a 204 with no body and no chunked framing (a body would be read as the next response)
    for response in (first, second):
        assert response.status_code == 204 and response.content == b""
        assert "transfer-encoding" not in response.headers and response.headers["x-handler"]
