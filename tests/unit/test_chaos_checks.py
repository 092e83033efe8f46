"""The chaos run's checks: a chat's stream and stored turn against the model's reply, the DLQ against the poison
put, and the ``chaos:`` line. No stack: streams and turns are built here as the client and the table give them."""

from __future__ import annotations

import base64
import dataclasses
import json

import pytest

from chaos.checks import (
    ChaosResult,
    ChatCounts,
    DlqCounts,
    StoredTurn,
    check_chat,
    check_dlq,
    compare_text,
    poison_payload_of,
)
from chaos.client import StreamSeen
from chaos.plan import ChatPlan
from chatstream.dlq import DlqKind
from chatstream.records import ErrorInfo
from chatstream.redrive import LostRange, MessageResult, RedriveReport, RedriveStatus
from chatstream.status import TurnStatus
from chatstream.table import Turn
from chatstream_local.bedrock.model import split_deltas
from tests.builders import opening_records, turn_records

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
    turn = Turn(SESSION, 1, "user", status, error={"code": code} if code else None)
    return StoredTurn(turn, tuple(records))


def test_an_exact_stream_of_a_finished_turn_counts_as_exact_and_nothing_else() -> None:
    # GIVEN a stream and a stored turn that both hold the whole reply
    # WHEN the chat is checked
    counts = check_chat(LONG, streamed(LONG), stored(LONG), proxy_failed=False)

    # THEN it is one exact stream, with nothing lost, duplicated or unfinished
    assert counts == ChatCounts(exact_streams=1)


def test_a_token_event_seen_twice_is_a_duplicated_token_and_not_exact() -> None:
    # GIVEN a stream whose resume repeated token 3
    seen = streamed(LONG)
    seen.tokens.insert(3, seen.tokens[2])

    counts = check_chat(LONG, seen, stored(LONG), proxy_failed=False)

    # THEN the stream is not exact; the repeated id counts, and the text is compared from its first difference:
    # the reply's two deltas after it count as lost, the stream's three after it as duplicated
    assert counts.exact_streams == 0
    assert (counts.lost_tokens, counts.duplicated_tokens) == (2, 1 + 3)
    assert counts.problems == (
        f"chat 3 ('/long 5', session {SESSION}): stream not exact "
        "(lost 2, duplicated 4, end {'stop_reason': 'end_turn'})",
    )


def test_a_stream_missing_the_end_of_the_reply_loses_those_tokens() -> None:
    # GIVEN a stream that got three of five deltas and then done
    counts = check_chat(LONG, streamed(LONG, 3), stored(LONG), proxy_failed=False)

    # THEN two tokens are lost and it is not exact
    assert (counts.lost_tokens, counts.duplicated_tokens, counts.exact_streams) == (2, 0, 0)


def test_a_turn_still_in_progress_in_the_table_is_unfinished() -> None:
    # GIVEN an exact stream, but a table whose turn never got its terminal record
    counts = check_chat(LONG, streamed(LONG), stored(LONG, status=TurnStatus.IN_PROGRESS), proxy_failed=False)

    # THEN the turn is unfinished (and the stream still exact)
    assert (counts.unfinished_turns, counts.exact_streams) == (1, 1)
    assert counts.problems == (f"chat 3 ('/long 5', session {SESSION}): turn 1 not finished in the table",)


def test_table_text_that_differs_from_the_reply_counts_lost_tokens() -> None:
    # GIVEN a finished turn that stored only four of the five deltas
    counts = check_chat(LONG, streamed(LONG), stored(LONG, 4), proxy_failed=False)

    assert counts.lost_tokens == 1
    assert any("table text differs (lost 1, duplicated 0)" in problem for problem in counts.problems)


def test_a_lost_generation_ending_in_timeout_with_a_prefix_counts_as_generator_lost() -> None:
    # GIVEN a chat whose proxy was killed after two deltas: the stream ends with the relay's timeout
    counts = check_chat(LONG, streamed(LONG, 2, end="timeout"), stored(LONG, 2, status=TurnStatus.IN_PROGRESS), True)

    # THEN it is a lost generation, not lost tokens nor an unfinished turn
    assert counts == ChatCounts(generator_lost=1)


def test_a_turn_the_reaper_ended_is_a_lost_generation_even_without_the_queue_message() -> None:
    # GIVEN a turn the reaper ended with generation_failed (ProxyFailureQueue already read and emptied)
    turn = stored(LONG, 2, status=TurnStatus.ERROR, code="generation_failed")

    counts = check_chat(LONG, streamed(LONG, 2, end="generation_failed"), turn, proxy_failed=False)

    assert counts == ChatCounts(generator_lost=1)


def test_a_lost_generation_whose_stream_is_not_a_prefix_is_a_problem() -> None:
    # GIVEN a lost generation whose stream skipped the first delta
    seen = streamed(LONG, 3, end="timeout")
    del seen.tokens[0]

    counts = check_chat(LONG, seen, stored(LONG, 3, status=TurnStatus.IN_PROGRESS), proxy_failed=True)

    assert counts.generator_lost == 0
    assert counts.problems == (
        f"chat 3 ('/long 5', session {SESSION}): a lost generation ended with 'timeout' and text not a prefix",
    )


def test_a_model_error_where_the_plan_says_so_is_exact_and_counted() -> None:
    # GIVEN a chat planned to fail after two deltas, dropped once and resumed
    seen = streamed(FAILING, end="model_stream_error")
    seen.resumes = 1

    counts = check_chat(FAILING, seen, stored(FAILING, status=TurnStatus.ERROR, code="model_stream_error"), False)

    # THEN it is exact, a model error, a planned drop and one resume
    assert counts == ChatCounts(exact_streams=1, model_errors=1, drops=1, resumes=1)


def test_a_model_error_ending_with_another_code_is_not_exact() -> None:
    seen = streamed(FAILING, end="relay_error")

    counts = check_chat(FAILING, seen, stored(FAILING, status=TurnStatus.ERROR, code="model_stream_error"), False)

    assert (counts.model_errors, counts.exact_streams) == (1, 0)


def test_a_client_that_got_no_stream_loses_every_token_of_the_reply() -> None:
    seen = StreamSeen(failure="POST /chat 503: busy")

    counts = check_chat(LONG, seen, StoredTurn(), proxy_failed=False)

    assert counts == ChatCounts(lost_tokens=5, problems=("chat 3 ('/long 5', session -): POST /chat 503: busy",))


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

    # THEN the poison is all there, the pointer is unexpected, and the lost range is a problem
    assert (dlq.poison_expected, dlq.poison_in_dlq, dlq.unexpected_dlq, dlq.onfailure_redriven) == (2, 2, 1, 2)
    assert dlq.problems == (
        "redrive lost ranges: [LostRange(shard_id='shard-1', first='5', last='9', reason='trimmed')]",
    )


def test_poison_the_run_did_not_put_is_unexpected_and_what_is_missing_is_not_counted() -> None:
    dlq = check_dlq([poison_message(b"other")], [b"p0"], RedriveReport(dry_run=False))

    assert (dlq.poison_in_dlq, dlq.unexpected_dlq) == (0, 1)


@pytest.mark.parametrize("body", ["not json", "[1, 2]", '{"kind": "poison-record"}', '{"kind": "other"}'])
def test_a_message_that_is_not_a_whole_poison_record_has_no_payload(body: str) -> None:
    assert poison_payload_of(body) is None


def result(dlq: DlqCounts | None = None, faults: dict[str, int] | None = None, **changes: object) -> ChaosResult:
    """A run of two chats (one exact, one lost generation) with the given changes to its added-up counts."""
    chats = [ChatCounts(exact_streams=1, drops=1, resumes=2), ChatCounts(generator_lost=1, relay_retries=3)]
    faults = {"kinesis_throttle": 88, "dynamodb_read_throttle": 197} if faults is None else faults
    run = ChaosResult.of(
        chats, dlq or DlqCounts(poison_expected=5, poison_in_dlq=5), proxy_kills=4, consumer_kills=8, faults=faults
    )
    return dataclasses.replace(run, totals=dataclasses.replace(run.totals, **changes))


def test_the_line_says_every_count_in_its_order() -> None:
    assert result().line() == (
        "chaos: chats=2 lost_tokens=0 duplicated_tokens=0 unfinished_turns=0 exact_streams=1/1 generator_lost=1 "
        "model_errors=0 drops=1 resumes=2 relay_retries=3 poison=5/5 unexpected_dlq=0 redriven_onfailure=0 "
        "kills=proxy:4,consumer:8 faults=dynamodb_read_throttle:197,kinesis_throttle:88"
    )
    assert result(faults={}).line().endswith(" faults=none")


def test_a_run_holds_only_when_every_stream_is_exact_or_a_lost_generation_and_the_dlq_is_exactly_the_poison() -> None:
    assert result().ok
    assert not result(lost_tokens=1).ok
    assert not result(duplicated_tokens=1).ok
    assert not result(unfinished_turns=1).ok
    assert not result(exact_streams=0).ok
    assert not result(DlqCounts(poison_expected=5, poison_in_dlq=4)).ok
    assert not result(DlqCounts(poison_expected=5, poison_in_dlq=5, unexpected_dlq=1)).ok
    assert not result(DlqCounts(poison_expected=5, poison_in_dlq=5, problems=("redrive lost ranges: x",))).ok
    assert not result(problems=("chat 0: something",)).ok


def test_the_redrive_problems_come_before_the_chats_problems() -> None:
    chats = [ChatCounts(problems=("chat 0: a",)), ChatCounts(problems=("chat 1: b",))]
    dlq = DlqCounts(problems=("redrive lost ranges: x",))

    run = ChaosResult.of(chats, dlq, proxy_kills=0, consumer_kills=0, faults={})

    assert run.problems == ("redrive lost ranges: x", "chat 0: a", "chat 1: b")
