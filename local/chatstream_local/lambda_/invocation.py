"""One invocation of the local Lambda and how its caller receives the response.

:class:`Invocation` is what an execution environment hands its runtime on ``/next``; :class:`StreamHandle` is
the caller's end of it (the response's chunks as they arrive, then the error, if any); :class:`InvokeResult`
and :class:`FunctionError` are the outcome as the Invoke API reports it; :class:`KilledInvocation` names one
that was killed on purpose.
"""

from __future__ import annotations

import base64
import collections
import json
import queue
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator


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
    log_result: str | None = None  # with ``LogType: Tail``: the log's last 4 KB, base64


_END = object()
LOG_TAIL_BYTES = 4096  # ``LogType: Tail``: "the last 4 KB of the execution log"
_LOG_LINES_KEPT = 2000


class StreamHandle:
    """One invocation's response as it arrives.

    Iterate it for the body's chunks (``bytes``) in order, as the runtime sends them; the iteration ends when
    the invocation ends, successfully or not. Then :attr:`error` holds the function's error, if any (also
    for errors before any byte, when nothing is yielded). :meth:`response_start` tells whether and how the
    runtime started a response (streaming or buffered, content type) before the first chunk.

    The execution environment writes to it with :meth:`begin_response`, :meth:`push_chunk` and :meth:`finish`.

    With ``tail_log`` (the Invoke API's ``LogType: Tail``) it also keeps the invocation's execution log (the
    environment's ``START``/``END``/``REPORT`` lines and the function's output): :meth:`log_result`.
    """

    def __init__(self, request_id: str, function_name: str, *, tail_log: bool = False) -> None:
        self.request_id = request_id
        self.function_name = function_name
        self.tail_log = tail_log
        self.error: FunctionError | None = None
        self._log: collections.deque[str] = collections.deque(maxlen=_LOG_LINES_KEPT)
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
        log_result = self.log_result() if self.tail_log else None
        if self.error is not None:
            return InvokeResult(
                self.request_id, self.error.payload, "Unhandled", self.error.error_type, log_result=log_result
            )
        return InvokeResult(self.request_id, body, log_result=log_result)

    def log_result(self) -> str:
        """The last 4 KB of the execution log, base64-encoded (the Invoke API's ``LogResult``)."""
        data = "".join(f"{line}\n" for line in self._log).encode("utf-8")
        return base64.b64encode(data[-LOG_TAIL_BYTES:]).decode("ascii")

    # -- producer side (the execution environment) ------------------------------------------------------
    def log(self, line: str) -> None:
        """One line of the execution log (kept only with ``tail_log``)."""
        if self.tail_log:
            self._log.append(line)

    def begin_response(self, start: ResponseStart) -> None:
        """The runtime started its response; only the first start counts, and none after the end."""
        with self._lock:
            if self._done.is_set() or self._start is not None:
                return
            self._start = start
        self._started.set()

    def push_chunk(self, chunk: bytes) -> bool:
        """One chunk of the body, in order; False once the invocation has ended (the chunk is dropped)."""
        with self._lock:
            if self._done.is_set():
                return False
            if chunk:
                self._chunks.put(chunk)
            return True

    def finish(self, error: FunctionError | None) -> bool:
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
class Invocation:
    """One invocation on its way through an execution environment: the event and the Runtime API headers.

    ``cut`` is a fault to inject: once set, the Runtime API endpoint drops the connection the runtime streams this
    invocation's response on when the next chunk arrives, as a broken connection would end it.

    ``streamed``: the caller reads the response as a stream (a Function URL in ``RESPONSE_STREAM`` mode,
    ``InvokeWithResponseStream``). Otherwise Lambda buffers it, and holds even a streaming runtime's response to the
    6 MB of a buffered one (``Function.ResponseSizeTooLarge``).
    """

    handle: StreamHandle
    payload: bytes
    client_context: str | None
    cognito_identity: str | None
    trace_id: str
    deadline_ms: int = 0  # set when the runtime fetches it (``Lambda-Runtime-Deadline-Ms``)
    cut: threading.Event = field(default_factory=threading.Event)
    streamed: bool = True

    @property
    def request_id(self) -> str:
        return self.handle.request_id


@dataclass(frozen=True)
class KilledInvocation:
    """An invocation whose environment was killed mid-invocation (``LocalLambda.kill_busy_environment``)."""

    request_id: str
    payload: bytes  # the event it was running


def new_trace_id() -> str:
    """An X-Ray trace header for a new invocation (``Lambda-Runtime-Trace-Id``), not sampled."""
    return f"Root=1-{int(time.time()):08x}-{secrets.token_hex(12)};Parent={secrets.token_hex(8)};Sampled=0"
