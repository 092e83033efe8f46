"""The local model's reply planner and request validation, without HTTP."""

from __future__ import annotations

import json

import pytest
from botocore.eventstream import ChecksumMismatch, EventStreamBuffer
from hypothesis import given
from hypothesis import strategies as st

from chatstream.text import is_blank
from chatstream_local.bedrock.converse import InvalidRequest, is_blank_to_bedrock, parse_request
from chatstream_local.bedrock.endpoint import DEFAULT_DELAY_MS, DELAY_ENV, LocalModelServer
from chatstream_local.bedrock.model import plan_reply, split_deltas
from chatstream_local.eventstream import encode_event, encode_exception


def _body(*turns: str, system: str | None = None, max_tokens: int | None = None) -> bytes:
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": [{"text": text}]} for i, text in enumerate(turns)
    ]
    body: dict[str, object] = {"messages": messages}
    if system is not None:
        body["system"] = [{"text": system}]
    if max_tokens is not None:
        body["inferenceConfig"] = {"maxTokens": max_tokens}
    return json.dumps(body).encode()


# --- /think -----------------------------------------------------------------------------------


def test_think_reasons_in_n_words_then_gives_exactly_the_reply_to_the_rest() -> None:
    # WHEN the model plans "/think 3 hello"
    reply = plan_reply("/think 3 hello")
    # THEN it reasons in three words, signed, then says what it says to "hello"
    assert reply.reasoning == ("r1", " r2", " r3") and reply.signed
    assert reply.deltas == plan_reply("hello").deltas and reply.text == "You said: hello"
    assert reply.stop_reason == "end_turn"
    # THEN the rest may be a command, and keeps its own whitespace
    assert plan_reply("/think 1 /long 4").deltas == plan_reply("/long 4").deltas
    assert plan_reply("/think 2  two\nlines ").text == "You said: two\nlines "
    assert plan_reply("/think 2 /error-after 1").ending == "model_stream_error"


def test_max_tokens_counts_reasoning_first() -> None:
    # THEN a budget inside the reasoning cuts it (unsigned) and leaves no reply; a larger one cuts the reply
    cut = plan_reply("/think 5 hello", max_tokens=2)
    assert (cut.reasoning, cut.deltas, cut.stop_reason, cut.signed) == (("r1", " r2"), (), "max_tokens", False)
    later = plan_reply("/think 2 a b c", max_tokens=4)
    assert (later.reasoning_text, later.text, later.stop_reason) == ("r1 r2", "You said:", "max_tokens")


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ("/think", "/think takes"),
        ("/think 3", "/think takes"),
        ("/think x hello", "/think takes"),
        ("/think 0 hello", "between 1 and"),
        ("/think 100001 hello", "between 1 and"),
        ("/think " + "9" * 5000 + " hello", "got a 5000-digit number"),
        ("/long " + "9" * 5000, "got a 5000-digit number"),
        ("/think 2 /think 2 hi", "not itself /think"),
    ],
)
def test_a_malformed_think_is_a_validation_error(message: str, reason: str) -> None:
    with pytest.raises(InvalidRequest, match=reason):
        plan_reply(message)


def test_a_count_with_leading_zeros_is_its_number() -> None:
    assert plan_reply("/think 0003 hello").reasoning_text == "r1 r2 r3"
    assert plan_reply("/long 0002").text == "w1 w2"


# --- ordinary messages -------------------------------------------------------------------------


def test_an_ordinary_message_is_echoed_one_word_per_delta() -> None:
    # GIVEN a plain message
    # WHEN the model plans its reply
    reply = plan_reply("hello there")
    # THEN the reply echoes it, each word after the first keeping its leading space
    assert reply.deltas == ("You", " said:", " hello", " there")
    assert reply.text == "You said: hello there"
    assert reply.stop_reason == "end_turn"


def test_whitespace_runs_newlines_and_trailing_space_survive_exactly() -> None:
    # GIVEN a message with double spaces, a newline, a tab, leading and trailing whitespace
    message = "  two  spaces\nnew line\tand tab  \n"
    # WHEN the model plans its reply
    reply = plan_reply(message)
    # THEN joining the deltas gives the reply text byte for byte, whitespace riding before each word
    assert reply.text == f"You said: {message}"
    assert reply.deltas == ("You", " said:", "   two", "  spaces", "\nnew", " line", "\tand", " tab  \n")


@given(
    st.text(min_size=1).filter(
        lambda s: (
            s.strip()
            and s.split()[0] not in ("/long", "/error-after", "/throttle", "/think")
            and s.split() not in (["/history"], ["/system"])
        )  # commands when alone
    )
)
def test_any_ordinary_message_round_trips_through_its_deltas(message: str) -> None:
    # GIVEN any message that is not a command
    # WHEN the model plans its reply
    reply = plan_reply(message)
    # THEN the deltas join to exactly "You said: <message>", one delta per word
    assert reply.text == f"You said: {message}"
    assert len(reply.deltas) == len(f"You said: {message}".split())


def test_split_deltas_keeps_text_without_words_whole() -> None:
    # GIVEN texts without any word
    # WHEN they are split
    # THEN nothing is lost
    assert split_deltas("") == ()
    assert split_deltas(" \n") == (" \n",)


def test_a_word_that_only_starts_like_a_command_is_echoed() -> None:
    # GIVEN "/longer 5", which is not the /long command
    # WHEN the model plans its reply
    reply = plan_reply("/longer 5")
    # THEN it is an ordinary echo
    assert reply.text == "You said: /longer 5"


# --- /long -------------------------------------------------------------------------------------


def test_long_n_streams_n_numbered_words() -> None:
    # GIVEN "/long 5"
    # WHEN the model plans its reply
    reply = plan_reply("/long 5")
    # THEN five deltas w1 … w5, joined with single spaces
    assert reply.deltas == ("w1", " w2", " w3", " w4", " w5")
    assert reply.text == "w1 w2 w3 w4 w5"
    assert reply.stop_reason == "end_turn"


def test_long_accepts_the_bounds() -> None:
    # GIVEN the smallest and largest allowed N
    # WHEN the model plans the replies
    # THEN they have 1 and 100,000 deltas
    assert plan_reply("/long 1").deltas == ("w1",)
    biggest = plan_reply("/long 100000")
    assert len(biggest.deltas) == 100_000
    assert biggest.deltas[-1] == " w100000"


@pytest.mark.parametrize(
    "message", ["/long 0", "/long 100001", "/long", "/long -3", "/long 2.5", "/long x", "/long 3 4"]
)
def test_long_rejects_a_missing_or_out_of_range_count(message: str) -> None:
    # GIVEN a /long command with a bad argument
    # WHEN the model plans the reply
    # THEN it is a validation error
    with pytest.raises(InvalidRequest, match="/long"):
        plan_reply(message)


# --- /error-after and /throttle -----------------------------------------------------------------


def test_error_after_n_streams_n_deltas_then_a_stream_error() -> None:
    # GIVEN "/error-after 3"
    # WHEN the model plans its reply
    reply = plan_reply("/error-after 3")
    # THEN the first three deltas of /long 3, then a model stream error instead of messageStop
    assert reply.deltas == ("w1", " w2", " w3")
    assert reply.ending == "model_stream_error"
    assert reply.stop_reason is None


def test_error_after_zero_fails_before_any_delta() -> None:
    # GIVEN "/error-after 0"
    # WHEN the model plans its reply
    reply = plan_reply("/error-after 0")
    # THEN the stream fails straight after messageStart
    assert reply.deltas == ()
    assert reply.ending == "model_stream_error"


@pytest.mark.parametrize("message", ["/error-after", "/error-after 100001", "/error-after ten"])
def test_error_after_rejects_a_bad_count(message: str) -> None:
    # GIVEN an /error-after command with a bad argument
    # WHEN the model plans the reply
    # THEN it is a validation error
    with pytest.raises(InvalidRequest, match="/error-after"):
        plan_reply(message)


def test_throttle_is_throttled_before_any_delta() -> None:
    # GIVEN "/throttle" (surrounding whitespace does not matter)
    # WHEN the model plans its reply
    reply = plan_reply("  /throttle\n")
    # THEN nothing is streamed; the request is throttled
    assert reply.deltas == ()
    assert reply.ending == "throttled"
    assert reply.stop_reason is None


def test_throttle_takes_no_argument() -> None:
    # GIVEN "/throttle now"
    # WHEN the model plans the reply
    # THEN it is a validation error
    with pytest.raises(InvalidRequest, match="/throttle"):
        plan_reply("/throttle now")


# --- maxTokens ---------------------------------------------------------------------------------


def test_max_tokens_cuts_the_reply_with_stop_reason_max_tokens() -> None:
    # GIVEN /long 10 with maxTokens 4
    # WHEN the model plans its reply
    reply = plan_reply("/long 10", max_tokens=4)
    # THEN four deltas, stopped for max_tokens
    assert reply.text == "w1 w2 w3 w4"
    assert reply.stop_reason == "max_tokens"


def test_max_tokens_at_or_above_the_reply_length_changes_nothing() -> None:
    # GIVEN a 4-word echo with maxTokens 4, and /long 3 with maxTokens 100
    # WHEN the model plans the replies
    # THEN both finish normally
    assert plan_reply("a b", max_tokens=4) == plan_reply("a b")
    assert plan_reply("/long 3", max_tokens=100).stop_reason == "end_turn"


def test_max_tokens_below_the_error_point_stops_before_the_error() -> None:
    # GIVEN /error-after 5 with maxTokens 2
    # WHEN the model plans its reply
    reply = plan_reply("/error-after 5", max_tokens=2)
    # THEN generation stops for max_tokens before the error would occur
    assert reply.deltas == ("w1", " w2")
    assert reply.stop_reason == "max_tokens"


def test_max_tokens_below_one_is_invalid() -> None:
    # GIVEN maxTokens 0
    # WHEN the model plans the reply
    # THEN it is a validation error
    with pytest.raises(InvalidRequest, match="maxTokens"):
        plan_reply("hi", max_tokens=0)


# --- request parsing ----------------------------------------------------------------------------


def test_parse_request_takes_the_last_user_messages_text_and_counts_every_word() -> None:
    # GIVEN a conversation with a system prompt, history, and a last message of two text blocks
    body = {
        "system": [{"text": "be brief"}],
        "messages": [
            {"role": "user", "content": [{"text": "first question"}]},
            {"role": "assistant", "content": [{"text": "first answer here"}]},
            {"role": "user", "content": [{"text": "second "}, {"text": "question now"}]},
        ],
        "inferenceConfig": {"maxTokens": 7, "temperature": 0.5},
    }
    # WHEN it is parsed
    request = parse_request("us.anthropic.claude-3-haiku", json.dumps(body).encode())
    # THEN the user text is the last message's blocks joined; input tokens count all words
    assert request.user_text == "second question now"
    assert request.input_tokens == 2 + 2 + 3 + 3
    assert request.max_tokens == 7
    assert request.model_id == "us.anthropic.claude-3-haiku"


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        (b"{}", "at least one message"),
        (json.dumps({"messages": []}).encode(), "at least one message"),
        (_body("hi", "hello"), "end with a user message"),
        (json.dumps({"messages": [{"role": "assistant", "content": [{"text": "hi"}]}]}).encode(), "start with a user"),
        (
            json.dumps(
                {
                    "messages": [
                        {"role": "user", "content": [{"text": "a"}]},
                        {"role": "user", "content": [{"text": "b"}]},
                    ]
                }
            ).encode(),
            "alternate",
        ),
        (_body("   "), "blank"),
        (_body(""), "blank"),
        (_body("\x1e"), "blank"),
        (_body("\ufeff\u180e"), "blank"),
        (_body("hi", system=""), "blank"),
        (json.dumps({"messages": [{"role": "user", "content": [{"image": {}}]}]}).encode(), "no text"),
        (_body("hi", max_tokens=0), "maxTokens"),
        (b"not json", "not valid JSON"),
    ],
)
def test_parse_request_rejects_what_bedrock_rejects(body: bytes, complaint: str) -> None:
    # GIVEN an invalid ConverseStream body
    # WHEN it is parsed
    # THEN it is a validation error that says what is wrong
    with pytest.raises(InvalidRequest, match=complaint):
        parse_request("model", body)


def test_the_relay_refuses_as_blank_every_text_the_stand_in_for_bedrock_calls_blank() -> None:
    # GIVEN every code point, alone and around a word
    # THEN the relay's blank (chatstream.text) and the local Bedrock's, each defined on its own, agree on each: a text
    # the relay accepts is never one the model refuses as blank
    disagree = [
        hex(code)
        for code in range(0x110000)
        if not 0xD800 <= code <= 0xDFFF and is_blank(chr(code) * 2) != is_blank_to_bedrock(chr(code) * 2)
    ]
    assert disagree == []
    assert not is_blank_to_bedrock("\x1e a\x1e") and not is_blank("\x1e a\x1e")


# --- configuration and framing -----------------------------------------------------------------


def test_delay_comes_from_the_environment_unless_given(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN no delay variable, then a delay variable of 7
    monkeypatch.delenv(DELAY_ENV, raising=False)
    # WHEN servers are constructed (not started)
    default = LocalModelServer()
    monkeypatch.setenv(DELAY_ENV, "7")
    from_env = LocalModelServer()
    explicit = LocalModelServer(delay_ms=0)
    # THEN the default is 20 ms, the variable overrides it, and the argument overrides both
    assert default.delay_ms == DEFAULT_DELAY_MS == 20
    assert from_env.delay_ms == 7
    assert explicit.delay_ms == 0


def test_a_malformed_delay_variable_is_named_in_the_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a delay variable that is not a number
    monkeypatch.setenv(DELAY_ENV, "fast")
    # WHEN a server is constructed
    # THEN the error names the variable
    with pytest.raises(ValueError, match=DELAY_ENV):
        LocalModelServer()


def test_frames_decode_with_botocores_own_parser() -> None:
    # GIVEN an event and an exception frame with non-ASCII text, concatenated
    data = encode_event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": " héllo ✓"}})
    data += encode_exception("modelStreamErrorException", {"message": "boom"})
    # WHEN botocore's EventStreamBuffer reads them (it checks both CRCs and every length)
    buffer = EventStreamBuffer()
    buffer.add_data(data)
    messages = list(buffer)
    # THEN both messages come out with their headers and JSON payloads intact
    assert [m.headers for m in messages] == [
        {":event-type": "contentBlockDelta", ":content-type": "application/json", ":message-type": "event"},
        {
            ":exception-type": "modelStreamErrorException",
            ":content-type": "application/json",
            ":message-type": "exception",
        },
    ]
    assert json.loads(messages[0].payload) == {"contentBlockIndex": 0, "delta": {"text": " héllo ✓"}}
    assert json.loads(messages[1].payload) == {"message": "boom"}


def test_a_corrupted_frame_fails_botocores_crc_check() -> None:
    # GIVEN a frame with one payload byte flipped
    frame = bytearray(encode_event("messageStop", {"stopReason": "end_turn"}))
    frame[-6] ^= 0x01
    # WHEN botocore reads it
    buffer = EventStreamBuffer()
    buffer.add_data(bytes(frame))
    # THEN the message CRC does not match (so the encoder's CRCs are really being checked)
    with pytest.raises(ChecksumMismatch):
        list(buffer)


# --- what the request carries: history, system prompt, stop sequences -------------------------


def test_history_spells_every_message_the_model_was_sent() -> None:
    # GIVEN a request with two earlier messages and a system prompt
    request = parse_request("m", _body("hi", "hello", "/history", system="be brief"))
    # WHEN the model answers /history THEN it lists the messages in order, the last included
    reply = plan_reply(request.user_text, system=request.system, messages=request.messages)
    assert reply.text == "3 messages: user: hi | assistant: hello | user: /history"
    assert reply.stop_reason == "end_turn"


def test_system_echoes_the_system_prompt() -> None:
    request = parse_request("m", _body("/system", system="Answer in French."))
    assert plan_reply(request.user_text, system=request.system).text == "System: Answer in French."
    assert plan_reply("/system").text == "System: none"


def test_a_stop_sequence_cuts_the_reply_before_it_and_max_tokens_applies_after() -> None:
    body = json.loads(_body("/long 10"))
    body["inferenceConfig"] = {"stopSequences": [" w5", "absent"]}
    request = parse_request("m", json.dumps(body).encode())
    assert request.stop_sequences == (" w5", "absent")
    stopped = plan_reply(request.user_text, stop=request.stop_sequences)
    assert stopped.text == "w1 w2 w3 w4" and stopped.stop_reason == "stop_sequence"
    cut = plan_reply("/long 10", 2, stop=[" w5"])
    assert cut.text == "w1 w2" and cut.stop_reason == "max_tokens"
    # AND a stop sequence that never occurs changes nothing
    assert plan_reply("/long 3", stop=["zzz"]) == plan_reply("/long 3")


@pytest.mark.parametrize("stop", [["a"] * 5, [""], "w1", [1]])
def test_stop_sequences_bedrock_would_refuse_are_a_validation_error(stop: object) -> None:
    body = json.loads(_body("hi"))
    body["inferenceConfig"] = {"stopSequences": stop}
    with pytest.raises(InvalidRequest, match="stopSequences"):
        parse_request("m", json.dumps(body).encode())
