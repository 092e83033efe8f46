"""What the page needs to sign in: ``GET /auth/config`` (HTTP_API.md, "Identity"), and the origins it may call.

Under ``AUTH_TYPE=JWT`` the page runs the authorization code flow with PKCE against the relay's issuer
(``static/auth.js``). It learns where from this document, built from the issuer's discovery document (which the
verifier fetches and keeps anyway), so the page needs no discovery request of its own, nor CORS on the issuer's
discovery endpoint. Nothing in it is secret: the page's client is public (no secret).

Under ``AWS_IAM`` and ``NONE`` it says only the auth type; the page then does not sign in.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from chatstream.relay.bearer import IssuerUnavailable
from chatstream.relay.http import json_response

if TYPE_CHECKING:
    from chatstream.config import RelayConfig
    from chatstream.relay.bearer import BearerVerifier
    from chatstream.relay.http import Response

logger = logging.getLogger(__name__)

# The issuer's endpoints the page uses, copied from its discovery document when it has them.
PAGE_ENDPOINTS = ("authorization_endpoint", "token_endpoint", "end_session_endpoint")


def auth_config(config: RelayConfig, verifier: BearerVerifier | None) -> Response:
    """``GET /auth/config``: ``503 issuer_unavailable`` (:meth:`~chatstream.relay.bearer.IssuerUnavailable.http_error`)
    when the issuer's discovery document cannot be fetched."""
    try:
        return json_response(200, auth_config_document(config, verifier))
    except IssuerUnavailable as err:
        logger.warning("the token issuer is unavailable", extra={"error": str(err)})
        raise err.http_error() from None


def auth_config_document(config: RelayConfig, verifier: BearerVerifier | None) -> dict[str, Any]:
    if config.jwt is None or verifier is None:
        return {"auth_type": config.auth_type}
    settings = config.jwt
    metadata = verifier.keys.metadata()
    scopes = ["openid", "profile", "email"]
    if settings.required_scope and settings.required_scope not in scopes:
        scopes.append(settings.required_scope)
    document: dict[str, Any] = {
        "auth_type": "JWT",
        "issuer": settings.issuer,
        "client_id": verifier.page_client_id(),
        "scope": " ".join(scopes),
    }
    for name in PAGE_ENDPOINTS:
        value = metadata.get(name)
        document[name] = value if isinstance(value, str) else None
    return document


def page_connect_sources(document: dict[str, Any]) -> tuple[str, ...]:
    """The origins beyond the relay's own the page fetches from (its token endpoint's), for its
    Content-Security-Policy's ``connect-src``; the authorization and end-session endpoints are navigations."""
    endpoint = document.get("token_endpoint")
    if not isinstance(endpoint, str):
        return ()
    split = urlsplit(endpoint)
    return (f"{split.scheme}://{split.netloc}",) if split.scheme in ("https", "http") and split.netloc else ()


def page_sources(config: RelayConfig, verifier: BearerVerifier | None) -> tuple[str, ...]:
    """:func:`page_connect_sources` of this relay's document; none when the issuer cannot be asked just now: the page
    is served all the same (an uptime check of ``GET /`` does not depend on the issuer), and its sign-in reports
    ``GET /auth/config``'s ``503`` until a reload finds the issuer again."""
    if config.jwt is None or verifier is None:
        return ()
    try:
        return page_connect_sources(auth_config_document(config, verifier))
    except IssuerUnavailable as err:
        logger.warning("the page is served without its issuer's origin", extra={"error": str(err)})
        return ()
