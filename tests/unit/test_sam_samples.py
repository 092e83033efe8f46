"""What `make invoke` seeds for a sample event (chatstream_local.sam.samples), read from the events themselves."""

from __future__ import annotations

import base64
import copy
import json
from typing import TYPE_CHECKING

from chatstream.status import StopReason, TurnStatus
from chatstream_local.sam.samples import SAMPLE_MESSAGE, SAMPLE_REPLY, SeededTurn, referenced_turns, seed
from tests.support import load_event

if TYPE_CHECKING:
    from chatstream.table import ChatTable

SAMPLE_SESSION = "3f9c2a7e5b1d4c8e9f0a1b2c3d4e5f60"
ALICE = "arn:aws:iam::123456789012:user/alice"


def test_relay_events_refer_to_a_finished_turn_of_their_callers_session() -> None:
    for name in ("relay-history.json", "relay-events.json", "relay-events-after.json", "relay-cancel.json"):
        event = load_event(name)
        # under AWS_IAM the session is the signed caller's; under NONE everyone's ("anonymous")
        assert referenced_turns(event, "AWS_IAM") == [SeededTurn(SAMPLE_SESSION, 1, True, ALICE)], name
        assert referenced_turns(event, "NONE") == [SeededTurn(SAMPLE_SESSION, 1, True, "anonymous")], name
    for name in ("relay-chat.json", "relay-health.json", "relay-chat-bad-json.json"):
        assert referenced_turns(load_event(name), "NONE") == [], name


def test_the_pipelines_events_refer_to_a_turn_in_progress() -> None:
    assert referenced_turns(load_event("proxy-generate.json"), "NONE") == [
        SeededTurn(SAMPLE_SESSION, 1, False, "anonymous")
    ]
    assert referenced_turns(load_event("consumer-turn.json"), "NONE") == [
        SeededTurn(SAMPLE_SESSION, 1, False, "anonymous")
    ]
    assert referenced_turns(load_event("reaper-proxy-failure.json"), "NONE") == [
        SeededTurn(SAMPLE_SESSION, 1, False, "anonymous")
    ]
    # a batch with a poison record: the session comes from its readable records
    assert [t.session_id for t in referenced_turns(load_event("consumer-poison.json"), "NONE")] == [
        "7c1e4b9a2d3f4e5a8b6c0d1e2f3a4b5c"
    ]


def test_events_that_name_no_valid_turn_seed_nothing() -> None:
    history = load_event("relay-history.json")
    for path in ("/sessions/not..valid", "/sessions/abc/turns/0/events", "/sessions/abc/turns/21/events", "/chat"):
        event = copy.deepcopy(history)
        event["rawPath"] = path
        assert referenced_turns(event, "NONE") == [], path
    assert referenced_turns({"session_id": SAMPLE_SESSION, "turn": True}, "NONE") == []
    poison = {"Records": [{"kinesis": {"data": base64.b64encode(b"{not json").decode()}}]}
    assert referenced_turns(poison, "NONE") == []
    assert referenced_turns([1, 2], "NONE") == []
    assert referenced_turns({"Records": [{"body": json.dumps({"requestPayload": "x"})}]}, "NONE") == []


def test_seeding_a_finished_turn_writes_the_sample_conversation(chat_table: ChatTable) -> None:
    # GIVEN a session already holding something else
    chat_table.turns.start_first("someone", "old", session_id=SAMPLE_SESSION)
    # WHEN turn 2 is seeded finished
    seed(chat_table, [SeededTurn(SAMPLE_SESSION, 2, True, "anonymous")])
    # THEN the session is the caller's, with two finished turns of the sample reply and their records
    assert chat_table.owned_session(SAMPLE_SESSION, "anonymous").active_turn is None
    turns = chat_table.list_turns(SAMPLE_SESSION)
    assert [(t.turn, t.status, t.user, t.assistant, t.stop_reason) for t in turns] == [
        (n, TurnStatus.COMPLETE, SAMPLE_MESSAGE, "".join(SAMPLE_REPLY), StopReason.END_TURN) for n in (1, 2)
    ]
    records = chat_table.query_records(SAMPLE_SESSION, 2)
    assert [r.seq for r in records] == [0, 1, 2, 3, 4]
    assert [r.text for r in records[1:4]] == list(SAMPLE_REPLY)


def test_seeding_a_turn_in_progress_leaves_it_as_the_relay_does(chat_table: ChatTable) -> None:
    seed(chat_table, [SeededTurn(SAMPLE_SESSION, 1, False, "anonymous")])
    seed(chat_table, [SeededTurn(SAMPLE_SESSION, 1, False, "anonymous")])  # repeatable
    session = chat_table.owned_session(SAMPLE_SESSION, "anonymous")
    turn = chat_table.get_turn(SAMPLE_SESSION, 1)
    assert session.active_turn == 1 and turn is not None and turn.status is TurnStatus.IN_PROGRESS
    assert turn.user == SAMPLE_MESSAGE and chat_table.query_records(SAMPLE_SESSION, 1) == []
