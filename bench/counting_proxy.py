"""A counting forwarder between the functions and the local AWS emulator (moto), for the benchmark.

Each function gets its own listener (``AWS_ENDPOINT_URL_DYNAMODB`` / ``AWS_ENDPOINT_URL_KINESIS`` point at it),
so every call is attributed to the function that made it. A call is forwarded unchanged to the upstream URL and
counted by its ``X-Amz-Target`` operation, with what AWS bills for it:

- ``PutRecords``: records, payload bytes, on-demand ingest units (each record rounded up to 1 KB) and provisioned
  PUT payload units (25 KB chunks);
- DynamoDB writes: items written and write request units (1 KB of item each, twice for a transaction);
- DynamoDB reads: read request units (4 KB of returned data each, at least one per request; half for an
  eventually consistent read).

It runs as its own process (``python -m bench.counting_proxy relay proxy consumer``), so its work does not share
the benchmark's interpreter. It prints one JSON line ``{"<label>": <port>, ...}`` and serves until killed.
Control, on any listener: ``POST /__bench/upstream`` (body: the upstream URL), ``GET /__bench/counts``,
``GET /__bench/timeline`` (the latest calls, in order), ``POST /__bench/reset``.
"""

from __future__ import annotations

import base64
import collections
import http.client
import json
import math
import sys
import threading
import time
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

CONTROL_PREFIX = "/__bench/"
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "content-length"})
WRITE_OPS = frozenset({"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"})
READ_OPS = frozenset({"GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems"})
KB = 1024


@dataclass
class OpCount:
    """What one operation of one function cost, summed over its calls."""

    calls: int = 0
    items: int = 0  # records put, items written, items returned
    payload_bytes: int = 0
    write_units: float = 0.0  # DynamoDB write request units
    read_units: float = 0.0  # DynamoDB read request units
    ingest_kb: int = 0  # Kinesis on-demand data in, records rounded up to 1 KB
    put_payload_units: int = 0  # Kinesis provisioned PUT payload units (25 KB)
    seconds: float = 0.0  # time spent upstream

    def add(self, other: OpCount) -> None:
        for name, value in asdict(other).items():
            setattr(self, name, getattr(self, name) + value)


def _item_bytes(item: Any) -> int:
    """An item's size as DynamoDB counts it, approximated by its JSON wire form."""
    return len(json.dumps(item, separators=(",", ":")).encode())


def measure(operation: str, request: dict[str, Any], response: dict[str, Any]) -> OpCount:
    """The billed units of one call, from its request and response bodies."""
    count = OpCount(calls=1)
    if operation == "PutRecords":
        for record in request.get("Records", []):
            size = len(base64.b64decode(record.get("Data", ""))) + len(str(record.get("PartitionKey", "")).encode())
            count.items += 1
            count.payload_bytes += size
            count.ingest_kb += max(1, math.ceil(size / KB))
            count.put_payload_units += max(1, math.ceil(size / (25 * KB)))
    elif operation == "BatchWriteItem":
        for requests in request.get("RequestItems", {}).values():
            for write in requests:
                item = (write.get("PutRequest") or {}).get("Item") or (write.get("DeleteRequest") or {}).get("Key")
                size = _item_bytes(item)
                count.items += 1
                count.payload_bytes += size
                count.write_units += max(1, math.ceil(size / KB))
    elif operation == "TransactWriteItems":
        for write in request.get("TransactItems", []):
            size = _item_bytes(write)
            count.items += 1
            count.payload_bytes += size
            count.write_units += 2 * max(1, math.ceil(size / KB))
    elif operation in WRITE_OPS:
        size = _item_bytes(request.get("Item") or request.get("Key"))
        count.items = 1
        count.payload_bytes = size
        count.write_units = max(1, math.ceil(size / KB))
    elif operation in READ_OPS:
        items = response.get("Items")
        returned = items if isinstance(items, list) else ([response["Item"]] if "Item" in response else [])
        size = sum(_item_bytes(item) for item in returned)
        units = max(1, math.ceil(size / (4 * KB)))
        count.items = len(returned)
        count.payload_bytes = size
        count.read_units = units if request.get("ConsistentRead") else units / 2
    return count


class Counters:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, dict[str, OpCount]] = collections.defaultdict(dict)
        self.calls: collections.deque[tuple[float, float, str, str, int]] = collections.deque(maxlen=20_000)

    def add(self, label: str, operation: str, count: OpCount, started_at: float) -> None:
        with self._lock:
            self._counts[label].setdefault(operation, OpCount()).add(count)
            self.calls.append((started_at, count.seconds, label, operation, count.items))

    def timeline(self) -> list[tuple[float, float, str, str, int]]:
        """The latest calls: (epoch seconds at start, seconds, function, operation, items)."""
        with self._lock:
            return list(self.calls)

    def snapshot(self) -> dict[str, dict[str, dict[str, float]]]:
        with self._lock:
            return {label: {op: asdict(c) for op, c in ops.items()} for label, ops in self._counts.items()}

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()
            self.calls.clear()


class _Shared:
    def __init__(self) -> None:
        self.upstream: tuple[str, int] | None = None
        self.counters = Counters()
        self.local = threading.local()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256

    def __init__(self, label: str, shared: _Shared) -> None:
        self.label = label
        self.shared = shared
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are separate writes: no 40 ms delayed-ACK stall per call
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        return

    def _send(self, status: int, body: bytes, headers: list[tuple[str, str]] | None = None) -> None:
        self.send_response(status)
        for name, value in headers or [("Content-Type", "application/json")]:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path == f"{CONTROL_PREFIX}counts":
            self._send(200, json.dumps(self.server.shared.counters.snapshot()).encode())
        elif self.path == f"{CONTROL_PREFIX}timeline":
            self._send(200, json.dumps(self.server.shared.counters.timeline()).encode())
        else:
            self._forward(b"")

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        shared = self.server.shared
        if self.path == f"{CONTROL_PREFIX}upstream":
            parts = urlsplit(body.decode().strip())
            shared.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
            self._send(200, b"{}")
        elif self.path == f"{CONTROL_PREFIX}reset":
            shared.counters.reset()
            self._send(200, b"{}")
        else:
            self._forward(body)

    def _connection(self) -> http.client.HTTPConnection:
        shared = self.server.shared
        assert shared.upstream is not None
        connection: http.client.HTTPConnection | None = getattr(shared.local, "connection", None)
        if connection is None:
            connection = http.client.HTTPConnection(*shared.upstream, timeout=60)
            shared.local.connection = connection
        return connection

    def _forward(self, body: bytes) -> None:
        shared = self.server.shared
        if shared.upstream is None:
            self._send(503, b'{"message":"the benchmark has not set the upstream yet"}')
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        started_at = time.time()
        started = time.perf_counter()
        for attempt in (1, 2):  # a kept-alive connection the upstream closed is retried once on a new one
            connection = self._connection()
            try:
                connection.request(self.command, self.path, body=body, headers=headers)
                response = connection.getresponse()
                data = response.read()
                break
            except (http.client.HTTPException, OSError):
                connection.close()
                shared.local.connection = None
                if attempt == 2:
                    raise
        if response.will_close:
            connection.close()
            shared.local.connection = None
        elapsed = time.perf_counter() - started
        target = self.headers.get("X-Amz-Target", "")
        if target:
            operation = target.rsplit(".", 1)[-1]
            try:
                count = measure(operation, json.loads(body or b"{}"), json.loads(data or b"{}"))
            except ValueError:
                count = OpCount(calls=1)
            count.seconds = elapsed
            shared.counters.add(self.server.label, operation, count, started_at)
        out = [(k, v) for k, v in response.getheaders() if k.lower() not in _HOP_BY_HOP]
        self._send(response.status, data, out)


def main(labels: list[str]) -> int:
    shared = _Shared()
    servers = {label: _Server(label, shared) for label in labels}
    for server in servers.values():
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
    sys.stdout.write(json.dumps({label: server.server_address[1] for label, server in servers.items()}) + "\n")
    sys.stdout.flush()
    threading.Event().wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
