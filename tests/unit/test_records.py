"""The token record codec: round trips and rejections."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chatstream.errors import InvalidRecord
from chatstream.records import ErrorInfo, RecordType, TokenRecord, Usage

SESSION = "3f9c2a7e5b1d4c8e9f0a1b2c3d4e5f60"


@pytest.mark.parametrize(
    "record",
    [
        TokenRecord.start(SESSION, 1, 1700000000000),
        TokenRecord.delta(SESSION, 2, 7, 'héllo 👋\n"quoted"', 1700000000001),
        TokenRecord.stop(SESSION, 3, 9, "end_turn", Usage(10, 8, 321), 1700000000002),
        TokenRecord.stop(SESSION, 3, 9, "cancelled", Usage(10, 0), 1700000000002),
        TokenRecord.failure(SESSION, 4, 2, ErrorInfo("throttled", "slow down", True), 1700000000003),
    ],
)
def test_round_trip(record: TokenRecord) -> None:
    # WHEN a record is encoded and decoded THEN it is the same record, as compact UTF-8 JSON
    data = record.encode()
    assert TokenRecord.decode(data) == record
    assert json.loads(data)["v"] == 1
    assert data == json.dumps(json.loads(data), ensure_ascii=False, separators=(",", ":")).encode("utf-8")


@given(st.text(min_size=1), st.integers(1, 999_999), st.integers(1, 99_999_999))
def test_any_text_round_trips(text: str, turn: int, seq: int) -> None:
    record = TokenRecord.delta(SESSION, turn, seq, text, 0)
    assert TokenRecord.decode(record.encode()).text == text


def _valid() -> dict[str, object]:
    return {"v": 1, "session_id": SESSION, "turn": 1, "seq": 1, "type": "delta", "text": "x", "ts": 5}


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"v": 2}, "schema version"),
        ({"v": True}, "schema version"),
        ({"type": "token"}, "record type"),
        ({"session_id": ""}, "session_id"),
        ({"session_id": "has space"}, "session_id"),
        ({"session_id": 7}, "session_id"),
        ({"turn": 0}, "turn"),
        ({"turn": "1"}, "turn"),
        ({"turn": True}, "turn"),
        ({"seq": -1}, "seq"),
        ({"seq": 0}, "seq 0"),
        ({"text": ""}, "non-empty"),
        ({"text": 5}, "text"),
        ({"ts": 1.5}, "ts"),
        ({"stop_reason": "end_turn"}, "carries"),
        ({"type": "stop"}, "carries"),
        ({"type": "error", "text": None, "error": {"code": "x", "message": "y"}}, "retryable"),
        ({"type": "stop", "text": None, "stop_reason": "end_turn", "usage": {"input_tokens": -1}}, "usage"),
    ],
)
def test_rejections_name_the_problem(change: dict[str, object], reason: str) -> None:
    raw = {**_valid(), **change}
    raw = {key: value for key, value in raw.items() if value is not None}
    with pytest.raises(InvalidRecord, match=reason):
        TokenRecord.decode(json.dumps(raw))


@pytest.mark.parametrize("data", [b"", b"not json", b"\xff\xfe", b"[]", b"null", b'"delta"'])
def test_undecodable_input_is_invalid_record(data: bytes) -> None:
    with pytest.raises(InvalidRecord):
        TokenRecord.decode(data)


def test_terminal_records() -> None:
    assert TokenRecord.stop(SESSION, 1, 1, "end_turn", Usage(0, 0), 0).is_terminal
    assert TokenRecord.failure(SESSION, 1, 1, ErrorInfo("e", "m", False), 0).type is RecordType.ERROR
    assert not TokenRecord.start(SESSION, 1, 0).is_terminal
