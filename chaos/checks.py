"""The chaos run's checks: each chat's stream and stored turn against the local model's reply, the DLQ against
the poison put, the proxy's duplicate deliveries against those it dropped, and the counts that make the ``chaos:``
line.

Pure: the stack is read by :mod:`chaos.readback`; here a chat's plan, what its client saw
(:class:`~chaos.client.StreamSeen`) and what the table holds (:class:`StoredTurn`) become a
:class:`ChatCounts`, and the run's counts a :class:`ChaosResult`. What each count means is in
docs/RELIABILITY.md (``make chaos``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from chaos.faults import fault_summary
from chatstream.dlq import DlqKind, DlqMessage, PoisonRecord
from chatstream.errors import InvalidDeadLetter
from chatstream.records import assistant_text, tool_calls
from chatstream.relay.exchange import REINVOKED
from chatstream.status import TurnStatus
from chatstream_local.bedrock.model import split_deltas
from chatstream_ops.redrive import RedriveStatus

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from chaos.client import StreamSeen
    from chaos.plan import ChatPlan
    from chatstream.records import TokenRecord
    from chatstream.table import Turn
    from chatstream.tools import ToolCall
    from chatstream_ops.redrive import RedriveReport

# How a stream whose generation was lost may end: the reaper's error from ProxyFailureQueue, or the relay's
# stale-turn timeout when it came first.
LOST_GENERATION_CODES = frozenset({"timeout", "generation_failed"})
REAPED_CODES = frozenset({"generation_failed"})  # a turn whose proxy died, ended from ProxyFailureQueue
DUPLICATE_DROPPED = "duplicate invocation; not generated"  # the proxy's log message for a delivery it drops


def _deltas_covered(expected: str, received: str) -> int:
    """How many of the model's deltas ``received`` holds in full, from the start."""
    covered, at = 0, 0
    for delta in split_deltas(expected):
        if received[at : at + len(delta)] != delta:
            break
        at += len(delta)
        covered += 1
    return covered


def compare_text(expected: str, received: str) -> tuple[int, int]:
    """(lost, duplicated) deltas of ``received`` against ``expected``: the model's deltas missing from the
    longest matching start, and the deltas of whatever follows it."""
    if received == expected:
        return 0, 0
    total = len(split_deltas(expected))
    covered = _deltas_covered(expected, received)
    extra = (
        received[len(expected) :]
        if received.startswith(expected)
        else received[sum(map(len, split_deltas(expected)[:covered])) :]
    )
    return total - covered, len(split_deltas(extra)) if extra else 0


def compare_calls(expected: Sequence[ToolCall], received: Sequence[ToolCall]) -> int:
    """How many of the model's tool calls ``received`` does not hold exactly, at their index (the id, the name, the
    complete arguments), and the calls it holds that the model did not make."""
    wrong = sum(1 for index, call in enumerate(expected) if index >= len(received) or received[index] != call)
    return wrong + max(0, len(received) - len(expected))


def calls_prefix(expected: Sequence[ToolCall], received: Sequence[ToolCall]) -> bool:
    """``received`` is what a generation cut short may hold of the model's calls: each exact, but the last, which may
    be incomplete (the right id and name, a start of its arguments)."""
    if len(received) > len(expected):
        return False
    for index, call in enumerate(received):
        want = expected[index]
        last = index == len(received) - 1
        started = (call.id, call.name) == (want.id, want.name) and want.arguments.startswith(call.arguments)
        if call != want and (call.complete or not last or not started):
            return False
    return True


@dataclass(frozen=True)
class StoredTurn:
    """What the table holds for one turn: its item (None when there is none) and its records in seq order."""

    turn: Turn | None = None
    records: tuple[TokenRecord, ...] = ()

    @property
    def text(self) -> str:
        return assistant_text(self.records)

    @property
    def tool_calls(self) -> list[ToolCall]:
        """The tool calls its records spell."""
        return tool_calls(self.records)

    @property
    def contiguous(self) -> bool:
        """Its records' seqs are 0, 1, 2, … with none missing, but for the start (seq 0) once seq 1 is there: it
        shares its call with the first delta and carries nothing (ARCHITECTURE.md, "Coalescing")."""
        seqs = [record.seq for record in self.records]
        first = 1 if seqs[:1] == [1] else 0
        return seqs == list(range(first, first + len(seqs)))

    @property
    def terminals(self) -> int:
        return sum(1 for record in self.records if record.is_terminal)

    @property
    def ends_in_terminal(self) -> bool:
        return bool(self.records) and self.records[-1].is_terminal

    @property
    def reaped(self) -> bool:
        """Ended by the reaper because its proxy died (the turn's error says so)."""
        return self._ended_in(REAPED_CODES)

    @property
    def generation_lost(self) -> bool:
        """The table shows the generation lost: the turn ended in a lost generation's error (the reaper's, or the
        stale-turn timeout), not overridden by a terminal record of the proxy's."""
        return self._ended_in(LOST_GENERATION_CODES)

    def _ended_in(self, codes: frozenset[str]) -> bool:
        turn = self.turn
        return turn is not None and turn.status is TurnStatus.ERROR and (turn.error or {}).get("code") in codes


@dataclass(frozen=True)
class ChatCounts:
    """What one chat (or, added up, many) contributes to the ``chaos:`` line."""

    lost_tokens: int = 0
    duplicated_tokens: int = 0
    wrong_tool_calls: int = 0  # the model's calls a stream or a stored turn did not hold exactly, or held extra
    unfinished_turns: int = 0
    failed_chats: int = 0  # chats that never got a stream
    exact_streams: int = 0
    killed_generations: int = 0  # generations lost because the run killed their proxy
    other_lost_generations: int = 0  # generations lost to anything else: each a problem
    model_errors: int = 0
    drops: int = 0
    resumes: int = 0
    mid_record_resumes: int = 0  # resumes from a piece's id, inside a record
    tool_chats: int = 0  # chats whose plan declares tools (and whose model calls them)
    mid_call_resumes: int = 0  # resumes from inside a tool call's arguments
    relay_retries: int = 0
    http_retries: int = 0
    cut_posts: int = 0  # POSTs cut before their first byte, then sent again with their key
    problems: tuple[str, ...] = ()

    @property
    def generator_lost(self) -> int:
        return self.killed_generations + self.other_lost_generations

    def __add__(self, other: ChatCounts) -> ChatCounts:
        return ChatCounts(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})


@dataclass(frozen=True)
class _Found:
    """One side's (the table's, or the stream's) verdict on a chat, before the two are merged."""

    lost: int = 0
    duplicated: int = 0
    problems: tuple[str, ...] = ()
    wrong_calls: int = 0


def _check_table(plan: ChatPlan, stored: StoredTurn, turn: int, label: str) -> tuple[_Found, bool]:
    """The stored turn against the reply: what it lost or duplicated, which calls it got wrong (its records', and its
    item's once finished), and whether it is unfinished."""
    expected = plan.expected_text
    problems = []
    unfinished = stored.turn is None or not stored.turn.finished
    if unfinished:
        problems.append(f"{label}: turn {turn} not finished in the table")
    elif not stored.contiguous or stored.terminals != 1 or not stored.ends_in_terminal:
        problems.append(f"{label}: records not contiguous with one terminal record")
    lost, duplicated = compare_text(expected, stored.text)
    if lost or duplicated:
        problems.append(f"{label}: table text differs (lost {lost}, duplicated {duplicated})")
    wrong = compare_calls(plan.expected_calls, stored.tool_calls)
    if not unfinished and stored.turn is not None:
        wrong = max(wrong, compare_calls(plan.expected_calls, stored.turn.tool_calls))
    if wrong:
        problems.append(f"{label}: table tool calls differ ({wrong} of {len(plan.expected_calls)} wrong or extra)")
    return _Found(lost, duplicated, tuple(problems), wrong), unfinished


def _check_stream(plan: ChatPlan, seen: StreamSeen, label: str) -> tuple[_Found, bool]:
    """The client's stream against the reply: what it lost or duplicated, and whether it is exact."""
    ids = seen.event_ids
    repeated = len(ids) - len(set(ids))
    lost, duplicated = compare_text(plan.expected_text, seen.text)
    wrong = compare_calls(plan.expected_calls, seen.tool_calls)
    if plan.model_fails:
        ended_as_planned = seen.error is not None and seen.error.get("code") == "model_stream_error"
    else:
        ended_as_planned = seen.done is not None
    if not (repeated or lost or duplicated or wrong) and ended_as_planned and not seen.failure:
        return _Found(), True
    ending = seen.failure or seen.done or seen.error
    calls = f", tool calls wrong {wrong}" if wrong else ""
    problem = f"{label}: stream not exact (lost {lost}, duplicated {duplicated + repeated}{calls}, end {ending})"
    return _Found(lost, duplicated + repeated, (problem,), wrong), False


def _check_lost_generation(
    plan: ChatPlan, seen: StreamSeen, stored: StoredTurn, killed: bool, label: str
) -> ChatCounts:
    """A turn the reaper ended: its proxy died. What was stored and streamed must be a clean prefix of the reply,
    the stream must end with a lost generation's error, and the proxy must be one the run killed."""
    expected = plan.expected_text
    problems = []
    clean_end = stored.terminals == 0 or (stored.terminals == 1 and stored.ends_in_terminal)
    clean_calls = calls_prefix(plan.expected_calls, stored.tool_calls)
    if not expected.startswith(stored.text) or not stored.contiguous or not clean_end or not clean_calls:
        problems.append(f"{label}: a lost generation's records are not a clean prefix")
    ids = seen.event_ids
    code = (seen.error or {}).get("code")
    ended = seen.done is None and code in LOST_GENERATION_CODES
    prefix = expected.startswith(seen.text) and calls_prefix(plan.expected_calls, seen.tool_calls)
    if not ended or not prefix or len(ids) != len(set(ids)) or seen.failure:
        ending = seen.failure or seen.done or seen.error
        problems.append(f"{label}: a lost generation's stream is not a prefix ending in its error (end {ending})")
    if killed:
        return ChatCounts(killed_generations=1, problems=tuple(problems))
    why = (stored.turn.error or {}).get("message") if stored.turn is not None else None
    problems.append(f"{label}: its generation was lost, and the run did not kill its proxy ({why})")
    return ChatCounts(other_lost_generations=1, problems=tuple(problems))


def check_chat(plan: ChatPlan, seen: StreamSeen, stored: StoredTurn, *, killed: bool) -> ChatCounts:
    """One chat's counts: its stream (``seen``) and its turn in the table (``stored``) against the model's reply.

    ``killed``: the run killed the proxy invocation of this chat's turn. A turn the reaper ended (its proxy died)
    lost its generation: it counts as ``killed`` when the run killed that proxy, as a problem otherwise. A killed
    generation whose terminal record was already put ends complete, and its stream must be exact: also when the
    stream had ended on a lost generation's error before that record was read (the client was told a reply was lost
    that the table holds whole). A token lost (or duplicated) by the table and by the stream counts once.
    """
    label = f"chat {plan.index} ({plan.message[:24]!r}, session {seen.session_id or '-'})"
    activity = ChatCounts(
        drops=seen.drops,
        resumes=seen.resumes,
        mid_record_resumes=seen.mid_record_resumes,
        tool_chats=int(bool(plan.tools)),
        mid_call_resumes=seen.mid_call_resumes,
        relay_retries=seen.relay_retries,
        http_retries=seen.http_retries,
        cut_posts=seen.cut_posts,
    )
    if not seen.session_id:
        return activity + ChatCounts(failed_chats=1, problems=(f"{label}: no stream: {seen.failure}",))
    # A generation the run killed may end either way: the reaper ends its turn in error, or, when the proxy had put
    # its terminal record before it died, that record does (also after the reaper, whose presumption it overrides).
    # Only the first is excused, as the table shows it: a stream that ended on a lost generation's error while the
    # table holds the completed reply told its client of a loss that did not happen, and is checked as any other.
    told_lost = seen.done is None and (seen.error or {}).get("code") in LOST_GENERATION_CODES
    if stored.reaped or (killed and told_lost and stored.generation_lost):
        return activity + _check_lost_generation(plan, seen, stored, killed, label)
    table, unfinished = _check_table(plan, stored, seen.turn, label)
    stream, exact = _check_stream(plan, seen, label)
    model_error = plan.model_fails and seen.error is not None
    return activity + ChatCounts(
        lost_tokens=max(table.lost, stream.lost),
        duplicated_tokens=max(table.duplicated, stream.duplicated),
        wrong_tool_calls=max(table.wrong_calls, stream.wrong_calls),
        unfinished_turns=int(unfinished),
        exact_streams=int(exact),
        model_errors=int(model_error),
        problems=table.problems + stream.problems,
    )


def poison_payload_of(body: str) -> bytes | None:
    """The record payload of a poison-record DLQ message body; None for any other message."""
    message = DlqMessage(message_id="", receipt_handle="", body=body)
    if message.kind is not DlqKind.POISON:
        return None
    try:
        parsed = message.parse()
    except (InvalidDeadLetter, KeyError, ValueError):
        return None
    return parsed.record.data if isinstance(parsed, PoisonRecord) else None


@dataclass(frozen=True)
class DlqCounts:
    """The DLQ after the redrive, against the poison records the run put on the stream."""

    poison_expected: int = 0
    poison_in_dlq: int = 0
    unexpected_dlq: int = 0
    onfailure_redriven: int = 0  # on-failure pointers the redrive re-read from the stream (and deleted)
    problems: tuple[str, ...] = ()  # what the redrive could not restore


def check_dlq(bodies: Iterable[str], poisoned: Sequence[bytes], redrive: RedriveReport) -> DlqCounts:
    """``bodies``: the DLQ after ``redrive`` ran; it must hold exactly the ``poisoned`` payloads."""
    payloads = [poison_payload_of(body) for body in bodies]
    found = {payload for payload in payloads if payload is not None}
    return DlqCounts(
        poison_expected=len(poisoned),
        poison_in_dlq=len(found & set(poisoned)),
        unexpected_dlq=sum(1 for payload in payloads if payload is None or payload not in poisoned),
        onfailure_redriven=sum(
            1
            for result in redrive.results
            if result.kind == DlqKind.ON_FAILURE and result.status is RedriveStatus.REDRIVEN
        ),
        problems=tuple(
            f"redrive lost ranges: {', '.join(map(str, result.lost))}" for result in redrive.results if result.lost
        ),
    )


def is_dropped_duplicate(line: str) -> bool:
    """Whether a function's log line is the proxy's JSON line saying it dropped a delivery of an event it had already
    claimed or ended (``DUPLICATE_DROPPED``)."""
    return _message(line) == DUPLICATE_DROPPED


def is_reinvoked(line: str) -> bool:
    """Whether a function's log line is the relay's JSON line saying it invoked the proxy again for a turn a POST sent
    again joined (:data:`~chatstream.relay.exchange.REINVOKED`); that second event is dropped as a duplicate when the
    first claims the turn."""
    return _message(line) == REINVOKED


def _message(line: str) -> object:
    if not line.startswith("{"):
        return None
    try:
        return json.loads(line).get("message")
    except ValueError:
        return None


@dataclass(frozen=True)
class DuplicateCounts:
    """The proxy's events the local Lambda delivered twice, as Lambda may, and the deliveries the proxy dropped as
    duplicates: each second delivery must be dropped (not generated again), and no other.

    ``failed``: events delivered twice one of whose deliveries ended in an error (the run killed the environment, or
    an injected fault failed the claim past botocore's retries). A second delivery that failed may have been dropped
    before it failed or not, but cannot have generated; a first delivery that failed before it claimed the turn left
    the turn to the second, which rightly generated. Either way such an event has at most one drop, maybe none.

    ``reinvoked``: second events the relay sent itself, when a POST sent again with its key joined a turn no
    generation had claimed yet (the first event was on its way, or lost with a relay that died before it invoked):
    each is dropped when the first claims the turn, or generates when there was none. So
    ``delivered - failed <= dropped <= delivered + reinvoked`` holds.
    """

    delivered: int = 0
    dropped: int = 0
    failed: int = 0
    reinvoked: int = 0

    @property
    def problems(self) -> tuple[str, ...]:
        if self.delivered - self.failed <= self.dropped <= self.delivered + self.reinvoked:
            return ()
        why = "a duplicate was generated again" if self.dropped < self.delivered else "a delivery was no duplicate"
        failed = f" ({self.failed} of them failed)" if self.failed else ""
        return (f"{self.delivered} proxy events delivered twice{failed}, {self.dropped} dropped as duplicates ({why})",)

    def summary(self) -> str:
        """``delivered/dropped``, and the failed second deliveries when there were any."""
        failed = f",failed:{self.failed}" if self.failed else ""
        reinvoked = f",reinvoked:{self.reinvoked}" if self.reinvoked else ""
        return f"{self.delivered}/{self.dropped}{failed}{reinvoked}"


@dataclass(frozen=True)
class ChaosResult:
    """The counts of a chaos run: what its ``chaos:`` line says, and whether it held."""

    chats: int
    totals: ChatCounts  # every chat's counts, added up
    dlq: DlqCounts
    proxy_kills: int
    consumer_kills: int
    faults: Mapping[str, int]  # injected by the fault proxy, by kind
    duplicates: DuplicateCounts = DuplicateCounts()
    run_problems: tuple[str, ...] = ()  # the run's own: the stack did not settle, a queue was not read in full
    # sessions in the table that no chat streamed: a second generation of a request sent again (each chat's
    # message starts one session; a send joins, by its key, the turn an earlier send of it started)
    duplicated_generations: int = 0

    @classmethod
    def of(
        cls,
        chats: Sequence[ChatCounts],
        dlq: DlqCounts,
        *,
        proxy_kills: int,
        consumer_kills: int,
        faults: Mapping[str, int],
        duplicates: DuplicateCounts = DuplicateCounts(),
        run_problems: Sequence[str] = (),
        duplicated_generations: int = 0,
    ) -> ChaosResult:
        total = sum(chats, ChatCounts())
        return cls(
            len(chats),
            total,
            dlq,
            proxy_kills,
            consumer_kills,
            dict(faults),
            duplicates,
            tuple(run_problems),
            duplicated_generations,
        )

    @property
    def problems(self) -> tuple[str, ...]:
        """What went wrong: the run's own, the redrive's, duplicates not dropped one for one, more lost generations
        than kills, then each chat's."""
        lost = self.totals.generator_lost
        beyond_kills = (
            (f"{lost} generations lost, more than the {self.proxy_kills} proxies the run killed",)
            if lost > self.proxy_kills
            else ()
        )
        again = (
            (f"{self.duplicated_generations} sessions no chat streamed: a request sent again started a second turn",)
            if self.duplicated_generations
            else ()
        )
        return (
            self.run_problems
            + self.dlq.problems
            + self.duplicates.problems
            + beyond_kills
            + again
            + self.totals.problems
        )

    @property
    def possible_exact(self) -> int:
        """Streams that can be exact: all but those whose generation was lost with a proxy the run killed."""
        return self.chats - self.totals.killed_generations

    @property
    def ok(self) -> bool:
        totals, dlq = self.totals, self.dlq
        return (
            totals.lost_tokens == 0
            and totals.duplicated_tokens == 0
            and totals.wrong_tool_calls == 0
            and totals.unfinished_turns == 0
            and totals.failed_chats == 0
            and totals.other_lost_generations == 0
            and totals.generator_lost <= self.proxy_kills
            and totals.exact_streams == self.possible_exact
            and dlq.poison_in_dlq == dlq.poison_expected
            and dlq.unexpected_dlq == 0
            and self.duplicated_generations == 0
            and not self.problems
        )

    def line(self) -> str:
        """The one line ``make chaos`` prints."""
        t, dlq = self.totals, self.dlq
        return (
            f"chaos: chats={self.chats} lost_tokens={t.lost_tokens} duplicated_tokens={t.duplicated_tokens} "
            f"wrong_tool_calls={t.wrong_tool_calls} "
            f"unfinished_turns={t.unfinished_turns} failed_chats={t.failed_chats} "
            f"exact_streams={t.exact_streams}/{self.possible_exact} "
            f"generator_lost=killed:{t.killed_generations},other:{t.other_lost_generations} "
            f"model_errors={t.model_errors} drops={t.drops} resumes={t.resumes} "
            f"mid_record_resumes={t.mid_record_resumes} tool_chats={t.tool_chats} "
            f"mid_call_resumes={t.mid_call_resumes} relay_retries={t.relay_retries} "
            f"http_retries={t.http_retries} cut_posts={t.cut_posts} "
            f"duplicated_generations={self.duplicated_generations} "
            f"poison={dlq.poison_in_dlq}/{dlq.poison_expected} "
            f"unexpected_dlq={dlq.unexpected_dlq} redriven_onfailure={dlq.onfailure_redriven} "
            f"kills=proxy:{self.proxy_kills},consumer:{self.consumer_kills} "
            f"duplicates={self.duplicates.summary()} faults={fault_summary(self.faults)}"
        )
