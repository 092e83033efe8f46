"""Invocation headers and the handler's context object."""

from __future__ import annotations

import time

import pytest
from awslambdaric.lambda_runtime_exception import FaultException

from streaming_runtime.context import InvalidInvocation, Invocation, make_context

ARN = "arn:aws:lambda:us-east-1:123456789012:function:RelayFunction"


def headers(**extra: str) -> dict[str, str]:
    return {
        "Lambda-Runtime-Aws-Request-Id": "8476a536-e9f4-11e8-9739-2dfe598c3fcd",
        "Lambda-Runtime-Deadline-Ms": str(int(time.time() * 1000) + 3_600_000),
        "Lambda-Runtime-Invoked-Function-Arn": ARN,
        "Lambda-Runtime-Trace-Id": "Root=1-5bef4de7-ad49b0e87f6ef6c87fc2e700;Parent=9a9197af755a6419;Sampled=1",
        "Content-Type": "application/json",
        **extra,
    }


def test_invocation_from_headers_any_case() -> None:
    # GIVEN /next response headers in lower case (as some HTTP stacks deliver them)
    lowered = {name.lower(): value for name, value in headers().items()}
    # WHEN they are parsed
    invocation = Invocation.from_headers(lowered, b"{}")
    # THEN every field is found
    assert invocation.request_id == "8476a536-e9f4-11e8-9739-2dfe598c3fcd"
    assert invocation.invoked_function_arn == ARN
    assert invocation.trace_id is not None and invocation.trace_id.startswith("Root=1-5bef4de7")
    assert invocation.content_type == "application/json"
    assert invocation.body == b"{}"


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"Lambda-Runtime-Aws-Request-Id": ""}, "Request-Id"),
        ({"Lambda-Runtime-Deadline-Ms": "soon"}, "Deadline-Ms"),
    ],
)
def test_invocation_without_request_id_or_deadline_is_refused(bad: dict[str, str], message: str) -> None:
    # GIVEN headers missing a request id, or with a deadline that is not a number
    # WHEN parsed THEN the error names the header
    with pytest.raises(InvalidInvocation, match=message):
        Invocation.from_headers(headers(**bad), b"{}")


def test_context_fields_from_headers_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the function's environment and an invocation
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "RelayFunction")
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "512")
    monkeypatch.setenv("AWS_LAMBDA_LOG_GROUP_NAME", "/aws/lambda/RelayFunction")
    monkeypatch.setenv("AWS_LAMBDA_LOG_STREAM_NAME", "2025/01/01/[$LATEST]abc")
    # WHEN the context is made
    context = make_context(Invocation.from_headers(headers(), b"{}"))
    # THEN it carries what a handler reads on Lambda
    assert context.aws_request_id == "8476a536-e9f4-11e8-9739-2dfe598c3fcd"
    assert context.invoked_function_arn == ARN
    assert context.function_name == "RelayFunction"
    assert context.function_version == "$LATEST"
    assert context.memory_limit_in_mb == "512"
    assert context.log_group_name == "/aws/lambda/RelayFunction"
    assert context.log_stream_name == "2025/01/01/[$LATEST]abc"
    assert context.client_context is None


def test_remaining_time_counts_to_the_deadline() -> None:
    # GIVEN a deadline an hour away, and one already passed
    future = make_context(Invocation.from_headers(headers(), b"{}"))
    past = make_context(
        Invocation.from_headers(headers(**{"Lambda-Runtime-Deadline-Ms": str(int(time.time() * 1000) - 5)}), b"")
    )
    # WHEN the handler asks THEN it gets the time left, never negative
    assert 0 < future.get_remaining_time_in_millis() <= 3_600_000
    assert past.get_remaining_time_in_millis() == 0


def test_client_context_and_identity_are_parsed() -> None:
    # GIVEN client-context and cognito-identity headers (JSON)
    invocation = Invocation.from_headers(
        headers(
            **{
                "Lambda-Runtime-Client-Context": '{"custom": {"k": "v"}, "env": {"platform": "x"}, '
                '"client": {"installation_id": "i-1"}}',
                "Lambda-Runtime-Cognito-Identity": '{"cognitoIdentityId": "id-1", "cognitoIdentityPoolId": "pool-1"}',
            }
        ),
        b"{}",
    )
    # WHEN the context is made
    context = make_context(invocation)
    # THEN they are objects, as on the managed runtime
    assert context.client_context.custom == {"k": "v"}
    assert context.client_context.client.installation_id == "i-1"
    assert context.identity.cognito_identity_id == "id-1"
    assert context.identity.cognito_identity_pool_id == "pool-1"


def test_malformed_client_context_is_a_runtime_fault() -> None:
    # GIVEN a client-context header that is not JSON
    invocation = Invocation.from_headers(headers(**{"Lambda-Runtime-Client-Context": "{nope"}), b"{}")
    # WHEN the context is made THEN it fails with the managed runtime's error type
    with pytest.raises(FaultException) as raised:
        make_context(invocation)
    assert raised.value.exception_type == "Runtime.LambdaContextUnmarshalError"
