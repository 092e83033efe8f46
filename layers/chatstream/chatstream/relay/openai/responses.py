"""The Responses API's objects and events, built from a turn (its item and its token records).

A response is a turn: its id is ``resp_<session_id>_<turn>``, and ``previous_response_id`` of turn *n* > 1 is turn
*n − 1*'s response. Its output is one item per run of records of one kind: a ``message`` item (``output_text``) for
the reply's text, a ``reasoning`` item (``reasoning_text``) for the model's reasoning, should the turn have any;
item ``i`` of the turn is ``msg_<session_id>_<turn>_<i>`` (or ``rs_…``). Each tool call the model made is a
``function_call`` item of its own (``call_id``: the call's id, ``name``, ``arguments``), ``fc_<session_id>_<turn>_<c>``
for the reply's call ``c``; its ``output_index`` is its place among all the items, so never the message's.

A call's events: ``response.output_item.added`` (the item, its arguments empty) when its first record comes, a
``response.function_call_arguments.delta`` per record of its arguments (sent whole: they are not paced), and as soon as
its end record comes ``response.function_call_arguments.done`` (the whole arguments, and the call's ``name``) and
``response.output_item.done`` (the item ``completed``), while later calls may still stream. A call the turn ended
inside (a cancel, or arguments that were no JSON object) is closed ``incomplete``, without ``….arguments.done``.

**Sequence numbers** are a function of the turn's stored text: the events are numbered from the turn's start
(``response.created`` 0, ``response.in_progress`` 1, then for each run of one kind ``response.output_item.added``,
``response.content_part.added``, a delta per piece, ``….done``, ``response.content_part.done``,
``response.output_item.done``; then ``response.completed``, ``response.incomplete`` or ``response.failed``). A piece
is what :func:`chatstream.relay.pace.pieces` cuts from a record's text (a word with the spaces before it), which
depends on that text only, so the deltas are paced like the native stream's text and numbered the same whether the
follower paced them or sent each record whole (``?pace=0``). A stream resumed after ``starting_after`` numbers the
stored pieces the client has without sending them (:meth:`ResponseStream.resume_point`) and follows the turn from
the position after them, inside a record if need be; so a resume, in any later request, is exact. An ``error``
event (the stream's own failure, or the relay's time limit) is no event of the turn's and is not replayed: it
carries the number of the last event before it, so that a client resuming after the last sequence number it
received, the error's, gets exactly the rest (numbered next, it would take the number of the next real event, which
such a resume would skip). A turn that ended in error without a terminal record (the reaper's ``generation_failed``)
is no such error: the follower rebuilds its ``error`` from the turn item, without an id, and the stream ends with
``response.failed`` as the record would end it (:meth:`ResponseStream._ended_with`).

Statuses (:mod:`chatstream.relay.openai.status`): a turn in progress is ``in_progress``; a complete one
``completed``, or ``incomplete`` when it stopped at ``max_tokens`` or the model's context window
(``incomplete_details.reason: max_output_tokens``) or was filtered (``content_filter``); a cancelled one
``cancelled`` (its stream ends with ``response.incomplete``); a failed one ``failed``, with ``error``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from chatstream.errors import InvalidRecord, Throttled
from chatstream.records import SESSION_ID_PATTERN, ErrorInfo, RecordType
from chatstream.relay import sse
from chatstream.relay.follow import TOOL_CALL, turn_error
from chatstream.relay.openai.errors import error_type, failed_status
from chatstream.relay.openai.status import ItemStatus, ResponseStatus, incomplete_reason, response_status
from chatstream.relay.openai.turn_events import Done, Failed, KeepAlive, Reconnect, Token, ToolDelta, TurnEvent
from chatstream.relay.pace import Position, TextEvent, pieces
from chatstream.status import StopReason, TurnStatus
from chatstream.tools import ToolChoiceMode

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from chatstream.records import TokenRecord, ToolCallRef
    from chatstream.table import ChatTable, Turn
    from chatstream.tools import ToolSpec
    from chatstream.turn_options import TurnOptions

# A failed turn's status (errors.failed_status) → the code of OpenAI's ResponseError (an enum; server_error for the
# rest). invalid_prompt is the code a request the model refused takes (OpenRouter's Responses API docs, "Error
# Handling", map invalid_prompt to 400, rate_limit_exceeded to 429 and server_error to 500+).
_RESPONSE_ERROR_CODES = {400: "invalid_prompt", 429: "rate_limit_exceeded"}


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


def parse_item_id(value: str) -> tuple[str, str, int, int] | None:
    """``(kind, session_id, turn, index)`` of an output item's id (``msg_…``, ``rs_…`` or ``fc_…``; kind ``token``,
    ``reasoning`` or ``tool_call``; ``index``: the item's output index, a call's index among the reply's calls), or
    ``None`` when it cannot be one."""
    prefix, _, rest = value.partition("_")
    kinds = {item_prefix: kind for kind, (_, item_prefix, _) in _ITEMS.items()}
    head, _, index = rest.rpartition("_")
    if prefix not in kinds or not (index.isascii() and index.isdigit() and len(index) <= 4):
        return None
    parsed = parse_response_id(f"resp_{head}")
    return None if parsed is None else (kinds[prefix], *parsed, int(index))


def status_of(turn: Turn) -> ResponseStatus:
    return response_status(turn.status, turn.stop_reason)


# A run of records of one kind → (the output item's type, its id prefix, its content part's type).
_ITEMS = {
    "token": ("message", "msg", "output_text"),
    "reasoning": ("reasoning", "rs", "reasoning_text"),
    TOOL_CALL: ("function_call", "fc", ""),
}


@dataclass
class _Item:
    kind: str  # the native event's name: token, reasoning or tool_call
    index: int  # output_index
    item_id: str
    text: str = ""  # a call's: its arguments so far
    done: bool = False
    # completed once a later item closed it (its run of text ended before the reply did, or its call ended); None: it
    # ends with the response, whose status decides its own (to_list)
    status: ItemStatus | None = None
    call: ToolCallRef | None = None  # a function_call item's call

    def part(self, text: str | None = None) -> dict[str, Any]:
        _, _, part_type = _ITEMS[self.kind]
        part: dict[str, Any] = {"type": part_type, "text": self.text if text is None else text}
        if part_type == "output_text":
            part.update(annotations=[], logprobs=[])
        return part

    def to_dict(self, status: ItemStatus) -> dict[str, Any]:
        item_type = _ITEMS[self.kind][0]
        if self.call is not None:
            call = self.call
            return {
                "id": self.item_id,
                "type": item_type,
                "status": status,
                "call_id": call.id,
                "name": call.name,
                "arguments": self.text,
            }
        content = [self.part()] if self.done or self.text else []
        if item_type == "message":
            return {"id": self.item_id, "type": "message", "role": "assistant", "status": status, "content": content}
        return {"id": self.item_id, "type": "reasoning", "status": status, "summary": [], "content": content}


@dataclass
class Output:
    """A response's output items, built from its text records in order (``add``)."""

    session_id: str
    turn: int
    items: list[_Item] = field(default_factory=list)

    def add(self, kind: str, text: str) -> tuple[_Item | None, _Item | None]:
        """Append a record's text; returns (the item it closed, the item it opened), either ``None``."""
        current = self.items[-1] if self.items and not self.items[-1].done else None
        if current is not None and current.kind == kind:
            current.text += text
            return None, None
        closed = self.close()
        if closed is not None and closed.call is None:
            closed.status = ItemStatus.COMPLETED
        prefix = _ITEMS[kind][1]
        index = len(self.items)
        opened = _Item(kind, index, f"{prefix}_{self.session_id}_{self.turn}_{index}", text)
        self.items.append(opened)
        return closed, opened

    def add_call(self, call: ToolCallRef, text: str, end: bool) -> tuple[_Item | None, _Item | None, _Item]:
        """Append a record of a call's arguments (``end``: its last); returns (the item it closed, the item it opened,
        either ``None``, and the call's item). A call's item ends with its call, ``completed``."""
        current = self.items[-1] if self.items and not self.items[-1].done else None
        closed, opened = None, None
        if current is None or current.call is None or current.call.index != call.index:
            closed = self.close()
            if closed is not None:
                closed.status = ItemStatus.INCOMPLETE if closed.call is not None else ItemStatus.COMPLETED
            index = len(self.items)
            current = opened = _Item(TOOL_CALL, index, f"fc_{self.session_id}_{self.turn}_{call.index}", call=call)
            self.items.append(opened)
        current.text += text
        if end:
            current.done, current.status = True, ItemStatus.COMPLETED
        return closed, opened, current

    def close(self) -> _Item | None:
        current = self.items[-1] if self.items and not self.items[-1].done else None
        if current is not None:
            current.done = True
            if current.call is not None:
                current.status = ItemStatus.INCOMPLETE  # its call never ended
        return current

    def to_list(self, status: ResponseStatus) -> list[dict[str, Any]]:
        """The items as the response object shows them: an item still open is ``in_progress``, one a later item
        closed ``completed`` (as its ``response.output_item.done`` said), and the one the response's end closed
        ``completed`` or, when the response did not complete, ``incomplete``."""
        last = ItemStatus.COMPLETED if status is ResponseStatus.COMPLETED else ItemStatus.INCOMPLETE
        return [item.to_dict((item.status or last) if item.done else ItemStatus.IN_PROGRESS) for item in self.items]


def output_of(session_id: str, turn: int, records: Iterable[TokenRecord], *, finished: bool) -> Output:
    output = Output(session_id, turn)
    for event in record_events(records):
        if isinstance(event, Token):
            output.add(event.kind, event.text)
        elif isinstance(event, ToolDelta):
            output.add_call(event.call, event.arguments, event.end)
    if finished:
        output.close()
    return output


def response_object(turn: Turn, model: str, output: Output, *, status: ResponseStatus | None = None) -> dict[str, Any]:
    """The response object of ``turn`` with its ``output`` so far."""
    status = status or status_of(turn)
    usage = None
    if turn.usage is not None and status not in (ResponseStatus.IN_PROGRESS, ResponseStatus.QUEUED):
        input_tokens, output_tokens = int(turn.usage.get("input_tokens", 0)), int(turn.usage.get("output_tokens", 0))
        usage = {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens,
        }
    incomplete = None
    if status is ResponseStatus.INCOMPLETE:
        incomplete = {"reason": incomplete_reason(turn.stop_reason)}
    error = None
    if status is ResponseStatus.FAILED:
        detail = dict(turn.error or {})
        status_code = failed_status(str(detail.get("code") or "model_error"))
        message = str(detail.get("message") or "the generation failed")
        # ``type`` and ``param`` as OpenAI's own ResponseError has them (the Vercel AI SDK requires ``type``): the type
        # of the error a failed response not streamed is answered with (endpoints.py), and so a chat completion
        code = _RESPONSE_ERROR_CODES.get(status_code, "server_error")
        error = {"code": code, "message": message, "type": error_type(status_code), "param": None}
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
        "output": output.to_list(status),
        "parallel_tool_calls": turn.options.parallel_tool_calls,
        "previous_response_id": response_id(turn.session_id, turn.turn - 1) if turn.turn > 1 else None,
        "store": True,
        "temperature": turn.temperature,
        "top_p": turn.options.top_p,
        "text": {"format": {"type": "text"}},
        "tool_choice": _tool_choice(turn.options),
        "tools": [_function_tool(tool) for tool in turn.options.tools],
        "truncation": "disabled",
        "usage": usage,
        "metadata": {},
    }


def _function_tool(tool: ToolSpec) -> dict[str, Any]:
    """A declared tool as a response shows it: ``strict`` false, since Bedrock enforces no schema on the arguments."""
    return {
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.parameters,
        "strict": False,
    }


def _tool_choice(options: TurnOptions) -> str | dict[str, str]:
    choice = options.tool_choice
    if choice is None:
        return "auto" if options.tools else "none"
    if choice.mode is ToolChoiceMode.TOOL:
        return {"type": "function", "name": str(choice.name)}
    return "required" if choice.mode is ToolChoiceMode.ANY else choice.mode.value


def record_events(records: Iterable[TokenRecord]) -> Iterator[TurnEvent]:
    """The events a turn's stored records make (what a follower would send)."""
    for record in records:
        if record.type in (RecordType.DELTA, RecordType.REASONING):
            yield Token(record.seq, record.text or "", "token" if record.type is RecordType.DELTA else "reasoning")
        elif record.type is RecordType.TOOL_USE and record.call is not None:
            yield ToolDelta(record.seq, record.call, record.text or "", record.end)
        elif record.type is RecordType.STOP:
            usage = record.usage
            yield Done(
                record.seq,
                record.stop_reason or StopReason.END_TURN,  # a stop record always has one
                usage.input_tokens if usage else 0,
                usage.output_tokens if usage else 0,
            )
        elif record.type is RecordType.ERROR and record.error is not None:
            yield Failed(record.seq, record.error.code, record.error.message, record.error.retryable)


@dataclass
class ResponseStream:
    """A response's events numbered after ``after`` (-1: all), from the turn's events since its start."""

    table: ChatTable
    turn: Turn  # the turn item as the stream began
    model: str
    after: int = -1
    _number: int = field(default=-1, init=False)  # the last sequence number made (sent, or skipped as had)

    def __post_init__(self) -> None:
        self._output = Output(self.turn.session_id, self.turn.turn)

    def prelude(self) -> Iterator[str]:
        turn = replace(self.turn, status=TurnStatus.IN_PROGRESS, assistant=None, usage=None, stop_reason=None)
        output = Output(turn.session_id, turn.turn)
        snapshot = response_object(turn, self.model, output, status=ResponseStatus.IN_PROGRESS)
        yield from self._event("response.created", {"response": snapshot})
        yield from self._event("response.in_progress", {"response": snapshot})

    def events(self, turn_events: Iterable[TurnEvent]) -> Iterator[str]:
        """The response's events for the turn's: ends after the terminal, or the stream's own error."""
        for event in turn_events:
            if isinstance(event, KeepAlive):
                yield sse.comment("keep-alive")
            elif isinstance(event, Token):
                yield from self._text(event)
            elif isinstance(event, ToolDelta):
                yield from self._call(event)
            elif isinstance(event, Done) or (isinstance(event, Failed) and event.seq is not None):
                yield from self._terminal(event)
                return
            elif isinstance(event, Failed):
                ended = self._ended_with(event)
                if ended is not None:  # the turn's own ending, rebuilt from its item: as its record would end it
                    yield from self._terminal(event, ended)
                else:
                    yield self._error(event.code, event.message)
                return
            elif isinstance(event, Reconnect):
                resume = f"GET /v1/responses/{self._id}?stream=true&starting_after={self._last_number}"
                yield self._error(
                    "stream_interrupted", f"this stream ended before the reply ({event.why}); resume with {resume}"
                )
                return

    def resume_point(self, records: Iterable[TokenRecord]) -> tuple[list[TurnEvent], Position | None]:
        """The pieces of the turn's stored ``records`` whose events are all numbered at most ``after`` (the client
        has them), and the position after them (``None``: the turn's start). A stream resumed after ``after`` hands
        the pieces to :meth:`events` first (numbered, not sent) and follows the turn from the position."""
        probe = ResponseStream(self.table, self.turn, self.model, sys.maxsize)  # numbers events, sends none
        for _ in probe.prelude():
            pass
        had: list[TurnEvent] = []
        position: Position | None = None
        expected = 0
        for record in records:
            if record.seq != expected or record.is_terminal:
                break
            expected += 1
            if record.type is RecordType.TOOL_USE and record.call is not None:  # a record's arguments: one event
                call = ToolDelta(record.seq, record.call, record.text or "", record.end)
                for _ in probe._call(call):
                    pass
                if probe._number > self.after:
                    return had, position
                had.append(call)
                position = Position(record.seq)
                continue
            kind = {RecordType.DELTA: "token", RecordType.REASONING: "reasoning"}.get(record.type)
            if kind is None or not record.text:
                continue
            for piece in pieces(TextEvent(kind, record.seq, record.text)):
                for _ in probe._text(Token(piece.seq, piece.text, kind)):
                    pass
                if probe._number > self.after:
                    return had, position
                had.append(Token(piece.seq, piece.text, kind))
                position = piece.position
        return had, position

    @property
    def _id(self) -> str:
        return response_id(self.turn.session_id, self.turn.turn)

    def _text(self, event: Token) -> Iterator[str]:
        """A delta event per piece of ``event``'s text (a paced follower's text is one piece already)."""
        for piece in pieces(TextEvent(event.kind, event.seq, event.text)):
            if piece.text:
                yield from self._piece(Token(event.seq, piece.text, event.kind))

    def _piece(self, event: Token) -> Iterator[str]:
        closed, opened = self._output.add(event.kind, event.text)
        if closed is not None:
            yield from self._close(closed)
        if opened is not None:
            item = replace(opened, text="").to_dict(ItemStatus.IN_PROGRESS)  # added empty: the deltas bring its text
            yield from self._event("response.output_item.added", {"output_index": opened.index, "item": item})
            part = opened.part("")
            yield from self._event("response.content_part.added", {**self._where(opened), "part": part})
            item_text = opened
        else:
            item_text = self._output.items[-1]
        kind = "response.output_text.delta" if item_text.kind == "token" else "response.reasoning_text.delta"
        payload: dict[str, Any] = {**self._where(item_text), "delta": event.text}
        if item_text.kind == "token":
            payload["logprobs"] = []
        yield from self._event(kind, payload)

    def _call(self, event: ToolDelta) -> Iterator[str]:
        """A record of a call's arguments: its item opened (closing the one before), its delta, and when the call ends
        its ``….arguments.done`` and ``response.output_item.done`` at once."""
        closed, opened, item = self._output.add_call(event.call, event.arguments, event.end)
        if closed is not None:
            yield from self._close(closed, closed.status or ItemStatus.COMPLETED)
        if opened is not None:
            added = replace(opened, text="").to_dict(ItemStatus.IN_PROGRESS)  # added empty: the deltas bring its text
            yield from self._event("response.output_item.added", {"output_index": opened.index, "item": added})
        where = {"item_id": item.item_id, "output_index": item.index}
        if event.arguments:
            yield from self._event("response.function_call_arguments.delta", {**where, "delta": event.arguments})
        if event.end:
            done = {**where, "name": event.call.name, "arguments": item.text}
            yield from self._event("response.function_call_arguments.done", done)
            finished = {"output_index": item.index, "item": item.to_dict(ItemStatus.COMPLETED)}
            yield from self._event("response.output_item.done", finished)

    def _close(self, item: _Item, status: ItemStatus = ItemStatus.COMPLETED) -> Iterator[str]:
        if item.call is not None:  # a call the turn ended inside: no arguments.done (they never were)
            yield from self._event(
                "response.output_item.done", {"output_index": item.index, "item": item.to_dict(status)}
            )
            return
        where = self._where(item)
        if item.kind == "token":
            yield from self._event("response.output_text.done", {**where, "text": item.text, "logprobs": []})
        else:
            yield from self._event("response.reasoning_text.done", {**where, "text": item.text})
        yield from self._event("response.content_part.done", {**where, "part": item.part()})
        done = {"output_index": item.index, "item": item.to_dict(status)}
        yield from self._event("response.output_item.done", done)

    def _ended_with(self, event: Failed) -> Turn | None:
        """The turn item, when an ``error`` without an id is the turn's own ending rather than the stream's failure.

        The follower sends such an event in both cases: rebuilt from the turn item when the turn ended in error with
        no terminal record to send (the reaper ends a turn whose generation died so, writing no record), or for the
        stream's own failure (a gap, a timeout, a read that failed). The first is the response's end, the event
        ``response.failed``, the same in every request; the second an ``error`` that a resume goes on from. They
        are told apart by the turn item: ended in error, with exactly the event's error. A read that fails leaves
        it the stream's failure: a resume reads again."""
        try:
            turn = self.table.get_turn(self.turn.session_id, self.turn.turn)
        except (Throttled, ClientError, BotoCoreError, InvalidRecord):
            return None
        if turn is None or turn.status is not TurnStatus.ERROR:
            return None
        return turn if turn_error(turn) == ErrorInfo(event.code, event.message, event.retryable) else None

    def _terminal(self, event: Done | Failed, final: Turn | None = None) -> Iterator[str]:
        final = final or self.table.get_turn(self.turn.session_id, self.turn.turn) or self.turn
        if isinstance(event, Failed) or final.status is TurnStatus.ERROR:
            if not final.finished:
                final = _failed_copy(final, event)
            self._output.close()
            response = response_object(final, self.model, self._output, status=ResponseStatus.FAILED)
            yield from self._event("response.failed", {"response": response})
            return
        if not final.finished:  # rebuilt from a turn item that has not caught up: the record decides
            final = replace(final, status=TurnStatus.COMPLETE, stop_reason=event.stop_reason)
        status = status_of(final)
        if not self._output.items:  # a reply without text is still one (empty) message
            self._output.add("token", "")
            opened = self._output.items[-1]
            yield from self._event(
                "response.output_item.added", {"output_index": 0, "item": opened.to_dict(ItemStatus.IN_PROGRESS)}
            )
            yield from self._event("response.content_part.added", {**self._where(opened), "part": opened.part("")})
        closing = self._output.close()
        completed = status is ResponseStatus.COMPLETED
        if closing is not None:  # none when the reply ended with a call, whose item its end closed
            ended = ItemStatus.COMPLETED if completed and closing.call is None else ItemStatus.INCOMPLETE
            yield from self._close(closing, ended)
        response = response_object(final, self.model, self._output, status=status)
        kind = "response.completed" if completed else "response.incomplete"
        yield from self._event(kind, {"response": response})

    def _where(self, item: _Item) -> dict[str, Any]:
        return {"item_id": item.item_id, "output_index": item.index, "content_index": 0}

    def _event(self, kind: str, payload: dict[str, Any]) -> Iterator[str]:
        self._number += 1
        if self._number > self.after:
            yield sse.json_message({"type": kind, "sequence_number": self._number, **payload}, event=kind)

    @property
    def _last_number(self) -> int:
        """The number of the last event the client has: the last this stream numbered, or the one it resumed after."""
        return max(self._number, self.after)

    def _error(self, code: str, message: str) -> str:
        # The last event's number, not the next: resuming after the error's number must not skip the next real event.
        number = self._last_number
        payload = {"type": "error", "sequence_number": number, "code": code, "message": message, "param": None}
        return sse.json_message(payload, event="error")


def _failed_copy(turn: Turn, event: Done | Failed) -> Turn:
    error = {"code": event.code, "message": event.message} if isinstance(event, Failed) else None
    return replace(turn, status=TurnStatus.ERROR, error=error)
