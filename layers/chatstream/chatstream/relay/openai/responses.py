"""The Responses API's objects and events, built from a turn (its item and its token records).

A response is a turn: its id is ``resp_<session_id>_<turn>`` (its message item's ``msg_<session_id>_<turn>``), and
``previous_response_id`` of turn *n* > 1 is turn *n − 1*'s response.

**Sequence numbers** are a function of the turn's records, so ``starting_after`` resumes exactly, in any later
request: ``response.created`` 0, ``response.in_progress`` 1, ``response.output_item.added`` 2,
``response.content_part.added`` 3; the delta record of ``seq`` *k* is ``response.output_text.delta`` 3 + *k*; the
terminal record of ``seq`` *N* is ``response.output_text.done`` 3 + *N*, ``response.content_part.done`` 4 + *N*,
``response.output_item.done`` 5 + *N* and ``response.completed`` (or ``response.incomplete``) 6 + *N*, or, when
the turn failed, ``response.failed`` 3 + *N*. An ``error`` event (the stream's own failure, or the relay's time
limit: resume from the last sequence number) takes the next number and is not replayed.

Statuses: a turn in progress is ``in_progress``; a complete one ``completed``, or ``incomplete`` when it stopped at
``max_tokens`` (``incomplete_details.reason: max_output_tokens``) or was filtered (``content_filter``); a cancelled
one ``cancelled`` (its stream ends with ``response.incomplete``); a failed one ``failed``, with ``error``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from chatstream.records import SESSION_ID_PATTERN, RecordType
from chatstream.relay import sse
from chatstream.relay.openai.turn_events import Done, Failed, KeepAlive, Reconnect, Token, TurnEvent
from chatstream.status import StopReason, TurnStatus

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from chatstream.records import TokenRecord
    from chatstream.table import ChatTable, Turn

PRELUDE_EVENTS = 4  # created, in_progress, output_item.added, content_part.added
_FILTERED = frozenset({StopReason.CONTENT_FILTERED, StopReason.GUARDRAIL_INTERVENED})


def response_id(session_id: str, turn: int) -> str:
    return f"resp_{session_id}_{turn}"


def parse_response_id(value: str) -> tuple[str, int] | None:
    """``(session_id, turn)`` of a response id, or ``None`` when it cannot be one."""
    prefix, _, rest = value.partition("_")
    session_id, _, turn = rest.rpartition("_")
    if prefix != "resp" or not SESSION_ID_PATTERN.match(session_id) or not (turn.isascii() and turn.isdigit()):
        return None
    number = int(turn)
    return (session_id, number) if 1 <= number <= 999_999 and turn == str(number) else None


def status_of(turn: Turn) -> str:
    if turn.status is TurnStatus.IN_PROGRESS:
        return "in_progress"
    if turn.status is TurnStatus.CANCELLED:
        return "cancelled"
    if turn.status is TurnStatus.ERROR:
        return "failed"
    if turn.stop_reason is StopReason.MAX_TOKENS or turn.stop_reason in _FILTERED:
        return "incomplete"
    return "completed"


def _message_item(turn: Turn, text: str, status: str) -> dict[str, Any]:
    return {
        "id": f"msg_{turn.session_id}_{turn.turn}",
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": [] if status == "in_progress" and not text else [_text_part(text)],
    }


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def response_object(turn: Turn, model: str, text: str | None = None, *, status: str | None = None) -> dict[str, Any]:
    """The response object of ``turn`` (``text``: its reply so far, for a turn in progress)."""
    status = status or status_of(turn)
    reply = turn.assistant if turn.finished else text
    output = []
    if reply or status not in ("in_progress", "queued"):
        output.append(_message_item(turn, reply or "", _item_status(status)))
    usage = None
    if turn.usage is not None:
        input_tokens, output_tokens = int(turn.usage.get("input_tokens", 0)), int(turn.usage.get("output_tokens", 0))
        usage = {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens,
        }
    incomplete = None
    if status == "incomplete":
        incomplete = {"reason": "content_filter" if turn.stop_reason in _FILTERED else "max_output_tokens"}
    error = None
    if status == "failed":
        detail = dict(turn.error or {})
        code = "rate_limit_exceeded" if detail.get("code") == "throttled" else "server_error"
        error = {"code": code, "message": str(detail.get("message") or "the generation failed")}
    return {
        "id": response_id(turn.session_id, turn.turn),
        "object": "response",
        "created_at": turn.created_at // 1000,
        "status": status,
        "error": error,
        "incomplete_details": incomplete,
        "instructions": turn.options.system,
        "max_output_tokens": turn.max_tokens,
        "model": model,
        "output": output,
        "parallel_tool_calls": False,
        "previous_response_id": response_id(turn.session_id, turn.turn - 1) if turn.turn > 1 else None,
        "store": True,
        "temperature": turn.temperature,
        "top_p": turn.options.top_p,
        "text": {"format": {"type": "text"}},
        "tool_choice": "none",
        "tools": [],
        "truncation": "disabled",
        "usage": usage,
        "metadata": {},
    }


def _item_status(status: str) -> str:
    return {"completed": "completed", "in_progress": "in_progress", "queued": "in_progress"}.get(status, "incomplete")


def record_events(records: Iterable[TokenRecord]) -> Iterator[TurnEvent]:
    """The events a finished turn's stored records make (what a follower would have sent)."""
    for record in records:
        if record.type is RecordType.DELTA:
            yield Token(record.seq, record.text or "")
        elif record.type is RecordType.STOP:
            usage = record.usage
            yield Done(
                record.seq,
                str(record.stop_reason),
                usage.input_tokens if usage else 0,
                usage.output_tokens if usage else 0,
            )
        elif record.type is RecordType.ERROR and record.error is not None:
            yield Failed(record.seq, record.error.code, record.error.message, record.error.retryable)


@dataclass
class ResponseStream:
    """A response's events after sequence number ``after`` (-1: all), from the turn's events."""

    table: ChatTable
    turn: Turn  # the turn item as the stream began
    model: str
    after: int = -1
    _last: int = field(default=-1, init=False)  # the last sequence number sent (or skipped as already had)

    @property
    def record_after(self) -> int:
        """The record ``seq`` to follow the turn from (-1: from its start)."""
        return self.after - (PRELUDE_EVENTS - 1) if self.after >= PRELUDE_EVENTS else -1

    def prelude(self) -> Iterator[str]:
        turn = replace(self.turn, status=TurnStatus.IN_PROGRESS, assistant=None, usage=None, stop_reason=None)
        snapshot = response_object(turn, self.model, "", status="in_progress")
        item = _message_item(turn, "", "in_progress")
        yield from self._event(0, "response.created", {"response": snapshot})
        yield from self._event(1, "response.in_progress", {"response": snapshot})
        yield from self._event(2, "response.output_item.added", {"output_index": 0, "item": item})
        yield from self._event(3, "response.content_part.added", {**self._where(), "part": _text_part("")})

    def events(self, turn_events: Iterable[TurnEvent]) -> Iterator[str]:
        """The response's events for the turn's: ends after the terminal, or the stream's own error."""
        last_record = max(self.record_after, 0)
        for event in turn_events:
            if isinstance(event, KeepAlive):
                yield sse.comment("keep-alive")
            elif isinstance(event, Token):
                last_record = event.seq
                payload = {**self._where(), "delta": event.text, "logprobs": []}
                yield from self._event(3 + event.seq, "response.output_text.delta", payload)
            elif isinstance(event, Done | Failed) and (event.seq is not None or isinstance(event, Done)):
                yield from self._terminal(last_record + 1 if event.seq is None else event.seq, event)
                return
            elif isinstance(event, Failed):
                yield self._error(event.code, event.message)
                return
            elif isinstance(event, Reconnect):
                resume = f"GET /v1/responses/{self._id}?stream=true&starting_after={max(self._last, self.after)}"
                yield self._error("stream_interrupted", f"the relay's time is up; resume with {resume}")
                return

    @property
    def _id(self) -> str:
        return response_id(self.turn.session_id, self.turn.turn)

    def _terminal(self, seq: int, event: Done | Failed) -> Iterator[str]:
        final = self.table.get_turn(self.turn.session_id, self.turn.turn) or self.turn
        if isinstance(event, Failed) or final.status is TurnStatus.ERROR:
            if not final.finished:
                final = _failed_copy(final, event)
            response = response_object(final, self.model, status="failed")
            yield from self._event(3 + seq, "response.failed", {"response": response})
            return
        response = response_object(final, self.model)
        text = final.assistant or ""
        item = response["output"][0]
        yield from self._event(3 + seq, "response.output_text.done", {**self._where(), "text": text, "logprobs": []})
        yield from self._event(4 + seq, "response.content_part.done", {**self._where(), "part": _text_part(text)})
        yield from self._event(5 + seq, "response.output_item.done", {"output_index": 0, "item": item})
        kind = "response.completed" if response["status"] == "completed" else "response.incomplete"
        yield from self._event(6 + seq, kind, {"response": response})

    def _where(self) -> dict[str, Any]:
        return {"item_id": f"msg_{self.turn.session_id}_{self.turn.turn}", "output_index": 0, "content_index": 0}

    def _event(self, number: int, kind: str, payload: dict[str, Any]) -> Iterator[str]:
        self._last = max(self._last, number)
        if number > self.after:
            yield sse.json_message({"type": kind, "sequence_number": number, **payload}, event=kind)

    def _error(self, code: str, message: str) -> str:
        number = max(self._last, self.after) + 1
        payload = {"type": "error", "sequence_number": number, "code": code, "message": message, "param": None}
        return sse.json_message(payload, event="error")


def _failed_copy(turn: Turn, event: Done | Failed) -> Turn:
    error = {"code": event.code, "message": event.message} if isinstance(event, Failed) else None
    return replace(turn, status=TurnStatus.ERROR, error=error)
