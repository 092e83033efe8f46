"""The local issuer's OAuth 2.0 / OpenID Connect logic, without HTTP: what each endpoint answers.

Only what the relay's page and the tests need, to the specs' letter where it counts: the authorization code
grant with PKCE (RFC 7636, ``S256`` only, required), single-use codes that expire in a minute and are bound to
their client, redirect URI and challenge; refresh tokens (rotated on use); access tokens that are JWTs
(RFC 9068 claims: ``iss``, ``sub``, ``aud``, ``client_id``, ``scope``, ``iat``, ``exp``, ``jti``); an ID token
with the nonce. Any loopback redirect URI is accepted (this issuer only ever serves this machine); there are
no passwords: the form asks for a user name, which becomes the subject.
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit

from chatstream_local.oidc.keys import SigningKeys

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

DEFAULT_AUDIENCE = "chatstream-local"
DEFAULT_CLIENT_ID = "chatstream-page"
DEFAULT_LIFETIME_S = 3600
CODE_LIFETIME_S = 60
SUBJECT = re.compile(r"[A-Za-z0-9._@+-]{1,64}")
_VERIFIER = re.compile(r"[A-Za-z0-9._~-]{43,128}")  # RFC 7636 4.1
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


class OAuthError(Exception):
    """An OAuth error response (RFC 6749 4.1.2.1, 5.2): ``error`` and a description for a person."""

    def __init__(self, error: str, description: str, status: int = 400) -> None:
        super().__init__(f"{error}: {description}")
        self.error = error
        self.description = description
        self.status = status

    def body(self) -> dict[str, str]:
        return {"error": self.error, "error_description": self.description}


@dataclass(frozen=True)
class AuthorizationRequest:
    """A checked authorization request, waiting for the user's name."""

    client_id: str
    redirect_uri: str
    code_challenge: str
    scope: str
    state: str = ""
    nonce: str = ""


@dataclass
class _Grant:
    request: AuthorizationRequest
    subject: str
    expires_at: float


@dataclass
class _Refresh:
    subject: str
    client_id: str
    scope: str


@dataclass
class LocalIssuer:
    """The issuer at ``url``: keys generated when it is made, tokens for ``audience``."""

    url: str
    keys: SigningKeys = field(default_factory=SigningKeys)
    audience: str = DEFAULT_AUDIENCE
    client_id: str = DEFAULT_CLIENT_ID
    lifetime_s: int = DEFAULT_LIFETIME_S
    clock: Callable[[], float] = time.time
    _codes: dict[str, _Grant] = field(default_factory=dict, init=False)
    _refresh: dict[str, _Refresh] = field(default_factory=dict, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    # ------------------------------------------------------------------------------- documents

    def discovery(self) -> dict[str, Any]:
        """OpenID Connect Discovery 1.0's document (and RFC 8414's fields the page's library reads)."""
        return {
            "issuer": self.url,
            "authorization_endpoint": f"{self.url}/authorize",
            "token_endpoint": f"{self.url}/token",
            "jwks_uri": f"{self.url}/jwks",
            "response_types_supported": ["code"],
            "response_modes_supported": ["query"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256", "ES256"],
            "token_endpoint_auth_methods_supported": ["none"],
            "code_challenge_methods_supported": ["S256"],
            "scopes_supported": ["openid", "profile", "email", "chat"],
            "authorization_response_iss_parameter_supported": True,
            "chatstream_mint_endpoint": f"{self.url}/mint",  # this issuer's own: tokens for tests, make token
        }

    # ------------------------------------------------------------------------------- tokens

    def mint(
        self,
        subject: str,
        *,
        lifetime_s: int | None = None,
        audience: str | None = None,
        scope: str = "openid chat",
        client_id: str | None = None,
    ) -> str:
        """An access token for ``subject``; a negative ``lifetime_s`` gives one that has already expired."""
        if not SUBJECT.fullmatch(subject):
            raise OAuthError("invalid_request", "the subject must be 1 to 64 of A-Z a-z 0-9 . _ @ + -")
        now = int(self.clock())
        lifetime = self.lifetime_s if lifetime_s is None else lifetime_s
        claims = {
            "iss": self.url,
            "sub": subject,
            "aud": self.audience if audience is None else audience,
            "client_id": client_id or self.client_id,
            "scope": scope,
            "iat": min(now, now + lifetime),
            "exp": now + lifetime,
            "jti": secrets.token_urlsafe(12),
        }
        return self.keys.sign(claims)

    def _id_token(self, subject: str, client_id: str, nonce: str) -> str:
        now = int(self.clock())
        claims: dict[str, Any] = {
            "iss": self.url,
            "sub": subject,
            "aud": client_id,
            "iat": now,
            "auth_time": now,
            "exp": now + self.lifetime_s,
            "preferred_username": subject,
            "name": subject,
        }
        if nonce:
            claims["nonce"] = nonce
        return self.keys.sign(claims, header={"typ": "JWT"})

    def _tokens(self, subject: str, client_id: str, scope: str, nonce: str = "") -> dict[str, Any]:
        refresh_token = secrets.token_urlsafe(32)
        with self._lock:
            self._refresh[refresh_token] = _Refresh(subject, client_id, scope)
        answer: dict[str, Any] = {
            "access_token": self.mint(subject, scope=scope, client_id=client_id),
            "token_type": "Bearer",
            "expires_in": self.lifetime_s,
            "refresh_token": refresh_token,
            "scope": scope,
        }
        if "openid" in scope.split():
            answer["id_token"] = self._id_token(subject, client_id, nonce)
        return answer

    # ------------------------------------------------------------------------------- the code flow

    def authorization_request(self, params: Mapping[str, str]) -> AuthorizationRequest:
        """Check an authorization request. Errors before the redirect URI is known are shown, not redirected."""
        redirect_uri = params.get("redirect_uri", "")
        if not _loopback_url(redirect_uri):
            raise OAuthError("invalid_request", "redirect_uri must be an http URL on this machine (127.0.0.1)")
        if not params.get("client_id"):
            raise OAuthError("invalid_request", "client_id is required")
        if params.get("response_type") != "code":
            raise OAuthError("unsupported_response_type", "only response_type=code is supported")
        if params.get("code_challenge_method") != "S256" or not params.get("code_challenge"):
            raise OAuthError("invalid_request", "PKCE is required: code_challenge with code_challenge_method=S256")
        return AuthorizationRequest(
            client_id=params["client_id"],
            redirect_uri=redirect_uri,
            code_challenge=params["code_challenge"],
            scope=params.get("scope") or "openid",
            state=params.get("state", ""),
            nonce=params.get("nonce", ""),
        )

    def approve(self, request: AuthorizationRequest, subject: str) -> str:
        """The user named themselves: where the browser goes next (the redirect URI, with a code)."""
        if not SUBJECT.fullmatch(subject):
            raise OAuthError("invalid_request", "the user name must be 1 to 64 of A-Z a-z 0-9 . _ @ + -")
        code = secrets.token_urlsafe(24)
        with self._lock:
            self._codes[code] = _Grant(request, subject, self.clock() + CODE_LIFETIME_S)
        query = {"code": code, "iss": self.url, **({"state": request.state} if request.state else {})}
        separator = "&" if urlsplit(request.redirect_uri).query else "?"
        return f"{request.redirect_uri}{separator}{urlencode(query)}"

    def token(self, form: Mapping[str, str]) -> dict[str, Any]:
        """The token endpoint (RFC 6749 4.1.3, 6): a code with its PKCE verifier, or a refresh token."""
        grant_type = form.get("grant_type")
        if grant_type == "authorization_code":
            return self._exchange_code(form)
        if grant_type == "refresh_token":
            return self._exchange_refresh(form)
        raise OAuthError("unsupported_grant_type", "grant_type must be authorization_code or refresh_token")

    def _exchange_code(self, form: Mapping[str, str]) -> dict[str, Any]:
        with self._lock:
            grant = self._codes.pop(form.get("code", ""), None)  # single use, whatever follows
        if grant is None or grant.expires_at < self.clock():
            raise OAuthError("invalid_grant", "the code is unknown, used or expired")
        request = grant.request
        if form.get("client_id") != request.client_id or form.get("redirect_uri") != request.redirect_uri:
            raise OAuthError("invalid_grant", "client_id and redirect_uri must be the authorization request's")
        verifier = form.get("code_verifier", "")
        if not _VERIFIER.fullmatch(verifier) or _s256(verifier) != request.code_challenge:
            raise OAuthError("invalid_grant", "the code_verifier does not match the code_challenge (PKCE)")
        return self._tokens(grant.subject, request.client_id, request.scope, request.nonce)

    def _exchange_refresh(self, form: Mapping[str, str]) -> dict[str, Any]:
        with self._lock:
            refresh = self._refresh.pop(form.get("refresh_token", ""), None)  # rotated: each is used once
        if refresh is None or form.get("client_id") != refresh.client_id:
            raise OAuthError("invalid_grant", "the refresh token is unknown, used, or another client's")
        return self._tokens(refresh.subject, refresh.client_id, refresh.scope)


def _s256(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


def _loopback_url(url: str) -> bool:
    split = urlsplit(url)
    return split.scheme == "http" and split.hostname in _LOOPBACK and not split.fragment
