"""Following one turn: its token items in ChatTable, as Server-Sent Events, in ``seq`` order.

The follower polls a consistent Query for the items after the last ``seq`` it emitted and emits
the contiguous run that starts right after it; it never emits past a gap (the items of one batch
may become visible out of order). What the client sees:

- ``start`` (seq 0) marks the turn as started and is not an event. It is written in one call with the first
  delta, and Kinesis may store that call's entries apart (ARCHITECTURE.md, "Coalescing"), so a ``start`` that is
  missing or late once seq 1 is visible counts as seen: it carries nothing to wait for;
- ``delta`` → ``event: token`` / ``{"text"}``, its text released in word-sized pieces over the turn's cadence
  (:mod:`chatstream.relay.pace`), each with its id: ``<seq>.<offset>`` inside the record, ``<seq>`` for its last
  piece (a whole record when pacing is off);
- ``reasoning`` → ``event: reasoning`` / ``{"text"}``: the model's reasoning, never the reply, paced and with ids
  exactly as ``delta``'s text (one record holds one kind of text, so its pieces are all of that kind);
- ``tool_use`` → ``event: tool_call`` / ``{"index", "id", "name", "arguments"}`` (and ``"end": true`` on the call's
  last event): a record's argument text whole, with its ``seq`` as id, never paced (:mod:`chatstream.relay.pace`
  says why) but sent after the text before it; a record that only ends the call has ``arguments`` ``""``;
- ``stop`` → ``id: <seq>`` / ``event: done`` / ``{"stop_reason", "usage": {"input_tokens", "output_tokens"}}``;
- ``error`` → ``id: <seq>`` / ``event: error`` / ``{"code", "message", "retryable"}``;

and the stream ends after the terminal record. A client resuming from a piece's id (``<seq>.<offset>``) gets the
rest of that record's text first. The follower turns records into typed text events (:class:`TextEvent`: kind,
text, position) and hands them to the pacer, which decides when each piece goes out; whatever waits goes out at
once before the stream's ending event. Besides the records, the follower ends a stream:

- with ``error`` ``gap`` when a missing ``seq`` stays missing for ``gap_timeout_s`` while later items
  are visible;
- with ``error`` ``timeout`` when the turn has no record at all within ``start_timeout_s`` and no generation has
  claimed it (its proxy invocation waits in Lambda's queue): the follower ends the turn itself, in the write that
  claims it (:func:`end_unclaimed_turn`), so the error is true and the invocation, if it runs later, calls no model;
  a turn a generation claimed is followed on. Also with ``timeout`` when the turn is still in progress past
  ``stale_turn_s`` (its generator died);
- with ``event: reconnect`` (``{"events_url", "last_event_id"}``) when the function's remaining time
  drops below ``reconnect_margin_s``, or when a started turn has given it nothing new to send for
  ``idle_reconnect_s``; the client resumes there with ``Last-Event-ID``;
- when the turn item says the turn ended but its terminal record is not after the client's position
  (a client resuming past the end): the terminal record is sent again (with its ``id``); a terminal
  record that does not show up within ``gap_timeout_s`` is rebuilt from the turn item (without ``id``).

Polling is adaptive. After a poll that brought records (no wait when the page was full) the follower waits
``CADENCE_FRACTION`` of the turn's cadence, the smoothed interval between records (the time between the polls that
brought records, divided by the records each brought, counting only records after the first delta, which is written
at once with the start record; the wait is at most ``poll_max_s``): the proxy flushes on a timer, so the next
records are not due before then. Each idle poll after that doubles the wait from ``poll_min_s`` up to ``poll_max_s``
(ARCHITECTURE.md, "How the relay polls", says what this saves). Until the first token the wait does not grow at all
for ``FIRST_TOKEN_FLAT_S`` after the stream starts (every poll ``poll_min_s`` apart: time to first token is what
users feel most, and on AWS a first token lands a model's own time to first token and ~0.1 s of calls after the
stream starts, so a wait grown by then would add half of it to the first token); after that, and until the cadence
is known (for at most ``FIRST_TOKEN_FAST_S``), the wait grows only by a quarter per idle poll, up to
``FIRST_TOKEN_MAX_FACTOR`` × ``poll_min_s``, so a reply that is slow to start (a busy pipeline) is not polled at the
quickest rate for seconds. A turn the request itself started is not read at once (the proxy has only just been
invoked): its first poll comes ``poll_min_s`` after the stream starts. A wait is never shorter than the last Query
took: when the table answers slowly, followers ask less often instead of queueing more work on it. The turn item is
read only after ``status_check_s`` without records, and then at most every ``status_check_s`` while idle (a new
follower first reads it after ``status_check_s``: its first polls find the records of a turn that has ended). A ``:
keep-alive`` comment goes out after ``keepalive_s`` without output. A throttled read counts as an idle poll; any
other read failure ends the stream with ``error`` ``relay_error`` (retryable: resume from the last id), logged at
ERROR and counted by the relay as its own failure (``InternalErrors``).

The follower never learns that its client went away: on Lambda a Function URL client that disconnects does not
interrupt a streamed response, and the invocation runs on, billed ("streamed responses are not interrupted or
stopped when the invoking client connection is broken", configuration-response-streaming). So an abandoned
follower runs until the turn ends, its deadline, or ``idle_reconnect_s`` without anything to send; a client that
is still there follows the ``reconnect`` and pays one new request for it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from chatstream.errors import InvalidRecord, Throttled
from chatstream.records import ErrorInfo, RecordType, TokenRecord, Usage
from chatstream.relay import sse
from chatstream.relay.pace import Pacer, Position, TextEvent
from chatstream.status import StopReason, TurnStatus
from chatstream.table import RELAY_CLAIM

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from chatstream.config import RelayConfig
    from chatstream.table import ChatTable, Turn

PAGE_SIZE = 500
FIRST_TOKEN_FLAT_S = 2.0  # poll at poll_min_s, without growing, this long while waiting for the first token
FIRST_TOKEN_FAST_S = 5.0  # poll near the quickest rate for this long while waiting for the first token
FIRST_TOKEN_GROWTH = 1.25  # the interval's growth per idle poll before the first token
FIRST_TOKEN_MAX_FACTOR = 4.0  # … up to this many times poll_min_s
CADENCE_FRACTION = 0.8  # after records came, wait this share of the interval at which they have been coming
CADENCE_WEIGHT = 0.3  # the weight of the latest interval in the smoothed cadence
FIRST_TIMED_SEQ = 2  # start (0) and the first delta (1) are written at once; later records on the flush timer


def events_url(session_id: str, turn: int) -> str:
    return f"/sessions/{session_id}/turns/{turn}/events"


def end_unclaimed_turn(table: ChatTable, failure: TokenRecord) -> bool:
    """End a turn no generation has claimed with ``failure`` (its error record: ``timeout``, ``proxy_unavailable``),
    in the write that claims it for the relay (:meth:`~chatstream.table.turns.Turns.end_unclaimed`), so that its
    proxy invocation, if it runs after all (it waited in Lambda's queue), finds the turn ended and calls no model;
    then store the turn's start and ``failure`` records for its followers. Whether this ended the turn
    (:func:`_end_for_the_relay`)."""
    return _end_for_the_relay(table, failure, table.turns.end_unclaimed)


def cancel_unclaimed_turn(table: ChatTable, stop: TokenRecord) -> bool:
    """End a turn no generation has claimed as cancelled (``stop``: its ``cancelled`` stop record), as
    :func:`end_unclaimed_turn` does (:meth:`~chatstream.table.turns.Turns.cancel_unclaimed`)."""
    return _end_for_the_relay(table, stop, table.turns.cancel_unclaimed)


def _end_for_the_relay(table: ChatTable, terminal: TokenRecord, transition: Callable[[TokenRecord], bool]) -> bool:
    """End an unclaimed turn with ``terminal`` through ``transition`` (one of the turn's relay endings), then store
    its start and terminal records.

    Whether this ended the turn: not when a generation had claimed it, or it had ended, first. The turn item is
    written first, as the consumer orders them, then the session is freed; a failure to store the records after
    them is logged, not raised: the item says how the turn ended, and a follower rebuilds the ending from it
    (``gap_timeout_s``). A turn the relay had ended before (another follower, a cancel, or an earlier try whose
    session update or records failed after its item was written) gets what that try may have left undone: its
    session freed and its records stored, from its item.
    """
    if not transition(terminal):
        _complete_relay_ending(table, terminal.session_id, terminal.turn, terminal.ts)
        return False
    _store_relay_records(table, terminal)
    return True


def _complete_relay_ending(table: ChatTable, session_id: str, turn_number: int, now_ms: int) -> None:
    """For a turn the relay ended: its session freed, and its start and terminal records (rebuilt from the item)
    stored, both idempotent. Any other turn is left alone."""
    turn = table.get_turn(session_id, turn_number, texts=False)
    if turn is None or not turn.finished or turn.generator != RELAY_CLAIM:
        return
    table.turns.free_session(session_id, turn_number)
    if turn.status is TurnStatus.ERROR:
        terminal = TokenRecord.failure(session_id, turn_number, 1, turn_error(turn), now_ms)
    else:
        usage = turn.usage or {}
        stop_reason = turn.stop_reason or StopReason.CANCELLED
        spent = Usage(int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0)))
        terminal = TokenRecord.stop(session_id, turn_number, 1, stop_reason, spent, now_ms)
    _store_relay_records(table, terminal)


def _store_relay_records(table: ChatTable, terminal: TokenRecord) -> None:
    try:
        table.put_records([TokenRecord.start(terminal.session_id, terminal.turn, terminal.ts), terminal])
    except (ClientError, BotoCoreError, Throttled) as err:
        logger.error(
            "could not store the ended turn's records; followers end from its item",
            extra={"session_id": terminal.session_id, "turn": terminal.turn, "error": type(err).__name__},
        )


class StreamOutcome(StrEnum):
    """How a stream ended (``open`` while it runs)."""

    OPEN = "open"
    DONE = "done"
    ERROR = "error"
    RECONNECT = "reconnect"
    CLOSED = "closed"  # the body was closed before its end (the runtime lost its Runtime API connection)


@dataclass(frozen=True)
class FollowSettings:
    """How a follower polls and when it gives up: the relay's configuration (:class:`RelayConfig`, whose fallbacks
    are the template's values) in seconds. No default of its own: :meth:`from_config` builds it, tests choose."""

    poll_min_s: float
    poll_max_s: float
    start_timeout_s: float
    gap_timeout_s: float
    keepalive_s: float
    reconnect_margin_s: float
    idle_reconnect_s: float
    stale_turn_s: float
    pace: bool  # release text in word-sized pieces over the turn's cadence (chatstream.relay.pace)
    status_check_s: float = 1.0
    page_size: int = PAGE_SIZE

    @classmethod
    def from_config(cls, config: RelayConfig) -> FollowSettings:
        return cls(
            poll_min_s=config.poll_min_ms / 1000,
            poll_max_s=config.poll_max_ms / 1000,
            start_timeout_s=config.start_timeout_s,
            gap_timeout_s=config.gap_timeout_s,
            keepalive_s=config.keepalive_s,
            reconnect_margin_s=config.reconnect_margin_s,
            idle_reconnect_s=config.idle_reconnect_s,
            stale_turn_s=config.stale_turn_s,
            pace=config.pace_text,
        )


def _no_deadline() -> int:
    return 2**31


@dataclass(frozen=True)
class Clock:
    """Time as the follower sees it; tests inject fast, deterministic versions."""

    sleep: Callable[[float], None] = time.sleep
    monotonic: Callable[[], float] = time.monotonic
    now_ms: Callable[[], int] = field(default=lambda: int(time.time() * 1000))
    remaining_ms: Callable[[], int] = _no_deadline  # the invocation's remaining time


@dataclass
class FollowStats:
    """What one stream sent, for metrics."""

    events_sent: int = 0
    tokens_sent: int = 0  # token events (paced pieces, or whole records)
    first_token_at: float | None = None  # Clock.monotonic() when the first token event was produced
    outcome: StreamOutcome = StreamOutcome.OPEN
    error_code: str | None = None


TOOL_CALL = "tool_call"  # the event of a tool call's arguments


def text_event(record: TokenRecord) -> TextEvent | None:
    """The text a record carries, as a typed event (``None``: it carries none). One record, one kind of text: the
    reply's, the reasoning's, or one tool call's arguments."""
    if record.type is RecordType.DELTA:
        return TextEvent("token", record.seq, record.text or "")
    if record.type is RecordType.REASONING:
        return TextEvent("reasoning", record.seq, record.text or "")
    if record.type is RecordType.TOOL_USE:
        return TextEvent(TOOL_CALL, record.seq, record.text or "", call=record.call, end=record.end)
    return None


def render_text(event: TextEvent) -> str:
    """The SSE event of a text event, with its position as id: ``{"text"}`` under its kind, or a tool call's
    ``{"index", "id", "name", "arguments"}`` (``"end": true`` when it completes the call)."""
    if event.call is None:
        return sse.json_message({"text": event.text}, event=event.kind, id=str(event.position))
    call = event.call
    payload: dict[str, Any] = {"index": call.index, "id": call.id, "name": call.name, "arguments": event.text}
    if event.end and event.last:
        payload["end"] = True
    return sse.json_message(payload, event=TOOL_CALL, id=str(event.position))


def render(record: TokenRecord) -> str:
    """The SSE event of a token record (``start`` has none); a text record's whole text as one event."""
    text = text_event(record)
    if text is not None:
        return render_text(text)
    if record.type is RecordType.STOP:
        usage = record.usage
        payload: dict[str, Any] = {
            "stop_reason": record.stop_reason,
            "usage": {
                "input_tokens": usage.input_tokens if usage else 0,
                "output_tokens": usage.output_tokens if usage else 0,
            },
        }
        return sse.json_message(payload, event="done", id=record.seq)
    if record.type is RecordType.ERROR and record.error is not None:
        return sse.json_message(record.error.to_dict(), event="error", id=record.seq)
    raise ValueError(f"a {record.type.value} record has no event")


def error_event(code: str, message: str, *, retryable: bool) -> str:
    return sse.json_message({"code": code, "message": message, "retryable": retryable}, event="error")


def turn_error(turn: Turn) -> ErrorInfo:
    """The error a turn item that ended in error holds, as its rebuilt ``error`` event says it."""
    error = dict(turn.error or {})
    return ErrorInfo(
        str(error.get("code") or "model_error"),
        str(error.get("message") or "the generation failed"),
        bool(error.get("retryable", False)),
    )


def _terminal_from_turn(turn: Turn) -> str:
    """The ending event rebuilt from a finished turn's item (its terminal record is missing)."""
    if turn.status is TurnStatus.ERROR:
        error = turn_error(turn)
        return error_event(error.code, error.message, retryable=error.retryable)
    usage = turn.usage or {}
    payload = {
        "stop_reason": turn.stop_reason,
        "usage": {
            "input_tokens": int(usage.get("input_tokens", 0)),
            "output_tokens": int(usage.get("output_tokens", 0)),
        },
    }
    return sse.json_message(payload, event="done")


class _End(Exception):
    """Raised with the stream's ending event (or what makes it from the client's final position); the follower
    sends what waits in the pacer, then the event, and stops."""

    def __init__(self, event: str | Callable[[Position | None], str]) -> None:
        super().__init__(event)
        self.event = event

    def ending(self, position: Position | None) -> str:
        return self.event if isinstance(self.event, str) else self.event(position)


@dataclass
class _Cursor:
    """Where a follower is between polls, and what it has learnt about the turn so far."""

    last: int  # the last seq covered (handed to the pacer, or the start record); -1: none yet
    position: Position | None  # the client's position once every piece handed to the pacer went out
    resumed_in: Position | None  # resuming from a piece: the record, and how much of its text the client has
    started: bool  # the start record (or a later one) was seen
    begin: float
    last_output: float  # when the last event or keep-alive went out
    last_event: float  # when the last event went out (the stream's start, before the first)
    next_status_check: float
    gap_since: float | None = None  # since when a later record is visible but the next one is not
    finished_since: float | None = None  # since when the turn item says finished, its terminal record not seen
    # Past start_timeout_s without a record, the turn was left to go on: a generation had claimed it (or it had ended),
    # or the follower may not end it (ends_unstarted). It is followed as a started one, which the idle bound ends.
    left_to_start: bool = False
    idle_polls: int = 0  # polls in a row that brought nothing new
    cadence: float | None = None  # smoothed seconds between records
    last_progress: float | None = None

    def progressed(self, now: float, timed: int, status_check_s: float) -> None:
        """A poll brought records (a page that was not full), ``timed`` of them written on the proxy's flush timer.

        The ``start`` record and the first delta are written together, at once (``FIRST_TIMED_SEQ``): the time
        between them says nothing of the turn's rhythm, and taken for it would make the cadence a few
        milliseconds, so only later records teach it.
        """
        self.next_status_check = max(self.next_status_check, now + status_check_s)  # records flow: the turn lives
        if self.last_progress is not None and timed:
            interval = (now - self.last_progress) / timed  # a late poll finds several flushes' records
            self.cadence = (
                interval if self.cadence is None else self.cadence + CADENCE_WEIGHT * (interval - self.cadence)
            )
        self.last_progress = now


@dataclass
class Follower:
    """Follows one turn from the client's position ``after`` (the last event id it has: a :class:`Position`, or a
    record's ``seq``; ``None`` or -1: none)."""

    table: ChatTable
    session_id: str
    turn: int
    after: Position | int | None = None
    settings: FollowSettings = field(kw_only=True)  # the relay's configuration's (FollowSettings.from_config)
    clock: Clock = field(default_factory=Clock)
    stats: FollowStats = field(default_factory=FollowStats)
    # A turn the request itself started (POST /chat) has no record yet: its first poll waits this long.
    first_poll_after_s: float = 0.0
    # Whether a turn no generation has claimed by start_timeout_s is ended (error timeout), or left to wait for its
    # generation, the idle bound's reconnect ending the stream. Only the request that started the turn and waits for
    # it ends it (POST /chat, a /v1 request that is not background): a follower that attaches later (a resume, a
    # second viewer, a /v1 retrieve) cannot tell a /v1 background response, which waits in Lambda's queue for as
    # long as the queue keeps it, from any other turn.
    ends_unstarted: bool = False
    pacer: Pacer = field(init=False)

    def __post_init__(self) -> None:
        self.pacer = Pacer(enabled=self.settings.pace)

    def events(self) -> Iterator[str]:
        """The stream's events after the client's position, ending with exactly one ending event."""
        try:
            for chunk in self._events():
                if not chunk.startswith(":"):
                    self.stats.events_sent += 1
                yield chunk
        except GeneratorExit:
            self.stats.outcome = StreamOutcome.CLOSED
            raise

    def _events(self) -> Iterator[str]:
        begin = self.clock.monotonic()
        after = self.after if not isinstance(self.after, int) else Position(self.after) if self.after >= 0 else None
        cursor = _Cursor(
            # Seq 0 (start) is no event, so "after 0" and "from the start" read the same items.
            last=after.covered if after is not None and after.covered >= 1 else -1,
            position=after,
            resumed_in=after if after is not None and after.offset is not None else None,
            started=after is not None and after.seq >= 1,
            begin=begin,
            last_output=begin,
            last_event=begin,
            # A new follower reads the turn item only after status_check_s (its first polls find the records
            # of a turn that has ended); a resuming one reads it at once.
            next_status_check=begin + self.settings.status_check_s if after is None else begin,
        )
        if self.first_poll_after_s > 0:
            self.clock.sleep(self.first_poll_after_s)
        try:
            while True:
                yield from self._poll(cursor)
        except _End as end:
            for piece in self.pacer.flush():  # what waits goes out before the ending event
                yield self._emit_text(piece)
            yield end.ending(cursor.position)

    def _poll(self, cursor: _Cursor) -> Iterator[str]:
        """One poll: emit what is new, apply the rules that end a stream, then wait for the next poll."""
        s, clock = self.settings, self.clock
        asked = clock.monotonic()
        records = self._read(cursor.last)
        query_s = clock.monotonic() - asked
        fresh = self._take_run(cursor, records)
        yield from self._release(cursor)
        if clock.remaining_ms() < s.reconnect_margin_s * 1000:
            raise _End(self._reconnect)
        now = clock.monotonic()
        pending = bool(records) and records[-1].seq > cursor.last  # later records, past a gap
        if fresh:
            cursor.gap_since, cursor.finished_since, cursor.idle_polls = None, None, 0
            if len(records) >= s.page_size:
                return  # a full page: more are waiting, read again at once
            timed = sum(1 for record in records[:fresh] if record.seq >= FIRST_TIMED_SEQ)
            cursor.progressed(now, timed, s.status_check_s)
        else:
            cursor.idle_polls += 1
        self._watch_gap(cursor, now, pending)
        if not fresh and not pending and now >= cursor.next_status_check:
            self._check_status(cursor, now)
        self._watch_start(cursor, now, pending)
        self._watch_idle(cursor, now, pending)
        if now - cursor.last_output >= s.keepalive_s:
            yield sse.comment("keep-alive")
            cursor.last_output = now
        waited = now - cursor.begin
        gentle = (cursor.last < 1 or cursor.cadence is None) and waited < FIRST_TOKEN_FAST_S
        flat = cursor.last < 1 and waited < FIRST_TOKEN_FLAT_S
        wait = self._poll_wait(cursor.idle_polls, first_token_due=gentle, flat=flat, cadence=cursor.cadence)
        yield from self._release_during(cursor, max(wait, query_s))

    def _release(self, cursor: _Cursor) -> Iterator[str]:
        """The pieces due now."""
        for piece in self.pacer.due(self.clock.monotonic()):
            yield self._emit_text(piece)
            cursor.last_output = cursor.last_event = self.clock.monotonic()

    def _release_during(self, cursor: _Cursor, wait: float) -> Iterator[str]:
        """Wait ``wait`` seconds (until the next poll), sending the pieces that fall due meanwhile."""
        clock = self.clock
        start = clock.monotonic()
        deadline, waited = start + wait, 0.0
        while (due := self.pacer.next_due()) is not None and due < deadline:
            if due > start + waited:
                clock.sleep(due - start - waited)
                waited = clock.monotonic() - start
            yield from self._release(cursor)
        if wait > waited:
            clock.sleep(wait - waited)

    def _read(self, last: int) -> list[TokenRecord]:
        """The page of records after ``last``; a throttled read finds nothing (an idle poll)."""
        try:
            return self.table.query_records(self.session_id, self.turn, after_seq=last, limit=self.settings.page_size)
        except Throttled:
            return []
        except (ClientError, BotoCoreError, InvalidRecord) as err:
            raise _End(self._read_failed(err)) from err

    def _take_run(self, cursor: _Cursor, records: list[TokenRecord]) -> int:
        """Hand the text of the contiguous run right after ``cursor.last`` to the pacer; returns how many records
        it covered.

        Stops at the first gap. The terminal record's event ends the stream.
        """
        fresh, now = 0, self.clock.monotonic()
        for record in records:
            if cursor.last < 0 and record.seq == 1:  # no start before the first delta: see the module's docstring
                cursor.last, cursor.started = 0, True
            if record.seq != cursor.last + 1:
                break
            cursor.last, fresh = record.seq, fresh + 1
            resumed_in = cursor.resumed_in
            skip = resumed_in.offset or 0 if resumed_in is not None and resumed_in.seq == record.seq else 0
            if record.type is RecordType.START:
                cursor.started = True
                continue
            if record.is_terminal:
                raise _End(self._emit(record))
            text = text_event(record)
            # A call's end without text is an event too (it completes the call), unless the client has the record.
            if text is not None and (skip < len(text.text) or (text.call is not None and skip == 0)):
                self.pacer.add(replace(text, text=text.text[skip:], start=skip), now, cursor.cadence)
            cursor.position = Position(record.seq)
        return fresh

    def _watch_gap(self, cursor: _Cursor, now: float, pending: bool) -> None:
        """End the stream when a missing record stays missing for ``gap_timeout_s`` while later ones exist."""
        if not pending:
            cursor.gap_since = None
            return
        cursor.gap_since = now if cursor.gap_since is None else cursor.gap_since
        if now - cursor.gap_since >= self.settings.gap_timeout_s:
            message = f"event {cursor.last + 1} of the turn is missing; later events exist"
            raise _End(self._fail("gap", message, retryable=True))

    def _watch_start(self, cursor: _Cursor, now: float, pending: bool) -> None:
        """At ``start_timeout_s`` without a record of the turn: end the turn, ``error`` ``timeout``, if no generation
        has claimed it (its proxy invocation still waits in Lambda's queue: ``ProxyReservedConcurrency`` reached, a
        burst), so the error is the turn's own: its session is free, sending again starts a new turn, and the waiting
        invocation, when it runs, calls no model. A turn a generation claimed (a model slow to begin), or one this
        follower may not end (``ends_unstarted``), is followed on as a started one, to its records or the idle bound's
        ``reconnect``."""
        limit = self.settings.start_timeout_s
        if cursor.started or cursor.left_to_start or pending or cursor.finished_since is not None:
            return
        if now - cursor.begin < limit:
            return
        if not self.ends_unstarted:
            cursor.left_to_start = True
            return
        error = ErrorInfo("timeout", f"the generation did not start within {limit:g} s; send again", True)
        failure = TokenRecord.failure(self.session_id, self.turn, 1, error, self.clock.now_ms())
        try:
            ended = end_unclaimed_turn(self.table, failure)
        except Throttled:
            # The next poll tries again: if this try's item write went through, that one finds the turn ended by
            # the relay and does what this one could not (end_unclaimed_turn).
            return
        except (ClientError, BotoCoreError) as err:
            raise _End(self._read_failed(err)) from err
        if ended:
            logger.info("ended a turn no generation started", extra={"session_id": self.session_id, "turn": self.turn})
            raise _End(self._emit(failure))
        cursor.left_to_start = True

    def _watch_idle(self, cursor: _Cursor, now: float, pending: bool) -> None:
        """End with ``reconnect`` when a started turn gave nothing new to send for ``idle_reconnect_s``.

        This bounds what a follower whose client left costs (its invocation runs on, see the module docstring); a
        turn that has not started is bounded by ``start_timeout_s`` first (:meth:`_watch_start`).
        """
        waiting_on_records = cursor.started or cursor.left_to_start or pending
        if waiting_on_records and now - cursor.last_event >= self.settings.idle_reconnect_s:
            raise _End(self._reconnect)

    def _check_status(self, cursor: _Cursor, now: float) -> None:
        """Read the turn item (idle, and due): end the stream, or note that its terminal record is on its way."""
        cursor.next_status_check = now + self.settings.status_check_s
        try:
            finished = self._check_turn(cursor.last, now, cursor.finished_since)
        except Throttled:
            return
        except (ClientError, BotoCoreError, InvalidRecord) as err:
            raise _End(self._read_failed(err)) from err
        if finished and cursor.finished_since is None:
            cursor.finished_since = now

    # ------------------------------------------------------------------------------ helpers

    def _poll_wait(
        self, idle_polls: int, *, first_token_due: bool, flat: bool = False, cadence: float | None = None
    ) -> float:
        """The wait before the next poll, after ``idle_polls`` polls in a row found nothing new (0: the last
        poll brought records, which have been coming every ``cadence`` seconds); ``flat``: the quickest rate, the
        first token not yet here."""
        s, idle = self.settings, min(max(idle_polls - 1, 0), 30)
        if flat:
            return s.poll_min_s
        if first_token_due:
            return min(s.poll_min_s * FIRST_TOKEN_GROWTH**idle, s.poll_min_s * FIRST_TOKEN_MAX_FACTOR)
        if idle_polls == 0 and cadence is not None:
            return min(max(s.poll_min_s, CADENCE_FRACTION * cadence), s.poll_max_s)
        return float(min(s.poll_min_s * 2**idle, s.poll_max_s))

    def _check_turn(self, last: int, now: float, finished_since: float | None) -> bool:
        """Read the turn item while idle. Raises :class:`_End` with the ending event to send; else whether the
        turn ended with its terminal record still on its way."""
        item = self.table.get_turn(self.session_id, self.turn, texts=False)
        if item is None:
            raise _End(self._fail("turn_not_found", f"turn {self.turn} no longer exists", retryable=False))
        if not item.finished:
            age_s = (self.clock.now_ms() - item.created_at) / 1000
            if item.created_at and age_s > self.settings.stale_turn_s:
                message = f"the generation stopped without finishing ({age_s:.0f} s old)"
                raise _End(self._fail("timeout", message, retryable=True))
            return False
        # The turn ended. Its terminal record is written after the turn item: it is either still on
        # its way (after `last`), or the client is already past it (resuming at or beyond the end).
        if last >= 0:
            at_last = self.table.query_records(self.session_id, self.turn, after_seq=last - 1, limit=1)
            if at_last and at_last[0].seq == last and at_last[0].is_terminal:
                raise _End(self._emit(at_last[0]))
            if not at_last or at_last[0].seq != last:
                raise _End(self._rebuilt(item))
        if finished_since is not None and now - finished_since >= self.settings.gap_timeout_s:
            raise _End(self._rebuilt(item))
        return True

    def _emit_text(self, piece: TextEvent) -> str:
        self.stats.tokens_sent += 1
        if self.stats.first_token_at is None:
            self.stats.first_token_at = self.clock.monotonic()
        return render_text(piece)

    def _emit(self, record: TokenRecord) -> str:
        """A terminal record's event (text records go through the pacer)."""
        if record.type is RecordType.STOP:
            self.stats.outcome = StreamOutcome.DONE
        elif record.type is RecordType.ERROR:
            self.stats.outcome = StreamOutcome.ERROR
            self.stats.error_code = record.error.code if record.error else None
        return render(record)

    def _rebuilt(self, turn: Turn) -> str:
        self.stats.outcome = StreamOutcome.ERROR if turn.status is TurnStatus.ERROR else StreamOutcome.DONE
        return _terminal_from_turn(turn)

    def _read_failed(self, err: Exception) -> str:
        # The error's type and code, not its message: an invalid record's may quote the record's text.
        code = err.response.get("Error", {}).get("Code") if isinstance(err, ClientError) else None
        logger.error(
            "reading the turn failed",
            extra={"session_id": self.session_id, "turn": self.turn, "error": type(err).__name__, "error_code": code},
        )
        return self._fail("relay_error", f"reading the turn failed ({type(err).__name__})", retryable=True)

    def _fail(self, code: str, message: str, *, retryable: bool) -> str:
        self.stats.outcome = StreamOutcome.ERROR
        self.stats.error_code = code
        return error_event(code, message, retryable=retryable)

    def _reconnect(self, position: Position | None) -> str:
        """``reconnect`` from the client's final position: a record's ``seq`` as a number (0: nothing yet), or the
        id of a piece, a string, when the client has only part of a record."""
        self.stats.outcome = StreamOutcome.RECONNECT
        last: int | str = 0 if position is None else position.seq if position.offset is None else str(position)
        payload = {"events_url": events_url(self.session_id, self.turn), "last_event_id": last}
        return sse.json_message(payload, event="reconnect")
