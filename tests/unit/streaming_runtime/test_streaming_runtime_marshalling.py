"""Events in; Function URL preludes, body chunks and buffered results out."""

from __future__ import annotations

import base64
import decimal
import json

import pytest
from awslambdaric.lambda_runtime_exception import FaultException

from streaming_runtime.marshalling import (
    PRELUDE_DELIMITER,
    buffered_result,
    decode_event,
    encode_chunk,
    encode_chunks,
    http_prelude,
    http_result_from_dict,
    is_function_url_event,
)

URL_EVENT = {"version": "2.0", "rawPath": "/chat", "requestContext": {"http": {"method": "POST", "path": "/chat"}}}


def test_decode_event_json_and_raw() -> None:
    # GIVEN event bodies WHEN decoded THEN JSON becomes objects and another content type stays bytes
    assert decode_event(b'{"a": [1, "\xc3\xa9"]}', "application/json") == {"a": [1, "é"]}
    assert decode_event(b'{"a": 1}', None) == {"a": 1}
    assert decode_event(b"\x00\x01", "application/octet-stream") == b"\x00\x01"


def test_decode_event_invalid_json_is_an_unmarshal_error() -> None:
    # GIVEN a body that is not JSON WHEN decoded THEN the managed runtime's error type
    with pytest.raises(FaultException) as raised:
        decode_event(b"{nope", "application/json")
    assert raised.value.exception_type == "Runtime.UnmarshalError"


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (URL_EVENT, True),
        ({"requestContext": {"http": "no"}}, False),
        ({"Records": []}, False),
        ([1, 2], False),
        ("text", False),
    ],
)
def test_function_url_events_are_recognized(event: object, expected: bool) -> None:
    # GIVEN an event WHEN classified THEN only payload-2.0 requests with requestContext.http are HTTP
    assert is_function_url_event(event) is expected


def test_prelude_is_json_then_eight_nuls() -> None:
    # GIVEN status, headers and cookies
    prelude = http_prelude(201, {"Content-Type": "text/event-stream"}, ["a=1; Path=/"])
    # WHEN serialized THEN JSON followed by 8 NUL bytes
    assert prelude.endswith(PRELUDE_DELIMITER) and PRELUDE_DELIMITER == b"\x00" * 8
    assert json.loads(prelude[:-8]) == {
        "statusCode": 201,
        "headers": {"Content-Type": "text/event-stream"},
        "cookies": ["a=1; Path=/"],
    }


@pytest.mark.parametrize("status", [99, 600, True, "200"])
def test_prelude_refuses_invalid_status(status: object) -> None:
    # GIVEN a status that is no HTTP status WHEN serialized THEN a marshal error
    with pytest.raises(FaultException) as raised:
        http_prelude(status, {}, [])  # type: ignore[arg-type]
    assert raised.value.exception_type == "Runtime.MarshalError"


def test_prelude_takes_latin_1_and_tabs_in_header_values() -> None:
    # GIVEN header values with HTAB, SP and a character of latin-1 beyond ASCII (RFC 9110's obs-text)
    prelude = http_prelude(200, {"Content-Type": "text/plain;\tcharset=utf-8", "X-City": "Montréal"}, ())
    # WHEN serialized THEN they go into the prelude as they are
    assert json.loads(prelude[:-8])["headers"] == {"Content-Type": "text/plain;\tcharset=utf-8", "X-City": "Montréal"}


@pytest.mark.parametrize(
    ("headers", "cookies", "reason"),
    [
        ({"x-a": "b\r\nInjected: yes"}, [], "header 'x-a' has '\\r' at 1"),
        ({"x-a": "b\nInjected: yes"}, [], "header 'x-a' has '\\n' at 1"),
        ({"x-a": "b\x00c"}, [], "header 'x-a' has '\\x00' at 1"),
        ({"x-a": "café ✓"}, [], "header 'x-a' has '✓' at 5"),
        ({"x-multi": ["a", "b"]}, [], "header 'x-multi' must be a string, not list"),
        ({"x-n": 1}, [], "header 'x-n' must be a string, not int"),
        ({"x-b": True}, [], "header 'x-b' must be a string, not bool"),
        ({1: "a"}, [], "invalid header name 1"),
        ({"x a": "a"}, [], "invalid header name 'x a'"),
        ({"x-a: b\r\nx-c": "d"}, [], "invalid header name"),
        ({"": "a"}, [], "invalid header name ''"),
        ([("x-a", "b")], [], "headers must be a mapping, not list"),
        ({}, ["c=1\r\nX-Evil: 1"], "cookie 0 has '\\r' at 3"),
        ({}, ["ok=1", "c=\x00"], "cookie 1 has '\\x00' at 2"),
        ({}, [1], "cookie 0 must be a string, not int"),
        ({}, "c=1", "cookies must be a list of strings, not str"),
    ],
)
def test_prelude_refuses_what_no_header_line_can_carry(headers: object, cookies: object, reason: str) -> None:
    # GIVEN a header or cookie that is not a string, or holds CR, LF, NUL or a character beyond latin-1
    # WHEN serialized THEN a marshal error that names it, and never a prelude with a raw or re-spelled value
    with pytest.raises(FaultException) as raised:
        http_prelude(200, headers, cookies)  # type: ignore[arg-type]
    assert raised.value.exception_type == "Runtime.MarshalError"
    assert reason in raised.value.msg


def test_encode_chunk() -> None:
    # GIVEN body items WHEN encoded THEN str is UTF-8, bytes-likes are bytes, anything else a TypeError
    assert encode_chunk("héllo ✓") == "héllo ✓".encode()
    assert encode_chunk(bytearray(b"\x00\xff")) == b"\x00\xff"
    assert encode_chunk(memoryview(b"mv")) == b"mv"
    with pytest.raises(TypeError, match="str or bytes, not int"):
        encode_chunk(42)


def test_encode_chunks_skips_empty_items() -> None:
    # GIVEN items some of which are empty WHEN encoded THEN only non-empty chunks remain
    assert list(encode_chunks(["a", "", b"", b"b"])) == [b"a", b"b"]


def test_function_url_dict_results() -> None:
    # GIVEN Function URL style results WHEN converted THEN status, headers, cookies and body bytes
    assert http_result_from_dict({"statusCode": 404, "headers": {"X-N": "1"}, "body": "é"}) == (
        404,
        {"X-N": "1"},
        [],
        "é".encode(),
    )
    raw = bytes(range(10))
    result = {"statusCode": 200, "body": base64.b64encode(raw).decode(), "isBase64Encoded": True, "cookies": ["c=1"]}
    assert http_result_from_dict(result) == (200, {}, ["c=1"], raw)
    assert http_result_from_dict({"statusCode": 204})[3] == b""
    assert http_result_from_dict({"statusCode": 200, "body": {"k": "v"}})[3] == b'{"k": "v"}'


@pytest.mark.parametrize(
    "result",
    [
        {"statusCode": "200"},
        {"statusCode": 200, "headers": ["x"]},
        {"statusCode": 200, "body": "not base64!", "isBase64Encoded": True},
    ],
)
def test_invalid_function_url_dict_is_a_marshal_error(result: dict[str, object]) -> None:
    # GIVEN a malformed Function URL result WHEN converted THEN a marshal error
    with pytest.raises(FaultException) as raised:
        http_result_from_dict(result)
    assert raised.value.exception_type == "Runtime.MarshalError"


def test_buffered_result_as_the_managed_runtime_marshals_it() -> None:
    # GIVEN plain return values WHEN marshalled THEN JSON (Decimals exact), bytes as they are
    body, content_type = buffered_result({"n": decimal.Decimal("1.10"), "s": "é"})
    assert content_type == "application/json"
    assert json.loads(body) == {"n": 1.1, "s": "é"}
    assert b'"n": 1.10' in body
    assert buffered_result(b"\x00raw") == (b"\x00raw", "application/unknown")
    assert buffered_result(None) == (b"null", "application/json")


def test_unserializable_result_is_a_marshal_error() -> None:
    # GIVEN a value JSON cannot hold WHEN marshalled THEN a marshal error
    with pytest.raises(FaultException) as raised:
        buffered_result({"x": object()})
    assert raised.value.exception_type == "Runtime.MarshalError"
