"""The chaos run's checks: each chat's stream and stored turn against the local model's reply, the DLQ against
the poison put, and the counts that make the ``chaos:`` line.

Pure: the stack is read by :mod:`chaos.readback`; here a chat's plan, what its client saw
(:class:`~chaos.client.StreamSeen`) and what the table holds (:class:`StoredTurn`) become a
:class:`ChatCounts`, and the run's counts a :class:`ChaosResult`. What each count means is in
docs/RELIABILITY.md (``make chaos``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from chaos.faults import fault_summary
from chatstream.dlq import DlqKind, DlqMessage, PoisonRecord
from chatstream.errors import InvalidDeadLetter
from chatstream.records import assistant_text
from chatstream.status import TurnStatus
from chatstream_local.bedrock.model import split_deltas

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from chaos.client import StreamSeen
    from chaos.plan import ChatPlan
    from chatstream.records import TokenRecord
    from chatstream.redrive import RedriveReport
    from chatstream.table import Turn

# How a stream whose generation was lost with its killed proxy may end: the relay's stale-turn timeout, or the
# reaper's error from ProxyFailureQueue.
LOST_GENERATION_CODES = frozenset({"timeout", "generation_failed"})
REAPED_CODES = frozenset({"generation_failed"})  # a turn whose proxy died, ended from ProxyFailureQueue


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


@dataclass(frozen=True)
class StoredTurn:
    """What the table holds for one turn: its item (None when there is none) and its records in seq order."""

    turn: Turn | None = None
    records: tuple[TokenRecord, ...] = ()

    @property
    def text(self) -> str:
        return assistant_text(self.records)

    @property
    def contiguous(self) -> bool:
        """Its records' seqs are 0, 1, 2, … with none missing."""
        return [record.seq for record in self.records] == list(range(len(self.records)))

    @property
    def terminals(self) -> int:
        return sum(1 for record in self.records if record.is_terminal)

    @property
    def ends_in_terminal(self) -> bool:
        return bool(self.records) and self.records[-1].is_terminal

    @property
    def reaped(self) -> bool:
        """Ended by the reaper because its proxy died (the turn's error says so)."""
        turn = self.turn
        return turn is not None and turn.status is TurnStatus.ERROR and (turn.error or {}).get("code") in REAPED_CODES


@dataclass(frozen=True)
class ChatCounts:
    """What one chat (or, added up, many) contributes to the ``chaos:`` line."""

    lost_tokens: int = 0
    duplicated_tokens: int = 0
    unfinished_turns: int = 0
    exact_streams: int = 0
    generator_lost: int = 0
    model_errors: int = 0
    drops: int = 0
    resumes: int = 0
    relay_retries: int = 0
    problems: tuple[str, ...] = ()

    def __add__(self, other: ChatCounts) -> ChatCounts:
        return ChatCounts(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})


def _check_table(expected: str, stored: StoredTurn, turn: int, generator_lost: bool, label: str) -> ChatCounts:
    if generator_lost:
        # Its proxy died: the turn is either still in progress (no terminal record) or was ended by the
        # reaper; either way what it holds is a clean prefix of the reply.
        clean_end = stored.terminals == 0 or (stored.terminals == 1 and stored.ends_in_terminal)
        if not expected.startswith(stored.text) or not stored.contiguous or not clean_end:
            return ChatCounts(problems=(f"{label}: a lost generation's records are not a clean prefix",))
        return ChatCounts()
    problems = []
    unfinished = stored.turn is None or not stored.turn.finished
    if unfinished:
        problems.append(f"{label}: turn {turn} not finished in the table")
    elif not stored.contiguous or stored.terminals != 1 or not stored.ends_in_terminal:
        problems.append(f"{label}: records not contiguous with one terminal record")
    lost, duplicated = compare_text(expected, stored.text)
    if lost or duplicated:
        problems.append(f"{label}: table text differs (lost {lost}, duplicated {duplicated})")
    return ChatCounts(
        lost_tokens=lost, duplicated_tokens=duplicated, unfinished_turns=int(unfinished), problems=tuple(problems)
    )


def _check_stream(plan: ChatPlan, seen: StreamSeen, generator_lost: bool, label: str) -> ChatCounts:
    expected = plan.expected_text
    ids = [seq for seq, _ in seen.tokens]
    repeated = len(ids) - len(set(ids))
    base = ChatCounts(
        duplicated_tokens=repeated,
        drops=int(plan.drop_after is not None),
        resumes=seen.resumes,
        relay_retries=seen.relay_retries,
    )
    stream_lost, stream_duplicated = compare_text(expected, seen.text)
    if generator_lost and seen.done is None:
        code = (seen.error or {}).get("code")
        if code in LOST_GENERATION_CODES and expected.startswith(seen.text) and not repeated:
            return base + ChatCounts(generator_lost=1)
        return base + ChatCounts(problems=(f"{label}: a lost generation ended with {code!r} and text not a prefix",))
    wanted_end_ok = (seen.error is not None) if plan.model_fails else (seen.done is not None)
    model_error = plan.model_fails and seen.error is not None
    if model_error and seen.error is not None:
        wanted_end_ok = seen.error.get("code") == "model_stream_error"
    base += ChatCounts(model_errors=int(model_error))
    if not repeated and stream_lost == 0 and stream_duplicated == 0 and wanted_end_ok:
        return base + ChatCounts(exact_streams=1)
    ending = seen.done or seen.error
    problem = f"{label}: stream not exact (lost {stream_lost}, duplicated {stream_duplicated + repeated}, end {ending})"
    return base + ChatCounts(lost_tokens=stream_lost, duplicated_tokens=stream_duplicated, problems=(problem,))


def check_chat(plan: ChatPlan, seen: StreamSeen, stored: StoredTurn, proxy_failed: bool) -> ChatCounts:
    """One chat's counts: its stream (``seen``) and its turn in the table (``stored``) against the model's reply.

    ``proxy_failed``: the turn's proxy invocation is in ProxyFailureQueue (it was killed). Such a turn, or one
    the reaper ended for that reason, lost its generation: its stream must end with a lost-generation error
    and hold a prefix of the reply; it counts as ``generator_lost``, not as lost tokens.
    """
    label = f"chat {plan.index} ({plan.message[:24]!r}, session {seen.session_id or '-'})"
    if seen.failure:
        return ChatCounts(lost_tokens=len(split_deltas(plan.expected_text)), problems=(f"{label}: {seen.failure}",))
    generator_lost = proxy_failed or stored.reaped
    table = _check_table(plan.expected_text, stored, seen.turn, generator_lost, label)
    return table + _check_stream(plan, seen, generator_lost, label)


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
    onfailure_redriven: int = 0
    problems: tuple[str, ...] = ()  # what the redrive could not restore


def check_dlq(bodies: Iterable[str], poisoned: Sequence[bytes], redrive: RedriveReport) -> DlqCounts:
    """``bodies``: the DLQ after ``redrive`` ran; it must hold exactly the ``poisoned`` payloads."""
    payloads = [poison_payload_of(body) for body in bodies]
    found = {payload for payload in payloads if payload is not None}
    return DlqCounts(
        poison_expected=len(poisoned),
        poison_in_dlq=len(found & set(poisoned)),
        unexpected_dlq=sum(1 for payload in payloads if payload is None or payload not in poisoned),
        onfailure_redriven=sum(1 for result in redrive.results if result.kind == DlqKind.ON_FAILURE),
        problems=tuple(f"redrive lost ranges: {result.lost}" for result in redrive.results if result.lost),
    )


@dataclass(frozen=True)
class ChaosResult:
    """The counts of a chaos run: what its ``chaos:`` line says, and whether it held."""

    chats: int
    totals: ChatCounts  # every chat's counts, added up
    dlq: DlqCounts
    proxy_kills: int
    consumer_kills: int
    faults: Mapping[str, int]  # injected by the fault proxy, by kind

    @classmethod
    def of(
        cls,
        chats: Sequence[ChatCounts],
        dlq: DlqCounts,
        *,
        proxy_kills: int,
        consumer_kills: int,
        faults: Mapping[str, int],
    ) -> ChaosResult:
        total = sum(chats, ChatCounts())
        return cls(len(chats), total, dlq, proxy_kills, consumer_kills, dict(faults))

    @property
    def problems(self) -> tuple[str, ...]:
        """What went wrong, the redrive's first, then each chat's in plan order."""
        return self.dlq.problems + self.totals.problems

    @property
    def possible_exact(self) -> int:
        """Streams that can be exact: all but those whose generation was lost with its proxy."""
        return self.chats - self.totals.generator_lost

    @property
    def ok(self) -> bool:
        totals, dlq = self.totals, self.dlq
        return (
            totals.lost_tokens == 0
            and totals.duplicated_tokens == 0
            and totals.unfinished_turns == 0
            and totals.exact_streams + totals.generator_lost == self.chats
            and dlq.poison_in_dlq == dlq.poison_expected
            and dlq.unexpected_dlq == 0
            and not self.problems
        )

    def line(self) -> str:
        """The one line ``make chaos`` prints."""
        t, dlq = self.totals, self.dlq
        return (
            f"chaos: chats={self.chats} lost_tokens={t.lost_tokens} duplicated_tokens={t.duplicated_tokens} "
            f"unfinished_turns={t.unfinished_turns} exact_streams={t.exact_streams}/{self.possible_exact} "
            f"generator_lost={t.generator_lost} model_errors={t.model_errors} drops={t.drops} "
            f"resumes={t.resumes} relay_retries={t.relay_retries} "
            f"poison={dlq.poison_in_dlq}/{dlq.poison_expected} "
            f"unexpected_dlq={dlq.unexpected_dlq} redriven_onfailure={dlq.onfailure_redriven} "
            f"kills=proxy:{self.proxy_kills},consumer:{self.consumer_kills} faults={fault_summary(self.faults)}"
        )
