"""Chats at one chat sent alternately to chatstream's stack and to a twin with one thing changed (the JWT auth mode,
the budgets per caller), in the same run: what that one thing adds to the first token.

``pairs`` chats go one at a time to each, alternately, and which of the two goes first alternates too, so a change in
the machine's load falls on both. The overhead is the median of the pairs' differences (twin − base), not the
difference of the medians: a drift between pairs cancels out of each pair.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from bench.records import TtftMs, percentile

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from bench.load import ChatSample

Pair = tuple["ChatSample", "ChatSample"]


def rounded(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def alternate(pairs: int, base: Callable[[], ChatSample], twin: Callable[[], ChatSample]) -> list[Pair]:
    """``pairs`` chats on each, one at a time, alternately; the first of each pair alternates too."""
    out = []
    for index in range(pairs):
        if index % 2 == 0:
            a = base()
            b = twin()
        else:
            b = twin()
            a = base()
        out.append((a, b))
    return out


def ttft_of(samples: Sequence[ChatSample]) -> TtftMs:
    """The samples' times to first token: p50, p95, p99."""
    ttfts = [s.ttft_ms for s in samples if s.ttft_ms is not None]
    return TtftMs(rounded(percentile(ttfts, 50)), rounded(percentile(ttfts, 95)), rounded(percentile(ttfts, 99)))


def overhead_ms(pairs: Sequence[Pair]) -> float | None:
    """The median of the pairs' differences (twin − base), in ms; None without a pair that has both."""
    differences = [b.ttft_ms - a.ttft_ms for a, b in pairs if a.ttft_ms is not None and b.ttft_ms is not None]
    return rounded(statistics.median(differences) if differences else None, 2)


def exact(pairs: Sequence[Pair], expected: str) -> bool:
    """Every chat of both stacks gave the model's text, ended by done."""
    return all(s.ok and s.text == expected and s.error is None for pair in pairs for s in pair)


def failures(pairs: Sequence[Pair]) -> tuple[str | None, ...]:
    """The first three failed chats' errors."""
    return tuple(s.error for pair in pairs for s in pair if not s.ok or s.error is not None)[:3]


def cell_json(cell: Any) -> dict[str, Any]:
    """A paired cell's record (a dataclass with ``failures``) as results.json holds it."""
    out: dict[str, Any] = asdict(cell)
    out["failures"] = list(cell.failures)
    return out


def cell_fields(raw: Mapping[str, Any], ttft_fields: Sequence[str]) -> dict[str, Any]:
    """A paired cell's fields from results.json: its ``ttft_fields`` as :class:`TtftMs`, its failures a tuple."""
    return {
        **raw,
        **{name: TtftMs(**raw[name]) for name in ttft_fields},
        "failures": tuple(raw.get("failures", ())),
    }
