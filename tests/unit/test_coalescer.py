"""The proxy writer's decisions, without threads or a clock: which deltas become one record, and when."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from chatstream.coalescer import MAX_RECORD_CHARS, Coalescer, Step, WriterAction
from chatstream.records import RecordType, TokenRecord, ToolCallRef

if TYPE_CHECKING:
    from chatstream.table import ChatTable


def coalescer(interval_s: float = 0.3, max_chars: int = 10, cancel_s: float = 0.5, **kw: int) -> Coalescer:
    return Coalescer(flush_interval_s=interval_s, flush_max_chars=max_chars, cancel_check_s=cancel_s, **kw)


def test_the_first_delta_is_written_at_once_and_later_ones_wait_for_the_interval() -> None:
    c = coalescer()
    c.cancel_checked(0.0)
    # WHEN the first delta arrives THEN it is a record of its own, at once
    assert c.append("Hel") is True
    assert c.next_step(0.01) == Step(WriterAction.WRITE_DELTA, "Hel")
    # WHEN two more arrive soon after THEN nothing is due until the interval since that write has passed
    c.append("lo")
    c.append(" you")
    assert c.next_step(0.1) == Step(None, wait_s=pytest.approx(0.21))
    # THEN at the interval they go out together
    assert c.next_step(0.31) == Step(WriterAction.WRITE_DELTA, "lo you")


def test_only_an_empty_or_full_buffer_wakes_the_writer() -> None:
    c = coalescer(max_chars=6)
    assert c.append("ab") is True  # was empty: a first delta, or a flush deadline to set
    assert c.append("cd") is False  # the writer's wait already ends at the right moment
    assert c.append("ef") is True  # full: a record to write now


def test_a_full_buffer_is_written_before_the_interval() -> None:
    c = coalescer(max_chars=6)
    c.append("first")
    c.next_step(0.0)
    for word in ["ab", "cd", "ef", "gh"]:
        c.append(word)
    # THEN a record takes whole deltas up to flush_max_chars, and the rest waits
    assert c.next_step(0.01) == Step(WriterAction.WRITE_DELTA, "abcdef")
    assert c.next_step(0.02).action is None


def test_a_record_holds_at_least_one_delta_and_a_huge_one_is_split() -> None:
    c = coalescer(max_chars=4, max_record_chars=5)
    c.append("0123456789AB")
    # THEN a delta longer than flush_max_chars still goes whole up to max_record_chars, the rest after it
    assert c.next_step(0.0) == Step(WriterAction.WRITE_DELTA, "01234")
    assert c.next_step(0.0) == Step(WriterAction.WRITE_DELTA, "56789")  # still a full buffer
    assert c.next_step(0.0).action is None  # what is left is not: it waits for the interval
    assert c.next_step(0.3) == Step(WriterAction.WRITE_DELTA, "AB")


def test_the_end_flushes_what_is_buffered_then_ends() -> None:
    c = coalescer()
    c.append("a")
    c.next_step(0.0)
    c.append("b")
    c.append("c")
    c.end()
    assert c.next_step(0.01) == Step(WriterAction.WRITE_DELTA, "bc")
    assert c.next_step(0.01) == Step(WriterAction.END)


def test_the_cancel_flag_is_checked_every_cancel_interval_while_idle() -> None:
    c = coalescer(cancel_s=0.5)
    c.cancel_checked(1.0)
    assert c.next_step(1.2) == Step(None, wait_s=pytest.approx(0.3))
    assert c.next_step(1.5) == Step(WriterAction.CHECK_CANCEL)
    c.cancel_checked(1.5)
    assert c.next_step(1.6).action is None


def test_a_wait_is_never_zero() -> None:
    # GIVEN a flush that is due in less than a millisecond THEN the writer still waits a little, never spins
    c = coalescer(interval_s=0.3)
    c.cancel_checked(0.0)
    c.append("a")
    c.next_step(0.0)
    c.append("b")
    assert c.next_step(0.2999999).wait_s == 0.001


def test_a_change_of_kind_flushes_so_a_record_holds_one_kind() -> None:
    c = coalescer(max_chars=100)
    c.cancel_checked(0.0)
    # GIVEN reasoning deltas, the first written at once
    assert c.append("r1", RecordType.REASONING) is True
    assert c.next_step(0.0) == Step(WriterAction.WRITE_DELTA, "r1", kind=RecordType.REASONING)
    assert c.append(" r2", RecordType.REASONING) is True  # a flush deadline to set
    assert c.append(" r3", RecordType.REASONING) is False
    # WHEN the reply's first delta arrives before the interval THEN the writer is woken and writes the reasoning
    # alone, at once
    assert c.append("You", RecordType.DELTA) is True
    assert c.next_step(0.01) == Step(WriterAction.WRITE_DELTA, " r2 r3", kind=RecordType.REASONING)
    # THEN the reply's deltas wait for the interval as usual, and a later kind switch flushes them likewise
    assert c.next_step(0.02).action is None
    c.append(" said", RecordType.DELTA)
    c.append(" hmm", RecordType.REASONING)
    assert c.next_step(0.03) == Step(WriterAction.WRITE_DELTA, "You said")
    c.end()
    assert c.next_step(0.04) == Step(WriterAction.WRITE_DELTA, " hmm", kind=RecordType.REASONING)
    assert c.next_step(0.04) == Step(WriterAction.END)


def test_a_full_buffer_never_takes_the_next_kind_along() -> None:
    c = coalescer(max_chars=4)
    c.append("ab", RecordType.REASONING)
    c.next_step(0.0)
    for text, kind in [("cd", RecordType.REASONING), ("ef", RecordType.DELTA), ("gh", RecordType.DELTA)]:
        c.append(text, kind)
    # THEN each record is one kind, in order, though all would fit in flush_max_chars
    assert c.next_step(0.01) == Step(WriterAction.WRITE_DELTA, "cd", kind=RecordType.REASONING)
    assert c.next_step(0.01) == Step(WriterAction.WRITE_DELTA, "efgh")


@pytest.mark.parametrize("char", ["\x01", '"', "\U0001f600", "\u00e9"], ids=["control", "quote", "astral", "latin"])
def test_the_largest_record_fits_a_kinesis_record_and_a_table_item(chat_table: ChatTable, char: str) -> None:
    # GIVEN a record of MAX_RECORD_CHARS characters, each of those that take the most room in its JSON
    record = TokenRecord.delta("s" * 32, 1, 1, char * MAX_RECORD_CHARS, 1)
    # THEN its data is within Kinesis's 1 MiB per record, and the table stores it as one item (400 KB)
    assert len(record.encode()) + len(record.session_id) <= 1024 * 1024
    chat_table.put_records([record])
    assert chat_table.query_records(record.session_id, 1) == [record]


# ------------------------------------------------------------------------------- tool calls

FIRST = ToolCallRef(0, "tooluse_a", "get_weather")
SECOND = ToolCallRef(1, "tooluse_b", "get_time")


def test_a_tool_calls_arguments_coalesce_like_text_and_its_end_goes_out_at_once() -> None:
    c = coalescer(max_chars=10)
    c.append("Sure.")
    assert c.next_step(0.0) == Step(WriterAction.WRITE_DELTA, "Sure.")
    # WHEN a call's arguments arrive in pieces THEN the text before them is no company: they start a record of their own
    assert c.append('{"ci', RecordType.TOOL_USE, FIRST) is True
    assert c.append('ty": ', RecordType.TOOL_USE, FIRST) is False
    # THEN they wait for the interval or the flush size, as text does
    assert c.next_step(0.1).action is None
    assert c.next_step(0.31) == Step(WriterAction.WRITE_DELTA, '{"city": ', kind=RecordType.TOOL_USE, call=FIRST)
    # WHEN the rest comes and the model ends the call THEN the rest and the end are one record, written at once
    c.append('"Paris"}', RecordType.TOOL_USE, FIRST)
    assert c.end_call(FIRST) is True
    step = c.next_step(0.32)
    assert step == Step(WriterAction.WRITE_DELTA, '"Paris"}', kind=RecordType.TOOL_USE, call=FIRST, end=True)


def test_an_end_after_the_calls_text_was_written_is_a_record_without_text() -> None:
    c = coalescer()
    c.append("{}", RecordType.TOOL_USE, FIRST)
    assert c.next_step(0.0).text == "{}"
    c.end_call(FIRST)
    assert c.next_step(0.01) == Step(WriterAction.WRITE_DELTA, "", kind=RecordType.TOOL_USE, call=FIRST, end=True)
    assert c.next_step(0.02).action is None


def test_two_calls_never_share_a_record() -> None:
    c = coalescer(max_chars=100)
    c.append("x", RecordType.TOOL_USE, FIRST)
    c.next_step(0.0)
    # GIVEN the rest of the first call, its end and the second call's first arguments, all buffered
    c.append('{"a": 1}', RecordType.TOOL_USE, FIRST)
    c.end_call(FIRST)
    c.append('{"b"', RecordType.TOOL_USE, SECOND)
    # THEN the first call's record ends with its end, at once, and the second's arguments wait for their own record
    first = c.next_step(0.01)
    assert first == Step(WriterAction.WRITE_DELTA, '{"a": 1}', kind=RecordType.TOOL_USE, call=FIRST, end=True)
    assert c.next_step(0.02).action is None
    assert c.next_step(0.32) == Step(WriterAction.WRITE_DELTA, '{"b"', kind=RecordType.TOOL_USE, call=SECOND)


def test_long_arguments_cost_no_more_records_than_the_same_text() -> None:
    # GIVEN the same deltas once as the reply and once as a call's arguments, both after a first record
    def records_for(kind: RecordType, call: ToolCallRef | None) -> int:
        c = coalescer(max_chars=16)
        c.append("first")
        c.next_step(0.0)
        steps = 0
        now = 0.0
        for index in range(200):
            now += 0.01
            c.append(f"piece{index:03d}", kind, call)
            while c.next_step(now).action is WriterAction.WRITE_DELTA:
                steps += 1
        c.end()
        while c.next_step(now).action is WriterAction.WRITE_DELTA:
            steps += 1
        return steps

    # THEN the call takes exactly as many records as the text
    assert records_for(RecordType.TOOL_USE, FIRST) == records_for(RecordType.DELTA, None) == 100
