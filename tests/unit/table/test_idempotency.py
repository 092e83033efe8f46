"""Idempotency keys in ChatTable (chatstream.table.idempotency): recorded by the start's own transaction, so that a
request sent again with its key finds the turn the first one started and starts none; against moto's DynamoDB."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import pytest

from chatstream.config import Limits
from chatstream.errors import TurnInProgress
from chatstream.table.budgets import Admission, LimitExceeded
from chatstream.table.dynamodb import deser
from chatstream.table.idempotency import KEY_TTL_S, KeyClaim, KeyInUse
from tests.builders import turn_records

if TYPE_CHECKING:
    from chatstream.table import ChatTable

OWNER = "caller-a"
NOW_MS = 1_700_000_000_000


def keyed(key: str = "key-1", fingerprint: str = "f1", owner: str = OWNER, limits: Limits | None = None) -> Admission:
    return Admission(owner, limits or Limits(), reserve=100, stale_after_ms=1_260_000, key=KeyClaim(key, fingerprint))


def sessions(table: ChatTable) -> int:
    items = table.client.scan(TableName=table.table_name)["Items"]
    return sum(1 for item in map(deser, items) if item["sk"] == "SESSION")


def test_a_key_names_the_turn_its_first_request_started(chat_table: ChatTable) -> None:
    # GIVEN a turn started with a key
    session_id = chat_table.turns.start_first(OWNER, "hello", admission=keyed())
    # WHEN a request with the same key starts a turn, however its body differs
    with pytest.raises(KeyInUse) as used:
        chat_table.turns.start_first(OWNER, "hello", admission=keyed(fingerprint="f2"))
    # THEN nothing is started, and the key's record names the first turn and its request's fingerprint
    record = used.value.record
    assert (record.session_id, record.turn, record.fingerprint, record.key) == (session_id, 1, "f1", "key-1")
    assert sessions(chat_table) == 1
    assert chat_table.keys.get(OWNER, "key-1") == record
    # AND another owner's key of the same name is its own
    chat_table.turns.start_first("caller-b", "hello", admission=keyed(owner="caller-b"))
    assert sessions(chat_table) == 2


def test_ten_requests_at_once_with_one_key_start_one_turn(chat_table: ChatTable) -> None:
    started: list[str] = []
    joined: list[str] = []
    barrier = threading.Barrier(10)

    def send() -> None:
        barrier.wait()
        try:
            started.append(chat_table.turns.start_first(OWNER, "hello", admission=keyed()))
        except KeyInUse as err:
            joined.append(err.record.session_id)

    threads = [threading.Thread(target=send) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # THEN one started its turn and the nine others found it
    assert len(started) == 1 and joined == started * 9
    assert sessions(chat_table) == 1


def test_a_key_of_a_continuation_names_its_turn_after_it_ended(chat_table: ChatTable) -> None:
    session_id = chat_table.turns.start_first(OWNER, "hello")
    records = turn_records(session_id, 1, ["Hi"])
    chat_table.put_records(records)
    chat_table.turns.end_from_stream(records[-1], "Hi")
    # GIVEN the session's turn 2 started with a key
    assert chat_table.turns.start_next(session_id, OWNER, "more", admission=keyed()) == 2
    # WHEN the same request comes while it generates THEN the session refuses it before any write; the key tells
    with pytest.raises(TurnInProgress):
        chat_table.turns.start_next(session_id, OWNER, "more", admission=keyed())
    record = chat_table.keys.get(OWNER, "key-1")
    assert record is not None and (record.session_id, record.turn) == (session_id, 2)
    # WHEN it comes after turn 2 ended THEN the start's transaction finds the key: turn 3 is not started
    records = turn_records(session_id, 2, ["Ok"])
    chat_table.put_records(records)
    chat_table.turns.end_from_stream(records[-1], "Ok")
    with pytest.raises(KeyInUse):
        chat_table.turns.start_next(session_id, OWNER, "more", admission=keyed())
    assert chat_table.get_session(session_id).turn_count == 2  # type: ignore[union-attr]


def test_a_refused_request_records_no_key_and_an_expired_key_starts_anew(chat_table: ChatTable) -> None:
    clock = {"ms": NOW_MS}
    chat_table.now_ms = lambda: clock["ms"]
    limits = Limits(requests_per_minute=1)
    chat_table.turns.start_first(OWNER, "hello", admission=keyed("first", limits=limits))
    # WHEN a request with a new key is refused by a limit THEN its key is not recorded
    with pytest.raises(LimitExceeded):
        chat_table.turns.start_first(OWNER, "hello", admission=keyed("second", limits=limits))
    assert chat_table.keys.get(OWNER, "second") is None
    # AND sent again after the minute, it starts its turn
    clock["ms"] += 60_000
    chat_table.turns.start_first(OWNER, "hello", admission=keyed("second", limits=limits))
    # WHEN the first key has expired (24 h) THEN it reads as gone and starts a new turn
    clock["ms"] = NOW_MS + KEY_TTL_S * 1000
    assert chat_table.keys.get(OWNER, "first") is None
    chat_table.turns.start_first(OWNER, "hello", admission=keyed("first"))
    assert sessions(chat_table) == 3
