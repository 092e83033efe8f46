"""Pacing: pieces on word boundaries, their schedule, positions (event ids)."""

from __future__ import annotations

import pytest

from chatstream.relay.pace import (
    DEFAULT_INTERVAL_S,
    MAX_INTERVAL_S,
    MAX_PIECES,
    SPREAD_FACTOR,
    MalformedPosition,
    Pacer,
    Position,
    TextEvent,
    pieces,
)


def texts(events: list[TextEvent]) -> list[str]:
    return [event.text for event in events]


def ids(events: list[TextEvent]) -> list[str]:
    return [str(event.position) for event in events]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (" You said: hello", [" You", " said:", " hello"]),
        ("Hello,  world!\n\nNext ", ["Hello,", "  world!", "\n\nNext "]),
        ("word", ["word"]),
        ("   ", ["   "]),
        ("  lead", ["  lead"]),
        ("héllo wörld 🙂 ok", ["héllo", " wörld", " 🙂", " ok"]),
    ],
)
def test_a_record_is_cut_into_words_with_the_spaces_before_them(text: str, expected: list[str]) -> None:
    # WHEN a record's text is cut into pieces
    cut = pieces(TextEvent("token", 4, text))
    # THEN each is a word with the spaces before it, and they join back to the text
    assert texts(cut) == expected
    assert "".join(texts(cut)) == text
    # AND every piece names where it ends in the record, the last one the record itself
    assert ids(cut)[-1] == "4"
    ends = [sum(len(t) for t in expected[: i + 1]) for i in range(len(expected) - 1)]
    assert ids(cut)[:-1] == [f"4.{end}" for end in ends]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("机器学习。", ["机", "器", "学", "习", "。"]),
        ("今日は良い天気", ["今", "日", "は", "良", "い", "天", "気"]),
        ("AI是 good 模型", ["AI", "是", " good", " 模", "型"]),
        ("か\u3099き", ["か\u3099", "き"]),  # a kana with its combining voicing mark
        ("葛\U000e0100葛\ufe00x", ["葛\U000e0100", "葛\ufe00", "x"]),  # ideographs with their variation selectors
        ("漢字\u0301漢", ["漢", "字\u0301", "漢"]),  # a combining accent stays with its character
        ("中\u20e3\u0323\u0301x", ["中\u20e3\u0323\u0301", "x"]),  # however many marks follow it
        ("𠀀𠀁 ok", ["𠀀", "𠀁", " ok"]),  # supplementary ideographs
        ("สวัสดีครับ", ["สวัสดีครับ"]),  # Thai needs a dictionary to find its words: not cut
    ],
)
def test_text_written_without_spaces_is_cut_at_every_character(text: str, expected: list[str]) -> None:
    # WHEN a record of Chinese or Japanese text is cut THEN every character is a piece, with what belongs to it
    cut = pieces(TextEvent("token", 3, text))
    assert texts(cut) == expected
    assert "".join(texts(cut)) == text


@pytest.mark.parametrize("text", ["中" * 1000, " w" * 1000, "中" * 65])
def test_a_record_of_many_words_is_cut_into_at_most_max_pieces(text: str) -> None:
    # WHEN a full-size record (a fast model's) is cut
    cut = pieces(TextEvent("token", 9, text))
    # THEN its words are merged, evenly, into MAX_PIECES pieces that still join to its text, with exact ids
    assert len(cut) == MAX_PIECES
    assert "".join(texts(cut)) == text
    assert max(len(piece.text) for piece in cut) <= 2 * min(len(piece.text) for piece in cut)
    assert ids(cut)[-1] == "9"
    assert ids(cut)[:-1] == [f"9.{sum(len(piece.text) for piece in cut[: i + 1])}" for i in range(len(cut) - 1)]


def test_the_rest_of_a_record_keeps_its_offsets() -> None:
    # GIVEN the rest of record 7 after its first 4 characters (a client resuming from "7.4")
    rest = TextEvent("token", 7, " two three", start=4)
    # WHEN it is cut THEN the offsets count from the record's start
    assert ids(pieces(rest)) == ["7.8", "7"]


def test_the_first_piece_is_due_at_once_and_the_rest_spread_over_the_interval() -> None:
    # GIVEN a pacer with nothing waiting
    pacer = Pacer()
    # WHEN a record of four words arrives at t=10 s, records coming at a cadence whose spread is 0.2 s
    pacer.add(TextEvent("token", 2, " a b c d"), 10.0, 0.2 / SPREAD_FACTOR)
    # THEN its first piece is due at once, and the others one every 0.05 s
    assert texts(pacer.due(10.0)) == [" a"]
    assert pacer.next_due() == pytest.approx(10.05)
    assert pacer.due(10.049) == []
    assert texts(pacer.due(10.05)) == [" b"]
    assert texts(pacer.due(10.2)) == [" c", " d"]
    assert pacer.next_due() is None


def test_a_record_that_finds_a_backlog_is_spread_with_it_over_one_interval() -> None:
    # GIVEN two pieces still waiting at t=0.1 (the first of four went at 0)
    pacer = Pacer()
    pacer.add(TextEvent("token", 1, "a b c d"), 0.0, 0.4 / SPREAD_FACTOR)
    assert texts(pacer.due(0.1)) == ["a", " b"]
    # WHEN the next record (two words) arrives at 0.1
    pacer.add(TextEvent("token", 2, " e f"), 0.1, 0.4 / SPREAD_FACTOR)
    # THEN the next piece keeps its time, and the four waiting are spread to end within one spread (0.4 s) of 0.1
    assert pacer.next_due() == pytest.approx(0.2)
    times = []
    while (due := pacer.next_due()) is not None:
        times.append(due)
        pacer.due(due)
    assert len(times) == 4 and times[-1] < 0.5
    assert times == pytest.approx([0.2, 0.275, 0.35, 0.425])


@pytest.mark.parametrize(("interval", "spread"), [(None, DEFAULT_INTERVAL_S), (30.0, MAX_INTERVAL_S)])
def test_an_unknown_or_slow_cadence_spreads_over_a_bounded_interval(interval: float | None, spread: float) -> None:
    # WHEN a record of two words arrives before the cadence is known, or on a very slow one
    pacer = Pacer()
    pacer.add(TextEvent("token", 1, "a b"), 0.0, interval)
    pacer.due(0.0)
    # THEN the second piece is due half the default (or longest) spread later
    assert pacer.next_due() == pytest.approx(spread / 2)


def test_flush_gives_every_waiting_piece_at_once() -> None:
    # GIVEN pieces waiting
    pacer = Pacer()
    pacer.add(TextEvent("token", 1, "a b c"), 0.0, 0.3)
    pacer.due(0.0)
    # WHEN the stream ends THEN the rest goes out at once, in order, and nothing waits
    assert ids(pacer.flush()) == ["1.3", "1"]
    assert pacer.next_due() is None


def test_without_pacing_each_record_is_one_event_due_at_once() -> None:
    # GIVEN pacing off
    pacer = Pacer(enabled=False)
    # WHEN two records arrive
    pacer.add(TextEvent("token", 1, "a b"), 5.0, 0.3)
    pacer.add(TextEvent("token", 2, " c d"), 5.0, 0.3)
    # THEN both are due at once, whole, with their records' ids
    assert [(e.text, str(e.position)) for e in pacer.due(5.0)] == [("a b", "1"), (" c d", "2")]


def test_empty_text_is_nothing_to_send() -> None:
    pacer = Pacer()
    pacer.add(TextEvent("token", 1, ""), 0.0, 0.3)
    assert pacer.next_due() is None


@pytest.mark.parametrize(
    ("text", "position"),
    [("0", Position(0)), ("12", Position(12)), ("12.5", Position(12, 5)), ("012.05", Position(12, 5))],
)
def test_positions_parse_and_order(text: str, position: Position) -> None:
    assert Position.parse(text) == position
    assert Position(3, 9).key < Position(3).key < Position(4, 1).key


@pytest.mark.parametrize("text", ["", "a", "1.", ".1", "1.2.3", "-1", "1.-2", "123456789", "1.12345678", " 1"])
def test_malformed_positions_are_refused(text: str) -> None:
    with pytest.raises(MalformedPosition):
        Position.parse(text)
