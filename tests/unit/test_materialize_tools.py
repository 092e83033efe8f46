"""The consumer with tool calls: a turn's calls materialized into its item apart from its reply, read from its records
when they do not fit, and tool_use records kept by a consumer that cannot read them yet until a redrive."""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Any

import boto3
import pytest

from chatstream.dlq import DeadLetterQueue
from chatstream.kinesis import StreamRecord
from chatstream.materialize import Materializer
from chatstream.records import TokenRecord, ToolCallRef, Usage, tool_calls
from chatstream.status import StopReason, TurnStatus
from chatstream.tools import ToolCall
from chatstream_local.resources import create_queue
from chatstream_ops.redrive import Redrive, RedriveStatus

if TYPE_CHECKING:
    from chatstream.table import ChatTable

OWNER = "owner"
PARIS = ToolCallRef(0, "tooluse_a", "get_weather")
OSLO = ToolCallRef(1, "tooluse_b", "get_weather")


def tool_turn(session_id: str, turn: int, oslo: tuple[str, ...] = ('"Oslo"}',)) -> list[TokenRecord]:
    """A turn that says a word, then calls get_weather twice, the second call's arguments in records of ``oslo``."""
    records = [
        TokenRecord.start(session_id, turn, 1),
        TokenRecord.delta(session_id, turn, 1, "Looking.", 2),
        TokenRecord.tool_use(session_id, turn, 2, PARIS, '{"city": "Paris"}', 3, end=True),
        TokenRecord.tool_use(session_id, turn, 3, OSLO, '{"city": ', 4),
    ]
    for seq, piece in enumerate(oslo, 4):
        records.append(TokenRecord.tool_use(session_id, turn, seq, OSLO, piece, seq + 1, end=seq == len(oslo) + 3))
    end = len(records)
    return [*records, TokenRecord.stop(session_id, turn, end, StopReason.TOOL_USE, Usage(10, 20), end + 1)]


def stream(tokens: list[TokenRecord], first: int = 1) -> list[StreamRecord]:
    return [
        StreamRecord(data=token.encode(), partition_key=token.session_id, sequence_number=str(first + index))
        for index, token in enumerate(tokens)
    ]


class NoPoison:
    def send_poison(self, poison: Any) -> None:
        raise AssertionError(f"unexpected poison: {poison.reason}")


def test_a_turns_tool_calls_are_materialized_apart_from_its_reply(chat_table: ChatTable) -> None:
    # GIVEN a turn whose records hold a word and two calls, in a batch out of order
    session_id = chat_table.create_session(OWNER)
    turn = chat_table.turns.start_next(session_id, OWNER, "weather in Paris and Oslo?")
    records = tool_turn(session_id, turn)
    # WHEN the consumer materializes them
    outcome = Materializer(table=chat_table, poison_sink=NoPoison()).process(stream([*records[3:], *records[:3]]))
    # THEN the turn item holds the reply, and apart from it each call with its complete arguments, and tool_use
    assert outcome.ok and outcome.turns_completed == 1
    item = chat_table.get_turn(session_id, turn)
    assert item is not None and (item.status, item.stop_reason) == (TurnStatus.COMPLETE, StopReason.TOOL_USE)
    assert item.assistant == "Looking."
    assert item.tool_calls == (
        ToolCall("tooluse_a", "get_weather", '{"city": "Paris"}'),
        ToolCall("tooluse_b", "get_weather", '{"city": "Oslo"}'),
    )
    # AND a turn without calls has none
    plain = chat_table.turns.start_next(session_id, OWNER, "thanks")
    Materializer(table=chat_table, poison_sink=NoPoison()).process(
        stream([TokenRecord.stop(session_id, plain, 1, StopReason.END_TURN, Usage(1, 0), 7)], first=100)
    )
    assert chat_table.get_turn(session_id, plain).tool_calls == ()  # type: ignore[union-attr]


def test_calls_too_large_for_the_turn_item_are_read_from_its_records(chat_table: ChatTable) -> None:
    # GIVEN a call whose arguments (450 KB in UTF-8, in records of 45,000 characters) are more than DynamoDB's 400 KB
    # item can hold
    session_id = chat_table.create_session(OWNER)
    turn = chat_table.turns.start_next(session_id, OWNER, "write it all")
    pieces = ('"', *["\u00e9" * 45_000] * 5, '"}')
    huge = "".join(pieces)
    records = tool_turn(session_id, turn, oslo=pieces)
    # WHEN the consumer materializes the turn
    outcome = Materializer(table=chat_table, poison_sink=NoPoison()).process(stream(records))
    # THEN the turn ended, its item without the calls (marked to read its texts from its records)
    assert outcome.ok
    key = {"pk": {"S": f"S#{session_id}"}, "sk": {"S": f"T#{turn:06d}"}}
    raw = chat_table.client.get_item(TableName=chat_table.table_name, Key=key)["Item"]
    assert raw["texts_in_records"] == {"BOOL": True} and "tool_calls" not in raw
    # AND every read of it has its calls exactly, assembled from its records
    item = chat_table.get_turn(session_id, turn)
    assert item is not None and item.status is TurnStatus.COMPLETE
    assert [call.arguments for call in item.tool_calls] == ['{"city": "Paris"}', '{"city": ' + huge]
    assert chat_table.list_turns(session_id)[0].tool_calls == item.tool_calls
    assert chat_table.turns.start_next(session_id, OWNER, "thanks") == turn + 1


@pytest.fixture
def dlq(moto: None, template: Any) -> DeadLetterQueue:
    sqs = boto3.client("sqs", region_name="us-east-1")
    return DeadLetterQueue(sqs, create_queue(sqs, template, "ConsumerDLQ"))


def test_a_consumer_that_reads_only_versions_1_and_2_keeps_tool_use_records_for_the_redrive_after_its_upgrade(
    chat_table: ChatTable, dlq: DeadLetterQueue, kinesis: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a consumer of the release before tool use (it knows schema versions 1 and 2), and a turn with calls
    session_id = chat_table.create_session(OWNER)
    turn = chat_table.turns.start_next(session_id, OWNER, "weather?")
    records = tool_turn(session_id, turn)
    with monkeypatch.context() as older:
        older.setattr("chatstream.records.SCHEMA_VERSIONS", frozenset({1, 2}))
        # WHEN it reads the turn's records
        outcome = Materializer(table=chat_table, poison_sink=dlq).process(stream(records))
    # THEN each tool_use record went to its DLQ, with its payload, as a version it does not know
    assert outcome.ok and outcome.poison == 3
    assert {poison.reason for poison in outcome.poison_records} == {"unsupported schema version 3"}
    bodies = [json.loads(message.body) for message in dlq.receive(10, visibility_timeout_s=0, wait_s=0)]
    assert sorted(base64.b64decode(body["payload"]) for body in bodies) == sorted(r.encode() for r in records[2:5])
    # AND the turn ended with its reply alone: no reader took the arguments for text
    before = chat_table.get_turn(session_id, turn)
    assert before is not None and before.assistant == "Looking." and before.tool_calls == ()

    # WHEN the consumer is upgraded and the DLQ redriven
    materializer = Materializer(table=chat_table, poison_sink=dlq, reconcile_finished_turns=True)
    report = Redrive(dlq=dlq, kinesis=kinesis, materializer=materializer, receive_wait_s=0).run()
    # THEN the records are in the table and the turn holds its calls, exactly; the DLQ is empty
    assert report.ok and {result.status for result in report.results} == {RedriveStatus.REDRIVEN}
    assert tool_calls(chat_table.query_records(session_id, turn)) == list(
        chat_table.get_turn(session_id, turn).tool_calls
    )  # type: ignore[union-attr]
    assert [call.id for call in chat_table.get_turn(session_id, turn).tool_calls] == ["tooluse_a", "tooluse_b"]  # type: ignore[union-attr]
    assert dlq.receive(10, visibility_timeout_s=0, wait_s=0) == []
