"""The DLQ's two kinds of message, built and parsed in one place: poison records and on-failure records."""

from __future__ import annotations

import json

import pytest

from chatstream.dlq import DlqKind, DlqMessage, FailedBatch, PoisonRecord
from chatstream.errors import InvalidDeadLetter
from chatstream.kinesis import StreamRecord
from tests.support import load_sample

SHARD = "shardId-000000000000"
STREAM_ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/chatstream-local-TokenStream"


def received(body: object) -> DlqMessage:
    return DlqMessage("m-1", "receipt-1", body if isinstance(body, str) else json.dumps(body))


def test_poison_messages_round_trip_and_oversized_payloads_are_left_out() -> None:
    # GIVEN a small and a huge poison record
    small = PoisonRecord(StreamRecord("1", "k", b"\x00abc", SHARD, STREAM_ARN, 1.0), "bad")
    huge = PoisonRecord(StreamRecord("2", "k", b"x" * 300_000, SHARD, STREAM_ARN, 1.0), "too big")
    # WHEN they become DLQ messages
    small_body, huge_body = small.body(), huge.body()
    # THEN the small one carries its payload back, the huge one says it was left out (re-read by coordinates)
    assert received(small_body).parse() == small
    assert json.loads(huge_body)["payload"] is None and len(huge_body) < 256 * 1024
    parsed = received(huge_body).parse()
    assert isinstance(parsed, PoisonRecord) and parsed.payload_truncated and parsed.record.data == b""


def test_the_sample_messages_parse_as_their_kinds() -> None:
    # GIVEN the two sample messages (real-shaped: what the consumer and the event source mapping send)
    poison = received(load_sample("consumer-dlq-poison-message.json"))
    on_failure = received(load_sample("consumer-dlq-onfailure-message.json"))
    # THEN each is recognised and parsed with its coordinates
    assert (poison.kind, on_failure.kind) == (DlqKind.POISON, DlqKind.ON_FAILURE)
    record = poison.parse()
    assert isinstance(record, PoisonRecord) and record.reason.startswith("not JSON")
    assert record.record.sequence_number == "49656828320045186468263475326587621271450751255653556226"
    assert on_failure.parse() == FailedBatch(
        shard_id="shardId-000000000000",
        start="49656828320045186468263475326587621234557263108234452994",
        end="49656828320045186468263475326587621308344239403072659458",
        stream_arn="arn:aws:kinesis:us-east-1:123456789012:stream/chatstream-TokenStream",
        batch_size=5,
        condition="RetryAttemptsExhausted",
    )


@pytest.mark.parametrize("body", ["not json", "[1]", '{"hello": "world"}', '{"kind": "something-else"}'])
def test_other_messages_are_of_no_kind(body: str) -> None:
    message = received(body)
    assert message.kind is DlqKind.UNKNOWN
    with pytest.raises(InvalidDeadLetter, match="not a poison-record or on-failure message"):
        message.parse()


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"sequenceNumber": None}, "without sequenceNumber"),
        ({"payload": "%%%"}, "malformed"),
        ({"approximateArrivalTimestamp": "soon"}, "malformed"),
    ],
)
def test_a_broken_poison_message_names_what_is_wrong(change: dict[str, object], reason: str) -> None:
    body = {**load_sample("consumer-dlq-poison-message.json"), **change}
    body = {key: value for key, value in body.items() if value is not None}
    with pytest.raises(InvalidDeadLetter, match=reason):
        received(body).parse()


def test_an_on_failure_record_without_its_range_names_the_field() -> None:
    body = load_sample("consumer-dlq-onfailure-message.json")
    del body["KinesisBatchInfo"]["endSequenceNumber"]
    with pytest.raises(InvalidDeadLetter, match="endSequenceNumber"):
        received(body).parse()
