"""How a failed model call becomes the turn's error: Bedrock's own errors, and the transport's, before the stream
and during it (where botocore lets urllib3's errors through as they are)."""

from __future__ import annotations

import logging

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError
from urllib3.exceptions import ProtocolError
from urllib3.exceptions import ReadTimeoutError as Urllib3ReadTimeoutError

from chatstream.generation import classify_bedrock_error


@pytest.mark.parametrize(
    ("err", "code", "retryable"),
    [
        (
            ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow"}}, "ConverseStream"),
            "throttled",
            True,
        ),
        (
            ClientError({"Error": {"Code": "ValidationException", "Message": "bad"}}, "ConverseStream"),
            "invalid_request",
            False,
        ),
        (ReadTimeoutError(endpoint_url="https://bedrock-runtime"), "timeout", True),
        (EndpointConnectionError(endpoint_url="https://bedrock-runtime"), "model_unavailable", True),
        # mid-stream: the model silent past the read timeout, the connection reset
        (Urllib3ReadTimeoutError(None, "https://bedrock-runtime", "Read timed out."), "timeout", True),
        (ProtocolError("Connection broken", ConnectionResetError(104, "reset")), "model_unavailable", True),
        (RuntimeError("a bug"), "internal_error", False),
    ],
)
def test_each_failure_gets_its_code_and_whether_asking_again_may_help(
    err: BaseException, code: str, retryable: bool
) -> None:
    error = classify_bedrock_error(err)
    assert (error.code, error.retryable) == (code, retryable)
    assert type(err).__name__ in error.message or code in ("throttled", "invalid_request")


@pytest.mark.parametrize("code", ["AccessDeniedException", "ResourceNotFoundException"])
def test_a_refusal_of_the_deployment_keeps_its_account_and_role_in_the_logs_not_in_the_reply(
    code: str, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN Bedrock refusing the proxy's role, in its own words (which name the account and the role)
    words = "User: arn:aws:sts::123456789012:assumed-role/chatstream-ProxyRole/x is not authorized to perform: bedrock"
    err = ClientError({"Error": {"Code": code, "Message": words}}, "ConverseStream")
    # WHEN it becomes the turn's error THEN the client is told the model is not available, without those words
    with caplog.at_level(logging.ERROR):
        error = classify_bedrock_error(err)
    assert code in error.message and "123456789012" not in error.message and not error.retryable
    # AND the operators' log has them
    (line,) = [r for r in caplog.records if r.getMessage() == "the model refused this deployment"]
    assert line.error_message == words  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("words", "code"),
    [
        ("The provided model identifier is invalid.", "model_not_found"),
        (
            "Invocation of model ID anthropic.claude-x with on-demand throughput isn't supported. Retry your request "
            "with the ID or ARN of an inference profile that contains this model.",
            "model_not_found",
        ),
        ("messages: text content blocks must be non-empty", "invalid_request"),
        ("Input is too long for requested model.", "context_length_exceeded"),
        ("prompt is too long: 210000 tokens > 200000 maximum", "context_length_exceeded"),
        ("This model's maximum context length is 8192 tokens.", "context_length_exceeded"),
    ],
)
def test_a_validation_exception_about_the_model_is_the_deployments_not_the_requests(words: str, code: str) -> None:
    # GIVEN Bedrock refusing the model id the deployment gives it, or refusing a request
    err = ClientError({"Error": {"Code": "ValidationException", "Message": words}}, "ConverseStream")
    # THEN a refused model id is the deployment's setup (model_not_found: ProxyModelAccessAlarm counts it), and any
    # other validation failure stays the request's (invalid_request, with Bedrock's words)
    error = classify_bedrock_error(err)
    assert error.code == code and not error.retryable
    assert (words in error.message) is (code != "model_not_found")
    # AND a history too long for the model says what to do: every later turn of the session would fail alike
    assert ("start a new session" in error.message) is (code == "context_length_exceeded")
