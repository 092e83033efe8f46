"""moto in server mode for the local stack: moto's WSGI application with chatstream's patches, served by waitress.

``python -m chatstream_local.moto.server -H 127.0.0.1 -p PORT`` = ``python -m moto.server`` + the patches
(:data:`~chatstream_local.moto.fixes.FIXES`) + a server that keeps connections open. ``python -m moto.server``
runs on werkzeug's development server, which answers every response with ``Connection: close`` and starts a
thread per connection: every AWS call paid a new TCP connection, and under load the accept loop (which waits for
each new thread to start) became the queue every call waited in (~60 ms a GetItem at 50 chats, with moto's CPU
half idle). The same WSGI application (moto's ``DomainDispatcherApplication``) is served here by waitress:
HTTP/1.1 keep-alive, a fixed pool of worker threads. ``--count-calls`` wraps it in the benchmark's call counting
(:mod:`chatstream_local.moto.callcount`). Outermost, :class:`~chatstream_local.moto.loopback_only.LoopbackOnly`
refuses what a browser page could send (an ``Origin``, another ``Host``) and strips moto's CORS headers.

``--fd N`` serves a listening socket the parent bound and passed down (``-p`` then names its port): the local stack
binds port 0 itself, so no other process can take the port between its choice and this server's start.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
from typing import Any

import waitress
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

from chatstream_local.moto.callcount import CountingMiddleware
from chatstream_local.moto.fixes import FIXES
from chatstream_local.moto.loopback_only import LoopbackOnly
from chatstream_local.moto.patch import PatchTargetMoved

WORKER_THREADS = 16  # a long-polling ReceiveMessage holds one while it waits
CONNECTION_LIMIT = 2000  # keep-alive connections from every environment of every function


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="moto in server mode, with chatstream's patches")
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=5000)
    parser.add_argument("--fd", type=int, help="serve this inherited listening socket, bound to -H/-p, instead")
    parser.add_argument("--count-calls", action="store_true", help="count each function's calls (the benchmark's)")
    args = parser.parse_args(argv)
    try:
        FIXES.apply()
    except PatchTargetMoved as err:  # one line naming what moved, not a traceback
        raise SystemExit(f"moto server: {err}") from None
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)  # "task queue depth": load, not a fault
    os.environ.setdefault("MOTO_PORT", str(args.port))  # moto builds some URLs (queue URLs) from it
    app: Any = DomainDispatcherApplication(create_backend_app)
    if args.count_calls:
        app = CountingMiddleware(app)
    where: dict[str, Any] = (
        {"sockets": [socket.socket(fileno=args.fd)]} if args.fd is not None else {"host": args.host, "port": args.port}
    )
    waitress.serve(
        LoopbackOnly(app, args.port),
        **where,
        threads=WORKER_THREADS,
        connection_limit=CONNECTION_LIMIT,
        channel_timeout=3600,
        asyncore_use_poll=True,  # no select() limit on file descriptors
        ident="moto",
    )


if __name__ == "__main__":
    main()
