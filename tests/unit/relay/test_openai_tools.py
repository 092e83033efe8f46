"""Tool calls on /v1 without HTTP: tools, choices, calls and results in request bodies; a turn's tool_use records as
Chat Completions' ``delta.tool_calls`` and the Responses API's ``function_call`` items and events, validated by the
openai SDK's own types and accumulated by its own stream helpers; resumes inside a call's arguments."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from openai import omit
from openai._models import construct_type_unchecked
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.lib.streaming.responses import ResponseStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent

from chatstream.records import TokenRecord, Usage, assistant_text, tool_calls
from chatstream.relay.follow import Follower
from chatstream.relay.http import HttpError
from chatstream.relay.openai.chat import ChunkStream, completion_object
from chatstream.relay.openai.requests import leading_results, parse_responses_request
from chatstream.relay.openai.responses import ResponseStream, output_of, parse_item_id, response_object
from chatstream.relay.openai.status import ResponseStatus
from chatstream.relay.openai.turn_events import turn_events
from chatstream.relay.service import RelayService
from chatstream.status import StopReason
from chatstream.tools import ToolCall, ToolChoice, ToolChoiceMode, ToolResult, ToolSpec
from chatstream.turn_options import HistoryMessage, TurnOptions
from tests.builders import tool_turn_records
from tests.unit.relay.relay_support import FAST, FakeClock, relay_config
from tests.unit.relay.test_openai_service import MODEL, RecordingLambda, body_of, call, openai_error
from tests.unit.relay.test_openai_v1 import chat, error_of, responses, validated

if TYPE_CHECKING:
    from chatstream.table import ChatTable

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
TIME_TOOL = {"type": "function", "function": {"name": "get_time"}}
WEATHER_SPEC = ToolSpec("get_weather", WEATHER_TOOL["function"]["parameters"], "The weather in a city.")  # type: ignore[index]
USER = {"role": "user", "content": "weather in Paris and the time?"}
ASKED = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
        {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": ""}},
    ],
}
ANSWERED = [
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "noon"}]},
]
CALLS = (ToolCall("call_1", "get_weather", '{"city": "Paris"}'), ToolCall("call_2", "get_time", "{}"))

WEATHER = ("tooluse_weather", "get_weather", ['{"city"', ': "Paris"}'])
TIME = ("tooluse_time", "get_time", [])


# ------------------------------------------------------------------------------ chat completions: bodies


def test_chat_tools_a_choice_and_one_call_at_a_time_become_turn_options() -> None:
    request = chat(
        {
            "model": "m",
            "messages": [USER],
            "tools": [WEATHER_TOOL, TIME_TOOL],
            "tool_choice": {"type": "function", "function": {"name": "get_time"}},
            "parallel_tool_calls": False,
        }
    )
    options = request.options
    assert options.tools == (WEATHER_SPEC, ToolSpec("get_time", {"type": "object", "properties": {}}))
    assert options.tool_choice == ToolChoice(ToolChoiceMode.TOOL, "get_time")
    assert options.parallel_tool_calls is False
    for choice, mode in (
        ("auto", ToolChoiceMode.AUTO),
        ("none", ToolChoiceMode.NONE),
        ("required", ToolChoiceMode.ANY),
    ):
        body = {"model": "m", "messages": [USER], "tools": [WEATHER_TOOL], "tool_choice": choice}
        assert chat(body).options.tool_choice == ToolChoice(mode)


def test_tool_messages_after_the_calls_they_answer_make_a_turn_of_results() -> None:
    # GIVEN a conversation that ends with the results of the calls the assistant made, as agents send it
    request = chat({"model": "m", "messages": [USER, ASKED, *ANSWERED], "tools": [WEATHER_TOOL, TIME_TOOL]})
    # THEN the history holds the calls (no text; "" arguments as {}) and the turn the results, with no message
    assert request.options.history == (
        HistoryMessage("user", USER["content"]),
        HistoryMessage("assistant", "", CALLS),
    )
    assert request.options.tool_results == (ToolResult("call_1", "sunny"), ToolResult("call_2", "noon"))
    assert request.message == ""
    # AND a user message after the results joins them in the turn's message
    more = chat({"model": "m", "messages": [USER, ASKED, *ANSWERED, {"role": "user", "content": "thanks"}]})
    assert (more.message, len(more.options.tool_results)) == ("thanks", 2)
    # AND an exchange of calls and results earlier in the conversation is history
    later = chat({"model": "m", "messages": [USER, ASKED, *ANSWERED, {"role": "assistant", "content": "ok"}, USER]})
    assert later.options.history[2] == HistoryMessage(
        "user", "", (), (ToolResult("call_1", "sunny"), ToolResult("call_2", "noon"))
    )
    assert later.options.tool_results == ()


@pytest.mark.parametrize(
    ("messages", "param", "says"),
    [
        ([USER, ASKED, ANSWERED[0]], "messages", "no result for tool call call_2 (get_time) of messages[1]"),
        ([USER, ASKED, USER], "messages", "no result for tool call call_1 (get_weather)"),
        (
            [USER, ASKED, *ANSWERED, {"role": "tool", "tool_call_id": "call_9", "content": "?"}],
            "messages",
            "'call_9', which names no tool call of messages[1]",
        ),
        ([USER, ANSWERED[0]], "messages[1]", "must follow an assistant message with tool calls"),
        ([USER, ASKED, *ANSWERED, ANSWERED[0]], "messages[2]", "answers tool call 'call_1' twice"),
        (
            [USER, {**ASKED, "tool_calls": [{"id": "call 1", "function": {"name": "f", "arguments": "{}"}}]}],
            "messages[1].tool_calls[0].id",
            "must be a tool call's id",
        ),
        (
            [USER, {**ASKED, "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "[1]"}}]}, USER],
            "messages[1].tool_calls[0].function.arguments",
            "the JSON text of an object",
        ),
        ([USER, {"role": "tool", "content": "x"}], "messages[1].tool_call_id", "must be a tool call's id"),
    ],
)
def test_calls_and_results_that_do_not_pair_up_are_400s_that_say_which(
    messages: list[dict[str, Any]], param: str, says: str
) -> None:
    status, code, got = error_of(chat, {"model": "m", "messages": messages})
    assert (status, code, got) == (400, "invalid_request", param)
    with pytest.raises(HttpError, match=says.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        chat({"model": "m", "messages": messages})


@pytest.mark.parametrize(
    ("fields", "code", "param"),
    [
        (
            {"tools": [{"type": "function", "function": {"name": "get weather"}}]},
            "invalid_request",
            "tools[0].function.name",
        ),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}]},
            "invalid_request",
            "tools[0].function.parameters",
        ),
        ({"tools": [{"type": "custom", "custom": {"name": "f"}}]}, "unsupported_parameter", "tools[0].type"),
        ({"tools": [TIME_TOOL, TIME_TOOL]}, "invalid_request", "tools[1].function.name"),
        (
            {"tools": [{"type": "function", "function": {"name": f"f{n}"}} for n in range(129)]},
            "invalid_request",
            "tools",
        ),
        (
            {"tools": [WEATHER_TOOL], "tool_choice": {"type": "function", "function": {"name": "get_time"}}},
            "invalid_request",
            "tool_choice",
        ),
        ({"tool_choice": "required"}, "invalid_request", "tool_choice"),
        ({"tools": [WEATHER_TOOL], "tool_choice": {"type": "allowed_tools"}}, "unsupported_parameter", "tool_choice"),
        ({"tools": [WEATHER_TOOL], "parallel_tool_calls": 1}, "invalid_request", "parallel_tool_calls"),
        ({"functions": [{"name": "f"}]}, "unsupported_parameter", "functions"),
    ],
)
def test_chat_tool_fields_that_are_wrong_are_400s_naming_them(fields: dict[str, Any], code: str, param: str) -> None:
    assert error_of(chat, {"model": "m", "messages": [USER], **fields}) == (400, code, param)


def test_a_strict_function_is_accepted_and_not_enforced() -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}, "strict": True}}
    assert chat({"model": "m", "messages": [USER], "tools": [tool]}).options.tools == (
        ToolSpec("f", {"type": "object"}),
    )


# ------------------------------------------------------------------------------ responses: bodies

FUNCTION_CALL = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'}
OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}


def test_responses_function_tools_calls_and_outputs_become_the_turn() -> None:
    request = responses(
        {
            "model": "m",
            "input": [{"role": "user", "content": "weather?"}, FUNCTION_CALL, OUTPUT],
            "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}, "strict": True}],
            "tool_choice": {"type": "function", "name": "get_weather"},
        }
    )
    assert request.options.tools == (ToolSpec("get_weather", {"type": "object"}),)
    assert request.options.tool_choice == ToolChoice(ToolChoiceMode.TOOL, "get_weather")
    assert request.options.history == (
        HistoryMessage("user", "weather?"),
        HistoryMessage("assistant", "", (ToolCall("call_1", "get_weather", '{"city": "Paris"}'),)),
    )
    assert (request.message, request.options.tool_results) == ("", (ToolResult("call_1", "sunny"),))


def test_a_continuation_may_begin_with_the_previous_responses_results() -> None:
    # GIVEN a continuation whose input is the results of the previous response's calls, then a message
    output = {**OUTPUT, "output": [{"type": "input_text", "text": "sun"}, {"type": "input_text", "text": "ny"}]}
    request = responses(
        {"model": "m", "previous_response_id": "resp_s_1", "input": [output, {"role": "user", "content": "and?"}]}
    )
    # THEN they are the turn's results (checked by the endpoint against that response's calls)
    assert leading_results(request) == (ToolResult("call_1", "sunny"),) == request.options.tool_results
    assert request.message == "and?"
    # AND without previous_response_id, results that answer nothing before them are a 400
    assert error_of(responses, {"model": "m", "input": [OUTPUT]}) == (400, "invalid_request", "input[0]")


@pytest.mark.parametrize(
    ("fields", "code", "param"),
    [
        ({"tools": [{"type": "web_search"}]}, "unsupported_parameter", "tools[0].type"),
        (
            {"tools": [{"type": "function", "name": "f", "parameters": {"type": "string"}}]},
            "invalid_request",
            "tools[0].parameters",
        ),
        (
            {"tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "function", "name": "g"}},
            "invalid_request",
            "tool_choice",
        ),
        (
            {"tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "mcp"}},
            "unsupported_parameter",
            "tool_choice",
        ),
        (
            {"input": [{"role": "user", "content": "x"}, {**FUNCTION_CALL, "arguments": "nope"}, OUTPUT]},
            "invalid_request",
            "input[1].arguments",
        ),
        ({"input": [{"role": "user", "content": "x"}, FUNCTION_CALL]}, "invalid_request", "input"),
        (
            {
                "input": [
                    {"role": "user", "content": "x"},
                    FUNCTION_CALL,
                    {**OUTPUT, "output": [{"type": "input_image"}]},
                ]
            },
            "unsupported_parameter",
            "input[2].output[0]",
        ),
        ({"max_tool_calls": 2}, "unsupported_parameter", "max_tool_calls"),
    ],
)
def test_responses_tool_fields_that_are_wrong_are_400s_naming_them(
    fields: dict[str, Any], code: str, param: str
) -> None:
    assert error_of(responses, {"model": "m", "input": "hi", **fields}) == (400, code, param)


def test_function_call_item_ids_name_the_call() -> None:
    assert parse_item_id("fc_abc_2_1") == ("tool_call", "abc", 2, 1)
    assert parse_item_id("msg_abc_2_0") == ("token", "abc", 2, 0)


# ------------------------------------------------------------------------------ chat completions: the answers


def write_tool_turn(table: ChatTable, records: list[TokenRecord]) -> None:
    table.turns.end_from_stream(records[-1], assistant_text(records), tool_calls=tool_calls(records))
    table.put_records(records)


def native_of(table: ChatTable, session_id: str) -> list[str]:
    """A finished turn's native stream, unpaced."""
    follower = Follower(
        table, session_id, 1, settings=FAST.__class__(**{**FAST.__dict__, "pace": False}), clock=FakeClock().as_clock()
    )
    return list(follower.events())


def test_a_streamed_completion_carries_each_call_as_openai_streams_it(chat_table: ChatTable) -> None:
    # GIVEN a turn that wrote text, then called two tools (the first's arguments in two records)
    session_id = chat_table.turns.start_first("me", "weather?", options=TurnOptions(tools=(WEATHER_SPEC,)))
    write_tool_turn(chat_table, tool_turn_records(session_id, 1, ["Checking."], [WEATHER, TIME]))
    stream = ChunkStream(session_id, "model-x", 0, include_usage=False)
    chunks = [stream.first(), *stream.chunks(turn_events(native_of(chat_table, session_id)))]
    datas = [json.loads(chunk.removeprefix("data: ")) for chunk in chunks[:-1]]
    for data in datas:
        ChatCompletionChunk.model_validate(data)
    deltas = [data["choices"][0]["delta"] for data in datas]
    # THEN each call's first chunk names it (index from 0 within the message, though text came first), its later
    # chunks carry arguments only, and the last chunk says tool_calls
    calls = [delta["tool_calls"][0] for delta in deltas if "tool_calls" in delta]
    assert calls == [
        {
            "index": 0,
            "id": "tooluse_weather",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city"'},
        },
        {"index": 0, "function": {"arguments": ': "Paris"}'}},
        {"index": 1, "id": "tooluse_time", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
    ]
    assert datas[-1]["choices"][0]["finish_reason"] == "tool_calls"
    # WHEN the openai SDK's helper accumulates them, as client.chat.completions.stream() does
    state: ChatCompletionStreamState[object] = ChatCompletionStreamState()
    for data in datas:
        list(state.handle_chunk(ChatCompletionChunk.construct(**data)))
    message = state.get_final_completion().choices[0].message
    # THEN it holds both calls whole, and the text
    assert message.content == "Checking."
    assert [(call.id, call.function.name, call.function.arguments) for call in message.tool_calls or []] == [
        ("tooluse_weather", "get_weather", '{"city": "Paris"}'),
        ("tooluse_time", "get_time", "{}"),
    ]


def test_a_completion_not_streamed_has_its_complete_calls() -> None:
    calls = (*CALLS, ToolCall("call_3", "get_time", '{"tz', complete=False))
    only_calls = completion_object("s", "model-x", 0, "", StopReason.TOOL_USE, None, None, calls)
    ChatCompletion.model_validate(only_calls)
    message = only_calls["choices"][0]["message"]
    assert message["content"] is None and only_calls["choices"][0]["finish_reason"] == "tool_calls"
    assert message["tool_calls"] == [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
        {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
    ]
    with_text = completion_object("s", "model-x", 0, "Sure.", StopReason.TOOL_USE, None, None, CALLS)["choices"][0]
    assert with_text["message"]["content"] == "Sure."
    plain = completion_object("s", "model-x", 0, "", StopReason.END_TURN, None)["choices"][0]["message"]
    assert plain["content"] == "" and "tool_calls" not in plain


# ------------------------------------------------------------------------------ responses: the answers


def response_events(table: ChatTable, session_id: str, after: int = -1) -> list[dict[str, Any]]:
    """A finished turn's Responses events after ``after``, read as a resume reads them, validated by the SDK."""
    turn = table.get_turn(session_id, 1)
    assert turn is not None
    stream = ResponseStream(table, turn, "model-x", after)
    had, position = stream.resume_point(table.query_records(session_id, 1)) if after > 1 else ([], None)
    follower = Follower(table, session_id, 1, after=position, settings=FAST, clock=FakeClock().as_clock())
    chunks = [*stream.prelude(), *stream.events([*had, *turn_events(follower.events())])]
    return validated([chunk for chunk in chunks if not chunk.startswith(":")])


@pytest.fixture
def tool_turn(chat_table: ChatTable) -> str:
    options = TurnOptions(tools=(WEATHER_SPEC, ToolSpec("get_time", {"type": "object"})))
    session_id = chat_table.turns.start_first("me", "weather and time?", options=options)
    write_tool_turn(chat_table, tool_turn_records(session_id, 1, ["Checking", " both."], [WEATHER, TIME]))
    return session_id


def test_each_call_is_a_function_call_item_after_the_message(chat_table: ChatTable, tool_turn: str) -> None:
    events = response_events(chat_table, tool_turn)
    types = [event["type"] for event in events]
    # THEN the message comes and closes, then each call: added, its deltas, done (name, whole arguments), item done
    call_events = types[types.index("response.output_item.done") + 1 :]
    assert call_events == [
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    added = [event for event in events if event["type"] == "response.output_item.added"]
    assert [(event["output_index"], event["item"]["type"]) for event in added] == [
        (0, "message"),
        (1, "function_call"),
        (2, "function_call"),
    ]
    assert added[1]["item"] == {
        "id": f"fc_{tool_turn}_1_0",
        "type": "function_call",
        "status": "in_progress",
        "call_id": "tooluse_weather",
        "name": "get_weather",
        "arguments": "",
    }
    done = [event for event in events if event["type"] == "response.function_call_arguments.done"]
    assert [(event["output_index"], event["name"], event["arguments"]) for event in done] == [
        (1, "get_weather", '{"city": "Paris"}'),
        (2, "get_time", "{}"),
    ]
    # AND the response's output holds the message and both calls, completed; it says which tools it had
    response = Response.model_validate(events[-1]["response"])
    assert [item.type for item in response.output] == ["message", "function_call", "function_call"]
    assert [(item.status, item.arguments) for item in response.output[1:]] == [  # type: ignore[union-attr]
        ("completed", '{"city": "Paris"}'),
        ("completed", "{}"),
    ]
    assert response.output_text == "Checking both."
    assert [tool.name for tool in response.tools] == ["get_weather", "get_time"]  # type: ignore[union-attr]
    assert (response.tool_choice, response.parallel_tool_calls) == ("auto", True)


def test_a_resume_after_any_sequence_number_inside_a_calls_arguments_is_exact(
    chat_table: ChatTable, tool_turn: str
) -> None:
    whole = response_events(chat_table, tool_turn)
    for after in range(-1, len(whole)):
        assert response_events(chat_table, tool_turn, after) == whole[after + 1 :], after


def test_the_sdks_stream_accumulator_rebuilds_each_call(chat_table: ChatTable, tool_turn: str) -> None:
    state: ResponseStreamState[object] = ResponseStreamState(input_tools=omit, text_format=omit)
    snapshots: list[str] = []
    for event in response_events(chat_table, tool_turn):
        for handled in state.handle_event(construct_type_unchecked(type_=ResponseStreamEvent, value=event)):
            if handled.type == "response.function_call_arguments.delta":
                snapshots.append(handled.snapshot)  # type: ignore[union-attr]
    assert snapshots == ['{"city"', '{"city": "Paris"}', "{}"]


def test_the_stored_output_and_the_streamed_one_agree(chat_table: ChatTable, tool_turn: str) -> None:
    turn = chat_table.get_turn(tool_turn, 1)
    assert turn is not None
    stored = response_object(
        turn, "model-x", output_of(tool_turn, 1, chat_table.query_records(tool_turn, 1), finished=True)
    )
    assert stored["output"] == response_events(chat_table, tool_turn)[-1]["response"]["output"]


def test_a_call_cut_short_is_an_incomplete_item_without_arguments_done(chat_table: ChatTable) -> None:
    # GIVEN a turn cancelled inside a call's arguments: the call has no end record
    session_id = chat_table.turns.start_first("me", "time?")
    records = tool_turn_records(session_id, 1, [], [("tooluse_a", "get_time", ['{"tz"', ": 1}"])], ended=False)[:-1]
    stop = TokenRecord.stop(session_id, 1, len(records), StopReason.CANCELLED, Usage(1, 1), 9)
    write_tool_turn(chat_table, [*records, stop])
    # THEN its item is closed incomplete, with the arguments it had, and no arguments.done was sent
    events = response_events(chat_table, session_id)
    types = [event["type"] for event in events]
    assert "response.function_call_arguments.done" not in types
    assert types[-2:] == ["response.output_item.done", "response.incomplete"]
    assert events[-2]["item"] == {
        "id": f"fc_{session_id}_1_0",
        "type": "function_call",
        "status": "incomplete",
        "call_id": "tooluse_a",
        "name": "get_time",
        "arguments": '{"tz"',
    }
    assert events[-1]["response"]["status"] == ResponseStatus.CANCELLED
    # AND the stored output says the same
    output = output_of(session_id, 1, chat_table.query_records(session_id, 1), finished=True)
    assert output.to_list(ResponseStatus.CANCELLED) == [events[-2]["item"]]


# ------------------------------------------------------------------------------ through the endpoints


@pytest.fixture
def service(chat_table: ChatTable, table_name: str) -> RelayService:
    config = relay_config(table_name, MODEL_ID=MODEL)
    return RelayService(chat_table, RecordingLambda(), config, clock=FakeClock().as_clock(), settings=FAST)  # type: ignore[arg-type]


def called_response(service: RelayService, chat_table: ChatTable) -> dict[str, Any]:
    """A background response that called get_weather and get_time, finished."""
    tools = [{"type": "function", "name": "get_weather"}, {"type": "function", "name": "get_time"}]
    created = body_of(call(service, "POST", "/v1/responses", {**BACKGROUND, "tools": tools}))
    session_id = created["id"].split("_")[1]
    write_tool_turn(chat_table, tool_turn_records(session_id, 1, ["Checking."], [WEATHER, TIME]))
    return created


BACKGROUND = {"model": "chatstream", "input": "weather and time?", "background": True}


def test_a_continuation_answers_every_call_of_its_previous_response(
    service: RelayService, chat_table: ChatTable
) -> None:
    created = called_response(service, chat_table)
    weather = {"type": "function_call_output", "call_id": "tooluse_weather", "output": "sunny"}
    time = {"type": "function_call_output", "call_id": "tooluse_time", "output": "noon"}
    # WHEN a continuation leaves a call without an output, or answers one that is not there
    for given, says in (
        ([weather], "no result for tool call tooluse_time (get_time) of resp_"),
        ([{"role": "user", "content": "so?"}], "no result for tool call tooluse_weather (get_weather)"),
        ([weather, time, {**time, "call_id": "tooluse_x"}], "'tooluse_x', which names no tool call of resp_"),
    ):
        body = {"model": "chatstream", "previous_response_id": created["id"], "input": given, "background": True}
        error = openai_error(call(service, "POST", "/v1/responses", body), 400)
        # THEN it is a 400 that says which, naming the input
        assert says in error["message"] and error["param"] == "input"
    # WHEN it answers both THEN the next turn holds the results
    body = {"model": "chatstream", "previous_response_id": created["id"], "input": [weather, time], "background": True}
    answered = body_of(call(service, "POST", "/v1/responses", body))
    session_id = created["id"].split("_")[1]
    assert answered["id"] == f"resp_{session_id}_2"
    turn = chat_table.get_turn(session_id, 2)
    assert turn is not None and turn.options.tool_results == (
        ToolResult("tooluse_weather", "sunny"),
        ToolResult("tooluse_time", "noon"),
    )


def test_a_function_call_item_reference_is_that_call(service: RelayService, chat_table: ChatTable) -> None:
    created = called_response(service, chat_table)
    session_id = created["id"].split("_")[1]
    read = body_of(call(service, "GET", f"/v1/responses/{created['id']}"))
    # THEN the retrieved response shows its function_call items
    assert [(item["type"], item["id"]) for item in read["output"]] == [
        ("message", f"msg_{session_id}_1_0"),
        ("function_call", f"fc_{session_id}_1_0"),
        ("function_call", f"fc_{session_id}_1_1"),
    ]
    Response.model_validate(read)
    # WHEN a new conversation references the output items (what the Vercel AI SDK sends) and answers the calls
    items = [{"type": "item_reference", "id": item["id"]} for item in read["output"]]
    outputs = [
        {"type": "function_call_output", "call_id": "tooluse_weather", "output": "sunny"},
        {"type": "function_call_output", "call_id": "tooluse_time", "output": "noon"},
    ]
    body = {"model": "chatstream", "input": [{"role": "user", "content": "q"}, *items, *outputs], "background": True}
    again = call(service, "POST", "/v1/responses", body)
    # THEN its history holds the reply's text and its calls, and its turn the results
    assert again.status_code == 200, body_of(again)
    new_session = again.headers["X-Chatstream-Session-Id"]
    turn = chat_table.get_turn(new_session, 1)
    assert turn is not None and turn.options.history[1] == HistoryMessage(
        "assistant",
        "Checking.",
        (ToolCall("tooluse_weather", "get_weather", '{"city": "Paris"}'), ToolCall("tooluse_time", "get_time", "{}")),
    )
    assert len(turn.options.tool_results) == 2
    # AND a reference to a call that is not there is a 404
    missing = {
        **body,
        "input": [{"role": "user", "content": "q"}, {"type": "item_reference", "id": f"fc_{session_id}_1_5"}],
    }
    assert openai_error(call(service, "POST", "/v1/responses", missing), 404)["param"] == "input[1].id"


def test_the_sdks_own_accumulated_message_is_taken_back_as_it_is() -> None:
    # GIVEN the message openai-python's stream helper accumulates (its calls carry parsed_arguments), dumped as the
    # SDK sends a model it is given
    state: ChatCompletionStreamState[object] = ChatCompletionStreamState()
    chunk = {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "delta": {"role": "assistant", "tool_calls": [{"index": 0, **ASKED["tool_calls"][0]}]},  # type: ignore[index]
                "finish_reason": "tool_calls",
            }
        ],
    }
    list(state.handle_chunk(ChatCompletionChunk.construct(**chunk)))
    message = state.get_final_completion().choices[0].message.model_dump(exclude_unset=True, mode="json")
    assert "parsed_arguments" in message["tool_calls"][0]["function"]
    # WHEN it is sent back with its result THEN it is the history's call
    request = chat({"model": "m", "messages": [USER, message, ANSWERED[0]]})
    assert request.options.history[1].tool_calls == (CALLS[0],)


def test_a_schema_no_json_can_hold_and_results_given_twice_are_400s() -> None:
    # GIVEN a parameters schema with a number no float holds (it parses as infinity), and a continuation's results
    # answering one call twice
    schema = b'{"type": "object", "maximum": 1e400}'
    huge = b'{"model": "m", "input": "hi", "tools": [{"type": "function", "name": "f", "parameters": ' + schema + b"}]}"
    with pytest.raises(HttpError) as caught:
        parse_responses_request(huge, max_tokens_limit=100, valid_base64=True)
    assert (caught.value.status, getattr(caught.value, "param", None)) == (400, "tools[0].parameters")
    twice = {"model": "m", "previous_response_id": "resp_s_1", "input": [OUTPUT, OUTPUT]}
    assert error_of(responses, twice) == (400, "invalid_request", "input[0]")
