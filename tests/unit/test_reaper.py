"""Ending turns whose proxy invocation failed: the destination-record parser, the core and the handler."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

import pytest

from chatstream.errors import InvalidEvent, TurnInProgress
from chatstream.reaper import FailedGeneration, Reaping, end_abandoned_turn
from chatstream.status import TurnStatus
from tests.builders import opening_records, turn_records
from tests.support import FakeContext, load_event, load_function

if TYPE_CHECKING:
    from chatstream.records import TokenRecord
    from chatstream.table import ChatTable

OWNER = "owner"


def destination_record(session_id: str, turn: int = 1, error_type: str = "Sandbox.Timedout") -> dict[str, object]:
    body = json.loads(load_event("reaper-proxy-failure.json")["Records"][0]["body"])
    body["requestPayload"].update(session_id=session_id, turn=turn)
    body["responsePayload"]["errorType"] = error_type
    return body


def failed_delivery(session_id: str, condition: str, request_id: str) -> FailedGeneration:
    """The record of one delivery of the turn's event: RetriesExhausted (it ran) or EventAgeExceeded (it never ran)."""
    body = destination_record(session_id)
    body["requestContext"].update(condition=condition, requestId=request_id)  # type: ignore[attr-defined]
    if condition == "EventAgeExceeded":
        body["requestContext"].update(approximateInvokeCount=0)  # type: ignore[attr-defined]
        del body["responseContext"], body["responsePayload"]
    return FailedGeneration.from_destination_record(json.dumps(body))


def test_parses_lambdas_destination_record() -> None:
    failed = FailedGeneration.from_destination_record(load_event("reaper-proxy-failure.json")["Records"][0]["body"])
    assert (failed.request.turn, failed.condition, failed.error_type) == (1, "RetriesExhausted", "Sandbox.Timedout")
    assert failed.request_id == "e4b46cbf-b738-xmpl-8880-a18cdf61200e"
    assert failed.error().code == "generation_failed" and failed.error().retryable


def test_parses_the_record_of_an_event_that_never_ran_because_it_was_too_old() -> None:
    # GIVEN the record Lambda sends for an event throttled past MaximumEventAgeInSeconds: no response at all
    body = json.loads(load_event("reaper-proxy-failure.json")["Records"][0]["body"])
    body["requestContext"].update(condition="EventAgeExceeded", approximateInvokeCount=0)
    del body["responseContext"], body["responsePayload"]
    # WHEN it is parsed THEN the turn is named, and the error says why
    failed = FailedGeneration.from_destination_record(json.dumps(body))
    assert (failed.request.turn, failed.condition) == (1, "EventAgeExceeded")
    assert "EventAgeExceeded" in failed.error().message and failed.error().retryable


def test_the_sample_record_is_real_shaped_and_holds_no_conversation_text() -> None:
    # GIVEN the sample SQS event: its md5OfBody is the body's, as SQS computes it
    record = load_event("reaper-proxy-failure.json")["Records"][0]
    assert record["md5OfBody"] == hashlib.md5(record["body"].encode("utf-8")).hexdigest()
    # AND the failed invocation it carries names the turn and nothing else (what the relay sends the proxy)
    assert set(json.loads(record["body"])["requestPayload"]) == {"session_id", "turn"}


def test_a_record_of_an_invocation_by_an_earlier_relay_parses() -> None:
    # GIVEN a failed invocation whose payload still carries the message (sent before an upgrade)
    body = destination_record("abc", turn=3)
    body["requestPayload"].update(message="hello", max_tokens=64)  # type: ignore[attr-defined]
    # WHEN parsed THEN it names the turn to end
    failed = FailedGeneration.from_destination_record(json.dumps(body))
    assert (failed.request.session_id, failed.request.turn) == ("abc", 3)


@pytest.mark.parametrize(
    "body", ["not json", "[]", '{"requestPayload": "x"}', '{"requestPayload": {"session_id": "a b", "turn": 1}}']
)
def test_other_messages_are_invalid_events(body: str) -> None:
    with pytest.raises(InvalidEvent):
        FailedGeneration.from_destination_record(body)


def test_an_abandoned_turn_ends_in_error_with_its_text_and_frees_the_session(chat_table: ChatTable) -> None:
    # GIVEN a turn whose proxy wrote its reasoning and two deltas and died
    session_id = chat_table.create_session(OWNER)
    chat_table.turns.start_next(session_id, OWNER, "hello")
    chat_table.put_records(opening_records(session_id, 1, ["Hel", "lo"], reasoning=["I", " greet"]))
    # WHEN its failure reaches the reaper
    ended = end_abandoned_turn(
        chat_table, FailedGeneration.from_destination_record(destination_record(session_id)), lambda: 9
    )
    # THEN the turn is an error with the partial text and its reasoning apart, and the session takes a new turn
    turn = chat_table.get_turn(session_id, 1)
    assert ended is Reaping.ENDED and turn is not None and turn.status is TurnStatus.ERROR
    assert (turn.assistant, turn.reasoning) == ("Hello", "I greet")
    assert turn.error is not None and turn.error["code"] == "generation_failed"
    assert chat_table.turns.start_next(session_id, OWNER, "again") == 2


def test_records_that_reach_the_table_after_the_reaper_are_part_of_the_turns_reply(chat_table: ChatTable) -> None:
    # GIVEN a turn the reaper ended with the records the lagging consumer had written by then
    session_id = chat_table.create_session(OWNER)
    chat_table.turns.start_next(session_id, OWNER, "hello")
    records = opening_records(session_id, 1, ["one", " two", " three"])
    chat_table.put_records(records[:2])
    failure = FailedGeneration.from_destination_record(destination_record(session_id))
    assert end_abandoned_turn(chat_table, failure, lambda: 9) is Reaping.ENDED
    # WHEN the rest reach the table (the consumer caught up, or a redrive of the DLQ wrote them)
    chat_table.put_records(records[2:])
    # THEN history, the model's history and /v1 read the whole reply, as a resumed stream replays it: the turn item
    # keeps the reaper's outcome, its text is its records
    (turn,) = chat_table.list_turns(session_id)
    assert (turn.status, turn.assistant) == (TurnStatus.ERROR, "one two three")
    assert turn.error is not None and turn.error["code"] == "generation_failed"


def test_a_turn_that_ended_is_left_alone(chat_table: ChatTable) -> None:
    session_id = chat_table.create_session(OWNER)
    chat_table.turns.start_next(session_id, OWNER, "hello")
    start, stop = turn_records(session_id, 1, [])
    chat_table.put_records([start, stop])  # terminal in, not yet completed
    failed = FailedGeneration.from_destination_record(destination_record(session_id))
    assert end_abandoned_turn(chat_table, failed, lambda: 9) is Reaping.NOTHING_TO_END
    chat_table.turns.end_from_stream(stop, "")
    assert end_abandoned_turn(chat_table, failed, lambda: 9) is Reaping.NOTHING_TO_END
    assert chat_table.get_turn(session_id, 1).status is TurnStatus.COMPLETE  # type: ignore[union-attr]
    unknown = FailedGeneration.from_destination_record(destination_record(session_id, turn=7))
    assert end_abandoned_turn(chat_table, unknown, lambda: 9) is Reaping.NOTHING_TO_END


@pytest.mark.parametrize(
    ("condition", "claimed_by", "reaping"),
    [
        # the failed delivery never ran, and another one claimed the turn: it may be generating; left to it
        ("EventAgeExceeded", "first-delivery", Reaping.LEFT_TO_CLAIMANT),
        # the failed delivery never ran, and no delivery claimed the turn: no one will end it; ended
        ("EventAgeExceeded", None, Reaping.ENDED),
        # the failed delivery never ran, and a delivery with its request id (the event delivered twice) claimed the
        # turn: that one ran and may be generating; left to it
        ("EventAgeExceeded", "failed-delivery", Reaping.LEFT_TO_CLAIMANT),
        # the failed delivery ran, claimed the turn and died: ended
        ("RetriesExhausted", "failed-delivery", Reaping.ENDED),
        # the failed delivery ran and failed (its claim, or before it), while another one claimed the turn: left to it
        ("RetriesExhausted", "first-delivery", Reaping.LEFT_TO_CLAIMANT),
        # the failed delivery died before it could claim the turn, and no other did: ended
        ("RetriesExhausted", None, Reaping.ENDED),
    ],
)
def test_a_turn_another_delivery_claimed_is_left_to_it(
    chat_table: ChatTable, condition: str, claimed_by: str | None, reaping: Reaping
) -> None:
    # GIVEN a turn in progress with one delta, claimed by a delivery of its event (or by none)
    session_id = chat_table.create_session(OWNER)
    chat_table.turns.start_next(session_id, OWNER, "hello")
    if claimed_by is not None:
        chat_table.turns.claim(session_id, 1, claimed_by)
    chat_table.put_records(opening_records(session_id, 1, ["Hel"]))
    # WHEN the record of a failed delivery, request id "failed-delivery", reaches the reaper
    outcome = end_abandoned_turn(chat_table, failed_delivery(session_id, condition, "failed-delivery"), lambda: 9)
    # THEN the turn is ended only when no other delivery owns it; otherwise it is still generating, its session busy
    turn = chat_table.get_turn(session_id, 1)
    assert outcome is reaping and turn is not None
    if reaping is Reaping.ENDED:
        assert turn.status is TurnStatus.ERROR and turn.error is not None and condition in turn.error["message"]
    else:
        assert turn.status is TurnStatus.IN_PROGRESS and turn.generator == claimed_by
        with pytest.raises(TurnInProgress):
            chat_table.turns.start_next(session_id, OWNER, "again")


def test_a_turn_its_terminal_record_ends_while_the_reaper_reads_keeps_that_outcome(
    chat_table: ChatTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a turn whose proxy put its whole reply, stop record included, and died before it returned
    session_id = chat_table.create_session(OWNER)
    chat_table.turns.start_next(session_id, OWNER, "hello")
    *deltas, stop = turn_records(session_id, 1, ["Hel", "lo"])
    chat_table.put_records(deltas)
    read_records = chat_table.query_records

    def consumer_ends_it_meanwhile(session: str, turn: int) -> list[TokenRecord]:
        records = read_records(session, turn)  # what the reaper read: no terminal record yet
        chat_table.put_records([stop])  # then the consumer materializes the stop record and ends the turn
        chat_table.turns.end_from_stream(stop, "Hello")
        return records

    monkeypatch.setattr(chat_table, "query_records", consumer_ends_it_meanwhile)
    # WHEN the failure reaches the reaper, which reads the turn in progress and no terminal record
    ended = end_abandoned_turn(
        chat_table, FailedGeneration.from_destination_record(destination_record(session_id)), lambda: 9
    )
    # THEN it does not overwrite the outcome the consumer wrote in between: the turn is complete, as streamed
    turn = chat_table.get_turn(session_id, 1)
    assert ended is Reaping.NOTHING_TO_END
    assert turn is not None and turn.status is TurnStatus.COMPLETE and turn.error is None
    assert (turn.assistant, turn.stop_reason) == ("Hello", stop.stop_reason)


def test_a_terminal_record_materialized_after_the_reaper_ended_the_turn_overrides_it(chat_table: ChatTable) -> None:
    # GIVEN a turn the reaper ended in error before its stop record was materialized
    session_id = chat_table.create_session(OWNER)
    chat_table.turns.start_next(session_id, OWNER, "hello")
    *deltas, stop = turn_records(session_id, 1, ["Hel", "lo"])
    chat_table.put_records(deltas)
    failed = FailedGeneration.from_destination_record(destination_record(session_id))
    assert end_abandoned_turn(chat_table, failed, lambda: 9) is Reaping.ENDED
    # WHEN the consumer materializes the stop record
    chat_table.put_records([stop])
    chat_table.turns.end_from_stream(stop, "Hello")
    # THEN the turn has the outcome the token log has, and none of the reaper's (no error beside end_turn)
    turn = chat_table.get_turn(session_id, 1)
    assert turn is not None and turn.status is TurnStatus.COMPLETE and turn.assistant == "Hello"
    assert turn.error is None and turn.stop_reason is not None


def test_the_handler_on_the_sample_event(
    monkeypatch: pytest.MonkeyPatch, chat_table: ChatTable, table_name: str
) -> None:
    # GIVEN the sample's session with its turn in progress
    monkeypatch.setenv("CHAT_TABLE_NAME", table_name)
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "Chatstream")
    event = load_event("reaper-proxy-failure.json")
    session_id = json.loads(event["Records"][0]["body"])["requestPayload"]["session_id"]
    chat_table.client.put_item(
        TableName=table_name,
        Item={"pk": {"S": f"S#{session_id}"}, "sk": {"S": "SESSION"}, "owner": {"S": OWNER}, "turn_count": {"N": "0"}},
    )
    chat_table.turns.start_next(session_id, OWNER, "hello")
    garbage = {**event["Records"][0], "messageId": "m-2", "body": "not a destination record"}
    event = {"Records": [event["Records"][0], garbage]}
    app = load_function("reaper")
    # WHEN the handler runs THEN the turn is ended and both messages count as processed
    assert app.handler(event, FakeContext("TurnReaperFunction")) == {"batchItemFailures": []}
    assert chat_table.get_turn(session_id, 1).status is TurnStatus.ERROR  # type: ignore[union-attr]
