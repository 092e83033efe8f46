"""Ending turns whose generation failed outside the proxy's own error handling.

The proxy ends every turn it runs with a terminal record. What it cannot handle is not running
at all, or dying: a crash, an out-of-memory kill, its timeout, throttling of the asynchronous
invocation, or an event too old to run. Lambda then sends the invocation to the proxy's
``OnFailure`` destination (ProxyFailureQueue) as a destination record::

    {"version": "1.0", "timestamp": "…",
     "requestContext": {"requestId": "…", "functionArn": "…", "condition": "RetriesExhausted",
                        "approximateInvokeCount": 1},
     "requestPayload": {"session_id": "…", "turn": 3},
     "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
     "responsePayload": {"errorType": "Sandbox.Timedout", "errorMessage": "…"}}

The reaper (TurnReaperFunction) reads those and ends the turn in the read model: status
``error`` with code ``generation_failed`` (retryable), the text generated so far, and the session
freed for its next turn. It writes no token record (it cannot know the next ``seq`` while the
consumer may still be materializing); followers see the turn end and send ``error`` built from the
turn item. A turn that already ended (its terminal record arrived after all) is left alone, also when it ends
between the reaper's reads and its write (the write is conditional on the turn being in progress); and a terminal
record that the consumer materializes after the reaper ended the turn overrides it, as the token log is what
happened.

A record may be about a delivery that did not own the turn: Lambda may deliver an event twice, and the relay's
retried Invoke may queue a second event, and the proxy claims the turn for the first delivery that runs (the turn
item's ``generator``: its ``aws_request_id``, which is the record's ``requestContext.requestId``: one id per event,
its retries included). A turn claimed by another delivery is left to it (that delivery, if it dies, sends its own
record; a turn left generating past the relay's stale limit is taken over by the next ``POST /chat``):

- ``EventAgeExceeded``, the delivery never ran: the turn is ended only if no delivery claimed it;
- any other condition (``RetriesExhausted``: it ran and failed): only if no delivery claimed it, or this one did.

When the relay ended a turn it could not start (``generator`` ``"relay"``) the turn has ended: nothing to do.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from chatstream.errors import InvalidEvent
from chatstream.proxy_event import GenerateRequest
from chatstream.records import ErrorInfo, TokenRecord

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from chatstream.table import ChatTable, Turn

ERROR_CODE = "generation_failed"
EVENT_AGE_EXCEEDED = "EventAgeExceeded"  # the record's condition when the event never ran (throttled until too old)


class Reaping(StrEnum):
    """What the reaper did with one failed generation's turn."""

    ENDED = "ended"  # it ended the turn as generation_failed
    NOTHING_TO_END = "nothing_to_end"  # no such turn, it ended, or its terminal record is in
    LEFT_TO_CLAIMANT = "left_to_claimant"  # another delivery of the event claimed the turn and may be generating it


@dataclass(frozen=True)
class FailedGeneration:
    """One destination record of a failed asynchronous proxy invocation."""

    request: GenerateRequest
    request_id: str | None  # the failed delivery's (requestContext.requestId)
    condition: str
    error_type: str
    error_message: str

    @classmethod
    def from_destination_record(cls, body: str | Mapping[str, Any]) -> FailedGeneration:
        """Parse a destination record; :class:`InvalidEvent` when it is not one about a generation."""
        try:
            raw = json.loads(body) if isinstance(body, str) else body
        except ValueError as err:
            raise InvalidEvent(f"not a destination record (not JSON: {err})") from err
        if not isinstance(raw, dict) or not isinstance(raw.get("requestPayload"), dict):
            raise InvalidEvent("not a destination record (no requestPayload object)")
        request = GenerateRequest.from_event(raw["requestPayload"])
        context = raw.get("requestContext")
        context = context if isinstance(context, dict) else {}
        response = raw.get("responsePayload")
        response = response if isinstance(response, dict) else {}
        return cls(
            request=request,
            request_id=str(context["requestId"]) if context.get("requestId") else None,
            condition=str(context.get("condition", "unknown")),
            error_type=str(response.get("errorType", "unknown")),
            error_message=str(response.get("errorMessage", ""))[:500],
        )

    def error(self) -> ErrorInfo:
        return ErrorInfo(
            ERROR_CODE,
            f"the generation stopped before it could end the turn ({self.condition}: {self.error_type})",
            True,
        )

    def claimed_elsewhere(self, turn: Turn) -> bool:
        """Whether another delivery of the event claimed ``turn`` (see the module's docstring)."""
        if turn.generator is None:
            return False
        return self.condition == EVENT_AGE_EXCEEDED or turn.generator != self.request_id


def end_abandoned_turn(table: ChatTable, failed: FailedGeneration, now_ms: Callable[[], int]) -> Reaping:
    """End the failed generation's turn if it is still in progress and not another delivery's."""
    request = failed.request
    turn = table.get_turn(request.session_id, request.turn, texts=False)
    if turn is None or turn.finished:
        return Reaping.NOTHING_TO_END
    if failed.claimed_elsewhere(turn):
        return Reaping.LEFT_TO_CLAIMANT
    records = table.query_records(request.session_id, request.turn)
    if any(record.is_terminal for record in records):
        return Reaping.NOTHING_TO_END  # the terminal record is in; the consumer completes the turn
    next_seq = max((record.seq for record in records), default=0) + 1
    terminal = TokenRecord.failure(request.session_id, request.turn, next_seq, failed.error(), now_ms())
    # Conditional: the terminal record may have been put just before the proxy died, and the consumer may end the
    # turn from it between the reads above and this write; then its outcome stands. Its texts are read from its
    # records, not stored now: records a lagging consumer (or a redrive) writes after this are part of its reply.
    # A turn no delivery claimed never reached the model: its owner is charged nothing for it.
    ended = table.turns.end_presumed_lost(terminal, claimed=turn.generator is not None)
    return Reaping.ENDED if ended else Reaping.NOTHING_TO_END
