"""POST /chat body rules and resume positions (HTTP_API.md limits and codes)."""

from __future__ import annotations

import json

import pytest

from chatstream.relay.http import HttpError
from chatstream.relay.pace import Position
from chatstream.relay.validation import (
    MAX_BODY_BYTES,
    MAX_MESSAGE_CHARS,
    ChatRequest,
    parse_chat_request,
    parse_json_object,
    parse_pace,
    parse_position,
)

LIMIT = 4096


def parse(body: bytes | str | None, **kwargs: bool) -> ChatRequest:
    raw = body.encode("utf-8") if isinstance(body, str) else body
    return parse_chat_request(raw, max_tokens_limit=LIMIT, **kwargs)


def refused(body: bytes | str | None, **kwargs: bool) -> HttpError:
    with pytest.raises(HttpError) as caught:
        parse(body, **kwargs)
    return caught.value


def test_a_full_request_is_accepted() -> None:
    # WHEN every field is given within its limits
    request = parse('{"message": "hello", "session_id": "abc", "max_tokens": 4096, "temperature": 1}')
    # THEN each is kept, temperature as a float
    assert request == ChatRequest(message="hello", session_id="abc", max_tokens=4096, temperature=1.0)


def test_optional_fields_may_be_absent_or_null() -> None:
    # WHEN only the message is given (null options read as absent)
    request = parse('{"message": "hi", "session_id": null, "max_tokens": null, "temperature": null}')
    # THEN the options are None
    assert request == ChatRequest(message="hi")


def test_a_whole_number_written_with_a_fraction_is_that_integer() -> None:
    # GIVEN max_tokens 5.0 (JSON has one number type; JSON Schema's integer and the OpenAPI document accept it)
    # WHEN parsed THEN it is the integer 5
    request = parse('{"message": "hi", "max_tokens": 5.0}')
    assert request.max_tokens == 5 and isinstance(request.max_tokens, int)


def test_the_message_limit_counts_characters_not_bytes() -> None:
    # GIVEN a message of exactly 32,000 non-ASCII characters
    message = "é" * MAX_MESSAGE_CHARS
    # WHEN it is sent THEN it is accepted
    assert parse(json.dumps({"message": message}, ensure_ascii=False)).message == message


@pytest.mark.parametrize("character", ["é", "中", "\u200b"])
@pytest.mark.parametrize("ensure_ascii", [False, True])
def test_a_full_length_message_fits_the_body_in_any_script_and_escaping(character: str, ensure_ascii: bool) -> None:
    # GIVEN a message of 32,000 characters of any script of the Basic Multilingual Plane, written as UTF-8 (3 bytes a
    # character at most) or escaped as \uXXXX (6 bytes, Python's json.dumps by default), with every other field set
    message = character * MAX_MESSAGE_CHARS
    fields = {"message": message, "session_id": "0123456789abcdef0123456789abcdef", "max_tokens": 1, "temperature": 0.5}
    body = json.dumps(fields, ensure_ascii=ensure_ascii).encode()
    # WHEN it is sent THEN it is accepted, as the message limit promises
    assert parse(body).message == message


@pytest.mark.parametrize(
    ("body", "field_named"),
    [
        ("{}", "message is required"),
        ('{"message": ""}', "message must not be empty"),
        ('{"message": "  \\n\\t "}', "message must not be empty"),
        ('{"message": 5}', "message must be a string, not a number"),
        ('{"message": null}', "message must be a string, not null"),
        ('{"message": ["hi"]}', "message must be a string, not an array"),
        (json.dumps({"message": "x" * (MAX_MESSAGE_CHARS + 1)}), "message is 32001 characters; the limit is 32000"),
        ('{"message": "\\ud800"}', "message contains invalid Unicode"),
        ('{"message": "hi", "session_id": 7}', "session_id must be a string"),
        ('{"message": "hi", "session_id": ""}', "session_id must not be empty"),
        ('{"message": "hi", "max_tokens": 0}', "max_tokens must be between 1 and 4096, got 0"),
        ('{"message": "hi", "max_tokens": 4097}', "max_tokens must be between 1 and 4096, got 4097"),
        ('{"message": "hi", "max_tokens": 5.5}', "max_tokens must be an integer, not a number"),
        ('{"message": "hi", "max_tokens": 1e400}', "max_tokens must be an integer, not a number"),
        ('{"message": "hi", "max_tokens": true}', "max_tokens must be an integer, not a boolean"),
        ('{"message": "hi", "max_tokens": "64"}', "max_tokens must be an integer, not a string"),
        ('{"message": "hi", "temperature": -0.01}', "temperature must be between 0 and 1"),
        ('{"message": "hi", "temperature": 1.5}', "temperature must be between 0 and 1"),
        ('{"message": "hi", "temperature": 1e400}', "temperature must be between 0 and 1"),
        ('{"message": "hi", "temperature": false}', "temperature must be a number, not a boolean"),
        ('{"message": "hi", "temperature": "0.5"}', "temperature must be a number, not a string"),
        ('{"message": "hi", "max_token": 5}', "unknown field 'max_token'"),
    ],
)
def test_each_field_rule_answers_invalid_request_naming_the_field(body: str, field_named: str) -> None:
    # WHEN a body breaks one field rule
    error = refused(body)
    # THEN the answer is 400 invalid_request and the message says which field and why
    assert (error.status, error.code) == (400, "invalid_request")
    assert field_named in error.message


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (None, "empty"),
        (b"", "empty"),
        (b"   \n", "empty"),
        (b'{"message": ', "not valid JSON"),
        (b"{'message': 'hi'}", "not valid JSON"),
        (b'{"message": "hi"} trailing', "not valid JSON"),
        (b'{"message": "hi", "temperature": NaN}', "not valid JSON"),
        (b'{"message": "hi", "temperature": Infinity}', "not valid JSON"),
        (b'["message", "hi"]', "must be a JSON object, not an array"),
        (b'"hello"', "must be a JSON object, not a string"),
        (b"null", "must be a JSON object, not null"),
        (b"42", "must be a JSON object, not a number"),
        (b'{"message": "caf\xe9"}', "not valid UTF-8"),
        (b"\xff\xfe{", "not valid UTF-8"),
        (b"[" * 30_000 + b"]" * 30_000, "nested too deeply"),
    ],
)
def test_bodies_that_are_not_a_json_object_answer_invalid_json(body: bytes | None, says: str) -> None:
    # WHEN the body is not a JSON object THEN 400 invalid_json says what is wrong
    error = refused(body)
    assert (error.status, error.code) == (400, "invalid_json")
    assert says in error.message


def test_a_byte_order_mark_before_the_json_is_ignored() -> None:
    # WHEN a body starts with UTF-8's byte order mark (a file a Windows editor saved, sent with curl -d @file)
    body = parse_json_object("\ufeff".encode() + b'{"message": "bom"}')
    # THEN it reads as the JSON after it (RFC 8259 lets a parser ignore the mark)
    assert body == {"message": "bom"}
    # AND one anywhere else is no JSON
    assert "not valid JSON" in refused(b' \xef\xbb\xbf{"message": "bom"}').message


def test_a_body_marked_base64_that_is_not_base64_is_invalid_json() -> None:
    # WHEN the event's base64 body did not decode THEN it is invalid_json
    error = refused(None, valid_base64=False)
    assert (error.status, error.code) == (400, "invalid_json")
    assert "base64" in error.message


def test_the_body_limit_is_256_kib() -> None:
    # GIVEN a valid body of exactly 256 KiB, and one byte more
    message = "a" * 32_000
    padding = MAX_BODY_BYTES - len(json.dumps({"message": message})) - 1
    exact = json.dumps({"message": message}) + " " * (padding + 1)
    assert len(exact.encode()) == MAX_BODY_BYTES
    # WHEN each is sent THEN the first is accepted and the second is 413 payload_too_large
    assert parse(exact).message == message
    error = refused(exact + " ")
    assert (error.status, error.code) == (413, "payload_too_large")
    assert "262145 bytes" in error.message and "256 KiB" in error.message


def test_an_oversized_body_is_refused_before_it_is_parsed() -> None:
    # WHEN a body over the limit is not even JSON THEN the answer is still 413
    assert refused(b"\xff" * (MAX_BODY_BYTES + 1)).status == 413


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("0", Position(0)),
        ("007", Position(7)),
        ("99999999", Position(99999999)),
        ("3.12", Position(3, 12)),
        ("0003.0012", Position(3, 12)),
        ("99999999.9999999", Position(99999999, 9999999)),
    ],
)
def test_positions_are_event_ids(value: str | None, expected: Position | None) -> None:
    # WHEN a valid position is given (a record's seq, or a piece's <seq>.<offset>) THEN it reads as that position
    assert parse_position(value, "after") == expected
    # AND it reads back as the id the relay sends (leading zeros aside)
    if expected is not None:
        assert Position.parse(str(expected)) == expected


@pytest.mark.parametrize(
    "value",
    [
        "",
        " 2",
        "2 ",
        "\t2",
        "-1",
        "1.",
        ".5",
        "1.5.2",
        "1.-5",
        "1,5",
        "1.99999999",
        "abc",
        "1e3",
        "٣",
        "100000000",
        "9" * 5000,
    ],
)
def test_other_positions_are_invalid_requests_naming_the_parameter(value: str) -> None:
    # WHEN a position is not an event id THEN 400 invalid_request names the parameter and the grammar
    with pytest.raises(HttpError) as caught:
        parse_position(value, "after")
    assert (caught.value.status, caught.value.code) == (400, "invalid_request")
    assert caught.value.message.startswith("after must be an event id")
    assert "<seq>.<offset>" in caught.value.message


def test_a_parameter_sent_twice_is_refused_saying_its_values_were_joined() -> None:
    # WHEN ?after=1&after=2 or ?pace=0&pace=1 arrive as the Function URL passes them (joined by a comma)
    for parse in (lambda: parse_position("1,2", "after"), lambda: parse_pace("0,1")):
        with pytest.raises(HttpError) as caught:
            parse()
        # THEN the error quotes the value and says why it holds a comma
        assert "sent more than once" in caught.value.message, caught.value.message
    # AND a value without a comma gets no such hint
    with pytest.raises(HttpError) as plain:
        parse_pace("2")
    assert "more than once" not in plain.value.message


def test_a_blank_last_event_id_is_no_position_and_its_surrounding_whitespace_is_not_part_of_it() -> None:
    # WHEN EventSource sends an empty Last-Event-ID THEN it counts as absent
    assert parse_position("", "Last-Event-ID", header=True) is None
    assert parse_position(" \t", "Last-Event-ID", header=True) is None
    # AND an id with whitespace around it is the id (a query parameter's is refused, as ?pace=%200 is)
    assert parse_position(" 42 ", "Last-Event-ID", header=True) == Position(42)


@pytest.mark.parametrize(("value", "expected"), [(None, None), ("0", False), ("1", True)])
def test_pace_is_zero_or_one(value: str | None, expected: bool | None) -> None:
    # WHEN ?pace= is absent, 0 or 1 THEN it reads as the relay's setting, off, or on
    assert parse_pace(value) is expected


@pytest.mark.parametrize("value", ["", "2", "false", "00", " 1"])
def test_other_pace_values_are_invalid_requests(value: str) -> None:
    # WHEN ?pace= is anything else THEN 400 invalid_request says what it may be
    with pytest.raises(HttpError) as caught:
        parse_pace(value)
    assert (caught.value.status, caught.value.code) == (400, "invalid_request")
    assert caught.value.message.startswith("pace must be 0")
