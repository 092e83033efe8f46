"""SSE framing, read back the way EventSource reads it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chatstream.relay import sse
from tests.unit.relay.relay_support import read_stream


def test_an_event_has_id_event_and_data_lines_then_a_blank_line() -> None:
    # WHEN a token event is framed
    framed = sse.json_message({"text": "You"}, event="token", id=1)
    # THEN it is exactly the HTTP_API.md shape
    assert framed == 'id: 1\nevent: token\ndata: {"text":"You"}\n\n'


def test_multi_line_data_becomes_one_data_line_per_line() -> None:
    # WHEN data holds LF, CRLF and CR line breaks
    framed = sse.message("one\ntwo\r\nthree\rfour", event="note")
    # THEN each line has its own data: field and a reader joins them with LF
    assert framed == "event: note\ndata: one\ndata: two\ndata: three\ndata: four\n\n"
    assert read_stream([framed]).events[0].data == "one\ntwo\nthree\nfour"


def test_json_data_stays_on_one_line_whatever_the_text() -> None:
    # WHEN a token's text holds line breaks and non-ASCII
    framed = sse.json_message({"text": "a\nb\r\n😀 \u2028"}, event="token", id=7)
    # THEN the event is one data line and decodes to the same text
    assert framed.count("data:") == 1
    assert read_stream([framed]).events[0].json() == {"text": "a\nb\r\n😀 \u2028"}
    # AND it is one line for str.splitlines() too (httpx-sse before 0.4.2 split there): U+2028, U+2029 and U+0085
    # are escaped, as JSON allows, and read back the same
    framed = sse.json_message({"text": "\u2028 \u2029 \x85"}, event="token", id=8)
    assert len(framed.strip().splitlines()) == 3  # id, event, data
    assert read_stream([framed]).events[0].json() == {"text": "\u2028 \u2029 \x85"}


def test_retry_and_comments() -> None:
    # WHEN a retry and a comment are framed
    stream = read_stream([sse.retry(1000), sse.comment("keep-alive")])
    # THEN the reader sees the reconnection delay and a comment, and no event
    assert sse.comment("keep-alive") == ": keep-alive\n\n"
    assert (stream.retry, stream.comments, stream.events) == (1000, ["keep-alive"], [])


@pytest.mark.parametrize(("field", "value"), [("event", "a\nb"), ("id", "1\r2"), ("id", "1\x002")])
def test_event_names_and_ids_must_be_single_lines(field: str, value: str) -> None:
    # WHEN an event name or id would break the framing THEN it is refused
    with pytest.raises(ValueError, match="one line"):
        sse.message("x", **{field: value})  # type: ignore[arg-type]


@given(st.text())
def test_any_text_survives_framing(text: str) -> None:
    # GIVEN any text WHEN it is sent as data THEN a reader gets it back with line breaks as LF
    stream = read_stream([sse.message(text, event="token", id=3)])
    expected = text.replace("\r\n", "\n").replace("\r", "\n")
    assert [(e.event, e.data, e.id) for e in stream.events] == [("token", expected, "3")]
