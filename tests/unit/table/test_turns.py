"""Turns in ChatTable (chatstream.table.turns): their reads and each transition's behaviour, against moto's DynamoDB,
the table built from template.yaml. The transitions' table as a whole is walked in test_turn_machine.py."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import pytest
from botocore.exceptions import ClientError

from chatstream.errors import SessionNotFound, TurnClaimed, TurnFinished, TurnInProgress, TurnLimitReached, TurnNotFound
from chatstream.records import ErrorInfo, TokenRecord, Usage
from chatstream.status import StopReason, TurnStatus
from chatstream.table.dynamodb import deser, ser
from chatstream.turn_options import TurnOptions
from tests.builders import turn_records

if TYPE_CHECKING:
    from chatstream.table import ChatTable

OWNER = "caller-a"


def test_start_turn_allocates_consecutive_turns_one_at_a_time(chat_table: ChatTable) -> None:
    # GIVEN a session with a turn in progress
    session_id = chat_table.create_session(OWNER)
    assert chat_table.turns.start_next(session_id, OWNER, "hello") == 1
    # WHEN another turn is requested before the first ends THEN it is refused
    with pytest.raises(TurnInProgress):
        chat_table.turns.start_next(session_id, OWNER, "again")
    # WHEN the first turn ends THEN the next turn is 2
    records = turn_records(session_id, 1, ["Hi", " there"])
    chat_table.put_records(records)
    chat_table.turns.end_from_stream(records[-1], chat_table.assemble_texts(session_id, 1)[0])
    assert chat_table.turns.start_next(session_id, OWNER, "next") == 2


def on_a_clock_with_a_finished_turn(chat_table: ChatTable) -> tuple[dict[str, int], str]:
    """The table on a settable clock (``clock["ms"]``), and a session started on it whose turn 1 ended ("Hi")."""
    clock = {"ms": 1_700_000_000_000}
    chat_table.now_ms = lambda: clock["ms"]
    session_id = chat_table.turns.start_first(OWNER, "hello")
    records = turn_records(session_id, 1, ["Hi"])
    chat_table.put_records(records)
    chat_table.turns.end_from_stream(records[-1], "Hi")
    return clock, session_id


def test_a_session_in_use_expires_ttl_days_after_its_latest_turn(chat_table: ChatTable) -> None:
    # GIVEN a session created at day 0 whose first turn ended
    clock, session_id = on_a_clock_with_a_finished_turn(chat_table)

    def expires_at(sk: str) -> int:
        item = chat_table.client.get_item(TableName=chat_table.table_name, Key=ser({"pk": f"S#{session_id}", "sk": sk}))
        return int(deser(item["Item"])["expires_at"])

    day = 86_400
    created = clock["ms"] // 1000
    assert expires_at("SESSION") == created + chat_table.ttl_days * day
    # WHEN its next turn starts 20 days later
    clock["ms"] += 20 * day * 1000
    assert chat_table.turns.start_next(session_id, OWNER, "still here") == 2
    # THEN the session lives TtlDays from then (it would have vanished 10 days into its use), and each turn's text
    # keeps its own expiry, TtlDays after it was written
    assert expires_at("SESSION") == created + (20 + chat_table.ttl_days) * day
    assert expires_at("T#000001") == created + chat_table.ttl_days * day


def test_an_expired_session_reads_as_gone_before_dynamodb_deletes_it(chat_table: ChatTable) -> None:
    # GIVEN a session whose turn ended, and a clock past the session's expiry (DynamoDB has not deleted it yet)
    clock, session_id = on_a_clock_with_a_finished_turn(chat_table)
    clock["ms"] += chat_table.ttl_days * 86_400 * 1000
    # WHEN it is read, and continued
    # THEN it is not found, nor is its turn, and no new turn revives it
    assert chat_table.get_session(session_id) is None
    assert chat_table.get_turn(session_id, 1) is None
    assert chat_table.list_turns(session_id) == []
    with pytest.raises(SessionNotFound):
        chat_table.turns.start_next(session_id, OWNER, "anyone there?")
    # AND a second earlier it was all there
    clock["ms"] -= 1000
    assert chat_table.get_session(session_id) is not None
    assert [turn.assistant for turn in chat_table.list_turns(session_id)] == ["Hi"]


def test_a_cancel_or_the_relay_s_claim_refuses_an_expired_turn_left_in_progress(chat_table: ChatTable) -> None:
    # GIVEN a turn left in progress (its generation died, and nothing ended it), and a clock past its expiry
    clock = {"ms": 1_700_000_000_000}
    chat_table.now_ms = lambda: clock["ms"]
    session_id = chat_table.turns.start_first(OWNER, "hello")
    clock["ms"] += chat_table.ttl_days * 86_400 * 1000
    stop = TokenRecord.stop(session_id, 1, 1, StopReason.CANCELLED, Usage(0, 0), clock["ms"])
    # WHEN a caller cancels it, and the relay tries to end it as unclaimed
    # THEN neither acts on it: it is not found, as every read says, and stays untouched
    with pytest.raises(TurnNotFound):
        chat_table.turns.request_cancel(session_id, 1)
    assert not chat_table.turns.cancel_unclaimed(stop)
    clock["ms"] -= 1000
    turn = chat_table.get_turn(session_id, 1)
    assert turn is not None and turn.status is TurnStatus.IN_PROGRESS and not turn.cancel_requested


def test_a_live_session_s_history_leaves_out_its_expired_turns(chat_table: ChatTable) -> None:
    # GIVEN a session whose first turn was 20 days before its second, and a clock past the first turn's expiry
    clock = {"ms": 1_700_000_000_000}
    chat_table.now_ms = lambda: clock["ms"]
    session_id = chat_table.turns.start_first(OWNER, "first")
    for turn, text in ((1, "One"), (2, "Two")):
        if turn == 2:
            clock["ms"] += 20 * 86_400 * 1000
            chat_table.turns.start_next(session_id, OWNER, "second")
        records = turn_records(session_id, turn, [text])
        chat_table.put_records(records)
        chat_table.turns.end_from_stream(records[-1], text)
    clock["ms"] += (chat_table.ttl_days - 20) * 86_400 * 1000
    # WHEN its history is read
    # THEN only the turn that has not expired is in it (the model is sent no more), and the expired one is not found
    assert [turn.turn for turn in chat_table.list_turns(session_id)] == [2]
    assert chat_table.get_turn(session_id, 1) is None
    assert chat_table.get_turn(session_id, 2) is not None
    assert chat_table.get_session(session_id) is not None


def test_concurrent_turn_starts_yield_exactly_one_turn(chat_table: ChatTable) -> None:
    # GIVEN a fresh session WHEN eight requests race to start a turn
    session_id = chat_table.create_session(OWNER)
    outcomes: list[object] = []

    def start() -> None:
        try:
            outcomes.append(chat_table.turns.start_next(session_id, OWNER, "race"))
        except TurnInProgress as err:
            outcomes.append(err)

    threads = [threading.Thread(target=start) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # THEN exactly one got turn 1 and the others were told a turn is in progress
    assert outcomes.count(1) == 1
    assert sum(isinstance(outcome, TurnInProgress) for outcome in outcomes) == 7


def test_foreign_or_unknown_session_is_not_found(chat_table: ChatTable) -> None:
    session_id = chat_table.create_session(OWNER)
    with pytest.raises(SessionNotFound):
        chat_table.turns.start_next(session_id, "caller-b", "mine now?")
    with pytest.raises(SessionNotFound):
        chat_table.turns.start_next("0" * 32, OWNER, "hello")


def test_a_stale_active_turn_is_taken_over(chat_table: ChatTable) -> None:
    # GIVEN a turn whose generator died without a terminal record
    clock = [1_000_000]
    chat_table.now_ms = lambda: clock[0]
    session_id = chat_table.create_session(OWNER)
    chat_table.turns.start_next(session_id, OWNER, "lost")
    chat_table.put_records(turn_records(session_id, 1, ["half", " a reply"])[:-1])  # no terminal record
    # WHEN a new turn is requested after the staleness bound THEN it is allocated
    clock[0] += 61_000
    assert chat_table.turns.start_next(session_id, OWNER, "retry", stale_after_ms=60_000) == 2
    # AND the lost turn is ended, not left in progress for good: error timeout (retryable), its text the records it has
    lost = chat_table.list_turns(session_id)[0]
    assert (lost.status, lost.assistant, lost.error) == (
        TurnStatus.ERROR,
        "half a reply",
        {"code": "timeout", "message": "the generation stopped without finishing", "retryable": True},
    )
    # AND its terminal record, if it comes after all (a redrive), still has the last word
    stop = turn_records(session_id, 1, ["half", " a reply"])[-1]
    chat_table.turns.end_from_stream(stop, "half a reply")
    done = chat_table.get_turn(session_id, 1)
    assert done is not None and (done.status, done.error, done.stop_reason) == (
        TurnStatus.COMPLETE,
        None,
        stop.stop_reason,
    )


def test_a_stale_turn_whose_item_is_gone_does_not_stop_the_session(chat_table: ChatTable) -> None:
    # GIVEN a session whose stale active turn's item no longer exists (expired, deleted by hand)
    clock = [1_000_000]
    chat_table.now_ms = lambda: clock[0]
    session_id = chat_table.create_session(OWNER)
    chat_table.turns.start_next(session_id, OWNER, "lost")
    chat_table.client.delete_item(
        TableName=chat_table.table_name, Key={"pk": {"S": f"S#{session_id}"}, "sk": {"S": "T#000001"}}
    )
    # WHEN a new turn is requested after the staleness bound THEN it is allocated, and no turn 1 item is made up
    clock[0] += 61_000
    assert chat_table.turns.start_next(session_id, OWNER, "retry", stale_after_ms=60_000) == 2
    assert [t.turn for t in chat_table.list_turns(session_id)] == [2]


def test_cancel_flag_and_finished_turns(chat_table: ChatTable) -> None:
    session_id = chat_table.create_session(OWNER)
    chat_table.turns.start_next(session_id, OWNER, "hello")
    assert chat_table.cancel_requested(session_id, 1) is False
    chat_table.turns.request_cancel(session_id, 1)
    assert chat_table.cancel_requested(session_id, 1) is True
    stop = TokenRecord.stop(session_id, 1, 1, StopReason.CANCELLED, Usage(1, 0), 5)
    chat_table.turns.end_from_stream(stop, "")
    with pytest.raises(TurnFinished):
        chat_table.turns.request_cancel(session_id, 1)
    with pytest.raises(TurnNotFound):
        chat_table.turns.request_cancel(session_id, 7)


def test_history_lists_turns_with_outcomes(chat_table: ChatTable) -> None:
    session_id = chat_table.create_session(OWNER)
    chat_table.turns.start_next(session_id, OWNER, "one", max_tokens=10, temperature=0.5)
    chat_table.turns.end_from_stream(TokenRecord.stop(session_id, 1, 2, StopReason.END_TURN, Usage(1, 1), 5), "Yes")
    chat_table.turns.start_next(session_id, OWNER, "two")
    chat_table.turns.end_from_stream(
        TokenRecord.failure(session_id, 2, 1, ErrorInfo("throttled", "slow down", True), 6), ""
    )
    turns = chat_table.list_turns(session_id)
    assert [(t.turn, t.user, t.status, t.assistant) for t in turns] == [
        (1, "one", TurnStatus.COMPLETE, "Yes"),
        (2, "two", TurnStatus.ERROR, ""),
    ]
    assert turns[0].usage == {"input_tokens": 1, "output_tokens": 1}
    assert turns[0].max_tokens == 10 and turns[0].temperature == 0.5
    assert turns[1].error == {"code": "throttled", "message": "slow down", "retryable": True}


def test_a_reply_too_large_for_its_turn_item_is_read_from_its_records(chat_table: ChatTable) -> None:
    # GIVEN a turn whose reply and reasoning (900 KB and 300 KB in UTF-8) are stored as its records, more than
    # DynamoDB's 400 KB item can hold, and another turn after it
    session_id = chat_table.create_session(OWNER)
    chat_table.turns.start_next(session_id, OWNER, "write a book")
    reply, thought = ["\u00e9" * 150_000] * 3, ["\u00e8" * 150_000]
    records = turn_records(session_id, 1, reply, reasoning=thought)
    chat_table.put_records(records[:-1])
    # WHEN its terminal record completes it with those texts
    chat_table.turns.end_from_stream(records[-1], "".join(reply), reasoning="".join(thought))
    # THEN the turn ended (its outcome written without the texts) and the session is free for the next turn
    turn = chat_table.get_turn(session_id, 1)
    assert turn is not None and (turn.status, turn.stop_reason) == (TurnStatus.COMPLETE, StopReason.END_TURN)
    assert chat_table.turns.start_next(session_id, OWNER, "thanks") == 2
    # AND every read of it has its exact texts, assembled from its records
    assert (turn.assistant, turn.reasoning) == ("".join(reply), "".join(thought))
    first = chat_table.list_turns(session_id)[0]
    assert (first.assistant, first.reasoning, first.usage) == ("".join(reply), "".join(thought), turn.usage)
    # AND a read for its outcome alone (a follower's status check, the reaper's) does not read its records
    bare = chat_table.get_turn(session_id, 1, texts=False)
    assert bare is not None and (bare.status, bare.assistant, bare.usage) == (TurnStatus.COMPLETE, None, turn.usage)
    # AND a later outcome that fits (the same record redelivered after a trim, say) is stored in the item again
    chat_table.turns.end_from_stream(records[-1], "short")
    assert chat_table.get_turn(session_id, 1).assistant == "short"  # type: ignore[union-attr]


@pytest.mark.parametrize(("asked", "stored"), [(1.57e-176, 0.0), (1e-130, 1e-130), (0.0, 0.0), (1.0, 1.0)])
def test_a_number_closer_to_zero_than_dynamodb_numbers_go_is_stored_as_zero(
    chat_table: ChatTable, asked: float, stored: float
) -> None:
    # GIVEN a turn asked with a temperature and a top_p (DynamoDB's smallest non-zero magnitude is 1E-130)
    session_id = chat_table.turns.start_first(OWNER, "hi", temperature=asked, options=TurnOptions(top_p=asked))
    # THEN the turn is stored, with the nearest values DynamoDB can hold
    (turn,) = chat_table.list_turns(session_id)
    assert (turn.temperature, turn.options.top_p) == (stored, stored)


def test_completing_an_unknown_turn_creates_nothing(chat_table: ChatTable) -> None:
    # GIVEN a terminal record replayed for a turn the table no longer has
    session_id = chat_table.create_session(OWNER)
    chat_table.turns.end_from_stream(TokenRecord.stop(session_id, 4, 2, StopReason.END_TURN, Usage(1, 1), 5), "late")
    # THEN no partial turn item appears in the history
    assert chat_table.list_turns(session_id) == []


def test_a_turn_is_claimed_for_one_generation_only(chat_table: ChatTable) -> None:
    # GIVEN a turn the relay started
    session_id = chat_table.turns.start_first(OWNER, "hello", max_tokens=5)
    # WHEN a proxy invocation claims it THEN it gets the turn item, as a strongly consistent read gives it
    turn = chat_table.turns.claim(session_id, 1, "request-1")
    assert (turn.user, turn.status, turn.max_tokens) == ("hello", TurnStatus.IN_PROGRESS, 5)
    # WHEN a second delivery of the same event claims it THEN it is told who has it, and the claim stands
    with pytest.raises(TurnClaimed) as raised:
        chat_table.turns.claim(session_id, 1, "request-2")
    assert raised.value.claimed_by == "request-1"
    # AND once the turn has ended, a late delivery is told so
    chat_table.turns.end_from_stream(TokenRecord.stop(session_id, 1, 2, StopReason.END_TURN, Usage(1, 1), 5), "Hi")
    with pytest.raises(TurnFinished) as finished:
        chat_table.turns.claim(session_id, 1, "request-3")
    assert finished.value.claimed_by == "request-1"  # the duplicate's log names who generated it
    # AND a turn that does not exist is not found
    with pytest.raises(TurnNotFound):
        chat_table.turns.claim(session_id, 2, "request-4")


def test_concurrent_claims_of_a_turn_give_it_to_exactly_one(chat_table: ChatTable) -> None:
    # GIVEN a turn in progress
    session_id = chat_table.turns.start_first(OWNER, "hello")
    winners: list[str] = []

    def claim(generator: str) -> None:
        try:
            chat_table.turns.claim(session_id, 1, generator)
            winners.append(generator)
        except TurnClaimed:
            pass

    # WHEN four deliveries of its event claim it at once
    threads = [threading.Thread(target=claim, args=(f"request-{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # THEN exactly one generates it
    assert len(winners) == 1


def test_ending_a_turn_with_a_claim_only_ends_an_unclaimed_one(chat_table: ChatTable) -> None:
    # GIVEN two turns in progress, one claimed by a proxy invocation
    claimed, unclaimed = chat_table.turns.start_first(OWNER, "a"), chat_table.turns.start_first(OWNER, "b")
    chat_table.turns.claim(claimed, 1, "request-1")
    error = ErrorInfo("proxy_unavailable", "could not start", True)
    # WHEN the relay ends each with a claim of its own
    # THEN the claimed one is left to its generation, and the other ends, claimed by the relay
    assert chat_table.turns.end_unclaimed(TokenRecord.failure(claimed, 1, 1, error, 5)) is False
    assert chat_table.turns.end_unclaimed(TokenRecord.failure(unclaimed, 1, 1, error, 5)) is True
    turn = chat_table.get_turn(claimed, 1)
    assert turn is not None and turn.status is TurnStatus.IN_PROGRESS
    assert chat_table.owned_session(claimed, OWNER).active_turn == 1
    turn = chat_table.get_turn(unclaimed, 1)
    assert turn is not None and turn.status is TurnStatus.ERROR
    assert chat_table.owned_session(unclaimed, OWNER).active_turn is None
    with pytest.raises(TurnFinished) as finished:
        chat_table.turns.claim(unclaimed, 1, "request-2")
    assert finished.value.claimed_by == "relay"


def test_start_session_allocates_turn_one_in_one_write(chat_table: ChatTable) -> None:
    # WHEN a new chat starts THEN its session exists with turn 1 in progress, and turn 2 waits for it
    session_id = chat_table.turns.start_first(OWNER, "hello", max_tokens=5)
    session = chat_table.get_session(session_id)
    assert session is not None and (session.owner, session.turn_count, session.active_turn) == (OWNER, 1, 1)
    turn = chat_table.get_turn(session_id, 1)
    assert turn is not None and (turn.user, turn.status, turn.max_tokens) == ("hello", TurnStatus.IN_PROGRESS, 5)
    with pytest.raises(TurnInProgress):
        chat_table.turns.start_next(session_id, OWNER, "next")


def test_a_session_at_its_turn_limit_refuses_a_new_turn_as_a_limit_not_as_a_turn_in_progress(
    chat_table: ChatTable,
) -> None:
    # GIVEN a session whose only turn ended
    session_id = chat_table.turns.start_first(OWNER, "hello")
    chat_table.turns.end_from_stream(TokenRecord.stop(session_id, 1, 2, StopReason.END_TURN, Usage(1, 1), 5), "Hi")

    # WHEN a turn is allocated with a limit of one turn THEN it is refused as the limit, and nothing changed
    with pytest.raises(TurnLimitReached, match="limit of 1 turns"):
        chat_table.turns.start_next(session_id, OWNER, "next", max_turns=1)
    session = chat_table.get_session(session_id)
    assert session is not None and (session.turn_count, session.active_turn) == (1, None)
    # AND with a limit of two it is turn 2
    assert chat_table.turns.start_next(session_id, OWNER, "next", max_turns=2) == 2


def test_a_session_can_start_with_a_chosen_id_once(chat_table: ChatTable) -> None:
    # WHEN a session starts with an id of the caller's choosing THEN it has that id; a second start with it fails
    chosen = "3f9c2a7e5b1d4c8e9f0a1b2c3d4e5f60"
    assert chat_table.turns.start_first(OWNER, "hello", session_id=chosen) == chosen
    assert chat_table.owned_session(chosen, OWNER).active_turn == 1
    with pytest.raises(ClientError) as raised:
        chat_table.turns.start_first(OWNER, "again", session_id=chosen)
    assert raised.value.response["Error"]["Code"] == "TransactionCanceledException"
