"""The local Lambda's invocation records, as its on-failure destinations receive them (moto in-process)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3

from chatstream.reaper import FailedGeneration
from chatstream_local.lambda_.destinations import (
    EVENT_AGE_EXCEEDED,
    RECORD_AGE_EXCEEDED,
    RETRIES_EXHAUSTED,
    AsyncFailureDestinations,
    FailedEvent,
    KinesisOnFailureRecord,
)
from chatstream_local.lambda_.invocation import FunctionError
from chatstream_local.resources import create_queue

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

    from chatstream_local.template import Template

SAMPLE = Path(__file__).parents[2] / "events" / "reaper-proxy-failure.json"
AT = 1795947302.512  # 2026-11-29T10:15:02.512Z
GENERATE = b'{"session_id": "3f9c2a7e5b1d4c8e9f0a1b2c3d4e5f60", "turn": 1}'


def received(sqs: SQSClient, url: str) -> list[dict[str, Any]]:
    messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
    return [json.loads(message["Body"]) for message in messages]


def shape(record: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """A record's keys in order, and each context's (the payloads are the event's and the function's own)."""
    return [(key, list(value) if key.endswith("Context") else []) for key, value in record.items()]


def test_a_failed_async_invocation_reaches_its_on_failure_queue_as_lambda_records_it(
    moto: None, template: Template
) -> None:
    # GIVEN the proxy's OnFailure queue and the destinations read from the template
    sqs = boto3.client("sqs")
    url = create_queue(sqs, template, "ProxyFailureQueue")
    lines: list[str] = []
    destinations = AsyncFailureDestinations.from_template(template, sqs=sqs, log=lines.append, now=lambda: AT)
    # WHEN the proxy's event fails its last attempt
    error = FunctionError.synthetic("Sandbox.Timedout", "Task timed out after\n900.00 seconds")
    destinations(FailedEvent(template.physical_name("ProxyFunction"), GENERATE, RETRIES_EXHAUSTED, error, "r-1", 1))
    # THEN the queue holds Lambda's invocation record of it, shaped as the real-shaped sample the reaper's tests use
    (body,) = received(sqs, url)
    assert body == {
        "version": "1.0",
        "timestamp": "2026-11-29T10:15:02.000Z",
        "requestContext": {
            "requestId": "r-1",
            "functionArn": f"{template.arn('ProxyFunction')}:$LATEST",
            "condition": "RetriesExhausted",
            "approximateInvokeCount": 1,
        },
        "requestPayload": json.loads(GENERATE),
        "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
        "responsePayload": {"errorType": "Sandbox.Timedout", "errorMessage": "Task timed out after\n900.00 seconds"},
    }
    (sample,) = json.loads(SAMPLE.read_text(encoding="utf-8"))["Records"]
    assert shape(body) == shape(json.loads(sample["body"]))
    # AND the reaper reads it as the failed generation it is
    failed = FailedGeneration.from_destination_record(json.dumps(body))
    assert (failed.request.turn, failed.request_id, failed.error_type) == (1, "r-1", "Sandbox.Timedout")
    # AND the stack's log says so in one line, the error's message on one line
    assert lines == [
        "ProxyFunction: asynchronous invocation failed: Sandbox.Timedout: Task timed out after 900.00 seconds; "
        "sent to ProxyFailureQueue"
    ]


def test_an_async_event_that_never_ran_is_recorded_without_a_response(moto: None, template: Template) -> None:
    # GIVEN the proxy's OnFailure queue
    sqs = boto3.client("sqs")
    url = create_queue(sqs, template, "ProxyFailureQueue")
    lines: list[str] = []
    destinations = AsyncFailureDestinations.from_template(template, sqs=sqs, log=lines.append, now=lambda: AT)
    # WHEN an event throttled until too old is given up on (it never ran)
    destinations(FailedEvent(template.physical_name("ProxyFunction"), GENERATE, EVENT_AGE_EXCEEDED, None, "r-2", 0))
    # THEN its record has no response, and says it never ran
    (body,) = received(sqs, url)
    assert list(body) == ["version", "timestamp", "requestContext", "requestPayload"]
    assert body["requestContext"]["condition"] == "EventAgeExceeded"
    assert body["requestContext"]["approximateInvokeCount"] == 0
    assert lines == [
        "ProxyFunction: asynchronous event dropped: EventAgeExceeded (it never ran); sent to ProxyFailureQueue"
    ]


def test_an_async_failure_of_a_function_without_a_destination_is_only_logged(moto: None, template: Template) -> None:
    # GIVEN a function without an OnFailure destination (the relay), and the proxy's queue
    sqs = boto3.client("sqs")
    url = create_queue(sqs, template, "ProxyFailureQueue")
    lines: list[str] = []
    destinations = AsyncFailureDestinations.from_template(template, sqs=sqs, log=lines.append)
    # WHEN one of its events fails with an error that is not JSON
    error = FunctionError("Runtime.ExitError", b"exit status 1")
    destinations(FailedEvent(template.physical_name("RelayFunction"), b"{}", RETRIES_EXHAUSTED, error, "r-3", 3))
    # THEN nothing is sent, and the log says where it did not go
    assert received(sqs, url) == []
    assert lines == [
        "RelayFunction: asynchronous invocation failed: Runtime.ExitError: exit status 1; no SQS destination"
    ]


def test_a_skipped_kinesis_batch_is_recorded_as_lambda_records_it() -> None:
    # GIVEN a batch of two records skipped for its age
    record = KinesisOnFailureRecord(
        request_id="r-4",
        function_arn="arn:aws:lambda:us-east-1:123456789012:function:consumer",
        condition=RECORD_AGE_EXCEEDED,
        approximate_invoke_count=0,
        status_code=200,
        executed_version="$LATEST",
        function_error=None,
        timestamp=AT,
        shard_id="shardId-000000000000",
        start_sequence_number="49",
        end_sequence_number="50",
        approximate_arrival_of_first_record=1795947300.1234,
        approximate_arrival_of_last_record=1795947301.9999,
        batch_size=2,
        stream_arn="arn:aws:kinesis:us-east-1:123456789012:stream/tokens",
    )
    # WHEN it is encoded THEN it is the mapping's record: its batch, in milliseconds, and no records
    assert json.loads(record.encode()) == {
        "requestContext": {
            "requestId": "r-4",
            "functionArn": "arn:aws:lambda:us-east-1:123456789012:function:consumer",
            "condition": "RecordAgeExceeded",
            "approximateInvokeCount": 0,
        },
        "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": None},
        "version": "1.0",
        "timestamp": "2026-11-29T10:15:02.512Z",
        "KinesisBatchInfo": {
            "shardId": "shardId-000000000000",
            "startSequenceNumber": "49",
            "endSequenceNumber": "50",
            "approximateArrivalOfFirstRecord": "2026-11-29T10:15:00.123Z",
            "approximateArrivalOfLastRecord": "2026-11-29T10:15:01.999Z",
            "batchSize": 2,
            "streamArn": "arn:aws:kinesis:us-east-1:123456789012:stream/tokens",
        },
    }
