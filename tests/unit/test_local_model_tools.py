"""The local model with tools: ``/call`` lines become tool calls, tool results are answered line by line, and tool
configuration and tool blocks are validated as Bedrock validates them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from chatstream_local.bedrock.converse import TOOL_CONFIG_REQUIRED, InvalidRequest, parse_request
from chatstream_local.bedrock.model import ARGUMENT_PIECE, PlannedCall, call_id, plan_reply

WEATHER = {"toolSpec": {"name": "get_weather", "inputSchema": {"json": {"type": "object"}}}}
TIME = {"toolSpec": {"name": "get_time", "description": "Now.", "inputSchema": {"json": {"type": "object"}}}}


def test_each_call_line_is_one_call_in_order_with_its_arguments_as_written() -> None:
    # WHEN the model is asked for two calls, with tools declared
    message = '/call get_weather {"city": "Paris"}\n/call get_time'
    reply = plan_reply(message, tools=("get_weather", "get_time"))
    # THEN it calls both, in order, in one message, with no text, and stops for the tools
    assert [(call.name, call.arguments) for call in reply.calls] == [
        ("get_weather", '{"city": "Paris"}'),
        ("get_time", ""),
    ]
    assert reply.deltas == () and reply.stop_reason == "tool_use"
    # THEN each call's arguments stream in several deltas, after an empty one, that spell them exactly
    pieces = reply.calls[0].pieces
    assert pieces[0] == "" and len(pieces) > 2 and "".join(pieces) == '{"city": "Paris"}'
    assert all(len(piece) <= ARGUMENT_PIECE for piece in pieces)
    assert reply.calls[1].pieces == ("",)
    # THEN the ids are Bedrock-shaped, differ by call, and are the same for the same conversation
    ids = [call.id for call in reply.calls]
    assert ids[0] != ids[1] and all(i.startswith("tooluse_") and len(i) == 32 for i in ids)
    assert plan_reply(message, tools=("get_weather", "get_time")).calls == reply.calls
    assert ids[0] == call_id([("user", message)], 0)


def test_the_messages_other_lines_are_answered_as_text_before_the_calls() -> None:
    reply = plan_reply('weather please\n/call get_weather {"city": "Oslo"}', tools=("get_weather",))
    assert reply.text == "You said: weather please"
    assert reply.calls == (PlannedCall(reply.calls[0].id, "get_weather", '{"city": "Oslo"}'),)


def test_a_tool_not_declared_is_answered_in_text_and_not_called() -> None:
    reply = plan_reply("/call get_weather {}\n/call launch {}", tools=("get_weather",))
    assert (reply.text, reply.calls, reply.stop_reason) == ("I have no tool named launch.", (), "end_turn")


def test_without_tools_a_call_line_is_just_text() -> None:
    reply = plan_reply("/call get_weather {}")
    assert (reply.text, reply.calls) == ("You said: /call get_weather {}", ())


def test_tool_results_are_answered_one_line_each() -> None:
    reply = plan_reply("", tools=("get_weather",), tool_results=(("get_weather", "sunny"), ("get_time", "noon")))
    assert reply.text == "Tool get_weather said: sunny\nTool get_time said: noon"
    assert reply.stop_reason == "end_turn" and reply.calls == ()


def test_think_then_call() -> None:
    reply = plan_reply("/think 2 /call get_time", tools=("get_time",))
    assert reply.reasoning_text == "r1 r2" and [call.name for call in reply.calls] == ["get_time"]


def _request(messages: list[dict[str, Any]], tool_config: dict[str, Any] | None = None) -> bytes:
    body: dict[str, Any] = {"messages": messages}
    if tool_config is not None:
        body["toolConfig"] = tool_config
    return json.dumps(body).encode()


def _user(*content: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": list(content)}


def _assistant(*content: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": list(content)}


USE = {"toolUse": {"toolUseId": "tooluse_a", "name": "get_weather", "input": {"city": "Paris"}}}
RESULT = {"toolResult": {"toolUseId": "tooluse_a", "content": [{"text": "sunny"}]}}
ROUND_TRIP = [_user({"text": "weather?"}), _assistant({"text": "On it."}, USE), _user(RESULT)]


def test_a_request_with_tools_and_a_tool_round_trip_is_read_with_its_results_names() -> None:
    request = parse_request(
        "m", _request(ROUND_TRIP, {"tools": [WEATHER, TIME], "toolChoice": {"tool": {"name": "get_time"}}})
    )
    assert request.tools == ("get_weather", "get_time")
    assert request.tool_results == (("get_weather", "sunny"),) and request.user_text == ""
    json_result = {"toolResult": {"toolUseId": "tooluse_a", "content": [{"json": {"t": 21}}], "status": "error"}}
    request = parse_request("m", _request([*ROUND_TRIP[:2], _user(json_result)], {"tools": [WEATHER]}))
    assert request.tool_results == (("get_weather", '{"t":21}'),)


@pytest.mark.parametrize(
    ("messages", "config", "complaint"),
    [
        (ROUND_TRIP, None, TOOL_CONFIG_REQUIRED),
        ([_user({"text": "hi"})], {"tools": []}, "at least one tool"),
        (
            [_user({"text": "hi"})],
            {"tools": [{"toolSpec": {"name": "a b", "inputSchema": {"json": {"type": "object"}}}}]},
            "name",
        ),
        (
            [_user({"text": "hi"})],
            {"tools": [{"toolSpec": {"name": "x" * 65, "inputSchema": {"json": {"type": "object"}}}}]},
            "name",
        ),
        ([_user({"text": "hi"})], {"tools": [WEATHER, WEATHER]}, "unique"),
        (
            [_user({"text": "hi"})],
            {"tools": [{"toolSpec": {"name": "f", "inputSchema": {"json": []}}}]},
            "JSON schema object",
        ),
        (
            [_user({"text": "hi"})],
            {"tools": [{"toolSpec": {"name": "f", "inputSchema": {"json": {"type": "string"}}}}]},
            "type must be object",
        ),
        (
            [_user({"text": "hi"})],
            {"tools": [{"toolSpec": {"name": "f", "description": "", "inputSchema": {"json": {"type": "object"}}}}]},
            "description",
        ),
        ([_user({"text": "hi"})], {"tools": [WEATHER], "toolChoice": {"none": {}}}, "auto, any or tool"),
        ([_user({"text": "hi"})], {"tools": [WEATHER], "toolChoice": {"tool": {"name": "get_time"}}}, "not a tool"),
        ([*ROUND_TRIP[:2], _user({"text": "and?"})], {"tools": [WEATHER]}, "Expected toolResult blocks at messages.2"),
        ([_user({"text": "hi"}), _assistant({"text": "yo"}), _user(RESULT)], {"tools": [WEATHER]}, "answer no toolUse"),
        ([_user(USE)], {"tools": [WEATHER]}, "user message cannot hold toolUse"),
        (
            [_user({"text": "q"}), _assistant(RESULT), _user({"text": "x"})],
            {"tools": [WEATHER]},
            "assistant message cannot hold toolResult",
        ),
        (
            [
                _user({"text": "q"}),
                _assistant({"toolUse": {"toolUseId": "a b", "name": "get_weather", "input": {}}}),
                _user(RESULT),
            ],
            {"tools": [WEATHER]},
            "toolUseId",
        ),
        (
            [
                _user({"text": "q"}),
                _assistant({"toolUse": {"toolUseId": "tooluse_a", "name": "get_weather", "input": "{}"}}),
                _user(RESULT),
            ],
            {"tools": [WEATHER]},
            "input must be a JSON object",
        ),
    ],
)
def test_tool_configuration_and_blocks_bedrock_refuses_are_validation_errors(messages, config, complaint) -> None:
    with pytest.raises(InvalidRequest, match=complaint.replace(".", r"\.").replace("(", r"\(")):
        parse_request("m", _request(messages, config))
