"""Exponential backoff with full jitter: the one wait every adapter sleeps between attempts."""

from __future__ import annotations

import pytest

from chatstream.backoff import Backoff


def test_the_bound_doubles_per_attempt_up_to_the_cap() -> None:
    # GIVEN a backoff whose random draw is the top of its range
    top = Backoff(base_s=0.05, cap_s=2.0, uniform=lambda low, high: high)
    # THEN the wait doubles with each attempt and stops at the cap
    assert [top.delay(attempt) for attempt in range(8)] == pytest.approx([0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0])
    assert top.delay(10_000) == 2.0


def test_the_wait_is_drawn_from_zero_to_the_bound() -> None:
    draws: list[tuple[float, float]] = []
    backoff = Backoff(base_s=0.2, cap_s=5.0, uniform=lambda low, high: draws.append((low, high)) or low)
    assert backoff.delay(3) == 0.0
    assert draws == [(0.0, 1.6)]


def test_real_waits_stay_within_the_bound() -> None:
    backoff = Backoff(base_s=0.05, cap_s=2.0)
    waits = [backoff.delay(2) for _ in range(200)]
    assert all(0.0 <= wait <= 0.2 for wait in waits) and len(set(waits)) > 1
