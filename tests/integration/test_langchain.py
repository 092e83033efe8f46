"""LangChain's ``ChatOpenAI`` (``langchain-openai``, pinned) with tools against the local stack's ``/v1``: the model's
calls stream as ``tool_call_chunks`` that assemble into its calls, and a small tool loop (run each call, send the
results back as ``ToolMessage``s) reaches the model's answer, through Chat Completions and the Responses API.

Nothing leaves the machine: the client is pointed at the stack, LangSmith tracing is off, and no tokenizer is
loaded (token counting is never asked for)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from langchain_core.messages import AIMessageChunk, BaseMessage, HumanMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from chatstream_local.bedrock.model import plan_reply

if TYPE_CHECKING:
    from collections.abc import Iterator

    from chatstream_local.stack import LocalStack

pytestmark = pytest.mark.integration

MESSAGE = 'Checking both.\n/call get_weather {"city": "Paris"}\n/call get_time {}'


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@tool
def get_time() -> str:
    """The time now."""
    return "noon"


TOOLS = {"get_weather": get_weather, "get_time": get_time}
PLANNED = plan_reply(MESSAGE, tools=list(TOOLS)).calls


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    from chatstream_local.stack import LocalStack, StackSettings

    with pytest.MonkeyPatch.context() as patch:
        for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
            patch.setenv(name, value)
        patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        patch.setenv("LANGSMITH_TRACING", "false")
        patch.setenv("LANGCHAIN_TRACING_V2", "false")
        local = LocalStack(
            StackSettings(port=0, model_delay_ms=5, parameter_overrides={"FunctionUrlAuthType": "NONE"})
        ).start()
        yield local
        local.stop()


def model(stack: LocalStack, responses: bool) -> Any:
    chat = ChatOpenAI(
        model="chatstream",
        base_url=f"{stack.url}/v1",
        api_key="unused",  # type: ignore[arg-type]
        max_retries=0,
        use_responses_api=responses,
    )
    return chat.bind_tools(list(TOOLS.values()))


@pytest.mark.parametrize("responses", [False, True], ids=["chat completions", "responses"])
def test_streamed_tool_call_chunks_assemble_into_the_calls(stack: LocalStack, responses: bool) -> None:
    # WHEN the model with both tools bound is streamed a message it answers with text and two calls
    chunks = list(model(stack, responses).stream([HumanMessage(MESSAGE)]))
    # THEN the calls came in tool_call_chunks, each call's first naming it
    pieces = [piece for chunk in chunks for piece in chunk.tool_call_chunks]
    assert [(piece["id"], piece["name"]) for piece in pieces if piece["name"]] == [
        (call.id, call.name) for call in PLANNED
    ]
    # AND the chunks add up to a message holding the text and both calls, their arguments parsed
    full = chunks[0]
    for chunk in chunks[1:]:
        full = full + chunk
    assert isinstance(full, AIMessageChunk)
    assert [(call["id"], call["name"], call["args"]) for call in full.tool_calls] == [
        (PLANNED[0].id, "get_weather", {"city": "Paris"}),
        (PLANNED[1].id, "get_time", {}),
    ]
    assert full.invalid_tool_calls == []
    assert full.text == "You said: Checking both."


@pytest.mark.parametrize("responses", [False, True], ids=["chat completions", "responses"])
def test_a_tool_loop_reaches_the_models_answer(stack: LocalStack, responses: bool) -> None:
    llm = model(stack, responses)
    messages: list[BaseMessage] = [HumanMessage(MESSAGE)]
    # WHEN an agent loop runs each call the model makes and sends the results back, until it answers in text
    for _ in range(3):
        reply = llm.invoke(messages)
        messages.append(reply)
        if not reply.tool_calls:
            break
        messages.extend(TOOLS[call["name"]].invoke(call) for call in reply.tool_calls)
    # THEN it took one round of both tools, and the model's answer is built from their results
    assert [type(message).__name__ for message in messages] == [
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
        "ToolMessage",
        "AIMessage",
    ]
    assert messages[-1].text == "Tool get_weather said: sunny in Paris\nTool get_time said: noon"
