"""tests.support.require_or_skip: a test whose prerequisite the machine lacks skips, but fails under CI."""

from __future__ import annotations

import pytest

from tests.support import require_or_skip


def outcome(available: bool) -> BaseException | None:
    """What ``require_or_skip`` raised (pytest's skip or failure), caught so neither reaches this test's own result."""
    try:
        require_or_skip(available, "no curl")
    except (pytest.skip.Exception, pytest.fail.Exception) as raised:
        return raised
    return None


def test_a_missing_prerequisite_skips_on_a_developers_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    raised = outcome(available=False)
    assert isinstance(raised, pytest.skip.Exception) and str(raised) == "no curl"


def test_a_missing_prerequisite_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    raised = outcome(available=False)
    assert isinstance(raised, pytest.fail.Exception)
    assert str(raised) == "no curl (under CI=true a missing prerequisite fails the run)"


@pytest.mark.parametrize("ci", ["", "true"])
def test_a_prerequisite_that_is_there_lets_the_test_run(monkeypatch: pytest.MonkeyPatch, ci: str) -> None:
    monkeypatch.setenv("CI", ci)
    assert outcome(available=True) is None
