"""The local Bedrock runtime endpoint: ``ConverseStream`` over HTTP with real event stream framing.

boto3's ``bedrock-runtime`` client, pointed here with ``endpoint_url=`` or ``AWS_ENDPOINT_URL_BEDROCK_RUNTIME``,
calls ``converse_stream`` and reads the reply with its own event stream parser (prelude, headers, CRC32s; see
:mod:`chatstream_local.eventstream`).

Route: ``POST /model/{modelId}/converse-stream`` (``modelId`` URL-encoded; any model id, inference profile id or
ARN is accepted). The request is validated as Bedrock does (:mod:`chatstream_local.bedrock.converse`); the reply
is the local model's (:mod:`chatstream_local.bedrock.model`).

Events, in Bedrock's order: ``messageStart``, ``contentBlockDelta``…, ``contentBlockStop``, ``messageStop``
(``end_turn``, ``max_tokens`` or ``stop_sequence``), ``metadata`` (usage, latency; ``outputTokens`` = deltas sent,
reasoning included). A reply with reasoning (``/think``) streams it first as its own content block, as Bedrock does
for Claude's extended thinking: ``contentBlockDelta`` with ``delta.reasoningContent.text`` per word, then one with
``delta.reasoningContent.signature``, then ``contentBlockStop`` (index 0); the reply's text is block 1. A reply that
calls tools (``/call``) streams each call after the text as a block of its own, as Bedrock does: ``contentBlockStart``
with ``start.toolUse`` (``toolUseId``, ``name``), ``contentBlockDelta``s with ``delta.toolUse.input`` (partial JSON
text), ``contentBlockStop``; then ``messageStop`` with ``tool_use``.

Deltas are spaced by ``CHATSTREAM_LOCAL_MODEL_DELAY_MS`` milliseconds (default 20; 0 = as fast as possible), or
the ``delay_ms`` constructor argument. Each event is written as its own HTTP chunk and flushed, so a client sees
the deltas arrive one after another. A client that disconnects ends its generation quietly.

Standalone: ``python -m chatstream_local.bedrock --port 4010``.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import logging
import os
import re
import signal
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from chatstream_local.bedrock.converse import InvalidRequest, parse_request
from chatstream_local.bedrock.model import plan_reply
from chatstream_local.eventstream import encode_event, encode_exception

if TYPE_CHECKING:
    from collections.abc import Sequence
    from io import BufferedIOBase
    from types import FrameType, TracebackType

    from chatstream_local.bedrock.converse import ConverseRequest
    from chatstream_local.bedrock.model import Reply

logger = logging.getLogger(__name__)

DELAY_ENV = "CHATSTREAM_LOCAL_MODEL_DELAY_MS"
DEFAULT_DELAY_MS = 20
EVENT_STREAM_CONTENT_TYPE = "application/vnd.amazon.eventstream"

_ROUTE = re.compile(r"^/model/(?P<model_id>[^/]+)/converse-stream$")
_DIGITS = re.compile(r"[0-9]+")

_DISCONNECTED = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError)


def delay_from_env() -> int:
    """``CHATSTREAM_LOCAL_MODEL_DELAY_MS`` as whole milliseconds (default 20)."""
    raw = os.environ.get(DELAY_ENV, "").strip()
    if not raw:
        return DEFAULT_DELAY_MS
    if not _DIGITS.fullmatch(raw):
        raise ValueError(f"{DELAY_ENV} must be a whole number of milliseconds >= 0, got {raw!r}")
    return int(raw)


class _ClientGone(Exception):
    """The client disconnected, or the server is stopping: end this stream without a word."""


class _ChunkedWriter:
    """HTTP/1.1 chunked transfer encoding; every chunk goes to the socket at once."""

    def __init__(self, wfile: BufferedIOBase) -> None:
        self._wfile = wfile

    def chunk(self, data: bytes) -> None:
        try:
            self._wfile.write(b"%x\r\n%b\r\n" % (len(data), data))
            self._wfile.flush()
        except _DISCONNECTED as err:
            raise _ClientGone from err

    def end(self) -> None:
        try:
            self._wfile.write(b"0\r\n\r\n")
            self._wfile.flush()
        except _DISCONNECTED as err:
            raise _ClientGone from err


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], model: LocalModelServer) -> None:
        super().__init__(address, _Handler)
        self.model = model

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Disconnects are expected (clients cancel); anything else is a bug worth one log line.
        logger.exception("local model: error serving %s", client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # each event is its own write: without this, the second waits for a delayed ACK
    server: _HTTPServer
    server_version = "chatstream-local-bedrock"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        logger.debug("local model: " + format, *args)

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except _DISCONNECTED:
            self.close_connection = True

    def do_POST(self) -> None:  # noqa: N802 - the base class's naming
        length = int(self.headers.get("Content-Length") or 0)
        raw_body = self.rfile.read(length) if length else b""
        match = _ROUTE.match(urlsplit(self.path).path)
        if match is None:
            self._send_error(404, "UnknownOperationException", f"No route for POST {self.path}")
            return
        model = self.server.model
        model._count_request(unquote(match["model_id"]))
        started = time.monotonic()
        try:
            request = parse_request(unquote(match["model_id"]), raw_body)
            reply = plan_reply(
                request.user_text,
                request.max_tokens,
                system=request.system,
                messages=request.messages,
                stop=request.stop_sequences,
                tools=request.tools,
                tool_results=request.tool_results,
            )
        except InvalidRequest as err:
            self._send_error(400, "ValidationException", str(err))
            return
        if reply.ending == "throttled":
            self._send_error(429, "ThrottlingException", "Too many requests, please wait before trying again.")
            return
        model._stream_opened()
        try:
            self._stream(request, reply, started)
        except _ClientGone:
            self.close_connection = True
            logger.debug("local model: stream for %s ended early (client gone or server stopping)", request.model_id)
        finally:
            model._stream_closed()

    def do_GET(self) -> None:  # noqa: N802 - the base class's naming
        self._send_error(404, "UnknownOperationException", f"No route for GET {self.path}")

    def _send_error(self, status: int, code: str, message: str) -> None:
        body = json.dumps({"message": message}).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("x-amzn-ErrorType", code)
        self.send_header("x-amzn-RequestId", str(uuid.uuid4()))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _stream(self, request: ConverseRequest, reply: Reply, started: float) -> None:
        model = self.server.model
        self.send_response(200)
        self.send_header("Content-Type", EVENT_STREAM_CONTENT_TYPE)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("x-amzn-RequestId", str(uuid.uuid4()))
        self.end_headers()
        writer = _ChunkedWriter(self.wfile)
        writer.chunk(encode_event("messageStart", {"role": "assistant"}))
        delay = model.delay_ms / 1000
        sent = 0
        block = 0
        if reply.reasoning:
            for delta in reply.reasoning:
                self._pace(sent, delay)
                writer.chunk(
                    encode_event(
                        "contentBlockDelta", {"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": delta}}}
                    )
                )
                model._count_delta()
                sent += 1
            if reply.signed:
                signature = base64.b64encode(hashlib.sha256(reply.reasoning_text.encode()).digest()).decode()
                writer.chunk(
                    encode_event(
                        "contentBlockDelta",
                        {"contentBlockIndex": 0, "delta": {"reasoningContent": {"signature": signature}}},
                    )
                )
            writer.chunk(encode_event("contentBlockStop", {"contentBlockIndex": 0}))
            block = 1
        for delta in reply.deltas:
            self._pace(sent, delay)
            writer.chunk(encode_event("contentBlockDelta", {"contentBlockIndex": block, "delta": {"text": delta}}))
            model._count_delta()
            sent += 1
        if reply.ending == "model_stream_error":
            writer.chunk(
                encode_exception(
                    "modelStreamErrorException",
                    {
                        "message": f"The model stream failed after {len(reply.deltas)} deltas (local /error-after).",
                        "originalStatusCode": 500,
                        "originalMessage": "Local model: injected stream error.",
                    },
                )
            )
        else:
            if reply.deltas or not (reply.reasoning or reply.calls):
                writer.chunk(encode_event("contentBlockStop", {"contentBlockIndex": block}))
                block += 1
            sent += self._stream_calls(writer, reply, block, sent, delay)
            output_tokens = sent
            writer.chunk(encode_event("messageStop", {"stopReason": reply.stop_reason}))
            usage = {
                "inputTokens": request.input_tokens,
                "outputTokens": output_tokens,
                "totalTokens": request.input_tokens + output_tokens,
            }
            latency_ms = int((time.monotonic() - started) * 1000)
            writer.chunk(encode_event("metadata", {"usage": usage, "metrics": {"latencyMs": latency_ms}}))
        writer.end()

    def _stream_calls(self, writer: _ChunkedWriter, reply: Reply, block: int, sent: int, delay: float) -> int:
        """Each tool call as its own content block, from ``block`` on; the deltas sent."""
        model = self.server.model
        deltas = 0
        for index, call in enumerate(reply.calls, block):
            start = {"toolUse": {"toolUseId": call.id, "name": call.name}}
            writer.chunk(encode_event("contentBlockStart", {"start": start, "contentBlockIndex": index}))
            for piece in call.pieces:
                self._pace(sent + deltas, delay)
                delta = {"toolUse": {"input": piece}}
                writer.chunk(encode_event("contentBlockDelta", {"contentBlockIndex": index, "delta": delta}))
                model._count_delta()
                deltas += 1
            writer.chunk(encode_event("contentBlockStop", {"contentBlockIndex": index}))
        return deltas

    def _pace(self, sent: int, delay: float) -> None:
        """Wait the model's delay before every delta but the first; a stopping server ends the stream."""
        stopping = self.server.model._stopping
        if stopping.wait(delay) if sent and delay else stopping.is_set():
            raise _ClientGone


class LocalModelServer:
    """The local Bedrock endpoint on ``host:port`` (port 0 picks a free one; see :attr:`url`)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, delay_ms: int | None = None) -> None:
        if delay_ms is not None and delay_ms < 0:
            raise ValueError(f"delay_ms must be >= 0, got {delay_ms}")
        self.delay_ms = delay_from_env() if delay_ms is None else delay_ms
        self._address = (host, port)
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._open_streams = 0
        self._stopping = threading.Event()
        self._requests = 0
        self._deltas_sent = 0
        self._model_ids: list[str] = []
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("LocalModelServer is not started")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def requests(self) -> int:
        """ConverseStream requests received (valid or not)."""
        with self._lock:
            return self._requests

    @property
    def deltas_sent(self) -> int:
        """``contentBlockDelta`` events written to clients, over all requests."""
        with self._lock:
            return self._deltas_sent

    @property
    def model_ids(self) -> tuple[str, ...]:
        """The (URL-decoded) model ids of the requests received, in order."""
        with self._lock:
            return tuple(self._model_ids)

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no stream is being written (e.g. after a client hung up); False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._open_streams == 0, timeout)

    def _stream_opened(self) -> None:
        with self._lock:
            self._open_streams += 1

    def _stream_closed(self) -> None:
        with self._idle:
            self._open_streams -= 1
            self._idle.notify_all()

    def _count_request(self, model_id: str) -> None:
        with self._lock:
            self._requests += 1
            self._model_ids.append(model_id)

    def _count_delta(self) -> None:
        with self._lock:
            self._deltas_sent += 1

    def start(self) -> None:
        if self._httpd is not None:
            raise RuntimeError("LocalModelServer is already started")
        self._stopping.clear()
        self._httpd = _HTTPServer(self._address, self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="local-bedrock", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop accepting requests and end the streams in flight; idempotent."""
        httpd, thread = self._httpd, self._thread
        if httpd is None:
            return
        self._stopping.set()
        httpd.shutdown()
        httpd.server_close()
        if thread is not None:
            thread.join()
        self._httpd = self._thread = None

    def __enter__(self) -> LocalModelServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chatstream_local.bedrock", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--delay-ms", type=int, default=None, help=f"default: ${DELAY_ENV} or {DEFAULT_DELAY_MS}")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    done = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    with LocalModelServer(args.host, args.port, args.delay_ms) as server:
        logger.info("chatstream local model ready at %s (delay %d ms)", server.url, server.delay_ms)
        done.wait()
    return 0
