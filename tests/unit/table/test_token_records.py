"""Token records in ChatTable (chatstream.table.token_records) against moto's DynamoDB, the table built from
template.yaml."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.builders import turn_records

if TYPE_CHECKING:
    from chatstream.table import ChatTable

OWNER = "caller-a"


def test_records_are_idempotent_and_queried_in_seq_order(chat_table: ChatTable) -> None:
    # GIVEN a turn's records written out of order, with duplicates (redelivery)
    session_id = chat_table.create_session(OWNER)
    records = turn_records(session_id, 1, ["a", "b", "c"])
    chat_table.put_records([records[3], records[1], records[1]])
    chat_table.put_records([records[0], records[2], records[4], records[3]])
    # THEN each record is stored once, in seq order, and the text assembles exactly
    assert [r.seq for r in chat_table.query_records(session_id, 1)] == [0, 1, 2, 3, 4]
    assert [r.seq for r in chat_table.query_records(session_id, 1, after_seq=2)] == [3, 4]
    assert chat_table.assemble_texts(session_id, 1) == ("abc", "")


def test_more_than_one_batch_of_records(chat_table: ChatTable) -> None:
    session_id = chat_table.create_session(OWNER)
    records = turn_records(session_id, 1, [f" w{i}" for i in range(120)])
    chat_table.put_records(records)
    assert len(chat_table.query_records(session_id, 1)) == 122
    assert chat_table.query_records(session_id, 2) == []
