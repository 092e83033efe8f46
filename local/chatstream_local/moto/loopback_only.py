"""moto's server answers local tools only: no browser page, no other host name.

moto's Flask app answers every origin's CORS preflight and adds ``Access-Control-Allow-Origin`` to every answer, and
it checks no signature: a page the user opened could read the whole chat table through moto's port (printed at
start) or, by DNS rebinding, as its own origin. Every client of the local stack's moto (the functions, the stack, the
tools, the tests) is botocore, which sends no ``Origin`` and names ``127.0.0.1:<port>`` as its ``Host``.
:class:`LoopbackOnly` refuses, with 403, a request that carries an ``Origin`` (a browser's) or whose ``Host`` is not
the loopback address moto listens on (:func:`chatstream_local.loopback.is_loopback_host`), and removes the CORS
headers moto adds, so no browser lets a page read an answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from chatstream_local.loopback import is_loopback_host

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

_REFUSED = b"moto (the local stack's AWS services) answers only local tools: no Origin, Host 127.0.0.1:<port>\n"


class LoopbackOnly:
    """WSGI middleware in front of moto's application, listening on ``port``."""

    def __init__(self, app: Any, port: int) -> None:
        self.app = app
        self.port = port

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if "HTTP_ORIGIN" in environ or not is_loopback_host(environ.get("HTTP_HOST"), self.port):
            start_response("403 Forbidden", [("Content-Type", "text/plain"), ("Content-Length", str(len(_REFUSED)))])
            return [_REFUSED]

        def without_cors(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            kept = [(name, value) for name, value in headers if not name.lower().startswith("access-control-")]
            return start_response(status, kept, exc_info)

        return self.app(environ, without_cors)
