"""A turn's native stream (what :class:`~chatstream.relay.follow.Follower` emits, HTTP_API.md) read back as typed
events, so the ``/v1`` streams are the native stream spelt OpenAI's way and follow a turn exactly as it does
(polling, gaps, timeouts, the time limit).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chatstream.records import ToolCallRef
from chatstream.relay.follow import TOOL_CALL
from chatstream.relay.sse import LINE_BREAK
from chatstream.status import StopReason

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator


@dataclass(frozen=True)
class Token:
    """Text of a record: the reply's (``token``), or the model's reasoning (``reasoning``)."""

    seq: int
    text: str
    kind: str = "token"


@dataclass(frozen=True)
class ToolDelta:
    """A piece of a tool call's arguments (a ``tool_call`` event): the call (its ``index`` in the reply, ``id`` and
    ``name``), the next ``arguments`` text, and ``end`` when the call is complete."""

    seq: int
    call: ToolCallRef
    arguments: str
    end: bool = False


@dataclass(frozen=True)
class Done:
    """The turn's ``done`` (``seq`` None: rebuilt from the turn item)."""

    seq: int | None
    stop_reason: StopReason
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class Failed:
    """An ``error`` event: the turn's error record (``seq`` set), or the stream's own (``seq`` None)."""

    seq: int | None
    code: str
    message: str
    retryable: bool


@dataclass(frozen=True)
class Reconnect:
    """The relay ends this stream before the turn (its invocation's time is nearly up, or nothing new came for
    ``IDLE_RECONNECT_S``); the stream continues in a new request after ``last_event_id``: a record's ``seq``, or
    a piece's id (``<seq>.<offset>``) when the client has only part of a record, as the native ``reconnect`` says it
    (kept as its text: it is said back, never counted with)."""

    last_event_id: str

    why = "the relay's time was nearly up, or nothing new came for a minute"


@dataclass(frozen=True)
class KeepAlive:
    pass


TurnEvent = Token | ToolDelta | Done | Failed | Reconnect | KeepAlive


def turn_events(chunks: Iterable[str]) -> Iterator[TurnEvent]:
    """The typed events of a follower's chunks (each chunk is one event, or a comment)."""
    for chunk in chunks:
        if chunk.startswith(":"):
            yield KeepAlive()
            continue
        name, event_id, data = _fields(chunk)
        seq = None if event_id is None else int(event_id.split(".")[0])  # "<seq>" or "<seq>.<offset>" (a piece)
        if name in ("token", "reasoning"):
            assert seq is not None
            yield Token(seq, str(data["text"]), name)
        elif name == TOOL_CALL:
            assert seq is not None
            call = ToolCallRef(int(data["index"]), str(data["id"]), str(data["name"]))
            yield ToolDelta(seq, call, str(data["arguments"]), bool(data.get("end")))
        elif name == "done":
            usage = data.get("usage") or {}
            yield Done(
                seq,
                StopReason(str(data.get("stop_reason") or StopReason.END_TURN)),
                int(usage.get("input_tokens", 0)),
                int(usage.get("output_tokens", 0)),
            )
        elif name == "error":
            yield Failed(seq, str(data["code"]), str(data["message"]), bool(data.get("retryable")))
        elif name == "reconnect":
            yield Reconnect(str(data["last_event_id"]))


def kept_alive(
    render: Callable[[Iterable[TurnEvent]], Iterator[str]],
    events: Iterable[TurnEvent],
    monotonic: Callable[[], float],
    keepalive_s: float,
) -> Iterator[str]:
    """What ``render`` makes of ``events``, with a :class:`KeepAlive` handed to it before the next event whenever it
    has sent nothing for ``keepalive_s``.

    The follower sends its ``: keep-alive`` after ``keepalive_s`` without an event of its own; a ``/v1`` stream that
    sends nothing for some of its events (text it does not carry, a piece without text) would go silent while the
    follower's events flow, and a proxy or client that cuts an idle body (CloudFront's 30 s, an ALB's or nginx's 60 s,
    undici's 300 s ``bodyTimeout``) would cut it. ``render`` sends a comment for each :class:`KeepAlive`."""
    last_output = monotonic()

    def source() -> Iterator[TurnEvent]:
        for event in events:
            if not isinstance(event, KeepAlive) and monotonic() - last_output >= keepalive_s:
                yield KeepAlive()
            yield event

    for chunk in render(source()):
        last_output = monotonic()
        yield chunk


def _fields(chunk: str) -> tuple[str, str | None, dict[str, Any]]:
    name, event_id, data = "message", None, []
    for line in LINE_BREAK.split(chunk):  # SSE's line breaks only: str.splitlines() also breaks at U+2028 in the text
        field, _, value = line.partition(": ")
        if field == "event":
            name = value
        elif field == "id":
            event_id = value
        elif field == "data":
            data.append(value)
    return name, event_id, json.loads("\n".join(data)) if data else {}
