"""The local SQS event source mapping: what it deletes after an invocation, and how it reads a partial batch
response, as Lambda reads it (services-sqs-errorhandling, "Reporting batch item failures")."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import boto3
import pytest

from chatstream_local.event_sources.invoker import Invoked
from chatstream_local.event_sources.sqs import SqsEventSource, _batch_item_failures

if TYPE_CHECKING:
    from collections.abc import Callable

    from mypy_boto3_sqs import SQSClient

BATCH = {"m1", "m2", "m3"}


@pytest.mark.parametrize(
    ("payload", "failed"),
    [
        # a complete success: no response, an empty or null one, an empty or null list
        (None, set()),
        (b"null", set()),
        (b"{}", set()),
        (b'{"batchItemFailures": []}', set()),
        (b'{"batchItemFailures": null}', set()),
        # the messages it names
        (b'{"batchItemFailures": [{"itemIdentifier": "m2"}]}', {"m2"}),
        # a complete failure: not JSON, an identifier empty, null, under another key, or of no message of the batch
        (b"not json", None),
        (b'{"batchItemFailures": [{"itemIdentifier": ""}]}', None),
        (b'{"batchItemFailures": [{"itemIdentifier": null}]}', None),
        (b'{"batchItemFailures": [{"id": "m2"}]}', None),
        (b'{"batchItemFailures": [{"itemIdentifier": "m2"}, {"itemIdentifier": "elsewhere"}]}', None),
        (b'{"batchItemFailures": "m2"}', None),
    ],
)
def test_a_partial_batch_response_is_read_as_lambda_reads_it(payload: bytes | None, failed: set[str] | None) -> None:
    # WHEN the reaper's response is read THEN it fails the messages it names, all of them, or none, as Lambda has it
    assert _batch_item_failures(payload, BATCH) == failed


def queue_with(sqs: SQSClient, bodies: list[str]) -> tuple[str, dict[str, str]]:
    """A queue whose messages come back at once when not deleted (visibility timeout 0); its URL, ids by body."""
    url = sqs.create_queue(QueueName="reaper-input", Attributes={"VisibilityTimeout": "0"})["QueueUrl"]
    ids = {body: sqs.send_message(QueueUrl=url, MessageBody=body)["MessageId"] for body in bodies}
    return url, ids


def left_in(sqs: SQSClient, url: str) -> list[str]:
    messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
    return sorted(message["Body"] for message in messages)


@pytest.mark.parametrize(
    ("respond", "left"),
    [
        (lambda ids: Invoked(b"null"), []),
        (lambda ids: Invoked(json.dumps({"batchItemFailures": [{"itemIdentifier": ids["b"]}]}).encode()), ["b"]),
        (lambda ids: Invoked(b'{"errorType": "Boom"}', "Unhandled"), ["a", "b", "c"]),
        (lambda ids: Invoked(b"not json"), ["a", "b", "c"]),
    ],
    ids=["success", "one-reported", "function-error", "invalid-response"],
)
def test_a_poll_deletes_what_the_function_processed_and_leaves_the_rest_to_the_queue(
    moto: None, respond: Callable[[dict[str, str]], Invoked], left: list[str]
) -> None:
    # GIVEN three messages and a function that reports batch item failures
    sqs = boto3.client("sqs")
    url, ids = queue_with(sqs, ["a", "b", "c"])
    events: list[dict] = []

    def invoke(payload: bytes) -> Invoked:
        events.append(json.loads(payload))
        return respond(ids)

    source = SqsEventSource(
        sqs=sqs,
        queue_url=url,
        queue_arn="arn:aws:sqs:us-east-1:123456789012:reaper-input",
        invoke=invoke,
        report_batch_item_failures=True,
        wait_s=0,
    )
    # WHEN the mapping polls once
    assert source.poll_once() == 3
    # THEN the function got the three in one SQS event, and what it did not process is still in the queue
    (event,) = events
    assert sorted(record["body"] for record in event["Records"]) == ["a", "b", "c"]
    assert {record["eventSource"] for record in event["Records"]} == {"aws:sqs"}
    assert left_in(sqs, url) == left


def test_an_empty_queue_invokes_nothing(moto: None) -> None:
    # GIVEN an empty queue
    sqs = boto3.client("sqs")
    url, _ = queue_with(sqs, [])
    invoked: list[bytes] = []

    def invoke(payload: bytes) -> Invoked:
        invoked.append(payload)
        return Invoked(b"null")

    source = SqsEventSource(
        sqs=sqs, queue_url=url, queue_arn="arn:aws:sqs:us-east-1:123456789012:q", invoke=invoke, wait_s=0
    )
    # WHEN the mapping polls THEN it read nothing and invoked nothing
    assert source.poll_once() == 0 and invoked == []
