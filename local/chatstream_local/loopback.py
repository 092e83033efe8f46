"""The HTTP server base every local endpoint shares: threaded, on loopback, quiet about peers that leave.

Loopback is not a boundary a browser respects: any page the user opens may send requests to ``127.0.0.1:<port>``, and
through DNS rebinding (a name of the page's own that it points at 127.0.0.1) read the answers as its own origin. Such
a request names the page's host in its ``Host`` header: :func:`is_loopback_host` tells it from a local tool's. Every
endpoint on :class:`QuietHandler` answers ``403`` to a request whose ``Host`` is not the loopback address it listens
on, and, unless it serves browsers itself (the Function URL), to any request with an ``Origin`` (only a browser sends
one; the Lambda API, the Runtime API and their clients never do).
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    import socket

OwnerT = TypeVar("OwnerT")
DISCARD_LIMIT = 64 * 1024 * 1024  # an oversized request body is read and dropped up to this size


def is_loopback_host(host: str | None, port: int) -> bool:
    """Whether a request's ``Host`` names the loopback address on ``port``: ``127.0.0.1``, ``localhost`` or
    ``[::1]``, with the port (what every HTTP client sends for a URL on that port)."""
    return host is not None and host.strip().lower() in {f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"}


class ServingThread:
    """A server's ``serve_forever`` on a daemon thread of its own: :meth:`start` once (again, nothing), :meth:`stop`
    stops serving, waits for the thread and closes the socket (never started: it only closes)."""

    def __init__(self, server: ThreadingHTTPServer, name: str) -> None:
        self._server = server
        self._name = name
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=lambda: self._server.serve_forever(poll_interval=0.05), name=self._name, daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
        self._server.server_close()


class LoopbackServer(ThreadingHTTPServer, Generic[OwnerT]):
    """A ``ThreadingHTTPServer`` serving ``owner`` (the endpoint object its handlers work for), on ``address`` or on
    ``listener``, a socket already bound (and listening) whose port was handed out before the server existed."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 128  # the default 5 resets connections when dozens of clients connect at once

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        owner: OwnerT,
        listener: socket.socket | None = None,
    ) -> None:
        self.owner = owner
        if listener is None:
            super().__init__(address, handler)
            return
        super().__init__(listener.getsockname()[:2], handler, bind_and_activate=False)
        self.socket.close()
        self.socket = listener
        host, port = listener.getsockname()[:2]
        self.server_address = (host, port)
        self.server_name, self.server_port = host, port  # as HTTPServer.server_bind sets them

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
    serves_browsers = False  # True: a request with an Origin is the handler's to judge (the Function URL's CORS)

    def parse_request(self) -> bool:
        """http.server's parsing, then the module docstring's checks: a request that fails one gets ``403``."""
        if not super().parse_request():
            return False
        host, port = self.headers.get("Host"), int(self.connection.getsockname()[1])
        if not is_loopback_host(host, port):
            refusal = f"Host {host!r} is not this local endpoint's address: call http://127.0.0.1:{port}"
        elif not self.serves_browsers and "Origin" in self.headers:
            refusal = "this local endpoint answers local tools, not a browser page (the request has an Origin)"
        else:
            return True
        self.close_connection = True
        with contextlib.suppress(ValueError):
            self.discard_body(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"Message": f"Forbidden. {refusal}"}).encode()
        self.send_response(403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        return False

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
