"""The token record codec: round trips and rejections."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chatstream.errors import InvalidRecord
from chatstream.records import (
    ErrorInfo,
    RecordType,
    TokenRecord,
    ToolCallRef,
    Usage,
    assistant_text,
    reasoning_text,
    tool_calls,
)
from chatstream.status import StopReason, TurnStatus
from chatstream.tools import ToolCall
from tests.builders import turn_records

SESSION = "3f9c2a7e5b1d4c8e9f0a1b2c3d4e5f60"


@pytest.mark.parametrize(
    "record",
    [
        TokenRecord.start(SESSION, 1, 1700000000000),
        TokenRecord.delta(SESSION, 2, 7, 'héllo 👋\n"quoted"', 1700000000001),
        TokenRecord.stop(SESSION, 3, 9, StopReason.END_TURN, Usage(10, 8, 321), 1700000000002),
        TokenRecord.stop(SESSION, 3, 9, StopReason.CANCELLED, Usage(10, 0), 1700000000002),
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
        ({"v": 4}, "schema version"),
        ({"v": 2, "type": "tool_use", "call": {"index": 0, "id": "t1", "name": "f"}}, "schema version 3"),
        ({"v": 3, "type": "tool_use"}, "carries"),
        ({"v": 3, "type": "tool_use", "text": "", "call": {"index": 0, "id": "t1", "name": "f"}}, "empty only"),
        ({"v": 3, "type": "tool_use", "call": {"index": -1, "id": "t1", "name": "f"}}, "call.index"),
        ({"v": 3, "type": "tool_use", "call": {"index": 10_000, "id": "t1", "name": "f"}}, "call.index"),
        ({"v": 3, "type": "tool_use", "call": {"index": 0, "id": "", "name": "f"}}, "call.id"),
        ({"v": 3, "type": "tool_use", "call": {"index": 0, "id": "t1"}}, "call.name"),
        ({"v": 3, "type": "tool_use", "call": [0, "t1", "f"]}, "call must be"),
        ({"v": 3, "type": "tool_use", "call": {"index": 0, "id": "t1", "name": "f"}, "end": False}, "end must"),
        ({"v": 3, "type": "tool_use", "call": {"index": 0, "id": "t1", "name": "f"}, "end": 1}, "end must"),
        ({"end": True}, "only a tool_use"),
        ({"call": {"index": 0, "id": "t1", "name": "f"}}, "carries"),
        ({"v": 1, "type": "reasoning"}, "schema version 2"),
        ({"v": 2, "type": "reasoning", "text": ""}, "non-empty"),
        ({"v": 2, "type": "reasoning", "text": None, "stop_reason": StopReason.END_TURN}, "carries"),
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
        ({"stop_reason": StopReason.END_TURN}, "carries"),
        (
            {"type": "stop", "text": None, "stop_reason": 5, "usage": {"input_tokens": 1, "output_tokens": 1}},
            "stop_reason",
        ),
        ({"type": "stop"}, "carries"),
        ({"type": "error", "text": None, "error": {"code": "x", "message": "y"}}, "retryable"),
        ({"type": "stop", "text": None, "stop_reason": StopReason.END_TURN, "usage": {"input_tokens": -1}}, "usage"),
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
    assert TokenRecord.stop(SESSION, 1, 1, StopReason.END_TURN, Usage(0, 0), 0).is_terminal
    assert TokenRecord.failure(SESSION, 1, 1, ErrorInfo("e", "m", False), 0).type is RecordType.ERROR
    assert not TokenRecord.start(SESSION, 1, 0).is_terminal


def test_a_stop_reason_bedrock_added_later_decodes_and_re_encodes_as_it_came() -> None:
    # GIVEN a stop record whose reason this code does not know (Bedrock adds reasons over time)
    raw = _valid()
    raw.pop("text")
    raw.update(
        type="stop", seq=9, stop_reason="a_reason_from_the_future", usage={"input_tokens": 1, "output_tokens": 2}
    )
    data = json.dumps(raw, separators=(",", ":")).encode()
    # WHEN it is decoded
    record = TokenRecord.decode(data)
    # THEN it is readable: a StopReason that says it is undocumented, carrying the string verbatim
    assert isinstance(record.stop_reason, StopReason) and not record.stop_reason.documented
    assert record.stop_reason == "a_reason_from_the_future" and record.turn_status is TurnStatus.COMPLETE
    # AND it encodes back to the same bytes
    assert record.encode() == data


def test_a_stop_record_takes_only_a_stop_reason() -> None:
    with pytest.raises(InvalidRecord, match="StopReason"):
        TokenRecord(SESSION, 1, 1, RecordType.STOP, 0, stop_reason="end_turn", usage=Usage(0, 0))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("record", "status"),
    [
        (TokenRecord.stop(SESSION, 1, 1, StopReason.END_TURN, Usage(0, 0), 0), TurnStatus.COMPLETE),
        (TokenRecord.stop(SESSION, 1, 1, StopReason.MAX_TOKENS, Usage(0, 0), 0), TurnStatus.COMPLETE),
        (TokenRecord.stop(SESSION, 1, 1, StopReason.CANCELLED, Usage(0, 0), 0), TurnStatus.CANCELLED),
        (TokenRecord.failure(SESSION, 1, 1, ErrorInfo("e", "m", False), 0), TurnStatus.ERROR),
    ],
)
def test_a_terminal_record_gives_its_turn_status(record: TokenRecord, status: TurnStatus) -> None:
    assert record.turn_status is status


def test_a_record_that_does_not_end_a_turn_has_no_turn_status() -> None:
    with pytest.raises(ValueError, match="does not end a turn"):
        _ = TokenRecord.start(SESSION, 1, 0).turn_status


def test_the_assistant_text_is_the_delta_texts_in_seq_order() -> None:
    # GIVEN a turn's records in any order (as a batch or a query may hold them)
    records = turn_records(SESSION, 1, ["Hel", "lo", " there"])
    shuffled = [records[3], records[0], records[4], records[2], records[1]]
    # THEN the text is the deltas' texts by seq, whatever else is among them
    assert assistant_text(shuffled) == "Hello there"
    assert assistant_text(records[:2]) == "Hel" and assistant_text([]) == ""


def test_a_reasoning_record_is_schema_version_2_and_the_others_stay_version_1() -> None:
    # GIVEN a turn with reasoning before its reply
    records = turn_records(SESSION, 1, ["You", " said"], reasoning=["r1", " r2"])
    # WHEN each record is encoded and decoded
    versions = [json.loads(record.encode())["v"] for record in records]
    # THEN only the reasoning records need version 2 (a turn without reasoning is what version 1 wrote), and every
    # record round-trips
    assert versions == [1, 2, 2, 1, 1, 1]
    assert [TokenRecord.decode(record.encode()) for record in records] == records
    assert records[1].type is RecordType.REASONING


def test_a_version_1_record_from_an_older_writer_still_reads() -> None:
    # GIVEN a delta record exactly as the version 1 writer encoded it
    raw = b'{"v":1,"session_id":"' + SESSION.encode() + b'","turn":1,"seq":1,"type":"delta","ts":5,"text":"x"}'
    # WHEN this version decodes it THEN it is the same delta, and re-encodes to the same bytes
    record = TokenRecord.decode(raw)
    assert record == TokenRecord.delta(SESSION, 1, 1, "x", 5)
    assert record.encode() == raw


def test_reasoning_and_reply_are_spelled_apart() -> None:
    # GIVEN reasoning, a reply, and more reasoning between the reply's words, shuffled
    records = [
        TokenRecord.reasoning(SESSION, 1, 1, "think", 1),
        TokenRecord.delta(SESSION, 1, 2, "Hel", 2),
        TokenRecord.reasoning(SESSION, 1, 3, " more", 3),
        TokenRecord.delta(SESSION, 1, 4, "lo", 4),
    ]
    shuffled = [records[3], records[0], records[2], records[1]]
    # THEN the reply holds only the deltas, the reasoning only the reasoning, each in seq order
    assert assistant_text(shuffled) == "Hello"
    assert reasoning_text(shuffled) == "think more"


# ------------------------------------------------------------------------------- tool use (schema version 3)

CALL = ToolCallRef(0, "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q", "top_song")


def test_a_tool_use_record_is_schema_version_3_and_round_trips_byte_for_byte() -> None:
    # GIVEN a call's first record and its end
    first = TokenRecord.tool_use(SESSION, 1, 2, CALL, '{"sign": ', 7)
    last = TokenRecord.tool_use(SESSION, 1, 3, CALL, '"WZPZ"}', 8, end=True)
    # WHEN encoded THEN each is v 3, names its call, and the end is said only on the last
    assert json.loads(first.encode()) == {
        "v": 3,
        "session_id": SESSION,
        "turn": 1,
        "seq": 2,
        "type": "tool_use",
        "ts": 7,
        "text": '{"sign": ',
        "call": {"index": 0, "id": "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q", "name": "top_song"},
    }
    assert json.loads(last.encode())["end"] is True
    # THEN both decode to themselves and re-encode to the same bytes
    for record in (first, last):
        assert TokenRecord.decode(record.encode()) == record
        assert TokenRecord.decode(record.encode()).encode() == record.encode()


def test_records_older_readers_can_read_keep_their_versions_and_bytes() -> None:
    # GIVEN a turn with reasoning, a reply and a tool call
    records = [
        TokenRecord.start(SESSION, 1, 1),
        TokenRecord.reasoning(SESSION, 1, 1, "hm", 2),
        TokenRecord.delta(SESSION, 1, 2, "Let me look.", 3),
        TokenRecord.tool_use(SESSION, 1, 3, CALL, "{}", 4, end=True),
        TokenRecord.stop(SESSION, 1, 4, StopReason.TOOL_USE, Usage(1, 2), 5),
    ]
    # THEN only the tool_use record needs version 3; the others are what versions 1 and 2 wrote, byte for byte
    assert [json.loads(record.encode())["v"] for record in records] == [1, 2, 1, 3, 1]
    assert records[2].encode() == (
        b'{"v":1,"session_id":"' + SESSION.encode() + b'","turn":1,"seq":2,"type":"delta","ts":3,"text":"Let me look."}'
    )
    assert records[1].encode() == (
        b'{"v":2,"session_id":"' + SESSION.encode() + b'","turn":1,"seq":1,"type":"reasoning","ts":2,"text":"hm"}'
    )


def test_a_reader_that_knows_only_version_2_rejects_a_tool_use_record(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the reader of the release before tool use (versions 1 and 2)
    record = TokenRecord.tool_use(SESSION, 1, 2, CALL, "{}", 7, end=True)
    monkeypatch.setattr("chatstream.records.SCHEMA_VERSIONS", frozenset({1, 2}))
    # WHEN it decodes a tool_use record THEN it refuses it as a version it does not know (the consumer's DLQ)
    with pytest.raises(InvalidRecord, match="unsupported schema version 3"):
        TokenRecord.decode(record.encode())
    # AND it still reads every record an older writer wrote
    assert TokenRecord.decode(TokenRecord.reasoning(SESSION, 1, 1, "r", 1).encode()).text == "r"


def test_tool_calls_are_assembled_by_index_from_records_in_any_order() -> None:
    # GIVEN two parallel calls' records, interleaved with the reply, shuffled; the second call not ended
    weather = ToolCallRef(1, "tooluse_b", "get_weather")
    records = [
        TokenRecord.delta(SESSION, 1, 1, "Checking.", 1),
        TokenRecord.tool_use(SESSION, 1, 2, CALL, '{"sign":', 2),
        TokenRecord.tool_use(SESSION, 1, 3, CALL, ' "WZPZ"}', 3),
        TokenRecord.tool_use(SESSION, 1, 4, CALL, "", 4, end=True),
        TokenRecord.tool_use(SESSION, 1, 5, weather, '{"city": "Pa', 5),
    ]
    shuffled = [records[4], records[2], records[0], records[3], records[1]]
    # THEN the calls come in index order with their arguments in seq order; only the ended one is complete
    assert tool_calls(shuffled) == [
        ToolCall("tooluse_kZJMlvQmRJ6eAyJE5GIl7Q", "top_song", '{"sign": "WZPZ"}', complete=True),
        ToolCall("tooluse_b", "get_weather", '{"city": "Pa', complete=False),
    ]
    # THEN neither the reply nor the reasoning holds a tool's arguments
    assert assistant_text(shuffled) == "Checking." and reasoning_text(shuffled) == ""
    assert tool_calls([]) == [] and tool_calls(records[:1]) == []
