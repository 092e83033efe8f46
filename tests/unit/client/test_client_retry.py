"""The client's retry policy: full-jitter backoff, bounded, never shorter than a Retry-After it honours."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from chatstream_client.api import ChatClient
from chatstream_client.retry import REFUSALS, RETRYABLE, RetryPolicy, retry_after_s


def test_the_wait_is_full_jitter_under_a_doubling_cap() -> None:
    # GIVEN a policy whose jitter reports the range it was asked to draw from
    ranges: list[tuple[float, float]] = []
    policy = RetryPolicy(base_s=0.25, cap_s=4.0, uniform=lambda low, high: ranges.append((low, high)) or high)

    # WHEN the waits before retries 1 to 7 are drawn
    waits = [policy.delay(n) for n in range(1, 8)]

    # THEN each is drawn from 0 up to the base doubled per retry, never above the cap
    assert waits == [0.25, 0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert all(low == 0.0 for low, _ in ranges)


def test_a_retry_after_is_a_floor_and_a_long_one_is_not_honoured() -> None:
    policy = RetryPolicy(uniform=lambda low, high: low, max_retry_after_s=30)

    assert policy.delay(1, retry_after_s=3.0) == 3.0
    assert policy.honours(None) and policy.honours(30.0) and not policy.honours(31.0)


def test_a_policy_makes_at_least_one_attempt() -> None:
    with pytest.raises(ValueError, match="at least one attempt"):
        RetryPolicy(attempts=0)


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        (None, None),
        ("", None),
        ("2", 2.0),
        (" 10 ", 10.0),
        ("-1", None),
        ("soon", None),
        ("Wed, 21 Oct 2015 07:28:30 GMT", 30.0),
        ("Wed, 21 Oct 2015 07:27:00 GMT", 0.0),  # a date in the past: retry now
    ],
)
def test_retry_after_reads_seconds_or_an_http_date(header: str | None, seconds: float | None) -> None:
    now = datetime(2015, 10, 21, 7, 28, 0, tzinfo=UTC)
    assert retry_after_s(header, now=lambda: now) == seconds


def test_what_is_sent_again_and_what_a_budget_refusal_says() -> None:
    # 502, 500 and 504 can come after the relay allocated the turn: a request is sent again after them only when it
    # changes nothing twice (a GET, a cancel, a POST /chat with its Idempotency-Key); never after a 409
    assert {429, 500, 502, 503, 504} == RETRYABLE and 409 not in RETRYABLE
    # and a 429 that is the caller's budget is reported, whatever it asks to wait (the relay's codes, as /v1's)
    assert {"rate_limit_exceeded", "insufficient_quota"} == REFUSALS


def test_a_silent_stream_is_taken_for_dropped_when_the_page_takes_it_so() -> None:
    # GIVEN the chat page's limit on a stream without a byte: three of the relay's 10 s keep-alive periods
    retry_js = Path(__file__).parents[3] / "layers/chatstream/chatstream/relay/static/retry.js"
    factors = re.search(r"const IDLE_MS = ([\d *]+);", retry_js.read_text())
    assert factors is not None
    idle_ms = math.prod(int(factor) for factor in factors[1].split("*"))
    # WHEN a client is made with its defaults
    with ChatClient() as client:
        read_timeout = client._http.timeout.read
    # THEN it waits for a byte as long as the page does, 30 s, before it resumes a silent stream
    assert read_timeout == idle_ms / 1000 == 30
