"""A fault-injecting HTTP forwarder between the functions and the AWS emulator (moto).

The functions reach Kinesis, DynamoDB and SQS through botocore's standard endpoint variables
(``AWS_ENDPOINT_URL_KINESIS`` …); pointing those at a :class:`FaultProxy` puts it in the path
without any change to the product code. It reads the operation from ``X-Amz-Target`` (JSON
protocols) or the ``Action`` form field (SQS query protocol) and, at the configured rates, answers
as the service does when it throttles or fails instead of forwarding:

- Kinesis ``PutRecords``: a whole-call ``400 ProvisionedThroughputExceededException``, or a
  partial failure: some entries are *not forwarded* and come back in a ``200`` with
  ``FailedRecordCount`` and a per-entry ``ErrorCode``, the others are written;
- DynamoDB writes and reads: ``400 ProvisionedThroughputExceededException`` or
  ``ThrottlingException``; ``BatchWriteItem`` may also hold back some requests as
  ``UnprocessedItems`` (the rest are written);
- SQS: ``400 ThrottlingException`` (JSON protocol) or ``RequestThrottled`` (query protocol).

The *fault budget*: one request body (a retry resends the same bytes) is faulted at most
``max_faults_per_request`` times, so the SDK's and the product's own retries always get through in
the end; faults test the retry paths, not how long a retry budget is.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import http.client
import json
import random
import threading
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

KINESIS = "Kinesis_20131202."
DYNAMODB = "DynamoDB_20120810."
SQS_JSON = "AmazonSQS."
DYNAMODB_WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"})
DYNAMODB_READS = frozenset({"GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems"})
DYNAMODB_ERROR_PREFIX = "com.amazonaws.dynamodb.v20120810#"
CORAL_ERROR_PREFIX = "com.amazon.coral.availability#"
HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "x-amz-crc32"})


@dataclass(frozen=True)
class FaultRates:
    """Probabilities (0 to 1) per matching request."""

    kinesis_throttle: float = 0.0  # PutRecords: whole call 400 ProvisionedThroughputExceededException
    kinesis_partial: float = 0.0  # PutRecords: some entries fail (200, FailedRecordCount)
    dynamodb_write_throttle: float = 0.0
    dynamodb_read_throttle: float = 0.0
    dynamodb_unprocessed: float = 0.0  # BatchWriteItem: some requests come back as UnprocessedItems
    sqs_error: float = 0.0
    max_faults_per_request: int = 2
    seed: int = 0

    @classmethod
    def chaos(cls, seed: int = 0) -> FaultRates:
        """The rates `make chaos` runs with."""
        return cls(
            kinesis_throttle=0.1,
            kinesis_partial=0.1,
            dynamodb_write_throttle=0.05,
            dynamodb_read_throttle=0.05,
            dynamodb_unprocessed=0.1,
            sqs_error=0.2,
            seed=seed,
        )


def fault_summary(counts: Mapping[str, int]) -> str:
    """``kind:count,…`` by kind, or ``none``: how the ``chaos:`` line shows the faults injected."""
    return ",".join(f"{name}:{count}" for name, count in sorted(counts.items())) or "none"


@dataclass
class FaultStats:
    counts: collections.Counter[str] = field(default_factory=collections.Counter)
    forwarded: int = 0


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes


def _json_reply(status: int, payload: Any, content_type: str = "application/x-amz-json-1.0") -> Reply:
    body = json.dumps(payload).encode()
    headers = {"Content-Type": content_type, "x-amzn-RequestId": "chaos-" + hashlib.md5(body).hexdigest()[:16]}
    if content_type.endswith("1.0"):
        headers["x-amz-crc32"] = str(zlib.crc32(body) & 0xFFFFFFFF)
    return Reply(status, headers, body)


class FaultProxy:
    """Forward to ``upstream`` (``http://127.0.0.1:<port>``), injecting faults; ``.url`` once started."""

    def __init__(
        self, upstream: str | Callable[[], str], rates: FaultRates, *, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self._upstream = upstream
        self.rates = rates
        self.stats = FaultStats()
        self.enabled = threading.Event()
        self.enabled.set()
        self._random = random.Random(rates.seed)
        self._lock = threading.Lock()
        self._faulted: collections.Counter[str] = collections.Counter()
        self._server = _Server((host, port), _Handler, self)
        self._thread: threading.Thread | None = None

    def upstream(self) -> tuple[str, int]:
        """Where to forward: loopback only. A callable is asked each time (the emulator may start later)."""
        url = self._upstream() if callable(self._upstream) else self._upstream
        split = urlsplit(url)
        if split.hostname not in ("127.0.0.1", "localhost") or not split.port:
            raise ConnectionError(f"the fault proxy forwards to a loopback port only, not {url!r}")
        return split.hostname, split.port

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FaultProxy:
        self._thread = threading.Thread(
            target=lambda: self._server.serve_forever(poll_interval=0.05), name="fault-proxy", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- decisions --------------------------------------------------------------------------------------
    def _roll(self, rate: float) -> bool:
        if rate <= 0 or not self.enabled.is_set():
            return False
        with self._lock:
            return self._random.random() < rate

    def _spend(self, body: bytes, kind: str) -> bool:
        """Take one fault from this request's budget; False when the budget is spent."""
        key = hashlib.sha256(body).hexdigest()
        with self._lock:
            if self._faulted[key] >= self.rates.max_faults_per_request:
                return False
            self._faulted[key] += 1
            self.stats.counts[kind] += 1
        return True

    def _pick(self, count: int) -> set[int]:
        """Indexes of the entries to fail: at least one, not always all."""
        with self._lock:
            chosen = {i for i in range(count) if self._random.random() < 0.4}
            return chosen or {self._random.randrange(count)}

    def decide(self, target: str, body: bytes, forward: Callable[[bytes], Reply]) -> Reply:
        """The reply for one request: a fault, or ``forward(body)``'s (possibly with a fault merged in)."""
        if target.startswith(KINESIS):
            return self._kinesis(target.removeprefix(KINESIS), body, forward)
        if target.startswith(DYNAMODB):
            return self._dynamodb(target.removeprefix(DYNAMODB), body, forward)
        if target.startswith(SQS_JSON) or target.startswith("sqs:"):
            return self._sqs(target, body, forward)
        return forward(body)

    def _kinesis(self, operation: str, body: bytes, forward: Callable[[bytes], Reply]) -> Reply:
        if operation != "PutRecords":
            return forward(body)
        json11 = "application/x-amz-json-1.1"
        if self._roll(self.rates.kinesis_throttle) and self._spend(body, "kinesis_throttle"):
            error = {"__type": "ProvisionedThroughputExceededException", "message": "Rate exceeded for stream (chaos)"}
            return _json_reply(400, error, json11)
        if not self._roll(self.rates.kinesis_partial):
            return forward(body)
        request = json.loads(body)
        records = request.get("Records", [])
        if not records or not self._spend(body, "kinesis_partial"):
            return forward(body)
        failed = self._pick(len(records))
        kept = [record for i, record in enumerate(records) if i not in failed]
        written: list[dict[str, Any]] = []
        if kept:
            upstream = forward(json.dumps({**request, "Records": kept}).encode())
            if upstream.status != 200:
                return upstream
            written = json.loads(upstream.body)["Records"]
        results, written_iter = [], iter(written)
        for i in range(len(records)):
            if i in failed:
                results.append(
                    {"ErrorCode": "ProvisionedThroughputExceededException", "ErrorMessage": "Rate exceeded (chaos)"}
                )
            else:
                results.append(next(written_iter))
        failed_count = sum(1 for result in results if "ErrorCode" in result)
        return _json_reply(200, {"FailedRecordCount": failed_count, "Records": results}, json11)

    def _dynamodb(self, operation: str, body: bytes, forward: Callable[[bytes], Reply]) -> Reply:
        write = operation in DYNAMODB_WRITES
        rate = self.rates.dynamodb_write_throttle if write else self.rates.dynamodb_read_throttle
        if (write or operation in DYNAMODB_READS) and self._roll(rate):
            kind = "dynamodb_write_throttle" if write else "dynamodb_read_throttle"
            if self._spend(body, kind):
                name = "ProvisionedThroughputExceededException" if self._roll(0.5) else "ThrottlingException"
                prefix = DYNAMODB_ERROR_PREFIX if name.startswith("Prov") else CORAL_ERROR_PREFIX
                return _json_reply(400, {"__type": prefix + name, "message": "Throughput exceeded (chaos)"})
        if operation == "BatchWriteItem" and self._roll(self.rates.dynamodb_unprocessed):
            return self._unprocessed(body, forward)
        return forward(body)

    def _unprocessed(self, body: bytes, forward: Callable[[bytes], Reply]) -> Reply:
        request = json.loads(body)
        flat = [(table, entry) for table, entries in request.get("RequestItems", {}).items() for entry in entries]
        if not flat or not self._spend(body, "dynamodb_unprocessed"):
            return forward(body)
        held = self._pick(len(flat))
        kept: dict[str, list[Any]] = {}
        unprocessed: dict[str, list[Any]] = {}
        for i, (table, entry) in enumerate(flat):
            (unprocessed if i in held else kept).setdefault(table, []).append(entry)
        response: dict[str, Any] = {"UnprocessedItems": {}}
        if kept:
            upstream = forward(json.dumps({**request, "RequestItems": kept}).encode())
            if upstream.status != 200:
                return upstream
            response = json.loads(upstream.body)
        for table, entries in unprocessed.items():
            response.setdefault("UnprocessedItems", {}).setdefault(table, []).extend(entries)
        return _json_reply(200, response)

    def _sqs(self, target: str, body: bytes, forward: Callable[[bytes], Reply]) -> Reply:
        if not (self._roll(self.rates.sqs_error) and self._spend(body, "sqs_error")):
            return forward(body)
        if target.startswith(SQS_JSON):
            error = {"__type": "com.amazon.coral.availability#ThrottlingException", "message": "Rate exceeded (chaos)"}
            reply = _json_reply(400, error)
            return Reply(400, {**reply.headers, "x-amzn-query-error": "RequestThrottled;Sender"}, reply.body)
        xml = (
            b"<ErrorResponse><Error><Type>Sender</Type><Code>RequestThrottled</Code>"
            b"<Message>Rate exceeded (chaos)</Message></Error><RequestId>chaos</RequestId></ErrorResponse>"
        )
        return Reply(400, {"Content-Type": "text/xml"}, xml)


def target_of(headers: Any, body: bytes) -> str:
    """``X-Amz-Target``, or ``sqs:<Action>`` for an SQS query-protocol request, or ``""``."""
    target = headers.get("X-Amz-Target") or ""
    if target:
        return str(target)
    content_type = headers.get("Content-Type") or ""
    if "x-www-form-urlencoded" in content_type:
        with contextlib.suppress(ValueError, UnicodeDecodeError):
            action = parse_qs(body.decode()).get("Action", [""])[0]
            if action:
                return f"sqs:{action}"
    return ""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], proxy: FaultProxy) -> None:
        super().__init__(address, handler)
        self.proxy = proxy

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away is not an error worth a traceback."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    _conn: http.client.HTTPConnection | None = None

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """Quiet."""

    def _upstream(self) -> http.client.HTTPConnection:
        conn = self._conn
        if conn is None:
            host, port = self.server.proxy.upstream()
            conn = http.client.HTTPConnection(host, port, timeout=60)
            self._conn = conn
        return conn

    def _forward(self, body: bytes) -> Reply:
        # Not the Host the function addressed (this proxy's): moto answers only a Host naming its own address
        headers = {key: value for key, value in self.headers.items() if key.lower() not in {*HOP_BY_HOP, "host"}}
        headers["Content-Length"] = str(len(body))
        for attempt in range(2):  # a kept-alive upstream connection may have been closed by moto
            conn = self._upstream()
            try:
                conn.request(self.command, self.path, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read()
            except (ConnectionError, http.client.HTTPException):
                conn.close()
                self._conn = None
                if attempt:
                    raise
                continue
            self.server.proxy.stats.forwarded += 1
            reply_headers = {key: value for key, value in response.getheaders() if key.lower() not in HOP_BY_HOP}
            if response.getheader("x-amz-crc32") and body is not None:
                reply_headers["x-amz-crc32"] = str(zlib.crc32(data) & 0xFFFFFFFF)
            return Reply(response.status, reply_headers, data)
        raise ConnectionError("unreachable")

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        try:
            reply = self.server.proxy.decide(target_of(self.headers, body), body, self._forward)
        except (ConnectionError, OSError, http.client.HTTPException, ValueError) as err:
            reply = Reply(502, {"Content-Type": "text/plain"}, f"fault proxy: upstream failed: {err}".encode())
        self.send_response(reply.status)
        for key, value in reply.headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        self.wfile.write(reply.body)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _handle  # noqa: N815 - http.server's naming
