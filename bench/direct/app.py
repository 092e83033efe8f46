"""The ``direct`` baseline: ConverseStream straight to the client as SSE, with no token log and no table.

The floor the benchmark measures chatstream against. It runs on the same streaming runtime layer behind the same
Function URL front end as the relay, answers ``POST /chat`` with HTTP_API.md's event format (``retry``, ``meta``,
one ``token`` event per model delta, ``done`` or ``error``), and keeps nothing: no resume, no history, no cancel.
It lives in ``bench/``, not in the product.
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from chatstream.relay import sse
from streaming_runtime import StreamingResponse

if TYPE_CHECKING:
    from collections.abc import Iterator

    from aws_lambda_powertools.utilities.typing import LambdaContext
    from mypy_boto3_bedrock_runtime import BedrockRuntimeClient

MODEL_ID = os.environ.get("MODEL_ID", "us.amazon.nova-lite-v1:0")
SSE_HEADERS = {"content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache"}
BEDROCK: BedrockRuntimeClient = boto3.session.Session().client(
    "bedrock-runtime", config=Config(read_timeout=60, retries={"mode": "standard", "max_attempts": 3})
)


def handler(event: dict[str, Any], context: LambdaContext) -> StreamingResponse:
    raw = event.get("body") or ""
    if event.get("isBase64Encoded"):
        raw = base64.b64decode(raw).decode("utf-8")
    try:
        message = json.loads(raw)["message"]
    except (ValueError, KeyError, TypeError):
        body = json.dumps({"error": {"code": "invalid_request", "message": 'expected {"message": "..."}'}})
        return StreamingResponse(400, {"content-type": "application/json"}, body=[body])
    return StreamingResponse(200, SSE_HEADERS, body=_stream(str(message)))


def _stream(message: str) -> Iterator[str]:
    session_id = uuid.uuid4().hex
    meta = {"session_id": session_id, "turn": 1, "events_url": f"/sessions/{session_id}/turns/1/events"}
    yield sse.retry(1000) + sse.json_message(meta, event="meta")
    seq = 0
    usage: dict[str, int] = {}
    stop_reason = "end_turn"
    try:
        response = BEDROCK.converse_stream(
            modelId=MODEL_ID, messages=[{"role": "user", "content": [{"text": message}]}]
        )
        for item in response["stream"]:
            if "contentBlockDelta" in item:
                text = item["contentBlockDelta"]["delta"].get("text")
                if text:
                    seq += 1
                    yield sse.json_message({"text": text}, event="token", id=seq)
            elif "messageStop" in item:
                stop_reason = item["messageStop"]["stopReason"]
            elif "metadata" in item:
                raw_usage = item["metadata"].get("usage", {})
                usage = {
                    "input_tokens": raw_usage.get("inputTokens", 0),
                    "output_tokens": raw_usage.get("outputTokens", 0),
                }
    except (ClientError, BotoCoreError) as err:
        error = {"code": "model_error", "message": type(err).__name__, "retryable": True}
        yield sse.json_message(error, event="error", id=seq + 1)
        return
    yield sse.json_message({"stop_reason": stop_reason, "usage": usage}, event="done", id=seq + 1)
