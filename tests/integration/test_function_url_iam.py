"""A local Function URL with AuthType AWS_IAM: SigV4 verified against the local principals before the function runs,
the caller in ``requestContext.authorizer.iam``; and the stack's own choice between NONE and AWS_IAM."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import httpx
import pytest
from botocore.credentials import Credentials

from chatstream_client.auth import SigV4Auth
from chatstream_local.iam import Principal, Principals, SigV4Verifier
from chatstream_local.lambda_.function_url import FunctionUrlServer
from chatstream_local.lambda_.service import LocalLambda
from chatstream_local.lambda_.template_functions import FunctionSpecError
from chatstream_local.stack import LocalStack, StackSettings
from chatstream_local.template import TemplateError
from tests.fixtures.local_handlers.specs import streamed

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

pytestmark = pytest.mark.integration

ALICE = Principal("alice", "AKIAALICEEXAMPLE", "alice-secret")


def auth_of(principal: Principal) -> SigV4Auth:
    credentials = Credentials(principal.access_key, principal.secret_key, principal.session_token)
    return SigV4Auth("us-east-1", credentials=credentials)


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with (
        LocalLambda([streamed("echo-event", "echo_event")]) as local,
        FunctionUrlServer(local, "echo-event", authenticate=SigV4Verifier(Principals([ALICE]), "us-east-1")) as front,
    ):
        yield front.url


def test_a_signed_request_reaches_the_function_as_its_caller(url: str) -> None:
    # WHEN alice signs a request THEN the function runs, with alice in authorizer.iam
    response = httpx.post(f"{url}/chat?x=1", json={"message": "hi"}, auth=auth_of(ALICE), timeout=30)
    assert response.status_code == 200
    event = json.loads(response.content)
    assert event["requestContext"]["authorizer"]["iam"]["userArn"] == "arn:aws:iam::123456789012:user/alice"
    assert event["requestContext"]["authorizer"]["iam"]["accessKey"] == ALICE.access_key
    assert event["requestContext"]["accountId"] == "123456789012"


@pytest.mark.parametrize(
    "auth",
    [None, auth_of(Principal("mallory", ALICE.access_key, "guessed")), auth_of(Principal("eve", "AKIAEVE", "x"))],
    ids=["unsigned", "wrong secret", "unknown key"],
)
def test_a_request_not_signed_by_a_principal_is_forbidden_before_the_function(url: str, auth: SigV4Auth | None) -> None:
    response = httpx.post(f"{url}/chat", json={"message": "hi"}, auth=auth, timeout=30)
    # THEN the Function URL answers as Lambda's does, and the function never saw the request (it echoes events)
    assert response.status_code == 403
    assert response.json()["Message"].startswith("Forbidden. For troubleshooting Function URL authorization issues")
    assert "requestContext" not in response.text


def test_the_stack_verifies_sigv4_only_under_aws_iam(monkeypatch: pytest.MonkeyPatch) -> None:
    # The choice is the template parameter's: NONE (the local default) builds no check, AWS_IAM builds one over
    # the given principals and the stack's own key (which signs its readiness check), and anything else is refused,
    # as CloudFormation refuses a value outside a parameter's AllowedValues
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    none = LocalStack(StackSettings(port=0))
    assert none._authenticator() is None
    iam = LocalStack(
        StackSettings(port=0, parameter_overrides={"FunctionUrlAuthType": "AWS_IAM"}, principals=Principals([ALICE]))
    )
    verifier = iam._authenticator()
    assert verifier is not None and {p.name for p in verifier.principals} == {"alice", "chatstream-local-stack"}
    with pytest.raises(TemplateError, match="FunctionUrlAuthType='IAM': not one of AWS_IAM, NONE"):
        LocalStack(StackSettings(port=0, parameter_overrides={"FunctionUrlAuthType": "IAM"}))


def test_under_aws_iam_no_call_to_the_lambda_api_reads_a_callers_session_unless_signed(
    start_stack: Callable[..., LocalStack],
) -> None:
    # GIVEN the stack under AWS_IAM, and alice's session
    stack = start_stack(parameter_overrides={"FunctionUrlAuthType": "AWS_IAM"}, principals=Principals([ALICE]))
    chat = httpx.post(f"{stack.url}/chat", json={"message": "mine"}, auth=auth_of(ALICE), timeout=60).text
    session = json.loads(chat.split("event: meta\ndata: ", 1)[1].split("\n", 1)[0])["session_id"]
    # WHEN someone invokes the relay through the Lambda API on the URL's port with a Function URL event that names
    # alice as the caller: unsigned, or signed with the key every stack once shared (local/local/local)
    assert stack.function_url is not None
    event = stack.function_url.build_event("GET", f"/sessions/{session}", [], b"", "127.0.0.1", ALICE.identity())
    invocations = f"{stack.url}/2015-03-31/functions/{stack.name('RelayFunction')}/invocations"
    unsigned = httpx.post(invocations, json=event, timeout=60)
    shared_key = httpx.post(
        invocations, json=event, auth=auth_of(Principal("s", "local", "local", "local")), timeout=60
    )
    # THEN both are refused as Lambda's API refuses them, and alice's conversation is not in either answer
    assert (unsigned.status_code, unsigned.headers["x-amzn-errortype"]) == (403, "MissingAuthenticationTokenException")
    assert (shared_key.status_code, shared_key.headers["x-amzn-errortype"]) == (403, "UnrecognizedClientException")
    assert "mine" not in unsigned.text + shared_key.text
    # AND alice, signing, reads it there as through her Function URL
    signed = httpx.post(invocations, json=event, auth=auth_of(ALICE), timeout=60)
    assert signed.status_code == 200 and "mine" in signed.text


def test_the_stack_runs_sam_builds_output_only_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    # GIVEN a build folder with the relay and its layers only
    for name in ("RelayFunction", "ChatstreamLayer/python", "StreamingRuntimeLayer/python"):
        (tmp_path / name).mkdir(parents=True)
    built = LocalStack(StackSettings(port=0, code="build", build_dir=tmp_path))
    # WHEN the stack resolves each function's code THEN the relay's is the build's, exec wrapper included
    dirs, wrapper = built.functions.code_of("RelayFunction", "/opt/bin/chatstream-streaming")
    assert dirs == [
        tmp_path / "RelayFunction",
        tmp_path / "ChatstreamLayer/python",
        tmp_path / "StreamingRuntimeLayer/python",
    ]
    assert wrapper == tmp_path / "StreamingRuntimeLayer/bin/chatstream-streaming"
    # AND a function the build lacks is one clear error naming what to run
    with pytest.raises(FunctionSpecError, match=r"ProxyFunction is missing: run `make build` \(sam build\) first"):
        built.functions.code_of("ProxyFunction")
    # AND by default the source tree runs, whatever the build folder holds
    source_dirs, _ = LocalStack(StackSettings(port=0, build_dir=tmp_path)).functions.code_of("RelayFunction")
    assert [d.name for d in source_dirs] == ["relay", "chatstream", "streaming-runtime"]
