"""The local Lambda API beyond Invoke: InvokeWithResponseStream, LogType Tail, GetFunction, and the API on the
Function URL's port (the stack's edge), each driven by boto3's own lambda client."""

from __future__ import annotations

import base64
import itertools
import json
from typing import TYPE_CHECKING, Any

import boto3
import httpx
import pytest
from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import ClientError

from chatstream_local.edge import LambdaApiRoute
from chatstream_local.iam import Principal, Principals, SigV4Verifier
from chatstream_local.lambda_.function_url import PRELUDE_DELIMITER, FunctionUrlServer
from chatstream_local.lambda_.invoke import InvokeEndpoint
from chatstream_local.lambda_.service import LocalLambda
from tests.fixtures.local_handlers.specs import HANDLERS, STREAMING_RUNTIME_LAYER, buffered, on_layer

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.integration

SPECS = [
    buffered("echo", "echo"),
    buffered("fail", "fail"),
    buffered("noisy", "noisy"),
    on_layer("layer-gated", "gated"),
    on_layer("layer-fail-mid", "fail_mid"),
]


@pytest.fixture(scope="module")
def local() -> Iterator[LocalLambda]:
    lines: list[tuple[str, str]] = []
    with LocalLambda(SPECS, log_sink=lambda label, line: lines.append((label, line))) as running:
        yield running


@pytest.fixture(scope="module")
def endpoint(local: LocalLambda) -> Iterator[InvokeEndpoint]:
    with InvokeEndpoint(local) as running:
        yield running


LOCAL_KEY = Principal("local", "local", "local")  # any key does where nothing verifies signatures
ALICE = Principal("alice", "AKIAALICEEXAMPLE", "alice-secret")


def lambda_client(url: str, key: Principal = LOCAL_KEY, **config: Any) -> Any:
    return boto3.client(
        "lambda",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id=key.access_key,
        aws_secret_access_key=key.secret_key,
        config=Config(retries={"max_attempts": 1}, read_timeout=60, **config),
    )


@pytest.fixture
def client(endpoint: InvokeEndpoint) -> Any:
    return lambda_client(endpoint.url)


def test_a_streamed_response_arrives_chunk_by_chunk_as_payload_chunks(client: Any, tmp_path: Path) -> None:
    # GIVEN a function on the streaming runtime layer that writes "first", then waits for a signal file
    signal = tmp_path / "signal"
    payload = json.dumps({"queryStringParameters": {"signal": str(signal)}}).encode()

    # WHEN boto3 invokes it with InvokeWithResponseStream
    response = client.invoke_with_response_stream(FunctionName="layer-gated", Payload=payload)
    events = iter(response["EventStream"])

    # THEN the HTTP integration response streams: the prelude and "first" arrive while the function still waits
    assert response["StatusCode"] == 200
    assert response["ResponseStreamContentType"] == "application/vnd.awslambda.http-integration-response"
    received = b""
    while b"first" not in received:
        received += next(events)["PayloadChunk"]["Payload"]
    prelude, body = received.split(PRELUDE_DELIMITER, 1)
    assert json.loads(prelude)["statusCode"] == 202 and body == b"first\n"
    assert not signal.exists()
    # AND once the function goes on, the rest follows, then InvokeComplete without an error
    signal.touch()
    rest = list(events)
    assert b"".join(event["PayloadChunk"]["Payload"] for event in rest[:-1]) == b"second\n"
    assert rest[-1] == {"InvokeComplete": {}}


def test_a_buffered_function_streams_its_payload_as_one_chunk(client: Any) -> None:
    response = client.invoke_with_response_stream(FunctionName="echo", Payload=b'{"n": 7}')
    events = list(response["EventStream"])
    assert [next(iter(event)) for event in events] == ["PayloadChunk", "InvokeComplete"]
    assert json.loads(events[0]["PayloadChunk"]["Payload"])["event"] == {"n": 7}


@pytest.mark.parametrize(
    ("function", "error_code", "details"),
    [("fail", "ValueError", "the handler failed on purpose"), ("layer-fail-mid", "RuntimeError", "the stream broke")],
)
def test_a_function_error_ends_the_stream_in_invoke_complete(
    client: Any, function: str, error_code: str, details: str
) -> None:
    # WHEN the function fails (before its response, or in the middle of its stream)
    response = client.invoke_with_response_stream(FunctionName=function, Payload=b"{}")
    events = list(response["EventStream"])
    # THEN the stream still answers 200 and its last event, InvokeComplete, names the error
    assert response["StatusCode"] == 200
    complete = events[-1]["InvokeComplete"]
    assert complete["ErrorCode"] == error_code and details in complete["ErrorDetails"]


def test_log_type_tail_returns_the_invocations_log_between_start_and_report(client: Any) -> None:
    # WHEN a function that prints a line is invoked with LogType Tail, buffered and streamed
    buffered_response = client.invoke(FunctionName="noisy", Payload=b"{}", LogType="Tail")
    streamed = client.invoke_with_response_stream(FunctionName="noisy", Payload=b"{}", LogType="Tail")
    complete = list(streamed["EventStream"])[-1]["InvokeComplete"]

    # THEN each log holds Lambda's lines around the function's own, for that request
    for log_result in (buffered_response["LogResult"], complete["LogResult"]):
        lines = base64.b64decode(log_result).decode().splitlines()
        starts = [i for i, line in enumerate(lines) if line.startswith("START RequestId: ")]
        assert len(starts) == 1
        request_id = lines[starts[0]].split()[2]
        printed = lines.index("a line the handler printed")
        end = lines.index(f"END RequestId: {request_id}")
        assert starts[0] < printed < end
        report = lines[end + 1]
        assert report.startswith(f"REPORT RequestId: {request_id}\tDuration: ")
        assert "\tMemory Size: 128 MB" in report
    # AND without LogType, there is none
    assert "LogResult" not in client.invoke(FunctionName="noisy", Payload=b"{}")


def test_get_function_describes_the_configuration_and_where_the_code_is(client: Any) -> None:
    described = client.get_function(FunctionName="layer-gated")
    configuration = described["Configuration"]
    assert configuration["FunctionName"] == "layer-gated"
    assert configuration["Handler"] == "layer_handlers.gated"
    assert described["Code"]["Location"] == HANDLERS.as_uri()
    assert [layer["Arn"] for layer in configuration["Layers"]] == [STREAMING_RUNTIME_LAYER.resolve().as_uri()]
    with pytest.raises(client.exceptions.ResourceNotFoundException):
        client.get_function(FunctionName="no-such-function")


def test_the_lambda_api_answers_on_the_function_urls_port(local: LocalLambda, endpoint: InvokeEndpoint) -> None:
    # GIVEN a Function URL that also routes the Lambda API's paths (as the stack's port does)
    with FunctionUrlServer(local, "echo", invoke_mode="BUFFERED", lambda_api=LambdaApiRoute(endpoint.url)) as url:
        client = lambda_client(url.url)
        # WHEN boto3 calls the Lambda API there
        invoked = client.invoke(FunctionName="echo", Payload=b'{"via": "edge"}')
        streamed = client.invoke_with_response_stream(FunctionName="echo", Payload=b'{"via": "edge"}')
        chunks = [event for event in streamed["EventStream"] if "PayloadChunk" in event]
        # THEN it answers as the Invoke endpoint itself does
        assert json.loads(invoked["Payload"].read())["event"] == {"via": "edge"}
        assert json.loads(chunks[0]["PayloadChunk"]["Payload"])["event"] == {"via": "edge"}
        assert client.get_function(FunctionName="echo")["Configuration"]["FunctionName"] == "echo"
        # AND with one Server and one Date header, this port's own
        described = httpx.get(f"{url.url}/2015-03-31/functions/echo", timeout=30)
        assert [name.lower() for name, _ in described.headers.multi_items()].count("date") == 1
        assert [name.lower() for name, _ in described.headers.multi_items()].count("server") == 1
        # AND every other path is still the function's
        answered = httpx.get(f"{url.url}/2015-03-31", timeout=30).json()
        assert answered["event"]["rawPath"] == "/2015-03-31"


def test_under_aws_iam_the_lambda_api_on_the_urls_port_takes_only_calls_a_principal_signed(
    local: LocalLambda, endpoint: InvokeEndpoint
) -> None:
    # GIVEN an AWS_IAM Function URL whose port also routes the Lambda API (as the stack's does), alice a principal
    verifier = SigV4Verifier(Principals([ALICE]), "us-east-1")
    lambda_api = LambdaApiRoute(endpoint.url, verifier)
    with FunctionUrlServer(local, "echo", invoke_mode="BUFFERED", authenticate=verifier, lambda_api=lambda_api) as url:
        # WHEN a caller invokes the function directly with a made-up Function URL event naming alice: unsigned, with
        # a key no principal has, with alice's key and a guessed secret
        event = json.dumps(
            {"requestContext": {"authorizer": {"iam": {"userArn": "arn:aws:iam::123456789012:user/alice"}}}}
        )
        callers = {
            "MissingAuthenticationTokenException": lambda_client(url.url, signature_version=UNSIGNED),
            "UnrecognizedClientException": lambda_client(url.url, Principal("eve", "AKIAEVE", "eve-secret")),
            "InvalidSignatureException": lambda_client(url.url, Principal("mallory", ALICE.access_key, "guessed")),
        }
        calls = {
            "invoke": {"FunctionName": "echo", "Payload": event},
            "invoke_with_response_stream": {"FunctionName": "echo", "Payload": event},
            "get_function": {"FunctionName": "echo"},
        }
        for (code, caller), (operation, arguments) in itertools.product(callers.items(), calls.items()):
            with pytest.raises(ClientError) as refused:
                getattr(caller, operation)(**arguments)
            # THEN each call is refused as Lambda refuses it, before the function could run
            error = refused.value.response
            assert (error["ResponseMetadata"]["HTTPStatusCode"], error["Error"]["Code"]) == (403, code), operation
        # AND alice's signed calls (boto3's, as `make invoke` and the AWS CLI sign them) are answered
        alice = lambda_client(url.url, ALICE)
        invoked = alice.invoke(FunctionName="echo", Payload=b'{"via": "edge"}')
        assert json.loads(invoked["Payload"].read())["event"] == {"via": "edge"}
        streamed = alice.invoke_with_response_stream(FunctionName="echo", Payload=b'{"via": "edge"}')
        assert [event for event in streamed["EventStream"] if "PayloadChunk" in event]
        assert alice.get_function(FunctionName="echo")["Configuration"]["FunctionName"] == "echo"
