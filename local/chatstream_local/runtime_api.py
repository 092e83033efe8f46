"""A local Lambda: execution environments behind the Lambda Runtime API, with response streaming.

Each function has a pool of execution environments. An environment is one child process (awslambdaric or
the streaming runtime layer, see :mod:`chatstream_local.functions`) and its own Runtime API server on
127.0.0.1, so ``/next`` from an environment only ever gets that environment's invocations
(``AWS_LAMBDA_RUNTIME_API`` is ``host:port``). As on Lambda:

- an environment runs one invocation at a time; a new one starts when all are busy (up to the function's
  ``max_concurrency``; beyond that an invocation waits for a free environment);
- an invocation past its deadline kills its environment (``Sandbox.Timedout``, "Task timed out after N
  seconds"); a process that exits mid-invocation fails it with ``Runtime.ExitError``; an init error fails the
  waiting invocation with the runtime's own error; a broken environment is replaced by the next invocation;
- a streamed response (``Lambda-Runtime-Function-Response-Mode: streaming``, chunked) reaches the caller
  chunk by chunk as it arrives; an error after the first byte comes in the trailers
  ``Lambda-Runtime-Function-Error-Type`` / ``Lambda-Runtime-Function-Error-Body`` (base64 JSON).

Public API: :class:`LocalLambda` (``start``, ``stop``, ``invoke``, ``invoke_stream``, ``stats``),
:class:`StreamHandle`, :class:`InvokeResult`, :class:`FunctionError`.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import itertools
import json
import os
import queue
import re
import secrets
import signal
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from chatstream_local.functions import environment_variables, runtime_command
from chatstream_local.loopback import LoopbackServer, QuietHandler

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from chatstream_local.functions import FunctionSpec

    LogSink = Callable[[str, str], None]

API_PREFIX = "/2018-06-01/runtime"
ERROR_TYPE_HEADER = "Lambda-Runtime-Function-Error-Type"
ERROR_BODY_TRAILER = "Lambda-Runtime-Function-Error-Body"
RESPONSE_MODE_HEADER = "Lambda-Runtime-Function-Response-Mode"
BUFFERED_RESPONSE_LIMIT = 6_291_556  # bytes: Lambda's synchronous response payload quota
DEFAULT_INIT_TIMEOUT_S = 10.0  # Lambda's init phase limit for on-demand functions
_MAX_CHUNK_LINE = 1024
_MAX_TRAILER_LINES = 64

_INVOCATION_PATH = re.compile(rf"^{API_PREFIX}/invocation/(?P<id>[^/]+)/(?P<kind>response|error)$")


@dataclass(frozen=True)
class FunctionError:
    """A failed invocation: the error type and the error document the Invoke caller receives."""

    error_type: str
    payload: bytes

    @classmethod
    def synthetic(cls, error_type: str, message: str) -> FunctionError:
        """An error Lambda itself reports (timeout, exit, size), in Lambda's own shape."""
        body = {"errorType": error_type, "errorMessage": message}
        return cls(error_type, json.dumps(body).encode())

    def document(self) -> dict[str, Any]:
        """The error document as JSON (``{"errorType": …}`` if the runtime sent something else)."""
        try:
            doc = json.loads(self.payload)
        except ValueError:
            doc = None
        if isinstance(doc, dict):
            return doc
        return {"errorType": self.error_type, "errorMessage": self.payload.decode("utf-8", "replace")}


@dataclass(frozen=True)
class ResponseStart:
    """How the runtime started to respond."""

    streaming: bool
    content_type: str


@dataclass(frozen=True)
class InvokeResult:
    """A buffered invocation's outcome, as the Invoke API reports it."""

    request_id: str
    payload: bytes
    function_error: str | None = None  # "Unhandled" when the function failed
    error_type: str | None = None
    executed_version: str = "$LATEST"
    status_code: int = 200


@dataclass(frozen=True)
class PoolStats:
    environments_started: int
    environments_alive: int
    invocations: int


class LocalLambdaError(Exception):
    """Misuse of the local Lambda (unknown function, not started, stopped)."""


class UnknownFunction(LocalLambdaError):
    def __init__(self, name: str) -> None:
        super().__init__(f"Function not found: {name}")
        self.name = name


_END = object()


class StreamHandle:
    """One invocation's response as it arrives.

    Iterate it for the body's chunks (``bytes``) in order, as the runtime sends them; the iteration ends when
    the invocation ends, successfully or not. Then :attr:`error` holds the function's error, if any (also
    for errors before any byte, when nothing is yielded). :meth:`response_start` tells whether and how the
    runtime started a response (streaming or buffered, content type) before the first chunk.
    """

    def __init__(self, request_id: str, function_name: str) -> None:
        self.request_id = request_id
        self.function_name = function_name
        self.error: FunctionError | None = None
        self._start: ResponseStart | None = None
        self._started = threading.Event()
        self._done = threading.Event()
        self._chunks: queue.Queue[object] = queue.Queue()
        self._lock = threading.Lock()
        self._iterated = False

    # -- consumer side ---------------------------------------------------------------------------------
    def response_start(self, timeout: float | None = None) -> ResponseStart | None:
        """Wait until the runtime begins its response (or the invocation ends without one: then ``None``)."""
        self._started.wait(timeout)
        return self._start

    @property
    def streaming(self) -> bool:
        return self._start is not None and self._start.streaming

    @property
    def content_type(self) -> str | None:
        return self._start.content_type if self._start else None

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the end of the invocation (without consuming the chunks)."""
        return self._done.wait(timeout)

    def __iter__(self) -> Iterator[bytes]:
        with self._lock:
            if self._iterated:
                raise RuntimeError("a StreamHandle can be iterated once")
            self._iterated = True
        while True:
            item = self._chunks.get()
            if item is _END:
                return
            assert isinstance(item, bytes)
            yield item

    def read_all(self) -> bytes:
        return b"".join(self)

    def result(self) -> InvokeResult:
        """Drain the response and report it as the Invoke API does (the error document on failure)."""
        body = self.read_all()
        if self.error is not None:
            return InvokeResult(self.request_id, self.error.payload, "Unhandled", self.error.error_type)
        return InvokeResult(self.request_id, body)

    # -- producer side (the environment) -------------------------------------------------------------
    def _begin(self, start: ResponseStart) -> None:
        with self._lock:
            if self._done.is_set() or self._start is not None:
                return
            self._start = start
        self._started.set()

    def _push(self, chunk: bytes) -> bool:
        with self._lock:
            if self._done.is_set():
                return False
            if chunk:
                self._chunks.put(chunk)
            return True

    def _finish(self, error: FunctionError | None) -> bool:
        """End the invocation; only the first call counts (a timeout beats a later exit, and so on)."""
        with self._lock:
            if self._done.is_set():
                return False
            self.error = error
            self._done.set()
            self._chunks.put(_END)
        self._started.set()
        return True


@dataclass
class _Invocation:
    handle: StreamHandle
    payload: bytes
    client_context: str | None
    cognito_identity: str | None
    trace_id: str
    deadline_ms: int = 0


def _trace_id() -> str:
    return f"Root=1-{int(time.time()):08x}-{secrets.token_hex(12)};Parent={secrets.token_hex(8)};Sampled=0"


class _Environment:
    """One execution environment: a child process and the Runtime API server only it talks to."""

    def __init__(self, spec: FunctionSpec, env_id: int, pool: _Pool, log_sink: LogSink | None) -> None:
        self.spec = spec
        self.env_id = env_id
        self.pool = pool
        self.log_sink = log_sink
        self.cond = threading.Condition()
        self.pending: _Invocation | None = None  # assigned, not yet fetched with /next
        self.current: _Invocation | None = None  # fetched, no response yet
        self.dead = False
        self.initialized = False
        self.init_error: FunctionError | None = None
        self._timer: threading.Timer | None = None
        self._threads: list[threading.Thread] = []
        self.server = LoopbackServer(("127.0.0.1", 0), _RuntimeApiHandler, self)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        host, port = self.server.server_address[:2]
        return f"{host!s}:{port}"

    @property
    def label(self) -> str:
        return f"{self.spec.name}#{self.env_id}"

    # -- lifecycle ------------------------------------------------------------------------------------
    def start(self, first: _Invocation, init_timeout_s: float) -> None:
        self.pending = first
        self._spawn(lambda: self.server.serve_forever(poll_interval=0.05), "runtime-api")
        log_stream = f"{time.strftime('%Y/%m/%d')}/[$LATEST]{uuid.uuid4().hex}"
        env = environment_variables(self.spec, self.address, log_stream)
        out = subprocess.PIPE if self.log_sink else subprocess.DEVNULL
        self.process = subprocess.Popen(  # noqa: S603 - argv from the function spec
            runtime_command(self.spec),
            cwd=self.spec.task_root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            process_group=0,  # kill() leaves no orphan; the stack's session, so niceness counts (FUNCTION_NICE)
        )
        if self.spec.nice:
            with contextlib.suppress(OSError):  # the process may already be gone; priority is not correctness
                os.setpriority(os.PRIO_PROCESS, self.process.pid, self.spec.nice)
        if self.log_sink is not None:
            assert self.process.stdout is not None and self.process.stderr is not None
            self._spawn(lambda: self._pump(self.process.stdout if self.process else None), "stdout")
            self._spawn(lambda: self._pump(self.process.stderr if self.process else None), "stderr")
        self._spawn(self._watch_exit, "exit-watch")
        self._arm_timer(init_timeout_s, self._on_init_timeout)

    def _spawn(self, target: Callable[[], None], what: str) -> None:
        thread = threading.Thread(target=target, name=f"{self.label}-{what}", daemon=True)
        thread.start()
        self._threads.append(thread)

    def _pump(self, stream: IO[bytes] | None) -> None:
        if stream is None or self.log_sink is None:
            return
        for line in stream:
            self.log_sink(self.label, line.decode("utf-8", "replace").rstrip("\n"))

    def _watch_exit(self) -> None:
        assert self.process is not None
        code = self.process.wait()
        reason = f"signal: {signal.Signals(-code).name.lower().removeprefix('sig')}" if code < 0 else None
        detail = reason or f"exit status {code}"
        with self.cond:
            init_error = self.init_error
            victims = [inv for inv in (self.pending, self.current) if inv is not None]
            self.pending = self.current = None
        for inv in victims:
            if init_error is not None:
                inv.handle._finish(init_error)
            else:
                message = f"RequestId: {inv.handle.request_id} Error: Runtime exited with error: {detail}"
                inv.handle._finish(FunctionError.synthetic("Runtime.ExitError", message))
        self.discard()

    def kill(self) -> None:
        """Kill the whole process group (SIGKILL, as Lambda does at a timeout)."""
        with self.cond:
            self.dead = True
            self.cond.notify_all()
        self._cancel_timer()
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)

    def stop(self) -> None:
        with self.cond:
            victims = [inv for inv in (self.pending, self.current) if inv is not None]
            self.pending = self.current = None
        for inv in victims:
            inv.handle._finish(FunctionError.synthetic("Runtime.Stopped", "the local Lambda was stopped"))
        self.kill()
        if self.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=5)
        self.server.shutdown()
        self.server.server_close()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=2)

    def discard(self) -> None:
        with self.cond:
            self.dead = True
            self.cond.notify_all()
        self._cancel_timer()
        self.pool.retire(self)
        # The server can only be shut down from another thread than its own request threads.
        threading.Thread(target=self._close_server, name=f"{self.label}-close", daemon=True).start()

    def _close_server(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- timers ---------------------------------------------------------------------------------------
    def _arm_timer(self, seconds: float, action: Callable[[], None]) -> None:
        self._cancel_timer()
        timer = threading.Timer(max(seconds, 0.0), action)
        timer.daemon = True
        self._timer = timer
        timer.start()

    def _cancel_timer(self) -> None:
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()

    def _on_init_timeout(self) -> None:
        with self.cond:
            if self.initialized or self.dead:
                return
            inv = self.pending
        if inv is not None:
            message = f"RequestId: {inv.handle.request_id} Error: Init timed out after {self.pool.init_timeout_s:.2f} s"
            inv.handle._finish(FunctionError.synthetic("Sandbox.Timedout", message))
        self.kill()

    def _on_deadline(self, inv: _Invocation) -> None:
        with self.cond:
            if self.current is not inv:
                return
        message = f"RequestId: {inv.handle.request_id} Error: Task timed out after {self.spec.timeout_s:.2f} seconds"
        inv.handle._finish(FunctionError.synthetic("Sandbox.Timedout", message))
        self.kill()

    # -- Runtime API operations -----------------------------------------------------------------------
    def assign(self, inv: _Invocation) -> None:
        with self.cond:
            self.pending = inv
            self.cond.notify_all()

    def next_invocation(self) -> _Invocation | None:
        with self.cond:
            self.initialized = True
            if self.current is not None:  # /next without a response: that invocation got nothing
                stale, self.current = self.current, None
                message = "the runtime asked for the next event without responding"
                stale.handle._finish(FunctionError.synthetic("Runtime.NoResponse", message))
            while self.pending is None and not self.dead:
                self.cond.wait()
            if self.dead:
                return None
            inv, self.pending = self.pending, None
            assert inv is not None
            inv.deadline_ms = int((time.time() + self.spec.timeout_s) * 1000)
            self.current = inv
            self._arm_timer(self.spec.timeout_s, lambda: self._on_deadline(inv))
        return inv

    def invocation(self, request_id: str) -> _Invocation | None:
        with self.cond:
            if self.current is not None and self.current.handle.request_id == request_id:
                return self.current
        return None

    def complete(self, inv: _Invocation, error: FunctionError | None) -> None:
        """The runtime finished its response (or reported an error): the environment is free again."""
        with self.cond:
            if self.current is not inv:
                return
            self.current = None
        self._cancel_timer()
        inv.handle._finish(error)
        self.pool.release(self)

    def report_init_error(self, error: FunctionError) -> None:
        with self.cond:
            self.init_error = error
            inv, self.pending = self.pending, None
        if inv is not None:
            inv.handle._finish(error)
        self.kill()  # Lambda discards an environment whose init failed

    def process_exited(self, timeout: float) -> bool:
        if self.process is None:
            return True
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return True


class _IncompleteBody(Exception):
    pass


class _RuntimeApiHandler(QuietHandler):
    server: LoopbackServer[_Environment]

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

    def _post_error(self, inv: _Invocation) -> None:
        body = self._body()
        error_type = self.headers.get(ERROR_TYPE_HEADER) or "Unhandled"
        if error_type == "Unhandled":  # awslambdaric's native client: the type is in the document
            document = FunctionError(error_type, body).document()
            error_type = str(document.get("errorType") or error_type)
        self.server.owner.complete(inv, FunctionError(error_type, body or b"{}"))
        self._reply(202, {"status": "OK"})

    def _post_response(self, inv: _Invocation) -> None:
        environment = self.server.owner
        streaming = self.headers.get(RESPONSE_MODE_HEADER, "").lower() == "streaming"
        content_type = self.headers.get("Content-Type") or "application/json"
        chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
        inv.handle._begin(ResponseStart(streaming=streaming, content_type=content_type))
        try:
            if chunked:
                total = 0
                for chunk in self._chunks():
                    total += len(chunk)
                    inv.handle._push(chunk)
                    if not streaming and total > BUFFERED_RESPONSE_LIMIT:
                        self._too_large(inv)
                        return
                error = self._trailer_error()
            else:
                length = int(self.headers.get("Content-Length") or 0)
                if length > BUFFERED_RESPONSE_LIMIT and not streaming:
                    self._too_large(inv)
                    return
                data = self.rfile.read(length) if length else b""
                if len(data) < length:
                    raise _IncompleteBody("truncated body")
                inv.handle._push(data)
                error = None
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

    def _too_large(self, inv: _Invocation) -> None:
        message = f"Response payload size exceeded maximum allowed payload size ({BUFFERED_RESPONSE_LIMIT} bytes)."
        self.server.owner.complete(inv, FunctionError.synthetic("Function.ResponseSizeTooLarge", message))
        self._error(413, "RequestEntityTooLarge", message)
        self.close_connection = True


class _Pool:
    """The execution environments of one function."""

    def __init__(self, spec: FunctionSpec, log_sink: LogSink | None, init_timeout_s: float) -> None:
        self.spec = spec
        self.log_sink = log_sink
        self.init_timeout_s = init_timeout_s
        self.cond = threading.Condition()
        self.idle: list[_Environment] = []
        self.alive: set[_Environment] = set()
        self.started = 0
        self.invocations = 0
        self.closed = False
        self._ids = itertools.count(1)

    def dispatch(self, inv: _Invocation) -> None:
        """Give the invocation to an idle environment, or a new one, or wait for one to be free."""
        with self.cond:
            while True:
                if self.closed:
                    raise LocalLambdaError("the local Lambda is stopped")
                if self.idle:
                    environment = self.idle.pop()
                    environment.assign(inv)
                    return
                if len(self.alive) < self.spec.max_concurrency:
                    environment = _Environment(self.spec, next(self._ids), self, self.log_sink)
                    self.alive.add(environment)
                    self.started += 1
                    break
                self.cond.wait()
        try:
            environment.start(inv, self.init_timeout_s)
        except OSError as err:
            message = f"RequestId: {inv.handle.request_id} Error: could not start the runtime: {err}"
            inv.handle._finish(FunctionError.synthetic("Runtime.ExitError", message))
            environment.kill()
            environment.discard()

    def release(self, environment: _Environment) -> None:
        with self.cond:
            if environment in self.alive and not environment.dead and environment not in self.idle:
                self.idle.append(environment)
            self.cond.notify_all()

    def retire(self, environment: _Environment) -> None:
        with self.cond:
            self.alive.discard(environment)
            if environment in self.idle:
                self.idle.remove(environment)
            self.cond.notify_all()

    def close(self) -> list[_Environment]:
        """Refuse new invocations; the environments to stop."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()
            return list(self.alive)

    def stats(self) -> PoolStats:
        with self.cond:
            return PoolStats(self.started, len(self.alive), self.invocations)


class LocalLambda:
    """Runs functions locally behind the Lambda Runtime API, one process per execution environment.

    ``log_sink(label, line)`` receives every line the environments write to stdout/stderr (label is
    ``<function>#<environment number>``); without one their output is discarded.
    """

    def __init__(
        self,
        specs: Sequence[FunctionSpec],
        *,
        log_sink: LogSink | None = None,
        init_timeout_s: float = DEFAULT_INIT_TIMEOUT_S,
    ) -> None:
        names = [spec.name for spec in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate function names in {names}")
        self._specs = {spec.name: spec for spec in specs}
        self._log_sink = log_sink
        self._init_timeout_s = init_timeout_s
        self._pools: dict[str, _Pool] = {}
        self._lock = threading.Lock()

    @property
    def function_names(self) -> list[str]:
        return list(self._specs)

    def spec(self, name: str) -> FunctionSpec:
        try:
            return self._specs[name]
        except KeyError:
            raise UnknownFunction(name) from None

    def start(self) -> LocalLambda:
        """Ready the pools. Environments start on demand (a cold start on the first invocation)."""
        with self._lock:
            if not self._pools:
                self._pools = {
                    name: _Pool(spec, self._log_sink, self._init_timeout_s) for name, spec in self._specs.items()
                }
        return self

    def stop(self) -> None:
        """Stop every environment: kill their process groups and close their Runtime API servers."""
        with self._lock:
            pools = list(self._pools.values())
        environments = [environment for pool in pools for environment in pool.close()]
        for environment in environments:  # kill them all first, then wait for each
            environment.kill()
        for environment in environments:
            environment.stop()

    def __enter__(self) -> LocalLambda:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def invoke_stream(
        self,
        name: str,
        payload: bytes,
        *,
        client_context: str | None = None,
        cognito_identity: str | None = None,
    ) -> StreamHandle:
        """Start an invocation and return its response as it arrives (see :class:`StreamHandle`).

        ``client_context`` is the client context JSON (not base64), passed to the runtime as
        ``Lambda-Runtime-Client-Context``.
        """
        spec = self.spec(name)
        pool = self._pools.get(spec.name)
        if pool is None:
            raise LocalLambdaError("LocalLambda.start() was not called")
        handle = StreamHandle(str(uuid.uuid4()), spec.name)
        inv = _Invocation(handle, payload, client_context, cognito_identity, _trace_id())
        with pool.cond:
            pool.invocations += 1
        pool.dispatch(inv)
        return handle

    def invoke(
        self,
        name: str,
        payload: bytes,
        *,
        client_context: str | None = None,
        cognito_identity: str | None = None,
    ) -> InvokeResult:
        """Invoke and wait for the whole response (the Invoke API's ``RequestResponse``)."""
        return self.invoke_stream(
            name, payload, client_context=client_context, cognito_identity=cognito_identity
        ).result()

    def kill_busy_environment(self, name: str) -> bool:
        """SIGKILL one environment of ``name`` that is running an invocation (as a crash would).

        Its invocation fails with ``Runtime.ExitError``; the environment is discarded. False when none was busy.
        """
        pool = self._pools.get(self.spec(name).name)
        if pool is None:
            return False
        with pool.cond:
            environments = list(pool.alive)
        for environment in environments:
            with environment.cond:
                busy = environment.current is not None and not environment.dead
            if busy:
                environment.kill()
                return True
        return False

    def stats(self) -> dict[str, PoolStats]:
        with self._lock:
            pools = dict(self._pools)
        return {name: pool.stats() for name, pool in pools.items()}


__all__ = [
    "FunctionError",
    "InvokeResult",
    "LocalLambda",
    "LocalLambdaError",
    "PoolStats",
    "ResponseStart",
    "StreamHandle",
    "UnknownFunction",
]
