"""/v1 without HTTP: request bodies validated, and a response's events numbered from its stored records."""

from __future__ import annotations

import json
import typing
from typing import TYPE_CHECKING, Any

import pytest
from openai import omit
from openai._models import construct_type_unchecked
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.lib.streaming.responses import ResponseStreamState
from openai.types.chat import ChatCompletionChunk, ChatCompletionMessage, ParsedChatCompletionMessage
from openai.types.chat.chat_completion import Choice
from openai.types.responses import Response, ResponseOutputMessage, ResponseStreamEvent
from openai.types.responses.response import IncompleteDetails

from chatstream.generation import CONTEXT_LENGTH_EXCEEDED
from chatstream.reaper import FailedGeneration, end_abandoned_turn
from chatstream.records import ErrorInfo
from chatstream.relay.follow import Follower
from chatstream.relay.http import HttpError
from chatstream.relay.openai.chat import ChunkStream, completion_object
from chatstream.relay.openai.errors import error_type, failed_status
from chatstream.relay.openai.requests import parse_chat_completion_request, parse_responses_request
from chatstream.relay.openai.responses import (
    ResponseStream,
    output_of,
    parse_response_id,
    record_events,
    response_id,
    response_object,
    status_of,
)
from chatstream.relay.openai.status import (
    FinishReason,
    IncompleteReason,
    ItemStatus,
    ResponseStatus,
    finish_reason,
    incomplete_reason,
    response_status,
)
from chatstream.relay.openai.turn_events import KeepAlive, Token, TurnEvent, kept_alive, turn_events
from chatstream.relay.openapi import DOCUMENT_PATH
from chatstream.relay.sse import json_message
from chatstream.status import StopReason, TurnStatus
from chatstream.turn_options import HistoryMessage
from tests.builders import opening_records, turn_records
from tests.unit.relay.relay_support import FAST, RELAY_POLLING, FakeClock, write_turn

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from chatstream.table import ChatTable


USER_NEXT = {"role": "user", "content": "next"}


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


def test_a_completions_own_message_passed_back_is_the_history() -> None:
    # GIVEN an assistant message as chatstream answers it, as the openai SDK holds it (messages.push(message)), and
    # as its helpers return it (.parse(), .stream()'s get_final_completion(): with "parsed": null)
    ours = completion_object("s", "model-x", 0, "hello", StopReason.END_TURN, None)["choices"][0]["message"]
    sdk = ChatCompletionMessage(role="assistant", content="hello").model_dump()
    parsed = ParsedChatCompletionMessage[object](role="assistant", content="hello").model_dump()
    assert "parsed" in parsed
    for message in (ours, sdk, parsed):
        assert set(message) > {"role", "content"}
        # WHEN it is sent back in the conversation THEN it is history, its empty fields ignored
        request = chat({"model": "m", "messages": [{"role": "user", "content": "hi"}, message, USER_NEXT]})
        assert request.options.history == (HistoryMessage("user", "hi"), HistoryMessage("assistant", "hello"))
    # AND such a field with something in it is still refused, naming it
    refused = {"role": "assistant", "content": "x", "audio": {"id": "audio_1"}}
    assert error_of(chat, {"model": "m", "messages": [{"role": "user", "content": "hi"}, refused, USER_NEXT]})[1:] == (
        "unsupported_parameter",
        "messages[1].audio",
    )


@pytest.mark.parametrize("field", ["seed", "metadata", "logit_bias", "audio", "reasoning_effort", "functions"])
def test_an_unsupported_chat_field_sent_as_null_is_not_given(field: str) -> None:
    # GIVEN a field chatstream does not support, sent as null (openai-python sends seed=None so) THEN it is ignored
    assert chat({"model": "m", "messages": [{"role": "user", "content": "hi"}], field: None}).message == "hi"
    # AND given a value, it is refused, naming it
    assert error_of(chat, {"model": "m", "messages": [{"role": "user", "content": "hi"}], field: 1})[1:] == (
        "unsupported_parameter",
        field,
    )


@pytest.mark.parametrize("field", ["tools", "store", "reasoning", "user", "prompt", "conversation", "stream_options"])
def test_an_unsupported_responses_field_sent_as_null_is_not_given(field: str) -> None:
    assert responses({"model": "m", "input": "hi", field: None}).message == "hi"


def test_a_responses_input_string_is_the_message_and_instructions_the_system_prompt() -> None:
    request = responses({"model": "m", "input": "hi", "instructions": "be brief", "max_output_tokens": 3})
    assert (request.message, request.options.system, request.max_tokens) == ("hi", "be brief", 3)
    assert request.options.history == () and not request.stream and not request.background


@pytest.mark.parametrize(
    ("messages", "param", "said"),
    [
        (
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [{"type": "input_text", "text": "a"}]},
            ],
            "input[1].content[0].type",
            "an assistant message's content must be output_text parts",
        ),
        (
            [{"role": "user", "content": [{"type": "output_text", "text": "hi"}]}],
            "input[0].content[0].type",
            "a user, system or developer message's content must be input_text parts",
        ),
    ],
)
def test_a_text_part_of_the_other_side_says_which_part_the_message_takes(
    messages: list[dict[str, Any]], param: str, said: str
) -> None:
    # GIVEN a response's input whose assistant message has input_text parts, or whose user message output_text
    # WHEN it is parsed THEN a 400 names the part and says which parts the message takes
    with pytest.raises(HttpError) as caught:
        responses({"model": "m", "input": [*messages, USER_NEXT]})
    assert (caught.value.status, caught.value.code, getattr(caught.value, "param", None)) == (
        400,
        "invalid_request",
        param,
    )
    assert said in caught.value.message


@pytest.mark.parametrize("kind", [{}, [], None, 3])
def test_a_content_part_whose_type_is_not_a_string_is_a_400(kind: Any) -> None:
    # GIVEN a message part whose type is an object, a list, null or a number (the fuzzer's find: it was a 500)
    body = {"model": "m", "messages": [{"role": "user", "content": [{"type": kind, "text": "0"}]}]}
    # THEN both APIs answer 400 naming the field
    assert error_of(chat, body)[1:] == ("invalid_request", "messages[0].content[0].type")
    body = {"model": "m", "input": [{"role": "user", "content": [{"type": kind, "text": "0"}]}]}
    assert error_of(responses, body)[1:] == ("invalid_request", "input[0].content[0].type")


def test_a_whole_number_written_with_a_fraction_is_that_integer() -> None:
    # GIVEN max_output_tokens 3.0 (JSON has one number type; the OpenAPI document's integer accepts it) THEN it is 3
    assert responses({"model": "m", "input": "hi", "max_output_tokens": 3.0}).max_tokens == 3
    assert error_of(responses, {"model": "m", "input": "hi", "max_output_tokens": 3.5})[1:] == (
        "invalid_request",
        "max_output_tokens",
    )


@pytest.mark.parametrize(
    ("body", "status", "code", "param"),
    [
        ({"messages": [{"role": "user", "content": "x"}]}, 400, "invalid_request", "model"),
        ({"model": "m", "messages": []}, 400, "invalid_request", "messages"),
        (
            {"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [{}]},
            400,
            "unsupported_parameter",
            "tools[0].type",
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
            {"model": "m", "messages": [{"role": "function", "content": "x", "name": "f"}]},
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
        ({"model": "m", "input": "x", "tools": [{"type": "web_search"}]}, "unsupported_parameter", "tools[0].type"),
        ({"model": "m", "input": "x", "reasoning": {"effort": "low"}}, "unsupported_parameter", "reasoning"),
        ({"model": "m", "input": [{"type": "web_search_call"}]}, "unsupported_parameter", "input[0].type"),
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


_UNION = typing.get_args(typing.get_args(ResponseStreamEvent)[0])
SDK_EVENTS = {typing.get_args(kind.model_fields["type"].annotation)[0]: kind for kind in _UNION}


def validated(chunks: list[str]) -> list[dict[str, Any]]:
    """The events' data, each validated against the openai SDK's type for it (the SDK itself does not validate)."""
    events = [json.loads(chunk.split("data: ", 1)[1]) for chunk in chunks]
    for event in events:
        SDK_EVENTS[event["type"]].model_validate(event)
    return events


def events_of(table: ChatTable, session_id: str, after: int) -> list[dict[str, Any]]:
    turn = table.get_turn(session_id, 1)
    assert turn is not None
    stream = ResponseStream(table, turn, "model-x", after)
    return validated([*stream.prelude(), *stream.events(record_events(table.query_records(session_id, 1)))])


def native_stream(*pieces: tuple[str, str]) -> list[str]:
    """A turn's native events: ``(event, text)`` pieces (``reasoning`` or ``token``), one per record, then ``done``."""
    events = [json_message({"text": text}, event=kind, id=seq) for seq, (kind, text) in enumerate(pieces, 1)]
    usage = {"input_tokens": 1, "output_tokens": len(pieces)}
    return [*events, json_message({"stop_reason": "end_turn", "usage": usage}, event="done", id=len(pieces) + 1)]


def spelt_as_response(chat_table: ChatTable, native: list[str]) -> list[dict[str, Any]]:
    """The Responses stream of a finished turn whose native stream is ``native``, each event checked by the SDK."""
    session_id = chat_table.turns.start_first("me", "hi")
    write_turn(chat_table, session_id, 1, ["x"])
    turn = chat_table.get_turn(session_id, 1)
    assert turn is not None
    stream = ResponseStream(chat_table, turn, "model-x")
    return validated([*stream.prelude(), *stream.events(turn_events(native))])


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
    session_id = chat_table.turns.start_first("me", "hi")
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


@pytest.mark.parametrize(
    ("stop_reason", "finish", "status"),
    [
        (StopReason.END_TURN, "stop", "completed"),
        (StopReason.STOP_SEQUENCE, "stop", "completed"),
        (StopReason.MAX_TOKENS, "length", "incomplete"),
        (StopReason.MODEL_CONTEXT_WINDOW_EXCEEDED, "length", "incomplete"),  # Claude's, cut short by its context
        (StopReason.GUARDRAIL_INTERVENED, "content_filter", "incomplete"),
    ],
)
def test_a_reply_cut_short_reads_as_cut_short_on_both_apis(
    chat_table: ChatTable, stop_reason: StopReason, finish: str, status: str
) -> None:
    # GIVEN a turn that ended for this reason
    session_id = chat_table.turns.start_first("me", "hi")
    write_turn(chat_table, session_id, 1, ["a"], stop_reason=stop_reason)
    turn = chat_table.get_turn(session_id, 1)
    assert turn is not None
    # THEN a chat completion's finish_reason and a response's status say so, as OpenAI's clients read them
    assert completion_object("s", "m", 0, "a", stop_reason, None)["choices"][0]["finish_reason"] == finish
    assert status_of(turn) == status


def test_reasoning_is_its_own_output_item_before_the_message_and_chat_reasoning_content(chat_table: ChatTable) -> None:
    # GIVEN a turn whose native stream shows reasoning, then the reply
    native = native_stream(("reasoning", "Think"), ("reasoning", "ing."), ("token", "Hi"))
    # WHEN it is spelt as a response
    events = spelt_as_response(chat_table, native)
    # THEN the reasoning is a reasoning item (output 0), the reply a message item (output 1), in OpenAI's events
    assert [event["type"] for event in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    output = events[-1]["response"]["output"]
    assert [(item["type"], item["content"][0]["type"], item["content"][0]["text"]) for item in output] == [
        ("reasoning", "reasoning_text", "Thinking."),
        ("message", "output_text", "Hi"),
    ]
    # AND a chat completion's content is the reply alone, its reasoning in reasoning_content chunks of their own
    chunks = ChunkStream("s", "model-x", 0, include_usage=False).chunks(turn_events(native))
    datas = [chunk.removeprefix("data: ").strip() for chunk in chunks]
    deltas = [json.loads(data)["choices"][0]["delta"] for data in datas[:-1]]
    assert "".join(delta.get("content") or "" for delta in deltas) == "Hi" and datas[-1] == "[DONE]"
    assert [delta["reasoning_content"] for delta in deltas if "reasoning_content" in delta] == ["Think", "ing."]
    assert not any("content" in delta and "reasoning_content" in delta for delta in deltas)


def test_the_sdks_own_stream_accumulator_rebuilds_each_item_exactly(chat_table: ChatTable) -> None:
    # GIVEN a turn that reasons, then replies, in pieces
    native = native_stream(("reasoning", "Think"), ("reasoning", "ing."), ("token", "You"), ("token", " said: hi"))
    events = spelt_as_response(chat_table, native)

    # WHEN the openai SDK's stream helper accumulates them, as client.responses.stream() does
    state: ResponseStreamState[object] = ResponseStreamState(input_tools=omit, text_format=omit)
    texts: list[str] = []
    for event in events:
        for handled in state.handle_event(construct_type_unchecked(type_=ResponseStreamEvent, value=event)):
            if handled.type == "response.output_text.delta":
                texts.append(handled.snapshot)

    # THEN an item is added empty and its deltas fill it: the reply is rebuilt once, piece by piece
    added = [event["item"] for event in events if event["type"] == "response.output_item.added"]
    assert [item["content"] for item in added] == [[], []]
    assert texts[-1] == "You said: hi"
    assert all(later.startswith(earlier) for earlier, later in zip(texts, texts[1:], strict=False))


def test_a_responses_output_passed_back_as_input_is_the_history_without_its_reasoning(chat_table: ChatTable) -> None:
    # GIVEN a finished response that reasoned, then replied (its output as the SDK returns it)
    native = native_stream(("reasoning", "Thinking."), ("token", "Hi there"))
    output = spelt_as_response(chat_table, native)[-1]["response"]["output"]

    # WHEN the conversation is sent again whole, OpenAI's stateless way: input=[user, *response.output, user]
    request = responses(
        {"model": "m", "input": [{"role": "user", "content": "hi"}, *output, {"role": "user", "content": "next"}]}
    )

    # THEN the reply is history and the reasoning item is dropped (the model is never sent reasoning back)
    assert [item["type"] for item in output] == ["reasoning", "message"]
    assert request.options.history == (HistoryMessage("user", "hi"), HistoryMessage("assistant", "Hi there"))
    assert request.message == "next"


def test_text_with_unicode_line_separators_reaches_a_v1_stream_whole() -> None:
    # GIVEN a native stream whose text holds characters str.splitlines() breaks at but SSE does not, written raw (as
    # the relay wrote them before it escaped them)
    text = "a \u2028 b \u2029 c \x85 d"
    native = [
        event.replace("\\u2028", "\u2028").replace("\\u2029", "\u2029").replace("\\u0085", "\x85")
        for event in native_stream(("token", text))
    ]
    assert "\u2028" in native[0]
    # WHEN a chat completion streams it THEN its content is the text, whole, and the stream ends
    chunks = ChunkStream("s", "model-x", 0, include_usage=False).chunks(turn_events(native))
    datas = [chunk.removeprefix("data: ").strip() for chunk in chunks]
    assert "".join(json.loads(data)["choices"][0]["delta"].get("content") or "" for data in datas[:-1]) == text
    assert datas[-1] == "[DONE]"


def test_an_empty_body_is_told_what_to_send() -> None:
    with pytest.raises(HttpError, match='"input": "hello"'):
        parse_responses_request(b"", max_tokens_limit=100, valid_base64=True)
    with pytest.raises(HttpError, match='"messages"'):
        parse_chat_completion_request(b" ", max_tokens_limit=100, valid_base64=True)


@pytest.mark.parametrize(
    ("model", "said"), [(None, "model is required"), ("", "model is required"), (5, "must be a string")]
)
def test_a_missing_model_is_required_and_one_of_the_wrong_type_is_said_to_be(model: object, said: str) -> None:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "x"}]}
    if model is not None:
        body["model"] = model
    assert error_of(chat, body) == (400, "invalid_request", "model")
    with pytest.raises(HttpError, match=said):
        chat(body)


def test_a_history_too_long_for_the_model_is_the_requests_fault_on_v1() -> None:
    # GIVEN a turn that failed because the conversation outgrew the model's context (the proxy's code for it)
    status = failed_status(CONTEXT_LENGTH_EXCEEDED)
    # THEN a non-streamed answer is a 400 invalid_request_error, which the SDKs raise as BadRequestError, not retry
    assert (status, error_type(status)) == (400, "invalid_request_error")


@pytest.mark.parametrize("field", ["user", "safety_identifier", "prompt_cache_key", "prompt_cache_retention"])
def test_a_field_that_only_tells_openai_about_the_caller_is_accepted_and_not_used(field: str) -> None:
    # GIVEN an app that names its user (or a cache key) on every request, as many do
    message = [{"role": "user", "content": "hi"}]
    # THEN both APIs take the request as if the field were not there; a value that is not a string is still a 400
    assert chat({"model": "m", "messages": message, field: "user-1234"}) == chat({"model": "m", "messages": message})
    assert responses({"model": "m", "input": "hi", field: "user-1234"}) == responses({"model": "m", "input": "hi"})
    assert error_of(chat, {"model": "m", "messages": message, field: {}})[1:] == ("invalid_request", field)


def test_a_reconnect_inside_a_record_ends_both_v1_streams_saying_where_the_reply_goes_on(chat_table: ChatTable) -> None:
    # GIVEN a native stream whose relay ran out of time two pieces into record 3: its reconnect names a piece's id
    reconnect = json_message({"events_url": "/sessions/s/turns/1/events", "last_event_id": "3.2"}, event="reconnect")
    piece = json_message({"text": " c"}, event="token", id="3.2")
    native = [*native_stream(("token", "a"), ("token", " b"))[:-1], piece, reconnect]
    # WHEN a chat completion streams it
    chunks = list(ChunkStream("s", "model-x", 0, include_usage=False).chunks(turn_events(native)))
    # THEN it ends with its error chunk naming that id, not with a stream broken by the id's dot
    error = json.loads(chunks[-1].removeprefix("data: "))["error"]
    assert error["code"] == "stream_interrupted" and "Last-Event-ID 3.2" in error["message"]
    # AND a response's stream ends with its error event, saying how to resume
    events = spelt_as_response(chat_table, native)
    assert events[-1]["type"] == "error" and events[-1]["code"] == "stream_interrupted"
    assert f"starting_after={events[-2]['sequence_number']}" in events[-1]["message"]
    # AND both say why either may have happened (a relay also ends an idle stream, with time to spare)
    assert all("nothing new came for a minute" in e for e in (error["message"], events[-1]["message"]))


@pytest.mark.parametrize(
    ("stop_reason", "error", "last"),
    [
        (StopReason.MAX_TOKENS, None, "incomplete"),
        (StopReason.END_TURN, ErrorInfo("model_error", "boom", False), "incomplete"),
        (StopReason.END_TURN, None, "completed"),
    ],
)
def test_a_reasoning_item_closed_before_the_reply_ended_stays_completed_whatever_the_response_became(
    chat_table: ChatTable, stop_reason: StopReason, error: ErrorInfo | None, last: str
) -> None:
    # GIVEN a turn that reasoned, then replied, and ended so (cut at max_output_tokens, failed, or whole)
    session_id = chat_table.turns.start_first("me", "hi")
    write_turn(chat_table, session_id, 1, ["Hi"], reasoning=["Think."], stop_reason=stop_reason, error=error)
    # WHEN its stream is read whole, and its object as GET /v1/responses/{id} builds it
    events = events_of(chat_table, session_id, -1)
    turn = chat_table.get_turn(session_id, 1)
    assert turn is not None
    records = chat_table.query_records(session_id, 1)
    stored = response_object(turn, "model-x", output_of(session_id, 1, records, finished=True))
    # THEN the reasoning item is completed where its output_item.done said so, in the final event and in the object;
    # only the message, which the response's end closed, takes the response's outcome
    done = [event["item"]["status"] for event in events if event["type"] == "response.output_item.done"]
    assert done[0] == "completed"
    final = events[-1]["response"]
    for response in (final, stored):
        assert [(item["type"], item["status"]) for item in response["output"]] == [
            ("reasoning", "completed"),
            ("message", last),
        ]


def followed_as_response(table: ChatTable, session_id: str, after: int) -> list[dict[str, Any]]:
    """A response's stream as ``GET /v1/responses/{id}?stream=true&starting_after=<after>`` makes it: the stored
    pieces the client has numbered, then the turn followed from the position after them, in fake time."""
    turn = table.get_turn(session_id, 1)
    assert turn is not None
    stream = ResponseStream(table, turn, "model-x", after)
    had, position = stream.resume_point(table.query_records(session_id, 1)) if after > 1 else ([], None)
    follower = Follower(table, session_id, 1, after=position, settings=RELAY_POLLING, clock=FakeClock().as_clock())
    source: list[Any] = [*had, *turn_events(follower.events())]
    chunks = [*stream.prelude(), *stream.events(source)]
    return validated([chunk for chunk in chunks if not chunk.startswith(":")])  # the keep-alive comments aside


def test_a_turn_the_reaper_ended_ends_its_v1_streams_as_its_error_record_would(chat_table: ChatTable) -> None:
    # GIVEN a turn whose generation died after some reasoning and a word, which the reaper ended: the turn item says
    # generation_failed, and no terminal record follows its records
    session_id = chat_table.turns.start_first("me", "hi")
    chat_table.put_records(opening_records(session_id, 1, ["Hel"], reasoning=["Hmm."]))
    failed = FailedGeneration.from_destination_record(
        {"requestPayload": {"session_id": session_id, "turn": 1}, "responsePayload": {"errorType": "Runtime.Crash"}}
    )
    end_abandoned_turn(chat_table, failed, lambda: 9)
    reaped = chat_table.get_turn(session_id, 1)
    assert reaped is not None and reaped.error is not None and reaped.error["code"] == "generation_failed"

    # WHEN a client streams the response from its start
    whole = followed_as_response(chat_table, session_id, -1)
    # THEN it ends with response.failed carrying the turn's error, as an error record would end it (not an `error`
    # event, which is the stream's own failure and says: resume)
    assert whole[-1]["type"] == "response.failed"
    response = whole[-1]["response"]
    assert (response["status"], response["error"]["message"]) == ("failed", reaped.error["message"])
    assert [(item["type"], item["content"][0]["text"]) for item in response["output"]] == [
        ("reasoning", "Hmm."),
        ("message", "Hel"),
    ]
    assert [event["sequence_number"] for event in whole] == list(range(len(whole)))
    # AND a resume after any number is exactly the rest: after the last, nothing (no error repeated forever)
    for after in (2, len(whole) - 2, len(whole) - 1):
        assert followed_as_response(chat_table, session_id, after) == whole[after + 1 :]

    # AND a chat completion of it ends with its error chunk, the turn's error
    follower = Follower(chat_table, session_id, 1, settings=RELAY_POLLING, clock=FakeClock().as_clock())
    chunks = list(ChunkStream(session_id, "model-x", 0, include_usage=False).chunks(turn_events(follower.events())))
    error = json.loads(chunks[-1].removeprefix("data: "))["error"]
    assert (error["code"], error["message"]) == ("generation_failed", reaped.error["message"])


def test_a_streams_own_failure_after_the_turn_failed_is_still_the_streams(chat_table: ChatTable) -> None:
    # GIVEN a turn that ended in error, and a stream whose own failure (a gap, say) comes without an id
    session_id = chat_table.turns.start_first("me", "hi")
    write_turn(chat_table, session_id, 1, ["a"], error=ErrorInfo("model_error", "boom", False))
    gap = json_message({"code": "gap", "message": "event 2 of the turn is missing", "retryable": True}, event="error")
    turn = chat_table.get_turn(session_id, 1)
    assert turn is not None
    # WHEN the response's stream gets it
    stream = ResponseStream(chat_table, turn, "model-x")
    events = validated([*stream.prelude(), *stream.events([Token(1, "a"), *turn_events([gap])])])
    # THEN it is an `error` event (resume from it), not the response's failure: its error is not the turn's
    assert (events[-1]["type"], events[-1]["code"]) == ("error", "gap")


def test_a_chat_completion_carries_its_reasoning_apart_and_takes_it_back_without_sending_it_on() -> None:
    # GIVEN a completion of a turn that reasoned, not streamed, and one of a turn that did not
    reasoned = completion_object("s", "model-x", 0, "hello", StopReason.END_TURN, None, "Let me think.")
    plain = completion_object("s", "model-x", 0, "hello", StopReason.END_TURN, None)
    # THEN the reasoning is the message's reasoning_content (DeepSeek's and vLLM's field), and only when there is some
    message = reasoned["choices"][0]["message"]
    assert (message["content"], message["reasoning_content"]) == ("hello", "Let me think.")
    assert "reasoning_content" not in plain["choices"][0]["message"]
    # AND that message passed back is history without its reasoning (the model is never sent reasoning back)
    request = chat({"model": "m", "messages": [{"role": "user", "content": "hi"}, message, USER_NEXT]})
    assert request.options.history == (HistoryMessage("user", "hi"), HistoryMessage("assistant", "hello"))
    # AND a reasoning_content that is not text is refused naming it
    wrong = {**message, "reasoning_content": 5}
    assert error_of(chat, {"model": "m", "messages": [{"role": "user", "content": "hi"}, wrong, USER_NEXT]}) == (
        400,
        "invalid_request",
        "messages[1].reasoning_content",
    )


def test_the_sdks_chat_stream_helper_accumulates_the_reasoning_apart_from_the_content() -> None:
    # GIVEN a chat completion's stream of a turn that reasons, then replies
    native = native_stream(("reasoning", "Think"), ("reasoning", "ing."), ("token", "You"), ("token", " said: hi"))
    stream = ChunkStream("s", "model-x", 0, include_usage=True)
    chunks = [stream.first(), *stream.chunks(turn_events(native))]
    datas = [json.loads(chunk.removeprefix("data: ")) for chunk in chunks[:-1]]
    # WHEN the openai SDK's helper accumulates it, as client.chat.completions.stream() does
    state: ChatCompletionStreamState[object] = ChatCompletionStreamState()
    for data in datas:
        list(state.handle_chunk(ChatCompletionChunk.construct(**data)))
    # THEN the final completion has the reply as its content and the reasoning beside it, without an error
    message = state.get_final_completion().choices[0].message
    assert message.content == "You said: hi"
    assert (message.model_extra or {})["reasoning_content"] == "Thinking."


def timed_chunks(stream: Iterator[str], clock: FakeClock) -> list[tuple[float, str]]:
    return [(clock.t, chunk) for chunk in stream]


def longest_silence(timed: list[tuple[float, str]]) -> float:
    times = [0.0, *(at for at, _ in timed)]
    return max(later - earlier for earlier, later in zip(times, times[1:], strict=False))


def reasoning_for_a_while(table: ChatTable, clock: FakeClock, records: int) -> str:
    """A turn in progress that reasons a record every 0.3 s (fake time), then replies and stops; its session."""
    session_id = table.turns.start_first("me", "hi")
    whole = turn_records(session_id, 1, ["Answer."], reasoning=[f" r{seq}" for seq in range(1, records + 1)])
    table.put_records(whole[:1])
    for record in whole[1:]:
        clock.at(0.3 * record.seq, lambda record=record: table.put_records([record]))
    return session_id


def test_a_chat_completion_streams_while_the_model_reasons(chat_table: ChatTable) -> None:
    # GIVEN a turn that reasons for 30 s (fake time) before a word of its reply
    clock = FakeClock()
    session_id = reasoning_for_a_while(chat_table, clock, 100)
    # WHEN a chat completion streams it
    follower = Follower(chat_table, session_id, 1, settings=RELAY_POLLING, clock=clock.as_clock())
    stream = ChunkStream(session_id, "model-x", 0, include_usage=False)
    rest = kept_alive(stream.chunks, turn_events(follower.events()), clock.monotonic, FAST.keepalive_s)
    timed = timed_chunks(rest, clock)
    # THEN the reasoning streams as it comes (reasoning_content), so no proxy sees an idle body for the keep-alive's
    # interval; and the content is the reply alone
    assert longest_silence(timed) < FAST.keepalive_s
    datas = [json.loads(chunk.removeprefix("data: ")) for _, chunk in timed[:-1] if not chunk.startswith(":")]
    deltas = [data["choices"][0]["delta"] for data in datas]
    assert "".join(delta.get("reasoning_content", "") for delta in deltas) == "".join(f" r{n}" for n in range(1, 101))
    assert "".join(delta.get("content") or "" for delta in deltas) == "Answer."


def test_a_v1_stream_that_sends_nothing_for_the_events_it_gets_still_sends_keep_alives(chat_table: ChatTable) -> None:
    # GIVEN a turn that reasons for 60 s (fake time), and a /v1 stream that sends nothing for text (as a stream that
    # drops a kind of text, or pieces without text, would), while the follower's events flow at the turn's pace
    clock = FakeClock()
    session_id = reasoning_for_a_while(chat_table, clock, 200)

    def silent_on_text(events: Iterable[TurnEvent]) -> Iterator[str]:
        for event in events:
            if isinstance(event, KeepAlive):
                yield ": keep-alive\n\n"
            elif not isinstance(event, Token):
                yield "data: end\n\n"
                return

    # WHEN it follows the turn
    follower = Follower(chat_table, session_id, 1, settings=RELAY_POLLING, clock=clock.as_clock())
    timed = timed_chunks(kept_alive(silent_on_text, turn_events(follower.events()), clock.monotonic, 10), clock)
    # THEN a keep-alive comment goes out at least every 10 s and a piece's interval: the body is never idle longer
    assert [chunk for _, chunk in timed][-1] == "data: end\n\n"
    assert len(timed) >= 6 and longest_silence(timed) < 10 + 1


def test_openais_statuses_and_stop_reasons_are_the_strings_the_openapi_document_gives() -> None:
    # GIVEN the enums of the OpenAPI document's /v1 schemas
    schemas = json.loads(DOCUMENT_PATH.read_text(encoding="utf-8"))["components"]["schemas"]
    response = schemas["ResponseObject"]["properties"]
    finish = schemas["ChatCompletion"]["properties"]["choices"]["items"]["properties"]["finish_reason"]
    # THEN each of OpenAI's vocabularies in chatstream/relay/openai/status.py is exactly one of them
    assert sorted(ResponseStatus) == sorted(response["status"]["enum"])
    assert sorted(IncompleteReason) == sorted(
        response["incomplete_details"]["oneOf"][1]["properties"]["reason"]["enum"]
    )
    for item in ("OutputMessage", "OutputReasoning", "OutputFunctionCall"):
        assert sorted(ItemStatus) == sorted(schemas[item]["properties"]["status"]["enum"])
    assert sorted(FinishReason) == sorted(finish["enum"])
    # AND each is a value OpenAI's own SDK reads there
    sdk = {
        ResponseStatus: Response.model_fields["status"].annotation,
        ItemStatus: ResponseOutputMessage.model_fields["status"].annotation,
        IncompleteReason: IncompleteDetails.model_fields["reason"].annotation,
        FinishReason: Choice.model_fields["finish_reason"].annotation,
    }
    for vocabulary, annotation in sdk.items():
        assert set(vocabulary) <= _literal_values(annotation), vocabulary
    # AND every turn reads as one of them: each status, with each stop reason (one Bedrock may add later included)
    reasons = [*StopReason, StopReason("a_reason_added_later"), None]
    assert {response_status(status, reason) for status in TurnStatus for reason in reasons} == set(ResponseStatus) - {
        ResponseStatus.QUEUED
    }
    assert {finish_reason(reason) for reason in reasons} == set(FinishReason)
    assert {incomplete_reason(reason) for reason in reasons} == set(IncompleteReason)


def _literal_values(annotation: object) -> set[object]:
    """The values of a ``Literal[...]`` annotation, or of an optional one."""
    if typing.get_origin(annotation) is typing.Literal:
        return set(typing.get_args(annotation))
    return {value for arg in typing.get_args(annotation) for value in _literal_values(arg)}
