"""Tool calls in the native API: a turn's ``tool_use`` records as ``tool_call`` events (resumable inside a call's
arguments), and in the session's history apart from the reply."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING

import pytest

from chatstream.records import ErrorInfo, TokenRecord, ToolCallRef, assistant_text, tool_calls
from chatstream.relay.follow import Follower, render
from chatstream.relay.pace import Pacer, Position, TextEvent
from chatstream.relay.service import RelayService
from chatstream.status import StopReason
from chatstream.tools import ToolChoice, ToolChoiceMode, ToolResult, ToolSpec
from chatstream.turn_options import TurnOptions
from tests.builders import opening_records, tool_turn_records
from tests.unit.relay.relay_support import FAST, FakeClock, read_stream, relay_config
from tests.unit.relay.test_relay_service import RecordingLambda, assert_error, chat, json_body, meta_of, request

if TYPE_CHECKING:
    from typing import Any

    from chatstream.table import ChatTable
    from tests.unit.relay.relay_support import Stream

OWNER = "arn:aws:iam::123456789012:user/alice"
WEATHER = ("tooluse_weather", "get_weather", ['{"city"', ': "Paris', '", "unit": "C"}'])
TIME = ("tooluse_time", "get_time", [])  # no arguments: an end alone, {}


@pytest.fixture
def session_id(chat_table: ChatTable) -> str:
    session_id = chat_table.create_session(OWNER)
    assert chat_table.turns.start_next(session_id, OWNER, "weather and time?") == 1
    return session_id


def write_tool_turn(table: ChatTable, session_id: str, records: list[TokenRecord]) -> None:
    """A finished turn as the consumer writes it: its item first, then its records."""
    table.turns.end_from_stream(records[-1], assistant_text(records), tool_calls=tool_calls(records))
    table.put_records(records)


def follow(table: ChatTable, session_id: str, after: Position | None = None, *, pace: bool = True) -> Stream:
    settings = replace(FAST, pace=pace)
    follower = Follower(table, session_id, 1, after=after, settings=settings, clock=FakeClock().as_clock())
    return read_stream(follower.events())


def calls_of(stream: Stream) -> dict[int, dict[str, object]]:
    """The calls a stream's tool_call events spell, by index: id, name, arguments, and whether an end came."""
    calls: dict[int, dict[str, object]] = {}
    for event in stream.of("tool_call"):
        data = event.json()
        call = calls.setdefault(data["index"], {"id": data["id"], "name": data["name"], "arguments": "", "end": False})
        assert (call["id"], call["name"]) == (data["id"], data["name"])  # every event names its call
        assert not call["end"], "nothing of a call after its end"
        call["arguments"] = str(call["arguments"]) + data["arguments"]
        call["end"] = data.get("end", False)
    return calls


def test_a_turn_that_called_tools_streams_each_calls_arguments_after_its_text(
    chat_table: ChatTable, session_id: str
) -> None:
    # GIVEN a finished turn: text, a call whose arguments span three records, a call without arguments
    records = tool_turn_records(session_id, 1, ["Let me", " look that up."], [WEATHER, TIME])
    write_tool_turn(chat_table, session_id, records)
    # WHEN a client follows it
    stream = follow(chat_table, session_id)
    # THEN the text comes first (paced), then one tool_call event per record of arguments, whole, with its seq as id
    kinds = stream.kinds
    assert kinds[-1] == "done" and kinds.index("tool_call") > max(i for i, kind in enumerate(kinds) if kind == "token")
    assert stream.text == "Let me look that up."
    tool_events = stream.of("tool_call")
    assert [event.id for event in tool_events] == [str(record.seq) for record in records[3:-1]]
    assert tool_events[0].json() == {
        "index": 0,
        "id": "tooluse_weather",
        "name": "get_weather",
        "arguments": '{"city"',
    }
    # AND the calls assemble exactly, each with its end: {} for the one without arguments
    assert calls_of(stream) == {
        0: {"id": "tooluse_weather", "name": "get_weather", "arguments": '{"city": "Paris", "unit": "C"}', "end": True},
        1: {"id": "tooluse_time", "name": "get_time", "arguments": "{}", "end": True},
    }
    assert stream.of("done")[0].json()["stop_reason"] == StopReason.TOOL_USE


def test_a_resume_from_any_event_gives_every_argument_character_once(chat_table: ChatTable, session_id: str) -> None:
    records = tool_turn_records(session_id, 1, ["Checking", " now"], [WEATHER, TIME])
    write_tool_turn(chat_table, session_id, records)
    whole = follow(chat_table, session_id)
    expected = calls_of(whole)
    # WHEN a client cut after each event (inside the text, inside a call's arguments, between calls) resumes there
    for cut, event in enumerate(whole.events[:-1]):
        assert event.id is not None
        resumed = follow(chat_table, session_id, Position.parse(event.id))
        # THEN what it had and what it got spell the text and every call exactly once, and nothing is repeated
        had = whole.events[: cut + 1]
        text = "".join(e.json()["text"] for e in had if e.event == "token") + resumed.text
        assert text == "Checking now"
        joined: dict[int, dict[str, object]] = {index: {**call, "arguments": ""} for index, call in expected.items()}
        for e in [*had, *resumed.events]:
            if e.event == "tool_call":
                data = e.json()
                joined[data["index"]]["arguments"] = str(joined[data["index"]]["arguments"]) + data["arguments"]
        assert {index: call["arguments"] for index, call in joined.items()} == {
            index: call["arguments"] for index, call in expected.items()
        }
        assert event.id not in [e.id for e in resumed.events]


def test_unpaced_streams_send_the_same_tool_call_events(chat_table: ChatTable, session_id: str) -> None:
    records = tool_turn_records(session_id, 1, ["One", " two three four"], [WEATHER])
    write_tool_turn(chat_table, session_id, records)
    paced, unpaced = follow(chat_table, session_id), follow(chat_table, session_id, pace=False)
    # THEN arguments are never paced: the same events, ids and data, whether text is paced or not
    assert [(e.id, e.data) for e in paced.of("tool_call")] == [(e.id, e.data) for e in unpaced.of("tool_call")]
    assert paced.kinds.count("token") > 2
    assert unpaced.kinds == ["token", "token", "tool_call", "tool_call", "tool_call", "done"]


def test_a_call_cut_short_ends_without_its_end_and_the_error_names_it(chat_table: ChatTable, session_id: str) -> None:
    # GIVEN a turn whose model wrote arguments that are not JSON: the proxy ended it with malformed_tool_use
    ref = ToolCallRef(0, "tooluse_x", "get_weather")
    records = opening_records(session_id, 1, ["Sure"])
    records.append(TokenRecord.tool_use(session_id, 1, 2, ref, '{"city": Par', 3))
    error = ErrorInfo(
        "malformed_tool_use", "the model's arguments for tool call 0 (get_weather) are not a JSON object", False
    )
    records.append(TokenRecord.failure(session_id, 1, 3, error, 4))
    write_tool_turn(chat_table, session_id, records)
    # THEN the stream has the call's arguments as they came, no end, and the error names malformed_tool_use
    stream = follow(chat_table, session_id)
    assert stream.kinds == ["token", "tool_call", "error"]
    assert "end" not in stream.of("tool_call")[0].json()
    assert stream.of("error")[0].json()["code"] == "malformed_tool_use"


def test_render_writes_a_tool_use_record_as_its_event() -> None:
    record = TokenRecord.tool_use("s", 1, 4, ToolCallRef(2, "tooluse_z", "get_time"), "", 5, end=True)
    assert render(record) == (
        'id: 4\nevent: tool_call\ndata: {"index":2,"id":"tooluse_z","name":"get_time","arguments":"","end":true}\n\n'
    )
    assert json.loads(render(record).split("data: ")[1])["end"] is True


def test_the_pacer_sends_a_calls_arguments_at_once_after_the_text_that_waits() -> None:
    # GIVEN a pacer holding a record's text spread over the next interval
    pacer = Pacer()
    pacer.add(TextEvent("token", 1, "one two three four"), now=0.0, interval=1.0)
    first = pacer.due(0.0)
    assert [piece.text for piece in first] == ["one"]
    # WHEN a tool call's arguments arrive, and text after them
    call = ToolCallRef(0, "tooluse_a", "get_weather")
    pacer.add(TextEvent("tool_call", 2, '{"city": "Oslo"}', call=call, end=True), now=0.1, interval=1.0)
    pacer.add(TextEvent("token", 3, "five six"), now=0.1, interval=1.0)
    # THEN the waiting text and the arguments (whole) are due at once, in order; the text after them is paced
    due = pacer.due(0.1)
    assert [(piece.kind, piece.text) for piece in due] == [
        ("token", " two"),
        ("token", " three"),
        ("token", " four"),
        ("tool_call", '{"city": "Oslo"}'),
        ("token", "five"),
    ]
    assert [piece.text for piece in pacer.flush()] == [" six"]


# ------------------------------------------------------------------------------ POST /chat and the history

GET_WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.fixture
def service(chat_table: ChatTable, table_name: str) -> RelayService:
    lambda_client = RecordingLambda()
    return RelayService(
        chat_table, lambda_client, relay_config(table_name), clock=FakeClock().as_clock(), settings=FAST
    )  # type: ignore[arg-type]


def finish_with_calls(table: ChatTable, session_id: str, turn: int, calls: list[tuple[str, str, list[str]]]) -> None:
    """End ``turn`` as the consumer does, with a reply that called ``calls``."""
    records = tool_turn_records(session_id, turn, ["On it."], calls)
    write_tool_turn_n(table, records)


def write_tool_turn_n(table: ChatTable, records: list[TokenRecord]) -> None:
    table.turns.end_from_stream(records[-1], assistant_text(records), tool_calls=tool_calls(records))
    table.put_records(records)


def test_a_chat_declares_tools_in_the_turn_item(service: RelayService, chat_table: ChatTable) -> None:
    # WHEN a client starts a chat with a tool, a choice and one call at a time
    response = chat(
        service,
        "weather in Paris?",
        tools=[GET_WEATHER],
        tool_choice={"name": "get_weather"},
        parallel_tool_calls=False,
    )
    assert response.status_code == 200
    session_id = meta_of(response)["session_id"]
    # THEN the turn item holds them, where the proxy reads them (no queue message carries them)
    options = chat_table.get_turn(session_id, 1).options
    assert options.tools == (ToolSpec("get_weather", GET_WEATHER["parameters"], "The weather in a city."),)
    assert options.tool_choice == ToolChoice(ToolChoiceMode.TOOL, "get_weather")
    assert options.parallel_tool_calls is False
    # AND a tool without parameters is a function of none; auto without tools means nothing
    bare = meta_of(chat(service, "hi", tools=[{"name": "get_time"}], tool_choice="required"))["session_id"]
    assert chat_table.get_turn(bare, 1).options.tools == (ToolSpec("get_time", {"type": "object", "properties": {}}),)
    plain = meta_of(chat(service, "hi", tool_choice="auto"))["session_id"]
    assert chat_table.get_turn(plain, 1).options == TurnOptions()


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"tools": [{"name": "get weather"}]}, "tools[0].name must be 1 to 64 letters"),
        ({"tools": [{"name": "x" * 65}]}, "tools[0].name must be 1 to 64"),
        ({"tools": [{"name": "f", "parameters": {"type": "string"}}]}, "tools[0].parameters must be a JSON schema of"),
        ({"tools": [{"name": "f", "parameters": []}]}, "tools[0].parameters must be a JSON schema of type object"),
        ({"tools": [{"name": "f"}, {"name": "f"}]}, "declares 'f' twice"),
        ({"tools": [{"name": f"f{n}"} for n in range(129)]}, "holds 129 tools; the limit is 128"),
        ({"tools": [{"name": "f", "strict": True}]}, "unknown field tools[0].strict"),
        ({"tools": [GET_WEATHER], "tool_choice": {"name": "get_time"}}, "names 'get_time', which is not among the"),
        ({"tool_choice": "required"}, "'required' needs tools"),
        ({"tools": [GET_WEATHER], "tool_choice": "any"}, "tool_choice must be auto, none, required"),
        ({"tools": [GET_WEATHER], "parallel_tool_calls": "no"}, "parallel_tool_calls must be a boolean"),
        ({"tool_results": [{"tool_call_id": "a", "content": "x"}]}, "give its session_id"),
        ({"session_id": "s", "tool_results": []}, "tool_results must be a non-empty list"),
        ({"session_id": "s", "tool_results": [{"tool_call_id": "a b", "content": "x"}]}, "tool_call_id must be a"),
        ({"session_id": "s", "tool_results": [{"tool_call_id": "a", "content": 1}]}, "content must be a string"),
        ({"session_id": "s", "tool_results": [{"tool_call_id": "a", "output": "x"}]}, 'must be {"tool_call_id"'),
    ],
)
def test_tool_fields_that_are_wrong_are_400s_that_name_them(
    service: RelayService, fields: dict[str, Any], says: str
) -> None:
    response = service.handle(request("POST", "/chat", body=json.dumps({"message": "hi", **fields})))
    assert says in assert_error(response, 400, "invalid_request")


def test_tool_results_answer_the_latest_turns_calls(service: RelayService, chat_table: ChatTable) -> None:
    # GIVEN a session whose latest turn called two tools
    session_id = meta_of(chat(service, "weather and time?", tools=[GET_WEATHER, {"name": "get_time"}]))["session_id"]
    finish_with_calls(chat_table, session_id, 1, [WEATHER, TIME])
    # WHEN the client answers one call only, or a call that is not there
    one = [{"tool_call_id": "tooluse_weather", "content": "sunny"}]
    says = assert_error(chat(service, "", session_id=session_id, tool_results=one), 400, "invalid_request")
    assert "no result for tool call tooluse_time (get_time) of turn 1" in says
    stray = [*one, {"tool_call_id": "tooluse_time", "content": "noon"}, {"tool_call_id": "tooluse_x", "content": "?"}]
    says = assert_error(chat(service, "", session_id=session_id, tool_results=stray), 400, "invalid_request")
    assert "'tooluse_x', which names no tool call of turn 1" in says
    # THEN no turn was started by either
    assert chat_table.get_session(session_id).turn_count == 1
    # WHEN it answers both, without a message
    both = [*one, {"tool_call_id": "tooluse_time", "content": ""}]
    response = service.handle(
        request("POST", "/chat", body=json.dumps({"session_id": session_id, "tool_results": both}))
    )
    # THEN turn 2 holds them, with no text of its own
    assert meta_of(response)["turn"] == 2
    turn = chat_table.get_turn(session_id, 2)
    assert (turn.user, turn.options.tool_results) == (
        "",
        (ToolResult("tooluse_weather", "sunny"), ToolResult("tooluse_time", "")),
    )
    # AND a plain message after a turn that called tools is taken (its calls go unanswered)
    other = meta_of(chat(service, "weather?", tools=[GET_WEATHER]))["session_id"]
    finish_with_calls(chat_table, other, 1, [WEATHER])
    assert meta_of(chat(service, "never mind", session_id=other))["turn"] == 2


def test_tool_results_while_the_turn_generates_are_a_409(service: RelayService) -> None:
    session_id = meta_of(chat(service, "weather?", tools=[GET_WEATHER]))["session_id"]
    answer = [{"tool_call_id": "tooluse_weather", "content": "sunny"}]
    assert_error(chat(service, "", session_id=session_id, tool_results=answer), 409, "turn_in_progress")


def test_the_history_shows_tool_calls_apart_from_the_text(service: RelayService, chat_table: ChatTable) -> None:
    session_id = meta_of(chat(service, "weather and time?", tools=[GET_WEATHER, {"name": "get_time"}]))["session_id"]
    finish_with_calls(chat_table, session_id, 1, [WEATHER, TIME])
    answers = [
        {"tool_call_id": "tooluse_weather", "content": "sunny"},
        {"tool_call_id": "tooluse_time", "content": "9"},
    ]
    meta_of(chat(service, "", session_id=session_id, tool_results=answers))
    # A turn in progress: its calls so far, read from its records
    live = tool_turn_records(
        session_id, 2, ["Thanks"], [("tooluse_more", "get_time", ['{"tz"', ': "UTC"}'])], ended=False
    )[:-1]
    chat_table.put_records(live)
    history = json_body(service.handle(request("GET", f"/sessions/{session_id}")))
    first, second = history["turns"]
    assert first["assistant"] == "On it." and first["stop_reason"] == "tool_use"
    assert first["tool_calls"] == [
        {
            "index": 0,
            "id": "tooluse_weather",
            "name": "get_weather",
            "arguments": '{"city": "Paris", "unit": "C"}',
            "complete": True,
        },
        {"index": 1, "id": "tooluse_time", "name": "get_time", "arguments": "{}", "complete": True},
    ]
    assert "tool_results" not in first
    assert second["user"] == "" and second["tool_results"] == answers
    assert second["status"] == "in_progress" and second["assistant"] == "Thanks"
    assert second["tool_calls"] == [
        {"index": 0, "id": "tooluse_more", "name": "get_time", "arguments": '{"tz"', "complete": False}
    ]
