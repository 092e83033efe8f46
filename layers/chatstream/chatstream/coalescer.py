"""The proxy writer's decisions: which model deltas become one token record, and when.

A :class:`Coalescer` holds the deltas the model sent that are not written yet, and tells the writer its
next step (:meth:`Coalescer.next_step`) at a given moment:

1. :attr:`WriterAction.WRITE_DELTA`, with the text of one record and its kind, when deltas are buffered and
   it is the turn's first delta (written at once: time to first token), or the reply ended, or the buffer
   holds ``flush_max_chars``, or ``flush_interval_s`` passed since the last delta record, or the buffer
   holds deltas of two kinds (the model went from reasoning to its reply, or back, or to a tool call's
   arguments, or from one call to the next), or a tool call ended (its end is written at once);
2. :attr:`WriterAction.END` once the reply ended and everything buffered is written;
3. :attr:`WriterAction.CHECK_CANCEL` every ``cancel_check_s`` (the writer reads the turn's cancel flag);
4. otherwise no action, and how long nothing will be due (the writer sleeps that long, or until
   :meth:`Coalescer.append` says a new delta changes the answer).

A record holds whole deltas of one kind (:attr:`RecordType.DELTA`, the reply, :attr:`RecordType.REASONING`, or
:attr:`RecordType.TOOL_USE` of one call: its ``call``) up to ``flush_max_chars`` (at least one delta), and never more
than :data:`MAX_RECORD_CHARS` characters: a longer delta is split. One kind per record keeps every record's text a
single piece of one stream, so a reader may cut it into smaller pieces without looking inside. A tool call's end
(:meth:`Coalescer.end_call`) is part of its last record (``Step.end``), which is written at once, so a reader knows
the call is complete as soon as the model ended it; an end after that call's text was written is a record of its
own, with no text. It knows no threads and no clock: the caller passes the time and guards it with its own lock
(``chatstream.generation``).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from enum import Enum

from chatstream.records import RecordType, ToolCallRef

# A record is stored whole: as the JSON data of one Kinesis record (1 MiB at most) and as one table item (DynamoDB's
# 400 KB, the record's JSON its largest attribute). In that JSON a character takes at most 6 bytes (a control
# character's escape, ``\u0001``; 4 for any other in UTF-8), so 60,000 characters are 360 KB at worst.
MAX_RECORD_CHARS = 60_000
MIN_WAIT_S = 0.001


class WriterAction(Enum):
    WRITE_DELTA = "write the buffered deltas as one delta record"
    CHECK_CANCEL = "read the turn's cancel flag"
    END = "write the terminal record"


@dataclass(frozen=True)
class Step:
    """The writer's next step: an action (with a delta record's text and kind, and for a tool call's arguments the
    call and whether the record ends it), or ``None`` and how long to wait."""

    action: WriterAction | None
    text: str = ""
    wait_s: float = 0.0
    kind: RecordType = RecordType.DELTA
    call: ToolCallRef | None = None
    end: bool = False


@dataclass(frozen=True)
class _Piece:
    """A delta as the model sent it (or a tool call's end: no text, ``end``)."""

    kind: RecordType
    text: str
    call: ToolCallRef | None = None
    end: bool = False

    @property
    def key(self) -> tuple[RecordType, ToolCallRef | None]:
        """What one record may hold only one of: a kind, and for tool calls one call."""
        return (self.kind, self.call)


@dataclass
class Coalescer:
    flush_interval_s: float
    flush_max_chars: int
    cancel_check_s: float
    max_record_chars: int = MAX_RECORD_CHARS
    ended: bool = field(default=False, init=False)
    _buffer: collections.deque[_Piece] = field(default_factory=collections.deque, init=False)
    _buffered_chars: int = field(default=0, init=False)
    _ends: int = field(default=0, init=False)  # tool call ends buffered
    _first_written: bool = field(default=False, init=False)
    _last_flush: float = field(default=0.0, init=False)
    _last_cancel_check: float = field(default=0.0, init=False)

    @property
    def pending(self) -> bool:
        """Deltas are buffered."""
        return bool(self._buffer)

    def append(self, text: str, kind: RecordType = RecordType.DELTA, call: ToolCallRef | None = None) -> bool:
        """Buffer a delta of ``kind`` (of the tool call ``call``, for ``TOOL_USE``). True when the writer has something
        new to decide and must be woken.

        That is when the buffer was empty (a first delta to write, or a flush deadline to set), is now
        full, or now holds two kinds. Otherwise the writer's current wait still ends at the right moment.
        """
        piece = _Piece(kind, text, call)
        wake = not self._buffer or self._buffer[-1].key != piece.key
        self._buffer.append(piece)
        self._buffered_chars += len(text)
        return wake or self._buffered_chars >= self.flush_max_chars

    def end_call(self, call: ToolCallRef) -> bool:
        """The model ended the tool call ``call``: its last record says so, written at once. Always wakes the writer."""
        self._buffer.append(_Piece(RecordType.TOOL_USE, "", call, end=True))
        self._ends += 1
        return True

    def end(self) -> None:
        """The reply ended: write what is buffered, then the terminal record."""
        self.ended = True

    def cancel_checked(self, now: float) -> None:
        """The writer read the cancel flag at ``now``; the next check is due ``cancel_check_s`` later."""
        self._last_cancel_check = now

    def next_step(self, now: float) -> Step:
        if self._buffer and (
            not self._first_written
            or self.ended
            or self._buffered_chars >= self.flush_max_chars
            or now - self._last_flush >= self.flush_interval_s
            or self._buffer[0].key != self._buffer[-1].key
            or self._ends
        ):
            self._first_written = True
            self._last_flush = now
            return self._take()
        if self.ended:
            return Step(WriterAction.END)
        if now - self._last_cancel_check >= self.cancel_check_s:
            return Step(WriterAction.CHECK_CANCEL)
        waits = [self._last_cancel_check + self.cancel_check_s - now]
        if self._buffer:
            waits.append(self._last_flush + self.flush_interval_s - now)
        return Step(None, wait_s=max(MIN_WAIT_S, min(waits)))

    def _take(self) -> Step:
        """One record: whole deltas of the first one's kind (and call) up to ``flush_max_chars`` (at least one), never
        over ``max_record_chars``, up to and with a tool call's end."""
        first = self._buffer[0]
        parts: list[str] = []
        size = 0
        end = False
        while (
            not end
            and self._buffer
            and self._buffer[0].key == first.key
            and (not parts or size + len(self._buffer[0].text) <= self.flush_max_chars)
        ):
            piece = self._buffer.popleft()
            delta = piece.text
            if len(delta) > self.max_record_chars:
                delta, rest = delta[: self.max_record_chars], delta[self.max_record_chars :]
                self._buffer.appendleft(_Piece(piece.kind, rest, piece.call))
            parts.append(delta)
            size += len(delta)
            if piece.end:
                end = True
                self._ends -= 1
        self._buffered_chars -= size
        return Step(WriterAction.WRITE_DELTA, "".join(parts), kind=first.kind, call=first.call, end=end)
