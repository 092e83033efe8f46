"""Builders for tests: token records (a turn as the proxy writes it, whole or cut short) and a ConverseStream
response's event stream."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from chatstream.records import ErrorInfo, TokenRecord, ToolCallRef, Usage
from chatstream.status import StopReason

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence


def opening_records(
    session_id: str, turn: int, words: Sequence[str], *, ts: int = 1, reasoning: Sequence[str] = ()
) -> list[TokenRecord]:
    """A turn still generating: its start record (seq 0), then one reasoning record per ``reasoning`` word,
    then one delta per word (seq 1, 2, …)."""
    records = [TokenRecord.start(session_id, turn, ts)]
    records += [TokenRecord.reasoning(session_id, turn, seq, word, ts + seq) for seq, word in enumerate(reasoning, 1)]
    first = len(records)
    records += [TokenRecord.delta(session_id, turn, seq, word, ts + seq) for seq, word in enumerate(words, first)]
    return records


def turn_records(
    session_id: str,
    turn: int,
    words: Sequence[str],
    *,
    stop_reason: StopReason = StopReason.END_TURN,
    error: ErrorInfo | None = None,
    input_tokens: int = 1,
    ts: int = 1,
    reasoning: Sequence[str] = (),
) -> list[TokenRecord]:
    """A whole turn: start, one reasoning record per ``reasoning`` word, one delta per word, then a stop record
    (usage: ``input_tokens`` in, one token a word out), or an error record when ``error`` is given."""
    records = opening_records(session_id, turn, words, ts=ts, reasoning=reasoning)
    end = len(records)
    if error is not None:
        records.append(TokenRecord.failure(session_id, turn, end, error, ts + end))
    else:
        usage = Usage(input_tokens, len(reasoning) + len(words))
        records.append(TokenRecord.stop(session_id, turn, end, stop_reason, usage, ts + end))
    return records


def tool_turn_records(
    session_id: str,
    turn: int,
    words: Sequence[str],
    calls: Sequence[tuple[str, str, Sequence[str]]],
    *,
    ts: int = 1,
    ended: bool = True,
) -> list[TokenRecord]:
    """A turn that called tools: its start, one delta per word, then for each ``(id, name, pieces)`` of ``calls`` one
    ``tool_use`` record per piece of its arguments (the last one ends the call; no pieces: an end alone, ``{}``), then
    a ``tool_use`` stop record; ``ended=False``: without the stop record (still generating)."""
    records = opening_records(session_id, turn, words, ts=ts)
    for index, (call_id, name, pieces) in enumerate(calls):
        ref = ToolCallRef(index, call_id, name)
        for at, piece in enumerate(pieces or ("{}",)):
            end = at == max(len(pieces), 1) - 1
            records.append(TokenRecord.tool_use(session_id, turn, len(records), ref, piece, ts + len(records), end=end))
    if ended:
        usage = Usage(1, len(records) - 1)
        records.append(TokenRecord.stop(session_id, turn, len(records), StopReason.TOOL_USE, usage, ts + len(records)))
    return records


class ConverseEventStream:
    """What ``converse_stream(...)["stream"]`` is to the proxy: its events, in order, and ``close()``."""

    def __init__(self, events: Iterable[dict[str, Any]]) -> None:
        self._events = iter(events)
        self.closed = False

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self._events

    def close(self) -> None:
        self.closed = True
