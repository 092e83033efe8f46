"""A Function URL's CORS, as Lambda applies it from ``FunctionUrlConfig.Cors`` (``AllowOrigins``, ``AllowMethods``,
``AllowHeaders``, ``ExposeHeaders``, ``MaxAge``, ``AllowCredentials``; https://docs.aws.amazon.com/lambda/latest/dg/API_Cors.html).

With CORS configured the URL itself answers a browser's preflight (``OPTIONS`` with ``Origin`` and
``Access-Control-Request-Method``): the function never sees it, and it needs no signature under ``AWS_IAM``. The
browser compares what it asks for with the ``Access-Control-Allow-*`` headers of the answer. A response to a request
from an allowed ``Origin`` carries ``Access-Control-Allow-Origin`` and ``Access-Control-Expose-Headers`` (the response
headers the page's script may read), in place of any the function set. An origin that is not allowed gets no CORS
headers, so the browser refuses the response to the page.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping


def _names(value: Any) -> tuple[str, ...]:
    """A list property, or a CommaDelimitedList parameter resolved to its text (``a,b``)."""
    items = value.split(",") if isinstance(value, str) else list(value or ())
    return tuple(str(item).strip() for item in items if str(item).strip())


@dataclass(frozen=True)
class FunctionUrlCors:
    allow_origins: tuple[str, ...] = ()
    allow_methods: tuple[str, ...] = ()
    allow_headers: tuple[str, ...] = ()
    expose_headers: tuple[str, ...] = ()
    max_age: int = 0
    allow_credentials: bool = False

    @classmethod
    def from_config(cls, cors: Mapping[str, Any] | None) -> FunctionUrlCors | None:
        """From a ``FunctionUrlConfig``'s ``Cors`` (``None``: no CORS, the function answers everything)."""
        if not cors:
            return None
        return cls(
            _names(cors.get("AllowOrigins")),
            _names(cors.get("AllowMethods")),
            _names(cors.get("AllowHeaders")),
            _names(cors.get("ExposeHeaders")),
            int(cors.get("MaxAge") or 0),
            bool(cors.get("AllowCredentials")),
        )

    @staticmethod
    def is_preflight(method: str, headers: Mapping[str, str]) -> bool:
        return method == "OPTIONS" and "origin" in headers and "access-control-request-method" in headers

    def allows(self, origin: str) -> bool:
        """Whether a page of ``origin`` is one ``AllowOrigins`` names (or ``*``)."""
        return self._allowed_origin(origin) is not None

    def _allowed_origin(self, origin: str | None) -> str | None:
        if not origin:
            return None
        if "*" in self.allow_origins:
            return origin if self.allow_credentials else "*"
        return origin if origin.lower() in {allowed.lower() for allowed in self.allow_origins} else None

    def preflight_headers(self, origin: str | None) -> dict[str, str]:
        """The answer to a preflight from ``origin``."""
        allowed = self._allowed_origin(origin)
        if allowed is None:
            return {}
        headers = {
            "Access-Control-Allow-Origin": allowed,
            "Access-Control-Allow-Methods": ",".join(self.allow_methods),
            "Access-Control-Allow-Headers": ",".join(self.allow_headers),
            "Access-Control-Max-Age": str(self.max_age),
            "Vary": "Origin",
        }
        if self.allow_credentials:
            headers["Access-Control-Allow-Credentials"] = "true"
        return headers

    def response_headers(self, origin: str | None) -> dict[str, str]:
        """What a response to a request from ``origin`` gains."""
        allowed = self._allowed_origin(origin)
        if allowed is None:
            return {}
        headers = {"Access-Control-Allow-Origin": allowed, "Vary": "Origin"}
        if self.expose_headers:
            headers["Access-Control-Expose-Headers"] = ",".join(self.expose_headers)
        if self.allow_credentials:
            headers["Access-Control-Allow-Credentials"] = "true"
        return headers
