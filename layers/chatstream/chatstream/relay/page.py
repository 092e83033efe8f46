"""The browser chat page: ``GET /``, ``GET /static/{name}`` and ``GET /static/vendor/{name}``, from the API's origin.

The files live beside this module in ``static/`` and ship in the layer with the package; ``static/vendor/``
holds the third-party code the page runs (markdown-it, pinned, its licence and checksum beside it). They
are read once per execution environment, when this module is imported: by the page's first request, not at
the relay's init (a missing page fails that request, and the log names it; the built layer's test serves it)
and answered with a strict Content-Security-Policy: scripts, styles, images and connections from this
origin only, no inline script or style, no frames, no plugins. The page builds the reply's Markdown
into elements itself, from markdown-it's tokens with raw HTML off, and puts text only in text nodes;
the policy is the second line of defence if that ever slipped.

The page has no build step and makes no third-party requests. A browser cannot sign requests with
SigV4, so it is for a Function URL with ``AuthType NONE`` (the local stack, demos); with ``AWS_IAM``
the Function URL refuses the unsigned page request before the relay sees it. Under the JWT auth mode the page
signs in itself (``static/auth.js``, HTTP_API.md "Identity"), and its policy's ``connect-src`` also names its
issuer's token endpoint (``index(connect_sources)``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from chatstream.relay.http import HttpError, Response

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

STATIC_DIR = Path(__file__).with_name("static")
VENDOR = "vendor"  # the one folder below static/, served as /static/vendor/{name}
INDEX = "index.html"
CONTENT_TYPES: Mapping[str, str] = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml; charset=utf-8",
}
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ]
)
SECURITY_HEADERS: Mapping[str, str] = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # Small files, no build step to version their names: the browser revalidates every time.
    "Cache-Control": "no-cache",
}


@dataclass(frozen=True)
class StaticFile:
    content_type: str
    text: str


@dataclass(frozen=True)
class StaticSite:
    """The page's files by name (``app.js``, ``vendor/markdown-it.umd.min.js``); only the files of a served type
    that exist at load time are ever served (a licence or a README beside them is not)."""

    files: Mapping[str, StaticFile]

    @classmethod
    def load(cls, directory: Path = STATIC_DIR) -> StaticSite:
        files = {
            path.relative_to(directory).as_posix(): StaticFile(
                CONTENT_TYPES[path.suffix], path.read_text(encoding="utf-8")
            )
            for folder in (directory, directory / VENDOR)
            if folder.is_dir()
            for path in sorted(folder.iterdir())
            if path.is_file() and path.suffix in CONTENT_TYPES
        }
        if INDEX not in files:
            raise FileNotFoundError(f"the chat page {directory / INDEX} is missing from the package")
        return cls(files)

    def index(self, connect_sources: Sequence[str] = ()) -> Response:
        """The page; ``connect_sources``: origins it may fetch from beyond its own (under the JWT auth mode, its
        issuer's token endpoint: :func:`chatstream.relay.signin.page_connect_sources`)."""
        response = self._response(self.files[INDEX])
        if not connect_sources:
            return response
        policy = CONTENT_SECURITY_POLICY.replace(
            "connect-src 'self'", " ".join(["connect-src 'self'", *connect_sources])
        )
        return replace(response, headers={**response.headers, "Content-Security-Policy": policy})

    def asset(self, name: str) -> Response:
        """A file by its name below ``static/``: ``app.js``, or ``vendor/…`` for a vendored one."""
        found = self.files.get(name)
        if found is None or name == INDEX:
            shown = name if len(name) <= 80 else name[:80] + "…"
            raise HttpError(404, "not_found", f"no static file {shown!r}; the chat page is at /")
        return self._response(found)

    @staticmethod
    def _response(found: StaticFile) -> Response:
        return Response(200, {"Content-Type": found.content_type, **SECURITY_HEADERS}, [found.text])


SITE = StaticSite.load()
