"""The local AWS_IAM check: SigV4 signatures verified against the local principals (chatstream_local.iam)."""

from __future__ import annotations

import hashlib
import time
from typing import TYPE_CHECKING

import httpx
import pytest
from botocore.credentials import Credentials

from chatstream_client.auth import SigV4Auth
from chatstream_local.iam import Principal, Principals, SigV4Verifier, own_key

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

REGION = "us-east-1"
ALICE = Principal("alice", "AKIAALICEEXAMPLE", "alice-secret")
BOB = Principal("bob", "AKIABOBEXAMPLE", "bob-secret", session_token="bob-token")
URL = "http://127.0.0.1:3000"


def signed(
    principal: Principal,
    method: str = "POST",
    path: str = "/chat?x=1",
    body: bytes = b'{"message": "hi"}',
    *,
    region: str = REGION,
    service: str = "lambda",
) -> httpx.Request:
    """A request as the client sends it: signed by chatstream_client.auth.SigV4Auth (botocore's SigV4)."""
    credentials = Credentials(principal.access_key, principal.secret_key, principal.session_token)
    request = httpx.Request(method, f"{URL}{path}", content=body, headers={"content-type": "application/json"})
    return next(SigV4Auth(region, credentials=credentials, service=service).auth_flow(request))


def verify(verifier: SigV4Verifier, request: httpx.Request, body: bytes | None = None) -> Principal | None:
    target = request.url.raw_path.decode()
    headers = list(request.headers.multi_items())
    return verifier.verify(request.method, target, headers, request.content if body is None else body)


@pytest.fixture
def verifier() -> SigV4Verifier:
    return SigV4Verifier(Principals([ALICE, BOB]), REGION)


def test_a_request_signed_by_a_principal_is_that_principal(verifier: SigV4Verifier) -> None:
    assert verify(verifier, signed(ALICE)) == ALICE
    assert verify(verifier, signed(BOB, "GET", "/sessions/abc", b"")) == BOB
    identity = verifier("GET", "/health", list(signed(ALICE, "GET", "/health", b"").headers.multi_items()), b"")
    assert identity is not None
    assert identity["userArn"] == "arn:aws:iam::123456789012:user/alice"
    assert identity["accessKey"] == ALICE.access_key


def test_an_unsigned_request_is_nobody(verifier: SigV4Verifier) -> None:
    request = httpx.Request("GET", f"{URL}/health")
    assert verify(verifier, request) is None


@pytest.mark.parametrize(
    "forged",
    [
        pytest.param(lambda: signed(Principal("mallory", ALICE.access_key, "guessed")), id="wrong secret"),
        pytest.param(lambda: signed(Principal("eve", "AKIAUNKNOWN", "secret")), id="unknown key"),
        pytest.param(lambda: signed(ALICE, region="eu-west-1"), id="another region"),
        pytest.param(lambda: signed(ALICE, service="s3"), id="another service"),
        pytest.param(lambda: signed(Principal("bob", BOB.access_key, BOB.secret_key)), id="token missing"),
        pytest.param(
            lambda: signed(Principal("alice", ALICE.access_key, ALICE.secret_key, "a-token")), id="token not issued"
        ),
    ],
)
def test_a_signature_that_does_not_hold_is_refused(verifier: SigV4Verifier, forged: object) -> None:
    assert callable(forged)
    assert verify(verifier, forged()) is None


def test_a_changed_request_no_longer_matches_its_signature(verifier: SigV4Verifier) -> None:
    request = signed(ALICE)
    headers = list(request.headers.multi_items())
    # the body, the path, the query, the method, a signed header: each change breaks it
    assert verifier.verify("POST", "/chat?x=1", headers, b'{"message": "changed"}') is None
    assert verifier.verify("POST", "/chat/x?x=1", headers, request.content) is None
    assert verifier.verify("POST", "/chat?x=2", headers, request.content) is None
    assert verifier.verify("PUT", "/chat?x=1", headers, request.content) is None
    retyped = [(name, "text/plain" if name.lower() == "content-type" else value) for name, value in headers]
    assert verifier.verify("POST", "/chat?x=1", retyped, request.content) is None
    # AND the unchanged request still passes (the checks above failed for their change alone)
    assert verifier.verify("POST", "/chat?x=1", headers, request.content) == ALICE


def test_a_payload_signed_as_unsigned_is_refused_as_lambda_refuses_it(verifier: SigV4Verifier) -> None:
    # GIVEN requests that declare their body's hash in X-Amz-Content-SHA256 before signing: its real SHA-256, or
    # UNSIGNED-PAYLOAD ("Lambda doesn't support unsigned payloads", CloudFront's guide to Function URL origins)
    credentials = Credentials(ALICE.access_key, ALICE.secret_key)
    body = b'{"message": "hi"}'

    def declaring(content_sha256: str) -> httpx.Request:
        headers = {"content-type": "application/json", "x-amz-content-sha256": content_sha256}
        request = httpx.Request("POST", f"{URL}/chat", content=body, headers=headers)
        return next(SigV4Auth(REGION, credentials=credentials).auth_flow(request))

    # THEN the hash is accepted, and UNSIGNED-PAYLOAD is refused, whatever the body
    assert verify(verifier, declaring(hashlib.sha256(body).hexdigest())) == ALICE
    assert verify(verifier, declaring("UNSIGNED-PAYLOAD")) is None
    assert verify(verifier, declaring("UNSIGNED-PAYLOAD"), b'{"message": "changed"}') is None


def test_a_signature_older_or_newer_than_five_minutes_is_refused() -> None:
    request = signed(ALICE)
    headers = list(request.headers.multi_items())
    now = time.time()
    for skew, accepted in ((-290, True), (290, True), (-310, False), (310, False)):
        verifier = SigV4Verifier(Principals([ALICE]), REGION, clock=lambda skew=skew: now + skew)
        assert (verifier.verify("POST", "/chat?x=1", headers, request.content) == ALICE) is accepted, skew


@pytest.fixture
def aws_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A credentials file with the default profile's static key, a config file with bob's and an SSO profile."""
    credentials = tmp_path / "credentials"
    credentials.write_text("[default]\naws_access_key_id = AKIADEFAULT\naws_secret_access_key = s-default\n")
    config = tmp_path / "config"
    config.write_text(
        "[profile bob]\naws_access_key_id = AKIABOB\naws_secret_access_key = s-bob\n"
        "[profile sso]\nsso_start_url = https://example.awsapps.com/start\n"
    )
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))


def test_the_principals_are_the_static_keys_of_the_aws_configuration(
    aws_config: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a credentials file and a config file with static keys, and a profile without any
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    # WHEN the principals are read, with keys in the environment too
    principals = Principals.from_aws_config({"AWS_ACCESS_KEY_ID": "AKIAENV", "AWS_SECRET_ACCESS_KEY": "s-env"})
    # THEN each static key is a user named after its profile (the environment's: "environment")
    assert {(p.name, p.access_key, p.secret_key) for p in principals} == {
        ("default", "AKIADEFAULT", "s-default"),
        ("bob", "AKIABOB", "s-bob"),
        ("environment", "AKIAENV", "s-env"),
    }


def test_your_own_key_is_the_one_the_aws_cli_would_sign_with(aws_config: None) -> None:
    # GIVEN a default profile and a profile bob with static keys, and an SSO profile
    env_keys = {"AWS_ACCESS_KEY_ID": "AKIAENV", "AWS_SECRET_ACCESS_KEY": "s-env", "AWS_SESSION_TOKEN": "t-env"}
    # WHEN the key to sign with is chosen THEN it is botocore's: the environment's, else AWS_PROFILE's, else default's
    assert own_key({**env_keys, "AWS_PROFILE": "bob"}) == Principal("environment", "AKIAENV", "s-env", "t-env")
    assert own_key({"AWS_PROFILE": "bob"}) == Principal("bob", "AKIABOB", "s-bob")
    assert own_key({}) == Principal("default", "AKIADEFAULT", "s-default")
    # AND a profile with no static key has none to give
    assert own_key({"AWS_PROFILE": "sso"}) is None


@pytest.mark.parametrize(
    ("request_of", "code"),
    [
        (lambda: httpx.Request("POST", f"{URL}/chat"), "MissingAuthenticationTokenException"),
        (lambda: signed(Principal("eve", "AKIAEVE", "x")), "UnrecognizedClientException"),
        (lambda: signed(Principal("mallory", ALICE.access_key, "guessed")), "InvalidSignatureException"),
        (lambda: signed(ALICE, service="execute-api"), "InvalidSignatureException"),
    ],
    ids=["unsigned", "unknown key", "wrong secret", "another service"],
)
def test_a_refused_request_is_told_why_as_lambdas_api_tells_it(
    verifier: SigV4Verifier, request_of: Callable[[], httpx.Request], code: str
) -> None:
    # GIVEN a request the verifier refuses
    request = request_of()
    assert verify(verifier, request) is None
    # WHEN the Lambda API says why THEN it is the error code (x-amzn-ErrorType) deployed Lambda answers with
    assert verifier.refusal(request.headers.get("authorization"))[0] == code
