"""Budgets per caller, as the relay answers them (:mod:`chatstream.table.budgets` enforces them).

A refused turn is ``429`` (:func:`refused`), in the API's error shape (OpenAI's under ``/v1``, where the code is
OpenAI's: ``rate_limit_exceeded``, or ``insufficient_quota`` when the day's tokens are spent), whose message says
which limit refused it and when to try again; ``Retry-After`` (whole seconds, rounded up) and ``retry-after-ms``
(which OpenAI's SDKs read first) say it too, and ``x-should-retry: false`` when waiting a few seconds cannot help
before the day's reset, which OpenAI's SDKs obey. Every answer to a request that starts a turn carries the caller's
limits in the headers OpenAI's clients know (:func:`headers`): ``x-ratelimit-limit-requests``,
``x-ratelimit-remaining-requests``, ``x-ratelimit-reset-requests`` and the same three for ``-tokens`` (the reset as
OpenAI writes it: ``1s``, ``6m0s``), for each limit that is on.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from chatstream.relay.http import HttpError
from chatstream.table.budgets import LimitKind

if TYPE_CHECKING:
    from chatstream.table.budgets import Refusal, Standing

RATE_LIMIT_EXCEEDED = "rate_limit_exceeded"
INSUFFICIENT_QUOTA = "insufficient_quota"
REFUSED = "turn refused"  # the log line of a refusal (with its owner): the CallerRefusalsRule counts them by owner


def refused(refusal: Refusal) -> HttpError:
    """The ``429`` of a refused turn."""
    seconds = max(1, math.ceil(refusal.retry_after_ms / 1000))
    answer = {"Retry-After": str(seconds), "retry-after-ms": str(refusal.retry_after_ms)}
    if refusal.spent:
        answer["x-should-retry"] = "false"
    code = INSUFFICIENT_QUOTA if refusal.spent else RATE_LIMIT_EXCEEDED
    return HttpError(429, code, message(refusal), answer)


def message(refusal: Refusal) -> str:
    """What refused the turn and when to try again, in words for the person who sent it."""
    limits, wait = refusal.limits, _wait(refusal.retry_after_ms)
    if LimitKind.TOKENS in refusal.kinds and refusal.spent:
        budget = f"{limits.tokens_per_day:,} tokens a day"
        if refusal.reserve > limits.tokens_per_day:
            return (
                f"this message may use up to {refusal.reserve:,} tokens (its max_tokens), more than the whole "
                f"budget of {budget}: ask for fewer (max_tokens)"
            )
        left = max(limits.tokens_per_day - (refusal.tokens_used or 0), 0)
        return (
            f"the day's tokens are spent ({budget}; {left:,} left, and this message may use up to "
            f"{refusal.reserve:,}): ask for fewer (max_tokens), or try again after 00:00 UTC, {wait}"
        )
    reasons = []
    if LimitKind.REQUESTS in refusal.kinds:
        reasons.append(f"too many messages this minute (the limit is {limits.requests_per_minute:,} a minute)")
    if LimitKind.TURNS in refusal.kinds:
        reasons.append(f"too many replies being written at once (the limit is {limits.turns_at_once:,})")
    if LimitKind.TOKENS in refusal.kinds:
        reasons.append(
            f"the replies being written hold the rest of the day's {limits.tokens_per_day:,} tokens until they end"
        )
    return f"{' and '.join(reasons)}: try again {wait}"


def headers(standing: Standing) -> dict[str, str]:
    """The ``x-ratelimit-*`` headers of the limits that are on."""
    out: dict[str, str] = {}
    limits = standing.limits
    if limits.requests_per_minute:
        out["x-ratelimit-limit-requests"] = str(limits.requests_per_minute)
        out["x-ratelimit-remaining-requests"] = str(standing.requests_left)
        out["x-ratelimit-reset-requests"] = duration(standing.minute_reset_ms)
    if limits.tokens_per_day:
        out["x-ratelimit-limit-tokens"] = str(limits.tokens_per_day)
        out["x-ratelimit-remaining-tokens"] = str(standing.tokens_left)
        out["x-ratelimit-reset-tokens"] = duration(standing.day_reset_ms)
    return out


def duration(ms: int) -> str:
    """A wait as OpenAI's headers write it: ``850ms``, ``1s``, ``6m0s``, ``5h2m10s``."""
    if ms < 1000:
        return f"{max(ms, 0)}ms"
    seconds = math.ceil(ms / 1000)
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{seconds}s"
    return f"{minutes}m{seconds}s" if minutes else f"{seconds}s"


def _wait(ms: int) -> str:
    """``in 23 s``, ``in 5 min``, ``in 5 h 12 min``: when to try again, for a person."""
    seconds = math.ceil(ms / 1000)
    if seconds < 120:
        return f"in {seconds} s"
    minutes = math.ceil(seconds / 60)
    if minutes < 120:
        return f"in {minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"in {hours} h {minutes} min"
