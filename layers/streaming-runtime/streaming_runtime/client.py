"""A client of the Lambda Runtime API (``$AWS_LAMBDA_RUNTIME_API``), HTTP/1.1 over one kept-alive socket.

Ours rather than awslambdaric's: its client is a C extension over libcurl that can post a buffered
result but cannot stream a body or send trailers. ``http.client`` cannot send trailers either and
costs ~25 ms of imports (ssl, email); the Runtime API speaks plain, small HTTP/1.1, so a socket will do.
"""

from __future__ import annotations

import select
import socket
from typing import TYPE_CHECKING

from streaming_runtime.context import Invocation
from streaming_runtime.errors import ERROR_TYPE_HEADER, XRAY_CAUSE_HEADER, XRAY_CAUSE_LIMIT
from streaming_runtime.streaming import DECLARED_TRAILERS, ChunkedBody

if TYPE_CHECKING:
    from collections.abc import Mapping

    from streaming_runtime.errors import ErrorReport

API_VERSION = "2018-06-01"
USER_AGENT = "chatstream-streaming-runtime/1"
_MAX_LINE = 64 * 1024
HEADER_FIELDS_TOO_LARGE = 431


class RuntimeAPIError(Exception):
    """The Runtime API answered with an unexpected status (e.g. 413 for a too-large response)."""

    def __init__(self, endpoint: str, status: int, body: bytes) -> None:
        self.endpoint = endpoint
        self.status = status
        self.body = body
        super().__init__(f"Runtime API {endpoint} answered {status}: {body[:500]!r}")


class RuntimeAPIResponse:
    __slots__ = ("status", "headers", "body")

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers  # names lower-cased
        self.body = body


class RuntimeClient:
    """``next_invocation``, buffered ``post_response``, ``begin_stream``/``end_stream``, errors.

    A request that fails on the connection (``OSError``) leaves the client without one; the next request opens a
    new connection, so one broken connection costs at most the invocation it was carrying. A request is made again
    at once only when the Runtime API cannot have acted on it (see ``_request``): a POST is never sent twice.
    """

    def __init__(self, address: str) -> None:
        host, sep, port = address.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"AWS_LAMBDA_RUNTIME_API must be host:port, not {address!r}")
        self.address = address
        self._host = host.strip("[]")
        self._port = int(port)
        self._sock: socket.socket | None = None
        self._buffer = b""
        self._streaming_endpoint: str | None = None

    # -- the Runtime API -------------------------------------------------------------------------

    def next_invocation(self) -> Invocation:
        """Block until Lambda has an invocation for this environment."""
        endpoint = f"/{API_VERSION}/runtime/invocation/next"
        response = self._request("GET", endpoint)
        _expect(endpoint, response, 200)
        return Invocation.from_headers(response.headers, response.body)

    def post_response(self, request_id: str, body: bytes, content_type: str) -> None:
        """A buffered (non-streamed) result."""
        endpoint = f"/{API_VERSION}/runtime/invocation/{request_id}/response"
        _expect(endpoint, self._request("POST", endpoint, body, {"Content-Type": content_type}), 202)

    def post_error(self, request_id: str, error: ErrorReport) -> None:
        """The invocation failed before any response byte was sent.

        With the error's X-Ray cause in ``Lambda-Runtime-Function-XRay-Error-Cause`` when it is under awslambdaric's
        1 MiB limit. A Runtime API that refuses the header (431, or it drops the connection over it) gets the
        report again without it: the error itself must not be lost to its trace.
        """
        endpoint = f"/{API_VERSION}/runtime/invocation/{request_id}/error"
        cause = error.xray_cause()
        if len(cause) < XRAY_CAUSE_LIMIT:  # ASCII: characters are bytes
            try:
                self._post_error(endpoint, error, {XRAY_CAUSE_HEADER: cause})
                return
            except RuntimeAPIError as err:
                if err.status != HEADER_FIELDS_TOO_LARGE:
                    raise
            except ConnectionError:
                pass
        self._post_error(endpoint, error)

    def post_init_error(self, error: ErrorReport) -> None:
        """The function could not be initialized (handler import failed); the process should exit next."""
        self._post_error(f"/{API_VERSION}/runtime/init/error", error)

    def begin_stream(self, request_id: str, content_type: str) -> ChunkedBody:
        """Send the headers of a streamed response; write the body to the returned ``ChunkedBody``."""
        endpoint = f"/{API_VERSION}/runtime/invocation/{request_id}/response"
        headers = {
            "Content-Type": content_type,
            "Lambda-Runtime-Function-Response-Mode": "streaming",
            "Transfer-Encoding": "chunked",
            "Trailer": DECLARED_TRAILERS,
        }
        sock = self._socket()
        try:
            sock.sendall(_request_head("POST", endpoint, self.address, headers))
        except OSError:
            self.close()
            raise
        self._streaming_endpoint = endpoint
        return ChunkedBody(sock.sendall)

    def end_stream(self, body: ChunkedBody, trailers: Mapping[str, str] | None = None) -> None:
        """End the streamed response: its last chunk (with ``trailers``), then read the Runtime API's answer.

        When a write of the body failed (``body.failed``) the connection is only dropped: the Runtime API sees the
        response end now rather than wait for the rest until the function times out (the write's own error is the
        caller's to report). Ending it fails the same way: the connection is dropped and the error raised.
        """
        endpoint = self._streaming_endpoint
        if endpoint is None:
            raise RuntimeError("end_stream() without begin_stream()")
        self._streaming_endpoint = None
        if body.failed:
            self.close()
            return
        try:
            if not body.closed:
                body.close(trailers)
            response = self._read_response()
        except BaseException:
            self.close()
            raise
        _expect(endpoint, response, 202)

    def close(self) -> None:
        """Drop the connection (the next request opens a new one)."""
        self._streaming_endpoint = None
        if self._sock is not None:
            self._sock.close()
        self._sock = None
        self._buffer = b""

    # -- HTTP ------------------------------------------------------------------------------------

    def _post_error(self, endpoint: str, error: ErrorReport, extra: Mapping[str, str] | None = None) -> None:
        headers = {"Content-Type": "application/json", ERROR_TYPE_HEADER: error.error_type, **(extra or {})}
        _expect(endpoint, self._request("POST", endpoint, error.to_json(), headers), 202)

    def _request(
        self, method: str, endpoint: str, body: bytes = b"", headers: Mapping[str, str] | None = None
    ) -> RuntimeAPIResponse:
        all_headers = dict(headers or {})
        if method != "GET":
            all_headers["Content-Length"] = str(len(body))
        message = _request_head(method, endpoint, self.address, all_headers) + body
        # A kept-alive connection the server has since closed fails on first use. The request goes again on a new
        # one only when the server cannot have acted on it: its first write failed (a send() that fails sent
        # nothing), or it is GET /next. A POST that started going out is never sent twice: the Runtime API may have
        # read it, or refused it (413), and a second one is answered 400 InvalidRequestID.
        for attempt in (1, 2):
            reused = self._sock is not None
            sock = self._socket()
            sent = 0
            try:
                sent = sock.send(message)
                return self._finish_request(sock, memoryview(message)[sent:])
            except OSError as err:
                self.close()  # whatever state it is in, this connection cannot carry another request
                stale = reused and isinstance(err, ConnectionError) and (sent == 0 or method == "GET")
                if attempt == 2 or not stale:
                    raise
        raise AssertionError("unreachable")

    def _finish_request(self, sock: socket.socket, rest: memoryview) -> RuntimeAPIResponse:
        """Send the rest of the request and read the answer, or the answer the server gave before it stopped reading.

        A server may refuse a request before reading its body, answer, and close (the Runtime API's 413 for a buffered
        response over 6 MB): the send fails, and that answer, if it arrived, is what the caller should hear.
        """
        try:
            sock.sendall(rest)
        except ConnectionError:
            try:
                early = self._read_response()
            except OSError:
                early = None
            self.close()
            if early is None:
                raise
            return early
        return self._read_response()

    def _socket(self) -> socket.socket:
        if self._sock is not None and _peer_closed(self._sock):
            self.close()
        if self._sock is None:
            sock = socket.create_connection((self._host, self._port))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sock = sock
            self._buffer = b""
        return self._sock

    def _recv(self) -> bytes:
        assert self._sock is not None
        data = self._sock.recv(65536)
        if not data:
            raise ConnectionError("the Runtime API closed the connection")
        return data

    def _read_line(self) -> bytes:
        while b"\r\n" not in self._buffer:
            if len(self._buffer) > _MAX_LINE:
                raise ConnectionError("the Runtime API sent an over-long line")
            self._buffer += self._recv()
        line, self._buffer = self._buffer.split(b"\r\n", 1)
        return line

    def _read_exactly(self, size: int) -> bytes:
        parts = [self._buffer[:size]]
        have = len(parts[0])
        self._buffer = self._buffer[size:]
        while have < size:
            data = self._recv()
            need = size - have
            parts.append(data[:need])
            have += min(len(data), need)
            if len(data) > need:
                self._buffer = data[need:]
        return b"".join(parts)

    def _read_response(self) -> RuntimeAPIResponse:
        status_line = self._read_line()
        version, _, rest = status_line.partition(b" ")
        status_text = rest.split(b" ", 1)[0]
        if not version.startswith(b"HTTP/") or not status_text.isdigit():
            self.close()
            raise ConnectionError(f"the Runtime API sent a malformed status line: {status_line[:100]!r}")
        headers: dict[str, str] = {}
        while line := self._read_line():
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        status = int(status_text)
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body = self._read_chunked()
        elif "content-length" in headers:
            body = self._read_exactly(int(headers["content-length"]))
        elif status in (204, 304) or status < 200:
            body = b""
        else:  # delimited by the end of the connection
            parts = [self._buffer]
            try:
                while True:
                    parts.append(self._recv())
            except ConnectionError:
                pass
            body = b"".join(parts)
            self.close()
        connection = headers.get("connection", "").lower()
        if connection == "close" or (version == b"HTTP/1.0" and connection != "keep-alive"):
            self.close()
        return RuntimeAPIResponse(status, headers, body)

    def _read_chunked(self) -> bytes:
        parts: list[bytes] = []
        while True:
            size = int(self._read_line().split(b";", 1)[0], 16)
            if size == 0:
                while self._read_line():  # trailers, ignored
                    pass
                return b"".join(parts)
            parts.append(self._read_exactly(size))
            self._read_line()


def _request_head(method: str, endpoint: str, host: str, headers: Mapping[str, str]) -> bytes:
    lines = [f"{method} {endpoint} HTTP/1.1", f"Host: {host}", f"User-Agent: {USER_AGENT}"]
    lines.extend(f"{name}: {_one_line(value)}" for name, value in headers.items())
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")


def _one_line(value: str) -> str:
    return value.replace("\r", " ").replace("\n", " ")


def _peer_closed(sock: socket.socket) -> bool:
    """An idle kept-alive socket that is readable has been closed (or reset) by the server."""
    readable, _, _ = select.select([sock], [], [], 0)
    return bool(readable)


def _expect(endpoint: str, response: RuntimeAPIResponse, status: int) -> None:
    if response.status != status:
        raise RuntimeAPIError(endpoint, response.status, response.body)
