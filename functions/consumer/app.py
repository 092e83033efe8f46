"""ConsumerFunction: materializes the Kinesis token stream into ChatTable (see events/consumer-turn.json).

The logic lives in ``chatstream.materialize``. Per-session fail-fast ordering is a property of the
whole batch (a failed write of one session must stop that session's later records, and a turn's
terminal record pulls the turn's earlier records forward), which a per-record handler cannot see.
So :class:`MaterializingProcessor` is Powertools' ``BatchProcessor`` that first materializes the
whole batch, then lets ``BatchProcessor`` walk the records as usual: the record handler raises for
each record the materializer could not write, and Powertools builds the ``batchItemFailures``
response (the event source mapping retries from the lowest failed sequence number).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, cast

from chatstream.cold_start import collector_paused

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes.kinesis_stream_event import KinesisStreamRecord
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sqs import SQSClient

# Init: every import and client below is built with the garbage collector paused (chatstream/cold_start.py says why).
with collector_paused():
    import botocore.session
    from aws_lambda_powertools import Metrics
    from aws_lambda_powertools.metrics import MetricUnit
    from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response

    from chatstream.aws import create_client
    from chatstream.config import ConsumerConfig
    from chatstream.dlq import DeadLetterQueue
    from chatstream.kinesis import StreamRecord
    from chatstream.logs import function_logger
    from chatstream.materialize import BatchOutcome, Materializer
    from chatstream.table import ChatTable
    from chatstream.tracing import traced_handler

    logger = function_logger()  # chatstream's own modules log through it too (chatstream/logs.py)
    metrics = Metrics()
    # X-Ray subsegments for its AWS calls only with TraceAwsCalls=true (chatstream/tracing.py)
    handler_traced = traced_handler()

    CONFIG = ConsumerConfig.from_env(os.environ)
    _session = botocore.session.get_session()
    # The table adapter retries unprocessed items itself; botocore adds a few retries for transport errors.
    DYNAMODB = cast("DynamoDBClient", create_client(_session, "dynamodb"))
    SQS = cast("SQSClient", create_client(_session, "sqs"))


class MaterializingProcessor(BatchProcessor):
    """A Kinesis ``BatchProcessor`` whose record handler sees the outcome of the whole batch."""

    def __init__(self, materializer: Materializer) -> None:
        # Every record failing is still a partial response (the mapping retries from the first), not an error.
        super().__init__(event_type=EventType.KinesisDataStreams, raise_on_entire_batch_failure=False)
        self.materializer = materializer
        self.outcome = BatchOutcome()

    def process(self) -> list[tuple[Any, ...]]:
        self.outcome = self.materializer.process([StreamRecord.from_lambda_record(raw) for raw in self.records])
        return super().process()

    def record_handler(self, record: KinesisStreamRecord) -> None:
        self.outcome.check(record.kinesis.sequence_number)


def _processor() -> MaterializingProcessor:
    table = ChatTable(DYNAMODB, CONFIG.table.table_name, ttl_days=CONFIG.table.ttl_days)
    return MaterializingProcessor(Materializer(table=table, poison_sink=DeadLetterQueue(SQS, CONFIG.dlq_url)))


processor = _processor()


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@handler_traced
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    if not event.get("Records"):
        return {"batchItemFailures": []}  # Powertools rejects an empty batch; Lambda never sends one
    response = process_partial_response(
        event=event, record_handler=processor.record_handler, processor=processor, context=context
    )
    outcome = processor.outcome
    metrics.add_metric(name="BatchSize", unit=MetricUnit.Count, value=outcome.records)
    metrics.add_metric(name="RecordsWritten", unit=MetricUnit.Count, value=outcome.written)
    metrics.add_metric(name="PoisonRecords", unit=MetricUnit.Count, value=outcome.poison)
    metrics.add_metric(name="RecordsRetried", unit=MetricUnit.Count, value=len(outcome.failures))
    metrics.add_metric(name="TurnsCompleted", unit=MetricUnit.Count, value=outcome.turns_completed)
    if outcome.incomplete_turns:
        metrics.add_metric(name="IncompleteTurns", unit=MetricUnit.Count, value=outcome.incomplete_turns)
    logger.info(
        "batch materialized",
        extra={
            "records": outcome.records,
            "written": outcome.written,
            "poison": outcome.poison,
            "retried": len(outcome.failures),
            "turns_completed": outcome.turns_completed,
        },
    )
    return dict(response)
