"""The local stack's one port: the relay's Function URL and, under the Lambda API's own paths, the Lambda API.

``make local`` listens on one port (``CHATSTREAM_PORT``, default 3000), as LocalStack's edge port serves every
service on one. A request whose path is the Lambda API's (``/2015-03-31/functions/…``,
``/2021-11-15/functions/…``: what boto3's ``lambda`` client and ``aws lambda`` send) goes to the stack's Invoke
endpoint (:mod:`chatstream_local.lambda_.invoke`); every other request is the Function URL's. So
``AWS_ENDPOINT_URL_LAMBDA=http://127.0.0.1:3000`` lets boto3, the AWS CLI and ``make invoke`` call the local
functions, and a relay path never starts with those prefixes.

:class:`LambdaApiRoute` forwards such a request to the Invoke endpoint and relays its answer as it arrives (a
response stream chunk by chunk). Given a ``verifier`` (the Function URL's, under ``AuthType: AWS_IAM``), it forwards
only a request signed by a local principal, as Lambda's API takes only signed requests; any other is answered ``403``
as Lambda answers it (:meth:`~chatstream_local.iam.SigV4Verifier.refusal`). Unchecked, an unsigned invocation of the
relay with a made-up event could name any caller in ``requestContext.authorizer.iam`` and read that caller's
sessions: on AWS the callers' policy (``RelayInvokePolicy``) allows ``lambda:InvokeFunction`` through the Function
URL only.
"""

from __future__ import annotations

import http.client
import json
import uuid
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from chatstream_local.lambda_.invoke import API_PREFIXES

if TYPE_CHECKING:
    from http.server import BaseHTTPRequestHandler

    from chatstream_local.iam import SigV4Verifier

_HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "te", "trailer", "upgrade"})
# Host too: upstream, http.client names the upstream's own, the only one the Invoke endpoint answers (loopback.py)
_NOT_FORWARDED = _HOP_BY_HOP | {"host"}
# Server and Date too, back: send_response already wrote this server's own (the client saw each twice)
_NOT_RELAYED = _HOP_BY_HOP | {"server", "date"}
_READ_SIZE = 65536


class LambdaApiRoute:
    """Answers the Lambda API's requests on another server's port, by forwarding them to ``upstream`` (a URL)."""

    def __init__(self, upstream: str, verifier: SigV4Verifier | None = None) -> None:
        split = urlsplit(upstream)
        self._host = split.hostname or "127.0.0.1"
        self._port = split.port or 80
        self._verifier = verifier

    @staticmethod
    def owns(path: str) -> bool:
        return path.startswith(API_PREFIXES)

    def _refusal(self, handler: BaseHTTPRequestHandler, body: bytes) -> tuple[str, str] | None:
        """Why the request may not pass (Lambda's error code and message); ``None``: no check, or signed."""
        verifier = self._verifier
        if verifier is None or verifier.verify(handler.command, handler.path, [*handler.headers.items()], body):
            return None
        return verifier.refusal(handler.headers.get("Authorization"))

    def forward(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        """Send ``handler``'s request (its ``body`` already read) upstream and write the answer back."""
        refusal = self._refusal(handler, body)
        if refusal is not None:
            _refuse(handler, *refusal)
            return
        headers = {name: value for name, value in handler.headers.items() if name.lower() not in _NOT_FORWARDED}
        connection = http.client.HTTPConnection(self._host, self._port, timeout=None)
        try:
            connection.request(handler.command, handler.path, body=body, headers=headers)
            response = connection.getresponse()
            handler.send_response(response.status)
            for name, value in response.getheaders():
                if name.lower() not in _NOT_RELAYED:
                    handler.send_header(name, value)
            length = response.getheader("Content-Length")
            if length is not None:
                data = response.read()
                handler.send_header("Content-Length", str(len(data)))
                handler.end_headers()
                handler.wfile.write(data)
                return
            handler.send_header("Transfer-Encoding", "chunked")
            handler.end_headers()
            while chunk := response.read1(_READ_SIZE):
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                handler.wfile.flush()
            handler.wfile.write(b"0\r\n\r\n")
            handler.wfile.flush()
        finally:
            connection.close()


def _refuse(handler: BaseHTTPRequestHandler, code: str, message: str) -> None:
    """A 403 in the Lambda API's error shape: the code in ``x-amzn-ErrorType``, the body ``{"message"}``."""
    body = json.dumps({"message": message}).encode()
    handler.send_response(403)
    for name, value in (
        ("Content-Type", "application/json"),
        ("Content-Length", str(len(body))),
        ("x-amzn-ErrorType", code),
        ("x-amzn-RequestId", str(uuid.uuid4())),
    ):
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(body)
