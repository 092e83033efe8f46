"""AWS IAM as a local Function URL with ``AuthType: AWS_IAM`` sees it: who signed a request, if anyone.

**Principals.** Locally, the IAM users are the static keys of your own AWS configuration
(:meth:`Principals.from_aws_config`): each profile of the shared config and credentials files with an
``aws_access_key_id`` and ``aws_secret_access_key`` is the user ``arn:aws:iam::<local account>:user/<profile>``,
and keys in ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` the user ``environment`` (unless a profile has the same
key). Profiles whose credentials come from SSO, a role or a process have no static secret here and cannot sign
for the local stack.

**Verification** (:class:`SigV4Verifier`) is AWS's Signature Version 4 check, with botocore computing the
signature the request should carry from the principal's secret: the ``Authorization`` header's credential scope
must be today's, the stack's region and the service ``lambda``; ``X-Amz-Date`` within 5 minutes of now; a session
token exactly when the principal has one; a body whose SHA-256 matches ``X-Amz-Content-SHA256`` when it is sent
(``UNSIGNED-PAYLOAD`` is refused, as Lambda refuses it);
and the signature over the signed headers, the path, the query and the body must be the one the secret gives. A
request that passes is the caller :func:`iam_identity` describes (``requestContext.authorizer.iam``); any other is
refused, as a Function URL refuses it (``403 {"Message":"Forbidden. For troubleshooting …"}``), or as the Lambda API
refuses it (:meth:`SigV4Verifier.refusal`).

**Signing for the local stack** (:func:`own_key`): the static key the AWS CLI would sign with, what ``make invoke``
signs the Lambda API's requests with.
"""

from __future__ import annotations

import calendar
import hashlib
import hmac
import os
import re
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import botocore.session
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest, HTTPHeaders
from botocore.credentials import Credentials

from chatstream_local.account import ACCOUNT_ID

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping

SIGNING_SERVICE = "lambda"
MAX_CLOCK_SKEW_S = 300  # AWS refuses a signature more than 5 minutes from its own clock
_AUTHORIZATION = re.compile(
    r"^AWS4-HMAC-SHA256\s+Credential=(?P<key>[^/\s,]+)/(?P<date>\d{8})/(?P<region>[^/\s,]+)/(?P<service>[^/\s,]+)"
    r"/aws4_request,\s*SignedHeaders=(?P<signed>[a-z0-9;\-]+),\s*Signature=(?P<signature>[0-9a-f]{64})$"
)


def iam_identity(
    user_arn: str, *, access_key: str = "AKIALOCALEXAMPLE", account_id: str = ACCOUNT_ID, user_id: str = ""
) -> dict[str, Any]:
    """An ``authorizer.iam`` block for a caller (what Lambda puts there for an ``AWS_IAM`` Function URL)."""
    user_id = user_id or f"AIDA{uuid.uuid5(uuid.NAMESPACE_URL, user_arn).hex[:17].upper()}"
    return {
        "accessKey": access_key,
        "accountId": account_id,
        "callerId": user_id,
        "cognitoIdentity": None,
        "principalOrgId": None,
        "userArn": user_arn,
        "userId": user_id,
    }


@dataclass(frozen=True)
class Principal:
    """An IAM user with one access key."""

    name: str
    access_key: str
    secret_key: str
    session_token: str | None = None

    @property
    def arn(self) -> str:
        return f"arn:aws:iam::{ACCOUNT_ID}:user/{self.name}"

    def identity(self) -> dict[str, Any]:
        return iam_identity(self.arn, access_key=self.access_key)


class Principals:
    """The local principals, by access key."""

    def __init__(self, principals: Iterable[Principal] = ()) -> None:
        self._by_key: dict[str, Principal] = {}
        for principal in principals:
            self._by_key.setdefault(principal.access_key, principal)

    def __len__(self) -> int:
        return len(self._by_key)

    def __iter__(self) -> Iterator[Principal]:
        return iter(self._by_key.values())

    def get(self, access_key: str) -> Principal | None:
        return self._by_key.get(access_key)

    @classmethod
    def from_aws_config(cls, environ: Mapping[str, str] = os.environ) -> Principals:
        """Every static key of the shared AWS config and credentials files, and of the environment."""
        found = list(_profile_keys().values())
        environment = _environment_key(environ)
        if environment is not None:
            found.append(environment)
        return cls(found)


def _profile_keys() -> dict[str, Principal]:
    """The profiles of the shared config and credentials files that hold a static key, by name."""
    session = botocore.session.Session()
    found = {}
    for name, profile in sorted(session.full_config.get("profiles", {}).items()):
        key, secret = profile.get("aws_access_key_id"), profile.get("aws_secret_access_key")
        if key and secret:
            found[name] = Principal(name, key, secret, profile.get("aws_session_token"))
    return found


def _environment_key(environ: Mapping[str, str]) -> Principal | None:
    key, secret = environ.get("AWS_ACCESS_KEY_ID"), environ.get("AWS_SECRET_ACCESS_KEY")
    if not (key and secret):
        return None
    return Principal("environment", key, secret, environ.get("AWS_SESSION_TOKEN") or None)


def own_key(environ: Mapping[str, str] = os.environ) -> Principal | None:
    """The static key the AWS CLI would sign with, in botocore's order: ``AWS_ACCESS_KEY_ID`` and
    ``AWS_SECRET_ACCESS_KEY``, else the profile's (``AWS_PROFILE``, else ``default``); ``None`` when neither is a static
    key (SSO, a role, a process: nothing the local stack can verify). Read from the files only: no credential provider
    runs, none reaches the network."""
    return _environment_key(environ) or _profile_keys().get(environ.get("AWS_PROFILE") or "default")


class _ExpectedSignature(SigV4Auth):
    """botocore's SigV4 over exactly the headers the request says it signed."""

    def __init__(self, credentials: Credentials, region: str, signed: list[str]) -> None:
        super().__init__(credentials, SIGNING_SERVICE, region)
        self._signed = signed

    def headers_to_sign(self, request: AWSRequest) -> HTTPHeaders:
        headers = HTTPHeaders()
        for name in self._signed:
            headers[name] = request.headers.get(name, "")
        return headers


class SigV4Verifier:
    """Authenticates a request signed with SigV4 by one of ``principals`` (see the module docstring).

    Call it with ``(method, target, headers, body)``; it returns the caller's ``authorizer.iam``, or ``None``.
    """

    def __init__(self, principals: Principals, region: str, *, clock: Callable[[], float] = time.time) -> None:
        self.principals = principals
        self.region = region
        self._clock = clock

    def __call__(self, method: str, target: str, headers: list[tuple[str, str]], body: bytes) -> dict[str, Any] | None:
        principal = self.verify(method, target, headers, body)
        return principal.identity() if principal is not None else None

    def verify(self, method: str, target: str, headers: list[tuple[str, str]], body: bytes) -> Principal | None:
        """The principal who signed the request, or ``None`` if it is unsigned or the signature does not hold."""
        joined: dict[str, str] = {}
        for name, value in headers:
            key = name.lower()
            joined[key] = f"{joined[key]},{value}" if key in joined else value
        match = _AUTHORIZATION.match(joined.get("authorization", "").strip())
        if match is None:
            return None
        principal = self.principals.get(match["key"])
        amz_date = joined.get("x-amz-date", "")
        signed = match["signed"].split(";")
        if (
            principal is None
            or match["region"] != self.region
            or match["service"] != SIGNING_SERVICE
            or "host" not in signed
            or not self._fresh(amz_date, match["date"])
            or joined.get("x-amz-security-token") != principal.session_token
            or not _body_matches(joined.get("x-amz-content-sha256"), body)
        ):
            return None
        request = AWSRequest(
            method=method,
            url=f"http://{joined.get('host', '')}{target}",
            headers={name: joined.get(name, "") for name in signed},
            data=body,
        )
        request.context["timestamp"] = amz_date
        credentials = Credentials(principal.access_key, principal.secret_key, principal.session_token)
        expected = _ExpectedSignature(credentials, self.region, signed)
        string_to_sign = expected.string_to_sign(request, expected.canonical_request(request))
        if not hmac.compare_digest(expected.signature(string_to_sign, request), match["signature"]):
            return None
        return principal

    def refusal(self, authorization: str | None) -> tuple[str, str]:
        """Why AWS's APIs refuse a request :meth:`verify` did not authenticate, from its ``Authorization`` header: the
        error code (``x-amzn-ErrorType``) and message a Lambda API call gets (no signature, a key no principal has,
        any other failure), as deployed Lambda answers them (brefphp/bref#1250, iann0036/iamlive#58,
        erlcloud/erlcloud#690)."""
        match = _AUTHORIZATION.match((authorization or "").strip())
        if match is None:
            return "MissingAuthenticationTokenException", "Missing Authentication Token"
        if self.principals.get(match["key"]) is None:
            return "UnrecognizedClientException", "The security token included in the request is invalid."
        return "InvalidSignatureException", (
            "The request signature we calculated does not match the signature you provided. Check your AWS Secret "
            "Access Key and signing method. Consult the service documentation for details."
        )

    def _fresh(self, amz_date: str, scope_date: str) -> bool:
        try:
            signed_at = calendar.timegm(time.strptime(amz_date, "%Y%m%dT%H%M%SZ"))
        except ValueError:
            return False
        return amz_date[:8] == scope_date and abs(self._clock() - signed_at) <= MAX_CLOCK_SKEW_S


def _body_matches(declared: str | None, body: bytes) -> bool:
    """``X-Amz-Content-SHA256``, when sent, is the body's SHA-256: "Lambda doesn't support unsigned payloads"
    (CloudFront's guide, "Restrict access to an AWS Lambda function URL origin"), so ``UNSIGNED-PAYLOAD`` is refused."""
    return declared is None or declared == hashlib.sha256(body).hexdigest()
