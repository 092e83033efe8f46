"""RelayFunction's handler (functions/relay/app.py) deployed with ``FunctionUrlAuthType=JWT`` and the template's
Cognito user pool (``CreateUserPool=true``), under moto.

The environment is the template's own for those parameters. The issuer's discovery document and JWKS come through
the verifier's own HTTP path, served by a fake pool; the accepted client id from moto's SSM, as the template's
``UserPoolClientIdsParameter`` holds it.
"""

from __future__ import annotations

import copy
import io
import json
import time
from typing import TYPE_CHECKING, Any

import boto3
import pytest

from chatstream.relay import bearer
from chatstream_local.oidc.keys import SigningKeys
from chatstream_local.template import Template
from streaming_runtime import StreamingResponse
from tests.support import FakeContext, load_event, load_function

if TYPE_CHECKING:
    from types import ModuleType

REGION = "us-east-1"
POOL_CLIENT = "4k2vpoolclient"
SUBJECT = "5f1c6a2e-0b7d-4c1e-9a57-2b8f3e4d5c6a"


class FakeResponse:
    def __init__(self, status: int, body: bytes) -> None:
        self.status = status
        self._body = body

    def read(self, amount: int) -> bytes:
        return self._body[:amount]

    def release_conn(self) -> None:
        pass


class FakeIssuerPool:
    """Answers the verifier's GETs (urllib3's ``PoolManager.request``) with the issuer's two documents."""

    def __init__(self, issuer: str, keys: SigningKeys) -> None:
        self.issuer = issuer
        self.keys = keys
        self.fetched: list[str] = []

    def request(self, method: str, url: str, **kwargs: Any) -> FakeResponse:
        self.fetched.append(url)
        if url == f"{self.issuer}/.well-known/openid-configuration":
            return FakeResponse(200, json.dumps({"issuer": self.issuer, "jwks_uri": f"{self.issuer}/jwks"}).encode())
        if url == f"{self.issuer}/jwks":
            return FakeResponse(200, json.dumps(self.keys.jwks()).encode())
        return FakeResponse(404, b"{}")


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch, table_name: str) -> dict[str, str]:
    template = Template.load(
        region=REGION, parameter_overrides={"FunctionUrlAuthType": "JWT", "CreateUserPool": "true"}
    )
    variables = dict(template.function_settings("RelayFunction")["Environment"]["Variables"])
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("CHAT_TABLE_NAME", table_name)
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    return variables


@pytest.fixture
def issuer(environment: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> FakeIssuerPool:
    pool = FakeIssuerPool(environment["JWT_ISSUER"], SigningKeys("RS256"))
    monkeypatch.setattr(bearer, "_http", lambda: pool)
    return pool


def history_event(session_id: str, authorization: str | None) -> dict[str, Any]:
    """The history sample as a JWT deployment's public URL sends it: no IAM caller, maybe a bearer token."""
    raw = copy.deepcopy(load_event("relay-history.json"))
    raw["rawPath"] = raw["requestContext"]["http"]["path"] = f"/sessions/{session_id}"
    raw["requestContext"].pop("authorizer", None)
    if authorization is not None:
        raw["headers"]["authorization"] = authorization
    return raw


def cognito_access_token(keys: SigningKeys, issuer: str) -> str:
    now = int(time.time())
    claims = {"iss": issuer, "sub": SUBJECT, "client_id": POOL_CLIENT, "token_use": "access", "scope": "openid"}
    return keys.sign({**claims, "iat": now, "exp": now + 600})


def answer(app: ModuleType, event: dict[str, Any]) -> tuple[int, Any, dict[str, str]]:
    response = app.handler(event, FakeContext("RelayFunction"))
    assert isinstance(response, StreamingResponse)
    return response.status_code, json.loads("".join(str(c) for c in response.body)), dict(response.headers)


def logged_lines(output: str, message: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("message") == message]


def test_a_jwt_deployment_checks_cognito_access_tokens_reading_its_client_from_ssm_when_first_needed(
    environment: dict[str, str], issuer: FakeIssuerPool
) -> None:
    # GIVEN the relay's cold start, before the user pool's client id is in SSM: init reads neither SSM nor the issuer
    app = load_function("relay")
    assert issuer.fetched == []
    logs = io.StringIO()  # what the function's log handler writes (CloudWatch's lines)
    app.logger.registered_handler.setStream(logs)
    boto3.client("ssm", region_name=REGION).put_parameter(
        Name=environment["JWT_CLIENT_IDS_PARAMETER"], Value=POOL_CLIENT, Type="String"
    )
    session_id = "0" * 32
    token = cognito_access_token(issuer.keys, issuer.issuer)
    # WHEN a request comes without a token THEN 401 with the challenge, and the log names no owner
    status, body, headers = answer(app, history_event(session_id, None))
    assert (status, body["error"]["code"]) == (401, "missing_token")
    assert headers["WWW-Authenticate"] == 'Bearer realm="chatstream"'
    # WHEN a user's Cognito access token comes (no aud: its client_id, read from SSM, is accepted)
    status, body, _ = answer(app, history_event(session_id, f"Bearer {token}"))
    # THEN the relay knows the caller: the session is not theirs (it does not exist), 404 as under IAM
    assert (status, body["error"]["code"]) == (404, "session_not_found")
    # AND the issuer's keys were fetched once, and each request's log line holds its owner and never the token
    assert issuer.fetched == [f"{issuer.issuer}/.well-known/openid-configuration", f"{issuer.issuer}/jwks"]
    output = logs.getvalue()
    answered = logged_lines(output, "request answered")
    assert [(line["status"], line.get("owner")) for line in answered] == [
        (401, None),
        (404, f"jwt:{issuer.issuer}#{SUBJECT}"),
    ]
    assert all(part not in output for part in token.split("."))


def test_a_jwt_deployment_whose_client_ids_cannot_be_read_answers_503(
    environment: dict[str, str], issuer: FakeIssuerPool
) -> None:
    # GIVEN a deployment whose SSM parameter is missing (deleted, or not readable by the role)
    app = load_function("relay")
    token = cognito_access_token(issuer.keys, issuer.issuer)
    # WHEN a token that needs the client ids comes THEN 503 issuer_unavailable, which names the parameter
    status, body, headers = answer(app, history_event("0" * 32, f"Bearer {token}"))
    assert (status, body["error"]["code"], headers["Retry-After"]) == (503, "issuer_unavailable", "5")
    assert environment["JWT_CLIENT_IDS_PARAMETER"] in body["error"]["message"]
