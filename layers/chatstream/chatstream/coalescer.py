"""The proxy writer's decisions: which model deltas become one token record, and when.

A :class:`Coalescer` holds the deltas the model sent that are not written yet, and tells the writer its
next step (:meth:`Coalescer.next_step`) at a given moment:

1. :attr:`WriterAction.WRITE_DELTA`, with the text of one record and its kind, when deltas are buffered and
   it is the turn's first delta (written at once: time to first token), or the reply ended, or the buffer
   holds ``flush_max_chars``, or ``flush_interval_s`` passed since the last delta record, or the buffer
   holds deltas of two kinds (the model went from reasoning to its reply, or back);
2. :attr:`WriterAction.END` once the reply ended and everything buffered is written;
3. :attr:`WriterAction.CHECK_CANCEL` every ``cancel_check_s`` (the writer reads the turn's cancel flag);
4. otherwise no action, and how long nothing will be due (the writer sleeps that long, or until
   :meth:`Coalescer.append` says a new delta changes the answer).

A record holds whole deltas of one kind (:attr:`RecordType.DELTA`, the reply, or :attr:`RecordType.REASONING`)
up to ``flush_max_chars`` (at least one delta), and never more than :data:`MAX_RECORD_CHARS` characters: a
longer delta is split. One kind per record keeps every record's text a single piece of one stream, so a reader
may cut it into smaller pieces without looking inside. It knows no threads and no clock: the
caller passes the time and guards it with its own lock (``chatstream.generation``).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from enum import Enum

from chatstream.records import RecordType

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
    """The writer's next step: an action (with a delta record's text and kind), or ``None`` and how long to wait."""

    action: WriterAction | None
    text: str = ""
    wait_s: float = 0.0
    kind: RecordType = RecordType.DELTA


@dataclass
class Coalescer:
    flush_interval_s: float
    flush_max_chars: int
    cancel_check_s: float
    max_record_chars: int = MAX_RECORD_CHARS
    ended: bool = field(default=False, init=False)
    _buffer: collections.deque[tuple[RecordType, str]] = field(default_factory=collections.deque, init=False)
    _buffered_chars: int = field(default=0, init=False)
    _first_written: bool = field(default=False, init=False)
    _last_flush: float = field(default=0.0, init=False)
    _last_cancel_check: float = field(default=0.0, init=False)

    @property
    def pending(self) -> bool:
        """Deltas are buffered."""
        return bool(self._buffer)

    def append(self, text: str, kind: RecordType = RecordType.DELTA) -> bool:
        """Buffer a delta of ``kind``. True when the writer has something new to decide and must be woken.

        That is when the buffer was empty (a first delta to write, or a flush deadline to set), is now
        full, or now holds two kinds. Otherwise the writer's current wait still ends at the right moment.
        """
        wake = not self._buffer or self._buffer[-1][0] is not kind
        self._buffer.append((kind, text))
        self._buffered_chars += len(text)
        return wake or self._buffered_chars >= self.flush_max_chars

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
            or self._buffer[0][0] is not self._buffer[-1][0]
        ):
            self._first_written = True
            self._last_flush = now
            kind = self._buffer[0][0]
            return Step(WriterAction.WRITE_DELTA, self._take(kind), kind=kind)
        if self.ended:
            return Step(WriterAction.END)
        if now - self._last_cancel_check >= self.cancel_check_s:
            return Step(WriterAction.CHECK_CANCEL)
        waits = [self._last_cancel_check + self.cancel_check_s - now]
        if self._buffer:
            waits.append(self._last_flush + self.flush_interval_s - now)
        return Step(None, wait_s=max(MIN_WAIT_S, min(waits)))

    def _take(self, kind: RecordType) -> str:
        """Whole deltas of ``kind`` up to ``flush_max_chars`` (at least one), never over ``max_record_chars``."""
        parts: list[str] = []
        size = 0
        while (
            self._buffer
            and self._buffer[0][0] is kind
            and (not parts or size + len(self._buffer[0][1]) <= self.flush_max_chars)
        ):
            _, delta = self._buffer.popleft()
            if len(delta) > self.max_record_chars:
                delta, rest = delta[: self.max_record_chars], delta[self.max_record_chars :]
                self._buffer.appendleft((kind, rest))
            parts.append(delta)
            size += len(delta)
        self._buffered_chars -= size
        return "".join(parts)
