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
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chatstream.errors import InvalidEvent
from chatstream.proxy_event import GenerateRequest
from chatstream.records import ErrorInfo, TokenRecord, assistant_text, reasoning_text

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from chatstream.table import ChatTable

ERROR_CODE = "generation_failed"


@dataclass(frozen=True)
class FailedGeneration:
    """One destination record of a failed asynchronous proxy invocation."""

    request: GenerateRequest
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


def end_abandoned_turn(table: ChatTable, failed: FailedGeneration, now_ms: Callable[[], int]) -> bool:
    """End the failed generation's turn if it is still in progress; True when this call ended it."""
    request = failed.request
    turn = table.get_turn(request.session_id, request.turn)
    if turn is None or turn.finished:
        return False
    records = table.query_records(request.session_id, request.turn)
    if any(record.is_terminal for record in records):
        return False  # the terminal record is in; the consumer completes the turn
    text, reasoning = assistant_text(records), reasoning_text(records)
    next_seq = max((record.seq for record in records), default=0) + 1
    terminal = TokenRecord.failure(request.session_id, request.turn, next_seq, failed.error(), now_ms())
    # Conditional: the terminal record may have been put just before the proxy died, and the consumer may end the
    # turn from it between the reads above and this write; then its outcome stands.
    return table.complete_turn(terminal, text, reasoning=reasoning, if_in_progress=True)
