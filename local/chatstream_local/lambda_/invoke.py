"""The local Lambda API on 127.0.0.1: ``Invoke``, ``InvokeWithResponseStream`` and ``GetFunction``.

boto3's ``lambda`` client works against it unchanged (``endpoint_url=`` or ``AWS_ENDPOINT_URL_LAMBDA``).

``Invoke`` (``POST /2015-03-31/functions/{name}/invocations``):

- ``RequestResponse`` → 200 with the function's payload (``X-Amz-Executed-Version``; on a function error
  ``X-Amz-Function-Error: Unhandled`` and the error document as the payload);
- ``Event`` → 202 at once, with the event's request id (``x-amzn-RequestId``: every attempt at it runs with it as
  its ``aws_request_id``, and its destination record names it, as on Lambda); the invocation runs in the background,
  queued as Lambda's asynchronous invocations are, retried up to the function's ``max_retry_attempts`` (0 in the
  template: a failed generation is not run again), and an invocation that still fails goes to
  ``on_failure(FailedEvent)``, the on-failure destination (``RetriesExhausted``; :mod:`.destinations`). A throttled
  event (the function at its reserved concurrency) is tried again without using a retry, with a growing wait, until
  it is older than the function's ``max_event_age_s``, when it goes there as ``EventAgeExceeded``, as does an event
  too old for its next retry. Lambda may still deliver an event twice ("the queue itself is eventually consistent"):
  with ``duplicate_events`` > 0, that share of the events is delivered a second time, after a random delay (see
  :class:`InvokeEndpoint`);
- ``DryRun`` → 204;
- a throttled ``RequestResponse`` → 429 ``TooManyRequestsException`` (``Reason``
  ``ReservedFunctionConcurrentInvocationLimitExceeded``);
- an unknown function → 404 ``ResourceNotFoundException``; a payload over the quota → 413
  ``RequestTooLargeException``; bad input → 400 ``InvalidRequestContentException``;
- ``LogType: Tail`` → ``X-Amz-Log-Result``: the last 4 KB of the invocation's log, base64 (``START``, the
  function's own lines, ``END``, ``REPORT``).

``InvokeWithResponseStream`` (``POST /2021-11-15/functions/{name}/response-streaming-invocations``): 200 with the
function's response content type, and an ``application/vnd.amazon.eventstream`` body: a ``PayloadChunk`` event
for each chunk of the response as the runtime sends it (a buffered response is one chunk), then one
``InvokeComplete`` (``ErrorCode``/``ErrorDetails``: the error's type and message when the function failed;
``LogResult`` with ``LogType: Tail``). boto3's ``invoke_with_response_stream`` reads it.

``GetFunction`` (``GET /2015-03-31/functions/{name}``): the function's configuration (handler, timeout, memory,
environment) and, as ``Code.Location``, a ``file://`` URI of the code it runs (layers under ``Layers``).

The function name may be a name, a name with a qualifier, or a full or partial ARN.
"""

from __future__ import annotations

import base64
import binascii
import json
import random
import re
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from chatstream_local.eventstream import encode_blob_event, encode_event
from chatstream_local.lambda_.destinations import EVENT_AGE_EXCEEDED, RETRIES_EXHAUSTED, FailedEvent
from chatstream_local.lambda_.exceptions import FunctionThrottled, LocalLambdaError, UnknownFunction
from chatstream_local.lambda_.invocation import FunctionError
from chatstream_local.loopback import LoopbackServer, QuietHandler, ServingThread

if TYPE_CHECKING:
    import socket
    from collections.abc import Callable

    from chatstream_local.lambda_.function_spec import FunctionSpec
    from chatstream_local.lambda_.invocation import StreamHandle
    from chatstream_local.lambda_.service import LocalLambda

INVOKE_PREFIX = "/2015-03-31/functions/"
STREAM_PREFIX = "/2021-11-15/functions/"
API_PREFIXES = (INVOKE_PREFIX, STREAM_PREFIX)  # every path of the Lambda API this endpoint serves
_INVOKE = re.compile(r"^/2015-03-31/functions/(?P<name>[^/]+)/invocations$")
_INVOKE_STREAM = re.compile(r"^/2021-11-15/functions/(?P<name>[^/]+)/response-streaming-invocations$")
_GET_FUNCTION = re.compile(r"^/2015-03-31/functions/(?P<name>[^/]+)$")
SYNC_PAYLOAD_LIMIT = 6_291_456  # bytes: "Request must be smaller than 6291456 bytes for the InvokeFunction operation"
ASYNC_PAYLOAD_LIMIT = 1_048_576  # bytes: the asynchronous invocation payload quota (1 MB)
THROTTLE_WAIT_S = (0.25, 4.0)  # a throttled event's first wait and the longest (Lambda: "up to 5 minutes")


if TYPE_CHECKING:
    OnFailure = Callable[[FailedEvent], None]


def function_name_from(identifier: str) -> str:
    """The bare function name of ``name``, ``name:qualifier``, ``account:function:name`` or a full ARN."""
    if ":function:" in identifier:
        identifier = identifier.split(":function:", 1)[1]
    return identifier.split(":", 1)[0]


class InvokeEndpoint:
    """The Invoke API for the functions of a :class:`LocalLambda`, on ``127.0.0.1:<port>`` (0: a free port), or on
    ``listener``, a listening socket bound before the functions were given its URL.

    ``duplicate_events``: the probability that an accepted ``Event`` invocation is delivered a second time, as
    Lambda's asynchronous queue may deliver it ("Even if your function doesn't return an error, it's possible for it
    to receive the same event from Lambda multiple times",
    https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html). The second delivery is an
    ordinary asynchronous invocation of the same event, its payload and request id (retries, ``on_failure`` and
    :meth:`wait_idle` as for any), started a random 0 to ``duplicate_delay_s`` seconds after the first was accepted,
    so it may overlap the first or come after it. ``rng`` draws both (seed it to repeat a run's draws);
    :attr:`duplicates` counts the deliveries, and :attr:`failed_duplicates` the events delivered twice one of whose
    deliveries ended in an error (the function failed, or its environment was killed: the second before or after it
    could tell the event was a duplicate, or the first before it claimed the event, so the second rightly did the
    work). 0 by default: each event is delivered once.

    ``retry_delay_s``: the wait before a failed event's first retry, doubled before its second: Lambda's one minute,
    then two (same page), by default; tests pass their own.
    """

    def __init__(
        self,
        local: LocalLambda,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        listener: socket.socket | None = None,
        on_failure: OnFailure | None = None,
        retry_delay_s: float = 60.0,
        max_async_workers: int | None = None,
        duplicate_events: float = 0.0,
        duplicate_delay_s: float = 1.0,
        rng: random.Random | None = None,
    ) -> None:
        if not 0.0 <= duplicate_events <= 1.0:
            raise ValueError(f"duplicate_events is a probability, got {duplicate_events}")
        # Lambda runs queued asynchronous invocations up to the function's concurrency; by default so does this.
        if max_async_workers is None:
            max_async_workers = sum(local.spec(name).max_concurrency for name in local.function_names)
        self.local = local
        self.on_failure = on_failure
        self.retry_delay_s = retry_delay_s
        self.duplicate_events = duplicate_events
        self.duplicate_delay_s = duplicate_delay_s
        self._rng = rng or random.Random()
        self._duplicates: Counter[str] = Counter()
        self._delivered_twice: set[tuple[str, str]] = set()  # (function, request id) of the events delivered twice
        self._failed_deliveries: set[tuple[str, str]] = set()  # (function, request id) of deliveries that failed
        self._server = LoopbackServer((host, port), _InvokeHandler, self, listener)
        self._executor = ThreadPoolExecutor(max_workers=max_async_workers, thread_name_prefix="lambda-event")
        self._serving = ServingThread(self._server, "invoke-endpoint")
        self._stopping = threading.Event()
        self._pending = 0
        self._idle = threading.Condition()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> InvokeEndpoint:
        self._serving.start()
        return self

    def stop(self) -> None:
        """Stop serving and drop queued Event invocations (those running end with the local Lambda)."""
        self._stopping.set()
        self._serving.stop()
        self._executor.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> InvokeEndpoint:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until every accepted Event invocation has finished (retries and on_failure included)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    @property
    def duplicates(self) -> dict[str, int]:
        """Event invocations delivered a second time so far, by function name (see ``duplicate_events``)."""
        with self._idle:
            return dict(self._duplicates)

    @property
    def failed_duplicates(self) -> dict[str, int]:
        """Events delivered twice (counted in :attr:`duplicates`) one of whose deliveries ended in an error, by
        function name."""
        with self._idle:
            return dict(Counter(name for name, _ in self._delivered_twice & self._failed_deliveries))

    # -- asynchronous invocations ---------------------------------------------------------------------
    def submit_event(self, name: str, payload: bytes) -> str:
        """Queue an event; returns its request id, which the Invoke answers with (``x-amzn-RequestId``), every
        attempt at it runs as (``aws_request_id``: Lambda's retries of an event share it), and its destination
        record names (``requestContext.requestId``), as on Lambda. A second delivery of the event shares it too."""
        request_id = str(uuid.uuid4())
        self._submit(name, payload, request_id, None)
        with self._idle:  # one draw at a time: a seeded rng repeats its draws
            twice = self.duplicate_events > 0 and self._rng.random() < self.duplicate_events
            delay_s = self._rng.uniform(0.0, self.duplicate_delay_s) if twice else None
        if delay_s is not None:
            self._submit(name, payload, request_id, delay_s)
        return request_id

    def _submit(self, name: str, payload: bytes, request_id: str, duplicate_after_s: float | None) -> None:
        with self._idle:
            self._pending += 1
        try:
            self._executor.submit(self._run_event, name, payload, request_id, duplicate_after_s)
        except RuntimeError:  # the executor is shut down
            self._done_event()

    def _deliver(self, name: str, payload: bytes, request_id: str, accepted: float) -> FailedEvent | None:
        """Run the event until it succeeds (None), or until Lambda gives up on it: its retries used, or too old."""
        spec = self.local.spec(name)
        error: FunctionError | None = None
        made = 0
        wait, throttle_wait = 0.0, THROTTLE_WAIT_S[0]
        while True:
            if wait and self._stopping.wait(wait):
                return None
            if time.monotonic() - accepted > spec.max_event_age_s:
                return FailedEvent(name, payload, EVENT_AGE_EXCEEDED, error, request_id, made)
            try:
                result = self.local.invoke(name, payload, request_id=request_id)
            except FunctionThrottled:  # not a retry: tried again, waiting longer each time, until too old
                wait, throttle_wait = throttle_wait, min(throttle_wait * 2, THROTTLE_WAIT_S[1])
                continue
            except LocalLambdaError as err:
                error = FunctionError.synthetic("ServiceException", str(err))
                return FailedEvent(name, payload, RETRIES_EXHAUSTED, error, request_id, made)
            made += 1
            if result.function_error is None:
                return None
            error = FunctionError(result.error_type or "Unhandled", result.payload)
            if made > max(spec.max_retry_attempts, 0):
                return FailedEvent(name, payload, RETRIES_EXHAUSTED, error, request_id, made)
            wait = self.retry_delay_s * made

    def _done_event(self) -> None:
        with self._idle:
            self._pending -= 1
            self._idle.notify_all()

    def _run_event(self, name: str, payload: bytes, request_id: str, duplicate_after_s: float | None) -> None:
        """Deliver one event (``duplicate_after_s``: a second delivery, that long after the first was accepted)."""
        accepted = time.monotonic()
        try:
            if duplicate_after_s is not None:
                if self._stopping.wait(duplicate_after_s):
                    return
                with self._idle:
                    self._duplicates[name] += 1
                    self._delivered_twice.add((name, request_id))
            failed = self._deliver(name, payload, request_id, accepted)
            if failed is not None and self.duplicate_events > 0:
                with self._idle:
                    self._failed_deliveries.add((name, request_id))
            if failed is not None and self.on_failure is not None and not self._stopping.is_set():
                self.on_failure(failed)
        finally:
            self._done_event()


class _InvokeHandler(QuietHandler):
    server: LoopbackServer[InvokeEndpoint]

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _throttled(self, err: FunctionThrottled) -> None:
        reason = "ReservedFunctionConcurrentInvocationLimitExceeded"
        body = json.dumps({"Reason": reason, "Type": "User", "message": "Rate Exceeded."}).encode()
        self._send(429, body, {"x-amzn-ErrorType": "TooManyRequestsException", "x-amzn-RequestId": str(uuid.uuid4())})

    def _api_error(self, status: int, code: str, message: str) -> None:
        body = json.dumps({"Type": "User", "message": message}).encode()
        self._send(status, body, {"x-amzn-ErrorType": code, "x-amzn-RequestId": str(uuid.uuid4())})

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        path = urlsplit(self.path).path
        match = _GET_FUNCTION.match(path)
        if match is None:
            self._api_error(404, "UnknownOperationException", f"no operation at GET {path}")
            return
        identifier = unquote(match["name"])
        try:
            spec = self.server.owner.local.spec(function_name_from(identifier))
        except UnknownFunction:
            self._api_error(404, "ResourceNotFoundException", f"Function not found: {identifier}")
            return
        body = json.dumps(function_description(spec)).encode()
        self._send(200, body, {"x-amzn-RequestId": str(uuid.uuid4())})

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        path = urlsplit(self.path).path
        match = _INVOKE.match(path) or _INVOKE_STREAM.match(path)
        if match is None:
            self.discard_body(int(self.headers.get("Content-Length") or 0))
            self._api_error(404, "UnknownOperationException", f"no operation at POST {path}")
            return
        identifier = unquote(match["name"])
        streaming = match.re is _INVOKE_STREAM
        endpoint = self.server.owner
        invocation_type = self.headers.get("X-Amz-Invocation-Type") or "RequestResponse"
        limit = ASYNC_PAYLOAD_LIMIT if invocation_type == "Event" else SYNC_PAYLOAD_LIMIT
        length = int(self.headers.get("Content-Length") or 0)
        if length > limit:
            self.discard_body(length)
            self.close_connection = True
            operation = "InvokeWithResponseStream" if streaming else "InvokeFunction"
            self._api_error(
                413,
                "RequestTooLargeException",
                f"Request must be smaller than {limit} bytes for the {operation} operation",
            )
            return
        payload = self.rfile.read(length) if length else b""
        try:
            spec = endpoint.local.spec(function_name_from(identifier))
        except UnknownFunction:
            self._api_error(404, "ResourceNotFoundException", f"Function not found: {identifier}")
            return
        if payload and not _is_json(payload):
            self._api_error(400, "InvalidRequestContentException", "Could not parse request body into json")
            return
        payload = payload or b"{}"
        if invocation_type == "DryRun":
            self._send(204, b"", {"x-amzn-RequestId": str(uuid.uuid4())})
        elif invocation_type == "Event" and not streaming:
            self._send(202, b"", {"x-amzn-RequestId": endpoint.submit_event(spec.name, payload)})
        elif invocation_type == "RequestResponse":
            self._request_response(spec.name, payload, streaming=streaming)
        else:
            self._api_error(400, "InvalidParameterValueException", f"Unknown invocation type {invocation_type}")

    def _request_response(self, name: str, payload: bytes, *, streaming: bool) -> None:
        client_context = None
        encoded = self.headers.get("X-Amz-Client-Context")
        if encoded:
            try:
                client_context = base64.b64decode(encoded, validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                self._api_error(400, "InvalidRequestContentException", "Client context must be base64 JSON")
                return
        log_type = self.headers.get("X-Amz-Log-Type") or "None"
        if log_type not in ("None", "Tail"):
            self._api_error(400, "InvalidParameterValueException", f"Unknown log type {log_type}")
            return
        try:
            handle = self.server.owner.local.invoke_stream(
                name, payload, client_context=client_context, tail_log=log_type == "Tail", streamed=streaming
            )
        except FunctionThrottled as err:
            self._throttled(err)
            return
        except LocalLambdaError as err:
            self._api_error(500, "ServiceException", str(err))
            return
        if streaming:
            self._stream_response(handle)
            return
        result = handle.result()
        headers = {"X-Amz-Executed-Version": result.executed_version, "x-amzn-RequestId": result.request_id}
        if result.function_error is not None:
            headers["X-Amz-Function-Error"] = result.function_error
        if result.log_result is not None:
            headers["X-Amz-Log-Result"] = result.log_result
        self._send(200, result.payload, headers)

    def _stream_response(self, handle: StreamHandle) -> None:
        """InvokeWithResponseStream: each chunk as a ``PayloadChunk`` event as it arrives, then ``InvokeComplete``."""
        start = handle.response_start()
        self.send_response(200)
        self.send_header("Content-Type", start.content_type if start is not None else "application/json")
        self.send_header("X-Amz-Executed-Version", "$LATEST")
        self.send_header("x-amzn-RequestId", handle.request_id)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for chunk in handle:
                self._write_chunk(encode_blob_event("PayloadChunk", chunk))
            complete: dict[str, str] = {}
            if handle.error is not None:
                document = handle.error.document()
                complete["ErrorCode"] = str(document.get("errorType") or handle.error.error_type)
                complete["ErrorDetails"] = str(document.get("errorMessage", ""))
            if handle.tail_log:
                complete["LogResult"] = handle.log_result()
            self._write_chunk(encode_event("InvokeComplete", complete))
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:  # the caller left: the invocation runs on, as on Lambda
            self.close_connection = True
            for _ in handle:
                pass

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


def function_description(spec: FunctionSpec) -> dict[str, Any]:
    """``GetFunction``'s answer: the configuration, and the code's location (a ``file://`` URI locally)."""
    configuration: dict[str, Any] = {
        "FunctionName": spec.name,
        "FunctionArn": spec.arn,
        "Handler": spec.handler,
        "Timeout": int(spec.timeout_s),
        "MemorySize": spec.memory_mb,
        "Version": "$LATEST",
        "State": "Active",
        "PackageType": "Zip",
        "Environment": {"Variables": dict(spec.environment)},
        "Layers": [{"Arn": Path(directory).resolve().as_uri()} for directory in spec.code_dirs[1:]],
    }
    return {
        "Configuration": configuration,
        "Code": {"RepositoryType": "S3", "Location": spec.task_root.resolve().as_uri()},
    }


def _is_json(payload: bytes) -> bool:
    try:
        json.loads(payload)
    except ValueError:
        return False
    return True
