"""SigV4Auth: what an httpx client (the CLI's, or openai's) sends to an AWS_IAM Function URL."""

from __future__ import annotations

import datetime

import botocore.auth
import httpx
import pytest
from botocore.credentials import Credentials
from botocore.exceptions import NoCredentialsError

from chatstream_client.auth import BearerAuth, SigV4Auth, function_url_region, is_function_url

URL = "https://abc123.lambda-url.eu-west-1.on.aws"
CREDENTIALS = Credentials("AKIDEXAMPLE", "secret", "token")


def sent_with(
    auth: SigV4Auth, method: str = "POST", path: str = "/chat", body: bytes = b'{"message":"hi"}'
) -> httpx.Request:
    """The request as the server receives it, through a client that uses ``auth``."""
    seen: list[httpx.Request] = []

    def server(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"status": "ok"})

    with httpx.Client(base_url=URL, auth=auth, transport=httpx.MockTransport(server)) as client:
        client.post("/chat", content=body, headers={"content-type": "application/json"})
    return seen[0]


def test_a_request_is_signed_for_lambda_in_the_region_of_the_url(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN credentials and a configured region other than the URL's
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    # WHEN a request goes to a Function URL in eu-west-1
    request = sent_with(SigV4Auth(credentials=CREDENTIALS))
    # THEN it carries a SigV4 signature for service lambda in eu-west-1, with the session token
    authorization = request.headers["authorization"]
    assert authorization.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/eu-west-1/lambda/aws4_request" in authorization
    assert "host" in authorization.split("SignedHeaders=", 1)[1]
    assert request.headers["x-amz-security-token"] == "token"
    assert request.headers["x-amz-date"]


def test_an_explicit_region_wins_over_the_url() -> None:
    request = sent_with(SigV4Auth("ap-south-1", credentials=CREDENTIALS))
    assert "/ap-south-1/lambda/aws4_request" in request.headers["authorization"]


@pytest.mark.parametrize(("aws_region", "signed_for"), [("eu-west-1", "eu-west-1"), (None, "us-west-2")])
def test_a_local_url_is_signed_for_aws_region_first(
    monkeypatch: pytest.MonkeyPatch, aws_region: str | None, signed_for: str
) -> None:
    # GIVEN a URL whose host names no region (the local stack), AWS_DEFAULT_REGION set, and maybe AWS_REGION, which
    # the local stack and the other AWS SDKs read first (botocore alone does not)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")
    if aws_region is None:
        monkeypatch.delenv("AWS_REGION", raising=False)
    else:
        monkeypatch.setenv("AWS_REGION", aws_region)
    auth = SigV4Auth(credentials=CREDENTIALS)
    # THEN its requests are signed for the region the stack took
    assert auth.region_for(httpx.URL("http://127.0.0.1:3000/chat")) == signed_for


def test_the_body_is_part_of_the_signature(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN one signer and a clock that stands still
    now = datetime.datetime(2025, 1, 31, 12, 0, 0)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: now)
    auth = SigV4Auth(credentials=CREDENTIALS)
    # WHEN the same request is sent twice, and once with another body
    first, again, other = (sent_with(auth, body=body) for body in (b'{"m":"a"}', b'{"m":"a"}', b'{"m":"b"}'))
    # THEN the same request has the same signature, and another body another one
    signatures = [request.headers["authorization"].split("Signature=")[1] for request in (first, again, other)]
    assert signatures[0] == signatures[1] != signatures[2]


def test_without_credentials_anywhere_it_raises_botocores_no_credentials_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN an empty AWS configuration: no variables, no files, no instance metadata
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    # WHEN / THEN
    with pytest.raises(NoCredentialsError):
        SigV4Auth()


def test_the_region_of_a_function_url_host() -> None:
    assert function_url_region("abc.lambda-url.us-west-2.on.aws") == "us-west-2"
    assert function_url_region("127.0.0.1") is None
    assert is_function_url(f"{URL}/chat") and not is_function_url("http://127.0.0.1:3000")


# ------------------------------------------------------------------------------------------------ BearerAuth


def test_bearer_auth_sends_the_token_on_every_request() -> None:
    seen: list[str | None] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        return httpx.Response(200)

    transport = httpx.MockTransport(answer)
    tokens = iter(["first.token.sig", "renewed.token.sig"])
    with httpx.Client(transport=transport, auth=BearerAuth(lambda: next(tokens))) as http:
        http.get("http://relay/sessions/x")
        http.post("http://relay/chat", json={"message": "hi"})
    # THEN each request carries the token current when it was sent
    assert seen == ["Bearer first.token.sig", "Bearer renewed.token.sig"]


@pytest.mark.parametrize("token", ["", "two words", "line\r\nX-Injected: 1", "é.t.s"])
def test_bearer_auth_refuses_a_token_that_is_not_one_printable_word(token: str) -> None:
    with pytest.raises(ValueError, match="printable ASCII"):
        BearerAuth(token)


def test_smoke_with_a_token_checks_the_refusals_and_another_user() -> None:
    from chatstream_client import smoke

    # GIVEN make smoke with two users' tokens
    args = smoke._parser().parse_args(["--url", "https://x.lambda-url.us-east-1.on.aws", "--token", "a.b.c"])
    auth, second = smoke._auths(args)
    assert isinstance(auth, BearerAuth) and second is None
    args = smoke._parser().parse_args(["--url", "http://127.0.0.1:3000", "--token", "a.b.c", "--second-token", "d.e.f"])
    auth, second = smoke._auths(args)
    names = [name for name, _ in smoke.Smoke(args.url, auth=auth, second_auth=second).checks()]
    # THEN it checks the refusal of a missing or made-up token and that the second user cannot see the first's session
    assert names[-2:] == ["401 without a token", "another principal"] and "403 unsigned" not in names


@pytest.mark.parametrize("argv", [["--token", "a.b.c", "--iam"], ["--second-token", "a.b.c"], ["--token", "a b"]])
def test_smoke_refuses_a_token_beside_iam_or_alone_second_or_malformed(argv: list[str]) -> None:
    from chatstream_client import smoke

    with pytest.raises(smoke.UsageError):
        smoke._auths(smoke._parser().parse_args(["--url", "http://127.0.0.1:3000", *argv]))
