"""Bearer tokens (``AUTH_TYPE=JWT``): ``Authorization: Bearer <JWT>`` checked against one OpenID Connect issuer.

:class:`BearerVerifier` answers one question per request: whose token is this (:class:`VerifiedToken`, its
:attr:`~VerifiedToken.owner` the issuer and subject together), or why is it refused (:class:`TokenRejected`, one
exception with a :class:`Reason`, mapped to one ``401``; ``403`` for a missing scope, ``400`` for a token in the query
string). When the issuer's keys cannot be had (its discovery document or JWKS endpoint is down, slow or wrong), it
raises :class:`IssuerUnavailable` instead, which the relay answers ``503``: the token may well be good.

What is checked, in this order (the cheap refusals first, so a made-up token costs no fetch):

- the ``Authorization`` header: present, at most :data:`MAX_HEADER_CHARS`, ``Bearer`` and one compact JWS; no
  ``access_token`` in the query string (RFC 6750 2.3: it would be logged by whatever logs URLs);
- the algorithm: :data:`ALGORITHMS` only (RS256, ES256). ``none`` and HMAC never verify anything, so an issuer's
  public key can never be used as an HMAC secret; the key a token names must be of its algorithm (PyJWT binds the
  two);
- ``kid``: required, and one of the issuer's keys (:class:`IssuerKeys`);
- the claims, by PyJWT: the signature, ``iss`` exactly, ``exp`` and ``nbf`` with at most 60 s leeway, ``exp``,
  ``iss`` and ``sub`` present;
- the audience: ``aud`` names an accepted audience, or the token is an access token (``token_use`` ``access``) of an
  accepted ``client_id`` (Cognito's access tokens carry no ``aud``). A token whose ``token_use`` is anything but
  ``access`` (a Cognito ID token) is refused either way;
- the required scope, if any (``scope``, space-separated, or ``scp``).

Why PyJWT (``PyJWKSet`` and ``jwt.decode``) rather than joserfc: its ``decode`` checks issuer, expiry, not-before,
leeway and required claims in one call with the algorithms pinned in it, a key parsed from a JWK stays bound to its
algorithm, and its exception classes map one to one onto the reasons a client is told. It is one small pure-Python
package over ``cryptography``, and imports in about a fifth of joserfc's time beside the relay's own modules
(joserfc's registry of every JOSE algorithm loads at import). Nothing here parses base64 or checks a signature by hand.

The JWKS is fetched lazily, by the first request that needs a key, so an execution environment's init never waits on
the issuer; ``jwt`` and ``cryptography`` are imported then too (see :func:`_jwt`). The keys are cached for the
environment's life, refreshed after :data:`KEYS_MAX_AGE_S`; a ``kid`` the cache lacks causes one refetch, at most
once every :data:`REFETCH_INTERVAL_S` (a rotated key is found; a flood of made-up ``kid`` values is not a flood of
fetches). Fetches time out quickly (:data:`FETCH_TIMEOUT_S`); after a failed one, requests are answered
``503`` at once for :data:`FAILURE_BACKOFF_S` rather than each waiting on a dead endpoint.

No message, log line or exception here holds a token or any part of it.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from chatstream.config import issuer_problem
from chatstream.relay.http import HttpError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from types import ModuleType

    from jwt import PyJWK
    from mypy_boto3_ssm import SSMClient

    from chatstream.config import JwtSettings

logger = logging.getLogger(__name__)

ALGORITHMS = ("RS256", "ES256")
MAX_HEADER_CHARS = 16 * 1024  # an Authorization header longer than this is refused unread
REFETCH_INTERVAL_S = 60.0  # at most one JWKS refetch for unknown kids per this interval
KEYS_MAX_AGE_S = 3600.0  # keys older than this are fetched again (a key the issuer withdrew stops verifying)
FAILURE_BACKOFF_S = 5.0  # after a failed fetch, no new one for this long
FETCH_TIMEOUT_S = (2.0, 3.0)  # connect, read
MAX_DOCUMENT_BYTES = 256 * 1024  # a discovery document or a JWKS larger than this is refused
REALM = "chatstream"
OWNER_PREFIX = "jwt:"
MAX_SUBJECT_CHARS = 255  # OpenID Connect Core 2: sub is at most 255 ASCII characters
DISCOVERY_PATH = "/.well-known/openid-configuration"

# A compact JWS: three base64url segments (the last empty for alg none, refused later with its own reason).
_COMPACT_JWS = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")


class Reason(StrEnum):
    """Why a token was refused: each says what the client can do about it (HTTP_API.md, "Identity")."""

    MISSING = "missing"
    TOKEN_IN_QUERY = "token_in_query"
    TOO_LARGE = "too_large"
    MALFORMED = "malformed"
    DISALLOWED_ALGORITHM = "disallowed_algorithm"
    UNKNOWN_KEY = "unknown_key"
    BAD_SIGNATURE = "bad_signature"
    EXPIRED = "expired"
    NOT_YET_VALID = "not_yet_valid"
    WRONG_ISSUER = "wrong_issuer"
    WRONG_AUDIENCE = "wrong_audience"
    WRONG_TOKEN_USE = "wrong_token_use"
    INSUFFICIENT_SCOPE = "insufficient_scope"


class TokenRejected(Exception):
    """The request's token is not accepted; :attr:`reason` says why (never the token itself)."""

    def __init__(self, reason: Reason, description: str, *, scope: str = "") -> None:
        super().__init__(f"{reason}: {description}")
        self.reason = reason
        self.description = description
        self.scope = scope  # the scope a 403 insufficient_scope asks for

    @property
    def status(self) -> int:
        if self.reason is Reason.INSUFFICIENT_SCOPE:
            return 403
        if self.reason is Reason.TOKEN_IN_QUERY:
            return 400
        return 401

    @property
    def error(self) -> str:
        """RFC 6750's error code; ``missing_token`` for a request without one (the header then carries none)."""
        if self.reason is Reason.MISSING:
            return "missing_token"
        if self.reason is Reason.INSUFFICIENT_SCOPE:
            return "insufficient_scope"
        if self.reason is Reason.TOKEN_IN_QUERY:
            return "invalid_request"
        return "invalid_token"

    def www_authenticate(self) -> str:
        """The ``WWW-Authenticate`` challenge (RFC 6750 3): no error code when the request had no token."""
        challenge = f'Bearer realm="{REALM}"'
        if self.reason is Reason.MISSING:
            return challenge
        challenge += f', error="{self.error}", error_description="{self.description}"'
        if self.scope:
            challenge += f', scope="{self.scope}"'
        return challenge

    def http_error(self) -> HttpError:
        """The relay's answer: the API's error shape (OpenAI's under ``/v1``), code :attr:`error`."""
        return HttpError(self.status, self.error, self.description, {"WWW-Authenticate": self.www_authenticate()})


class IssuerUnavailable(Exception):
    """The issuer's discovery document or keys could not be fetched (or were not what they must be): ``503``."""

    def http_error(self) -> HttpError:
        message = f"the token issuer's keys cannot be fetched just now ({self}); try again in a few seconds"
        return HttpError(503, "issuer_unavailable", message, {"Retry-After": str(int(FAILURE_BACKOFF_S))})


@dataclass(frozen=True)
class VerifiedToken:
    """An accepted token: who it is, and what it allows."""

    issuer: str
    subject: str
    expires_at: int  # exp, seconds since the epoch
    scopes: frozenset[str]
    client_id: str = ""  # client_id or azp, when the token names one

    @property
    def owner(self) -> str:
        """The owner of the sessions this caller creates: ``jwt:<iss>#<sub>``. An issuer has no ``#`` (it is a URL
        without a fragment, :func:`~chatstream.config.issuer_problem`), so the first ``#`` splits the two."""
        return f"{OWNER_PREFIX}{self.issuer}#{self.subject}"


def fetch_document(url: str) -> bytes:
    """GET ``url`` with short timeouts, no retries, no redirects and a size cap; :class:`IssuerUnavailable` when it
    fails. urllib3 is botocore's own HTTP client, loaded at the relay's init already."""
    import urllib3

    connect_s, read_s = FETCH_TIMEOUT_S
    try:
        response = _http().request(
            "GET",
            url,
            headers={"Accept": "application/json"},
            timeout=urllib3.Timeout(connect=connect_s, read=read_s),
            retries=False,
            redirect=False,
            preload_content=False,
        )
        try:
            if response.status != 200:
                raise IssuerUnavailable(f"{url} answered HTTP {response.status}")
            body = response.read(MAX_DOCUMENT_BYTES + 1)
        finally:
            response.release_conn()
    except urllib3.exceptions.HTTPError as err:
        raise IssuerUnavailable(f"{url} could not be fetched ({type(err).__name__})") from err
    if len(body) > MAX_DOCUMENT_BYTES:
        raise IssuerUnavailable(f"{url} is larger than {MAX_DOCUMENT_BYTES} bytes")
    return body


_pool: Any = None


def _http() -> Any:
    global _pool
    if _pool is None:
        import urllib3

        _pool = urllib3.PoolManager(num_pools=2, maxsize=1)
    return _pool


def _jwt() -> ModuleType:
    """PyJWT, imported by the first token this environment verifies rather than at init: it brings ``cryptography``
    (about 10 ms on Lambda's arm64 with a warm file cache, more on a cold one, docs/HTTP_API.md "Identity"), which an
    environment under AWS_IAM or NONE never needs, and whose wait a JWT environment's init need not add to the
    first request's either way."""
    import jwt

    return jwt


class IssuerKeys:
    """The issuer's signing keys: its discovery document's ``jwks_uri``, then the JWKS, fetched when first needed.

    ``clock`` is monotonic seconds. Safe to share between threads (one fetch at a time).
    """

    def __init__(
        self,
        issuer: str,
        *,
        fetch: Callable[[str], bytes] = fetch_document,
        clock: Callable[[], float] = time.monotonic,
        refetch_interval_s: float = REFETCH_INTERVAL_S,
        max_age_s: float = KEYS_MAX_AGE_S,
        failure_backoff_s: float = FAILURE_BACKOFF_S,
    ) -> None:
        self.issuer = issuer
        self._fetch = fetch
        self._clock = clock
        self._refetch_interval_s = refetch_interval_s
        self._max_age_s = max_age_s
        self._failure_backoff_s = failure_backoff_s
        self._lock = threading.Lock()
        self._metadata: Mapping[str, Any] | None = None
        self._keys: dict[str, PyJWK] | None = None
        self._fetched_at = -float("inf")
        self._failed_at = -float("inf")
        self._failure: IssuerUnavailable | None = None

    def metadata(self) -> Mapping[str, Any]:
        """The issuer's discovery document (OpenID Connect Discovery 1.0, 4), fetched once per environment; after a
        failed fetch (of it or of the keys), :class:`IssuerUnavailable` at once for :data:`FAILURE_BACKOFF_S`, as for
        the keys: a page's sign-in does not wait on a dead endpoint at every request either."""
        with self._lock:
            if self._metadata is not None:
                return self._metadata
            now = self._clock()
            if self._failure is not None and now - self._failed_at < self._failure_backoff_s:
                raise self._failure
            try:
                return self._discovered()
            except IssuerUnavailable as err:
                self._failure, self._failed_at = err, now
                logger.warning("the issuer's discovery document could not be fetched", extra={"error": str(err)})
                raise

    def key(self, kid: str) -> PyJWK:
        """The key ``kid`` names: :class:`TokenRejected` ``unknown_key`` when the issuer has none by that id."""
        with self._lock:
            now = self._clock()
            if self._keys is None or now - self._fetched_at >= self._max_age_s:
                self._refresh(now, keep_old=self._keys is not None)
            elif kid not in self._keys and now - self._fetched_at >= self._refetch_interval_s:
                logger.info("a token names a key the cache lacks: fetching the issuer's keys again")
                self._refresh(now, keep_old=True)
            assert self._keys is not None
            found = self._keys.get(kid)
        if found is None:
            raise TokenRejected(Reason.UNKNOWN_KEY, "the token names a key its issuer does not publish")
        return found

    def _refresh(self, now: float, *, keep_old: bool) -> None:
        if self._failure is not None and now - self._failed_at < self._failure_backoff_s:
            if keep_old:
                return
            raise self._failure
        try:
            self._keys = self._fetch_keys()
        except IssuerUnavailable as err:
            self._failure, self._failed_at = err, now
            logger.warning("the issuer's keys could not be fetched", extra={"error": str(err), "kept": keep_old})
            if not keep_old:
                raise
            return
        self._failure = None
        self._fetched_at = now

    def _discovered(self) -> Mapping[str, Any]:
        if self._metadata is None:
            url = self.issuer.rstrip("/") + DISCOVERY_PATH
            document = _json_object(self._fetch(url), url)
            if document.get("issuer") != self.issuer:
                raise IssuerUnavailable(f"{url} names another issuer than {self.issuer}")
            jwks_uri = document.get("jwks_uri")
            if not isinstance(jwks_uri, str) or issuer_problem(jwks_uri):
                raise IssuerUnavailable(f"{url} has no https jwks_uri")
            self._metadata = document
        return self._metadata

    def _fetch_keys(self) -> dict[str, PyJWK]:
        metadata = self._discovered()
        url = metadata["jwks_uri"]
        document = _json_object(self._fetch(url), url)
        keys = document.get("keys")
        if not isinstance(keys, list):
            raise IssuerUnavailable(f"{url} is not a JWK set")
        usable = _signing_keys(keys)
        logger.info("fetched the issuer's keys", extra={"jwks_uri": url, "keys": len(keys), "usable": len(usable)})
        return usable


def _json_object(body: bytes, url: str) -> Mapping[str, Any]:
    try:
        document = json.loads(body)
    except ValueError as err:
        raise IssuerUnavailable(f"{url} is not JSON") from err
    if not isinstance(document, dict):
        raise IssuerUnavailable(f"{url} is not a JSON object")
    return document


def _signing_keys(keys: Sequence[object]) -> dict[str, PyJWK]:
    """The keys of a JWKS that can verify a token here, by kid: RSA or P-256 EC, for signing, of an allowed
    algorithm. Any other (an encryption key, a symmetric one, one without kid) is left out."""
    jwt = _jwt()
    usable: dict[str, PyJWK] = {}
    for jwk in keys:
        if not isinstance(jwk, dict) or not isinstance(jwk.get("kid"), str) or not jwk["kid"]:
            continue
        if jwk.get("use", "sig") != "sig" or jwk.get("alg", ALGORITHMS[0]) not in ALGORITHMS:
            continue
        if jwk.get("kty") == "RSA":
            algorithm = "RS256"
        elif jwk.get("kty") == "EC" and jwk.get("crv") == "P-256":
            algorithm = "ES256"
        else:
            continue
        try:
            usable[jwk["kid"]] = jwt.PyJWK(jwk, algorithm)
        except jwt.PyJWTError:
            continue
    return usable


class ParameterClientIds:
    """The accepted client ids an SSM parameter holds (comma-separated; ``JWT_CLIENT_IDS_PARAMETER``, the template's
    user pool client), read by the first request that needs them: a :class:`BearerVerifier`'s ``client_ids``, which
    keeps what it read for the environment's life. ``ssm`` builds the client at that first read (a relay that never
    needs it builds none at init). :class:`IssuerUnavailable` when the parameter cannot be read, and for
    :data:`FAILURE_BACKOFF_S` after, without asking SSM again.
    """

    def __init__(
        self,
        ssm: Callable[[], SSMClient],
        name: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        failure_backoff_s: float = FAILURE_BACKOFF_S,
    ) -> None:
        self._ssm = ssm
        self._client: SSMClient | None = None
        self.name = name
        self._clock = clock
        self._failure_backoff_s = failure_backoff_s
        self._failure: IssuerUnavailable | None = None
        self._failed_at = -float("inf")

    def __call__(self) -> tuple[str, ...]:
        from botocore.exceptions import BotoCoreError, ClientError

        now = self._clock()
        if self._failure is not None and now - self._failed_at < self._failure_backoff_s:
            raise self._failure
        try:
            if self._client is None:
                self._client = self._ssm()
            value = self._client.get_parameter(Name=self.name)["Parameter"].get("Value", "")
        except (ClientError, BotoCoreError) as err:
            code = err.response.get("Error", {}).get("Code", "") if isinstance(err, ClientError) else ""
            self._failure = IssuerUnavailable(
                f"the accepted client ids ({self.name}) cannot be read from SSM ({code or type(err).__name__})"
            )
            self._failed_at = now
            logger.warning("the accepted client ids could not be read", extra={"error": str(self._failure)})
            raise self._failure from err
        self._failure = None
        return tuple(item.strip() for item in value.split(",") if item.strip())


class BearerVerifier:
    """Verifies a request's bearer token (see the module docstring). Build it once per execution environment: it
    holds the issuer's keys. ``client_ids`` adds accepted client ids read when first needed (the template's Cognito
    user pool client, from SSM); it raises :class:`IssuerUnavailable` when it cannot read them."""

    def __init__(
        self,
        settings: JwtSettings,
        *,
        keys: IssuerKeys | None = None,
        client_ids: Callable[[], Sequence[str]] | None = None,
    ) -> None:
        self.settings = settings
        self.keys = keys if keys is not None else IssuerKeys(settings.issuer)
        self._client_ids_source = client_ids
        self._client_ids: tuple[str, ...] | None = None if client_ids is not None else settings.client_ids

    def accepted_client_ids(self) -> frozenset[str]:
        return frozenset(self._ordered_client_ids())

    def page_client_id(self) -> str:
        """The client the relay's page signs in with: the configured one, else the first accepted client id."""
        if self.settings.page_client_id:
            return self.settings.page_client_id
        ordered = self._ordered_client_ids()
        return ordered[0] if ordered else ""

    def _ordered_client_ids(self) -> tuple[str, ...]:
        if self._client_ids is None:
            assert self._client_ids_source is not None
            self._client_ids = (*self.settings.client_ids, *self._client_ids_source())
        return self._client_ids

    def verify(self, authorization: str | None, query: Mapping[str, str] | None = None) -> VerifiedToken:
        """The caller of a request with this ``Authorization`` header and query string."""
        token = bearer_token(authorization, query or {})
        jwt = _jwt()
        try:
            header = jwt.get_unverified_header(token)
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError:
            raise TokenRejected(Reason.MALFORMED, "the token is not a JWT") from None
        if header.get("alg") not in ALGORITHMS:
            raise TokenRejected(Reason.DISALLOWED_ALGORITHM, f"the token is not signed with {' or '.join(ALGORITHMS)}")
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise TokenRejected(Reason.UNKNOWN_KEY, "the token names no key (kid)")
        if unverified.get("iss") != self.settings.issuer:  # before any fetch: a stranger's token costs none
            raise TokenRejected(Reason.WRONG_ISSUER, "the token is not from the issuer this API accepts")
        claims = self._decoded(jwt, token, self.keys.key(kid))
        return self._accepted(claims)

    def _decoded(self, jwt: ModuleType, token: str, key: PyJWK) -> Mapping[str, Any]:
        try:
            claims: Mapping[str, Any] = jwt.decode(
                token,
                key,
                algorithms=list(ALGORITHMS),
                issuer=self.settings.issuer,
                leeway=min(self.settings.leeway_s, 60),
                options={
                    "require": ["exp", "iss", "sub"],
                    "verify_aud": False,  # aud or client_id: checked in _accepted
                    "enforce_minimum_key_length": True,
                },
            )
        except jwt.ExpiredSignatureError:
            raise TokenRejected(Reason.EXPIRED, "the token has expired; sign in again") from None
        except (jwt.ImmatureSignatureError, jwt.InvalidIssuedAtError):
            raise TokenRejected(Reason.NOT_YET_VALID, "the token is not valid yet (nbf or iat in the future)") from None
        except jwt.InvalidIssuerError:
            raise TokenRejected(Reason.WRONG_ISSUER, "the token is not from the issuer this API accepts") from None
        except (jwt.InvalidSignatureError, jwt.InvalidAlgorithmError, jwt.InvalidKeyError):
            raise TokenRejected(Reason.BAD_SIGNATURE, "the token's signature does not verify") from None
        except jwt.MissingRequiredClaimError as err:
            raise TokenRejected(Reason.MALFORMED, f"the token has no {err.claim} claim") from None
        except jwt.PyJWTError:
            raise TokenRejected(Reason.MALFORMED, "the token's claims are not valid") from None
        return claims

    def _accepted(self, claims: Mapping[str, Any]) -> VerifiedToken:
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject or len(subject) > MAX_SUBJECT_CHARS:
            raise TokenRejected(Reason.MALFORMED, f"the token's sub is not a string of 1 to {MAX_SUBJECT_CHARS}")
        token_use = claims.get("token_use")
        if token_use is not None and token_use != "access":
            raise TokenRejected(Reason.WRONG_TOKEN_USE, "the token is not an access token (token_use)")
        client_id = claims.get("client_id", claims.get("azp", ""))
        client_id = client_id if isinstance(client_id, str) else ""
        if not self._audience_accepted(claims.get("aud"), client_id, token_use):
            raise TokenRejected(Reason.WRONG_AUDIENCE, "the token is not meant for this API (aud or client_id)")
        scopes = _scopes(claims)
        required = self.settings.required_scope
        if required and required not in scopes:
            raise TokenRejected(Reason.INSUFFICIENT_SCOPE, f"the token lacks the scope {required}", scope=required)
        return VerifiedToken(self.settings.issuer, subject, int(claims["exp"]), scopes, client_id)

    def _audience_accepted(self, aud: object, client_id: str, token_use: object) -> bool:
        audiences = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
        if any(isinstance(value, str) and value in self.settings.audiences for value in audiences):
            return True
        # An access token without an accepted aud (Cognito's have none) is accepted by its client id.
        return token_use == "access" and bool(client_id) and client_id in self.accepted_client_ids()


def bearer_token(authorization: str | None, query: Mapping[str, str]) -> str:
    """The token of ``Authorization: Bearer <token>``, refused before it is parsed when it cannot be one."""
    if "access_token" in query:
        raise TokenRejected(
            Reason.TOKEN_IN_QUERY, "a token in the URL is refused (URLs are logged); send it as Authorization: Bearer"
        )
    if authorization is None or not authorization.strip():
        raise TokenRejected(Reason.MISSING, "this API needs Authorization: Bearer <access token>; sign in")
    if len(authorization) > MAX_HEADER_CHARS:
        raise TokenRejected(Reason.TOO_LARGE, f"the Authorization header is longer than {MAX_HEADER_CHARS} characters")
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not _COMPACT_JWS.fullmatch(token):
        raise TokenRejected(Reason.MALFORMED, "the Authorization header is not Bearer and a JWT")
    return token


def _scopes(claims: Mapping[str, Any]) -> frozenset[str]:
    """``scope`` (RFC 9068, space-separated) or ``scp`` (a list, or a string, as some issuers write it)."""
    found: set[str] = set()
    for name in ("scope", "scp"):
        value = claims.get(name)
        if isinstance(value, str):
            found.update(value.split())
        elif isinstance(value, list):
            found.update(item for item in value if isinstance(item, str))
    return frozenset(found)
