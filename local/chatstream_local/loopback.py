"""The HTTP server base every local endpoint shares: threaded, on loopback, quiet about peers that leave.

Loopback is not a boundary a browser respects: any page the user opens may send requests to ``127.0.0.1:<port>``, and
through DNS rebinding (a name of the page's own that it points at 127.0.0.1) read the answers as its own origin. Such
a request names the page's host in its ``Host`` header: :func:`is_loopback_host` tells it from a local tool's.
"""

from __future__ import annotations

import contextlib
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Generic, TypeVar

OwnerT = TypeVar("OwnerT")
DISCARD_LIMIT = 64 * 1024 * 1024  # an oversized request body is read and dropped up to this size


def is_loopback_host(host: str | None, port: int) -> bool:
    """Whether a request's ``Host`` names the loopback address on ``port``: ``127.0.0.1``, ``localhost`` or
    ``[::1]``, with the port (what every HTTP client sends for a URL on that port)."""
    return host is not None and host.strip().lower() in {f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"}


class LoopbackServer(ThreadingHTTPServer, Generic[OwnerT]):
    """A ``ThreadingHTTPServer`` serving ``owner`` (the endpoint object its handlers work for)."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 128  # the default 5 resets connections when dozens of clients connect at once

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], owner: OwnerT) -> None:
        self.owner = owner
        super().__init__(address, handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):  # the peer went away (a killed runtime, a client that left)
            return
        super().handle_error(request, client_address)


class QuietHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 keep-alive, no access log, no Nagle delay.

    ``http.server`` writes a response's headers and body with separate ``send`` calls; with Nagle's algorithm on,
    the body waits for the peer's (delayed, ~40 ms) ACK of the headers. Lambda's and AWS's endpoints answer without
    such a stall, so every local endpoint sets ``TCP_NODELAY``.
    """

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        return

    def discard_body(self, length: int) -> None:
        """Read and drop a request body we refuse, so the client sees our answer rather than a reset."""
        remaining = min(length, DISCARD_LIMIT)
        with contextlib.suppress(OSError):
            while remaining > 0:
                data = self.rfile.read(min(remaining, 65536))
                if not data:
                    return
                remaining -= len(data)
