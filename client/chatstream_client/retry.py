"""When the client sends a request again, and how long it waits first: :class:`RetryPolicy`.

A user's client meets ``429`` (Lambda throttled the Function URL), ``503`` (the relay's ``unavailable``, or a
busy front end) and ``502`` (the relay failed before its first byte) on a busy service, and should try again
after a short, random wait rather than give up or hammer the service. The wait is exponential backoff with full
jitter (the AWS Architecture Blog's "Exponential Backoff And Jitter"): uniform in ``[0, min(cap_s, base_s *
2 ** (n - 1))]`` before retry ``n``, never shorter than a ``Retry-After`` the answer carried, and bounded in
attempts. Which requests may be sent again after which answers is :mod:`chatstream_client.api`'s rule
(docs/HTTP_API.md, "Retries").

This is the source of the numbers a user's retries follow. The formula has two more copies, which cannot import
this package, nor this package them: the chat page's ``layers/chatstream/chatstream/relay/static/retry.js`` (it runs
in the browser) copies these numbers (``ATTEMPTS``, ``BASE_MS``, ``CAP_MS``, ``MAX_RETRY_AFTER_MS``, the statuses,
the refusals' codes; ``api.py``'s ``OUTAGE_S`` and ``READ_TIMEOUT_S`` as ``RESUME_GIVE_UP_MS`` and ``IDLE_MS``), and
the functions' layer
has the same full jitter in ``layers/chatstream/chatstream/backoff.py`` (``Backoff``, for the AWS calls inside the
functions, with each adapter's own numbers; this package is installable alone and never imports the layer).
``tests/unit/test_backoff_copies.py`` holds the three to one formula and the page to these numbers, so a number
changed in one copy alone fails it.

A ``429`` can also be the relay's refusal of the caller's budget (:data:`REFUSALS`): that one is reported, not
retried, whatever its ``Retry-After``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

# Answers after which the request itself did not take effect, or may have: safe to send again when the request
# is idempotent (GET, cancel, POST /chat with its Idempotency-Key), unless the answer says x-should-retry: false.
RETRYABLE = frozenset({429, 500, 502, 503, 504})
# A 429 with one of these codes is the caller's budget refusing a turn (requests per minute, turns at once, tokens
# per day): reported, with when to try again (its Retry-After), not waited out.
REFUSALS = frozenset({"rate_limit_exceeded", "insufficient_quota"})


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5  # requests in all, the first one included
    base_s: float = 0.25
    cap_s: float = 4.0
    max_retry_after_s: float = 30.0  # an answer asking for a longer wait ends the retries instead
    uniform: Callable[[float, float], float] = field(default=random.uniform, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("a retry policy makes at least one attempt")

    def delay(self, retry: int, retry_after_s: float | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (1 for the first): full jitter, at least ``retry_after_s``."""
        jittered = self.uniform(0.0, min(self.cap_s, self.base_s * 2 ** min(max(retry, 1) - 1, 32)))
        return jittered if retry_after_s is None else max(jittered, retry_after_s)

    def honours(self, retry_after_s: float | None) -> bool:
        """Whether a retry may wait what the answer asked for (``None``: it asked for nothing)."""
        return retry_after_s is None or retry_after_s <= self.max_retry_after_s


def retry_after_s(value: str | None, now: Callable[[], datetime] | None = None) -> float | None:
    """A ``Retry-After`` header in seconds (RFC 9110 §10.2.3: delay-seconds or an HTTP-date); ``None`` when absent
    or unreadable."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    current = now() if now is not None else datetime.now(UTC)
    return max(0.0, (when - current).total_seconds())
