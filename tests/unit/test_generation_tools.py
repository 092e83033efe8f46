"""The proxy with tools: the turn's tools reach ConverseStream as ``toolConfig``, the model's tool use becomes
``tool_use`` records, and the calls and their results go back to the model on the next turn.

Bedrock is a scripted ``ConverseStream``; the exchange replayed first is the one of Bedrock's user guide ("Call a tool
with the Converse API": the ``top_song`` tool, station ``WZPZ``), as ConverseStream streams it, and every event and
request is checked against Bedrock's own service model (botocore's), so the mapping is tested against Bedrock's shapes,
not only the local model's. Kinesis and DynamoDB are moto.
"""

from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Any

import botocore.session
import pytest
from botocore.validate import ParamValidator

from chatstream.generation import (
    NO_TOOL_INSTRUCTION,
    ONE_TOOL_INSTRUCTION,
    Generation,
    GenerationSettings,
    build_messages,
    turn_to_generate,
)
from chatstream.kinesis import StreamRecord, TokenStreamWriter
from chatstream.materialize import Materializer
from chatstream.proxy_event import GenerateRequest
from chatstream.records import RecordType, TokenRecord, ToolCallRef, Usage, assistant_text, tool_calls
from chatstream.status import StopReason, TurnStatus
from chatstream.tools import ToolCall, ToolChoice, ToolChoiceMode, ToolResult, ToolSpec
from chatstream.turn_options import HistoryMessage, TurnOptions
from tests.builders import ConverseEventStream

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from mypy_boto3_kinesis import KinesisClient

    from chatstream.generation import GenerationResult
    from chatstream.table import ChatTable

OWNER = "owner"
BEDROCK_MODEL = botocore.session.get_session().get_service_model("bedrock-runtime")
TOP_SONG = ToolSpec(
    "top_song",
    {
        "type": "object",
        "properties": {
            "sign": {
                "type": "string",
                "description": "The call sign for the radio station for which you want the most popular song. "
                "Example calls signs are WZPZ and WKRP.",
            }
        },
        "required": ["sign"],
    },
    "Get the most popular song played on a radio station.",
)
WEATHER = ToolSpec("get_weather", {"type": "object", "properties": {"city": {"type": "string"}}})
TOOL_USE_ID = "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q"


def start(block: int, tool_use_id: str, name: str) -> dict[str, Any]:
    return {
        "contentBlockStart": {
            "start": {"toolUse": {"toolUseId": tool_use_id, "name": name}},
            "contentBlockIndex": block,
        }
    }


def tool_input(block: int, text: str) -> dict[str, Any]:
    return {"contentBlockDelta": {"delta": {"toolUse": {"input": text}}, "contentBlockIndex": block}}


def text(block: int, value: str) -> dict[str, Any]:
    return {"contentBlockDelta": {"delta": {"text": value}, "contentBlockIndex": block}}


def stop(block: int) -> dict[str, Any]:
    return {"contentBlockStop": {"contentBlockIndex": block}}


def message_stop(reason: str) -> dict[str, Any]:
    return {"messageStop": {"stopReason": reason}}


METADATA = {
    "metadata": {"usage": {"inputTokens": 375, "outputTokens": 57, "totalTokens": 432}, "metrics": {"latencyMs": 1582}}
}

# The user guide's exchange: the model says what it will do (block 0), then asks for top_song (block 1), its input
# streamed as partial JSON text (the first piece empty, as Claude's is), and stops for the tool.
USER_GUIDE_EXCHANGE = [
    {"messageStart": {"role": "assistant"}},
    text(0, "I'll look up the most popular song"),
    text(0, " on WZPZ."),
    stop(0),
    start(1, TOOL_USE_ID, "top_song"),
    tool_input(1, ""),
    tool_input(1, '{"sign": "WZ'),
    tool_input(1, 'PZ"}'),
    stop(1),
    message_stop("tool_use"),
    METADATA,
]


def bedrock_errors(value: dict[str, Any], shape_name: str) -> str:
    """What Bedrock's service model finds wrong with ``value`` as the shape ``shape_name`` ("" when nothing)."""
    return ParamValidator().validate(value, BEDROCK_MODEL.shape_for(shape_name)).generate_report()


class ScriptedBedrock:
    """``converse_stream`` answering each request with the next script (its events, in order)."""

    def __init__(self, *scripts: Sequence[dict[str, Any]] | Iterator[dict[str, Any]]) -> None:
        self.scripts = list(scripts)
        self.requests: list[dict[str, Any]] = []

    def converse_stream(self, **params: Any) -> dict[str, Any]:
        self.requests.append(params)
        return {"stream": ConverseEventStream(iter(self.scripts.pop(0)))}


class EndWatchingWriter(TokenStreamWriter):
    """The real writer, which also says when it has put a call's end record."""

    ended = threading.Event()

    def put(self, *records: TokenRecord) -> None:
        super().put(*records)
        if any(record.end for record in records):
            self.ended.set()


def read_stream(kinesis: KinesisClient, stream_name: str) -> list[TokenRecord]:
    shard_id = kinesis.list_shards(StreamName=stream_name)["Shards"][0]["ShardId"]
    iterator = kinesis.get_shard_iterator(StreamName=stream_name, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON")
    page = kinesis.get_records(ShardIterator=iterator["ShardIterator"], Limit=10_000)
    return [TokenRecord.decode(item["Data"]) for item in page["Records"]]


def generate(
    chat_table: ChatTable,
    kinesis: KinesisClient,
    stream_name: str,
    bedrock: ScriptedBedrock,
    session_id: str,
    turn: int,
    **settings: Any,
) -> GenerationResult:
    current = turn_to_generate(chat_table, GenerateRequest(session_id, turn), "proxy-request")
    writer = EndWatchingWriter(kinesis, stream_name, sleep=lambda _: None)
    config = GenerationSettings(model_id="anthropic.claude-3-haiku-20240307-v1:0", **settings)
    return Generation(turn=current, bedrock=bedrock, writer=writer, table=chat_table, settings=config).run()  # type: ignore[arg-type]


def materialize(chat_table: ChatTable, records: list[TokenRecord]) -> None:
    class Sink:
        def send_poison(self, poison: Any) -> None:
            raise AssertionError(f"unexpected poison: {poison.reason}")

    stream = [
        StreamRecord(data=r.encode(), partition_key=r.session_id, sequence_number=str(i + 1))
        for i, r in enumerate(records)
    ]
    assert Materializer(table=chat_table, poison_sink=Sink()).process(stream).ok


def test_the_user_guides_tool_use_exchange_goes_through_the_proxy_and_back_to_the_model(
    chat_table, kinesis, stream_name
) -> None:
    # GIVEN a turn that declares the user guide's tool, and a model answering as Bedrock streams it
    for event in USER_GUIDE_EXCHANGE:
        assert bedrock_errors(event, "ConverseStreamOutput") == "", event
    options = TurnOptions(tools=(TOP_SONG,), tool_choice=ToolChoice(ToolChoiceMode.TOOL, "top_song"))
    session_id = chat_table.turns.start_first(OWNER, "What is the most popular song on WZPZ?", options=options)
    final = [{"messageStart": {"role": "assistant"}}, text(0, "Elemental Hotel, by 8 Storey Hike."), stop(0)]
    bedrock = ScriptedBedrock(USER_GUIDE_EXCHANGE, [*final, message_stop("end_turn"), METADATA])

    # WHEN the proxy generates the turn
    result = generate(chat_table, kinesis, stream_name, bedrock, session_id, 1)

    # THEN the request declared the tool as Bedrock's toolConfig, with the forced choice, and is one Bedrock accepts
    request = bedrock.requests[0]
    assert request["toolConfig"] == {
        "tools": [
            {
                "toolSpec": {
                    "name": "top_song",
                    "description": "Get the most popular song played on a radio station.",
                    "inputSchema": {"json": TOP_SONG.parameters},
                }
            }
        ],
        "toolChoice": {"tool": {"name": "top_song"}},
    }
    assert bedrock_errors(request, "ConverseStreamRequest") == ""
    # THEN the records are the text, then the call numbered 0 (its content block is 1), then its end, then tool_use
    records = read_stream(kinesis, stream_name)
    assert [record.type for record in records][0] is RecordType.START
    assert assistant_text(records) == "I'll look up the most popular song on WZPZ."
    calls = [record for record in records if record.type is RecordType.TOOL_USE]
    assert {record.call for record in calls} == {ToolCallRef(0, TOOL_USE_ID, "top_song")}
    assert calls[-1].end and not any(record.end for record in calls[:-1])
    assert tool_calls(records) == [ToolCall(TOOL_USE_ID, "top_song", '{"sign": "WZPZ"}')]
    assert records[-1].stop_reason is StopReason.TOOL_USE and result.tool_calls == 1
    assert records[-1].usage is not None and records[-1].usage.output_tokens == 57

    # WHEN the consumer materializes the turn THEN its item holds the call apart from the reply
    materialize(chat_table, records)
    first = chat_table.get_turn(session_id, 1)
    assert first is not None and first.status is TurnStatus.COMPLETE and first.stop_reason is StopReason.TOOL_USE
    assert first.assistant == "I'll look up the most popular song on WZPZ."
    assert first.tool_calls == (ToolCall(TOOL_USE_ID, "top_song", '{"sign": "WZPZ"}'),)

    # WHEN the client sends the tool's result as the next turn, and the proxy generates it
    result_text = json.dumps({"song": "Elemental Hotel", "artist": "8 Storey Hike"})
    answer = TurnOptions(tools=(TOP_SONG,), tool_results=(ToolResult(TOOL_USE_ID, result_text),))
    turn = chat_table.turns.start_next(session_id, OWNER, "", options=answer)
    generate(chat_table, kinesis, stream_name, bedrock, session_id, turn)

    # THEN the model sees its call as a toolUse block after its text, and the result as a toolResult block beside it
    request = bedrock.requests[1]
    assert request["messages"] == [
        {"role": "user", "content": [{"text": "What is the most popular song on WZPZ?"}]},
        {
            "role": "assistant",
            "content": [
                {"text": "I'll look up the most popular song on WZPZ."},
                {"toolUse": {"toolUseId": TOOL_USE_ID, "name": "top_song", "input": {"sign": "WZPZ"}}},
            ],
        },
        {"role": "user", "content": [{"toolResult": {"toolUseId": TOOL_USE_ID, "content": [{"text": result_text}]}}]},
    ]
    assert "toolChoice" not in request["toolConfig"]
    assert bedrock_errors(request, "ConverseStreamRequest") == ""


def test_parallel_calls_are_numbered_from_0_in_order_whatever_their_content_blocks(
    chat_table, kinesis, stream_name
) -> None:
    # GIVEN a model that thinks aloud, then calls two tools in one message (content blocks 1 and 2)
    events = [
        text(0, "Two lookups."),
        stop(0),
        start(1, "tooluse_a", "get_weather"),
        tool_input(1, '{"city": "Paris"}'),
        stop(1),
        start(2, "tooluse_b", "get_weather"),
        tool_input(2, '{"city": '),
        tool_input(2, '"Oslo"}'),
        stop(2),
        message_stop("tool_use"),
    ]
    session_id = chat_table.turns.start_first(OWNER, "weather?", options=TurnOptions(tools=(WEATHER,)))
    # WHEN generated
    generate(chat_table, kinesis, stream_name, ScriptedBedrock(events), session_id, 1)
    # THEN the calls are 0 and 1, never merged, each with its own arguments, each ended
    records = read_stream(kinesis, stream_name)
    indexes = [record.call.index for record in records if record.call is not None]
    assert indexes == sorted(indexes) and set(indexes) == {0, 1}
    assert tool_calls(records) == [
        ToolCall("tooluse_a", "get_weather", '{"city": "Paris"}'),
        ToolCall("tooluse_b", "get_weather", '{"city": "Oslo"}'),
    ]
    # THEN no record mixes the reply's text and a call's arguments, or two calls
    assert all(record.call is None for record in records if record.type is not RecordType.TOOL_USE)


def test_a_call_without_arguments_has_the_arguments_of_an_empty_object(chat_table, kinesis, stream_name) -> None:
    events = [start(0, "tooluse_now", "get_time"), tool_input(0, ""), stop(0), message_stop("tool_use")]
    tools = (ToolSpec("get_time", {"type": "object"}),)
    session_id = chat_table.turns.start_first(OWNER, "time?", options=TurnOptions(tools=tools))
    generate(chat_table, kinesis, stream_name, ScriptedBedrock(events), session_id, 1)
    records = read_stream(kinesis, stream_name)
    assert tool_calls(records) == [ToolCall("tooluse_now", "get_time", "{}")]
    assert records[-1].stop_reason is StopReason.TOOL_USE


def test_a_calls_end_is_written_when_the_model_ends_it_not_at_the_end_of_the_reply(
    chat_table, kinesis, stream_name
) -> None:
    # GIVEN a model that ends a call, then goes on (another call), with records otherwise flushed once a minute
    seen_before_next_event: list[bool] = []
    EndWatchingWriter.ended.clear()

    def events() -> Iterator[dict[str, Any]]:
        yield start(0, "tooluse_a", "get_weather")
        yield tool_input(0, '{"city": "Paris"}')
        yield stop(0)
        seen_before_next_event.append(EndWatchingWriter.ended.wait(30))
        yield start(1, "tooluse_b", "get_weather")
        yield tool_input(1, "{}")
        yield stop(1)
        yield message_stop("tool_use")

    session_id = chat_table.turns.start_first(OWNER, "weather?", options=TurnOptions(tools=(WEATHER,)))
    # WHEN generated
    generate(chat_table, kinesis, stream_name, ScriptedBedrock(events()), session_id, 1, flush_interval_ms=60_000)
    # THEN the first call's end was on the stream before the model's next event was read
    assert seen_before_next_event == [True]
    assert [call.complete for call in tool_calls(read_stream(kinesis, stream_name))] == [True, True]


@pytest.mark.parametrize(
    ("events", "problem"),
    [
        ([start(0, "tooluse_a", "get_weather"), tool_input(0, '{"city": "Par'), stop(0)], "tool call 0 (get_weather)"),
        ([start(0, "tooluse_a", "get_weather"), tool_input(0, "[1, 2]"), stop(0)], "not a JSON object"),
        ([tool_input(3, '{"city": "Paris"}')], "outside any tool call"),
        ([start(0, "", "get_weather")], "without its id and name"),
        ([text(0, "Sure."), message_stop("malformed_tool_use")], "malformed_tool_use"),
    ],
)
def test_a_malformed_tool_call_ends_the_turn_with_an_error_naming_it(
    chat_table, kinesis, stream_name, events, problem
) -> None:
    # GIVEN a model that gets a tool call wrong
    session_id = chat_table.turns.start_first(OWNER, "weather?", options=TurnOptions(tools=(WEATHER,)))
    script = [*events, stop(9), message_stop("tool_use"), METADATA]
    # WHEN generated
    result = generate(chat_table, kinesis, stream_name, ScriptedBedrock(script), session_id, 1)
    # THEN the turn ends with one error record malformed_tool_use that says what was wrong, after what was written
    records = read_stream(kinesis, stream_name)
    assert records[-1].type is RecordType.ERROR and result.terminal == records[-1]
    assert records[-1].error is not None and records[-1].error.code == "malformed_tool_use"
    assert problem in records[-1].error.message
    assert [record.seq for record in records] == list(range(len(records)))
    # THEN no call is complete: the broken one has no end
    assert not any(call.complete for call in tool_calls(records))


# ------------------------------------------------------------------------------- the request


def params_for(chat_table: ChatTable, session_id: str, turn: int) -> dict[str, Any]:
    current = chat_table.get_turn(session_id, turn)
    assert current is not None
    generation = Generation(current, None, None, chat_table, GenerationSettings(model_id="m"))  # type: ignore[arg-type]
    params = generation._converse_params()
    assert bedrock_errors(params, "ConverseStreamRequest") == ""
    return params


def finish(chat_table: ChatTable, session_id: str, turn: int, reply: str, calls: Sequence[ToolCall]) -> None:
    """End ``turn`` as the consumer would, with ``reply`` and ``calls``."""
    stop_reason = StopReason.TOOL_USE if calls else StopReason.END_TURN
    record = TokenRecord.stop(session_id, turn, 5, stop_reason, Usage(1, 1), 9)
    chat_table.turns.end_from_stream(record, reply, tool_calls=calls)


@pytest.mark.parametrize(
    ("choice", "sent"),
    [
        (None, None),
        (ToolChoice(ToolChoiceMode.AUTO), None),
        (ToolChoice(ToolChoiceMode.ANY), {"any": {}}),
        (ToolChoice(ToolChoiceMode.TOOL, "get_weather"), {"tool": {"name": "get_weather"}}),
    ],
)
def test_the_tool_choice_is_bedrocks(chat_table, choice, sent) -> None:
    session_id = chat_table.turns.start_first(OWNER, "hi", options=TurnOptions(tools=(WEATHER,), tool_choice=choice))
    config = params_for(chat_table, session_id, 1)["toolConfig"]
    assert config.get("toolChoice") == sent
    assert [tool["toolSpec"]["name"] for tool in config["tools"]] == ["get_weather"]


def test_parallel_tool_calls_false_asks_the_model_for_one_call_through_the_item(chat_table) -> None:
    # GIVEN a turn whose client asked for at most one call (Bedrock has no switch for it)
    options = TurnOptions(tools=(WEATHER,), parallel_tool_calls=False)
    session_id = chat_table.turns.start_first(OWNER, "weather in two cities?", options=options)
    # THEN the turn item keeps it, and the model is sent the tools and told so in the system text
    assert chat_table.get_turn(session_id, 1).options.parallel_tool_calls is False
    params = params_for(chat_table, session_id, 1)
    assert params["toolConfig"] == {"tools": [WEATHER.to_converse()]}
    assert params["system"] == [{"text": ONE_TOOL_INSTRUCTION}]
    # AND a turn that leaves it at its default is told nothing
    default = chat_table.turns.start_first(OWNER, "weather?", options=TurnOptions(tools=(WEATHER,)))
    assert chat_table.get_turn(default, 1).options.parallel_tool_calls is True
    assert "system" not in params_for(chat_table, default, 1)


def test_none_without_tool_blocks_sends_no_tools(chat_table) -> None:
    # GIVEN a turn that declares a tool but says none, in a conversation without tool use
    options = TurnOptions(tools=(WEATHER,), tool_choice=ToolChoice(ToolChoiceMode.NONE))
    session_id = chat_table.turns.start_first(OWNER, "hi", options=options)
    # THEN the model is shown no tool, and told nothing
    params = params_for(chat_table, session_id, 1)
    assert "toolConfig" not in params and "system" not in params


def test_none_with_tool_blocks_sends_the_tools_without_a_choice_and_says_not_to_call_one(chat_table) -> None:
    # GIVEN a turn that called a tool, and the next one that answers it with none
    session_id = chat_table.turns.start_first(OWNER, "weather?", options=TurnOptions(tools=(WEATHER,)))
    finish(chat_table, session_id, 1, "", [ToolCall("tooluse_a", "get_weather", '{"city": "Paris"}')])
    none = TurnOptions(
        tools=(WEATHER,), tool_choice=ToolChoice(ToolChoiceMode.NONE), tool_results=(ToolResult("tooluse_a", "sunny"),)
    )
    turn = chat_table.turns.start_next(session_id, OWNER, "sum it up", options=none)
    # THEN Bedrock gets the toolConfig it requires with these blocks, no toolChoice, and the instruction
    params = params_for(chat_table, session_id, turn)
    assert params["toolConfig"] == {"tools": [WEATHER.to_converse()]}
    assert params["system"] == [{"text": NO_TOOL_INSTRUCTION}]
    assert params["messages"][-1]["content"] == [
        {"toolResult": {"toolUseId": "tooluse_a", "content": [{"text": "sunny"}]}},
        {"text": "sum it up"},
    ]


def test_a_turn_without_tools_after_tool_use_declares_the_tools_its_history_names(chat_table) -> None:
    session_id = chat_table.turns.start_first(OWNER, "weather?", options=TurnOptions(tools=(WEATHER,)))
    finish(chat_table, session_id, 1, "On it.", [ToolCall("tooluse_a", "get_weather", '{"city": "Paris"}')])
    turn = chat_table.turns.start_next(
        session_id, OWNER, "", options=TurnOptions(tool_results=(ToolResult("tooluse_a", "sunny"),))
    )
    params = params_for(chat_table, session_id, turn)
    assert params["toolConfig"] == {
        "tools": [{"toolSpec": {"name": "get_weather", "inputSchema": {"json": {"type": "object"}}}}]
    }
    assert params["system"] == [{"text": NO_TOOL_INSTRUCTION}]


def test_calls_never_answered_and_results_answering_nothing_are_left_out_of_the_history(chat_table) -> None:
    # GIVEN turn 1 called two tools; turn 2 answered only one of them; turn 3 carries a result for no call of turn 2
    session_id = chat_table.turns.start_first(OWNER, "weather?", options=TurnOptions(tools=(WEATHER,)))
    both = [
        ToolCall("tooluse_a", "get_weather", '{"city": "Paris"}'),
        ToolCall("tooluse_b", "get_weather", '{"city": "Oslo"}'),
    ]
    finish(chat_table, session_id, 1, "Two lookups.", both)
    one = TurnOptions(tools=(WEATHER,), tool_results=(ToolResult("tooluse_a", "sunny"),))
    turn = chat_table.turns.start_next(session_id, OWNER, "", options=one)
    finish(chat_table, session_id, turn, "Paris is sunny.", [])
    stray = TurnOptions(tools=(WEATHER,), tool_results=(ToolResult("tooluse_z", "late"),))
    turn = chat_table.turns.start_next(session_id, OWNER, "and now?", options=stray)
    # WHEN the proxy builds turn 3's messages
    current = turn_to_generate(chat_table, GenerateRequest(session_id, turn), "proxy-request")
    messages = build_messages(chat_table, current)
    # THEN the unanswered call is gone from turn 1's reply, the answered one stays with its result
    assert messages[1]["content"] == [
        {"text": "Two lookups."},
        {"toolUse": {"toolUseId": "tooluse_a", "name": "get_weather", "input": {"city": "Paris"}}},
    ]
    assert messages[2]["content"] == [{"toolResult": {"toolUseId": "tooluse_a", "content": [{"text": "sunny"}]}}]
    # THEN the turn's own results are sent as they came (Bedrock says which call they do not answer)
    assert messages[-1]["content"][0] == {"toolResult": {"toolUseId": "tooluse_z", "content": [{"text": "late"}]}}


def test_an_exchange_left_empty_goes_with_the_results_that_answered_it(chat_table) -> None:
    # GIVEN turn 1 only called a tool, and turn 2 (no results) made it unanswered
    session_id = chat_table.turns.start_first(OWNER, "weather?", options=TurnOptions(tools=(WEATHER,)))
    finish(chat_table, session_id, 1, "", [ToolCall("tooluse_a", "get_weather", '{"city": "Paris"}')])
    turn = chat_table.turns.start_next(session_id, OWNER, "never mind")
    finish(chat_table, session_id, turn, "OK.", [])
    turn = chat_table.turns.start_next(session_id, OWNER, "/history")
    # THEN turn 1 (left without a reply) is not sent at all, and turn 2 is
    current = turn_to_generate(chat_table, GenerateRequest(session_id, turn), "proxy-request")
    assert build_messages(chat_table, current) == [
        {"role": "user", "content": [{"text": "never mind"}]},
        {"role": "assistant", "content": [{"text": "OK."}]},
        {"role": "user", "content": [{"text": "/history"}]},
    ]


def test_a_call_cut_short_is_not_sent_back(chat_table) -> None:
    # GIVEN a turn cancelled inside a call's arguments
    session_id = chat_table.turns.start_first(OWNER, "weather?", options=TurnOptions(tools=(WEATHER,)))
    cut = ToolCall("tooluse_a", "get_weather", '{"city": "Pa', complete=False)
    record = TokenRecord.stop(session_id, 1, 5, StopReason.CANCELLED, Usage(1, 1), 9)
    chat_table.turns.end_from_stream(record, "Looking", tool_calls=[cut])
    turn = chat_table.turns.start_next(session_id, OWNER, "hi")
    # THEN its text is history, its broken call is not
    params = params_for(chat_table, session_id, turn)
    assert params["messages"][1] == {"role": "assistant", "content": [{"text": "Looking"}]}
    assert "toolConfig" not in params


def test_history_a_client_sent_with_tool_calls_and_results_becomes_tool_blocks(chat_table) -> None:
    # GIVEN a stateless client's history: a question, the call it got, its result, the answer
    history = (
        HistoryMessage("user", "weather?"),
        HistoryMessage("assistant", "", tool_calls=(ToolCall("call_1", "get_weather", '{"city": "Paris"}'),)),
        HistoryMessage("user", "", tool_results=(ToolResult("call_1", "sunny"),)),
        HistoryMessage("assistant", "Sunny."),
    )
    session_id = chat_table.turns.start_first(OWNER, "thanks", options=TurnOptions(tools=(WEATHER,), history=history))
    # THEN they are Converse messages with the call and its result as blocks
    params = params_for(chat_table, session_id, 1)
    assert [message["content"] for message in params["messages"]] == [
        [{"text": "weather?"}],
        [{"toolUse": {"toolUseId": "call_1", "name": "get_weather", "input": {"city": "Paris"}}}],
        [{"toolResult": {"toolUseId": "call_1", "content": [{"text": "sunny"}]}}],
        [{"text": "Sunny."}],
        [{"text": "thanks"}],
    ]
