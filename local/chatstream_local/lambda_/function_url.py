"""A local Lambda Function URL: HTTP on 127.0.0.1 in front of one function of a :class:`LocalLambda`.

Each request becomes a payload format 2.0 event (``rawPath``, ``rawQueryString``, lower-cased ``headers``
with repeated headers joined by ``,``, ``cookies``, ``queryStringParameters``, ``requestContext`` with
``http`` and, when a caller identity is configured, ``authorizer.iam``; ``body`` as text for ``text/*`` and JSON,
else base64 with ``isBase64Encoded``, as Lambda sends a form post), and the function's response goes back to the client:

- ``RESPONSE_STREAM``: the runtime's HTTP integration response (a JSON prelude with ``statusCode``,
  ``headers``, ``cookies``, 8 NUL bytes, then the body) is relayed with chunked transfer as bytes arrive
  (TCP_NODELAY, one write per chunk). A response the runtime did not stream is read in the buffered format.
- ``BUFFERED``: the function returns ``{statusCode, headers, cookies, body, isBase64Encoded}``; anything
  else is returned as JSON with status 200.

A function error before the first byte is a 502 ``{"Message":"Internal Server Error"}``; after it, the
chunked response just ends. Either way the error is kept in :attr:`FunctionUrlServer.errors` and given to
``on_error`` (the local stack logs each, with the function's own error type and message). A request body over
6 MB is refused with 413.

A client that disconnects is never seen by the function, as on Lambda ("streamed responses are not interrupted or
stopped when the invoking client connection is broken. Customers will be billed for the full function duration",
https://docs.aws.amazon.com/lambda/latest/dg/configuration-response-streaming.html): the runtime's writes never
wait on the client (the invocation's chunks are queued, not pushed through to its socket), and once the client is
gone the rest of the stream is read and dropped, so the invocation runs to its end.

``AuthType: AWS_IAM``: given an ``authenticate`` callable (the stack gives :class:`chatstream_local.iam.SigV4Verifier`,
which checks the request's SigV4 signature against the local principals), a request it does not authenticate is
answered ``403 {"Message":"Forbidden. …"}`` (Lambda's words) without invoking the function, and the caller it
names is the event's ``authorizer.iam``. With ``cors`` (the template's ``FunctionUrlConfig.Cors``, :mod:`.cors`)
the URL answers preflights itself and adds the CORS headers to responses. With ``same_origin_only`` it answers no
page of another origin that ``cors`` does not allow (none, without ``cors``): a request whose ``Origin`` is neither
the URL's own (``http://`` and its ``Host``) nor an allowed one gets ``403`` before the function runs, preflights
included (a browser sends a form post or a ``text/plain`` fetch without
asking first, so withholding CORS headers alone would let any page drive the function). Like every local endpoint
(:mod:`chatstream_local.loopback`), it answers only a ``Host`` that is its loopback address. A ``lambda_api`` route
(:mod:`chatstream_local.edge`) answers the Lambda API's paths on the same port.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import json
import re
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import parse_qsl, urlsplit

from chatstream_local.account import ACCOUNT_ID, current_region
from chatstream_local.lambda_.cors import FunctionUrlCors
from chatstream_local.lambda_.exceptions import FunctionThrottled, LocalLambdaError
from chatstream_local.lambda_.invocation import FunctionError
from chatstream_local.loopback import LoopbackServer, QuietHandler, ServingThread

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    from chatstream_local.edge import LambdaApiRoute
    from chatstream_local.lambda_.invocation import StreamHandle
    from chatstream_local.lambda_.service import LocalLambda

    IdentityResolver = Callable[[Mapping[str, str]], Mapping[str, Any] | None]
    # (method, target, headers, body) → the caller's ``authorizer.iam``, or None: refused with 403
    Authenticator = Callable[[str, str, list[tuple[str, str]], bytes], Mapping[str, Any] | None]

InvokeMode = Literal["RESPONSE_STREAM", "BUFFERED"]
HTTP_INTEGRATION_CONTENT_TYPE = "application/vnd.awslambda.http-integration-response"
PRELUDE_DELIMITER = b"\x00" * 8
REQUEST_BODY_LIMIT = 6 * 1024 * 1024  # bytes: a Function URL's maximum request payload
_PRELUDE_LIMIT = 1024 * 1024
_UNSENDABLE = re.compile(r"[\r\n\x00]")  # would end a header line early, or cut it
_NO_BODY = frozenset({204, 304})  # statuses whose response has no body (RFC 9110), so no chunked framing either
_HOP_BY_HOP = frozenset({"connection", "content-length", "transfer-encoding", "keep-alive", "trailer", "upgrade"})
INTERNAL_SERVER_ERROR = b'{"Message":"Internal Server Error"}'
# A request AWS_IAM refuses: Lambda's body, as deployed Function URLs answer it (awsdocs/aws-lambda-developer-guide#494)
FORBIDDEN = (
    b'{"Message":"Forbidden. For troubleshooting Function URL authorization issues, see: '
    b'https://docs.aws.amazon.com/lambda/latest/dg/urls-auth.html"}'
)
# A request from another origin's page when the URL serves its own origin only (same_origin_only): the local stack's
CROSS_ORIGIN = (
    "Forbidden. The local Function URL answers no page of another origin (Origin: {origin}); to allow one, start "
    "the stack with --parameter-overrides CorsAllowOrigins=<origin>"
)
# A throttled invocation: 429, as Lambda answers it (the body's wording is the Invoke API's message; not checked
# against a Function URL on AWS).
RATE_EXCEEDED = b'{"Message":"Rate Exceeded."}'
_ERROR_MESSAGE_CHARS = 300  # of a function's error message in a log line


@dataclass(frozen=True)
class RecordedError:
    """A function error the Function URL saw: before any byte reached the client, or mid-stream."""

    request_id: str
    error: FunctionError
    phase: Literal["before_response", "mid_stream"]

    def describe(self, function_name: str) -> str:
        """One log line: what the client got, and the function's own error (type and message)."""
        document = self.error.document()
        error_type = str(document.get("errorType") or self.error.error_type)
        message = " ".join(str(document.get("errorMessage", "")).split())[:_ERROR_MESSAGE_CHARS]
        outcome = "502 before the first byte" if self.phase == "before_response" else "the stream ended early"
        return f"{function_name} request {self.request_id}: {outcome}: {error_type}: {message}"


class FunctionUrlServer:
    """The Function URL of one function, on ``http://127.0.0.1:<port>`` (port 0: a free one), or on ``listener``, a
    listening socket bound before the server was built.

    ``identity`` is the caller identity every request gets (``authorizer.iam``); ``identity_resolver(headers)``
    may pick one per request (its ``None`` falls back to ``identity``; both ``None``: no authorizer, as with
    ``AuthType: NONE``). ``authenticate`` makes it an ``AWS_IAM`` URL, ``cors`` gives it CORS and
    ``same_origin_only`` refuses other origins' pages (see the module docstring); ``lambda_api``
    serves the Lambda API's paths on the same port; ``on_error(recorded)`` is told of every function error it
    answers.
    """

    def __init__(
        self,
        local: LocalLambda,
        function_name: str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        listener: socket.socket | None = None,
        invoke_mode: InvokeMode = "RESPONSE_STREAM",
        identity: Mapping[str, Any] | None = None,
        identity_resolver: IdentityResolver | None = None,
        url_id: str | None = None,
        authenticate: Authenticator | None = None,
        cors: FunctionUrlCors | None = None,
        same_origin_only: bool = False,
        lambda_api: LambdaApiRoute | None = None,
        on_error: Callable[[RecordedError], None] | None = None,
    ) -> None:
        local.spec(function_name)  # fails early for an unknown function
        self.local = local
        self.function_name = function_name
        self.invoke_mode = invoke_mode
        self.identity = identity
        self.identity_resolver = identity_resolver
        self.authenticate = authenticate
        self.cors = cors
        self.same_origin_only = same_origin_only
        self.lambda_api = lambda_api
        self.url_id = url_id or uuid.uuid4().hex
        self.on_error = on_error
        self.errors: collections.deque[RecordedError] = collections.deque(maxlen=1000)
        self._server = LoopbackServer((host, port), _UrlHandler, self, listener)
        self._serving = ServingThread(self._server, f"function-url-{self.function_name}")

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self._server.server_address[0]!s}:{self.port}"

    def start(self) -> FunctionUrlServer:
        self._serving.start()
        return self

    def stop(self) -> None:
        self._serving.stop()

    def __enter__(self) -> FunctionUrlServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def record(self, request_id: str, error: FunctionError, phase: Literal["before_response", "mid_stream"]) -> None:
        recorded = RecordedError(request_id, error, phase)
        self.errors.append(recorded)
        if self.on_error is not None:
            self.on_error(recorded)

    # -- the event ------------------------------------------------------------------------------------
    def build_event(
        self,
        method: str,
        target: str,
        headers: list[tuple[str, str]],
        body: bytes,
        source_ip: str,
        identity: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The payload format 2.0 event of one request (``identity``: the caller ``authenticate`` found)."""
        split = urlsplit(target)
        joined: dict[str, str] = {}
        for name, value in headers:
            key = name.lower()
            joined[key] = f"{joined[key]},{value}" if key in joined else value
        cookie_header = joined.pop("cookie", None)
        now = time.time()
        request_id = str(uuid.uuid4())
        domain = joined.get("host", f"{self.url_id}.lambda-url.{current_region()}.on.aws")
        if identity is None and self.identity_resolver is not None:
            identity = self.identity_resolver(joined)
        if identity is None:
            identity = self.identity
        context: dict[str, Any] = {
            "accountId": str(identity.get("accountId", ACCOUNT_ID)) if identity else "anonymous",
            "apiId": self.url_id,
            "domainName": domain,
            "domainPrefix": domain.split(".", 1)[0],
            "http": {
                "method": method,
                "path": split.path or "/",
                "protocol": "HTTP/1.1",
                "sourceIp": source_ip,
                "userAgent": joined.get("user-agent", ""),
            },
            "requestId": request_id,
            "routeKey": "$default",
            "stage": "$default",
            "time": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now)),
            "timeEpoch": int(now * 1000),
        }
        if identity is not None:
            context["authorizer"] = {"iam": dict(identity)}
        event: dict[str, Any] = {
            "version": "2.0",
            "routeKey": "$default",
            "rawPath": split.path or "/",
            "rawQueryString": split.query,
            "headers": joined,
        }
        if cookie_header:
            event["cookies"] = [c.strip() for c in cookie_header.split(";") if c.strip()]
        if split.query:
            params: dict[str, str] = {}
            for key, value in parse_qsl(split.query, keep_blank_values=True):
                params[key] = f"{params[key]},{value}" if key in params else value
            event["queryStringParameters"] = params
        event["requestContext"] = context
        if body:
            text = _as_text(body, joined.get("content-type", ""))
            event["body"] = text if text is not None else base64.b64encode(body).decode()
            event["isBase64Encoded"] = text is None
        else:
            event["isBase64Encoded"] = False
        return event

    def drain_in_background(self, handle: StreamHandle, chunks: Iterator[bytes]) -> None:
        """Read and drop the rest of an invocation whose client left: it runs to its end, unaware (as on Lambda)."""

        def drain() -> None:
            for _ in chunks:
                pass
            if handle.error is not None:
                self.record(handle.request_id, handle.error, "mid_stream")

        thread = threading.Thread(target=drain, name=f"drain-{handle.request_id}", daemon=True)
        thread.start()


def _as_text(body: bytes, content_type: str) -> str | None:
    """The body as text when its content type is ``text/*`` or JSON and it is valid UTF-8; else ``None`` (base64).

    Lambda base64-encodes every other body, ``curl -d``'s ``application/x-www-form-urlencoded`` and a request without
    a content type included: "base64-encoded unless the Content-Type is application/json or text/*" (AWS's own
    Function URL launch material); LeanerCloud/CUDly#1483 met it with a form post on a deployed URL."""
    media = content_type.split(";", 1)[0].strip().lower()
    if not (media.startswith("text/") or media == "application/json"):
        return None
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return None


class _ClientGone(Exception):
    pass


class _UrlHandler(QuietHandler):
    server: LoopbackServer[FunctionUrlServer]
    serves_browsers = True  # CORS and same_origin_only judge a request's Origin
    _bodyless = False  # the response being written has no body (HEAD, 204, 304)

    def setup(self) -> None:
        super().setup()
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def __getattr__(self, name: str) -> Callable[[], None]:
        """``do_<METHOD>`` for every method: the function answers the ones it does not serve (the relay: 405 with
        ``Allow``), where http.server alone would answer 501 to a method it has no ``do_`` for (TRACE, QUERY, …)."""
        if name.startswith("do_"):
            return self._serve
        raise AttributeError(name)

    # -- request --------------------------------------------------------------------------------------
    def _read_body(self) -> bytes | None:
        """The request body, or ``None`` when it is over the limit (a 413 has been sent)."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts: list[bytes] = []
            total = 0
            while True:
                size = int(self.rfile.readline(1024).split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(1024).strip():
                        pass
                    break
                total += size
                if total > REQUEST_BODY_LIMIT:
                    self._too_large()
                    return None
                parts.append(self.rfile.read(size))
                self.rfile.read(2)
            return b"".join(parts)
        length = int(self.headers.get("Content-Length") or 0)
        if length > REQUEST_BODY_LIMIT:
            self.discard_body(length)  # read it, so the client sees the 413 rather than a reset
            self._too_large()
            return None
        return self.rfile.read(length) if length else b""

    def _too_large(self) -> None:
        self.close_connection = True
        self._send_whole(413, {"content-type": "application/json"}, [], b'{"Message":"Request Entity Too Large"}')

    # -- response -------------------------------------------------------------------------------------
    def _send_head(self, status: int, headers: Mapping[str, str], cookies: list[str]) -> None:
        """Status line, the function's headers (less hop-by-hop ones) and its cookies; the caller ends them."""
        self.send_response(status)
        cors = self.server.owner.cors
        if cors is not None:  # Lambda's CORS headers win over the function's
            added = cors.response_headers(self.headers.get("Origin"))
            headers = {
                **{name: value for name, value in headers.items() if name.lower() not in {a.lower() for a in added}},
                **added,
            }
        for name, value in headers.items():
            if name.lower() not in _HOP_BY_HOP:
                self.send_header(name, str(value))
        for cookie in cookies:
            self.send_header("Set-Cookie", cookie)

    def _send_whole(self, status: int, headers: Mapping[str, str], cookies: list[str], body: bytes) -> None:
        self._send_head(status, headers, cookies)
        if status in _NO_BODY:
            self.end_headers()
            return
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _serve(self) -> None:
        front = self.server.owner
        body = self._read_body()
        if body is None:
            return
        if front.lambda_api is not None and front.lambda_api.owns(urlsplit(self.path).path):
            front.lambda_api.forward(self, body)
            return
        origin = self.headers.get("Origin")
        if (
            front.same_origin_only
            and origin is not None
            and origin.lower() != f"http://{self.headers['Host']}".lower()
            and (front.cors is None or not front.cors.allows(origin))
        ):
            message = json.dumps({"Message": CROSS_ORIGIN.format(origin=origin)}).encode()
            self._send_whole(403, {"content-type": "application/json"}, [], message)
            return
        if front.cors is not None and FunctionUrlCors.is_preflight(
            self.command, {name.lower(): value for name, value in self.headers.items()}
        ):
            self.send_response(200)
            for name, value in front.cors.preflight_headers(self.headers.get("Origin")).items():
                self.send_header(name, value)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        headers = list(self.headers.items())
        caller = None
        if front.authenticate is not None:
            caller = front.authenticate(self.command, self.path, headers, body)
            if caller is None:
                self._send_whole(403, {"content-type": "application/json"}, [], FORBIDDEN)
                return
        event = front.build_event(self.command, self.path, headers, body, self.client_address[0], caller)
        try:
            handle = front.local.invoke_stream(
                front.function_name, json.dumps(event).encode(), streamed=front.invoke_mode == "RESPONSE_STREAM"
            )
        except FunctionThrottled:  # the function at its reserved concurrency
            self._send_whole(429, {"content-type": "application/json"}, [], RATE_EXCEEDED)
            return
        except LocalLambdaError:
            self._send_whole(503, {"content-type": "application/json"}, [], b'{"Message":"Service Unavailable"}')
            return
        start = handle.response_start()
        if front.invoke_mode == "RESPONSE_STREAM" and start is not None and start.streaming:
            self._relay_stream(handle, start.content_type)
        else:
            self._relay_buffered(handle)

    def _relay_buffered(self, handle: StreamHandle) -> None:
        result = handle.result()
        if result.function_error is not None and handle.error is not None:
            self.server.owner.record(handle.request_id, handle.error, "before_response")
            self._send_whole(502, {"content-type": "application/json"}, [], INTERNAL_SERVER_ERROR)
            return
        try:
            status, headers, cookies, body = _buffered_response(result.payload)
        except _InvalidHeader as err:
            self._bad_response(handle, err)
            return
        self._send_whole(status, headers, cookies, body)

    def _bad_response(self, handle: StreamHandle, err: _InvalidHeader) -> None:
        """A response the function returned that HTTP cannot carry: 502, recorded as the function's error."""
        error = FunctionError.synthetic("Function.InvalidResponseHeader", str(err))
        self.server.owner.record(handle.request_id, error, "before_response")
        self._send_whole(502, {"content-type": "application/json"}, [], INTERNAL_SERVER_ERROR)

    def _relay_stream(self, handle: StreamHandle, content_type: str) -> None:
        front = self.server.owner
        chunks = iter(handle)
        status, headers = 200, {"content-type": content_type}
        cookies: list[str] = []
        pending = b""
        if content_type.split(";", 1)[0].strip() == HTTP_INTEGRATION_CONTENT_TYPE:
            prelude, pending = _read_prelude(chunks)
            if prelude is None:  # the stream ended before the prelude was complete
                if handle.error is not None:
                    front.record(handle.request_id, handle.error, "before_response")
                    self._send_whole(502, {"content-type": "application/json"}, [], INTERNAL_SERVER_ERROR)
                else:
                    self._send_whole(200, {"content-type": "application/octet-stream"}, [], pending)
                return
            try:
                status, headers, cookies = _prelude_fields(prelude)
            except _InvalidHeader as err:
                self._bad_response(handle, err)
                front.drain_in_background(handle, chunks)
                return
        try:
            self._write_head(status, headers, cookies)
            if pending:
                self._write_chunk(pending)
            for chunk in chunks:
                self._write_chunk(chunk)
            if handle.error is not None:
                front.record(handle.request_id, handle.error, "mid_stream")
            self._write_end()
        except _ClientGone:
            self.close_connection = True
            front.drain_in_background(handle, chunks)

    def _write_head(self, status: int, headers: Mapping[str, str], cookies: list[str]) -> None:
        self._bodyless = self.command == "HEAD" or status in _NO_BODY
        try:
            self._send_head(status, headers, cookies)
            if not self._bodyless:
                self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
        except OSError as err:
            raise _ClientGone from err

    def _write_chunk(self, data: bytes) -> None:
        if not data or self._bodyless:
            return
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        except OSError as err:
            raise _ClientGone from err

    def _write_end(self) -> None:
        if self._bodyless:
            return
        try:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError as err:
            raise _ClientGone from err


def _read_prelude(chunks: Iterator[bytes]) -> tuple[dict[str, Any] | None, bytes]:
    """Read up to the 8 NUL bytes: the prelude (``None`` if the stream ended first) and the body's start."""
    buffer = b""
    for chunk in chunks:
        buffer += chunk
        index = buffer.find(PRELUDE_DELIMITER)
        if index >= 0:
            try:
                prelude = json.loads(buffer[:index] or b"{}")
            except ValueError:
                prelude = {}
            return (prelude if isinstance(prelude, dict) else {}), buffer[index + len(PRELUDE_DELIMITER) :]
        if len(buffer) > _PRELUDE_LIMIT:
            return {}, buffer  # no prelude after all: all of it is body
    return None, buffer


class _InvalidHeader(ValueError):
    """A header or cookie the function returned that no HTTP response can carry."""


def _prelude_fields(prelude: Mapping[str, Any]) -> tuple[int, dict[str, str], list[str]]:
    try:
        status = int(prelude.get("statusCode", 200))
    except (TypeError, ValueError):
        status = 500
    raw_headers = prelude.get("headers") or {}
    headers = {str(k): str(v) for k, v in raw_headers.items()} if isinstance(raw_headers, dict) else {}
    raw_cookies = prelude.get("cookies") or []
    cookies = [str(c) for c in raw_cookies] if isinstance(raw_cookies, list) else []
    for text in (*headers, *headers.values(), *cookies):
        if _UNSENDABLE.search(text) or not text.isascii() and not _latin_1(text):
            raise _InvalidHeader(f"the response's header or cookie {text[:60]!r} cannot be sent over HTTP")
    return status, headers, cookies


def _latin_1(text: str) -> bool:
    try:
        text.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True


def _buffered_response(payload: bytes) -> tuple[int, dict[str, str], list[str], bytes]:
    """Interpret a buffered function result the way a Function URL does."""
    try:
        result = json.loads(payload) if payload else None
    except ValueError:
        return 200, {"content-type": "application/json"}, [], payload
    if not isinstance(result, dict) or "statusCode" not in result:
        return 200, {"content-type": "application/json"}, [], payload
    status, headers, cookies = _prelude_fields(result)
    body = result.get("body")
    if body is None:
        data = b""
    elif result.get("isBase64Encoded"):
        data = base64.b64decode(str(body))
    else:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    headers.setdefault("content-type", "application/json")
    return status, headers, cookies, data
