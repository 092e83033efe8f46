"""Exponential backoff with full jitter, the wait every adapter sleeps between attempts.

``Backoff(base_s, cap_s).delay(n)`` is uniform in ``[0, min(cap_s, base_s * 2 ** n)]``: "full jitter"
(the AWS Architecture Blog's "Exponential Backoff And Jitter"), which spreads out the retries of many
writers that failed together.
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
