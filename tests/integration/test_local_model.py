"""The local Bedrock model read by plain boto3 (``bedrock-runtime`` ``converse_stream``) over loopback."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import httpx
import pytest
from botocore.config import Config
from botocore.eventstream import EventStreamBuffer
from botocore.exceptions import ClientError, EventStreamError

from chatstream_local.bedrock.endpoint import LocalModelServer

if TYPE_CHECKING:
    from collections.abc import Iterator

    from mypy_boto3_bedrock_runtime import BedrockRuntimeClient

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("aws_env")]  # fake credentials, no profile

LOCAL_DIR = Path(__file__).resolve().parents[2] / "local"
MODEL_ID = "anthropic.claude-3-5-haiku-20241022-v1:0"


def _client(endpoint_url: str | None = None) -> BedrockRuntimeClient:
    return boto3.client(
        "bedrock-runtime",
        endpoint_url=endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(retries={"mode": "standard", "total_max_attempts": 1}),  # no retries
    )


def _user(text: str) -> list[Any]:
    return [{"role": "user", "content": [{"text": text}]}]


def _events(client: BedrockRuntimeClient, text: str, **kwargs: Any) -> list[dict[str, Any]]:
    response = client.converse_stream(modelId=MODEL_ID, messages=_user(text), **kwargs)
    return list(response["stream"])  # type: ignore[arg-type]


def _text(events: list[dict[str, Any]]) -> str:
    return "".join(e["contentBlockDelta"]["delta"]["text"] for e in events if "contentBlockDelta" in e)


@pytest.fixture
def model() -> Iterator[LocalModelServer]:
    with LocalModelServer(delay_ms=0) as server:
        yield server


@pytest.fixture
def bedrock(model: LocalModelServer) -> BedrockRuntimeClient:
    return _client(model.url)


def test_a_message_streams_back_exactly_in_bedrocks_event_order(bedrock: BedrockRuntimeClient) -> None:
    # GIVEN a message with odd whitespace, a system prompt and a history
    message = "hello  there\n  how are you? "
    # WHEN boto3 streams the reply
    response = bedrock.converse_stream(
        modelId=MODEL_ID,
        system=[{"text": "be brief"}],
        messages=[
            {"role": "user", "content": [{"text": "hi"}]},
            {"role": "assistant", "content": [{"text": "hello again"}]},
            {"role": "user", "content": [{"text": message}]},
        ],
    )
    events = list(response["stream"])
    # THEN the deltas join to the exact reply, in Bedrock's event order, with the usage counted
    assert _text(events) == f"You said: {message}"  # type: ignore[arg-type]
    kinds = [next(iter(e)) for e in events]
    assert kinds == ["messageStart"] + ["contentBlockDelta"] * 7 + ["contentBlockStop", "messageStop", "metadata"]
    assert events[0] == {"messageStart": {"role": "assistant"}}
    assert events[-3] == {"contentBlockStop": {"contentBlockIndex": 0}}
    assert events[-2] == {"messageStop": {"stopReason": "end_turn"}}
    metadata = events[-1]["metadata"]
    assert metadata["usage"] == {"inputTokens": 2 + 1 + 2 + 5, "outputTokens": 7, "totalTokens": 17}
    assert metadata["metrics"]["latencyMs"] >= 0


def test_think_streams_signed_reasoning_as_block_0_then_the_reply_as_block_1(bedrock: BedrockRuntimeClient) -> None:
    # GIVEN /think 3 before a message
    # WHEN boto3 reads the stream
    events = _events(bedrock, "/think 3 hello")
    deltas = [e["contentBlockDelta"] for e in events if "contentBlockDelta" in e]
    # THEN three reasoning words come first in block 0, then its signature, as Bedrock streams extended thinking
    assert [d["delta"]["reasoningContent"]["text"] for d in deltas[:3]] == ["r1", " r2", " r3"]
    assert set(deltas[3]["delta"]["reasoningContent"]) == {"signature"} and deltas[3]["delta"]["reasoningContent"]
    assert {d["contentBlockIndex"] for d in deltas[:4]} == {0}
    # THEN block 0 stops, and block 1 is exactly the reply to "hello"
    stops = [e["contentBlockStop"]["contentBlockIndex"] for e in events if "contentBlockStop" in e]
    assert stops == [0, 1]
    assert "".join(d["delta"]["text"] for d in deltas[4:]) == "You said: hello"
    assert {d["contentBlockIndex"] for d in deltas[4:]} == {1}
    # THEN the output count includes the reasoning, and the stream ends as always
    assert events[-2] == {"messageStop": {"stopReason": "end_turn"}}
    assert events[-1]["metadata"]["usage"]["outputTokens"] == 3 + 3


def test_long_2000_arrives_word_for_word(bedrock: BedrockRuntimeClient, model: LocalModelServer) -> None:
    # GIVEN the /long command
    # WHEN boto3 streams "/long 2000"
    events = _events(bedrock, "/long 2000")
    # THEN 2000 deltas join to "w1 w2 … w2000" and the server counted each of them
    assert _text(events) == " ".join(f"w{i}" for i in range(1, 2001))
    assert sum("contentBlockDelta" in e for e in events) == 2000
    assert events[-1]["metadata"]["usage"]["outputTokens"] == 2000
    assert model.deltas_sent == 2000


def test_max_tokens_stops_the_reply_early(bedrock: BedrockRuntimeClient) -> None:
    # GIVEN maxTokens 3
    # WHEN boto3 streams "/long 50"
    events = _events(bedrock, "/long 50", inferenceConfig={"maxTokens": 3})
    # THEN three deltas, then messageStop with max_tokens and the usage to match
    assert _text(events) == "w1 w2 w3"
    assert events[-2] == {"messageStop": {"stopReason": "max_tokens"}}
    assert events[-1]["metadata"]["usage"]["outputTokens"] == 3


def test_deltas_are_spaced_in_time_not_sent_all_at_once() -> None:
    # GIVEN a model spacing deltas 200 ms apart
    with LocalModelServer(delay_ms=200) as model:
        response = _client(model.url).converse_stream(modelId=MODEL_ID, messages=_user("/long 5"))
        stream = iter(response["stream"])
        # WHEN the client has read the first delta
        assert next(stream) == {"messageStart": {"role": "assistant"}}
        assert next(stream) == {"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": "w1"}}}
        # THEN the server has not yet produced the whole reply
        assert model.deltas_sent < 5
        response["stream"].close()


def test_a_client_hanging_up_ends_generation_quietly(caplog: pytest.LogCaptureFixture) -> None:
    # GIVEN a long reply spaced 10 ms apart
    caplog.set_level(logging.DEBUG, logger="chatstream_local")
    with LocalModelServer(delay_ms=10) as model:
        client = _client(model.url)
        response = client.converse_stream(modelId=MODEL_ID, messages=_user("/long 100000"))
        stream = response["stream"]
        next(iter(stream))
        # WHEN the client closes the stream after the first event
        stream.close()
        # THEN the server stops generating without an error, and keeps serving
        assert model.wait_idle(timeout=30)
        assert model.deltas_sent < 100_000
        assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
        assert _text(_events(client, "/long 2")) == "w1 w2"


def test_error_after_n_raises_model_stream_error_after_n_deltas(bedrock: BedrockRuntimeClient) -> None:
    # GIVEN the /error-after command
    response = bedrock.converse_stream(modelId=MODEL_ID, messages=_user("/error-after 3"))
    received: list[str] = []
    # WHEN the client iterates the stream
    with pytest.raises(EventStreamError) as caught:
        for event in response["stream"]:
            if "contentBlockDelta" in event:
                received.append(event["contentBlockDelta"]["delta"]["text"])
    # THEN it got three deltas, then boto3 raised modelStreamErrorException mid-stream
    assert received == ["w1", " w2", " w3"]
    assert caught.value.response["Error"]["Code"] == "modelStreamErrorException"
    assert "3 deltas" in caught.value.response["Error"]["Message"]


def test_throttle_is_a_throttling_exception_before_any_delta(
    bedrock: BedrockRuntimeClient, model: LocalModelServer
) -> None:
    # GIVEN the /throttle command
    # WHEN boto3 calls converse_stream
    with pytest.raises(ClientError) as caught:
        bedrock.converse_stream(modelId=MODEL_ID, messages=_user("/throttle"))
    # THEN the call itself fails with ThrottlingException (HTTP 429), and nothing was streamed
    assert caught.value.response["Error"]["Code"] == "ThrottlingException"
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 429
    assert isinstance(caught.value, bedrock.exceptions.ThrottlingException)
    assert model.requests == 1
    assert model.deltas_sent == 0


@pytest.mark.parametrize(
    ("messages", "complaint"),
    [
        (
            [{"role": "user", "content": [{"text": "hi"}]}, {"role": "assistant", "content": [{"text": "yo"}]}],
            "end with",
        ),
        (_user("   "), "blank"),
        (_user("/long 100001"), "/long"),
        (_user("/long"), "/long"),
    ],
)
def test_invalid_requests_are_validation_exceptions(
    bedrock: BedrockRuntimeClient, model: LocalModelServer, messages: list[Any], complaint: str
) -> None:
    # GIVEN a request Bedrock would reject
    # WHEN boto3 sends it
    with pytest.raises(bedrock.exceptions.ValidationException) as caught:
        bedrock.converse_stream(modelId=MODEL_ID, messages=messages)
    # THEN it is a 400 ValidationException saying what is wrong, and nothing was streamed
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert complaint in caught.value.response["Error"]["Message"]
    assert model.deltas_sent == 0


def test_inference_profile_arns_reach_the_model_intact(bedrock: BedrockRuntimeClient, model: LocalModelServer) -> None:
    # GIVEN an inference profile ARN (colons and a slash, URL-encoded by boto3)
    arn = "arn:aws:bedrock:eu-west-1:123456789012:inference-profile/eu.anthropic.claude-3-haiku-20240307-v1:0"
    # WHEN boto3 streams with it
    response = bedrock.converse_stream(modelId=arn, messages=_user("hi"))
    # THEN the reply streams and the server saw the exact id
    assert _text(list(response["stream"])) == "You said: hi"  # type: ignore[arg-type]
    assert model.model_ids == (arn,)


def test_the_standard_endpoint_variable_points_boto3_at_the_model(
    model: LocalModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN only botocore's standard endpoint variable
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", model.url)
    # WHEN a client without endpoint_url streams a reply
    events = _events(_client(), "via the environment")
    # THEN it came from the local model
    assert _text(events) == "You said: via the environment"
    assert model.requests == 1


def test_raw_response_is_a_chunked_event_stream_botocore_decodes(model: LocalModelServer) -> None:
    # GIVEN a raw HTTP request, no boto3 involved
    body = json.dumps({"messages": _user("/error-after 2")}).encode()
    buffer = EventStreamBuffer()
    # WHEN the response is read byte for byte
    with httpx.stream("POST", f"{model.url}/model/{MODEL_ID}/converse-stream", content=body) as response:
        for chunk in response.iter_raw():
            buffer.add_data(chunk)
        status, headers = response.status_code, response.headers
    messages = list(buffer)  # botocore's decoder: raises on any length or CRC mismatch
    # THEN it is a 200 chunked event stream whose frames carry Bedrock's headers
    assert status == 200
    assert headers["content-type"] == "application/vnd.amazon.eventstream"
    assert headers["transfer-encoding"] == "chunked"
    assert [
        (m.headers[":message-type"], m.headers.get(":event-type") or m.headers[":exception-type"]) for m in messages
    ] == [
        ("event", "messageStart"),
        ("event", "contentBlockDelta"),
        ("event", "contentBlockDelta"),
        ("exception", "modelStreamErrorException"),
    ]
    assert all(m.headers[":content-type"] == "application/json" for m in messages)
    error = json.loads(messages[-1].payload)
    assert error["originalStatusCode"] == 500
    assert error["message"]


def test_standalone_server_serves_and_stops_on_sigterm() -> None:
    # GIVEN the model started as `python -m chatstream_local.bedrock --port 0`
    process = subprocess.Popen(
        [sys.executable, "-m", "chatstream_local.bedrock", "--port", "0", "--delay-ms", "0"],
        cwd=LOCAL_DIR,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        ready = process.stderr.readline()
        assert "chatstream local model ready at http://127.0.0.1:" in ready
        url = ready.split(" ready at ")[1].split()[0]
        # WHEN a client streams from it, then the process gets SIGTERM
        assert _text(_events(_client(url), "standalone")) == "You said: standalone"
        process.send_signal(signal.SIGTERM)
        # THEN it exits cleanly
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


TOOLS = {
    "tools": [
        {"toolSpec": {"name": "get_weather", "inputSchema": {"json": {"type": "object"}}}},
        {"toolSpec": {"name": "get_time", "inputSchema": {"json": {"type": "object"}}}},
    ]
}


def test_call_lines_stream_as_parallel_tool_use_blocks_after_the_text(bedrock: BedrockRuntimeClient) -> None:
    # GIVEN two tools declared, and a message with a line of text and two /call lines
    message = 'check both\n/call get_weather {"city": "Paris"}\n/call get_time'
    # WHEN the model streams its reply, read by boto3's own parser
    events = _events(bedrock, message, toolConfig=TOOLS)
    # THEN the text is block 0, then each call is a block of its own: start (id, name), input deltas, stop
    starts = [e["contentBlockStart"] for e in events if "contentBlockStart" in e]
    assert [(s["contentBlockIndex"], s["start"]["toolUse"]["name"]) for s in starts] == [
        (1, "get_weather"),
        (2, "get_time"),
    ]
    assert all(s["start"]["toolUse"]["toolUseId"].startswith("tooluse_") for s in starts)
    inputs = [
        e["contentBlockDelta"]["delta"]["toolUse"]["input"]
        for e in events
        if "contentBlockDelta" in e and e["contentBlockDelta"]["contentBlockIndex"] == 1
    ]
    assert len(inputs) > 2 and "".join(inputs) == '{"city": "Paris"}'
    stops = [e["contentBlockStop"]["contentBlockIndex"] for e in events if "contentBlockStop" in e]
    assert stops == [0, 1, 2]
    assert [e["messageStop"]["stopReason"] for e in events if "messageStop" in e] == ["tool_use"]
    assert (
        _text([e for e in events if "text" in e.get("contentBlockDelta", {}).get("delta", {})])
        == "You said: check both"
    )


def test_tool_results_are_answered_and_tool_blocks_without_tool_config_refused(bedrock: BedrockRuntimeClient) -> None:
    # GIVEN the model's call, and the client's result for it
    messages = [
        {"role": "user", "content": [{"text": "/call get_time"}]},
        {"role": "assistant", "content": [{"toolUse": {"toolUseId": "tooluse_1", "name": "get_time", "input": {}}}]},
        {"role": "user", "content": [{"toolResult": {"toolUseId": "tooluse_1", "content": [{"text": "noon"}]}}]},
    ]
    # WHEN sent back with the tools THEN the model says what the tool said
    events = list(bedrock.converse_stream(modelId=MODEL_ID, messages=messages, toolConfig=TOOLS)["stream"])  # type: ignore[arg-type]
    assert _text(events) == "Tool get_time said: noon"
    # WHEN sent without a toolConfig THEN it is Bedrock's ValidationException
    with pytest.raises(ClientError) as raised:
        bedrock.converse_stream(modelId=MODEL_ID, messages=messages)  # type: ignore[arg-type]
    assert raised.value.response["Error"]["Code"] == "ValidationException"
    assert "toolConfig field must be defined" in raised.value.response["Error"]["Message"]
