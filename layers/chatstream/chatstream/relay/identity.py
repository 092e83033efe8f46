"""Who owns a session: the caller of a request, under the Function URL's auth mode (``AUTH_TYPE``).

- ``AUTH_TYPE=AWS_IAM`` (:class:`IamCaller`): the caller the Function URL authenticated, from
  ``requestContext.authorizer.iam``: its Cognito identity when it signed with a Cognito identity pool's
  credentials (they all share one role session), else its ``userArn`` (for an assumed role, the role session's
  ARN), else ``<accountId>:<callerId>``. A request without either is answered ``403 forbidden`` (a
  Function URL with IAM auth never sends one; a direct invocation might). Another caller's session
  reads as unknown: ``404 session_not_found``.
- ``AUTH_TYPE=NONE`` (:class:`Anonymous`): every caller is :data:`ANONYMOUS_OWNER`; a session id (128 random bits)
  is the capability to use the session.
- ``AUTH_TYPE=JWT`` (:class:`Bearer`): the issuer and subject of the request's ``Authorization: Bearer`` access
  token (``jwt:<iss>#<sub>``), verified by the environment's :class:`~chatstream.relay.bearer.BearerVerifier`. A
  refused token is answered ``401`` (``WWW-Authenticate: Bearer error="invalid_token"``, the reason in the body),
  ``403 insufficient_scope`` or ``400`` (a token in the query string); an issuer whose keys cannot be fetched,
  ``503 issuer_unavailable`` (HTTP_API.md, "The JWT mode"). The token is checked when a request arrives: a stream
  it started, or resumed, runs to its end however soon the token expires.

The mode is chosen once, when the service is built (:func:`identity_for`); each request then asks its
:class:`Identity` for the owner, which answers it or raises the :class:`~chatstream.relay.http.HttpError` the
request is answered with. Every route but the public ones (health, the page, the API's description, the sign-in
configuration) asks before its handler runs (:class:`~chatstream.relay.http.Router`'s ``authenticate``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

from chatstream.relay.bearer import IssuerUnavailable, TokenRejected
from chatstream.relay.http import HttpError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from chatstream.relay.bearer import BearerVerifier
    from chatstream.relay.http import Request

logger = logging.getLogger(__name__)

ANONYMOUS_OWNER = "anonymous"


class Identity(Protocol):
    """How one auth mode names the caller of a request: the owner of the sessions it creates and may use."""

    def owner(self, request: Request) -> str:
        """The caller's owner name; raises an :class:`HttpError` (``403``) when the request names nobody."""
        ...


class Anonymous:
    """``AUTH_TYPE=NONE``: every caller is :data:`ANONYMOUS_OWNER`."""

    def owner(self, request: Request) -> str:
        return ANONYMOUS_OWNER


class IamCaller:
    """``AUTH_TYPE=AWS_IAM``: the caller the Function URL authenticated (see the module docstring)."""

    def owner(self, request: Request) -> str:
        owner = iam_owner(request.iam)
        if owner is None:
            raise HttpError(403, "forbidden", "the request carries no IAM caller identity; sign it with SigV4")
        return owner


def iam_owner(iam: Mapping[str, Any]) -> str | None:
    """The owner named by ``requestContext.authorizer.iam``; ``None`` when it names nobody."""
    cognito = iam.get("cognitoIdentity")
    if isinstance(cognito, dict):
        pool, identity = cognito.get("identityPoolId"), cognito.get("identityId")
        if isinstance(pool, str) and pool and isinstance(identity, str) and identity:
            # Every identity of a pool signs as one role session (…/CognitoIdentityCredentials): the identity owns
            return f"cognito-identity:{pool}:{identity}"
    user_arn, account_id, caller_id = iam.get("userArn"), iam.get("accountId"), iam.get("callerId")
    if isinstance(user_arn, str) and user_arn:
        return user_arn
    if isinstance(account_id, str) and account_id and isinstance(caller_id, str) and caller_id:
        return f"{account_id}:{caller_id}"
    return None


class Bearer:
    """``AUTH_TYPE=JWT``: the owner the request's bearer token names (see the module docstring)."""

    def __init__(self, verifier: BearerVerifier) -> None:
        self.verifier = verifier

    @classmethod
    def with_verifier(cls, verifier: BearerVerifier | None) -> Bearer:
        if verifier is None:
            raise ValueError("AUTH_TYPE JWT needs a BearerVerifier (the relay builds one per execution environment)")
        return cls(verifier)

    def owner(self, request: Request) -> str:
        try:
            return self.verifier.verify(request.header("authorization"), request.query).owner
        except TokenRejected as err:
            # The reason only: never the token, nor any claim of a token that was not accepted.
            logger.info("bearer token refused", extra={"reason": str(err.reason), "status": err.status})
            raise err.http_error() from None
        except IssuerUnavailable as err:
            logger.warning("the token issuer is unavailable", extra={"error": str(err)})
            raise err.http_error() from None


# Each AUTH_TYPE the relay knows (config.AUTH_TYPES) → its identity, given the environment's token verifier (which
# only JWT's uses).
IDENTITIES: Mapping[str, Callable[[BearerVerifier | None], Identity]] = {
    "AWS_IAM": lambda _verifier: IamCaller(),
    "NONE": lambda _verifier: Anonymous(),
    "JWT": Bearer.with_verifier,
}


def identity_for(auth_type: str, verifier: BearerVerifier | None = None) -> Identity:
    """The :class:`Identity` of ``auth_type``; ``ValueError`` for a mode the relay does not know, or JWT without a
    ``verifier``."""
    try:
        make = IDENTITIES[auth_type]
    except KeyError:
        raise ValueError(f"no identity for AUTH_TYPE {auth_type!r}; known: {', '.join(IDENTITIES)}") from None
    return make(verifier)
