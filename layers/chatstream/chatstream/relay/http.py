"""HTTP plumbing: the Function URL event (payload format 2.0) in, JSON or SSE responses out, routing.

:meth:`Request.from_event` reads the eight fields it needs straight from the event's mapping (Powertools'
``LambdaFunctionUrlEvent`` would do no more for them, and importing it imports every one of Powertools' ~40 event
data classes: ~8 ms of the relay's cold start, bench/README.md "Where init goes") and never raises: a field of the
wrong shape reads as absent, so even a hand-made event gets an HTTP answer. The body is kept as bytes
(base64-decoded when ``isBase64Encoded``); a body that is not valid base64 is remembered as such and reported by
whoever reads it.

:class:`Router` holds routes declared once, at import (a method, a path template where ``{name}`` matches one
non-empty segment, and a handler, a function): each area of the API declares its own on its own router, a decorator
above each handler (:meth:`Router.get`, :meth:`Router.post`), and one router composes them
(:meth:`Router.include_router`, with a prefix), as Powertools' event handler does. It matches ``rawPath`` against
the templates and calls the handler with the request's context (whatever the router's user answers a request with)
and the path's parameters, answering ``404 not_found`` for an unknown path and ``405 method_not_allowed`` with an
``Allow`` header for a known path with another method. An :class:`HttpError` a handler raises becomes
its response. ``HEAD`` is answered wherever ``GET`` is, as ``GET`` would be but without the body (an uptime check's
``HEAD /``, ``curl -I``); a stream's body is never started, so a ``HEAD`` of a turn's events follows nothing.
A route is declared ``public`` when it answers without knowing who asks (health, the page, the API's description);
before any other route's handler runs, the router asks its ``authenticate`` (the caller, by the auth mode), whose
:class:`HttpError` is the answer: no route that reads or writes anything runs for a caller it has not named.

``rawPath`` is the path as the client sent it, not percent-decoded: a parameter is decoded as it is matched (a URL
library may write the model ``us.amazon.nova-lite-v1:0`` as ``us.amazon.nova-lite-v1%3A0``). A segment
that is not valid percent-encoding (a ``%`` without two hex digits, or bytes that are not UTF-8) names nothing, and
neither does one that decodes to a ``/``: no parameter holds a slash (``/static/vendor%2Fx`` is not
``/static/vendor/x``). Such a path matches no route, ``404 not_found``.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Generic, TypeAlias, TypeVar
from urllib.parse import unquote_to_bytes

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from chatstream.relay.follow import FollowStats

JSON_CONTENT_TYPE = "application/json"
SSE_CONTENT_TYPE = "text/event-stream; charset=utf-8"
# Every API answer is one caller's conversation (or about it): no cache may keep it, whatever sits in front of the
# URL (a CDN's heuristic freshness would serve a 200 without Cache-Control to the next caller), and no browser may
# sniff it into another type.
PRIVATE_HEADERS: Mapping[str, str] = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
SSE_HEADERS: Mapping[str, str] = {"Content-Type": SSE_CONTENT_TYPE, **PRIVATE_HEADERS}


@dataclass(frozen=True)
class Request:
    """What the relay needs from one Function URL request."""

    method: str
    path: str
    headers: Mapping[str, str] = field(default_factory=dict)  # lower-cased names
    query: Mapping[str, str] = field(default_factory=dict)
    body: bytes | None = None
    body_is_valid_base64: bool = True
    iam: Mapping[str, Any] = field(default_factory=dict)  # requestContext.authorizer.iam, if any
    request_id: str = ""

    @classmethod
    def from_event(cls, raw: object) -> Request:
        event = raw if isinstance(raw, dict) else {}
        # No path at all is a malformed event (a Function URL always sends one), not the page at "/".
        path = _read(event, str, "rawPath") or _read(event, str, "requestContext", "http", "path") or ""
        body, valid = _body(_read(event, str, "body"), _read(event, bool, "isBase64Encoded") is True)
        return cls(
            method=(_read(event, str, "requestContext", "http", "method") or "GET").upper(),
            path=path,
            headers=_strings(_read(event, dict, "headers"), lower=True),
            query=_strings(_read(event, dict, "queryStringParameters")),
            body=body,
            body_is_valid_base64=valid,
            iam=_read(event, dict, "requestContext", "authorizer", "iam") or {},
            request_id=_read(event, str, "requestContext", "requestId") or "",
        )

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


_T = TypeVar("_T")


def _read(event: Mapping[str, object], kind: type[_T], *path: str) -> _T | None:
    """The field at ``path`` (``"requestContext", "http", "method"``), or ``None`` when the event lacks it or has the
    wrong shape."""
    node: object = event
    for key in path:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node if isinstance(node, kind) else None


def _strings(mapping: dict[Any, Any] | None, *, lower: bool = False) -> dict[str, str]:
    return {
        (str(key).lower() if lower else str(key)): value
        for key, value in (mapping or {}).items()
        if isinstance(value, str)
    }


def _body(body: object, is_base64: bool) -> tuple[bytes | None, bool]:
    if not isinstance(body, str):
        return None, True
    if not is_base64:
        # Function URLs pass textual bodies as text. Lone surrogates (only a hand-made event has them)
        # become bytes that are not UTF-8, which the body's reader reports.
        return body.encode("utf-8", errors="surrogatepass"), True
    try:
        return base64.b64decode(body, validate=True), True
    except (binascii.Error, ValueError):
        return None, False


class StreamKind(StrEnum):
    CHAT = "chat"  # a new turn (POST /chat)
    EVENTS = "events"  # attach to a turn, or resume it


@dataclass(frozen=True)
class StreamInfo:
    """What an SSE response follows, and (once its body ran) what it sent."""

    kind: StreamKind
    session_id: str
    turn: int
    stats: FollowStats
    started_at: float  # the service clock's monotonic() when the request arrived


@dataclass(frozen=True)
class Response:
    """A response: status, headers, and a body whose items go to the client one by one."""

    status_code: int
    headers: Mapping[str, str]
    body: Iterable[str]
    stream: StreamInfo | None = None
    unexpected: bool = False  # the relay's own unexpected failure answered it (500): counted for its alarm
    owner: str = ""  # the caller, when the route asked who it is (logged with the request; never a token)


class HttpError(Exception):
    """An error answered before any stream starts: ``{"error": {"code", "message"}}``."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        headers: Mapping[str, str] | None = None,
        *,
        unexpected: bool = False,  # the relay's own unexpected failure (Response.unexpected)
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers: Mapping[str, str] = headers or {}
        self.unexpected = unexpected

    def response(self) -> Response:
        return replace(error_response(self.status, self.code, self.message, self.headers), unexpected=self.unexpected)


class RouteError(HttpError):
    """The router's own answer: no route has the path (``404 not_found``), or none with the method (``405``)."""


def json_response(status: int, payload: Any, headers: Mapping[str, str] | None = None) -> Response:
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return Response(status, {"Content-Type": JSON_CONTENT_TYPE, **PRIVATE_HEADERS, **(headers or {})}, [text])


def error_response(status: int, code: str, message: str, headers: Mapping[str, str] | None = None) -> Response:
    return json_response(status, {"error": {"code": code, "message": clipped(message)}}, headers)


ERROR_TEXT_CHARS = 500  # of an error's message (and /v1's param): what it echoes of a request is cut to fit


def clipped(text: str, limit: int = ERROR_TEXT_CHARS) -> str:
    """``text``, or its start and "…" when longer than ``limit``: an error that quotes a 60,000-character field
    name or path says so in a few hundred characters."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def sse_response(body: Iterable[str], stream: StreamInfo) -> Response:
    return Response(200, dict(SSE_HEADERS), body, stream)


_C = TypeVar("_C")
# An endpoint: the request's context (what the router's user answers a request with) and the path's parameters in,
# the response out.
Handler: TypeAlias = "Callable[[_C, Mapping[str, str]], Response]"


@dataclass(frozen=True)
class Route(Generic[_C]):
    method: str
    template: str
    handler: Handler[_C]
    public: bool = False  # answered without asking who the caller is (the router's ``authenticate``)

    def match(self, path: str) -> dict[str, str] | None:
        want = self.template.split("/")
        got = path.split("/")
        if len(want) != len(got):
            return None
        params: dict[str, str] = {}
        for pattern, segment in zip(want, got, strict=True):
            if pattern.startswith("{") and pattern.endswith("}"):
                value = _decoded(segment)
                if not value:
                    return None
                params[pattern[1:-1]] = value
            elif pattern != segment:
                return None
        return params


_STRAY_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")


def _decoded(segment: str) -> str | None:
    """A path segment percent-decoded, or ``None`` when it is not valid percent-encoding or decodes to a slash."""
    if "%" not in segment:
        return segment
    if _STRAY_PERCENT.search(segment):
        return None
    try:
        value = unquote_to_bytes(segment).decode("utf-8")
    except UnicodeError:  # bytes that are not UTF-8 (or, in a hand-made event, a lone surrogate)
        return None
    return None if "/" in value else value


def _native_error(request: Request, err: HttpError) -> Response:
    return err.response()


@dataclass
class Router(Generic[_C]):
    routes: tuple[Route[_C], ...] = ()
    # How the router's own errors (and a handler's HttpError) are answered; a path's API may have its own shape.
    render_error: Callable[[Request, HttpError], Response] = _native_error
    # Asked before the handler of every route that is not public: raises the HttpError that answers a request whose
    # caller is not known (401, 403, 503); None: no route needs a caller (a router composed into another).
    authenticate: Callable[[_C], object] | None = None

    def route(self, method: str, template: str, *, public: bool = False) -> Callable[[Handler[_C]], Handler[_C]]:
        """A decorator: the function below it answers ``method`` on ``template`` (it is returned as it is);
        ``public``: without asking who the caller is."""

        def register(handler: Handler[_C]) -> Handler[_C]:
            self.routes = (*self.routes, Route(method, template, handler, public))
            return handler

        return register

    def get(self, template: str, *, public: bool = False) -> Callable[[Handler[_C]], Handler[_C]]:
        return self.route("GET", template, public=public)

    def post(self, template: str, *, public: bool = False) -> Callable[[Handler[_C]], Handler[_C]]:
        return self.route("POST", template, public=public)

    def include_router(self, router: Router[_C], prefix: str = "") -> None:
        """Serve ``router``'s routes too, after this one's, each template under ``prefix`` (``"/v1"``)."""
        self.routes = (*self.routes, *(replace(route, template=prefix + route.template) for route in router.routes))

    def dispatch(self, request: Request, context: _C) -> Response:
        """The route's answer; to ``HEAD``, what ``GET`` would answer, without its body (RFC 9110, 9.3.2)."""
        response = self._answer(request, context)
        if request.method == "HEAD":  # a stream's body is never started: no turn is followed
            return replace(response, body=(), stream=None)
        return response

    def _answer(self, request: Request, context: _C) -> Response:
        method = "GET" if request.method == "HEAD" else request.method
        allowed: set[str] = set()
        for route in self.routes:
            params = route.match(request.path)
            if params is None:
                continue
            if route.method == method:
                try:
                    if not route.public and self.authenticate is not None:
                        self.authenticate(context)
                    return route.handler(context, params)
                except HttpError as err:
                    return self.render_error(request, err)
            allowed.update((route.method, "HEAD") if route.method == "GET" else (route.method,))
        if allowed:
            allow = ", ".join(sorted(allowed))
            message = f"{request.method} is not allowed on {clipped(request.path, 100)}; use {allow}"
            return self.render_error(request, RouteError(405, "method_not_allowed", message, {"Allow": allow}))
        message = f"no route for {clipped(request.path, 100)}; see the API documentation"
        return self.render_error(request, RouteError(404, "not_found", message))
