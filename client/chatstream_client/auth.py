"""How chatstream's tools authenticate to the relay, as ``httpx.Auth``: :class:`SigV4Auth` and :class:`BearerAuth`.

:class:`BearerAuth` sends an OpenID Connect access token as ``Authorization: Bearer <token>``, for a relay whose
``FunctionUrlAuthType`` is ``JWT`` (``--token``, or ``CHATSTREAM_TOKEN``; locally ``make token SUB=alice``).

A Function URL with ``AuthType: AWS_IAM`` (chatstream's default) accepts only requests signed with SigV4 for the
service ``lambda``, by a caller allowed ``lambda:InvokeFunctionUrl`` and ``lambda:InvokeFunction`` (both, for a URL
created since October 2025). Give any ``httpx`` client this auth and
every request it sends is signed::

    import httpx
    from chatstream_client.auth import SigV4Auth

    with httpx.Client(auth=SigV4Auth()) as http:
        http.get("https://<url-id>.lambda-url.us-east-1.on.aws/health")

The signing itself is botocore's (``botocore.auth.SigV4Auth``), over the request's method, URL, headers and body.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import botocore.session
import httpx
from botocore.auth import SigV4Auth as BotocoreSigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.exceptions import NoCredentialsError

if TYPE_CHECKING:
    from collections.abc import Callable, Generator

    from botocore.credentials import Credentials

DEFAULT_REGION = "us-east-1"
_UNSIGNED_HEADERS = frozenset({"connection"})  # hop-by-hop: a proxy may change it


class SigV4Auth(httpx.Auth):
    """Signs each request with SigV4 (``httpx.Client(auth=SigV4Auth())``).

    Args:
        region: the region to sign for. Default: the region in a Function URL's host
            (``<url-id>.lambda-url.<region>.on.aws``), else the configured one (``AWS_REGION``, which the other AWS
            SDKs and the local stack read first, ``AWS_DEFAULT_REGION``, the profile's ``region``), else ``us-east-1``.
        profile: the named profile of the shared AWS config to take credentials (and the region) from.
            Default: ``AWS_PROFILE``, else the default profile.
        credentials: botocore credentials to sign with. Default: botocore's default chain (environment variables,
            the shared config and credentials files, SSO, container and instance roles). Refreshable credentials
            are refreshed as they expire.
        service: the signing name of the service the URL belongs to; ``lambda`` for a Function URL.

    Raises:
        botocore.exceptions.NoCredentialsError: no ``credentials`` were given and the default chain found none.
        botocore.exceptions.ProfileNotFound: ``profile`` is not in the shared config.
    """

    requires_request_body = True  # the body is part of the signature

    def __init__(
        self,
        region: str | None = None,
        *,
        profile: str | None = None,
        credentials: Credentials | None = None,
        service: str = "lambda",
    ) -> None:
        session = botocore.session.Session(profile=profile)
        if credentials is None:
            credentials = session.get_credentials()
        if credentials is None:
            raise NoCredentialsError()
        self.region = region
        self.service = service
        # botocore reads AWS_DEFAULT_REGION, not AWS_REGION, which the other SDKs (and `make local`) read first
        self._configured_region: str | None = os.environ.get("AWS_REGION") or session.get_config_variable("region")
        self._credentials = credentials

    def region_for(self, url: httpx.URL) -> str:
        """The region a request to ``url`` is signed for (see the class's ``region`` argument)."""
        return self.region or function_url_region(url.host) or self._configured_region or DEFAULT_REGION

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        headers = {key: value for key, value in request.headers.items() if key.lower() not in _UNSIGNED_HEADERS}
        aws_request = AWSRequest(method=request.method, url=str(request.url), data=request.content, headers=headers)
        credentials = self._credentials.get_frozen_credentials()
        BotocoreSigV4Auth(credentials, self.service, self.region_for(request.url)).add_auth(aws_request)
        for key, value in aws_request.headers.items():
            request.headers[key] = value
        yield request


def function_url_region(host: str) -> str | None:
    """The region of a Function URL's host (``<url-id>.lambda-url.<region>.on.aws``), else ``None``."""
    parts = host.split(".")
    if len(parts) >= 5 and parts[1] == "lambda-url":
        return parts[2]
    return None


def is_function_url(url: str) -> bool:
    """Whether ``url`` is a Lambda Function URL (``https://<url-id>.lambda-url.<region>.on.aws/...``)."""
    return ".lambda-url." in (urlsplit(url).hostname or "")


TOKEN_ENV = "CHATSTREAM_TOKEN"


class BearerAuth(httpx.Auth):
    """Sends ``Authorization: Bearer <token>`` with each request (``httpx.Client(auth=BearerAuth(token))``).

    ``token`` is the token, or a callable that returns the current one (read at each request, so a caller can renew
    it between requests). A token with whitespace or control characters raises ``ValueError``, never reaching a header.
    """

    def __init__(self, token: str | Callable[[], str]) -> None:
        self._token = token if callable(token) else _checked(token)

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        token = _checked(self._token()) if callable(self._token) else self._token
        request.headers["Authorization"] = f"Bearer {token}"
        yield request


def _checked(token: str) -> str:
    token = token.strip()
    if not token or any(char.isspace() or ord(char) < 0x21 or ord(char) > 0x7E for char in token):
        raise ValueError("a bearer token is one line of printable ASCII without spaces")
    return token
