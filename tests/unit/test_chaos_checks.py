"""The chaos run's checks: a chat's stream and stored turn against the model's reply, the DLQ against the poison
put, and the ``chaos:`` line. No stack: streams and turns are built here as the client and the table give them."""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import TYPE_CHECKING

import pytest

from chaos.checks import (
    DUPLICATE_DROPPED,
    ChaosResult,
    ChatCounts,
    DlqCounts,
    DuplicateCounts,
    StoredTurn,
    check_chat,
    check_dlq,
    compare_text,
    is_dropped_duplicate,
    poison_payload_of,
)
from chaos.client import StreamSeen
from chaos.plan import ChatPlan
from chatstream.dlq import DlqKind
from chatstream.records import ErrorInfo, TokenRecord, ToolCallRef, Usage
from chatstream.status import StopReason, TurnStatus
from chatstream.table import Turn
from chatstream.tools import ToolCall
from chatstream_local.bedrock.model import split_deltas
from chatstream_ops.redrive import LostRange, MessageResult, RedriveReport, RedriveStatus
from tests.builders import opening_records, turn_records

if TYPE_CHECKING:
    from collections.abc import Callable

SESSION = "s-chaos"
LONG = ChatPlan(index=3, message="/long 5", drop_after=None)  # the reply " w1 w2 w3 w4 w5" in five deltas
FAILING = ChatPlan(index=4, message="/error-after 2", drop_after=1)  # two deltas, then a model stream error


def streamed(
    plan: ChatPlan, deltas: int | None = None, *, end: str = "done", ids: list[int] | None = None
) -> StreamSeen:
    """What a client saw: the first ``deltas`` of the reply (all by default) as token events, then ``end``."""
    texts = split_deltas(plan.expected_text)[:deltas]
    seen = StreamSeen(session_id=SESSION, turn=1, events_url="/events")
    seen.tokens = list(zip(ids or range(1, len(texts) + 1), texts, strict=True))
    if end == "done":
        seen.done = {"stop_reason": "end_turn"}
    elif end:
        seen.error = {"code": end, "retryable": end != "model_stream_error"}
    return seen


def stored(
    plan: ChatPlan, deltas: int | None = None, *, status: TurnStatus = TurnStatus.COMPLETE, code: str = ""
) -> StoredTurn:
    """The turn in the table: start, the first ``deltas`` of the reply, and a terminal record unless in progress."""
    texts = split_deltas(plan.expected_text)[:deltas]
    if status is TurnStatus.IN_PROGRESS:
        records = opening_records(SESSION, 1, texts)
    else:
        error = ErrorInfo(code, "it failed", True) if status is TurnStatus.ERROR else None
        records = turn_records(SESSION, 1, texts, error=error)
    turn = Turn(SESSION, 1, "user", status, error={"code": code, "message": "it failed"} if code else None)
    return StoredTurn(turn, tuple(records))


def test_an_exact_stream_of_a_finished_turn_counts_as_exact_and_nothing_else() -> None:
    # GIVEN a stream and a stored turn that both hold the whole reply
    # WHEN the chat is checked
    counts = check_chat(LONG, streamed(LONG), stored(LONG), killed=False)

    # THEN it is one exact stream, with nothing lost, duplicated or unfinished
    assert counts == ChatCounts(exact_streams=1)


def test_a_turn_stored_without_its_start_is_contiguous_but_not_without_a_later_record() -> None:
    # GIVEN the stored turn without its start (refused in the call it shared with the first delta), or without a delta
    whole = stored(LONG)
    no_start = StoredTurn(whole.turn, whole.records[1:])
    no_delta = StoredTurn(whole.turn, whole.records[:2] + whole.records[3:])
    # THEN the first holds the whole reply; the second is not contiguous
    assert check_chat(LONG, streamed(LONG), no_start, killed=False) == ChatCounts(exact_streams=1)
    assert (no_start.contiguous, no_delta.contiguous) == (True, False)


def test_a_token_event_seen_twice_is_a_duplicated_token_and_not_exact() -> None:
    # GIVEN a stream whose resume repeated token 3
    seen = streamed(LONG)
    seen.tokens.insert(3, seen.tokens[2])

    counts = check_chat(LONG, seen, stored(LONG), killed=False)

    # THEN the stream is not exact; the repeated id counts, and the text is compared from its first difference:
    # the reply's two deltas after it count as lost, the stream's three after it as duplicated
    assert counts.exact_streams == 0
    assert (counts.lost_tokens, counts.duplicated_tokens) == (2, 1 + 3)
    assert counts.problems == (
        f"chat 3 ('/long 5', session {SESSION}): stream not exact "
        "(lost 2, duplicated 4, end {'stop_reason': 'end_turn'})",
    )


def test_a_token_id_seen_twice_with_the_reply_still_exact_is_a_duplicated_token() -> None:
    # GIVEN a stream whose text is the whole reply, but two of its token events carried the same id
    seen = streamed(LONG, ids=[1, 2, 2, 3, 4])

    counts = check_chat(LONG, seen, stored(LONG), killed=False)

    # THEN the repeated id alone makes it not exact: one duplicated token, nothing lost
    assert (counts.exact_streams, counts.lost_tokens, counts.duplicated_tokens) == (0, 0, 1)
    assert counts.problems == (
        f"chat 3 ('/long 5', session {SESSION}): stream not exact "
        "(lost 0, duplicated 1, end {'stop_reason': 'end_turn'})",
    )


def test_a_stream_missing_the_end_of_the_reply_loses_those_tokens() -> None:
    # GIVEN a stream that got three of five deltas and then done
    counts = check_chat(LONG, streamed(LONG, 3), stored(LONG), killed=False)

    # THEN two tokens are lost and it is not exact
    assert (counts.lost_tokens, counts.duplicated_tokens, counts.exact_streams) == (2, 0, 0)


def test_a_turn_still_in_progress_in_the_table_is_unfinished() -> None:
    # GIVEN an exact stream, but a table whose turn never got its terminal record
    counts = check_chat(LONG, streamed(LONG), stored(LONG, status=TurnStatus.IN_PROGRESS), killed=False)

    # THEN the turn is unfinished (and the stream still exact)
    assert (counts.unfinished_turns, counts.exact_streams) == (1, 1)
    assert counts.problems == (f"chat 3 ('/long 5', session {SESSION}): turn 1 not finished in the table",)


def test_table_text_that_differs_from_the_reply_counts_lost_tokens() -> None:
    # GIVEN a finished turn that stored only four of the five deltas
    counts = check_chat(LONG, streamed(LONG), stored(LONG, 4), killed=False)

    assert counts.lost_tokens == 1
    assert any("table text differs (lost 1, duplicated 0)" in problem for problem in counts.problems)


def _twice_terminal(records: tuple[TokenRecord, ...]) -> tuple[TokenRecord, ...]:
    return (*records, TokenRecord.stop(SESSION, 1, len(records), StopReason.END_TURN, Usage(1, 5), 99))


def _seq_skipped(records: tuple[TokenRecord, ...]) -> tuple[TokenRecord, ...]:
    return (*records[:-1], dataclasses.replace(records[-1], seq=records[-1].seq + 1))


def _record_after_terminal(records: tuple[TokenRecord, ...]) -> tuple[TokenRecord, ...]:
    return (*records, TokenRecord.reasoning(SESSION, 1, len(records), "late", 99))


@pytest.mark.parametrize(
    ("spoil", "shape"),
    [
        pytest.param(_twice_terminal, (True, 2, True), id="a second terminal record"),
        pytest.param(_seq_skipped, (False, 1, True), id="a seq missing before the terminal record"),
        pytest.param(_record_after_terminal, (True, 1, False), id="a record after the terminal record"),
    ],
)
def test_a_finished_turn_stored_with_its_records_out_of_shape_is_a_problem(
    spoil: Callable[[tuple[TokenRecord, ...]], tuple[TokenRecord, ...]], shape: tuple[bool, int, bool]
) -> None:
    # GIVEN a finished turn whose text is the whole reply, but whose records break one rule only: contiguous,
    # one terminal record, the terminal record last
    whole = stored(LONG)
    spoiled = StoredTurn(whole.turn, spoil(whole.records))
    assert spoiled.text == whole.text
    assert (spoiled.contiguous, spoiled.terminals, spoiled.ends_in_terminal) == shape

    counts = check_chat(LONG, streamed(LONG), spoiled, killed=False)

    # THEN the table is a problem, though its text is the reply and the stream is exact
    assert (counts.exact_streams, counts.lost_tokens, counts.duplicated_tokens) == (1, 0, 0)
    assert counts.problems == (
        f"chat 3 ('/long 5', session {SESSION}): records not contiguous with one terminal record",
    )


def test_a_token_lost_by_the_table_and_by_the_stream_counts_once() -> None:
    # GIVEN a turn that stored four of five deltas, and a stream that showed the same four (it reads the table)
    counts = check_chat(LONG, streamed(LONG, 4), stored(LONG, 4), killed=False)

    # THEN one token is lost, not two; both sides say so
    assert counts.lost_tokens == 1
    assert len(counts.problems) == 2


def test_a_generation_the_run_killed_and_the_reaper_ended_counts_as_killed() -> None:
    # GIVEN a chat whose proxy the run killed after two deltas: the reaper ended its turn, the stream says so
    turn = stored(LONG, 2, status=TurnStatus.ERROR, code="generation_failed")

    counts = check_chat(LONG, streamed(LONG, 2, end="generation_failed"), turn, killed=True)

    # THEN it is a generation the run killed: not lost tokens, not a problem
    assert counts == ChatCounts(killed_generations=1)


def test_a_killed_generation_whose_stream_went_stale_before_the_reaper_ended_it_counts_as_killed() -> None:
    # GIVEN the relay's stale-turn timeout ended the stream first; the reaper ended the turn later
    turn = stored(LONG, 2, status=TurnStatus.ERROR, code="generation_failed")

    counts = check_chat(LONG, streamed(LONG, 2, end="timeout"), turn, killed=True)

    assert counts == ChatCounts(killed_generations=1)


def test_a_killed_generation_that_had_put_its_terminal_record_is_an_exact_stream() -> None:
    # GIVEN a chat whose proxy the run killed after it had put the whole reply: its stop record ended the turn
    counts = check_chat(LONG, streamed(LONG), stored(LONG), killed=True)

    # THEN it is an exact stream, not a lost generation
    assert counts == ChatCounts(exact_streams=1)


@pytest.mark.parametrize("end", ["generation_failed", "timeout"])
def test_a_killed_generation_whose_stream_was_told_it_was_lost_while_the_table_holds_it_whole_is_not_exact(
    end: str,
) -> None:
    # GIVEN a killed proxy's turn whose stream ended on a lost generation's error (the reaper's, or the stale-turn
    # timeout) after two deltas, and whose stop record, put before the proxy died, then completed the turn
    counts = check_chat(LONG, streamed(LONG, 2, end=end), stored(LONG), killed=True)

    # THEN nothing was lost but the stream: it is no lost generation, and the stream that said so is not exact
    assert counts.generator_lost == 0
    assert (counts.exact_streams, counts.lost_tokens, counts.unfinished_turns) == (0, 3, 0)
    assert counts.problems == (
        f"chat 3 ('/long 5', session {SESSION}): stream not exact (lost 3, duplicated 0, end "
        f"{{'code': '{end}', 'retryable': True}})",
    )


def test_a_killed_generation_the_table_ended_as_stale_counts_as_killed() -> None:
    # GIVEN a killed proxy's turn the table ended with the stale-turn timeout (its session went on), as the stream did
    turn = stored(LONG, 2, status=TurnStatus.ERROR, code="timeout")

    counts = check_chat(LONG, streamed(LONG, 2, end="timeout"), turn, killed=True)

    # THEN the table shows the generation lost: a generation the run killed, its stream a clean prefix
    assert counts == ChatCounts(killed_generations=1)


def test_a_generation_lost_without_a_kill_is_counted_apart_and_is_a_problem() -> None:
    # GIVEN a turn the reaper ended whose proxy the run did not kill (it failed for another reason)
    turn = stored(LONG, 2, status=TurnStatus.ERROR, code="generation_failed")

    counts = check_chat(LONG, streamed(LONG, 2, end="generation_failed"), turn, killed=False)

    # THEN it is another lost generation, and says why the turn ended
    assert (counts.killed_generations, counts.other_lost_generations, counts.generator_lost) == (0, 1, 1)
    assert counts.problems == (
        f"chat 3 ('/long 5', session {SESSION}): its generation was lost, and the run did not kill its proxy "
        "(it failed)",
    )


def test_a_killed_generation_whose_turn_never_ended_is_unfinished_and_not_exact() -> None:
    # GIVEN a killed proxy whose turn nobody ended: still in progress; its stream ended with the stale timeout
    turn = stored(LONG, 2, status=TurnStatus.IN_PROGRESS)

    counts = check_chat(LONG, streamed(LONG, 2, end="timeout"), turn, killed=True)

    # THEN it is not excused as a lost generation: the turn is unfinished and the stream lost three tokens
    assert counts.generator_lost == 0
    assert (counts.unfinished_turns, counts.exact_streams, counts.lost_tokens) == (1, 0, 3)


def test_a_lost_generation_whose_stream_is_not_a_prefix_is_a_problem() -> None:
    # GIVEN a lost generation whose stream skipped the first delta
    seen = streamed(LONG, 3, end="generation_failed")
    del seen.tokens[0]

    counts = check_chat(LONG, seen, stored(LONG, 3, status=TurnStatus.ERROR, code="generation_failed"), killed=True)

    assert counts.killed_generations == 1
    assert counts.problems == (
        f"chat 3 ('/long 5', session {SESSION}): a lost generation's stream is not a prefix ending in its error "
        "(end {'code': 'generation_failed', 'retryable': True})",
    )


def test_a_lost_generation_whose_records_skip_a_seq_is_a_problem() -> None:
    # GIVEN a lost generation whose text is a clean prefix and which ends in one terminal record, but whose
    # error record came at seq 4 after the deltas' seq 2 (seq 3 missing)
    turn = stored(LONG, 2, status=TurnStatus.ERROR, code="generation_failed")
    skipped = StoredTurn(turn.turn, (*turn.records[:-1], dataclasses.replace(turn.records[-1], seq=4)))
    assert (skipped.terminals, skipped.ends_in_terminal, skipped.contiguous) == (1, True, False)

    counts = check_chat(LONG, streamed(LONG, 2, end="generation_failed"), skipped, killed=True)

    # THEN its records are not a clean prefix, though the stream is
    assert counts.killed_generations == 1
    assert counts.problems == (
        f"chat 3 ('/long 5', session {SESSION}): a lost generation's records are not a clean prefix",
    )


def test_a_lost_generation_whose_stream_repeated_an_id_is_a_problem() -> None:
    # GIVEN a lost generation whose stream's text is a clean prefix ending in its error, but whose two token events
    # carried the same id
    turn = stored(LONG, 2, status=TurnStatus.ERROR, code="generation_failed")

    counts = check_chat(LONG, streamed(LONG, 2, end="generation_failed", ids=[1, 1]), turn, killed=True)

    # THEN its stream is a problem
    assert counts.killed_generations == 1
    assert counts.problems == (
        f"chat 3 ('/long 5', session {SESSION}): a lost generation's stream is not a prefix ending in its error "
        "(end {'code': 'generation_failed', 'retryable': True})",
    )


def test_a_model_error_where_the_plan_says_so_is_exact_and_counted() -> None:
    # GIVEN a chat planned to fail after two deltas, dropped once and resumed
    seen = streamed(FAILING, end="model_stream_error")
    seen.drops, seen.resumes = 1, 1

    counts = check_chat(
        FAILING, seen, stored(FAILING, status=TurnStatus.ERROR, code="model_stream_error"), killed=False
    )

    # THEN it is exact, a model error, a drop and one resume
    assert counts == ChatCounts(exact_streams=1, model_errors=1, drops=1, resumes=1)


def test_a_planned_drop_that_did_not_happen_is_not_counted() -> None:
    # GIVEN a chat planned to drop after one token whose stream ended before its client dropped it
    seen = streamed(FAILING, end="model_stream_error")

    counts = check_chat(
        FAILING, seen, stored(FAILING, status=TurnStatus.ERROR, code="model_stream_error"), killed=False
    )

    assert counts.drops == 0


def test_a_model_error_ending_with_another_code_is_not_exact() -> None:
    seen = streamed(FAILING, end="relay_error")

    counts = check_chat(
        FAILING, seen, stored(FAILING, status=TurnStatus.ERROR, code="model_stream_error"), killed=False
    )

    assert (counts.model_errors, counts.exact_streams) == (1, 0)


def test_a_planned_model_error_the_client_never_saw_is_not_counted() -> None:
    # GIVEN a chat planned to fail whose client gave up before the error event (the table has the model's error)
    seen = streamed(FAILING, end="")
    seen.failure = "GET events 502: bad gateway"

    counts = check_chat(
        FAILING, seen, stored(FAILING, status=TurnStatus.ERROR, code="model_stream_error"), killed=False
    )

    # THEN no model error is counted, and the stream is not exact
    assert (counts.model_errors, counts.exact_streams) == (0, 0)


def test_a_client_that_got_no_stream_is_a_failed_chat_not_lost_tokens() -> None:
    # GIVEN a chat whose POST /chat never gave a stream (no turn was started for it)
    seen = StreamSeen(failure="POST /chat 503: busy", http_retries=7)

    counts = check_chat(LONG, seen, StoredTurn(), killed=False)

    # THEN it is a failed chat, with its retries, and no tokens of a turn that does not exist
    assert counts == ChatCounts(
        failed_chats=1, http_retries=7, problems=("chat 3 ('/long 5', session -): no stream: POST /chat 503: busy",)
    )


def test_a_client_that_gave_up_mid_turn_is_not_exact_and_loses_what_it_did_not_see() -> None:
    # GIVEN a client that saw two deltas, then gave up on a 502; the turn is complete in the table
    seen = streamed(LONG, 2, end="")
    seen.failure = 'GET events 502: {"Message":"Internal Server Error"}'

    counts = check_chat(LONG, seen, stored(LONG), killed=False)

    # THEN the stream is not exact, and the three deltas it did not see are lost to its user
    assert (counts.exact_streams, counts.lost_tokens, counts.unfinished_turns) == (0, 3, 0)
    assert counts.problems == (
        f"chat 3 ('/long 5', session {SESSION}): stream not exact (lost 3, duplicated 0, "
        """end GET events 502: {"Message":"Internal Server Error"})""",
    )


def test_the_retries_a_client_made_are_counted() -> None:
    seen = streamed(LONG)
    seen.relay_retries, seen.http_retries = 2, 3

    counts = check_chat(LONG, seen, stored(LONG), killed=False)

    assert counts == ChatCounts(exact_streams=1, relay_retries=2, http_retries=3)


@pytest.mark.parametrize(
    ("received", "lost", "duplicated"),
    [
        ("a b c", 0, 0),
        ("a b", 1, 0),
        ("a b c c", 0, 1),
        ("a b b c", 1, 2),
        ("", 3, 0),
    ],
)
def test_compare_text_counts_deltas_lost_and_extra(received: str, lost: int, duplicated: int) -> None:
    assert compare_text("a b c", received) == (lost, duplicated)


def poison_message(payload: bytes) -> str:
    return json.dumps({"kind": "poison-record", "payload": base64.b64encode(payload).decode(), "sequenceNumber": "1"})


def test_the_dlq_holding_exactly_the_poison_is_counted_as_such() -> None:
    # GIVEN a DLQ with both poison records and one on-failure pointer the redrive could not restore
    on_failure = json.dumps({"KinesisBatchInfo": {"shardId": "s"}, "requestContext": {}})
    redrive = RedriveReport(
        dry_run=False,
        results=[
            MessageResult("m1", DlqKind.ON_FAILURE, RedriveStatus.REDRIVEN, "ok", 3),
            MessageResult(
                "m2", DlqKind.ON_FAILURE, RedriveStatus.LEFT, "lost", 0, [LostRange("shard-1", "5", "9", "trimmed")]
            ),
        ],
    )

    dlq = check_dlq([poison_message(b"p0"), poison_message(b"p1"), on_failure], [b"p0", b"p1"], redrive)

    # THEN the poison is all there, the pointer is unexpected, only the pointer redriven counts as such, and the
    # lost range is a problem
    assert (dlq.poison_expected, dlq.poison_in_dlq, dlq.unexpected_dlq, dlq.onfailure_redriven) == (2, 2, 1, 1)
    assert dlq.problems == ("redrive lost ranges: shard-1 sequence numbers 5..9 (trimmed)",)


def test_poison_the_run_did_not_put_is_unexpected_and_what_is_missing_is_not_counted() -> None:
    dlq = check_dlq([poison_message(b"other")], [b"p0"], RedriveReport(dry_run=False))

    assert (dlq.poison_in_dlq, dlq.unexpected_dlq) == (0, 1)


@pytest.mark.parametrize("body", ["not json", "[1, 2]", '{"kind": "poison-record"}', '{"kind": "other"}'])
def test_a_message_that_is_not_a_whole_poison_record_has_no_payload(body: str) -> None:
    assert poison_payload_of(body) is None


def result(
    dlq: DlqCounts | None = None,
    faults: dict[str, int] | None = None,
    run_problems: tuple[str, ...] = (),
    proxy_kills: int = 4,
    duplicates: DuplicateCounts | None = None,
    duplicated_generations: int = 0,
    **changes: object,
) -> ChaosResult:
    """A run of two chats (one exact, one killed generation) with the given changes to its added-up counts."""
    chats = [
        ChatCounts(
            exact_streams=1,
            drops=1,
            resumes=2,
            mid_record_resumes=1,
            tool_chats=1,
            mid_call_resumes=1,
            http_retries=5,
            cut_posts=2,
        ),
        ChatCounts(killed_generations=1, relay_retries=3),
    ]
    faults = {"kinesis_throttle": 88, "dynamodb_read_throttle": 197} if faults is None else faults
    run = ChaosResult.of(
        chats,
        dlq or DlqCounts(poison_expected=5, poison_in_dlq=5),
        proxy_kills=proxy_kills,
        consumer_kills=8,
        faults=faults,
        duplicates=duplicates or DuplicateCounts(delivered=3, dropped=3),
        run_problems=run_problems,
        duplicated_generations=duplicated_generations,
    )
    return dataclasses.replace(run, totals=dataclasses.replace(run.totals, **changes))


def test_the_line_says_every_count_in_its_order() -> None:
    assert result().line() == (
        "chaos: chats=2 lost_tokens=0 duplicated_tokens=0 wrong_tool_calls=0 unfinished_turns=0 failed_chats=0 "
        "exact_streams=1/1 "
        "generator_lost=killed:1,other:0 model_errors=0 drops=1 resumes=2 mid_record_resumes=1 tool_chats=1 "
        "mid_call_resumes=1 relay_retries=3 http_retries=5 cut_posts=2 duplicated_generations=0 "
        "poison=5/5 unexpected_dlq=0 redriven_onfailure=0 kills=proxy:4,consumer:8 duplicates=3/3 "
        "faults=dynamodb_read_throttle:197,kinesis_throttle:88"
    )
    assert result(faults={}).line().endswith(" faults=none")


def test_a_run_holds_only_when_every_stream_is_exact_or_a_killed_generation_and_the_dlq_is_exactly_the_poison() -> None:
    assert result().ok
    assert not result(lost_tokens=1).ok
    assert not result(duplicated_tokens=1).ok
    assert not result(wrong_tool_calls=1).ok
    assert not result(unfinished_turns=1).ok
    assert not result(failed_chats=1).ok
    assert not result(exact_streams=0).ok
    assert not result(other_lost_generations=1).ok
    assert not result(DlqCounts(poison_expected=5, poison_in_dlq=4)).ok
    assert not result(DlqCounts(poison_expected=5, poison_in_dlq=5, unexpected_dlq=1)).ok
    assert not result(DlqCounts(poison_expected=5, poison_in_dlq=5, problems=("redrive lost ranges: x",))).ok
    assert not result(problems=("chat 0: something",)).ok
    assert not result(run_problems=("the stack did not settle within 60 s: 1 turns not finished (chat 3)",)).ok
    # AND a POST sent again that started a second turn fails it, with a problem that says so
    twice = result(duplicated_generations=1)
    assert not twice.ok and "a request sent again started a second turn" in twice.problems[0]


@pytest.mark.parametrize(
    ("delivered", "dropped", "why"),
    [
        (3, 2, "a duplicate was generated again"),
        (3, 4, "a delivery was no duplicate"),
        (0, 1, "a delivery was no duplicate"),
    ],
)
def test_a_run_fails_when_the_proxy_did_not_drop_exactly_the_events_delivered_twice(
    delivered: int, dropped: int, why: str
) -> None:
    # GIVEN a run whose every chat held, but the proxy dropped more or fewer deliveries than were duplicates
    run = result(duplicates=DuplicateCounts(delivered=delivered, dropped=dropped))

    # THEN it fails, says why, and its line shows both counts
    assert not run.ok
    assert run.problems == (f"{delivered} proxy events delivered twice, {dropped} dropped as duplicates ({why})",)
    assert f" duplicates={delivered}/{dropped} " in run.line()


@pytest.mark.parametrize("dropped", [2, 3])
def test_a_duplicate_delivery_that_failed_may_or_may_not_have_been_dropped(dropped: int) -> None:
    # GIVEN a run in which one of three second deliveries failed (its environment killed), before or after the proxy
    # logged the drop
    run = result(duplicates=DuplicateCounts(delivered=3, dropped=dropped, failed=1))

    # THEN it holds, and its line shows the failed delivery
    assert run.ok, run.problems
    assert f" duplicates=3/{dropped},failed:1 " in run.line()


@pytest.mark.parametrize("dropped", [3, 5, 7])
def test_the_relays_second_events_for_joined_turns_may_each_be_dropped_and_no_more(dropped: int) -> None:
    # GIVEN three second deliveries, and four second events the relay sent for turns a retried POST joined
    run = result(duplicates=DuplicateCounts(delivered=3, dropped=dropped, reinvoked=4))
    # THEN up to seven drops hold, and the line shows the relay's
    assert run.ok, run.problems
    assert f" duplicates=3/{dropped},reinvoked:4 " in run.line()
    # AND an eighth drop is a delivery that was no duplicate
    assert not result(duplicates=DuplicateCounts(delivered=3, dropped=8, reinvoked=4)).ok


@pytest.mark.parametrize(
    ("dropped", "why"), [(1, "a duplicate was generated again"), (4, "a delivery was no duplicate")]
)
def test_failed_duplicate_deliveries_excuse_no_more_than_themselves(dropped: int, why: str) -> None:
    # GIVEN three second deliveries, one of which failed, and the proxy dropping too few or too many
    run = result(duplicates=DuplicateCounts(delivered=3, dropped=dropped, failed=1))

    # THEN the run fails
    assert not run.ok
    assert run.problems == (
        f"3 proxy events delivered twice (1 of them failed), {dropped} dropped as duplicates ({why})",
    )


def test_a_run_without_duplicates_holds_with_none_dropped() -> None:
    assert result(duplicates=DuplicateCounts()).ok


@pytest.mark.parametrize(
    ("line", "dropped"),
    [
        (json.dumps({"level": "WARNING", "message": DUPLICATE_DROPPED, "session_id": "s", "turn": 1}), True),
        (json.dumps({"level": "WARNING", "message": "duplicate invocation"}), False),
        (f"[WARNING] {DUPLICATE_DROPPED}", False),
        ('{"message": "' + DUPLICATE_DROPPED, False),
    ],
)
def test_only_the_proxys_json_line_with_that_message_is_a_dropped_duplicate(line: str, dropped: bool) -> None:
    assert is_dropped_duplicate(line) is dropped


def test_more_lost_generations_than_proxies_killed_is_a_problem() -> None:
    # GIVEN a run that counts one killed generation but killed no proxy
    run = result(proxy_kills=0)

    assert not run.ok
    assert run.problems == ("1 generations lost, more than the 0 proxies the run killed",)


def test_the_exact_streams_are_out_of_every_chat_but_the_killed_generations() -> None:
    # GIVEN a run whose other lost generation, and failed chat, stay in the denominator
    run = result(other_lost_generations=1, failed_chats=1)

    assert "exact_streams=1/1 " in run.line()
    assert dataclasses.replace(run, chats=4).possible_exact == 3


def test_the_runs_problems_come_first_then_the_redrives_then_the_duplicates_then_the_chats() -> None:
    chats = [ChatCounts(problems=("chat 0: a",)), ChatCounts(problems=("chat 1: b",))]
    dlq = DlqCounts(problems=("redrive lost ranges: x",))

    run = ChaosResult.of(
        chats,
        dlq,
        proxy_kills=0,
        consumer_kills=0,
        faults={},
        duplicates=DuplicateCounts(delivered=1),
        run_problems=("did not settle",),
    )

    assert run.problems == (
        "did not settle",
        "redrive lost ranges: x",
        "1 proxy events delivered twice, 0 dropped as duplicates (a duplicate was generated again)",
        "chat 0: a",
        "chat 1: b",
    )


# ------------------------------------------------------------------------------- tool calls

CALLS = ChatPlan(
    index=5,
    message='Checking.\n/call get_weather {"city": "Paris"}\n/call get_time',
    drop_after=None,
    tools=("get_weather", "get_time"),
)


def tool_records(
    plan: ChatPlan, calls: list[ToolCall], *, ended: bool = True, cut: int | None = None
) -> list[TokenRecord]:
    """The turn's records as the proxy writes them: its text, then each call's arguments and end, then ``tool_use``;
    ``cut``: the last call's arguments cut after that many characters, without its end, and no terminal record."""
    records = opening_records(SESSION, 1, split_deltas(plan.expected_text))
    for index, call in enumerate(calls):
        ref = ToolCallRef(index, call.id, call.name)
        last = index == len(calls) - 1
        text = call.arguments[:cut] if cut is not None and last else call.arguments
        records.append(TokenRecord.tool_use(SESSION, 1, len(records), ref, text, 9, end=not (cut is not None and last)))
    if ended:
        records.append(TokenRecord.stop(SESSION, 1, len(records), StopReason.TOOL_USE, Usage(1, 1), 9))
    return records


def tool_turn(plan: ChatPlan, calls: list[ToolCall], item_calls: list[ToolCall] | None = None) -> StoredTurn:
    turn = Turn(SESSION, 1, "user", TurnStatus.COMPLETE, tool_calls=tuple(calls if item_calls is None else item_calls))
    return StoredTurn(turn, tuple(tool_records(plan, calls)))


def tool_stream(plan: ChatPlan, calls: list[ToolCall]) -> StreamSeen:
    seen = streamed(plan)
    seen.done = {"stop_reason": "tool_use"}
    seen.tool_calls = list(calls)
    return seen


def test_a_chat_that_calls_tools_expects_the_local_models_exact_calls() -> None:
    # THEN the plan's calls are the local model's: its ids, the names, the arguments as written, {} for none
    (paris, now) = CALLS.expected_calls
    assert (paris.name, paris.arguments, now.name, now.arguments) == (
        "get_weather",
        '{"city": "Paris"}',
        "get_time",
        "{}",
    )
    assert paris.id.startswith("tooluse_") and paris.id != now.id and CALLS.expected_text == "You said: Checking."
    # WHEN the stream and the table hold exactly those calls THEN the chat is exact
    calls = list(CALLS.expected_calls)
    assert check_chat(CALLS, tool_stream(CALLS, calls), tool_turn(CALLS, calls), killed=False) == ChatCounts(
        exact_streams=1, tool_chats=1
    )


@pytest.mark.parametrize(
    "change",
    [
        lambda calls: calls[:1],  # a call lost
        lambda calls: [*calls, calls[0]],  # a call repeated
        lambda calls: calls[::-1],  # the calls out of order
        lambda calls: [dataclasses.replace(calls[0], id="tooluse_other"), calls[1]],
        lambda calls: [dataclasses.replace(calls[0], name="get_time"), calls[1]],
        lambda calls: [dataclasses.replace(calls[0], arguments='{"city": "Par"}'), calls[1]],
        lambda calls: [calls[0], dataclasses.replace(calls[1], complete=False)],
    ],
)
def test_a_call_lost_repeated_or_changed_is_a_wrong_tool_call_on_either_side(change: Callable) -> None:
    calls = list(CALLS.expected_calls)
    # WHEN the stream holds a changed list of calls THEN the stream is not exact, and the count says so
    on_stream = check_chat(CALLS, tool_stream(CALLS, change(calls)), tool_turn(CALLS, calls), killed=False)
    assert on_stream.exact_streams == 0 and on_stream.wrong_tool_calls >= 1
    assert "tool calls wrong" in on_stream.problems[0]
    # WHEN the table's turn item does THEN the table's check says so
    in_item = check_chat(CALLS, tool_stream(CALLS, calls), tool_turn(CALLS, calls, change(calls)), killed=False)
    assert in_item.wrong_tool_calls >= 1 and in_item.exact_streams == 1
    assert in_item.problems == (
        f"chat 5 ({CALLS.message[:24]!r}, session {SESSION}): table tool calls differ "
        f"({in_item.wrong_tool_calls} of 2 wrong or extra)",
    )


def test_the_records_calls_are_checked_too() -> None:
    calls = list(CALLS.expected_calls)
    wrong = [calls[0], dataclasses.replace(calls[1], arguments='{"x": 1}')]
    stored_turn = StoredTurn(tool_turn(CALLS, calls).turn, tuple(tool_records(CALLS, wrong)))
    assert check_chat(CALLS, tool_stream(CALLS, calls), stored_turn, killed=False).wrong_tool_calls == 1


def test_a_killed_generation_may_hold_a_start_of_the_calls_and_no_more() -> None:
    # GIVEN a chat whose proxy the run killed inside its second call's arguments
    calls = [CALLS.expected_calls[0], ToolCall(CALLS.expected_calls[1].id, "get_time", "{}")]
    records = tool_records(CALLS, calls, ended=False, cut=1)
    turn = Turn(SESSION, 1, "user", TurnStatus.ERROR, error={"code": "generation_failed", "message": "it died"})
    seen = streamed(CALLS, end="generation_failed")
    seen.tool_calls = [calls[0]]
    # THEN it is a generation the run killed, not a problem
    assert check_chat(CALLS, seen, StoredTurn(turn, tuple(records)), killed=True) == ChatCounts(
        killed_generations=1, tool_chats=1
    )
    # WHEN what it stored is no start of the calls (a call's arguments wrong) THEN that is a problem
    bad = tool_records(
        CALLS, [dataclasses.replace(calls[0], arguments='{"city": "Rome"}'), calls[1]], ended=False, cut=1
    )
    counts = check_chat(CALLS, seen, StoredTurn(turn, tuple(bad)), killed=True)
    assert counts.problems and "not a clean prefix" in counts.problems[0]
