"""Sessions in ChatTable (chatstream.table.sessions) against moto's DynamoDB, the table built from template.yaml."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.builders import turn_records

if TYPE_CHECKING:
    from chatstream.table import ChatTable

OWNER = "caller-a"


def test_session_ids_are_unguessable(chat_table: ChatTable) -> None:
    # WHEN two sessions are created
    first, second = chat_table.create_session(OWNER), chat_table.create_session(OWNER)
    # THEN each id carries 128 random bits (32 hex digits) and they differ
    assert len(first) == len(second) == 32 and first != second
    int(first, 16)


def test_deleting_a_session_removes_its_turns_and_records_only(chat_table: ChatTable) -> None:
    # GIVEN two sessions, one with 30 token records (more than one batch of deletes)
    doomed = chat_table.turns.start_first(OWNER, "hello")
    kept = chat_table.turns.start_first(OWNER, "hello")
    chat_table.put_records(turn_records(doomed, 1, ["w"] * 28))
    chat_table.put_records(turn_records(kept, 1, ["k"]))
    # WHEN one is deleted
    deleted = chat_table.delete_session(doomed)
    # THEN its session item, its turn and its 30 records are gone, and the other session is whole
    assert deleted == 1 + 1 + 30
    assert chat_table.get_session(doomed) is None and chat_table.list_turns(doomed) == []
    assert chat_table.query_records(doomed, 1) == []
    assert chat_table.get_session(kept) is not None and len(chat_table.query_records(kept, 1)) == 3
    assert chat_table.delete_session(doomed) == 0
