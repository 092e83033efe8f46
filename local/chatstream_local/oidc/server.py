"""The local issuer on loopback HTTP: ``IssuerServer(...).start()`` and ``.stop()``, on the stack's server base.

Paths (the issuer's URL is ``http://127.0.0.1:<port>``):

- ``GET /.well-known/openid-configuration``, ``GET /jwks``: public documents, readable by any page (CORS ``*``);
- ``GET /authorize``: a form asking only for a user name; its ``POST`` redirects to the client with a code;
- ``POST /token``: the code (with its PKCE verifier) or a refresh token for tokens; a browser page may call it
  (CORS ``*``: a public client's token endpoint, as Cognito's);
- ``POST /mint`` (JSON ``{"sub", "lifetime_s", "audience", "scope"}``) an access token at once, and
  ``POST /rotate`` (``{"retire_old": bool}``) a new signing key: for local tools and tests only, so a request
  with an ``Origin`` (a browser page) is refused, as :mod:`chatstream_local.loopback` refuses one on every
  endpoint that does not serve browsers.
"""

from __future__ import annotations

import html
import json
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import parse_qsl, urlsplit

from chatstream_local.loopback import LoopbackServer, QuietHandler, ServingThread
from chatstream_local.oidc.issuer import DEFAULT_AUDIENCE, DEFAULT_CLIENT_ID, LocalIssuer, OAuthError

if TYPE_CHECKING:
    import socket

MAX_BODY = 64 * 1024
_PUBLIC = {"Access-Control-Allow-Origin": "*"}
_FORM_PAGE_POLICY = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'"


class IssuerServer:
    """The local issuer, served on ``127.0.0.1`` (``port`` 0: any free one) or on an already bound ``listener``."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        listener: socket.socket | None = None,
        audience: str = DEFAULT_AUDIENCE,
        client_id: str = DEFAULT_CLIENT_ID,
        lifetime_s: int = 3600,
    ) -> None:
        # The issuer's URL is its address, known once bound: the server gets its owner right after.
        self._server = LoopbackServer((host, port), _IssuerHandler, cast("LocalIssuer", None), listener)
        bound_host, bound_port = self._server.server_address[:2]
        self.issuer = LocalIssuer(
            f"http://{bound_host!s}:{bound_port}", audience=audience, client_id=client_id, lifetime_s=lifetime_s
        )
        self._server.owner = self.issuer
        self._serving = ServingThread(self._server, "oidc-issuer")

    @property
    def url(self) -> str:
        """The issuer identifier (its ``iss``), which is also where it is served."""
        return self.issuer.url

    def relay_environment(self) -> dict[str, str]:
        """What the relay needs to accept this issuer's tokens and sign its page in (``AUTH_TYPE=JWT``)."""
        return {
            "AUTH_TYPE": "JWT",
            "JWT_ISSUER": self.url,
            "JWT_AUDIENCES": self.issuer.audience,
            "JWT_PAGE_CLIENT_ID": self.issuer.client_id,
        }

    def start(self) -> IssuerServer:
        self._serving.start()
        return self

    def stop(self) -> None:
        self._serving.stop()

    def __enter__(self) -> IssuerServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _IssuerHandler(QuietHandler):
    server: LoopbackServer[LocalIssuer]
    serves_browsers = True  # the form, and the page's token requests; /mint and /rotate refuse an Origin themselves

    @property
    def issuer(self) -> LocalIssuer:
        return self.server.owner

    # ---------------------------------------------------------------------------------- answers

    def _send(self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json", headers)

    def _page(self, status: int, body: str) -> None:
        headers = {"Content-Security-Policy": _FORM_PAGE_POLICY, "X-Content-Type-Options": "nosniff"}
        self._send(status, body.encode(), "text/html; charset=utf-8", headers)

    def _form(self) -> dict[str, str]:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self.discard_body(length)
            raise OAuthError("invalid_request", f"the body is larger than {MAX_BODY} bytes", 413)
        raw = self.rfile.read(length).decode("utf-8", errors="replace")
        if (self.headers.get("Content-Type") or "").startswith("application/json"):
            try:
                value = json.loads(raw or "{}")
            except ValueError:
                raise OAuthError("invalid_request", "the body is not JSON") from None
            if not isinstance(value, dict):
                raise OAuthError("invalid_request", "the body must be a JSON object")
            return {str(key): item for key, item in value.items()}
        return dict(parse_qsl(raw, keep_blank_values=True))

    # ---------------------------------------------------------------------------------- routes

    def do_OPTIONS(self) -> None:  # noqa: N802 - http.server's naming
        # A page's token request with headers beyond the safelisted ones is preflighted.
        self._send(
            204,
            b"",
            "text/plain",
            {**_PUBLIC, "Access-Control-Allow-Methods": "GET, POST", "Access-Control-Allow-Headers": "content-type"},
        )

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        split = urlsplit(self.path)
        if split.path == "/.well-known/openid-configuration":
            self._json(200, self.issuer.discovery(), _PUBLIC)
        elif split.path == "/jwks":
            self._json(200, self.issuer.keys.jwks(), _PUBLIC)
        elif split.path == "/authorize":
            params = dict(parse_qsl(split.query, keep_blank_values=True))
            try:
                self.issuer.authorization_request(params)
            except OAuthError as err:
                self._page(400, _error_page(err))
                return
            self._page(200, _login_page(params))
        else:
            self._json(404, {"error": "not_found", "error_description": f"no {split.path} on this issuer"})

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        path = urlsplit(self.path).path
        try:
            form = self._form()
            if path == "/authorize":
                self._authorize(form)
            elif path == "/token":
                self._json(200, self.issuer.token(form), {**_PUBLIC, "Pragma": "no-cache"})
            elif path in ("/mint", "/rotate"):
                self._local_tool(path, form)
            else:
                self._json(404, {"error": "not_found", "error_description": f"no {path} on this issuer"})
        except OAuthError as err:
            self._json(err.status, err.body(), _PUBLIC if path == "/token" else None)

    def _authorize(self, form: dict[str, str]) -> None:
        origin = self.headers.get("Origin")
        if origin not in (None, "null", self.issuer.url):
            raise OAuthError("access_denied", "the sign-in form is this issuer's own", 403)
        request = self.issuer.authorization_request(form)
        self.send_response(303)
        self.send_header("Location", self.issuer.approve(request, form.get("username", "").strip()))
        self.send_header("Content-Length", "0")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()

    def _local_tool(self, path: str, form: dict[str, Any]) -> None:
        if "Origin" in self.headers:
            raise OAuthError("access_denied", "minting and rotating are for local tools, not a browser page", 403)
        if path == "/rotate":
            kid = self.issuer.keys.rotate(str(form.get("algorithm", "RS256")), retire_old=bool(form.get("retire_old")))
            self._json(200, {"kid": kid})
            return
        try:
            lifetime = None if form.get("lifetime_s") in (None, "") else int(form["lifetime_s"])
        except (TypeError, ValueError):
            raise OAuthError("invalid_request", "lifetime_s must be a whole number of seconds") from None
        token = self.issuer.mint(
            str(form.get("sub", "")),
            lifetime_s=lifetime,
            audience=None if form.get("audience") in (None, "") else str(form["audience"]),
            scope=str(form.get("scope") or "openid chat"),
        )
        self._json(200, {"access_token": token, "token_type": "Bearer"})


def _login_page(params: dict[str, str]) -> str:
    hidden = "".join(
        f'<input type="hidden" name="{html.escape(name)}" value="{html.escape(value)}">'
        for name, value in params.items()
        if name != "username"
    )
    return (
        "<!doctype html><html lang=en><meta charset=utf-8><title>Local sign-in</title>"
        "<h1>chatstream local sign-in</h1>"
        "<p>This is the local stack's test issuer: no password, the name you give is the user.</p>"
        '<form method="post" action="/authorize">'
        f"{hidden}"
        '<label>User name <input name="username" required autofocus autocomplete="username" '
        'pattern="[A-Za-z0-9._@+\\-]{1,64}"></label> '
        '<button type="submit">Sign in</button></form></html>'
    )


def _error_page(err: OAuthError) -> str:
    return (
        "<!doctype html><html lang=en><meta charset=utf-8><title>Sign-in error</title>"
        f"<h1>Sign-in error</h1><p>{html.escape(err.error)}: {html.escape(err.description)}</p></html>"
    )
