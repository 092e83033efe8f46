"""The client's event-id checks (HTTP_API.md, "Event ids" and "Pacing"): `event_position` and `ids_in_order`.

`ids_in_order` is the only id-order check of several integration tests, the benchmark's exact column and
`make smoke`: each way a turn's ids can go wrong has its own case here.
"""

from __future__ import annotations

import math

import pytest

from chatstream_client.api import event_position, ids_in_order


def test_a_whole_record_comes_after_every_piece_of_it() -> None:
    # GIVEN a record's piece, the record itself and the next record's first piece (leading zeros allowed)
    # WHEN their positions are read
    # THEN the piece is before the whole record, which is before the next record's piece
    assert event_position("7.12") == (7, 12.0)
    assert event_position("007") == (7, math.inf)
    assert event_position("7.12") < event_position("7") < event_position("8.1")


@pytest.mark.parametrize(
    "ids",
    [
        pytest.param([], id="a turn without text"),
        pytest.param(["1", "2", "3"], id="pacing off: one id per record"),
        pytest.param(["1.3", "1", "2.4", "2.9", "2", "3"], id="paced: each record's last piece carries its seq"),
        pytest.param(["01", "02.3", "02"], id="leading zeros"),
    ],
)
def test_a_whole_turns_ids_in_order_pass(ids: list[str]) -> None:
    # GIVEN the ids of a whole turn as the relay sends them
    # WHEN they are checked
    # THEN they are in order
    assert ids_in_order(ids)


def test_ids_from_a_later_first_record_pass_with_its_seq() -> None:
    # GIVEN a resume's ids, which start at record 5
    ids = ["5.2", "5", "6"]

    # WHEN they are checked from record 5, and from the default record 1
    # THEN they are in order from 5 only
    assert ids_in_order(ids, first_seq=5)
    assert not ids_in_order(ids)


@pytest.mark.parametrize(
    ("ids", "first_seq"),
    [
        pytest.param(["2", "1"], 1, id="records out of order"),
        pytest.param(["1", "2.5", "2.3", "2"], 1, id="pieces out of order"),
        pytest.param(["1", "2", "2.4"], 1, id="a piece after its whole record"),
        pytest.param(["1", "3"], 1, id="a missing seq"),
        pytest.param(["1", "1", "2"], 1, id="a record repeated"),
        pytest.param(["1", "2.3", "2.3", "2"], 1, id="a piece repeated"),
        pytest.param(["1", "2", "002"], 1, id="a record repeated in another spelling"),
        pytest.param(["6", "7.3"], 6, id="a piece whose record never completes"),
        pytest.param(["1", "2"], 2, id="a wrong first seq: a record before it"),
        pytest.param(["3", "4"], 1, id="a wrong first seq: records before it missing"),
    ],
)
def test_ids_that_are_not_a_whole_turns_in_order_fail(ids: list[str], first_seq: int) -> None:
    # GIVEN ids that skip, repeat, reorder or leave a record unfinished
    # WHEN they are checked
    # THEN they are not in order
    assert not ids_in_order(ids, first_seq=first_seq)


def test_a_piece_whose_record_never_completes_fails_even_at_the_end() -> None:
    # GIVEN a turn's ids whose last record was sent only in part (its last piece, "7", never came)
    ids = ["1", "2", "3", "4", "5", "6", "7.3"]

    # WHEN they are checked
    # THEN they are not a whole turn's, though every record before is complete
    assert not ids_in_order(ids)
    assert ids_in_order(ids[:-1])
