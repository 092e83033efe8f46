"""/v1 without HTTP: request bodies validated, and a response's events numbered from its stored records."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from chatstream.records import ErrorInfo
from chatstream.relay.http import HttpError
from chatstream.relay.openai.requests import parse_chat_completion_request, parse_responses_request
from chatstream.relay.openai.responses import ResponseStream, parse_response_id, record_events, response_id
from chatstream.status import StopReason
from chatstream.turn_options import HistoryMessage
from tests.unit.relay.relay_support import write_turn

if TYPE_CHECKING:
    from chatstream.table import ChatTable


def responses(body: dict[str, Any]) -> Any:
    return parse_responses_request(json.dumps(body).encode(), max_tokens_limit=100, valid_base64=True)


def chat(body: dict[str, Any]) -> Any:
    return parse_chat_completion_request(json.dumps(body).encode(), max_tokens_limit=100, valid_base64=True)


def error_of(parse: Any, body: dict[str, Any]) -> tuple[int, str, str | None]:
    with pytest.raises(HttpError) as caught:
        parse(body)
    return caught.value.status, caught.value.code, getattr(caught.value, "param", None)


# ------------------------------------------------------------------------------ bodies


def test_chat_messages_become_a_system_prompt_a_history_and_the_turns_message() -> None:
    request = chat(
        {
            "model": "m",
            "messages": [
                {"role": "system", "content": "one"},
                {"role": "user", "content": "a"},
                {"role": "user", "content": [{"type": "text", "text": "b"}]},
                {"role": "developer", "content": "two"},
                {"role": "assistant", "content": "c"},
                {"role": "user", "content": "d"},
            ],
            "stop": "END",
            "max_completion_tokens": 7,
            "top_p": 0.5,
            "n": 1,
        }
    )
    assert request.message == "d"
    assert request.options.system == "one\n\ntwo"
    assert request.options.history == (HistoryMessage("user", "a\n\nb"), HistoryMessage("assistant", "c"))
    assert request.options.stop == ("END",) and request.options.top_p == 0.5 and request.max_tokens == 7


def test_a_responses_input_string_is_the_message_and_instructions_the_system_prompt() -> None:
    request = responses({"model": "m", "input": "hi", "instructions": "be brief", "max_output_tokens": 3})
    assert (request.message, request.options.system, request.max_tokens) == ("hi", "be brief", 3)
    assert request.options.history == () and not request.stream and not request.background


@pytest.mark.parametrize(
    ("body", "status", "code", "param"),
    [
        ({"messages": [{"role": "user", "content": "x"}]}, 400, "invalid_request", "model"),
        ({"model": "m", "messages": []}, 400, "invalid_request", "messages"),
        (
            {"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [{}]},
            400,
            "unsupported_parameter",
            "tools",
        ),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 2}, 400, "unsupported_parameter", "n"),
        (
            {"model": "m", "messages": [{"role": "user", "content": "x"}], "logprobs": True},
            400,
            "unsupported_parameter",
            "logprobs",
        ),
        (
            {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_token": 5},
            400,
            "unknown_parameter",
            "max_token",
        ),
        ({"model": "m", "messages": [{"role": "assistant", "content": "x"}]}, 400, "invalid_request", "messages"),
        (
            {"model": "m", "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]},
            400,
            "invalid_request",
            "messages",
        ),
        (
            {"model": "m", "messages": [{"role": "tool", "content": "x"}]},
            400,
            "unsupported_parameter",
            "messages[0].role",
        ),
        (
            {"model": "m", "messages": [{"role": "user", "content": "x", "name": "a"}]},
            400,
            "unsupported_parameter",
            "messages[0].name",
        ),
        ({"model": "m", "messages": [{"role": "user", "content": " "}]}, 400, "invalid_request", "messages[0].content"),
        (
            {"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": 1.5},
            400,
            "invalid_request",
            "temperature",
        ),
        (
            {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 101},
            400,
            "invalid_request",
            "max_tokens",
        ),
        (
            {"model": "m", "messages": [{"role": "user", "content": "x"}], "stop": ["a"] * 5},
            400,
            "invalid_request",
            "stop",
        ),
        (
            {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream_options": {"include_usage": True}},
            400,
            "invalid_request",
            "stream_options",
        ),
    ],
)
def test_a_chat_completion_body_chatstream_cannot_honour_is_refused_naming_the_field(
    body: dict[str, Any], status: int, code: str, param: str
) -> None:
    assert error_of(chat, body) == (status, code, param)


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        ({"model": "m"}, "invalid_request", "input"),
        ({"model": "m", "input": "x", "store": False}, "unsupported_parameter", "store"),
        ({"model": "m", "input": "x", "tools": [{"type": "web_search"}]}, "unsupported_parameter", "tools"),
        ({"model": "m", "input": "x", "reasoning": {"effort": "low"}}, "unsupported_parameter", "reasoning"),
        ({"model": "m", "input": [{"type": "function_call_output"}]}, "unsupported_parameter", "input[0].type"),
        (
            {"model": "m", "input": [{"role": "user", "content": [{"type": "input_image"}]}]},
            "unsupported_parameter",
            "input[0].content[0].type",
        ),
        ({"model": "m", "input": "x", "previous_response_id": 5}, "invalid_request", "previous_response_id"),
        ({"model": "m", "input": "x", "stream": "yes"}, "invalid_request", "stream"),
        ({"model": "m", "input": "x", "background": 1}, "invalid_request", "background"),
    ],
)
def test_a_responses_body_chatstream_cannot_honour_is_refused_naming_the_field(
    body: dict[str, Any], code: str, param: str
) -> None:
    assert error_of(responses, body) == (400, code, param)


def test_neutral_values_of_unsupported_fields_are_accepted() -> None:
    chat({"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 1, "tools": [], "presence_penalty": 0})
    responses({"model": "m", "input": "x", "tools": [], "truncation": "disabled", "store": True})


# ------------------------------------------------------------------------------ ids and sequence numbers


def test_a_response_id_names_a_session_and_a_turn() -> None:
    assert parse_response_id(response_id("ab12", 7)) == ("ab12", 7)
    for bad in ("resp_ab12", "resp__1", "msg_ab12_1", "resp_ab12_0", "resp_ab12_01", "resp_a b_1", "resp_ab12_x"):
        assert parse_response_id(bad) is None


def events_of(table: ChatTable, session_id: str, after: int) -> list[dict[str, Any]]:
    turn = table.get_turn(session_id, 1)
    assert turn is not None
    stream = ResponseStream(table, turn, "model-x", after)
    chunks = [*stream.prelude(), *stream.events(record_events(table.query_records(session_id, 1)))]
    return [json.loads(chunk.split("data: ", 1)[1]) for chunk in chunks]


@pytest.mark.parametrize(
    ("stop_reason", "error", "last"),
    [
        (StopReason.END_TURN, None, "response.completed"),
        (StopReason.MAX_TOKENS, None, "response.incomplete"),
        (StopReason.CANCELLED, None, "response.incomplete"),
        (StopReason.END_TURN, ErrorInfo("model_error", "boom", False), "response.failed"),
    ],
)
def test_sequence_numbers_follow_from_the_records_so_every_resume_is_a_suffix(
    chat_table: ChatTable, stop_reason: StopReason, error: ErrorInfo | None, last: str
) -> None:
    # GIVEN a finished turn of three deltas
    session_id = chat_table.start_session("me", "hi")
    write_turn(chat_table, session_id, 1, ["a", " b", " c"], stop_reason=stop_reason, error=error)
    # WHEN its events are read whole
    whole = events_of(chat_table, session_id, -1)
    # THEN they are numbered 0, 1, 2, … with the delta of record seq k at 3 + k, and end with the terminal event
    assert [event["sequence_number"] for event in whole] == list(range(len(whole)))
    deltas = [event for event in whole if event["type"] == "response.output_text.delta"]
    assert [(event["sequence_number"], event["delta"]) for event in deltas] == [(4, "a"), (5, " b"), (6, " c")]
    assert whole[-1]["type"] == last
    # AND a resume after any number is exactly the rest
    for after in range(-1, len(whole) + 1):
        assert events_of(chat_table, session_id, after) == whole[after + 1 :]
