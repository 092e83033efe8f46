"""ProxyFunction: invoked asynchronously with one turn to generate (see events/proxy-generate.json).

Claims the turn in ChatTable and reads its message and options there, calls Bedrock ConverseStream and writes
the reply to the Kinesis token stream as ordered, coalesced token records; the logic lives in
``chatstream.generation``. Lambda may deliver an asynchronous event more than once: a delivery that finds the turn
claimed by another invocation, or already ended, generates nothing (metric ``DuplicateInvocations``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, cast

from chatstream.cold_start import collector_paused

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from mypy_boto3_bedrock_runtime import BedrockRuntimeClient
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_kinesis import KinesisClient

# Init: every import and client below is built with the garbage collector paused (chatstream/cold_start.py says why).
with collector_paused():
    import botocore.session
    from aws_lambda_powertools import Metrics
    from aws_lambda_powertools.metrics import MetricUnit
    from botocore.config import Config

    from chatstream.aws import create_client
    from chatstream.config import ProxyConfig
    from chatstream.errors import TurnClaimed, TurnFinished
    from chatstream.generation import REQUEST_ERRORS, SETUP_ERRORS, Generation, GenerationSettings, turn_to_generate
    from chatstream.kinesis import TokenStreamWriter
    from chatstream.logs import function_logger
    from chatstream.proxy_event import GenerateRequest
    from chatstream.table import RELAY_CLAIM, ChatTable
    from chatstream.tracing import traced_handler

    logger = function_logger()  # chatstream's own modules log through it too (chatstream/logs.py)
    metrics = Metrics()
    # X-Ray subsegments for its AWS calls only with TraceAwsCalls=true (chatstream/tracing.py)
    handler_traced = traced_handler()

    CONFIG = ProxyConfig.from_env(os.environ)
    _session = botocore.session.get_session()
    # Bedrock: a stalled model stream fails after 60 s instead of hanging until the function times out.
    BEDROCK = cast("BedrockRuntimeClient", create_client(_session, "bedrock-runtime", Config(read_timeout=60)))
    # Kinesis: our writer retries failed entries itself, with backoff; botocore adds its own for transport errors.
    KINESIS = cast("KinesisClient", create_client(_session, "kinesis"))
    DYNAMODB = cast("DynamoDBClient", create_client(_session, "dynamodb"))
    SETTINGS = GenerationSettings.from_config(CONFIG)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@handler_traced
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    request = GenerateRequest.from_event(event)
    logger.append_keys(session_id=request.session_id, turn=request.turn)
    table = ChatTable(DYNAMODB, CONFIG.table.table_name, ttl_days=CONFIG.table.ttl_days)
    try:
        turn = turn_to_generate(table, request, context.aws_request_id)
    except TurnFinished as ended:
        if ended.claimed_by == RELAY_CLAIM:
            # The relay ended the turn before any generation claimed it (a cancel came first, or its Invoke seemed to
            # fail): this event is its only delivery, not a duplicate, and there is nothing left to generate.
            logger.info("turn ended before its generation started; not generated")
            return {**request.to_event(), "type": "ended", "stop_reason": None, "error": None, "records": 0}
        return _duplicate(request, ended.claimed_by)
    except TurnClaimed as claimed:
        return _duplicate(request, claimed.claimed_by)
    logger.debug("generating", extra={"message_text": turn.user})
    writer = TokenStreamWriter(KINESIS, CONFIG.stream_name, max_attempts=CONFIG.put_max_attempts)
    result = Generation(
        turn=turn,
        bedrock=BEDROCK,
        writer=writer,
        table=table,
        settings=SETTINGS,
        remaining_ms=context.get_remaining_time_in_millis,
    ).run()

    terminal = result.terminal
    metrics.add_metric(name="Deltas", unit=MetricUnit.Count, value=result.deltas)
    if result.reasoning_deltas:
        metrics.add_metric(name="ReasoningDeltas", unit=MetricUnit.Count, value=result.reasoning_deltas)
    if result.redacted_reasoning:
        metrics.add_metric(name="RedactedReasoningDeltas", unit=MetricUnit.Count, value=result.redacted_reasoning)
    if result.tool_calls:
        metrics.add_metric(name="ToolCalls", unit=MetricUnit.Count, value=result.tool_calls)
    metrics.add_metric(name="RecordsWritten", unit=MetricUnit.Count, value=result.records_written)
    metrics.add_metric(name="PutRecordsCalls", unit=MetricUnit.Count, value=result.put_calls)
    metrics.add_metric(name="KinesisThrottleRetries", unit=MetricUnit.Count, value=result.throttle_retries)
    if result.ttft_ms is not None:
        metrics.add_metric(name="TimeToFirstToken", unit=MetricUnit.Milliseconds, value=result.ttft_ms)
    if terminal.error is not None:
        metrics.add_metric(name="GenerationErrors", unit=MetricUnit.Count, value=1)
        if terminal.error.code not in REQUEST_ERRORS:  # the service's failure, not what the request asked for
            metrics.add_metric(name="ServiceFailures", unit=MetricUnit.Count, value=1)
        if terminal.error.code in SETUP_ERRORS:
            metrics.add_metric(name="ModelAccessErrors", unit=MetricUnit.Count, value=1)
    logger.info(
        "turn ended",
        extra={
            "type": terminal.type.value,
            "stop_reason": terminal.stop_reason,
            "error_code": terminal.error.code if terminal.error else None,
            "deltas": result.deltas,
            "reasoning_deltas": result.reasoning_deltas,
            "redacted_reasoning": result.redacted_reasoning,
            "tool_calls": result.tool_calls,
            "records": result.records_written,
            "ttft_ms": result.ttft_ms,
        },
    )
    return {
        "session_id": request.session_id,
        "turn": request.turn,
        "type": terminal.type.value,
        "stop_reason": terminal.stop_reason,
        "error": terminal.error.to_dict() if terminal.error else None,
        "records": result.records_written,
    }


def _duplicate(request: GenerateRequest, claimed_by: str | None) -> dict[str, Any]:
    """Another delivery of this event generates (or generated) the turn: generating again would write a second
    reply over the first one's records."""
    metrics.add_metric(name="DuplicateInvocations", unit=MetricUnit.Count, value=1)
    logger.warning("duplicate invocation; not generated", extra={"claimed_by": claimed_by})
    return {**request.to_event(), "type": "duplicate", "stop_reason": None, "error": None, "records": 0}
