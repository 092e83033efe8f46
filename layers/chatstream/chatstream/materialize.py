"""The consumer's core: materialize a batch of Kinesis token records into the ChatTable read model.

Used by ConsumerFunction (one event source mapping batch at a time) and by the redrive tool (``chatstream_ops.redrive``,
an operator command outside this layer: a poison record from the DLQ, or a sequence range re-read from the
stream).

Guarantees, per batch:

- **Idempotent.** A record's item key is session/turn/seq, so a redelivered or replayed record
  rewrites its own item; duplicates inside a batch are written once.
- **Partition keys in parallel.** The records of different partition keys (sessions) do not depend
  on each other, so their groups are written concurrently (``parallel_keys`` threads, started by the first
  batch that needs them and kept for the next ones): a batch that holds many sessions costs about as long
  as its slowest session, not the sum of them, which keeps the first tokens of new turns from waiting
  behind other sessions' turn completions.
- **Fail fast per partition key.** The records of one partition key (one session) are written in
  steps, in stream order. When a step fails with a transient error (throttling, a service or
  transport error), that step's records and every later record of the same partition key are
  reported as failed and nothing later of that key is written; the event source mapping retries
  from the lowest failed sequence number. Other partition keys go on.
- **Turn completion order.** On a turn's terminal record: every earlier record of the turn in the
  batch is written first, then the turn item is completed (status, stop reason, usage, error, and
  the assistant text and apart from it the reasoning text and the tool calls, all assembled from the table), and only
  then is the terminal token item itself written. A reader that sees the terminal item can rely on
  the turn being complete and the session being free for its next turn.
- **Poison records** (undecodable, or not a valid token record) go to the DLQ with their payload,
  the reason and their stream coordinates, and count as processed: one bad record never blocks
  a shard. If the DLQ cannot take it, it fails like a write (transient). They are sent after the
  partition keys' writes, in stream order, and only those before the batch's lowest failed sequence number:
  the event source mapping delivers that record and every later one again, so a poison record after it
  waits for the delivery that gets past the failure (each retry of the batch used to send it again). Should
  the retries run out first, it is in the on-failure record's range, and the redrive sends it. A record is
  still sent twice when the invocation itself fails after sending it (a crash, a timeout): the mapping then
  delivers the whole batch again.

Anything else (a bug, a misconfiguration such as a missing table or denied access) is raised: the
invocation fails, the event source mapping bisects and retries the batch, and what still fails
reaches the DLQ as the mapping's on-failure record.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Protocol

from botocore.exceptions import BotoCoreError

from chatstream.dlq import PoisonRecord
from chatstream.errors import DeadLetterError, InvalidRecord, RecordNotMaterialized, Throttled
from chatstream.records import TokenRecord, assistant_text, reasoning_text, tool_calls

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from chatstream.kinesis import StreamRecord
    from chatstream.table import ChatTable
    from chatstream.tools import ToolCall

logger = logging.getLogger(__name__)

# Sessions of one batch written at once. Each thread holds one DynamoDB connection at a time; botocore's
# default pool (10 connections) stays above this.
DEFAULT_PARALLEL_KEYS = 8

# Errors that mean "try this record again later": reported as batch item failures.
TRANSIENT_ERRORS: tuple[type[Exception], ...] = (Throttled, DeadLetterError, BotoCoreError)


class PoisonSink(Protocol):
    """Where poison records go (the DLQ); raises :class:`DeadLetterError` when it cannot take one."""

    def send_poison(self, poison: PoisonRecord) -> None: ...


@dataclass
class BatchOutcome:
    """What a batch did. ``failures`` maps each record to redeliver (sequence number) to the reason."""

    records: int = 0
    written: int = 0
    poison: int = 0
    turns_completed: int = 0
    incomplete_turns: int = 0
    turns_reconciled: int = 0
    failures: dict[str, str] = field(default_factory=dict)
    poison_records: list[PoisonRecord] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    @classmethod
    def merged(cls, records: int, parts: Sequence[BatchOutcome]) -> BatchOutcome:
        """One batch's outcome from its partition keys' outcomes."""
        total = cls(records=records)
        for part in parts:
            total.written += part.written
            total.poison += part.poison
            total.turns_completed += part.turns_completed
            total.incomplete_turns += part.incomplete_turns
            total.turns_reconciled += part.turns_reconciled
            total.failures.update(part.failures)
            total.poison_records.extend(part.poison_records)
        return total

    def check(self, sequence_number: str) -> None:
        """Raise :class:`RecordNotMaterialized` if the record must be redelivered."""
        reason = self.failures.get(sequence_number)
        if reason is not None:
            raise RecordNotMaterialized(f"record {sequence_number} not materialized: {reason}")


@dataclass
class _Entry:
    """A record of the batch with its decode result."""

    position: int
    source: StreamRecord
    token: TokenRecord | None = None
    poison: str | None = None


@dataclass
class _Step:
    members: list[_Entry]
    run: Callable[[], None]


@dataclass
class Materializer:
    """Writes batches of token records into ChatTable (see the module docstring for the guarantees).

    ``reconcile_finished_turns``: after writing records of a turn that is already finished (its
    terminal record was materialized earlier, e.g. records re-read by the redrive tool after the
    event source mapping skipped them), complete the turn again so its assistant text includes
    them. Costs one read per turn in the batch; the live consumer does not need it, because the
    event source mapping delivers each partition key in order.
    """

    table: ChatTable
    poison_sink: PoisonSink
    reconcile_finished_turns: bool = False
    parallel_keys: int = DEFAULT_PARALLEL_KEYS
    # Started by the first batch of several keys and kept: its threads serve every later batch (starting and
    # joining a pool's threads for each batch cost ~0.3 ms of CPU a thread: 4.9 -> 3.8 ms a batch of four sessions).
    _pool: ThreadPoolExecutor | None = field(default=None, init=False, repr=False, compare=False)

    def process(self, records: Sequence[StreamRecord]) -> BatchOutcome:
        groups: dict[str, list[_Entry]] = defaultdict(list)
        for position, source in enumerate(records):
            entry = _decode(position, source)
            groups[source.partition_key].append(entry)
        if self.parallel_keys <= 1 or len(groups) <= 1:
            outcomes = [self._process_group(key, entries) for key, entries in groups.items()]
        else:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.parallel_keys, thread_name_prefix="materialize")
            outcomes = list(self._pool.map(self._process_group, groups.keys(), groups.values()))
        outcome = BatchOutcome.merged(len(records), outcomes)
        poison = sorted(
            (entry for entries in groups.values() for entry in entries if entry.poison is not None),
            key=lambda entry: int(entry.source.sequence_number),
        )
        self._dead_letter(poison, outcome)
        return outcome

    def _dead_letter(self, poison: list[_Entry], outcome: BatchOutcome) -> None:
        """Send the batch's poison records to the DLQ, in stream order, up to its lowest failed sequence number:
        the mapping redelivers that record and every later one, so a later poison record waits to be sent once."""
        for entry in poison:
            sequence_number = entry.source.sequence_number
            lowest = min((int(failed) for failed in outcome.failures), default=None)
            if lowest is not None and int(sequence_number) > lowest:
                break
            assert entry.poison is not None
            try:
                self._send_poison(PoisonRecord(entry.source, entry.poison), outcome)
            except TRANSIENT_ERRORS as err:
                outcome.failures[sequence_number] = f"{type(err).__name__}: {err}"
                logger.warning("poison record %s not sent to the DLQ, retried: %s", sequence_number, err)

    # ----------------------------------------------------------------------------- internals

    def _process_group(self, partition_key: str, entries: list[_Entry]) -> BatchOutcome:
        """One partition key's records, in stream order; its own outcome (groups may run in threads)."""
        outcome = BatchOutcome(records=len(entries))
        steps = self._plan(entries, outcome)
        for index, step in enumerate(steps):
            try:
                step.run()
            except TRANSIENT_ERRORS as err:
                reason = f"{type(err).__name__}: {err}"
                failed = [entry for later in steps[index:] for entry in later.members]
                for entry in failed:
                    outcome.failures[entry.source.sequence_number] = reason
                logger.warning(
                    "partition key %s: %d records not materialized, retried from sequence number %s: %s",
                    partition_key,
                    len(failed),
                    min((entry.source.sequence_number for entry in failed), key=int),
                    reason,
                )
                break
        return outcome

    def _plan(self, entries: list[_Entry], outcome: BatchOutcome) -> list[_Step]:
        """The group's write steps, in stream order; a turn's terminal pulls its turn's records forward."""
        steps: list[_Step] = []
        pending: list[_Entry] = []
        planned: set[int] = set()

        def flush() -> None:
            if pending:
                batch = list(pending)
                steps.append(_Step(batch, partial(self._write, batch, outcome)))
                pending.clear()

        for entry in entries:
            if entry.position in planned:
                continue
            planned.add(entry.position)
            if entry.poison is not None:
                continue  # sent after every key's writes (_dead_letter)
            token = entry.token
            assert token is not None
            if not token.is_terminal:
                pending.append(entry)
                continue
            # Every record of this turn before the terminal, wherever it sits in the batch, goes first.
            for other in entries:
                other_token = other.token
                if (
                    other.position not in planned
                    and other_token is not None
                    and not other_token.is_terminal
                    and (other_token.session_id, other_token.turn) == (token.session_id, token.turn)
                    and other_token.seq < token.seq
                ):
                    planned.add(other.position)
                    pending.append(other)
            flush()
            steps.append(_Step([entry], partial(self._complete, entry, outcome)))
        flush()
        if self.reconcile_finished_turns:
            steps.extend(self._reconcile_steps(entries, outcome))
        return steps

    def _write(self, entries: list[_Entry], outcome: BatchOutcome) -> None:
        tokens = [entry.token for entry in entries if entry.token is not None]
        self.table.put_records(tokens)
        outcome.written += len(tokens)

    def _send_poison(self, poison: PoisonRecord, outcome: BatchOutcome) -> None:
        self.poison_sink.send_poison(poison)
        outcome.poison += 1
        outcome.poison_records.append(poison)
        logger.warning("poison record %s sent to the DLQ: %s", poison.record.coordinates, poison.reason)

    def _complete(self, entry: _Entry, outcome: BatchOutcome) -> None:
        terminal = entry.token
        assert terminal is not None
        text, reasoning, calls, missing = self._assemble(terminal)
        self.table.turns.end_from_stream(terminal, text, reasoning=reasoning, tool_calls=calls)
        self.table.put_records([terminal])
        outcome.written += 1
        outcome.turns_completed += 1
        if missing:
            outcome.incomplete_turns += 1
            logger.warning(
                "session %s turn %d completed without %d of its records (seq %s…); redrive the DLQ",
                terminal.session_id,
                terminal.turn,
                len(missing),
                missing[0],
            )

    def _assemble(self, terminal: TokenRecord) -> tuple[str, str, list[ToolCall], list[int]]:
        """The turn's assistant text, reasoning text and tool calls from the table, and the seqs before the terminal
        that are missing."""
        stored = [
            record
            for record in self.table.query_records(terminal.session_id, terminal.turn)
            if record.seq < terminal.seq
        ]
        present = {record.seq for record in stored}
        # A missing start (seq 0) is no missing text: it shares its call with the first delta and carries nothing
        # (ARCHITECTURE.md, "Coalescing").
        missing = [seq for seq in range(1, terminal.seq) if seq not in present]
        return assistant_text(stored), reasoning_text(stored), tool_calls(stored), missing

    def _reconcile_steps(self, entries: list[_Entry], outcome: BatchOutcome) -> list[_Step]:
        """Re-complete finished turns that this group wrote records of without their terminal."""
        with_terminal = {
            (entry.token.session_id, entry.token.turn)
            for entry in entries
            if entry.token is not None and entry.token.is_terminal
        }
        turns: dict[tuple[str, int], list[_Entry]] = defaultdict(list)
        for entry in entries:
            if entry.token is not None and (entry.token.session_id, entry.token.turn) not in with_terminal:
                turns[(entry.token.session_id, entry.token.turn)].append(entry)
        return [_Step(members, partial(self._reconcile, key[0], key[1], outcome)) for key, members in turns.items()]

    def _reconcile(self, session_id: str, turn: int, outcome: BatchOutcome) -> None:
        current = self.table.get_turn(session_id, turn, texts=False)
        if current is None or not current.finished:
            return
        stored = self.table.query_records(session_id, turn)
        terminal = next((record for record in reversed(stored) if record.is_terminal), None)
        if terminal is None:
            return
        text, reasoning, calls, _missing = self._assemble(terminal)
        self.table.turns.end_from_stream(terminal, text, reasoning=reasoning, tool_calls=calls)
        outcome.turns_reconciled += 1


def decode(source: StreamRecord) -> TokenRecord:
    """The token record a stream record carries; :class:`InvalidRecord` (the reason) if it is poison."""
    if source.undecodable is not None:
        raise InvalidRecord(source.undecodable)
    token = TokenRecord.decode(source.data)
    if token.session_id != source.partition_key:
        raise InvalidRecord(f"partition key {source.partition_key!r} is not the record's session_id")
    return token


def _decode(position: int, source: StreamRecord) -> _Entry:
    try:
        return _Entry(position, source, token=decode(source))
    except InvalidRecord as err:
        return _Entry(position, source, poison=str(err))
