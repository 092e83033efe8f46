"""Pacing a turn's text: each record's text released in word-sized pieces, spread over the turn's cadence.

The proxy coalesces the model's deltas into one record every ``FLUSH_INTERVAL_MS`` (a tenth of the Kinesis
records and table writes of one record per delta), so a follower that sent each record as one event would make
the text lurch a few times a second. The relay follows the turn for the whole stream anyway: it cuts each record's
text into pieces at word boundaries (a run of spaces and the word after it, as the AI SDK's ``smoothStream`` does in
the client) and releases them evenly over a little more than the interval at which records have been coming (the
follower's cadence, times :data:`SPREAD_FACTOR`: the next record is found a poll or two after it lands, and the
pieces should last until then), so the client sees text at a rhythm close to the model's own, at no AWS cost.

Chinese and Japanese are written without spaces, so a word boundary there is every character: each ideograph, kana
or full-width sign is a piece of its own (with the spaces before it and a kana voicing mark, variation selector or
combining mark after it), as the AI SDK's documentation advises for ``smoothStream``'s chunking of CJK text.
Scripts that need a dictionary to find their words (Thai, Lao, Khmer, Burmese) are not cut inside a run of letters.
A record of more than :data:`MAX_PIECES` pieces (a fast model's full-size record) has them merged, evenly, into
that many: the client still sees text every few milliseconds, and the relay does not write an event per character
of it.

- The first piece of a record that finds nothing waiting goes out at once: time to first token never waits.
- A record that arrives while pieces still wait joins them, and the whole backlog is spread over one spread from
  now: the text never falls more than about one spread behind the table.
- What is left goes out at once when the stream ends (the terminal record, an error, a ``reconnect``).
- Without pacing (``PACE_TEXT=false``, ``?pace=0``) each record is one event, due at once.

A tool call's arguments (``tool_call`` events) are not paced: each record's argument text goes out whole, at once,
after whatever text waits before it. Pacing is for people reading text as it appears; arguments are read by a
program, which can use a call only once its arguments are complete, so spreading them would only delay the call (by
up to a spread) and multiply the events, for nobody to see.

Positions (the events' ids, HTTP_API.md "Event ids"): a record that goes out whole, and the last piece of a record,
carry the record's ``seq`` (``7``); any other piece carries ``<seq>.<offset>`` (``7.12``), the number of characters
(Unicode code points) of the record's text the client has once it has the piece. Resuming from either gives
exactly the text after it. One record holds one kind of text (``token`` or ``reasoning``), so an offset is always
an offset into one text.
"""

from __future__ import annotations

import collections
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from chatstream.records import ToolCallRef

DEFAULT_INTERVAL_S = 0.3  # the spread before the cadence is known: the proxy's default FLUSH_INTERVAL_MS
SPREAD_FACTOR = 1.2  # pieces are spread over this many cadences: they last until the next record is found
MAX_INTERVAL_S = 1.0  # a slow turn's pieces are spread over at most this long: text never lags more
MAX_SEQ_DIGITS = 8  # records.MAX_SEQ
MAX_OFFSET_DIGITS = 7  # a record holds at most coalescer.MAX_RECORD_CHARS characters
MAX_PIECES = 64  # at most this many pieces a record: a fast model's 1,024-character record is not 1,024 events
# Scripts written without spaces between words (CJK ideographs, kana, CJK and full-width signs; U+20000-U+2FA1F the
# supplementary ideographs): every character is a word boundary.
_UNSPACED = "\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef\U00020000-\U0002fa1f"
# Marks that belong to the character before them: kana voicing marks, variation selectors, and the combining marks
# (diacritical, extended, supplement, for symbols, half marks), so an accent is never a piece of its own.
_ATTACHED = (
    "\u3099\u309a\ufe00-\ufe0f\U000e0100-\U000e01ef\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f"
)
# A word with the spaces before it: one unspaced character (with its marks), or a run of other non-spaces; a record
# may also be only spaces.
_WORD = re.compile(rf"\s*[{_UNSPACED}][{_ATTACHED}]*|\s*[^\s{_UNSPACED}]+|\s+")
_POSITION = re.compile(rf"0*([0-9]{{1,{MAX_SEQ_DIGITS}}})(?:\.0*([0-9]{{1,{MAX_OFFSET_DIGITS}}}))?")


class MalformedPosition(ValueError):
    """An event id that is not ``<seq>`` or ``<seq>.<offset>``."""


@dataclass(frozen=True)
class Position:
    """What a client has of a turn: every record through ``seq``, or only the first ``offset`` characters of record
    ``seq``'s text (``offset`` ``None``: the whole record)."""

    seq: int
    offset: int | None = None

    @classmethod
    def parse(cls, text: str) -> Position:
        """``<seq>`` or ``<seq>.<offset>``: decimal digits, at most 8 and 7 of them (leading zeros aside)."""
        match = _POSITION.fullmatch(text)
        if match is None:
            raise MalformedPosition(text)
        seq, offset = match.groups()
        return cls(int(seq), None if offset is None else int(offset))

    @property
    def key(self) -> tuple[int, float]:
        """For ordering positions: a whole record comes after every piece of it."""
        return (self.seq, float("inf") if self.offset is None else self.offset)

    @property
    def covered(self) -> int:
        """The last record the client has whole (-1: none)."""
        return self.seq if self.offset is None else self.seq - 1

    def __str__(self) -> str:
        return str(self.seq) if self.offset is None else f"{self.seq}.{self.offset}"


@dataclass(frozen=True)
class TextEvent:
    """Text of one kind (the SSE event's name: ``token``), all or part of one record's text.

    ``start`` is where ``text`` begins in the record's text; ``last`` says it ends the record. A tool call's argument
    text (kind ``tool_call``) carries its ``call``, and ``end`` when its record ends the call.
    """

    kind: str
    seq: int
    text: str
    start: int = 0
    last: bool = True
    call: ToolCallRef | None = None
    end: bool = False

    @property
    def position(self) -> Position:
        """The client's position once it has this event: its id."""
        return Position(self.seq, None if self.last else self.start + len(self.text))


def pieces(event: TextEvent) -> list[TextEvent]:
    """``event`` cut at word boundaries: each piece a word with the spaces before it (trailing spaces go with the
    last piece; in CJK text a word is a character), at most :data:`MAX_PIECES` of them (neighbours merged evenly);
    the pieces' texts join to ``event.text``."""
    if event.call is not None:
        return [event]  # arguments are sent whole (the module's docstring)
    words = _WORD.findall(event.text)
    if len(words) > 1 and not words[-1].strip():
        words[-2:] = [words[-2] + words[-1]]
    if len(words) <= 1:
        return [event]
    if len(words) > MAX_PIECES:
        bounds = [len(words) * index // MAX_PIECES for index in range(MAX_PIECES + 1)]
        words = ["".join(words[lo:hi]) for lo, hi in zip(bounds, bounds[1:], strict=False)]
    out: list[TextEvent] = []
    start = event.start
    for index, word in enumerate(words):
        out.append(TextEvent(event.kind, event.seq, word, start, event.last and index == len(words) - 1))
        start += len(word)
    return out


@dataclass
class Pacer:
    """The pieces waiting to go out, and when each is due (times from the follower's ``Clock.monotonic``)."""

    enabled: bool = True
    _waiting: collections.deque[TextEvent] = field(default_factory=collections.deque)
    _next_at: float = 0.0  # when the first waiting piece is due
    _spacing: float = 0.0  # between waiting pieces
    _ready: list[TextEvent] = field(default_factory=list)  # due at once, before any waiting piece: a tool call's

    def add(self, event: TextEvent, now: float, interval: float | None) -> None:
        """Queue a record's text (or what is left of it), read at ``now``; records come every ``interval`` seconds
        (``None``: not known yet). A tool call's arguments are due at once, whole, with every piece before them (an
        end without text too: it completes the call)."""
        if event.call is not None:
            self._ready.extend(self._waiting)
            self._waiting.clear()
            self._ready.append(event)
            return
        if not event.text:
            return
        if not self._waiting:
            self._next_at = now  # nothing waits: the first piece goes at once
        if not self.enabled:
            self._waiting.append(event)
            self._spacing = 0.0
            return
        self._waiting.extend(pieces(event))
        spread = min(DEFAULT_INTERVAL_S if interval is None else interval * SPREAD_FACTOR, MAX_INTERVAL_S)
        self._spacing = max(now + spread - self._next_at, 0.0) / len(self._waiting)

    def next_due(self) -> float | None:
        """When the next piece is due; ``None``: nothing waits."""
        if self._ready:
            return -math.inf
        return self._next_at if self._waiting else None

    def due(self, now: float) -> list[TextEvent]:
        """The pieces due by ``now``, in order."""
        out, self._ready = self._ready, []
        while self._waiting and self._next_at <= now:
            out.append(self._waiting.popleft())
            self._next_at += self._spacing
        return out

    def flush(self) -> list[TextEvent]:
        """Every waiting piece, at once (the stream ends)."""
        out = [*self._ready, *self._waiting]
        self._ready = []
        self._waiting.clear()
        return out
