"""TurnReaperFunction: ends turns whose proxy invocation failed (ProxyFailureQueue → see chatstream.reaper).

SQS-triggered (events/reaper-proxy-failure.json) with partial batch responses: a message that is
not a generation's destination record is logged and dropped (nothing to end); a DynamoDB failure
is reported as a batch item failure, so SQS delivers the message again.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, cast

from chatstream.cold_start import collector_paused

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from mypy_boto3_dynamodb import DynamoDBClient

# Init: every import and client below is built with the garbage collector paused (chatstream/cold_start.py says why).
with collector_paused():
    import botocore.session
    from aws_lambda_powertools import Metrics
    from aws_lambda_powertools.metrics import MetricUnit
    from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response

    from chatstream.aws import create_client
    from chatstream.config import TableConfig
    from chatstream.errors import InvalidEvent
    from chatstream.logs import function_logger
    from chatstream.reaper import FailedGeneration, Reaping, end_abandoned_turn
    from chatstream.table import ChatTable
    from chatstream.tracing import traced_handler

    logger = function_logger()  # chatstream's own modules log through it too (chatstream/logs.py)
    metrics = Metrics()
    # X-Ray subsegments for its AWS calls only with TraceAwsCalls=true (chatstream/tracing.py)
    handler_traced = traced_handler()

    CONFIG = TableConfig.from_env(os.environ)
    DYNAMODB = cast("DynamoDBClient", create_client(botocore.session.get_session(), "dynamodb"))
    TABLE = ChatTable(DYNAMODB, CONFIG.table_name, ttl_days=CONFIG.ttl_days)
    processor = BatchProcessor(event_type=EventType.SQS)


def record_handler(record: SQSRecord) -> None:
    try:
        failed = FailedGeneration.from_destination_record(record.body)
    except InvalidEvent as err:
        logger.warning("not a failed generation; dropped", extra={"reason": str(err), "message_id": record.message_id})
        metrics.add_metric(name="UnrecognizedMessages", unit=MetricUnit.Count, value=1)
        return
    reaping = end_abandoned_turn(TABLE, failed, now_ms=lambda: int(time.time() * 1000))
    logger.info(
        "failed generation",
        extra={
            "session_id": failed.request.session_id,
            "turn": failed.request.turn,
            "condition": failed.condition,
            "error_type": failed.error_type,
            "request_id": failed.request_id,
            "reaping": reaping,
        },
    )
    if reaping is Reaping.ENDED:
        metrics.add_metric(name="TurnsReaped", unit=MetricUnit.Count, value=1)
    elif reaping is Reaping.LEFT_TO_CLAIMANT:
        metrics.add_metric(name="TurnsLeftToClaimant", unit=MetricUnit.Count, value=1)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@handler_traced
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    response = process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
    return dict(response)
