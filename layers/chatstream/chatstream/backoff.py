"""Exponential backoff with full jitter, the wait every adapter sleeps between attempts.

``Backoff(base_s, cap_s).delay(n)`` is uniform in ``[0, min(cap_s, base_s * 2 ** n)]``: "full jitter"
(the AWS Architecture Blog's "Exponential Backoff And Jitter"), which spreads out the retries of many
writers that failed together.

The same formula has two more copies, for a user's retries, which this layer cannot serve: the client package's
``client/chatstream_client/retry.py`` (``RetryPolicy``: installable alone, it never imports the layer; it counts
retries from 1, so its retry ``n`` is ``delay(n - 1)`` here) and the chat page's ``relay/static/retry.js`` (it runs in
the browser). Those two share their numbers (the client's are their source); the numbers here are the AWS calls'
(each adapter chooses its own). ``tests/unit/test_backoff_copies.py`` holds the three to one formula.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable


@dataclass(frozen=True)
class Backoff:
    base_s: float = 0.05
    cap_s: float = 2.0
    uniform: Callable[[float, float], float] = field(default=random.uniform, repr=False, compare=False)

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retry number ``attempt``: the cap doubles with each attempt."""
        return self.uniform(0.0, min(self.cap_s, self.base_s * 2 ** min(attempt, 64)))
