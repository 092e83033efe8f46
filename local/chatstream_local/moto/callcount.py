"""Counting the AWS calls each function makes, inside the local AWS emulator (moto), for the benchmark.

``python -m chatstream_local.moto.server --count-calls`` wraps moto's WSGI app in :class:`CountingMiddleware`. A call
is attributed to the function that made it by the application id in its User-Agent (``app/<label>``: botocore adds
it from ``AWS_SDK_UA_APP_ID``, which the benchmark sets per function); calls without one (the local stack's own:
the event source mapping's ``GetRecords``, set-up) are not counted. A call is counted by its ``X-Amz-Target``
operation, with what AWS bills for it:

- ``PutRecords``: records, payload bytes, on-demand ingest units (each record rounded up to 1 KB) and provisioned
  PUT payload units (25 KB chunks);
- DynamoDB writes: items written and write request units (1 KB of item each, twice for a transaction);
- DynamoDB reads: read request units (4 KB of returned data each, at least one per request; half for an
  eventually consistent read).

Counting in the emulator, rather than in a forwarder between the functions and moto, adds no HTTP hop (and no
process) to the calls it measures. ``seconds`` is the time moto took to answer (its own queueing not included).
Control, on moto's port: ``GET /__bench/counts``, ``GET /__bench/timeline`` (the latest calls, in order),
``GET /__bench/idle`` (``{"idle_s"}``: seconds since the last counted call ended, ``null`` before the first),
``POST /__bench/reset``.
"""

from __future__ import annotations

import base64
import collections
import io
import json
import math
import re
import threading
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

CONTROL_PREFIX = "/__bench/"
CALLER_ENV = "AWS_SDK_UA_APP_ID"  # botocore's setting for the User-Agent's app/<id>
_CALLER = re.compile(r"(?:^|\s)app/([A-Za-z0-9!#$%&'*+\-.^_`|~]+)")
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
        self.last_end: float | None = None  # time.monotonic() when the latest call ended (kept across resets)

    def add(self, label: str, operation: str, count: OpCount, started_at: float) -> None:
        with self._lock:
            self._counts[label].setdefault(operation, OpCount()).add(count)
            self.calls.append((started_at, count.seconds, label, operation, count.items))
            self.last_end = time.monotonic()

    def idle_s(self) -> float | None:
        """Seconds since the latest call ended (None before the first)."""
        with self._lock:
            return None if self.last_end is None else time.monotonic() - self.last_end

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


def caller_of(user_agent: str) -> str | None:
    """The application id a botocore User-Agent carries (``app/<id>``), if any."""
    match = _CALLER.search(user_agent)
    return match.group(1) if match else None


StartResponse = Any  # WSGI's start_response callable
WsgiApp = Any


class CountingMiddleware:
    """Counts the calls that carry an application id, and answers the ``/__bench/`` control paths."""

    def __init__(self, app: WsgiApp, counters: Counters | None = None) -> None:
        self.app = app
        self.counters = counters or Counters()

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = str(environ.get("PATH_INFO", ""))
        if path.startswith(CONTROL_PREFIX):
            return self._control(path[len(CONTROL_PREFIX) :], str(environ.get("REQUEST_METHOD")), start_response)
        target = str(environ.get("HTTP_X_AMZ_TARGET", ""))
        caller = caller_of(str(environ.get("HTTP_USER_AGENT", "")))
        if not target or caller is None:
            return self.app(environ, start_response)
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        started_at, started = time.time(), time.perf_counter()
        result = self.app(environ, start_response)
        try:
            data = b"".join(result)
        finally:
            close: Callable[[], None] | None = getattr(result, "close", None)
            if close is not None:
                close()
        operation = target.rsplit(".", 1)[-1]
        try:
            count = measure(operation, json.loads(body or b"{}"), json.loads(data or b"{}"))
        except ValueError:
            count = OpCount(calls=1)
        count.seconds = time.perf_counter() - started
        self.counters.add(caller, operation, count, started_at)
        return [data]

    def _control(self, action: str, method: str, start_response: StartResponse) -> list[bytes]:
        if action == "counts" and method == "GET":
            body = json.dumps(self.counters.snapshot()).encode()
        elif action == "idle" and method == "GET":
            body = json.dumps({"idle_s": self.counters.idle_s()}).encode()
        elif action == "timeline" and method == "GET":
            body = json.dumps(self.counters.timeline()).encode()
        elif action == "reset" and method == "POST":
            self.counters.reset()
            body = b"{}"
        else:
            start_response("404 Not Found", [("Content-Type", "application/json")])
            return [json.dumps({"message": f"no such control: {method} {CONTROL_PREFIX}{action}"}).encode()]
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]
