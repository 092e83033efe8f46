"""Who owns a session: the caller of a request, under the Function URL's auth mode (``AUTH_TYPE``).

- ``AUTH_TYPE=AWS_IAM`` (:class:`IamCaller`): the caller the Function URL authenticated, from
  ``requestContext.authorizer.iam``: its Cognito identity when it signed with a Cognito identity pool's
  credentials (they all share one role session), else its ``userArn`` (for an assumed role, the role session's
  ARN), else ``<accountId>:<callerId>``. A request without either is answered ``403 forbidden`` (a
  Function URL with IAM auth never sends one; a direct invocation might). Another caller's session
  reads as unknown: ``404 session_not_found``.
- ``AUTH_TYPE=NONE`` (:class:`Anonymous`): every caller is :data:`ANONYMOUS_OWNER`; a session id (128 random bits)
  is the capability to use the session.
- ``AUTH_TYPE=JWT``: bearer tokens are not checked yet (:mod:`chatstream.relay.bearer` is not routed), so a request
  names its caller only as under ``AWS_IAM``, which the public URL of this mode never does: every owned route
  answers ``403 forbidden`` (HTTP_API.md, "The JWT mode").

The mode is chosen once, when the service is built (:func:`identity_for`); each request then asks its
:class:`Identity` for the owner, which answers it or raises the :class:`~chatstream.relay.http.HttpError` the
request is answered with. A mode the relay verifies itself (a bearer token) is one more class with an
``owner(request)``, in :data:`IDENTITIES` under its ``AUTH_TYPE``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from chatstream.relay.http import HttpError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from chatstream.relay.http import Request

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


# Each AUTH_TYPE the relay knows (config.AUTH_TYPES) → how it names a caller. JWT's is IAM's until bearer tokens are
# checked (the module docstring).
IDENTITIES: Mapping[str, Callable[[], Identity]] = {"AWS_IAM": IamCaller, "NONE": Anonymous, "JWT": IamCaller}


def identity_for(auth_type: str) -> Identity:
    """The :class:`Identity` of ``auth_type``; ``ValueError`` for a mode the relay does not know."""
    try:
        make = IDENTITIES[auth_type]
    except KeyError:
        raise ValueError(f"no identity for AUTH_TYPE {auth_type!r}; known: {', '.join(IDENTITIES)}") from None
    return make()
