"""How a failed model call becomes the turn's error: Bedrock's own errors, and the transport's, before the stream
and during it (where botocore lets urllib3's errors through as they are)."""

from __future__ import annotations

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
