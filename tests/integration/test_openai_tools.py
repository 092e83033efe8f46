"""Tool calls through the local Function URL, driven by OpenAI's own Python SDK (``openai``, pinned): chat completions
and responses, streamed and not, one call and two parallel calls, the result round trip to the final answer, the
SDK's stream helpers, and a background response resumed with ``starting_after`` inside a call's arguments.

The local model calls a tool for each ``/call NAME {json}`` line of the last user message when the request declares
tools, and answers tool results ``Tool NAME said: CONTENT`` (chatstream_local.bedrock.model); every chunk and event is
parsed into the SDK's own types, which the tests read."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionChunk
from openai.types.responses import ResponseFunctionToolCall

from chatstream_client.api import ChatClient
from chatstream_local.bedrock.model import plan_reply

if TYPE_CHECKING:
    from collections.abc import Iterator

    from chatstream_local.stack import LocalStack

pytestmark = pytest.mark.integration

ALIAS = "chatstream"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
CHAT_TOOLS: list[Any] = [WEATHER, TIME]
RESPONSE_TOOLS: list[Any] = [{"type": "function", **tool["function"]} for tool in CHAT_TOOLS]
ONE_CALL = '/call get_weather {"city": "Paris"}'
TWO_CALLS = 'Checking both.\n/call get_weather {"city": "Paris"}\n/call get_time {}'
# A call whose arguments span many records: 8 characters a delta, 10 ms a delta, a record every ~300 ms
LONG_ARGUMENTS = json.dumps({"city": "Paris", "notes": " ".join(f"note{n}" for n in range(400))})
LONG_CALL = f"/call get_weather {LONG_ARGUMENTS}"


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    """One stack for the module, the model at 10 ms a delta so a call's arguments last long enough to interrupt."""
    from chatstream_local.stack import LocalStack, StackSettings

    with pytest.MonkeyPatch.context() as patch:
        for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
            patch.setenv(name, value)
        patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        local = LocalStack(
            StackSettings(port=0, model_delay_ms=10, parameter_overrides={"FunctionUrlAuthType": "NONE"})
        ).start()
        yield local
        local.stop()


@pytest.fixture
def client(stack: LocalStack) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{stack.url}/v1", api_key="unused", max_retries=0) as sdk:
        yield sdk


def planned(message: str, tools: list[str]) -> list[tuple[str, str, str]]:
    """The calls the local model makes for ``message``: (id, name, arguments, ``{}`` for none)."""
    return [(call.id, call.name, call.arguments or "{}") for call in plan_reply(message, tools=tools).calls]


NAMES = ["get_weather", "get_time"]


# ------------------------------------------------------------------------------ chat completions


def test_a_chat_completion_calls_a_tool_and_answers_its_result(client: openai.OpenAI) -> None:
    # WHEN the model is asked for one call, not streamed
    messages: list[Any] = [{"role": "user", "content": ONE_CALL}]
    completion = client.chat.completions.create(model=ALIAS, messages=messages, tools=CHAT_TOOLS)
    choice = completion.choices[0]
    # THEN the message holds the call, no text, and the reply stopped for it
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    calls = choice.message.tool_calls or []
    assert [(call.id, call.function.name, call.function.arguments) for call in calls] == planned(ONE_CALL, NAMES)
    # WHEN the client runs it and sends the result back with the message, as the SDK's tool loops do
    messages += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": calls[0].id, "content": "sunny"},
    ]
    final = client.chat.completions.create(model=ALIAS, messages=messages, tools=CHAT_TOOLS)
    # THEN the model answers from it
    assert final.choices[0].message.content == "Tool get_weather said: sunny"
    assert final.choices[0].finish_reason == "stop"


def test_a_streamed_chat_completion_carries_two_parallel_calls(client: openai.OpenAI) -> None:
    messages: list[Any] = [{"role": "user", "content": TWO_CALLS}]
    chunks = list(client.chat.completions.create(model=ALIAS, messages=messages, tools=CHAT_TOOLS, stream=True))
    assert all(isinstance(chunk, ChatCompletionChunk) for chunk in chunks)
    deltas = [chunk.choices[0].delta for chunk in chunks if chunk.choices]
    # THEN the text comes first, then each call: its first chunk names it (index from 0 within the message, though
    # text came first), any others carry pieces of its arguments
    assert "".join(delta.content or "" for delta in deltas) == "You said: Checking both."
    pieces = [call for delta in deltas for call in delta.tool_calls or []]
    firsts = [call for call in pieces if call.id is not None]
    assert [(call.index, call.id, call.type, call.function.name) for call in firsts if call.function] == [
        (0, planned(TWO_CALLS, NAMES)[0][0], "function", "get_weather"),
        (1, planned(TWO_CALLS, NAMES)[1][0], "function", "get_time"),
    ]
    assert all(call.type is None and call.function and call.function.name is None for call in pieces if call.id is None)
    arguments = {0: "", 1: ""}
    for call in pieces:
        arguments[call.index] += call.function.arguments or "" if call.function else ""
    assert arguments == {0: '{"city": "Paris"}', 1: "{}"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_the_sdks_stream_helper_accumulates_the_calls(client: openai.OpenAI) -> None:
    messages: list[Any] = [{"role": "user", "content": TWO_CALLS}]
    done: list[tuple[str, str]] = []
    with client.chat.completions.stream(model=ALIAS, messages=messages, tools=CHAT_TOOLS) as stream:
        for event in stream:
            if event.type == "tool_calls.function.arguments.done":
                done.append((event.name, event.arguments))
        final = stream.get_final_completion().choices[0]
    assert done == [("get_weather", '{"city": "Paris"}'), ("get_time", "{}")]
    calls = final.message.tool_calls or []
    assert [(call.id, call.function.name, call.function.arguments) for call in calls] == planned(TWO_CALLS, NAMES)
    assert final.finish_reason == "tool_calls"
    # AND the accumulated message, sent back as it is with both results, gets the final answer
    results = [{"role": "tool", "tool_call_id": call.id, "content": f"{call.function.name} ok"} for call in calls]
    history: list[Any] = [*messages, final.message, *results]
    answer = client.chat.completions.create(model=ALIAS, messages=history, tools=CHAT_TOOLS)
    assert answer.choices[0].message.content == "Tool get_weather said: get_weather ok\nTool get_time said: get_time ok"


def test_a_call_with_arguments_that_are_no_json_ends_the_stream_with_an_error(client: openai.OpenAI) -> None:
    messages: list[Any] = [{"role": "user", "content": '/call get_weather {"city": Par'}]
    with pytest.raises(openai.APIError) as failed:
        list(client.chat.completions.create(model=ALIAS, messages=messages, tools=CHAT_TOOLS, stream=True))
    assert failed.value.code == "malformed_tool_use" and "not a JSON object" in failed.value.message
    events = list(client.responses.create(model=ALIAS, input="/call get_time [1]", tools=RESPONSE_TOOLS, stream=True))
    assert events[-1].type == "response.failed"
    assert "not a JSON object" in (events[-1].response.error.message if events[-1].response.error else "")


# ------------------------------------------------------------------------------ responses


def test_a_response_calls_tools_and_a_continuation_gets_the_answer(client: openai.OpenAI) -> None:
    response = client.responses.create(model=ALIAS, input=TWO_CALLS, tools=RESPONSE_TOOLS)
    # THEN its output is the message, then one function_call item per call, completed
    assert [item.type for item in response.output] == ["message", "function_call", "function_call"]
    calls = [item for item in response.output if isinstance(item, ResponseFunctionToolCall)]
    assert [(call.call_id, call.name, call.arguments, call.status) for call in calls] == [
        (*planned, "completed") for planned in planned(TWO_CALLS, NAMES)
    ]
    assert response.status == "completed" and response.output_text == "You said: Checking both."
    # AND retrieving it shows the same
    assert client.responses.retrieve(response.id).output == response.output
    # WHEN the outputs go back with previous_response_id
    outputs: list[Any] = [
        {"type": "function_call_output", "call_id": call.call_id, "output": f"{call.name} ok"} for call in calls
    ]
    final = client.responses.create(model=ALIAS, previous_response_id=response.id, input=outputs, tools=RESPONSE_TOOLS)
    assert final.output_text == "Tool get_weather said: get_weather ok\nTool get_time said: get_time ok"
    # AND a continuation that leaves a call unanswered is refused, naming it
    leftover = client.responses.create(model=ALIAS, input=ONE_CALL, tools=RESPONSE_TOOLS)
    with pytest.raises(openai.BadRequestError) as missing:
        client.responses.create(model=ALIAS, previous_response_id=leftover.id, input="never mind")
    assert planned(ONE_CALL, NAMES)[0][0] in missing.value.message


def test_a_streamed_response_has_a_function_call_item_per_call(client: openai.OpenAI) -> None:
    events = list(client.responses.create(model=ALIAS, input=TWO_CALLS, tools=RESPONSE_TOOLS, stream=True))
    assert [event.sequence_number for event in events] == list(range(len(events)))
    added = [event for event in events if event.type == "response.output_item.added"]
    assert [(event.output_index, event.item.type) for event in added] == [
        (0, "message"),
        (1, "function_call"),
        (2, "function_call"),
    ]
    # THEN each call's arguments arrive in deltas, and its .done comes with the whole of them before the next call
    types = [event.type for event in events]
    first_done = types.index("response.function_call_arguments.done")
    assert first_done < types.index("response.output_item.added", types.index("response.output_item.added", 3) + 1)
    for index, (_, _, arguments) in enumerate(planned(TWO_CALLS, NAMES), 1):
        deltas = [
            e.delta for e in events if e.type == "response.function_call_arguments.delta" and e.output_index == index
        ]
        done = [e for e in events if e.type == "response.function_call_arguments.done" and e.output_index == index]
        assert "".join(deltas) == arguments == done[0].arguments
    assert events[-1].type == "response.completed"
    assert [item.type for item in events[-1].response.output] == ["message", "function_call", "function_call"]


def test_a_background_response_resumes_exactly_inside_a_calls_arguments(client: openai.OpenAI) -> None:
    # GIVEN a background response whose stream the client drops after the first piece of a long call's arguments
    stream = client.responses.create(model=ALIAS, input=LONG_CALL, tools=RESPONSE_TOOLS, background=True, stream=True)
    seen: list[Any] = []
    for event in stream:
        seen.append(event)
        if event.type == "response.function_call_arguments.delta":
            break
    stream.close()
    had = "".join(event.delta for event in seen if event.type == "response.function_call_arguments.delta")
    assert had and len(had) < len(LONG_ARGUMENTS)
    # WHEN it resumes from the last sequence number it has
    rest = list(client.responses.retrieve(seen[0].response.id, stream=True, starting_after=seen[-1].sequence_number))
    # THEN every character of the arguments comes once, and the call ends whole
    events = seen + rest
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = [event.delta for event in events if event.type == "response.function_call_arguments.delta"]
    assert "".join(deltas) == LONG_ARGUMENTS and len(deltas) > 2
    done = [event for event in rest if event.type == "response.function_call_arguments.done"]
    assert done[0].arguments == LONG_ARGUMENTS and rest[-1].type == "response.completed"
    # AND a resume from the middle again replays the same events
    again = list(client.responses.retrieve(seen[0].response.id, stream=True, starting_after=seen[-1].sequence_number))
    assert [event.model_dump() for event in again] == [event.model_dump() for event in rest]


# ------------------------------------------------------------------------------ the native API


def test_the_native_stream_resumes_inside_a_calls_arguments_by_last_event_id(stack: LocalStack) -> None:
    # GIVEN a native chat that calls a tool with long arguments, dropped after its first tool_call event
    body = {"message": LONG_CALL, "tools": [{"name": "get_weather", "parameters": {"type": "object"}}]}
    with httpx.Client(base_url=stack.url, timeout=60) as http, http.stream("POST", "/chat", json=body) as response:
        lines = response.iter_lines()
        meta = json.loads(next(line for line in lines if line.startswith("data: "))[6:])
        last_id = ""
        for line in lines:
            if line.startswith("id: "):
                last_id = line[4:]
            if line.startswith("event: tool_call"):
                data = json.loads(next(lines)[6:])
                break
    had = data["arguments"]
    # WHEN the Python client resumes from that id
    with ChatClient(stack.url) as native:
        result = native.follow(meta["events_url"], after=last_id)
    # THEN it gets the rest of the call exactly, ended, and the turn's history holds it whole
    (call,) = result.tool_calls
    assert had + call.arguments == LONG_ARGUMENTS
    assert (call.id, call.name, call.complete) == (planned(LONG_CALL, ["get_weather"])[0][0], "get_weather", True)
    assert result.done is not None and result.done["stop_reason"] == "tool_use"
    with ChatClient(stack.url) as native:
        (turn,) = native.history(meta["session_id"])["turns"]
    assert turn["tool_calls"][0]["arguments"] == LONG_ARGUMENTS and turn["tool_calls"][0]["complete"] is True
