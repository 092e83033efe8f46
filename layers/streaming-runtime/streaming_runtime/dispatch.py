"""Serve one invocation: call the handler, then stream, buffer or report what it produced.

What a handler may produce:

* a ``StreamingResponse`` -> streamed as an HTTP integration response (prelude, 8 NULs, body);
* an iterator (e.g. the handler is a generator function) of ``str``/``bytes`` -> for a Function URL
  event an HTTP 200 ``application/octet-stream`` stream, otherwise the raw bytes, streamed;
* anything else -> for a Function URL event, a dict with ``statusCode`` becomes prelude + body;
  otherwise the value is marshalled as the managed runtime does and posted as one buffered response.

An exception before the first body byte is posted to ``/invocation/{id}/error``; after it, the stream
ends with the error trailers. Either way the runtime goes on to the next invocation.

However a stream ends, its end is written (in a ``finally``): the body's source is closed (a generator's
``finally`` runs), then the last chunk goes out with the trailers of the first error (the body's, or its
``close()``'s). A write that failed leaves the connection in an unknown state, so it is dropped instead, and the
Runtime API sees the response end at once rather than wait for the rest until the function times out; the
``OSError`` goes on to the loop, which serves the next invocation on a new connection.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from awslambdaric.lambda_runtime_exception import FaultException

from streaming_runtime.context import make_context
from streaming_runtime.errors import ErrorReport
from streaming_runtime.logs import RuntimeLog, set_request_id
from streaming_runtime.marshalling import (
    HTTP_INTEGRATION_RESPONSE,
    OCTET_STREAM,
    buffered_result,
    decode_event,
    encode_chunks,
    http_prelude,
    http_result_from_dict,
    is_function_url_event,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from streaming_runtime.client import RuntimeClient
    from streaming_runtime.context import Invocation
    from streaming_runtime.response import StreamingResponse
    from streaming_runtime.streaming import ChunkedBody

    Handler = Callable[[object, object], object]

TRACE_ID_ENV = "_X_AMZN_TRACE_ID"


class _Buffered:
    __slots__ = ("body", "content_type")

    def __init__(self, body: bytes, content_type: str) -> None:
        self.body = body
        self.content_type = content_type


class _Streamed:
    """A stream whose first body chunk has been produced (so the handler got past its first byte)."""

    __slots__ = ("content_type", "prelude", "first", "rest", "source")

    def __init__(self, content_type: str, prelude: bytes, first: bytes, rest: Iterator[bytes], source: object) -> None:
        self.content_type = content_type
        self.prelude = prelude
        self.first = first
        self.rest = rest
        self.source = source


def handle_invocation(
    client: RuntimeClient, handler: Handler, invocation: Invocation, log: RuntimeLog | None = None
) -> None:
    """Run the handler for one invocation and deliver its result (or its error) to the Runtime API.

    Raises ``OSError`` when the connection to the Runtime API failed, and ``RuntimeAPIError`` when it refused
    what was sent; the handler's own failures are reported, never raised.
    """
    log = log or RuntimeLog.standard()
    _set_trace_id(invocation.trace_id)
    set_request_id(invocation.request_id)
    request_id = invocation.request_id
    try:
        reply = _produce(handler, invocation, log)
    except FaultException as fault:
        _report_error(client, log, ErrorReport.from_fault(fault, request_id))
        return
    except Exception as exc:
        _report_error(client, log, ErrorReport.from_exception(exc, request_id))
        return
    if isinstance(reply, _Buffered):
        client.post_response(request_id, reply.body, reply.content_type)
    else:
        _stream(client, request_id, reply, log)


def _report_error(client: RuntimeClient, log: RuntimeLog, report: ErrorReport) -> None:
    log.error(report)
    client.post_error(report.request_id, report)


def _produce(handler: Handler, invocation: Invocation, log: RuntimeLog) -> _Buffered | _Streamed:
    context = make_context(invocation)
    event = decode_event(invocation.body, invocation.content_type)
    result = handler(event, context)
    streaming_response = _streaming_response_type()
    if streaming_response is not None and isinstance(result, streaming_response):
        prelude = http_prelude(result.status_code, result.headers, result.cookies)
        return _start_stream(HTTP_INTEGRATION_RESPONSE, prelude, result.body, log)
    if isinstance(result, Iterator):
        if is_function_url_event(event):
            prelude = http_prelude(200, {"Content-Type": OCTET_STREAM}, ())
            return _start_stream(HTTP_INTEGRATION_RESPONSE, prelude, result, log)
        return _start_stream(OCTET_STREAM, b"", result, log)
    if is_function_url_event(event) and isinstance(result, dict) and "statusCode" in result:
        status, headers, cookies, body = http_result_from_dict(result)
        prelude = http_prelude(status, headers, cookies)
        return _start_stream(HTTP_INTEGRATION_RESPONSE, prelude, [body], log)
    body, content_type = buffered_result(result)
    return _Buffered(body, content_type)


def _streaming_response_type() -> type[StreamingResponse] | None:
    # A handler that returns a StreamingResponse has imported it; the runtime does not need to.
    module = sys.modules.get("streaming_runtime.response")
    return None if module is None else module.StreamingResponse


def _start_stream(content_type: str, prelude: bytes, body: Iterable[object], log: RuntimeLog) -> _Streamed:
    """Pull the first non-empty chunk: until it exists, a failure is still an ordinary invocation error.

    The body is closed then; what its ``close()`` raises is logged (the invocation's error is the first one).
    """
    source = iter(body)
    chunks = encode_chunks(source)
    try:
        first = next(chunks, b"")
    except BaseException:
        closing = _close(source)
        if closing is not None:
            log.error(closing)
        raise
    return _Streamed(content_type, prelude, first, chunks, source)


def _stream(client: RuntimeClient, request_id: str, reply: _Streamed, log: RuntimeLog) -> None:
    body = client.begin_stream(request_id, reply.content_type)
    failure: ErrorReport | None = None
    try:
        failure = _write_body(body, reply, request_id)
    except BaseException as exc:  # a failed write (OSError), or the body raised SystemExit, KeyboardInterrupt…
        if not body.failed:
            failure = ErrorReport.from_exception(exc, request_id)
        raise
    finally:
        closing = _close(reply.source, request_id)
        for report in (failure, closing):
            if report is not None:
                log.error(report)
        failure = failure or closing
        client.end_stream(body, failure.trailers() if failure is not None else None)


def _write_body(body: ChunkedBody, reply: _Streamed, request_id: str) -> ErrorReport | None:
    """Write the prelude and every chunk; the body's own failure is returned (a write's is raised)."""
    body.write(reply.prelude)
    body.write(reply.first)
    while True:
        try:
            chunk = next(reply.rest)
        except StopIteration:
            return None
        except Exception as exc:
            return ErrorReport.from_exception(exc, request_id)
        body.write(chunk)


def _close(source: object, request_id: str = "") -> ErrorReport | None:
    """Close the body's source (a generator's ``finally`` runs); what it raised doing so, if anything."""
    close = getattr(source, "close", None)
    if not callable(close):
        return None
    try:
        close()
    except Exception as exc:
        return ErrorReport.from_exception(exc, request_id)
    return None


def _set_trace_id(trace_id: str | None) -> None:
    if trace_id:
        os.environ[TRACE_ID_ENV] = trace_id
    else:
        os.environ.pop(TRACE_ID_ENV, None)
