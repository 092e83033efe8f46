"""The proxy's invocation event: what the relay builds is what the proxy (and the reaper) parses."""

from __future__ import annotations

import json

import pytest

from chatstream.errors import InvalidEvent
from chatstream.proxy_event import MAX_MESSAGE_CHARS, GenerateRequest
from tests.support import load_event


@pytest.mark.parametrize(
    "request_",
    [
        GenerateRequest("7c1e4b9a2d3f4e5a8b6c0d1e2f3a4b5c", 1, "hello"),
        GenerateRequest("abc", 12, "héllo\n👋", max_tokens=64, temperature=0.5),
        GenerateRequest("abc", 2, "x" * MAX_MESSAGE_CHARS, temperature=0.0),
    ],
)
def test_the_event_round_trips_through_json(request_: GenerateRequest) -> None:
    event = json.loads(json.dumps(request_.to_event(), ensure_ascii=False))
    assert GenerateRequest.from_event(event) == request_


def test_optional_fields_are_left_out_when_unset() -> None:
    assert GenerateRequest("abc", 1, "hi").to_event() == {"session_id": "abc", "turn": 1, "message": "hi"}


def test_the_sample_event_parses() -> None:
    request = GenerateRequest.from_event(load_event("proxy-generate.json"))
    assert request.turn >= 1 and request.message


def test_a_message_over_the_limit_is_refused() -> None:
    with pytest.raises(InvalidEvent, match=f"at most {MAX_MESSAGE_CHARS}"):
        GenerateRequest.from_event({"session_id": "abc", "turn": 1, "message": "x" * (MAX_MESSAGE_CHARS + 1)})
