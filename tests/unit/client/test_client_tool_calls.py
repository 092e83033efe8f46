"""The Python client and the terminal client with tool calls: ``tool_call`` events assembled into
:attr:`TurnResult.tool_calls` (a resume inside a call's arguments included), and printed plainly."""

from __future__ import annotations

import io
import json

from httpx_sse import ServerSentEvent

from chatstream_client.api import FINISHED, ChatClient, ToolCall, TurnResult, _Listener
from chatstream_client.cli import _Printer, _report_end


def tool_event(event_id: str, index: int, arguments: str, *, end: bool = False) -> ServerSentEvent:
    data = {"index": index, "id": f"tooluse_{index}", "name": "get_weather", "arguments": arguments}
    return ServerSentEvent(event="tool_call", data=json.dumps({**data, **({"end": True} if end else {})}), id=event_id)


def test_tool_call_events_assemble_into_the_turns_calls_each_once() -> None:
    # GIVEN a stream: text, two calls in pieces, one event sent again (as after a resume), done
    events = [
        ServerSentEvent(event="token", data='{"text": "On it."}', id="1"),
        tool_event("2", 0, '{"city"'),
        tool_event("3", 0, ': "Oslo"}', end=True),
        tool_event("3", 0, ': "Oslo"}', end=True),
        tool_event("4", 1, "{}", end=True),
        ServerSentEvent(event="done", data='{"stop_reason": "tool_use", "usage": {}}', id="5"),
    ]
    completed: list[ToolCall] = []
    result = TurnResult()
    with ChatClient() as client:
        ending = client._consume(iter(events), result, 0.0, _Listener(on_tool_call=completed.append), None)
    # THEN each call is whole, once, complete, and the caller was told of each as it completed
    assert ending == FINISHED and result.text == "On it."
    assert result.tool_calls == [
        ToolCall(0, "tooluse_0", "get_weather", '{"city": "Oslo"}', complete=True),
        ToolCall(1, "tooluse_1", "get_weather", "{}", complete=True),
    ]
    assert completed == result.tool_calls and result.tool_calls[0].parsed() == {"city": "Oslo"}
    assert result.repeated_ids == ["3"] and result.last_event_id == "5"


def test_a_tool_call_is_printed_plainly_and_a_reply_that_stopped_for_it_says_so() -> None:
    out, err = io.StringIO(), io.StringIO()
    printer = _Printer(out, err)
    printer.token("Checking.")
    printer.tool_call(ToolCall(0, "tooluse_0", "get_weather", '{"city": "Oslo"}', complete=True))
    assert _report_end(TurnResult(done={"stop_reason": "tool_use"}), out, err) == 0
    assert out.getvalue() == 'Checking.\n[tool call get_weather {"city": "Oslo"}]\n\n'
    assert err.getvalue() == "[stopped to call a tool]\n"
