"""What the terminal client says when something fails: one line that says what to do."""

from __future__ import annotations

import httpx
import pytest
from botocore.exceptions import NoCredentialsError
from httpx_sse import SSEError

from chatstream_client.api import ApiError
from chatstream_client.cli import explain, main

LOCAL = "http://127.0.0.1:3000"
DEPLOYED = "https://abc.lambda-url.us-east-1.on.aws"


@pytest.mark.parametrize(
    ("error", "url", "signed", "says"),
    [
        (NoCredentialsError(), DEPLOYED, True, "no AWS credentials"),
        (httpx.ConnectError("refused"), LOCAL, False, "make local"),
        (httpx.ConnectError("Name or service not known"), DEPLOYED, True, "check the URL"),
        (httpx.ReadTimeout("timed out"), DEPLOYED, True, "did not answer in time"),
        (SSEError("not an event stream"), LOCAL, False, "RelayFunctionUrl"),
        (ApiError(403, "http_error", '{"Message":"Forbidden"}'), DEPLOYED, True, "lambda:InvokeFunctionUrl"),
        (ApiError(403, "http_error", '{"Message":"Forbidden"}'), DEPLOYED, False, "--iam"),
        (ApiError(400, "invalid_request", "message must not be empty"), LOCAL, False, "message must not be empty"),
    ],
)
def test_each_failure_is_explained_in_one_line(error: Exception, url: str, signed: bool, says: str) -> None:
    line = explain(error, url, signed)
    assert says in line and "\n" not in line


def test_a_url_that_is_not_http_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    # WHEN the client is given something that is not an http(s) URL
    status = main(["--url", "127.0.0.1:3000", "--message", "hi", "--no-iam"])
    # THEN it says so in one line and exits 2
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "--url must be an http:// or https:// URL" in err
