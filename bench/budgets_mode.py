"""The budgets per caller beside a stack without them, in the same run: what a turn's admission adds to a chat.

chatstream's stack (the local stack runs without budgets unless asked) and a twin with ``CallerRequestsPerMinute``,
``CallerTokensPerDay`` and ``CallerTurnsAtOnce`` set, as a deploy has them, but too high to refuse the benchmark's
turns (everyone is one caller under ``NONE``). On the twin each turn's start writes the caller's counters, its place
among the turns generating and its reservation in its one transaction, the relay reads the ``x-ratelimit-*``
headers' standing beside its invoke, and the turn's end settles the reservation. ``pairs`` chats go alternately to
each, at one chat (:mod:`bench.pairs`); the overhead is the median of the pairs' differences (budgets − none), held
to at most 5 ms (:data:`OVERHEAD_TARGET_MS`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bench.pairs import cell_fields, cell_json, exact, failures, overhead_ms, ttft_of

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from bench.pairs import Pair
    from bench.records import TtftMs

OVERHEAD_TARGET_MS = 5.0  # the most the admission may add to the first token at one chat

# The twin's parameters: the budgets on, too high to refuse a turn of the benchmark's.
PARAMETERS = {
    "CallerRequestsPerMinute": "1000000",
    "CallerTokensPerDay": "1000000000",
    "CallerTurnsAtOnce": "1000000",
}


@dataclass(frozen=True)
class BudgetsOverhead:
    """The budgets cell (results.json's ``budgets_mode``): the first token without and with the budgets."""

    message: str
    model_delay_ms: int
    pairs: int  # chats per stack, sent alternately
    exact: bool  # every chat of both stacks exact (the model's text, ended by done)
    ttft_ms_off: TtftMs
    ttft_ms_on: TtftMs
    overhead_ms_p50: float | None  # median of the pairs' differences, budgets − none
    overhead_target_ms: float
    failures: tuple[str | None, ...] = ()  # the first three failed chats' errors

    @property
    def within_target(self) -> bool | None:
        return None if self.overhead_ms_p50 is None else self.overhead_ms_p50 <= self.overhead_target_ms

    @classmethod
    def of(cls, message: str, model_delay_ms: int, pairs: Sequence[Pair], expected: str) -> BudgetsOverhead:
        """From the pairs' samples (without the budgets', with them)."""
        return cls(
            message=message,
            model_delay_ms=model_delay_ms,
            pairs=len(pairs),
            exact=exact(pairs, expected),
            ttft_ms_off=ttft_of([p[0] for p in pairs]),
            ttft_ms_on=ttft_of([p[1] for p in pairs]),
            overhead_ms_p50=overhead_ms(pairs),
            overhead_target_ms=OVERHEAD_TARGET_MS,
            failures=failures(pairs),
        )

    def to_json(self) -> dict[str, Any]:
        return cell_json(self)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> BudgetsOverhead:
        return cls(**cell_fields(raw, ("ttft_ms_off", "ttft_ms_on")))
