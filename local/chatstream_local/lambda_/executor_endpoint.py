"""The Lambda Runtime API endpoint of one execution environment (``AWS_LAMBDA_RUNTIME_API``), over loopback.

The routes a runtime calls (``2018-06-01``): ``GET /runtime/invocation/next`` hands out the environment's next
invocation with its ``Lambda-Runtime-*`` headers; ``POST /runtime/invocation/{id}/response`` takes a buffered
response or, with ``Lambda-Runtime-Function-Response-Mode: streaming`` and chunked transfer, a streamed one,
relayed chunk by chunk as it is read, an error after the first byte coming in the trailers
``Lambda-Runtime-Function-Error-Type`` / ``Lambda-Runtime-Function-Error-Body`` (base64 JSON);
``POST /runtime/invocation/{id}/error`` and ``POST /runtime/init/error`` report errors. A buffered response over
Lambda's 6 MB quota fails with ``Function.ResponseSizeTooLarge``.

The endpoint serves one :class:`RuntimeApiBackend` (an execution environment); it knows nothing of processes.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import threading
from typing import TYPE_CHECKING, Any, Protocol

from chatstream_local.lambda_.invocation import FunctionError, ResponseStart
from chatstream_local.loopback import LoopbackServer, QuietHandler

if TYPE_CHECKING:
    from collections.abc import Iterator

    from chatstream_local.lambda_.function_spec import FunctionSpec
    from chatstream_local.lambda_.invocation import Invocation

API_PREFIX = "/2018-06-01/runtime"
ERROR_TYPE_HEADER = "Lambda-Runtime-Function-Error-Type"
ERROR_BODY_TRAILER = "Lambda-Runtime-Function-Error-Body"
RESPONSE_MODE_HEADER = "Lambda-Runtime-Function-Response-Mode"
BUFFERED_RESPONSE_LIMIT = 6_291_556  # bytes: Lambda's synchronous response payload quota
_MAX_CHUNK_LINE = 1024
_MAX_TRAILER_LINES = 64

_INVOCATION_PATH = re.compile(rf"^{API_PREFIX}/invocation/(?P<id>[^/]+)/(?P<kind>response|error)$")


class RuntimeApiBackend(Protocol):
    """What the endpoint serves: one execution environment's invocations."""

    @property
    def spec(self) -> FunctionSpec: ...

    def next_invocation(self) -> Invocation | None:
        """Block until the next invocation (``None``: the environment is shutting down)."""

    def invocation(self, request_id: str) -> Invocation | None:
        """The invocation being run with that request id, if any."""

    def complete(self, inv: Invocation, error: FunctionError | None) -> None:
        """The runtime finished the invocation's response (or reported its error)."""

    def report_init_error(self, error: FunctionError) -> None:
        """The runtime failed to initialize."""

    def process_exited(self, timeout: float) -> bool:
        """Whether the runtime process exits within ``timeout`` seconds."""


class RuntimeApiEndpoint:
    """The Runtime API of one backend on ``127.0.0.1`` (a free port), served from its own thread."""

    def __init__(self, backend: RuntimeApiBackend, name: str) -> None:
        self._server = LoopbackServer(("127.0.0.1", 0), _RuntimeApiHandler, backend)
        self._thread = threading.Thread(
            target=lambda: self._server.serve_forever(poll_interval=0.05), name=f"{name}-runtime-api", daemon=True
        )

    @property
    def address(self) -> str:
        """``host:port``, what ``AWS_LAMBDA_RUNTIME_API`` holds."""
        host, port = self._server.server_address[:2]
        return f"{host!s}:{port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket; call it from a thread that is not one of its request threads."""
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=2)

    def stop_in_background(self) -> None:
        """:meth:`stop` from a thread of its own (safe from a request thread: a server cannot shut itself down)."""
        threading.Thread(target=self.stop, name=f"{self._thread.name}-close", daemon=True).start()


class _IncompleteBody(Exception):
    pass


class _ConnectionCut(Exception):
    """The invocation's ``cut`` fault is set: the response connection is to be dropped."""


class _RuntimeApiHandler(QuietHandler):
    """The Runtime API routes: ``/next``, ``/response`` (buffered or streamed), ``/error``, ``/init/error``."""

    server: LoopbackServer[RuntimeApiBackend]

    # -- helpers --------------------------------------------------------------------------------------
    def _reply(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _error(self, status: int, error_type: str, message: str) -> None:
        self._reply(status, {"errorType": error_type, "errorMessage": message})

    def _read_line(self) -> bytes:
        line = self.rfile.readline(_MAX_CHUNK_LINE + 1)
        if not line.endswith(b"\n"):
            raise _IncompleteBody("truncated chunked body")
        return line

    def _chunks(self) -> Iterator[bytes]:
        """The chunks of a chunked request body, each as soon as it is read, then the trailers are parsed."""
        self.trailers: dict[str, str] = {}
        while True:
            size_text = self._read_line().split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError as err:
                raise _IncompleteBody(f"bad chunk size {size_text!r}") from err
            if size == 0:
                break
            data = self.rfile.read(size)
            if len(data) < size or self.rfile.read(2) != b"\r\n":
                raise _IncompleteBody("truncated chunk")
            yield data
        for _ in range(_MAX_TRAILER_LINES):
            line = self._read_line().strip()
            if not line:
                return
            name, _, value = line.decode("latin-1").partition(":")
            self.trailers[name.strip().lower()] = value.strip()
        raise _IncompleteBody("too many trailer lines")

    def _body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return b"".join(self._chunks())
        length = int(self.headers.get("Content-Length") or 0)
        data = self.rfile.read(length) if length else b""
        if len(data) < length:
            raise _IncompleteBody("truncated body")
        return data

    # -- routes ---------------------------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path != f"{API_PREFIX}/invocation/next":
            self._error(404, "NotFound", f"no route GET {self.path}")
            return
        inv = self.server.owner.next_invocation()
        if inv is None:  # the environment is shutting down
            self._error(500, "Runtime.Stopped", "the execution environment is shutting down")
            self.close_connection = True
            return
        spec = self.server.owner.spec
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(inv.payload)))
        self.send_header("Lambda-Runtime-Aws-Request-Id", inv.handle.request_id)
        self.send_header("Lambda-Runtime-Deadline-Ms", str(inv.deadline_ms))
        self.send_header("Lambda-Runtime-Invoked-Function-Arn", spec.arn)
        self.send_header("Lambda-Runtime-Trace-Id", inv.trace_id)
        if inv.client_context is not None:
            self.send_header("Lambda-Runtime-Client-Context", inv.client_context)
        if inv.cognito_identity is not None:
            self.send_header("Lambda-Runtime-Cognito-Identity", inv.cognito_identity)
        self.end_headers()
        self.wfile.write(inv.payload)
        self.wfile.flush()

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        environment = self.server.owner
        if self.path == f"{API_PREFIX}/init/error":
            body = self._body()
            error_type = self.headers.get(ERROR_TYPE_HEADER) or "Runtime.Unknown"
            environment.report_init_error(FunctionError(error_type, body))
            self._reply(202, {"status": "OK"})
            return
        match = _INVOCATION_PATH.match(self.path)
        if match is None:
            self._body()
            self._error(404, "NotFound", f"no route POST {self.path}")
            return
        inv = environment.invocation(match["id"])
        if inv is None:
            self._body()
            self._error(400, "InvalidRequestID", f"unknown or finished request id {match['id']}")
            return
        if match["kind"] == "error":
            self._post_error(inv)
        else:
            self._post_response(inv)

    def _post_error(self, inv: Invocation) -> None:
        body = self._body()
        error_type = self.headers.get(ERROR_TYPE_HEADER) or "Unhandled"
        if error_type == "Unhandled":  # awslambdaric's native client: the type is in the document
            document = FunctionError(error_type, body).document()
            error_type = str(document.get("errorType") or error_type)
        self.server.owner.complete(inv, FunctionError(error_type, body or b"{}"))
        self._reply(202, {"status": "OK"})

    def _post_response(self, inv: Invocation) -> None:
        environment = self.server.owner
        streaming = self.headers.get(RESPONSE_MODE_HEADER, "").lower() == "streaming"
        held = not (streaming and inv.streamed)  # to the buffered limit: a buffered runtime, or a buffered invocation
        content_type = self.headers.get("Content-Type") or "application/json"
        chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
        inv.handle.begin_response(ResponseStart(streaming=streaming, content_type=content_type))
        try:
            if chunked:
                total = 0
                for chunk in self._chunks():
                    if inv.cut.is_set():
                        raise _ConnectionCut
                    total += len(chunk)
                    inv.handle.push_chunk(chunk)
                    if held and total > BUFFERED_RESPONSE_LIMIT:
                        self._too_large(inv)
                        return
                error = self._trailer_error()
            else:
                length = int(self.headers.get("Content-Length") or 0)
                if length > BUFFERED_RESPONSE_LIMIT and held:
                    self._too_large(inv)
                    return
                data = self.rfile.read(length) if length else b""
                if len(data) < length:
                    raise _IncompleteBody("truncated body")
                inv.handle.push_chunk(data)
                error = None
        except _ConnectionCut:
            self.close_connection = True  # the connection is closed as soon as this returns
            message = f"RequestId: {inv.handle.request_id} Error: the runtime's response connection was cut"
            environment.complete(inv, FunctionError.synthetic("Runtime.TruncatedResponse", message))
            return
        except (_IncompleteBody, OSError):
            self.close_connection = True
            # A process that died mid-response is an exit error (reported by the exit watcher).
            if not environment.process_exited(timeout=2.0):
                message = f"RequestId: {inv.handle.request_id} Error: the runtime's response was cut short"
                environment.complete(inv, FunctionError.synthetic("Runtime.TruncatedResponse", message))
            return
        environment.complete(inv, error)
        self._reply(202, {"status": "OK"})

    def _trailer_error(self) -> FunctionError | None:
        trailers = getattr(self, "trailers", {})
        error_type = trailers.get(ERROR_TYPE_HEADER.lower())
        if not error_type:
            return None
        encoded = trailers.get(ERROR_BODY_TRAILER.lower(), "")
        try:
            body = base64.b64decode(encoded, validate=True) if encoded else b""
        except (binascii.Error, ValueError):
            body = encoded.encode()
        return FunctionError(error_type, body or json.dumps({"errorType": error_type}).encode())

    def _too_large(self, inv: Invocation) -> None:
        message = f"Response payload size exceeded maximum allowed payload size ({BUFFERED_RESPONSE_LIMIT} bytes)."
        self.server.owner.complete(inv, FunctionError.synthetic("Function.ResponseSizeTooLarge", message))
        self._error(413, "RequestEntityTooLarge", message)
        self.close_connection = True
