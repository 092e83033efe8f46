"""The turn follower against moto's DynamoDB (table from template.yaml), in fake time."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest
from botocore.exceptions import ClientError

from chatstream.errors import Throttled, TurnFinished
from chatstream.records import ErrorInfo
from chatstream.relay.follow import CADENCE_FRACTION, FIRST_TOKEN_FLAT_S, Follower, StreamOutcome
from chatstream.relay.pace import Position
from chatstream.status import StopReason, TurnStatus
from tests.builders import turn_records
from tests.unit.relay.relay_support import FAST, RELAY_POLLING, FakeClock, calls_at, read_stream, write_turn

if TYPE_CHECKING:
    from chatstream.records import TokenRecord
    from chatstream.relay.follow import FollowSettings
    from chatstream.table import ChatTable

OWNER = "arn:aws:iam::123456789012:user/alice"


@pytest.fixture
def session_id(chat_table: ChatTable) -> str:
    session_id = chat_table.create_session(OWNER)
    assert chat_table.turns.start_next(session_id, OWNER, "hello") == 1
    return session_id


def follow(
    table: ChatTable,
    session_id: str,
    clock: FakeClock,
    *,
    after: int | Position = -1,
    settings: FollowSettings = FAST,
    turn: int = 1,
    ends_unstarted: bool = False,
) -> Follower:
    return Follower(
        table, session_id, turn, after=after, settings=settings, clock=clock.as_clock(), ends_unstarted=ends_unstarted
    )


def test_a_finished_turn_is_replayed_with_exact_ids_and_text(chat_table: ChatTable, session_id: str) -> None:
    # GIVEN a turn that ended: start, three deltas, stop
    write_turn(chat_table, session_id, 1, ["You", " said:", " hello"])
    clock = FakeClock()
    # WHEN a client follows it from the start
    stream = read_stream(follow(chat_table, session_id, clock).events())
    # THEN it gets every token with its seq as id, then done, and the stream ends
    assert stream.kinds == ["token", "token", "token", "done"]
    assert stream.ids == [1, 2, 3, 4]
    assert stream.text == "You said: hello"
    assert stream.of("done")[0].json() == {
        "stop_reason": StopReason.END_TURN,
        "usage": {"input_tokens": 1, "output_tokens": 3},
    }


def test_reasoning_is_its_own_event_before_the_reply_with_resumable_ids(chat_table: ChatTable, session_id: str) -> None:
    # GIVEN a turn that reasoned in two records, then replied
    write_turn(chat_table, session_id, 1, ["You said:", " hi"], reasoning=["Let me", " think it over"])
    # WHEN a client follows it from the start
    stream = read_stream(follow(chat_table, session_id, FakeClock()).events())
    # THEN reasoning events come first, paced like tokens, with ids in the same sequence; the reply holds no
    # reasoning
    kinds = stream.kinds
    assert kinds[-1] == "done" and kinds[:-1] == sorted(kinds[:-1], key=lambda kind: kind == "token")
    assert kinds.count("reasoning") > 2  # record 2's text went out in word-sized pieces
    assert (stream.reasoning, stream.text) == ("Let me think it over", "You said: hi")
    ids = [event.id for event in stream.events]
    assert ids[:5] == ["1.3", "1", "2.6", "2.9", "2"]
    # WHEN a client resumes from a piece inside the reasoning THEN it gets exactly what follows it
    for position in ("1.3", "2.6", "2"):
        resumed = read_stream(follow(chat_table, session_id, FakeClock(), after=Position.parse(position)).events())
        have = "".join(e.json()["text"] for e in stream.events[: ids.index(position) + 1] if e.event == "reasoning")
        assert (have + resumed.reasoning, resumed.text) == ("Let me think it over", "You said: hi")
        assert resumed.kinds[-1] == "done" and position not in [event.id for event in resumed.events]


def test_records_are_sent_as_they_appear(chat_table: ChatTable, session_id: str) -> None:
    # GIVEN a turn whose records appear one after another
    records = turn_records(session_id, 1, ["One", " two"])
    clock = FakeClock()
    for when, record in zip([1.0, 2.0, 3.0, 5.0], records, strict=True):
        clock.at(when, lambda record=record: chat_table.put_records([record]))
    # WHEN a client follows the turn
    stream = read_stream(follow(chat_table, session_id, clock).events(), clock)
    # THEN each token went out after its record appeared and before the next one did
    first, second, done = stream.events
    assert (first.id, first.json()) == ("1", {"text": "One"})
    assert first.at is not None and 2.0 <= first.at < 3.0
    assert second.at is not None and 3.0 <= second.at < 5.0
    assert done.event == "done" and done.id == "3"


def test_polling_follows_the_records_cadence_and_backs_off_when_idle(chat_table: ChatTable, session_id: str) -> None:
    # GIVEN a turn whose first words come every 0.1 s, then nothing for a few seconds before the last one
    records = turn_records(session_id, 1, [" a", " b", " c", " late"])
    chat_table.put_records(records[:2])
    clock = FakeClock()
    clock.at(0.1, lambda: chat_table.put_records(records[2:3]))
    clock.at(0.2, lambda: chat_table.put_records(records[3:4]))
    clock.at(8.0, lambda: chat_table.put_records(records[4:]))
    settings = replace(FAST, poll_max_s=0.5)
    # WHEN a client follows it
    stream = read_stream(follow(chat_table, session_id, clock, settings=settings).events())
    assert stream.text == " a b c late"
    # THEN after the last of those it waits most of their interval, then idle polls back off from the minimum to
    # the maximum interval and never beyond
    waited, after_c = 0.0, []
    for wait in clock.sleeps:
        if waited >= 0.2:
            after_c.append(wait)
        waited += wait
    assert after_c[0] == pytest.approx(CADENCE_FRACTION * 0.1, abs=0.015)
    assert after_c[1:5] == [FAST.poll_min_s, 2 * FAST.poll_min_s, 4 * FAST.poll_min_s, 8 * FAST.poll_min_s]
    assert max(clock.sleeps) == settings.poll_max_s


def test_only_a_gentle_backoff_while_waiting_for_the_first_token(chat_table: ChatTable, session_id: str) -> None:
    # GIVEN a turn that starts at once and whose first word comes three seconds later
    records = turn_records(session_id, 1, ["Late"])
    chat_table.put_records(records[:1])
    clock = FakeClock()
    clock.at(3.0, lambda: chat_table.put_records(records[1:]))
    # WHEN a client follows it
    stream = read_stream(follow(chat_table, session_id, clock).events(), clock)
    assert stream.text == "Late"
    # THEN polls before the first token come at the minimum interval for FIRST_TOKEN_FLAT_S, then at most 4× apart
    first_token_at = stream.events[0].at
    assert first_token_at is not None
    waited, flat, later = 0.0, [], []
    for wait in clock.sleeps:
        if waited >= 3.0:
            break
        (flat if waited < FIRST_TOKEN_FLAT_S else later).append(wait)
        waited += wait
    assert flat and flat == pytest.approx([FAST.poll_min_s] * len(flat))
    assert later and max(later) == pytest.approx(4 * FAST.poll_min_s)
    # AND the token went out within one of those waits of its arrival
    assert 3.0 <= first_token_at <= 3.0 + 4 * FAST.poll_min_s + 1e-9


def test_a_first_token_that_comes_soon_is_found_within_the_quickest_poll(
    chat_table: ChatTable, session_id: str
) -> None:
    # GIVEN a turn whose first word comes 0.7 s after its start (a model's first token on AWS, and the calls before)
    records = turn_records(session_id, 1, ["Soon"])
    chat_table.put_records(records[:1])
    clock = FakeClock()
    clock.at(0.7, lambda: chat_table.put_records(records[1:]))
    # WHEN a client follows it
    stream = read_stream(follow(chat_table, session_id, clock).events(), clock)
    # THEN every poll before it came at the minimum interval, and the token went out within one of them
    first_token_at = stream.events[0].at
    assert first_token_at is not None and 0.7 <= first_token_at <= 0.7 + FAST.poll_min_s + 1e-9
    waited, before = 0.0, []
    for wait in clock.sleeps:
        if waited >= 0.7:
            break
        before.append(wait)
        waited += wait
    assert before and before == pytest.approx([FAST.poll_min_s] * len(before))


@pytest.mark.parametrize("jitter_s", [0.0, 0.03])
def test_records_on_a_steady_cadence_are_polled_about_once_or_twice_each(
    chat_table: ChatTable, session_id: str, jitter_s: float
) -> None:
    # GIVEN a turn whose records appear every 0.3 s (the proxy's flush timer), give or take a little
    settings = replace(FAST, poll_min_s=0.02, poll_max_s=0.5)
    words = [f" w{i}" for i in range(20)]
    records = turn_records(session_id, 1, words)
    chat_table.put_records(records[:2])
    clock = FakeClock()
    due = {}
    for i, record in enumerate(records[2:], start=1):
        due[record.seq] = 0.3 * i + (jitter_s if i % 2 else -jitter_s)
        clock.at(due[record.seq], lambda record=record: chat_table.put_records([record]))
    queries = calls_at(chat_table, "query_records", clock)
    # WHEN a client follows it
    stream = read_stream(follow(chat_table, session_id, clock, settings=settings).events(), clock)
    # THEN every token went out soon after its record appeared
    assert stream.text == "".join(words)
    lags = [event.at - due[int(event.id)] for event in stream.events[1:] if event.at is not None]
    assert max(lags[5:]) <= 0.1  # once the cadence is learned (it starts from the gentle first-token polling)
    assert max(lags) <= 0.2
    # AND the table was asked about three times per record (from 20 ms after each, doubling, was five times)
    assert len(queries) <= 3.5 * len(due)


def test_the_turn_item_is_not_read_while_records_flow(chat_table: ChatTable, session_id: str) -> None:
    # GIVEN a turn whose records come every 0.3 s for six seconds, then a pause of two seconds before it ends
    words = [f" w{i}" for i in range(20)]
    records = turn_records(session_id, 1, words)
    chat_table.put_records(records[:2])
    clock = FakeClock()
    for i, record in enumerate(records[2:-1], start=1):
        clock.at(0.3 * i, lambda record=record: chat_table.put_records([record]))
    clock.at(8.0, lambda: chat_table.put_records(records[-1:]))
    reads = calls_at(chat_table, "get_turn", clock)
    # WHEN a client follows it
    stream = read_stream(follow(chat_table, session_id, clock).events())
    # THEN the turn item was read only in the pause, once a status_check_s after the last records
    assert stream.text == "".join(words)
    assert reads
    assert min(reads) >= 0.3 * (len(records) - 3) + FAST.status_check_s


def test_a_slow_table_is_asked_less_often(chat_table: ChatTable, session_id: str) -> None:
    # GIVEN a table whose every Query takes 0.05 s (a busy DynamoDB, in fake time), and a turn whose word comes late
    records = turn_records(session_id, 1, ["Late"])
    chat_table.put_records(records[:1])
    clock = FakeClock()
    clock.at(1.0, lambda: chat_table.put_records(records[1:]))
    query = chat_table.query_records

    def slow_query(*args: Any, **kwargs: Any) -> Any:
        clock.t += 0.05
        return query(*args, **kwargs)

    chat_table.query_records = slow_query  # type: ignore[method-assign]
    # WHEN a client follows it
    stream = read_stream(follow(chat_table, session_id, clock).events())
    # THEN no wait between polls was shorter than a Query took
    assert stream.text == "Late"
    assert min(clock.sleeps) == pytest.approx(0.05)


def test_a_gap_holds_back_later_records_until_it_fills(chat_table: ChatTable, session_id: str) -> None:
    # GIVEN records 0, 1, 3 and 4 visible, and record 2 appearing 4 s later (a batch seen out of order)
    records = turn_records(session_id, 1, ["a", "b", "c"])
    chat_table.put_records([r for r in records if r.seq != 2])
    clock = FakeClock()
    clock.at(4.0, lambda: chat_table.put_records([records[2]]))
    # WHEN a client follows the turn
    stream = read_stream(follow(chat_table, session_id, clock).events(), clock)
    # THEN every event arrives once, in seq order, and nothing after the gap went out before it filled
    assert stream.ids == [1, 2, 3, 4]
    assert stream.text == "abc"
    assert stream.events[1].at is not None and stream.events[1].at >= 4.0


def test_a_start_record_missing_or_late_is_not_waited_for(chat_table: ChatTable, session_id: str) -> None:
    # GIVEN the first delta and the rest visible, and the start (which shares its call with the first delta and
    # may be stored after it) appearing only 4 s later
    records = turn_records(session_id, 1, ["a", "b"])
    chat_table.put_records(records[1:])
    clock = FakeClock()
    clock.at(4.0, lambda: chat_table.put_records(records[:1]))
    # WHEN a client follows the turn
    stream = read_stream(follow(chat_table, session_id, clock).events(), clock)
    # THEN it gets every event at once, exactly once
    assert (stream.kinds, stream.ids, stream.text) == (["token", "token", "done"], [1, 2, 3], "ab")
    assert stream.events[-1].at is not None and stream.events[-1].at < 1.0
    # AND a later record missing is still a gap: only the start may be absent
    chat_table.put_records([replace(records[3], turn=2, seq=2)])
    clock = FakeClock()
    stream = read_stream(follow(chat_table, session_id, clock, turn=2).events(), clock)
    assert stream.kinds == ["error"] and stream.events[0].json()["code"] == "gap"


def test_a_gap_that_does_not_fill_ends_the_stream_with_a_gap_error(chat_table: ChatTable, session_id: str) -> None:
    # GIVEN records 0, 1 and 3 visible and record 2 never
    records = turn_records(session_id, 1, ["a", "b", "c"])
    chat_table.put_records([records[0], records[1], records[3]])
    clock = FakeClock()
    # WHEN a client follows the turn
    stream = read_stream(follow(chat_table, session_id, clock).events(), clock)
    # THEN it gets the token before the gap, then an error "gap" once the gap outlived its bound
    assert stream.kinds == ["token", "error"]
    error = stream.events[-1]
    assert error.id is None
    assert error.json()["code"] == "gap" and error.json()["retryable"] is True
    assert error.at is not None and error.at >= FAST.gap_timeout_s


def test_a_turn_that_never_starts_ends_with_a_timeout_error(chat_table: ChatTable, session_id: str) -> None:
    # GIVEN a turn whose generator never writes anything
    clock = FakeClock()
    # WHEN a client follows it
    stream = read_stream(follow(chat_table, session_id, clock, ends_unstarted=True).events(), clock)
    # THEN the stream ends with one error "timeout" after the start bound
    assert stream.kinds == ["error"]
    assert stream.events[0].json()["code"] == "timeout"
    assert stream.events[0].at is not None and stream.events[0].at >= FAST.start_timeout_s


def test_a_turn_no_generation_claimed_is_ended_at_the_start_timeout_so_the_error_is_true(
    chat_table: ChatTable, session_id: str
) -> None:
    # GIVEN a turn whose proxy invocation waits in Lambda's queue (ProxyReservedConcurrency reached): no generation
    # has claimed it, no record exists
    clock = FakeClock()
    # WHEN a client follows it past the start timeout
    stream = read_stream(follow(chat_table, session_id, clock, ends_unstarted=True).events(), clock)
    # THEN the stream ends with the turn's own error, with its id, telling the client to send again
    assert stream.kinds == ["error"]
    error = stream.events[0]
    assert error.id == "1" and error.json()["code"] == "timeout" and error.json()["retryable"] is True
    assert "send again" in error.json()["message"]
    assert error.at is not None and error.at >= FAST.start_timeout_s
    # AND the turn ended with it: stored, its session free for the next message
    turn = chat_table.get_turn(session_id, 1)
    assert turn is not None and turn.status is TurnStatus.ERROR and (turn.error or {})["code"] == "timeout"
    assert chat_table.turns.start_next(session_id, OWNER, "again") == 2
    # AND the queued invocation, when it runs, finds the turn ended and generates nothing
    with pytest.raises(TurnFinished):
        chat_table.turns.claim(session_id, 1, "late-request-id")
    # AND a client resuming it later gets the same ending
    again = read_stream(follow(chat_table, session_id, FakeClock()).events())
    assert [(event.event, event.id) for event in again.events] == [("error", "1")]


def test_an_ending_whose_session_update_failed_is_completed_by_the_next_try(
    chat_table: ChatTable, session_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a turn no generation claimed, and a table whose first session update after the turn's ending is throttled
    # (after the turn item was written)
    free_session = chat_table.turns.free_session
    refusals = [Throttled("DynamoDB ProvisionedThroughputExceededException")]

    def throttled_once(*args: Any, **kwargs: Any) -> None:
        if refusals:
            raise refusals.pop()
        free_session(*args, **kwargs)

    monkeypatch.setattr(chat_table.turns, "free_session", throttled_once)
    clock = FakeClock()
    # WHEN the request that started it follows it past the start timeout
    stream = read_stream(follow(chat_table, session_id, clock, ends_unstarted=True).events(), clock)
    # THEN the next poll finds the turn ended by the relay and does what the first try could not: the session is
    # free, the records are stored, and the stream ends with the turn's error, with its id
    assert not refusals
    assert [(event.event, event.id) for event in stream.events] == [("error", "1")]
    assert stream.events[0].json()["code"] == "timeout"
    assert [record.seq for record in chat_table.query_records(session_id, 1)] == [0, 1]
    assert chat_table.turns.start_next(session_id, OWNER, "again") == 2


def test_a_claimed_turn_slow_to_begin_is_followed_past_the_start_timeout(
    chat_table: ChatTable, session_id: str
) -> None:
    # GIVEN a turn a generation has claimed whose model sends its first delta only after 45 s
    chat_table.turns.claim(session_id, 1, "request-1")
    records = turn_records(session_id, 1, ["late", " but", " here"])
    clock = FakeClock()
    clock.at(45.0, lambda: chat_table.put_records(records))
    # WHEN a client follows it (start timeout 30 s)
    follower = follow(chat_table, session_id, clock, settings=RELAY_POLLING, ends_unstarted=True)
    stream = read_stream(follower.events(), clock)
    # THEN no timeout: the reply, whole, and done
    assert stream.kinds[-1] == "done" and stream.text == "late but here"
    turn = chat_table.get_turn(session_id, 1)
    assert turn is not None and turn.status is TurnStatus.IN_PROGRESS  # the follower did not end it


def test_a_claimed_turn_that_stays_silent_ends_the_stream_with_reconnect_not_an_error(
    chat_table: ChatTable, session_id: str
) -> None:
    # GIVEN a turn a generation has claimed that writes nothing
    chat_table.turns.claim(session_id, 1, "request-1")
    clock = FakeClock()
    settings = replace(RELAY_POLLING, idle_reconnect_s=60, start_timeout_s=30)
    # WHEN a client follows it
    follower = follow(chat_table, session_id, clock, settings=settings, ends_unstarted=True)
    stream = read_stream(follower.events(), clock)
    # THEN after the idle bound the stream ends with reconnect (the client resumes), the turn untouched
    assert stream.kinds == ["reconnect"] and follower.stats.outcome is StreamOutcome.RECONNECT
    assert stream.events[0].json()["last_event_id"] == 0
    assert stream.events[0].at is not None and 60.0 <= stream.events[0].at <= 60.0 + settings.poll_max_s
    turn = chat_table.get_turn(session_id, 1)
    assert turn is not None and turn.status is TurnStatus.IN_PROGRESS


def test_a_follower_that_may_not_end_an_unstarted_turn_leaves_it_to_its_generation(
    chat_table: ChatTable, session_id: str
) -> None:
    # GIVEN a turn no generation has claimed, followed by a follower that may not end it (a /v1 background response's)
    clock = FakeClock()
    settings = replace(RELAY_POLLING, idle_reconnect_s=60, start_timeout_s=30)
    follower = Follower(chat_table, session_id, 1, settings=settings, clock=clock.as_clock(), ends_unstarted=False)
    # WHEN it follows past the start timeout
    stream = read_stream(follower.events(), clock)
    # THEN it ends with the idle bound's reconnect, and the turn still waits for its generation
    assert stream.kinds == ["reconnect"]
    turn = chat_table.get_turn(session_id, 1)
    assert turn is not None and turn.status is TurnStatus.IN_PROGRESS and turn.generator is None


def test_a_keep_alive_comment_goes_out_after_ten_seconds_of_silence(chat_table: ChatTable, session_id: str) -> None:
    # GIVEN a turn that starts, then is silent for 25 s before its reply
    records = turn_records(session_id, 1, ["Hi"])
    chat_table.put_records(records[:1])
    clock = FakeClock()
    clock.at(25.0, lambda: chat_table.put_records(records[1:]))
    # WHEN a client follows it
    stream = read_stream(follow(chat_table, session_id, clock).events())
    # THEN two keep-alive comments kept the connection busy, and the events are intact
    assert stream.comments == ["keep-alive", "keep-alive"]
    assert stream.raw.index(": keep-alive\n\n") < stream.raw.index("event: token")
    assert stream.kinds == ["token", "done"]


def test_the_stream_ends_with_reconnect_before_the_function_deadline(chat_table: ChatTable, session_id: str) -> None:
    # GIVEN a turn still generating, and an invocation with 25 s left (the margin is 10 s)
    chat_table.put_records(turn_records(session_id, 1, ["a", "b", "c"])[:3])
    clock = FakeClock(deadline_s=25.0)
    # WHEN a client follows it
    stream = read_stream(follow(chat_table, session_id, clock).events(), clock)
    # THEN it gets what exists, then a reconnect naming where to resume, before the deadline
    assert stream.kinds == ["token", "token", "reconnect"]
    reconnect = stream.events[-1]
    assert reconnect.json() == {"events_url": f"/sessions/{session_id}/turns/1/events", "last_event_id": 2}
    assert reconnect.at is not None and 15.0 <= reconnect.at < 25.0


def test_a_turn_with_nothing_new_to_send_ends_with_reconnect_after_the_idle_bound(
    chat_table: ChatTable, session_id: str
) -> None:
    # GIVEN a turn that started and produced one token, then nothing more (its client may be long gone: on Lambda
    # the follower is never told)
    chat_table.put_records(turn_records(session_id, 1, ["one"])[:2])
    clock = FakeClock()
    settings = replace(RELAY_POLLING, idle_reconnect_s=60)
    # WHEN a follower follows it
    follower = follow(chat_table, session_id, clock, settings=settings)
    stream = read_stream(follower.events(), clock)
    # THEN keep-alives did not count as something to send: 60 s after the token, the stream ends with a reconnect
    # naming where to resume, long before the function's deadline
    assert stream.kinds == ["token", "reconnect"]
    assert stream.comments == ["keep-alive"] * 5
    token, reconnect = stream.events
    assert reconnect.json() == {"events_url": f"/sessions/{session_id}/turns/1/events", "last_event_id": 1}
    assert token.at is not None and reconnect.at is not None
    assert 60.0 <= reconnect.at - token.at <= 60.0 + settings.poll_max_s
    assert follower.stats.outcome is StreamOutcome.RECONNECT


def test_records_that_keep_coming_are_never_cut_by_the_idle_bound(chat_table: ChatTable, session_id: str) -> None:
    # GIVEN a turn whose records come 40 s apart for four minutes (slower than keep-alives, within the idle bound)
    records = turn_records(session_id, 1, [f" w{i}" for i in range(6)])
    chat_table.put_records(records[:1])
    clock = FakeClock()
    for i, record in enumerate(records[1:], start=1):
        clock.at(40.0 * i, lambda record=record: chat_table.put_records([record]))
    # WHEN a follower follows it with a 60 s idle bound (polling at most 5 s apart: four minutes of fake time)
    settings = replace(FAST, idle_reconnect_s=60, poll_max_s=5)
    stream = read_stream(follow(chat_table, session_id, clock, settings=settings).events())
    # THEN it follows to the end of the turn
    assert stream.kinds == ["token"] * 6 + ["done"]


def test_a_turn_that_has_not_started_ends_at_the_start_timeout_not_the_idle_bound(
    chat_table: ChatTable, session_id: str
) -> None:
    # GIVEN a turn without any record, and an idle bound shorter than the start timeout
    clock = FakeClock()
    settings = replace(RELAY_POLLING, idle_reconnect_s=5, start_timeout_s=30)
    # WHEN a follower follows it THEN it waits for the start as long as the start timeout says, then ends in error
    stream = read_stream(follow(chat_table, session_id, clock, settings=settings, ends_unstarted=True).events(), clock)
    assert stream.kinds == ["error"]
    assert stream.events[0].json()["code"] == "timeout"
    assert stream.events[0].at is not None and stream.events[0].at >= 30.0


def test_resuming_after_a_last_event_id_sends_no_duplicate_and_no_gap(chat_table: ChatTable, session_id: str) -> None:
    # GIVEN a finished turn of five tokens
    write_turn(chat_table, session_id, 1, ["a", "b", "c", "d", "e"])
    # WHEN a client resumes after event 2
    stream = read_stream(follow(chat_table, session_id, FakeClock(), after=2).events())
    # THEN it gets exactly the events after 2
    assert stream.ids == [3, 4, 5, 6]
    assert stream.text == "cde"


def test_resuming_from_zero_is_the_whole_turn(chat_table: ChatTable, session_id: str) -> None:
    # GIVEN a finished turn
    write_turn(chat_table, session_id, 1, ["a", "b"])
    # WHEN a client resumes after id 0 (the start record, which is no event)
    stream = read_stream(follow(chat_table, session_id, FakeClock(), after=0).events())
    # THEN it gets the whole reply
    assert stream.ids == [1, 2, 3]


def test_resuming_at_the_ending_sends_the_ending_again(chat_table: ChatTable, session_id: str) -> None:
    # GIVEN a finished turn whose done event is id 3
    write_turn(chat_table, session_id, 1, ["a", "b"])
    # WHEN a client resumes after id 3
    stream = read_stream(follow(chat_table, session_id, FakeClock(), after=3).events())
    # THEN the stream still ends with exactly one done, the same one
    assert stream.kinds == ["done"] and stream.ids == [3]


def test_resuming_past_the_end_of_a_finished_turn_ends_at_once(chat_table: ChatTable, session_id: str) -> None:
    # GIVEN a finished turn of three events
    write_turn(chat_table, session_id, 1, ["a", "b"], stop_reason=StopReason.MAX_TOKENS)
    clock = FakeClock()
    # WHEN a client claims to have event 99
    stream = read_stream(follow(chat_table, session_id, clock, after=99).events(), clock)
    # THEN it gets the turn's ending rebuilt from the turn item, without waiting for a timeout
    assert stream.kinds == ["done"]
    assert stream.events[0].json()["stop_reason"] == StopReason.MAX_TOKENS
    assert clock.t < FAST.gap_timeout_s


def test_a_terminal_record_behind_its_turn_item_is_waited_for(chat_table: ChatTable, session_id: str) -> None:
    # GIVEN a turn already completed in the table whose terminal token item shows up 3 s later
    records = turn_records(session_id, 1, ["a"])
    chat_table.turns.end_from_stream(records[-1], "a")
    chat_table.put_records(records[:-1])
    clock = FakeClock()
    clock.at(3.0, lambda: chat_table.put_records(records[-1:]))
    # WHEN a client follows it
    stream = read_stream(follow(chat_table, session_id, clock).events())
    # THEN it gets the real done event, with its id
    assert stream.kinds == ["token", "done"] and stream.ids == [1, 2]


def test_a_terminal_record_that_never_shows_up_is_rebuilt_from_the_turn(chat_table: ChatTable, session_id: str) -> None:
    # GIVEN a turn completed as cancelled in the table whose terminal token item never arrives
    records = turn_records(session_id, 1, ["a"], stop_reason=StopReason.CANCELLED)
    chat_table.turns.end_from_stream(records[-1], "a")
    chat_table.put_records(records[:-1])
    # WHEN a client follows it
    stream = read_stream(follow(chat_table, session_id, FakeClock()).events())
    # THEN the stream still ends with done / cancelled
    assert stream.kinds == ["token", "done"]
    assert stream.of("done")[0].json() == {
        "stop_reason": StopReason.CANCELLED,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


def test_an_error_record_ends_the_stream_with_its_error(chat_table: ChatTable, session_id: str) -> None:
    # GIVEN a turn that failed mid-stream
    error = ErrorInfo("model_stream_error", "modelStreamErrorException: boom", True)
    write_turn(chat_table, session_id, 1, ["a", "b"], error=error)
    # WHEN a client follows it
    stream = read_stream(follow(chat_table, session_id, FakeClock()).events())
    # THEN the partial reply, then the error with its id and payload
    assert stream.kinds == ["token", "token", "error"]
    assert stream.events[-1].id == "3"
    assert stream.events[-1].json() == {
        "code": "model_stream_error",
        "message": "modelStreamErrorException: boom",
        "retryable": True,
    }


def test_a_turn_stuck_in_progress_past_the_stale_bound_ends_with_timeout(
    chat_table: ChatTable, session_id: str
) -> None:
    # GIVEN a turn that started and produced one token 961 s ago, and nothing since
    chat_table.put_records(turn_records(session_id, 1, ["a"])[:2])
    clock = FakeClock(wall_base_ms=chat_table.now_ms() + 961_000)
    # WHEN a client attaches to it
    stream = read_stream(follow(chat_table, session_id, clock).events())
    # THEN it gets what exists, then error "timeout"
    assert stream.kinds == ["token", "error"]
    assert stream.events[-1].json()["code"] == "timeout"


def test_two_followers_see_the_same_events(chat_table: ChatTable, session_id: str) -> None:
    # GIVEN a turn whose records trickle in
    records = turn_records(session_id, 1, ["x", "y", "z"])
    clock = FakeClock()
    for index, record in enumerate(records):
        clock.at(0.5 * index, lambda record=record: chat_table.put_records([record]))
    # WHEN two clients follow it at once (their polls interleaved)
    first = follow(chat_table, session_id, clock).events()
    second = follow(chat_table, session_id, clock).events()
    chunks: dict[int, list[str]] = {0: [], 1: []}
    live = {0: first, 1: second}
    while live:
        for index, body in list(live.items()):
            try:
                chunks[index].append(next(body))
            except StopIteration:
                del live[index]
    # THEN both got the whole turn, identically
    one, two = read_stream(chunks[0]), read_stream(chunks[1])
    assert one.events == two.events
    assert one.text == "xyz" and one.ids == [1, 2, 3, 4]


def test_long_turns_are_read_page_by_page_without_losing_records(chat_table: ChatTable, session_id: str) -> None:
    # GIVEN a finished turn of 40 tokens and a page size of 7
    words = [f"w{i} " for i in range(40)]
    write_turn(chat_table, session_id, 1, words)
    # WHEN a client follows it
    stream = read_stream(follow(chat_table, session_id, FakeClock(), settings=replace(FAST, page_size=7)).events())
    # THEN every token arrives once, in order
    assert stream.ids == list(range(1, 42))
    assert stream.text == "".join(words)


def test_a_throttled_read_is_retried(chat_table: ChatTable, session_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a finished turn and a table that throttles the first read
    write_turn(chat_table, session_id, 1, ["ok"])
    real_query = chat_table.query_records
    calls: list[int] = []

    def flaky(*args: object, **kwargs: object) -> list[TokenRecord]:
        calls.append(1)
        if len(calls) == 1:
            raise Throttled("DynamoDB ProvisionedThroughputExceededException")
        return real_query(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(chat_table, "query_records", flaky)
    # WHEN a client follows it
    stream = read_stream(follow(chat_table, session_id, FakeClock()).events())
    # THEN the throttle is invisible to it
    assert stream.kinds == ["token", "done"]


def test_a_failing_read_ends_the_stream_with_a_retryable_error(
    chat_table: ChatTable, session_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a table whose reads fail
    def broken(*args: object, **kwargs: object) -> list[TokenRecord]:
        raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "Query")

    monkeypatch.setattr(chat_table, "query_records", broken)
    # WHEN a client follows a turn
    stream = read_stream(follow(chat_table, session_id, FakeClock()).events())
    # THEN it gets one error it may retry, not a broken stream
    assert stream.kinds == ["error"]
    assert stream.events[0].json()["code"] == "relay_error"
    assert stream.events[0].json()["retryable"] is True


def test_statistics_count_what_the_client_got(chat_table: ChatTable, session_id: str) -> None:
    # GIVEN a finished turn of two tokens
    chat_table.put_records(turn_records(session_id, 1, ["a", "b"]))
    follower = follow(chat_table, session_id, FakeClock())
    # WHEN the stream is consumed
    read_stream(follower.events())
    # THEN the stats say three events, two tokens, done
    assert (follower.stats.events_sent, follower.stats.tokens_sent, follower.stats.outcome) == (
        3,
        2,
        StreamOutcome.DONE,
    )
    assert follower.stats.first_token_at is not None


# ---------------------------------------------------------------------------------------------- pacing

CHUNKS = ["One", " two three four five", " six seven eight nine", " ten."]  # records as the proxy coalesces them


def test_records_text_goes_out_in_words_spread_over_the_cadence(chat_table: ChatTable, session_id: str) -> None:
    # GIVEN a turn whose first word comes at once, then a record of four words every 0.3 s
    records = turn_records(session_id, 1, CHUNKS)
    chat_table.put_records(records[:2])
    clock = FakeClock()
    for i, record in enumerate(records[2:], start=1):
        clock.at(0.3 * i, lambda record=record: chat_table.put_records([record]))
    # WHEN a client follows it
    stream = read_stream(follow(chat_table, session_id, clock, settings=replace(FAST, poll_max_s=0.5)).events(), clock)
    # THEN the text is exact, one word an event, with ids that name each word's end in its record
    tokens = stream.of("token")
    assert stream.text == "".join(CHUNKS)
    assert [event.json()["text"] for event in tokens[:5]] == ["One", " two", " three", " four", " five"]
    assert [event.id for event in tokens[:5]] == ["1", "2.4", "2.10", "2.15", "2"]
    # AND the first word went out at once, and a record's words are spread over the next 0.3 s instead of together
    assert tokens[0].at == 0.0
    second = [event.at for event in tokens[1:5]]
    assert all(at is not None for at in second)
    assert 0.3 <= second[0] <= 0.36  # type: ignore[operator]
    gaps = [b - a for a, b in zip(second, second[1:], strict=False)]  # type: ignore[operator]
    assert all(0.03 <= gap <= 0.12 for gap in gaps), gaps
    # AND the stream ends with done, its id the stop record's
    assert stream.kinds[-1] == "done" and stream.events[-1].id == "5"


def test_what_waits_goes_out_at_once_when_the_turn_ends(chat_table: ChatTable, session_id: str) -> None:
    # GIVEN a turn whose many-word record and its stop record appear together
    records = turn_records(session_id, 1, ["Hi", " a b c d e f g h"])
    chat_table.put_records(records[:2])
    clock = FakeClock()
    clock.at(0.3, lambda: chat_table.put_records(records[2:]))
    # WHEN a client follows it
    stream = read_stream(follow(chat_table, session_id, clock).events(), clock)
    # THEN the record's words all went out as soon as it was read, then done: nothing waits on a finished turn
    tokens = stream.of("token")
    assert stream.text == "Hi a b c d e f g h" and len(tokens) == 9
    assert len({event.at for event in stream.events[1:]}) == 1


def test_without_pacing_each_record_is_one_event(chat_table: ChatTable, session_id: str) -> None:
    # GIVEN a finished turn, followed with pacing off (?pace=0, or PACE_TEXT=false)
    write_turn(chat_table, session_id, 1, CHUNKS)
    # WHEN a client follows it
    stream = read_stream(follow(chat_table, session_id, FakeClock(), settings=replace(FAST, pace=False)).events())
    # THEN each record is one event with its seq as id
    assert [(event.json()["text"], event.id) for event in stream.of("token")] == [
        (chunk, str(seq)) for seq, chunk in enumerate(CHUNKS, start=1)
    ]


def test_resuming_from_any_piece_gives_exactly_the_text_after_it(chat_table: ChatTable, session_id: str) -> None:
    # GIVEN a turn read once from the start, word by word
    write_turn(chat_table, session_id, 1, CHUNKS)
    whole = read_stream(follow(chat_table, session_id, FakeClock()).events())
    tokens = whole.of("token")
    assert len(tokens) > len(CHUNKS)  # words inside records: pieces with ids <seq>.<offset>
    for index, event in enumerate(tokens):
        assert event.id is not None
        # WHEN a client resumes from that piece's id
        resumed = read_stream(follow(chat_table, session_id, FakeClock(), after=Position.parse(event.id)).events())
        # THEN it gets exactly the text after it: no repeat, no gap, and the same ids as the first reading
        assert resumed.text == "".join(e.json()["text"] for e in tokens[index + 1 :])
        assert [e.id for e in resumed.of("token")] == [e.id for e in tokens[index + 1 :]]
        assert resumed.kinds[-1] == "done"


def test_resuming_mid_record_without_pacing_sends_the_rest_of_the_record(
    chat_table: ChatTable, session_id: str
) -> None:
    # GIVEN a finished turn; a client has the first 10 characters of record 2 (" two three")
    write_turn(chat_table, session_id, 1, CHUNKS)
    # WHEN it resumes from "2.10" with pacing off
    after = Position(2, 10)
    stream = read_stream(
        follow(chat_table, session_id, FakeClock(), after=after, settings=replace(FAST, pace=False)).events()
    )
    # THEN the rest of record 2 comes as one event with the record's id, then the later records
    assert [(event.json()["text"], event.id) for event in stream.of("token")] == [
        (" four five", "2"),
        (CHUNKS[2], "3"),
        (CHUNKS[3], "4"),
    ]


def test_a_reconnect_names_where_the_paced_client_is(chat_table: ChatTable, session_id: str) -> None:
    # GIVEN a turn in progress with a many-word record; the invocation is near its end
    chat_table.put_records(turn_records(session_id, 1, ["Hi", " a b c d"])[:3])
    clock = FakeClock(deadline_s=FAST.reconnect_margin_s + 0.05)
    # WHEN a client follows it and the deadline comes while the record's words are being spread (0.3 s: the cadence
    # is not known yet)
    stream = read_stream(follow(chat_table, session_id, clock).events(), clock)
    # THEN what waited went out at once before reconnect, which names the last record the client now has whole
    assert stream.text == "Hi a b c d"
    assert stream.events[-1].at is not None and stream.events[-1].at < 0.2
    assert stream.events[-1].at == stream.events[-2].at
    assert stream.kinds[-1] == "reconnect" and stream.events[-1].json()["last_event_id"] == 2


def test_a_reconnect_before_a_resumed_record_is_read_names_the_piece(
    chat_table: ChatTable, session_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a client resuming from inside record 2 ("2.4"), a table that throttles every read, and an invocation
    # whose time is already within the reconnect margin
    write_turn(chat_table, session_id, 1, CHUNKS)

    def throttled(*args: object, **kwargs: object) -> list[TokenRecord]:
        raise Throttled("DynamoDB ProvisionedThroughputExceededException")

    monkeypatch.setattr(chat_table, "query_records", throttled)
    clock = FakeClock(deadline_s=FAST.reconnect_margin_s - 1)
    # WHEN it follows the turn
    stream = read_stream(follow(chat_table, session_id, clock, after=Position(2, 4)).events())
    # THEN reconnect names exactly where the client is: inside record 2, as the piece's id (a string)
    assert stream.kinds == ["reconnect"]
    assert stream.events[0].json()["last_event_id"] == "2.4"


def test_the_start_and_the_first_delta_teach_no_cadence(chat_table: ChatTable, session_id: str) -> None:
    # GIVEN a turn whose start record and first word are found by two polls 20 ms apart (both are written at once),
    # then records of five words every 0.3 s (the proxy's flush timer)
    chunks = ["Hi", " a b c d e", " f g h i j", " k l m n o"]
    records = turn_records(session_id, 1, chunks)
    clock = FakeClock()
    chat_table.put_records(records[:1])
    clock.at(0.02, lambda: chat_table.put_records(records[1:2]))
    for i, record in enumerate(records[2:], start=1):
        clock.at(0.02 + 0.3 * i, lambda record=record: chat_table.put_records([record]))
    # WHEN a client follows it
    stream = read_stream(follow(chat_table, session_id, clock, settings=replace(FAST, poll_max_s=0.5)).events(), clock)
    # THEN the second record's words are spread over about the records' interval, not over the 20 ms between the
    # start and the first word: its last word goes out shortly before the next record, not long before it
    assert stream.text == "".join(chunks)
    second = [event.at for event in stream.of("token") if event.id is not None and event.id.startswith("2")]
    third = next(event.at for event in stream.of("token") if event.id is not None and event.id.startswith("3"))
    assert len(second) == 5 and all(at is not None for at in second) and third is not None
    assert third - second[-1] <= 0.1, (second, third)  # type: ignore[operator]
