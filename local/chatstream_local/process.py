"""Process hygiene for the local stack."""

from __future__ import annotations

import signal
import sys


def die_with_parent(signum: int = signal.SIGKILL) -> None:
    """Linux: receive ``signum`` when our parent dies, so a killed supervisor leaves no orphan (a no-op elsewhere).

    The kernel tracks the parent *thread*: call it only in processes started from a long-lived thread.
    """
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signum)  # PR_SET_PDEATHSIG
