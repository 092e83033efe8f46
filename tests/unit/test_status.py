"""The turn statuses and stop reasons: the strings on the wire are the documented ones, and Bedrock's are all known."""

from __future__ import annotations

import botocore.session
import pytest

from chatstream.status import StopReason, TurnStatus


def test_turn_statuses_are_the_documented_strings() -> None:
    # THEN the values are what HTTP_API.md documents for a turn's status (and what the table items hold)
    assert [status.value for status in TurnStatus] == ["in_progress", "complete", "cancelled", "error"]
    assert [status.finished for status in TurnStatus] == [False, True, True, True]


def test_stop_reasons_are_bedrocks_plus_cancelled() -> None:
    # GIVEN the values of the StopReason shape in the installed Bedrock Runtime API model
    model = botocore.session.get_session().get_service_model("bedrock-runtime")
    bedrock = model.shape_for("StopReason").enum
    # THEN every one of them is a documented StopReason, and the only other one is ours: cancelled
    assert sorted(reason.value for reason in StopReason) == sorted([*bedrock, "cancelled"])
    assert all(StopReason(value).documented for value in bedrock)


def test_an_undocumented_stop_reason_is_carried_verbatim() -> None:
    reason = StopReason("new_reason")
    assert isinstance(reason, StopReason) and not reason.documented
    assert (str(reason), reason.value, f"{reason}") == ("new_reason", "new_reason", "new_reason")
    assert reason != StopReason.END_TURN and StopReason("end_turn") is StopReason.END_TURN


@pytest.mark.parametrize("value", [None, 5, b"end_turn"])
def test_a_stop_reason_that_is_not_a_string_is_refused(value: object) -> None:
    with pytest.raises(ValueError, match="not a valid StopReason"):
        StopReason(value)
