"""Owners' budgets in ChatTable (chatstream.table.budgets): admission in the start's own transaction, refusals and
what they say, settlement when a turn ends, the operator's overrides; against moto's DynamoDB (its writes atomic
under the repository's patches), the table built from template.yaml."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import pytest
from botocore.exceptions import ClientError

from chatstream.config import Limits
from chatstream.errors import Throttled, TurnInProgress
from chatstream.records import ErrorInfo, TokenRecord, Usage
from chatstream.status import StopReason
from chatstream.table import ChatTable
from chatstream.table.budgets import (
    DAY_MS,
    MINUTE_MS,
    TURN_WAIT_MS,
    Admission,
    Charge,
    LimitExceeded,
    LimitKind,
)
from chatstream.table.dynamodb import deser, ser
from tests.builders import turn_records

if TYPE_CHECKING:
    from collections.abc import Callable

    from mypy_boto3_dynamodb import DynamoDBClient

OWNER = "caller-a"
# 2023-11-14 22:13:20 UTC, 20 s into its minute
NOW_MS = 1_700_000_000_000
STALE_MS = 1_260_000


@pytest.fixture
def clock(chat_table: ChatTable) -> dict[str, int]:
    """The table on a settable clock, ``clock["ms"]``."""
    now = {"ms": NOW_MS}
    chat_table.now_ms = lambda: now["ms"]
    return now


def admit(limits: Limits, reserve: int = 1000, owner: str = OWNER) -> Admission:
    return Admission(owner, limits, reserve=reserve, stale_after_ms=STALE_MS)


def owner_items(table: ChatTable, owner: str = OWNER) -> dict[str, dict[str, Any]]:
    page = table.client.query(
        TableName=table.table_name,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues=ser({":pk": f"O#{owner}"}),
        ConsistentRead=True,
    )
    return {str(item["sk"]): item for item in map(deser, page["Items"])}


def everything(table: ChatTable) -> list[dict[str, Any]]:
    return sorted(
        (deser(item) for item in table.client.scan(TableName=table.table_name)["Items"]),
        key=lambda item: (str(item["pk"]), str(item["sk"])),
    )


def finish(table: ChatTable, session_id: str, turn: int = 1, *, input_tokens: int = 100, words: int = 5) -> None:
    """End the turn from the stream: usage ``input_tokens`` in, ``words`` out."""
    records = turn_records(session_id, turn, ["w"] * words, input_tokens=input_tokens)
    table.put_records(records)
    table.turns.end_from_stream(records[-1], "w" * words)


def day_tokens(table: ChatTable, owner: str = OWNER) -> tuple[int, int]:
    item = owner_items(table, owner).get("TPD#2023-11-14", {})
    return int(item.get("tokens", 0)), int(item.get("held", 0))


def running(table: ChatTable, owner: str = OWNER) -> int:
    return len(owner_items(table, owner).get("ACTIVE", {}).get("turns") or ())


# ------------------------------------------------------------------------------------------ admission


def test_without_limits_a_start_writes_nothing_of_the_owner_s(chat_table: ChatTable, clock: dict[str, int]) -> None:
    # WHEN turns start under no limit
    session_id = chat_table.turns.start_first(OWNER, "hello", admission=admit(Limits()))
    finish(chat_table, session_id)
    chat_table.turns.start_next(session_id, OWNER, "again", admission=admit(Limits()))
    # THEN the owner has no counter, no reservation and no list of its turns: only the turns were written
    assert owner_items(chat_table) == {}
    assert {str(item["sk"]) for item in everything(chat_table)} >= {"SESSION", "T#000001", "T#000002"}
    assert not any(str(item["sk"]).startswith("B#") for item in everything(chat_table))


def test_requests_per_minute_refuse_the_turn_after_the_limit_until_the_minute_ends(
    chat_table: ChatTable, clock: dict[str, int]
) -> None:
    limits = Limits(requests_per_minute=3)
    # GIVEN three turns started this minute
    for _ in range(3):
        chat_table.turns.start_first(OWNER, "hello", admission=admit(limits))
    before = everything(chat_table)
    # WHEN a fourth is started
    with pytest.raises(LimitExceeded) as refused:
        chat_table.turns.start_first(OWNER, "hello", admission=admit(limits))
    # THEN it is refused for requests per minute, to be tried when the minute ends (40 s on), having written nothing
    refusal = refused.value.refusal
    assert refusal.kinds == {LimitKind.REQUESTS} and refusal.requests_used == 3 and not refusal.spent
    assert refusal.retry_after_ms == 40_000
    assert everything(chat_table) == before
    # AND the next minute takes turns again
    clock["ms"] += 40_000
    chat_table.turns.start_first(OWNER, "hello", admission=admit(limits))


def test_tokens_reserved_by_running_turns_refuse_a_turn_until_they_settle(
    chat_table: ChatTable, clock: dict[str, int]
) -> None:
    limits = Limits(tokens_per_day=10_000)
    # GIVEN two turns running, each reserving its max_tokens (4096)
    first = chat_table.turns.start_first(OWNER, "hello", admission=admit(limits, 4096))
    chat_table.turns.start_first(OWNER, "hello", admission=admit(limits, 4096))
    assert day_tokens(chat_table) == (8192, 8192)
    # WHEN a third is started
    with pytest.raises(LimitExceeded) as refused:
        chat_table.turns.start_first(OWNER, "hello", admission=admit(limits, 4096))
    # THEN it is refused for tokens, but the budget is not spent: the running turns hold it, so it is worth trying
    # again in a few seconds
    refusal = refused.value.refusal
    assert refusal.kinds == {LimitKind.TOKENS} and not refusal.spent
    assert (refusal.tokens_used, refusal.tokens_held, refusal.retry_after_ms) == (8192, 8192, TURN_WAIT_MS)
    # WHEN the first turn ends having used 100 in and 5 out THEN it is charged that and gives back the rest
    finish(chat_table, first, input_tokens=100, words=5)
    assert day_tokens(chat_table) == (4096 + 105, 4096)
    # AND the third turn fits
    chat_table.turns.start_first(OWNER, "hello", admission=admit(limits, 4096))


def test_a_spent_day_refuses_until_the_day_ends_and_a_turn_larger_than_the_budget_always(
    chat_table: ChatTable, clock: dict[str, int]
) -> None:
    limits = Limits(tokens_per_day=1000)
    # GIVEN a turn that used 950 tokens today
    session_id = chat_table.turns.start_first(OWNER, "hello", admission=admit(limits, 500))
    finish(chat_table, session_id, input_tokens=900, words=50)
    # WHEN another that reserves 500 is started THEN the day is spent: try again when it ends (not in seconds)
    with pytest.raises(LimitExceeded) as refused:
        chat_table.turns.start_first(OWNER, "hello", admission=admit(limits, 500))
    refusal = refused.value.refusal
    assert refusal.spent and refusal.kinds == {LimitKind.TOKENS} and refusal.tokens_used == 950
    day_end = (NOW_MS // DAY_MS + 1) * DAY_MS
    assert refusal.retry_after_ms == day_end - NOW_MS
    # AND a turn that reserves more than the whole budget is refused as spent too, before any write
    with pytest.raises(LimitExceeded) as too_large:
        chat_table.turns.start_first("caller-b", "hello", admission=admit(limits, 1001, owner="caller-b"))
    assert too_large.value.refusal.spent and owner_items(chat_table, "caller-b") == {}
    # AND the next day has its own budget
    clock["ms"] = day_end
    chat_table.turns.start_first(OWNER, "hello", admission=admit(limits, 500))


def test_turns_at_once_refuse_a_turn_until_one_ends(chat_table: ChatTable, clock: dict[str, int]) -> None:
    limits = Limits(turns_at_once=2)
    # GIVEN two turns generating
    first = chat_table.turns.start_first(OWNER, "hello", admission=admit(limits))
    chat_table.turns.start_first(OWNER, "hello", admission=admit(limits))
    # WHEN a third is started THEN it is refused for turns at once
    with pytest.raises(LimitExceeded) as refused:
        chat_table.turns.start_first(OWNER, "hello", admission=admit(limits))
    assert refused.value.refusal.kinds == {LimitKind.TURNS} and refused.value.refusal.turns_running == 2
    # WHEN one of them ends THEN the owner has one running, and the third starts
    finish(chat_table, first)
    assert running(chat_table) == 1
    chat_table.turns.start_first(OWNER, "hello", admission=admit(limits))
    assert running(chat_table) == 2


def test_stale_turns_are_dropped_before_turns_at_once_refuse(chat_table: ChatTable, clock: dict[str, int]) -> None:
    limits = Limits(turns_at_once=2)
    # GIVEN two turns whose endings were never settled (their generations lost, their sessions never used again)
    chat_table.turns.start_first(OWNER, "hello", admission=admit(limits))
    chat_table.turns.start_first(OWNER, "hello", admission=admit(limits))
    # WHEN a turn is started after the stale-turn limit
    clock["ms"] += STALE_MS + 1
    chat_table.turns.start_first(OWNER, "hello", admission=admit(limits))
    # THEN they no longer count: the new turn started, and is the only one running
    assert running(chat_table) == 1


def test_two_refusals_at_once_wait_for_the_later_and_a_turn_in_progress_is_not_a_refusal(
    chat_table: ChatTable, clock: dict[str, int]
) -> None:
    limits = Limits(requests_per_minute=1, turns_at_once=1)
    session_id = chat_table.turns.start_first(OWNER, "hello", admission=admit(limits))
    # WHEN another start breaks both limits THEN both are named and the wait is the minute's
    with pytest.raises(LimitExceeded) as refused:
        chat_table.turns.start_first(OWNER, "hello", admission=admit(limits))
    assert refused.value.refusal.kinds == {LimitKind.REQUESTS, LimitKind.TURNS}
    assert refused.value.refusal.retry_after_ms == 40_000
    # AND a next turn of a session still generating is that, whatever the limits say
    clock["ms"] += MINUTE_MS
    with pytest.raises(TurnInProgress):
        chat_table.turns.start_next(session_id, OWNER, "again", admission=admit(limits))


def test_twenty_starts_at_once_with_five_turns_at_once_start_exactly_five(chat_table: ChatTable) -> None:
    limits = Limits(turns_at_once=5)
    started: list[str] = []
    refused: list[LimitExceeded] = []
    barrier = threading.Barrier(20)

    def start() -> None:
        barrier.wait()
        try:
            started.append(chat_table.turns.start_first(OWNER, "hello", admission=admit(limits)))
        except LimitExceeded as err:
            refused.append(err)

    # WHEN 20 requests of one owner start turns at once
    threads = [threading.Thread(target=start) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # THEN exactly 5 started, 15 were refused, and the table holds exactly 5 sessions and 5 running turns
    assert (len(started), len(refused)) == (5, 15)
    assert sum(1 for item in everything(chat_table) if item["sk"] == "SESSION") == 5
    assert running(chat_table) == 5


# ------------------------------------------------------------------------------------------ overrides


def test_an_override_holds_from_the_next_start_in_every_environment_and_lifting_it_restores_the_default(
    dynamodb: DynamoDBClient, table_name: str
) -> None:
    # GIVEN two execution environments, each its own table handle, that have started a turn of the owner's
    one, two = (ChatTable(dynamodb, table_name, sleep=lambda _: None) for _ in range(2))
    defaults = Limits(turns_at_once=3)
    for table in (one, two):
        table.turns.start_first(OWNER, "hello", admission=admit(defaults))
    # WHEN an operator lowers the owner's turns at once to 2, from a third handle
    operator = ChatTable(dynamodb, table_name)
    operator.budgets.set_overrides(OWNER, {LimitKind.TURNS: 2})
    # THEN the next start in either environment is refused (the override checked in its transaction)
    for table in (one, two):
        with pytest.raises(LimitExceeded) as refused:
            table.turns.start_first(OWNER, "hello", admission=admit(defaults))
        assert refused.value.refusal.limits.turns_at_once == 2
    # WHEN the operator changes it again to 0 (no limit) THEN both learn that too
    operator.budgets.set_overrides(OWNER, {LimitKind.TURNS: 0})
    for table in (one, two):
        table.turns.start_first(OWNER, "hello", admission=admit(defaults))
    # WHEN the overrides are lifted THEN the default (3) holds again: the two turns counted and one more
    assert operator.budgets.lift(OWNER) and not operator.budgets.lift(OWNER)
    one.turns.start_first(OWNER, "hello", admission=admit(defaults))
    with pytest.raises(LimitExceeded) as refused:
        two.turns.start_first(OWNER, "hello", admission=admit(defaults))
    assert refused.value.refusal.limits.turns_at_once == 3


def test_a_turn_larger_than_an_owners_known_budget_is_judged_on_the_budget_as_it_is_now(
    dynamodb: DynamoDBClient, table_name: str
) -> None:
    # GIVEN an environment that learnt an owner's budget of 1,000 tokens a day (refused a turn of 4,096 on it)
    relay = ChatTable(dynamodb, table_name, sleep=lambda _: None)
    operator = ChatTable(dynamodb, table_name)
    operator.budgets.set_overrides(OWNER, {LimitKind.TOKENS: 1000})
    with pytest.raises(LimitExceeded):
        relay.turns.start_first(OWNER, "hello", admission=admit(Limits(tokens_per_day=100_000), 4096))
    # WHEN the operator raises it, and the owner asks for a turn of 4,096 again
    operator.budgets.set_overrides(OWNER, {LimitKind.TOKENS: 50_000})
    # THEN the environment does not refuse it on the budget it knew: the turn starts
    relay.turns.start_first(OWNER, "hello", admission=admit(Limits(tokens_per_day=100_000), 4096))


def test_overrides_are_set_one_limit_at_a_time_and_nonsense_is_refused(chat_table: ChatTable) -> None:
    budgets = chat_table.budgets
    budgets.set_overrides(OWNER, {LimitKind.REQUESTS: 10, LimitKind.TOKENS: 50_000})
    overrides = budgets.set_overrides(OWNER, {LimitKind.REQUESTS: None, LimitKind.TURNS: 1})
    assert dict(overrides.values) == {LimitKind.TOKENS: 50_000, LimitKind.TURNS: 1}
    assert overrides.over(Limits(60, 1_000_000, 5)) == Limits(60, 50_000, 1)
    for nonsense in (-1, 10**10, True, "5", 2.5):
        with pytest.raises(ValueError, match="whole number"):
            budgets.set_overrides(OWNER, {LimitKind.TURNS: nonsense})  # type: ignore[dict-item]
    assert budgets.overrides(OWNER) == overrides


def test_the_standing_counts_what_the_owner_used(chat_table: ChatTable, clock: dict[str, int]) -> None:
    limits = Limits(requests_per_minute=10, tokens_per_day=100_000, turns_at_once=4)
    session_id = chat_table.turns.start_first(OWNER, "hello", admission=admit(limits, 2000))
    chat_table.turns.start_first(OWNER, "hello", admission=admit(limits, 2000))
    finish(chat_table, session_id, input_tokens=10, words=3)
    standing = chat_table.budgets.standing(OWNER, limits)
    assert (standing.requests_used, standing.tokens_used, standing.turns_running) == (2, 2013, 1)
    assert (standing.requests_left, standing.tokens_left) == (8, 97_987)
    assert standing.minute_reset_ms == 40_000


def test_the_headline_reads_only_the_counters_its_headers_show(chat_table: ChatTable, clock: dict[str, int]) -> None:
    # GIVEN two turns started and one finished under every limit
    limits = Limits(requests_per_minute=10, tokens_per_day=100_000, turns_at_once=4)
    session_id = chat_table.turns.start_first(OWNER, "hello", admission=admit(limits, 2000))
    chat_table.turns.start_first(OWNER, "hello", admission=admit(limits, 2000))
    finish(chat_table, session_id, input_tokens=10, words=3)
    budgets = chat_table.budgets
    asked: list[list[dict[str, Any]]] = []
    batch_get = budgets.store.client.batch_get_item

    def counting(**kwargs: Any) -> Any:
        asked.append([deser(key) for key in kwargs["RequestItems"][budgets.store.table_name]["Keys"]])
        return batch_get(**kwargs)

    budgets.store.client.batch_get_item = counting  # type: ignore[method-assign]
    # WHEN the headline is read THEN it counts as the standing does, from the two counters only
    headline = budgets.headline(OWNER, limits)
    assert headline is not None
    assert (headline.requests_used, headline.tokens_used, headline.requests_left, headline.tokens_left) == (
        2,
        2013,
        8,
        97_987,
    )
    assert [sorted(str(key["sk"]).split("#")[0] for key in keys) for keys in asked] == [["RPM", "TPD"]]
    # AND with only the requests limit on, one counter; with only turns at once, whose count no header shows, none
    assert budgets.headline(OWNER, Limits(requests_per_minute=10)) is not None
    assert budgets.headline(OWNER, Limits(turns_at_once=4)) is None
    assert [len(keys) for keys in asked] == [2, 1]


# ------------------------------------------------------------------------------------------ settlement


def claimed_turn(table: ChatTable, limits: Limits, reserve: int = 1000) -> str:
    session_id = table.turns.start_first(OWNER, "hello", admission=admit(limits, reserve))
    table.turns.claim(session_id, 1, "request-1")
    return session_id


def failure(session_id: str, code: str = "generation_failed") -> TokenRecord:
    return TokenRecord.failure(session_id, 1, 3, ErrorInfo(code, "it failed", True), NOW_MS)


LIMITED = Limits(tokens_per_day=100_000, turns_at_once=5)


def test_a_turn_the_reaper_ended_is_charged_its_reservation_until_its_record_says_what_it_used(
    chat_table: ChatTable, clock: dict[str, int]
) -> None:
    # GIVEN a claimed turn the reaper presumed lost
    session_id = claimed_turn(chat_table, LIMITED)
    assert chat_table.turns.end_presumed_lost(failure(session_id))
    # THEN it is charged its reservation (the model may have billed it), no longer holds it, and no longer runs
    assert day_tokens(chat_table) == (1000, 0) and running(chat_table) == 0
    # WHEN its terminal record comes after all, with usage, and again (a redelivery)
    for _ in range(2):
        finish(chat_table, session_id, input_tokens=40, words=2)
    # THEN it is charged what it used, once
    assert day_tokens(chat_table) == (42, 0)


def test_a_stream_ending_stands_against_a_later_presumption(chat_table: ChatTable, clock: dict[str, int]) -> None:
    session_id = claimed_turn(chat_table, LIMITED)
    finish(chat_table, session_id, input_tokens=40, words=2)
    # WHEN a presumed ending comes after the stream's (it does not write: the turn ended) and a settlement is tried
    assert not chat_table.turns.end_presumed_lost(failure(session_id))
    assert not chat_table.budgets.settle(session_id, 1, Charge.reservation())
    # THEN the charge stays what the stream said
    assert day_tokens(chat_table) == (42, 0)


@pytest.mark.parametrize(
    "end",
    [
        lambda table, sid: table.turns.cancel_unclaimed(
            TokenRecord.stop(sid, 1, 1, StopReason.CANCELLED, Usage(0, 0), NOW_MS)
        ),
        lambda table, sid: table.turns.end_unclaimed(failure(sid, "proxy_unavailable")),
        lambda table, sid: table.turns.end_presumed_lost(failure(sid), claimed=False),
    ],
    ids=["cancel_unclaimed", "end_unclaimed", "end_presumed_lost-unclaimed"],
)
def test_a_turn_no_generation_claimed_is_charged_nothing(
    chat_table: ChatTable, clock: dict[str, int], end: Callable[[ChatTable, str], bool]
) -> None:
    session_id = chat_table.turns.start_first(OWNER, "hello", admission=admit(LIMITED))
    assert end(chat_table, session_id)
    assert day_tokens(chat_table) == (0, 0) and running(chat_table) == 0


def test_a_stale_turn_taken_over_is_charged_its_reservation(chat_table: ChatTable, clock: dict[str, int]) -> None:
    session_id = claimed_turn(chat_table, LIMITED)
    clock["ms"] += STALE_MS + 1
    chat_table.turns.start_next(session_id, OWNER, "again", stale_after_ms=STALE_MS, admission=admit(LIMITED))
    # THEN the stale turn is charged its reservation and runs no more; the new one holds its own
    assert day_tokens(chat_table) == (2000, 1000) and running(chat_table) == 1


def test_concurrent_settlements_of_one_turn_settle_it_once(chat_table: ChatTable, clock: dict[str, int]) -> None:
    session_id = claimed_turn(chat_table, LIMITED)
    records = turn_records(session_id, 1, ["w"] * 5, input_tokens=100)
    chat_table.put_records(records)
    barrier = threading.Barrier(6)

    def end() -> None:
        barrier.wait()
        chat_table.turns.end_from_stream(records[-1], "wwwww")

    threads = [threading.Thread(target=end) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert day_tokens(chat_table) == (105, 0) and running(chat_table) == 0


def test_a_table_throttled_during_the_start_refuses_it_as_retryable_and_writes_nothing(
    chat_table: ChatTable, clock: dict[str, int]
) -> None:
    # GIVEN DynamoDB cancelling the start's transaction for capacity
    real = chat_table.client.transact_write_items

    def throttled(**kwargs: Any) -> Any:
        reasons = [{"Code": "None"}] * (len(kwargs["TransactItems"]) - 1) + [{"Code": "ThrottlingError"}]
        raise ClientError(
            {"Error": {"Code": "TransactionCanceledException", "Message": "throttled"}, "CancellationReasons": reasons},
            "TransactWriteItems",
        )

    chat_table.client.transact_write_items = throttled  # type: ignore[method-assign]
    # WHEN a turn is started THEN it fails as Throttled (the relay's 503, to be sent again) and nothing was written
    with pytest.raises(Throttled):
        chat_table.turns.start_first(OWNER, "hello", admission=admit(LIMITED))
    chat_table.client.transact_write_items = real  # type: ignore[method-assign]
    assert everything(chat_table) == []
