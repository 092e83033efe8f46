"""Tool definitions, choices, calls and results: what a turn may hold, how the turn item stores it, and the shapes
ConverseStream takes."""

from __future__ import annotations

import pytest

from chatstream.tools import MAX_TOOLS, ToolCall, ToolChoice, ToolChoiceMode, ToolResult, ToolSpec
from chatstream.turn_options import HistoryMessage, TurnOptions

WEATHER = ToolSpec(
    "get_weather",
    {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "number", "minimum": 0.5}}},
    "The weather in a city.",
)
OPTIONS = TurnOptions(
    history=(
        HistoryMessage("user", "weather?"),
        HistoryMessage("assistant", "", tool_calls=(ToolCall("call_1", "get_weather", '{"city": "Paris"}'),)),
        HistoryMessage("user", "", tool_results=(ToolResult("call_1", "sunny"),)),
        HistoryMessage("assistant", "Sunny."),
    ),
    tools=(WEATHER, ToolSpec("get_time", {"type": "object"})),
    tool_choice=ToolChoice(ToolChoiceMode.TOOL, "get_time"),
    tool_results=(ToolResult("call_2", ""), ToolResult("call_3", '{"ok": true}')),
)


def test_tools_choice_results_and_tool_history_go_through_the_turn_item_exactly(chat_table) -> None:
    # GIVEN a turn started with tools, a choice, results and a history holding a call and its result
    session_id = chat_table.turns.start_first("me", "", options=OPTIONS)
    # WHEN read back THEN the options are exactly what was written (a schema's float included)
    turn = chat_table.get_turn(session_id, 1)
    assert turn is not None and turn.options == OPTIONS
    assert turn.options.tools[0].parameters["properties"]["days"]["minimum"] == 0.5


def test_a_tool_is_bedrocks_tool_spec() -> None:
    assert WEATHER.to_converse() == {
        "toolSpec": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "inputSchema": {"json": WEATHER.parameters},
        }
    }
    assert ToolSpec("f", {"type": "object"}).to_converse() == {
        "toolSpec": {"name": "f", "inputSchema": {"json": {"type": "object"}}}
    }


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda: ToolSpec("get weather", {"type": "object"}), "letters, digits"),
        (lambda: ToolSpec("x" * 65, {"type": "object"}), "1 to 64"),
        (lambda: ToolSpec("f\n", {"type": "object"}), "letters, digits"),
        (lambda: ToolSpec("f", {"type": "array"}), "type object"),
        (lambda: ToolSpec("f", {}), "type object"),
        (lambda: ToolSpec("f", {"type": "object", "default": float("nan")}), "not JSON"),
        (lambda: ToolSpec("f", {"type": "object"}, ""), "description"),
        (lambda: ToolChoice(ToolChoiceMode.TOOL), "exactly when"),
        (lambda: ToolChoice(ToolChoiceMode.AUTO, "f"), "exactly when"),
        (lambda: ToolResult("", "x"), "tool_call_id"),
        (lambda: TurnOptions(tools=(WEATHER, WEATHER)), "unique"),
        (
            lambda: TurnOptions(tools=tuple(ToolSpec(f"t{i}", {"type": "object"}) for i in range(MAX_TOOLS + 1))),
            "at most",
        ),
        (lambda: TurnOptions(tool_choice=ToolChoice(ToolChoiceMode.ANY)), "needs tools"),
        (lambda: TurnOptions(tools=(WEATHER,), tool_choice=ToolChoice(ToolChoiceMode.TOOL, "nope")), "not among"),
        (lambda: TurnOptions(tool_results=(ToolResult("a", "1"), ToolResult("a", "2"))), "once"),
        (lambda: TurnOptions(history=(HistoryMessage("user", ""), HistoryMessage("assistant", "x"))), "non-empty"),
        (
            lambda: TurnOptions(
                history=(
                    HistoryMessage("user", "q", tool_calls=(ToolCall("a", "f", "{}"),)),
                    HistoryMessage("assistant", "x"),
                )
            ),
            "assistant's",
        ),
    ],
)
def test_what_bedrock_or_the_pairing_would_refuse_is_refused_naming_it(make, problem) -> None:
    with pytest.raises(ValueError, match=problem):
        make()


def test_a_complete_calls_input_is_its_arguments_object_and_a_cut_one_has_none() -> None:
    assert ToolCall("a", "f", '{"x": [1]}').to_converse() == {
        "toolUse": {"toolUseId": "a", "name": "f", "input": {"x": [1]}}
    }
    assert ToolCall("a", "f", '{"x": [1', complete=False).to_converse() is None
    assert ToolCall("a", "f", "[1]").to_converse() is None


def test_a_result_is_a_tool_result_block_and_a_blank_one_has_no_content() -> None:
    assert ToolResult("a", "sunny").to_converse() == {"toolResult": {"toolUseId": "a", "content": [{"text": "sunny"}]}}
    assert ToolResult("a", " ").to_converse() == {"toolResult": {"toolUseId": "a", "content": []}}
