"""ConsumerFunction's handler on the sample events in events/, under moto."""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from botocore.exceptions import ClientError

from chatstream.dlq import DlqKind
from chatstream.errors import ConfigError
from chatstream.status import StopReason, TurnStatus
from chatstream_local.resources import create_queue
from tests.support import FakeContext, load_event, load_function

if TYPE_CHECKING:
    from types import ModuleType

    from chatstream.table import ChatTable

OWNER = "alice"


@pytest.fixture
def dlq_url(moto: None, template: Any) -> str:
    return create_queue(boto3.client("sqs", region_name="us-east-1"), template, "ConsumerDLQ")


@pytest.fixture
def app(monkeypatch: pytest.MonkeyPatch, template: Any, table_name: str, dlq_url: str) -> ModuleType:
    for name, value in template.function_settings("ConsumerFunction")["Environment"]["Variables"].items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("CHAT_TABLE_NAME", table_name)
    monkeypatch.setenv("DLQ_URL", dlq_url)
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    return load_function("consumer")


def session_of(event: dict[str, Any]) -> str:
    return str(event["Records"][0]["kinesis"]["partitionKey"])


def open_turn(chat_table: ChatTable, session_id: str, monkeypatch: pytest.MonkeyPatch) -> int:
    """Create the sample's session and its turn 1 (as the relay would), under the sample's session id."""
    monkeypatch.setattr("chatstream.table.sessions.new_session_id", lambda: session_id)
    chat_table.create_session(OWNER)
    return chat_table.turns.start_next(session_id, OWNER, "hello")


def test_the_sample_turn_is_materialized_and_completed(app, chat_table, monkeypatch) -> None:
    # GIVEN the sample event with a whole turn, and the turn opened by the relay
    event = load_event("consumer-turn.json")
    session_id = session_of(event)
    turn = open_turn(chat_table, session_id, monkeypatch)
    # WHEN the handler runs on it
    response = app.handler(event, FakeContext("ConsumerFunction"))
    # THEN nothing is reported for retry, and history shows the completed turn with the exact text
    assert response == {"batchItemFailures": []}
    stored = chat_table.get_turn(session_id, turn)
    assert stored is not None
    assert (stored.status, stored.assistant, stored.stop_reason) == (
        TurnStatus.COMPLETE,
        "You said: hello",
        StopReason.END_TURN,
    )
    assert [r.seq for r in chat_table.query_records(session_id, turn)] == [0, 1, 2, 3, 4]


def test_the_sample_with_a_poison_record_sends_it_to_the_dlq_and_writes_the_rest(
    app, chat_table, dlq_url, monkeypatch
) -> None:
    # GIVEN the sample event with a truncated (undecodable) record in the middle of a turn
    event = load_event("consumer-poison.json")
    session_id = session_of(event)
    turn = open_turn(chat_table, session_id, monkeypatch)
    poison = event["Records"][2]["kinesis"]
    # WHEN the handler runs on it
    response = app.handler(event, FakeContext("ConsumerFunction"))
    # THEN the batch succeeds, the poison record is in the DLQ with its payload, and the rest is written
    assert response == {"batchItemFailures": []}
    sqs = boto3.client("sqs", region_name="us-east-1")
    (message,) = sqs.receive_message(QueueUrl=dlq_url, MaxNumberOfMessages=10)["Messages"]
    body = json.loads(message["Body"])
    assert body["kind"] == DlqKind.POISON and body["reason"].startswith("not JSON")
    assert base64.b64decode(body["payload"]) == base64.b64decode(poison["data"])
    assert (body["sequenceNumber"], body["shardId"]) == (poison["sequenceNumber"], "shardId-000000000000")
    assert [r.seq for r in chat_table.query_records(session_id, turn)] == [0, 1, 3]
    stored = chat_table.get_turn(session_id, turn)
    assert stored is not None and (stored.status, stored.assistant) == (TurnStatus.COMPLETE, "Hi")


def test_throttled_writes_are_reported_as_batch_item_failures(app, chat_table, monkeypatch) -> None:
    # GIVEN DynamoDB throttles every write of the table
    event = load_event("consumer-turn.json")
    open_turn(chat_table, session_of(event), monkeypatch)

    def throttled(**kwargs: Any) -> Any:
        error = {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow down"}}
        raise ClientError(error, "BatchWriteItem")

    monkeypatch.setattr(app.DYNAMODB, "batch_write_item", throttled)
    # WHEN the handler runs on the sample turn
    response = app.handler(event, FakeContext("ConsumerFunction"))
    # THEN every record is reported, in Powertools' partial batch response shape (not a function error)
    sequence_numbers = [r["kinesis"]["sequenceNumber"] for r in event["Records"]]
    assert response == {"batchItemFailures": [{"itemIdentifier": seq} for seq in sequence_numbers]}


def test_an_empty_batch_succeeds(app) -> None:
    # GIVEN / WHEN the handler runs on a batch without records (the local stack's warm-up)
    response = app.handler({"Records": []}, FakeContext("ConsumerFunction"))
    # THEN nothing is reported
    assert response == {"batchItemFailures": []}


def test_a_missing_dlq_url_fails_the_cold_start_naming_it(monkeypatch, template, table_name) -> None:
    # GIVEN the environment without DLQ_URL
    monkeypatch.setenv("CHAT_TABLE_NAME", table_name)
    monkeypatch.delenv("DLQ_URL", raising=False)

    # WHEN / THEN the function cannot start, and says why
    with pytest.raises(ConfigError, match="DLQ_URL"):
        load_function("consumer")
