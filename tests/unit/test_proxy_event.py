"""The proxy's invocation event: what the relay builds is what the proxy (and the reaper) parses."""

from __future__ import annotations

import json

import pytest

from chatstream.errors import InvalidEvent
from chatstream.proxy_event import GenerateRequest
from tests.support import load_event


@pytest.mark.parametrize(
    "request_", [GenerateRequest("7c1e4b9a2d3f4e5a8b6c0d1e2f3a4b5c", 1), GenerateRequest("a-b_C", 999_999)]
)
def test_the_event_round_trips_through_json(request_: GenerateRequest) -> None:
    event = json.loads(json.dumps(request_.to_event()))
    assert GenerateRequest.from_event(event) == request_


def test_the_event_names_the_turn_and_carries_no_conversation_text() -> None:
    # WHEN the relay builds the event THEN it holds the turn's key only (the message is on the turn item)
    assert GenerateRequest("abc", 1).to_event() == {"session_id": "abc", "turn": 1}


def test_the_sample_event_is_what_the_relay_sends() -> None:
    event = load_event("proxy-generate.json")
    assert GenerateRequest.from_event(event).to_event() == event


def test_an_event_from_an_earlier_relay_still_parses_and_its_message_is_ignored() -> None:
    # GIVEN the event a relay of the previous version sends during a deployment (message and options in it)
    event = {"session_id": "abc", "turn": 2, "message": "hello", "max_tokens": 512, "temperature": 0.5}
    # WHEN parsed THEN it names the same turn, and nothing of the message is kept
    assert GenerateRequest.from_event(event) == GenerateRequest("abc", 2)


@pytest.mark.parametrize(
    ("event", "field"),
    [
        ([], "JSON object"),
        ({}, "session_id"),
        ({"session_id": "a b", "turn": 1}, "session_id"),
        ({"session_id": "abc"}, "turn"),
        ({"session_id": "abc", "turn": 0}, "turn"),
        ({"session_id": "abc", "turn": True}, "turn"),
        ({"session_id": "abc", "turn": "1"}, "turn"),
    ],
)
def test_an_invalid_event_is_refused_naming_the_field(event: object, field: str) -> None:
    with pytest.raises(InvalidEvent, match=field):
        GenerateRequest.from_event(event)
