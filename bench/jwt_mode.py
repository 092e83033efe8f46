"""The JWT auth mode beside NONE, in the same run: what checking a bearer token adds to a chat.

Two measurements, both against the local stack's own issuer (``chatstream_local.oidc``; RS256, a 2048-bit key):

- **The first token at one chat.** chatstream's stack (``NONE``) and a second stack with the same settings in the
  ``JWT`` mode run side by side; ``pairs`` chats are sent one at a time, alternately to each (which one goes first
  alternates too, so a change in the machine's load falls on both), the JWT ones with a valid access token. Each
  chat's time to first token is the client's (``bench.load``). Reported: each mode's percentiles, and the median of
  the pairs' differences (JWT − NONE): the overhead, held to at most 5 ms (:data:`OVERHEAD_TARGET_MS`).
- **Verification CPU per request.** A :class:`~chatstream.relay.bearer.BearerVerifier` for the JWT stack's issuer,
  built as a relay's environment builds it (its keys fetched by the first token, then kept), verifies one real
  access token ``verifications`` times in this process: the thread's CPU per verification, the median of
  ``batches`` batches. That is everything the relay does per request for a token (the header's checks, PyJWT's
  signature and claims, the audience and scope), with the same PyJWT and ``cryptography`` the layer pins.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bench.pairs import cell_fields, cell_json, failures, overhead_ms, ttft_of
from bench.pairs import exact as pairs_exact

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from bench.pairs import Pair
    from bench.records import TtftMs

OVERHEAD_TARGET_MS = 5.0  # the most the JWT check may add to the first token at one chat
TOKEN_ALGORITHM = "RS256"  # what the local issuer signs with (Cognito's, Auth0's, Entra ID's default too)


@dataclass(frozen=True)
class JwtOverhead:
    """The JWT cell (results.json's ``jwt_mode``): the first token in each mode, and the verification's CPU."""

    message: str
    model_delay_ms: int
    pairs: int  # chats per mode, sent alternately
    exact: bool  # every chat of both modes exact (the model's text, ended by done)
    ttft_ms_none: TtftMs
    ttft_ms_jwt: TtftMs
    overhead_ms_p50: float | None  # median of the pairs' differences, JWT − NONE
    overhead_target_ms: float
    verifications: int
    verify_cpu_us_p50: float  # CPU per verification, median of the batches
    verify_cpu_us_min: float  # the fastest batch's
    algorithm: str = TOKEN_ALGORITHM
    failures: tuple[str | None, ...] = ()  # the first three failed chats' errors

    @property
    def within_target(self) -> bool | None:
        return None if self.overhead_ms_p50 is None else self.overhead_ms_p50 <= self.overhead_target_ms

    @classmethod
    def of(
        cls,
        message: str,
        model_delay_ms: int,
        pairs: Sequence[Pair],
        expected: str,
        verify_cpu_s: Sequence[float],
        verifications: int,
    ) -> JwtOverhead:
        """From the pairs' samples (NONE's, JWT's) and each batch's CPU per verification, in seconds."""
        return cls(
            message=message,
            model_delay_ms=model_delay_ms,
            pairs=len(pairs),
            exact=pairs_exact(pairs, expected),
            ttft_ms_none=ttft_of([p[0] for p in pairs]),
            ttft_ms_jwt=ttft_of([p[1] for p in pairs]),
            overhead_ms_p50=overhead_ms(pairs),
            overhead_target_ms=OVERHEAD_TARGET_MS,
            verifications=verifications,
            verify_cpu_us_p50=round(statistics.median(verify_cpu_s) * 1e6, 1),
            verify_cpu_us_min=round(min(verify_cpu_s) * 1e6, 1),
            failures=failures(pairs),
        )

    def to_json(self) -> dict[str, Any]:
        return cell_json(self)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> JwtOverhead:
        return cls(**cell_fields(raw, ("ttft_ms_none", "ttft_ms_jwt")))


def verification_cpu(verify: Callable[[], object], verifications: int, batches: int = 20) -> list[float]:
    """``verify()`` called ``verifications`` times after one call that warms it (the first token's fetch of the keys
    and PyJWT's import), in ``batches`` batches: each batch's thread CPU per call, in seconds."""
    verify()
    per_batch = max(verifications // batches, 1)
    out = []
    for _ in range(batches):
        started = time.thread_time()
        for _ in range(per_batch):
            verify()
        out.append((time.thread_time() - started) / per_batch)
    return out
