"""The proxy with a reasoning model: reasoning deltas become reasoning records, kept apart from the reply.

Bedrock is a scripted ``ConverseStream`` in the shape Bedrock sends for Claude's extended thinking (reasoning
text deltas, then a signature delta, in content block 0; the reply in block 1); Kinesis and DynamoDB are moto.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from chatstream.generation import Generation, GenerationSettings, build_messages, turn_to_generate
from chatstream.kinesis import StreamRecord, TokenStreamWriter
from chatstream.materialize import Materializer
from chatstream.proxy_event import GenerateRequest
from chatstream.records import RecordType, TokenRecord, Usage, assistant_text, reasoning_text
from chatstream.status import StopReason
from tests.builders import ConverseEventStream, turn_records

if TYPE_CHECKING:
    from collections.abc import Sequence

    from mypy_boto3_kinesis import KinesisClient

    from chatstream.table import ChatTable

OWNER = "owner"


def reasoning(**delta: Any) -> dict[str, Any]:
    return {"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"reasoningContent": delta}}}


def text(value: str, block: int = 1) -> dict[str, Any]:
    return {"contentBlockDelta": {"contentBlockIndex": block, "delta": {"text": value}}}


class ScriptedBedrock:
    """``converse_stream`` answering with the given events (then ``messageStop`` and ``metadata``)."""

    def __init__(self, events: Sequence[dict[str, Any]], usage: dict[str, int] | None = None) -> None:
        self.events = list(events)
        self.usage = usage
        self.requests: list[dict[str, Any]] = []

    def converse_stream(self, **params: Any) -> dict[str, Any]:
        self.requests.append(params)
        tail: list[dict[str, Any]] = [{"messageStop": {"stopReason": "end_turn"}}]
        if self.usage is not None:
            tail.append({"metadata": {"usage": self.usage, "metrics": {"latencyMs": 42}}})
        return {"stream": ConverseEventStream(iter(self.events + tail))}


def read_stream(kinesis: KinesisClient, stream_name: str) -> list[TokenRecord]:
    shard_id = kinesis.list_shards(StreamName=stream_name)["Shards"][0]["ShardId"]
    iterator = kinesis.get_shard_iterator(StreamName=stream_name, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON")
    page = kinesis.get_records(ShardIterator=iterator["ShardIterator"], Limit=10_000)
    return [TokenRecord.decode(item["Data"]) for item in page["Records"]]


def run(chat_table: ChatTable, kinesis: KinesisClient, stream_name: str, bedrock: ScriptedBedrock, **kw: Any):
    session_id = chat_table.create_session(OWNER)
    turn = chat_table.turns.start_next(session_id, OWNER, "why?")
    current = turn_to_generate(chat_table, GenerateRequest(session_id, turn), "proxy-request")
    writer = TokenStreamWriter(kinesis, stream_name, sleep=lambda _: None)
    settings = GenerationSettings(model_id="local.model", **kw)
    result = Generation(turn=current, bedrock=bedrock, writer=writer, table=chat_table, settings=settings).run()
    return result, read_stream(kinesis, stream_name)


def test_reasoning_comes_before_the_reply_in_records_of_its_own(chat_table, kinesis, stream_name) -> None:
    # GIVEN a model that reasons (text, then its signature), then replies
    bedrock = ScriptedBedrock(
        [
            {"messageStart": {"role": "assistant"}},
            reasoning(text="Let me"),
            reasoning(text=" think."),
            reasoning(signature="c2lnbmVk"),
            {"contentBlockStop": {"contentBlockIndex": 0}},
            text("Because"),
            text(" so."),
            {"contentBlockStop": {"contentBlockIndex": 1}},
        ],
        usage={"inputTokens": 7, "outputTokens": 31},
    )
    # WHEN the proxy generates the turn
    result, records = run(chat_table, kinesis, stream_name, bedrock)
    # THEN reasoning records come first and hold only reasoning; the reply's records hold only the reply
    kinds = [record.type for record in records]
    assert kinds[0] is RecordType.START and kinds[-1] is RecordType.STOP
    assert reasoning_text(records) == "Let me think."
    assert assistant_text(records) == "Because so."
    body = [record for record in records if record.type in (RecordType.DELTA, RecordType.REASONING)]
    first_reply = next(i for i, record in enumerate(body) if record.type is RecordType.DELTA)
    assert all(record.type is RecordType.REASONING for record in body[:first_reply])
    assert all(record.type is RecordType.DELTA for record in body[first_reply:])
    # THEN the signature is in no record, and done's usage is the model's own count (reasoning tokens included)
    assert not any("c2lnbmVk" in (record.text or "") for record in records)
    assert records[-1].usage == Usage(7, 31, 42)
    assert (result.deltas, result.reasoning_deltas, result.redacted_reasoning) == (4, 2, 0)


def test_reasoning_between_reply_deltas_keeps_its_place(chat_table, kinesis, stream_name) -> None:
    # GIVEN a model that reasons again in the middle of its reply
    bedrock = ScriptedBedrock(
        [reasoning(text="a"), text("B", 1), reasoning(text="c"), text("D", 3)], usage={"inputTokens": 1}
    )
    # WHEN generated
    result, records = run(chat_table, kinesis, stream_name, bedrock)
    # THEN the records alternate kinds in the model's order, and no record mixes them
    body = [(record.type, record.text) for record in records if record.text is not None]
    assert body == [
        (RecordType.REASONING, "a"),
        (RecordType.DELTA, "B"),
        (RecordType.REASONING, "c"),
        (RecordType.DELTA, "D"),
    ]
    # THEN without the model's output count, the proxy counts every delta, reasoning included
    assert records[-1].usage is not None and records[-1].usage.output_tokens == 4 == result.deltas


def test_redacted_reasoning_is_never_text(chat_table, kinesis, stream_name) -> None:
    # GIVEN a model whose reasoning was redacted (encrypted bytes, as botocore decodes the base64 blob)
    bedrock = ScriptedBedrock(
        [reasoning(redactedContent=b"\x00\x01opaque"), reasoning(redactedContent=b"more"), text("Fine.")],
        usage={"inputTokens": 1, "outputTokens": 9},
    )
    # WHEN generated
    result, records = run(chat_table, kinesis, stream_name, bedrock)
    # THEN no record carries it, the reply is intact, and the proxy counted what it dropped
    assert [record.type for record in records] == [RecordType.START, RecordType.DELTA, RecordType.STOP]
    assert assistant_text(records) == "Fine."
    assert result.redacted_reasoning == 2 and result.reasoning_deltas == 0


@pytest.fixture
def sink() -> Any:
    class Sink:
        def send_poison(self, poison: Any) -> None:
            raise AssertionError(f"unexpected poison: {poison.reason}")

    return Sink()


def stream_records(tokens: list[TokenRecord]) -> list[StreamRecord]:
    return [
        StreamRecord(data=token.encode(), partition_key=token.session_id, sequence_number=str(index + 1))
        for index, token in enumerate(tokens)
    ]


def test_the_turn_item_keeps_reasoning_apart_and_the_next_prompt_leaves_it_out(chat_table, sink) -> None:
    # GIVEN a finished turn with reasoning, materialized by the consumer, and a second turn
    session_id = chat_table.create_session(OWNER)
    chat_table.turns.start_next(session_id, OWNER, "first")
    tokens = turn_records(session_id, 1, ["One"], reasoning=["Pondering", " deeply"])
    outcome = Materializer(table=chat_table, poison_sink=sink).process(stream_records(tokens))
    chat_table.turns.start_next(session_id, OWNER, "second")
    # THEN the turn's reply is the answer alone and its reasoning is beside it
    first = chat_table.get_turn(session_id, 1)
    assert outcome.ok and first is not None
    assert (first.assistant, first.reasoning) == ("One", "Pondering deeply")
    assert first.stop_reason is StopReason.END_TURN
    # WHEN the proxy builds turn 2's messages THEN turn 1's reasoning is not sent back, only its reply
    messages = build_messages(chat_table, turn_to_generate(chat_table, GenerateRequest(session_id, 2), "proxy-request"))
    assert messages == [
        {"role": "user", "content": [{"text": "first"}]},
        {"role": "assistant", "content": [{"text": "One"}]},
        {"role": "user", "content": [{"text": "second"}]},
    ]
