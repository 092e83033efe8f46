"""The chaos run's queue read: every message of a queue, however many, and the queue left as it was."""

from __future__ import annotations

from typing import TYPE_CHECKING

import boto3
import pytest

from chaos.readback import QueueReadError, read_queue
from tests.conftest import REGION

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient


@pytest.fixture
def sqs(moto: None) -> SQSClient:
    return boto3.client("sqs", region_name=REGION)


def test_every_message_is_read_and_left_in_the_queue(sqs: SQSClient) -> None:
    # GIVEN a queue with more messages than one receive returns
    url = sqs.create_queue(QueueName="dlq")["QueueUrl"]
    sent = {f"message {n}" for n in range(37)}
    for body in sent:
        sqs.send_message(QueueUrl=url, MessageBody=body)

    # WHEN it is read, twice
    first, second = read_queue(sqs, url), read_queue(sqs, url)

    # THEN each read got every message, and the messages are all still there, visible
    assert set(first) == set(second) == sent
    assert len(first) == 37
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (attributes["ApproximateNumberOfMessages"], attributes["ApproximateNumberOfMessagesNotVisible"]) == (
        "37",
        "0",
    )


def test_a_message_another_reader_holds_fails_the_read(sqs: SQSClient) -> None:
    # GIVEN a queue of three messages, one of them received (hidden) by another reader
    url = sqs.create_queue(QueueName="dlq")["QueueUrl"]
    for n in range(3):
        sqs.send_message(QueueUrl=url, MessageBody=f"message {n}")
    sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1, VisibilityTimeout=300)

    # WHEN it is read
    # THEN the read says it could not see them all, and leaves the two it read visible
    with pytest.raises(QueueReadError, match="read 2 messages, the queue holds 3"):
        read_queue(sqs, url)
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "2"
