"""A turn's lifecycle: its ``status`` and the only ways it changes.

A turn is ``in_progress`` from its start until one ending makes it ``complete``, ``cancelled`` or ``error``. Each
change is a named transition, listed in :data:`TRANSITIONS` with the statuses it may start from and those it may
end in, and made by the :class:`Turns` method of its name, in one conditional write whose condition is built from
that table and nothing else (:func:`condition`): the allowed "from" statuses, and where the transition says so, no
generation's claim yet (``generator`` absent) and not expired. Callers name the transition they mean; no other code
writes a turn item's ``status``. ARCHITECTURE.md ("A turn's lifecycle") draws the table, and
``tests/unit/table/test_turn_machine.py`` holds the drawing and the code to it.

An ending from the stream is allowed from any status: the token log is what happened, so a terminal record
overrides an outcome a presumption wrote (the reaper's, a stale takeover's). Every other ending is allowed only
from ``in_progress``, so what ended a turn first stands. Every ending but ``end_stale`` then frees the session
(:meth:`Turns.free_session`: the session may take its next turn; idempotent), and all of them go through
:meth:`Turns._end`, which settles the turn's reservation of its owner's budget, as both starts go through
:meth:`Turns._start`, whose one transaction also admits the turn (the owner's limits, the request's idempotency key:
:mod:`chatstream.table.budgets`).

Texts: a finished turn's item holds its reply and reasoning, unless they make it larger than DynamoDB's 400 KB
item; then its outcome is written without them, marked ``texts_in_records``, and reads assemble them from its token
records (the consumer stores a turn's records before it ends the turn). An ending that presumes (``end_presumed_lost``,
``end_stale``) always reads them from the records, so records that reach the table after it are part of the reply.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from chatstream.errors import Throttled, TurnClaimed, TurnFinished, TurnInProgress, TurnLimitReached, TurnNotFound
from chatstream.records import ErrorInfo, assistant_text, reasoning_text
from chatstream.records import tool_calls as assembled_tool_calls
from chatstream.status import StopReason, TurnStatus
from chatstream.table.budgets import Charge, Verdict
from chatstream.table.dynamodb import call, condition_failed, deser, number, ser, too_large
from chatstream.table.store import pk, session_key, turn_key
from chatstream.tools import ToolCall
from chatstream.turn_options import TurnOptions

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from chatstream.records import TokenRecord
    from chatstream.table.budgets import Admission, Budgets
    from chatstream.table.sessions import Sessions
    from chatstream.table.store import Store
    from chatstream.table.token_records import TokenRecords

logger = logging.getLogger(__name__)

# A turn item's generator when the relay ended the turn before any generation claimed it (its Invoke of the proxy
# failed, or a cancel came first): the proxy invocation that arrives after it generates nothing.
RELAY_CLAIM = "relay"


class Trigger(StrEnum):
    """Who makes a transition."""

    RELAY = "relay"
    PROXY = "proxy"
    CONSUMER = "consumer"
    REAPER = "reaper"


ANY_STATUS = frozenset(TurnStatus)
ENDED = frozenset(status for status in TurnStatus if status.finished)
IN_PROGRESS = frozenset({TurnStatus.IN_PROGRESS})
NO_TURN: frozenset[TurnStatus] = frozenset()  # a start's "from": the turn item does not exist yet


@dataclass(frozen=True)
class Transition:
    """One way a turn's status changes: from ``sources`` (with ``unclaimed``: only while no generation has claimed
    the turn; ``unexpired``: only while it has not expired, as a caller cannot see an expired turn) to one of
    ``dests``, made by ``by``."""

    name: str  # the Turns method that makes it
    sources: frozenset[TurnStatus]
    dests: frozenset[TurnStatus]
    by: tuple[Trigger, ...]
    unclaimed: bool = False
    unexpired: bool = False
    frees_session: bool = False  # an ending after which the session may take its next turn


# A new chat: the session and its turn 1, in one transaction.
START_FIRST = Transition("start_first", NO_TURN, IN_PROGRESS, (Trigger.RELAY,))
# The session's next turn, while none generates (or the one that does is stale: END_STALE).
START_NEXT = Transition("start_next", NO_TURN, IN_PROGRESS, (Trigger.RELAY,))
# One generation per turn: the first delivery of the proxy's event writes its request id.
CLAIM = Transition("claim", IN_PROGRESS, IN_PROGRESS, (Trigger.PROXY,), unclaimed=True)
# The cancel flag, which the generation reads between flushes.
REQUEST_CANCEL = Transition("request_cancel", IN_PROGRESS, IN_PROGRESS, (Trigger.RELAY,), unexpired=True)
# A cancel before any generation claimed the turn, claimed for the relay in the same write.
CANCEL_UNCLAIMED = Transition(
    "cancel_unclaimed",
    IN_PROGRESS,
    frozenset({TurnStatus.CANCELLED}),
    (Trigger.RELAY,),
    unclaimed=True,
    unexpired=True,
    frees_session=True,
)
# proxy_unavailable (the relay's Invoke failed) or the follower's start timeout, claimed for the relay.
END_UNCLAIMED = Transition(
    "end_unclaimed",
    IN_PROGRESS,
    frozenset({TurnStatus.ERROR}),
    (Trigger.RELAY,),
    unclaimed=True,
    unexpired=True,
    frees_session=True,
)
# The turn's terminal record (the proxy's own when Kinesis refused the reply): the token log overrides a presumption.
END_FROM_STREAM = Transition(
    "end_from_stream", ANY_STATUS, ENDED, (Trigger.CONSUMER, Trigger.PROXY), frees_session=True
)
# generation_failed: the proxy invocation died without a terminal record.
END_PRESUMED_LOST = Transition(
    "end_presumed_lost", IN_PROGRESS, frozenset({TurnStatus.ERROR}), (Trigger.REAPER,), frees_session=True
)
# timeout: the turn START_NEXT took over as stale (the session has moved on: it is not freed).
END_STALE = Transition("end_stale", IN_PROGRESS, frozenset({TurnStatus.ERROR}), (Trigger.RELAY,))

TRANSITIONS: tuple[Transition, ...] = (
    START_FIRST,
    START_NEXT,
    CLAIM,
    REQUEST_CANCEL,
    CANCEL_UNCLAIMED,
    END_UNCLAIMED,
    END_FROM_STREAM,
    END_PRESUMED_LOST,
    END_STALE,
)

_UNEXPIRED = "(attribute_not_exists(expires_at) OR expires_at > :alive)"  # :alive: now, in epoch seconds
_OUTCOME_FIELDS = ("stop_reason", "usage", "error")  # what a terminal record carries, one outcome's or the other's
_TEXT_FIELDS = ("assistant", "reasoning", "tool_calls")
TEXTS_IN_RECORDS = "texts_in_records"  # a finished turn whose texts are read from its records
START_ATTEMPTS = 4  # a start made again after it learnt its owner's overrides, dropped stale turns, or conflicted
STALE_ERROR = ErrorInfo("timeout", "the generation stopped without finishing", True)


def condition(transition: Transition, now_ms: int) -> tuple[str, dict[str, str], dict[str, Any]]:
    """The condition of ``transition``'s write on the turn item: its expression, the attribute names and the values
    it uses (``now_ms``: the time an ``unexpired`` transition compares ``expires_at`` with)."""
    if not transition.sources:
        return "attribute_not_exists(pk)", {}, {}
    clauses = ["attribute_exists(pk)"]
    names: dict[str, str] = {}
    values: dict[str, Any] = {}
    if transition.sources != ANY_STATUS:
        names["#status"] = "status"
        allowed = sorted(transition.sources)
        values.update({f":was_{status.value}": status for status in allowed})
        if len(allowed) == 1:
            clauses.append(f"#status = :was_{allowed[0].value}")
        else:
            clauses.append(f"#status IN ({', '.join(f':was_{status.value}' for status in allowed)})")
    if transition.unclaimed:
        names["#generator"] = "generator"
        clauses.append("attribute_not_exists(#generator)")
    if transition.unexpired:
        values[":alive"] = now_ms // 1000
        clauses.append(_UNEXPIRED)
    return " AND ".join(clauses), names, values


@dataclass(frozen=True)
class Turn:
    session_id: str
    turn: int
    user: str
    status: TurnStatus
    cancel_requested: bool = False
    stop_reason: StopReason | None = None
    usage: Mapping[str, int] | None = None
    error: Mapping[str, Any] | None = None
    assistant: str | None = None  # the reply only
    reasoning: str | None = None  # the reasoning the model showed, apart from the reply
    tool_calls: tuple[ToolCall, ...] = ()  # the tools the model called, apart from the reply
    max_tokens: int | None = None
    temperature: float | None = None
    created_at: int = 0
    options: TurnOptions = field(default_factory=TurnOptions)
    generator: str | None = None  # who claimed its generation: the proxy invocation's request id (or "relay")

    @property
    def finished(self) -> bool:
        return self.status.finished


@dataclass
class Turns:
    """The turns of ChatTable: read, and changed by the transitions of :data:`TRANSITIONS` only."""

    store: Store
    sessions: Sessions
    records: TokenRecords
    budgets: Budgets

    # ------------------------------------------------------------------------------ reads

    def get(self, session_id: str, turn: int, *, texts: bool = True) -> Turn | None:
        """The turn, or None. ``texts=False``: without the reply and reasoning of a turn whose texts did not fit in
        its item (a read for its status or outcome only, which then needs no Query of its records)."""
        item = self.store.get(turn_key(session_id, turn))
        if item is None or self.store.expired(item):
            return None
        return self._with_texts(session_id, item) if texts else _turn_from_item(session_id, item)

    def history(self, session_id: str) -> list[Turn]:
        """Every turn of the session that has not expired, oldest first (one Query, paginated)."""
        items = self.store.query(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
            ExpressionAttributeValues=ser({":pk": pk(session_id), ":prefix": "T#"}),
        )
        return [self._with_texts(session_id, item) for item in items if not self.store.expired(item)]

    def cancel_requested(self, session_id: str, turn: int) -> bool:
        """Whether the turn's cancel flag is set (:meth:`request_cancel`)."""
        item = self.store.get(turn_key(session_id, turn), ProjectionExpression="cancel_requested")
        return bool(item and item.get("cancel_requested"))

    # ------------------------------------------------------------------------- starts

    def start_first(
        self,
        owner: str,
        message: str,
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        session_id: str | None = None,
        options: TurnOptions | None = None,
        admission: Admission | None = None,
    ) -> str:
        """A new session with its turn 1 in progress, in one transaction (a new chat's fast path); its id.

        ``session_id``: this id rather than a new random one (it must not exist yet: else the transaction is
        cancelled, a ``ClientError`` ``TransactionCanceledException``). ``admission``: the owner's limits and the
        request's idempotency key, checked in the same transaction (:meth:`_start`).
        """
        now = self.store.now_ms()
        session_id, session_item = self.sessions.new(owner, now, active_turn=1, session_id=session_id)
        session = {
            "Put": {
                "TableName": self.store.table_name,
                "Item": ser(session_item),
                "ConditionExpression": "attribute_not_exists(pk)",
            }
        }
        item = self._item(session_id, 1, message, now, max_tokens, temperature, options)
        self._start(START_FIRST, session, item, admission)
        return session_id

    def start_next(
        self,
        session_id: str,
        owner: str,
        message: str,
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        stale_after_ms: int | None = None,
        max_turns: int | None = None,
        options: TurnOptions | None = None,
        admission: Admission | None = None,
    ) -> int:
        """Allocate the session's next turn; one generating turn per session (``admission``: as :meth:`start_first`).

        Raises :class:`SessionNotFound` (unknown or foreign session), :class:`TurnInProgress` (a turn is generating,
        or another request allocated one concurrently) or :class:`TurnLimitReached` (the session has ``max_turns``).
        An active turn older than ``stale_after_ms`` (its generator died without a terminal record) is taken over,
        and ended (:meth:`end_stale`).
        """
        session = self.sessions.owned(session_id, owner)
        now = self.store.now_ms()
        stale = (
            session.active_turn is not None
            and stale_after_ms is not None
            and session.active_since is not None
            and now - session.active_since > stale_after_ms
        )
        if session.active_turn is not None and not stale:
            raise TurnInProgress(f"turn {session.active_turn} of session {session_id} is still generating")
        if max_turns is not None and session.turn_count >= max_turns:
            raise TurnLimitReached(f"session {session_id} reached its limit of {max_turns} turns")
        turn = session.turn_count + 1
        held = "active_turn = :stale" if stale else "attribute_not_exists(active_turn)"
        values: dict[str, Any] = {
            ":prev": session.turn_count,
            ":n": turn,
            ":now": now,
            ":exp": self.store.expires_at(now),
        }
        if stale:
            values[":stale"] = session.active_turn
        allocation = {
            "Update": {
                "TableName": self.store.table_name,
                "Key": ser(session_key(session_id)),
                # A session in use lives on: it expires TtlDays after its latest turn, each turn's text TtlDays
                # after it was written.
                "UpdateExpression": "SET turn_count = :n, active_turn = :n, active_since = :now, expires_at = :exp",
                "ConditionExpression": f"turn_count = :prev AND {held}",
                "ExpressionAttributeValues": ser(values),
            }
        }
        item = self._item(session_id, turn, message, now, max_tokens, temperature, options)
        try:
            self._start(START_NEXT, allocation, item, admission)
        except ClientError as err:
            if err.response["Error"]["Code"] == "TransactionCanceledException":
                raise TurnInProgress(f"another turn of session {session_id} was started concurrently") from err
            raise
        if stale and session.active_turn is not None:
            self.end_stale(session_id, session.active_turn, now)
        return turn

    # --------------------------------------------------------------- while it generates

    def claim(self, session_id: str, turn: int, generator: str) -> Turn:
        """Claim a turn in progress for one generation and return its item, in one conditional write (which reads
        the latest item, as the strongly consistent read it replaces).

        Lambda may deliver an asynchronous event more than once, so the proxy claims its turn before it generates:
        the first delivery writes ``generator`` (its request id); a later one gets :class:`TurnClaimed`, or
        :class:`TurnFinished` when the turn already ended (the relay ended it when it could not invoke the proxy,
        or the reaper did), and generates nothing. :class:`TurnNotFound` when there is no such turn.
        """
        try:
            raw = self._write(
                CLAIM,
                session_id,
                turn,
                {"generator": generator},
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )["Attributes"]
        except ClientError as err:
            if not condition_failed(err):
                raise
            old = err.response.get("Item")  # the modeled error's member (ReturnValuesOnConditionCheckFailure)
            if not isinstance(old, dict) or not old:
                raise TurnNotFound(f"session {session_id} has no turn {turn}") from err
            item = deser(old)
            claimed_by = str(item.get("generator", ""))
            if item.get("status", TurnStatus.IN_PROGRESS) != TurnStatus.IN_PROGRESS:
                raise TurnFinished(f"turn {turn} of session {session_id} already ended", claimed_by or None) from err
            raise TurnClaimed(f"turn {turn} of session {session_id} is claimed by {claimed_by}", claimed_by) from err
        return _turn_from_item(session_id, deser(raw))

    def request_cancel(self, session_id: str, turn: int) -> None:
        """Set the turn's cancel flag, which its generation reads between flushes; :class:`TurnFinished` if it ended,
        :class:`TurnNotFound` if none (or it expired)."""
        try:
            self._write(REQUEST_CANCEL, session_id, turn, {"cancel_requested": True, "updated_at": self.store.now_ms()})
        except ClientError as err:
            if not condition_failed(err):
                raise
            if self.get(session_id, turn, texts=False) is None:
                raise TurnNotFound(f"session {session_id} has no turn {turn}") from err
            raise TurnFinished(f"turn {turn} of session {session_id} already ended") from err

    # ----------------------------------------------------------------------- endings

    def end_from_stream(
        self, record: TokenRecord, assistant: str, *, reasoning: str = "", tool_calls: Sequence[ToolCall] = ()
    ) -> bool:
        """End the turn with its terminal record, as the token log has it, then free the session for the next turn.

        ``assistant`` is the reply, ``reasoning`` the reasoning text and ``tool_calls`` the calls the model made (each
        kept apart; not stored when empty). From any
        status, idempotent: a redelivered terminal record rewrites the same values, and a terminal record overrides
        the outcome a presumption wrote (the reaper's, a stale takeover's), since the token log is what happened.
        Whether the turn item was written (not when there is none: expired, or a record replayed from the stream
        after its TTL; the session is freed all the same).
        """
        fields = _outcome(record, self.store.now_ms(), (assistant, reasoning, tuple(tool_calls)))
        return self._end(END_FROM_STREAM, record.session_id, record.turn, fields, Charge.from_record(record))

    def end_presumed_lost(self, failure: TokenRecord, *, claimed: bool = True) -> bool:
        """End a turn whose generation is presumed lost without its terminal record (the reaper's
        ``generation_failed``), only if it is still in progress, in the same conditional write: a turn its terminal
        record ended meanwhile keeps that outcome. Its texts are not stored in its item but read from its records, so
        records that reach the table after this write (a lagging consumer's, a redrive's) are part of its reply.
        Whether this ended it. ``claimed``: whether a generation had claimed it (its reservation is charged: the model
        may have billed), or none had (nothing is: the model was not called)."""
        fields = _outcome(failure, self.store.now_ms(), None)
        charge = Charge.reservation() if claimed else Charge.nothing()
        return self._end(END_PRESUMED_LOST, failure.session_id, failure.turn, fields, charge)

    def cancel_unclaimed(self, stop: TokenRecord) -> bool:
        """End a turn no generation has claimed as ``cancelled`` (``stop``: its ``cancelled`` stop record), in the
        write that claims it for the relay (:data:`RELAY_CLAIM`), so a proxy invocation that arrives after it
        generates nothing. Whether this ended it: not when a generation had claimed it, or it had ended, first."""
        return self._end_unclaimed(CANCEL_UNCLAIMED, stop)

    def end_unclaimed(self, failure: TokenRecord) -> bool:
        """End a turn no generation has claimed in ``error`` (``failure``: ``proxy_unavailable``, when the relay's
        Invoke failed; ``timeout``, when no generation began it in time), as :meth:`cancel_unclaimed` does."""
        return self._end_unclaimed(END_UNCLAIMED, failure)

    def end_stale(self, session_id: str, turn: int, now: int) -> None:
        """End a stale turn the session has moved on from (:meth:`start_next`), if it is still in progress: ``error``
        ``timeout`` (retryable), its texts read from its records (the records it has are its text), so its item does
        not say in progress for good (history, a ``/v1`` response polled until it ends). A terminal record that comes
        later still overrides it, as it does the reaper's. After the new turn's transaction, not in it: a turn item
        that is gone or ended must never stop a session from going on, so a failure is logged, not raised."""
        fields = {"status": TurnStatus.ERROR, "error": STALE_ERROR.to_dict(), TEXTS_IN_RECORDS: True, "updated_at": now}
        try:
            self._end(END_STALE, session_id, turn, fields, Charge.reservation())
        except (ClientError, BotoCoreError, Throttled) as err:
            logger.warning(
                "could not end the stale turn taken over",
                extra={"session_id": session_id, "turn": turn, "error": type(err).__name__, "detail": str(err)},
            )

    def free_session(self, session_id: str, turn: int) -> None:
        """Let the session take its next turn, if ``turn`` is still its active one (idempotent)."""
        try:
            call(
                self.store.client.update_item,
                TableName=self.store.table_name,
                Key=ser(session_key(session_id)),
                UpdateExpression="REMOVE active_turn, active_since",
                ConditionExpression="active_turn = :turn",
                ExpressionAttributeValues=ser({":turn": turn}),
            )
        except ClientError as err:
            # Already freed (a redelivery), or a newer turn took over a stale one: nothing to do.
            if not condition_failed(err):
                raise

    # ---------------------------------------------------------------------- internals

    def _start(
        self,
        transition: Transition,
        session_write: dict[str, Any],
        item: Mapping[str, Any],
        admission: Admission | None = None,
    ) -> None:
        """Every start of a turn: the session's write (its creation, or its next turn's allocation) and the new turn
        item, in one transaction, with what ``admission`` adds to it (:meth:`~chatstream.table.budgets.Budgets.plan`:
        the owner's counters, the turn's reservation, the request's idempotency key). A refused start writes
        nothing: :class:`~chatstream.table.budgets.LimitExceeded`, :class:`~chatstream.table.idempotency.KeyInUse`,
        or the transaction's ``ClientError`` when the session's or the turn's own condition failed (the caller says
        what that means). A start whose transaction learnt the owner's overrides, dropped stale turns or conflicted
        with another is made again, a few times at most (then :class:`~chatstream.errors.Throttled`)."""
        expression, _names, _values = condition(transition, self.store.now_ms())
        if item["status"] not in transition.dests:
            raise ValueError(f"{transition.name} makes a turn {sorted(transition.dests)}, not {item['status']}")
        writes = [
            session_write,
            {"Put": {"TableName": self.store.table_name, "Item": ser(item), "ConditionExpression": expression}},
        ]
        if admission is None:
            call(self.store.client.transact_write_items, TransactItems=writes)
            return
        session_id, turn, now = str(item["pk"])[2:], int(item["turn"]), int(item["created_at"])
        cleaned = False
        for attempt in range(START_ATTEMPTS):
            plan = self.budgets.plan(admission, session_id, turn, now, cleaned=cleaned)
            try:
                call(self.store.client.transact_write_items, TransactItems=[*writes, *plan.items])
                return
            except ClientError as err:
                if err.response["Error"]["Code"] != "TransactionCanceledException":
                    raise
                reasons = err.response.get("CancellationReasons") or []
                own_failed = any(reason.get("Code") == "ConditionalCheckFailed" for reason in reasons[: len(writes)])
                verdict = self.budgets.judge(plan, admission, reasons[len(writes) :], own_failed)
                if verdict is Verdict.NOT_OURS:
                    raise
                cleaned = cleaned or verdict is Verdict.CLEANED
                if verdict is Verdict.CONFLICT:
                    self.store.sleep(self.store.backoff.delay(attempt))
        raise Throttled(f"the start of turn {turn} of session {session_id} kept conflicting with other writes")

    def _end_unclaimed(self, transition: Transition, terminal: TokenRecord) -> bool:
        fields = _outcome(terminal, self.store.now_ms(), ("", "", ()))
        fields["generator"] = RELAY_CLAIM
        return self._end(transition, terminal.session_id, terminal.turn, fields, Charge.nothing())

    def _end(self, transition: Transition, session_id: str, turn: int, fields: dict[str, Any], charge: Charge) -> bool:
        """Every ending of a turn: its outcome (``fields``) written on ``transition``'s condition, then, if the
        transition frees it, the session freed, and the turn's reservation of its owner's budget settled with
        ``charge`` (:meth:`~chatstream.table.budgets.Budgets.settle`). Whether the turn item was written: not when the
        condition failed (no such turn, or not in a state the transition starts from). An ending that any status
        allows fails only when the turn item is gone, and then frees the session and settles all the same (the
        generation is over); one with narrower "from" states fails when the turn ended otherwise, and what ended it
        freed the session and settled.

        The stream's ending raises what its settlement raises, so its record is delivered again and the settlement
        made (idempotent). A presumed ending's settlement that fails is logged: the reservation stays charged for the
        day, and the turn's place among the owner's turns generating is dropped once it is stale.
        """
        # An outcome written over another (a terminal record after the reaper's error) leaves none of the other's:
        # a complete turn carries no error, an errored one no stop_reason.
        cleared = [name for name in _OUTCOME_FIELDS if name not in fields]
        try:
            self._write_outcome(transition, session_id, turn, fields, cleared)
            written = True
        except ClientError as err:
            if not condition_failed(err):
                raise
            written = False
        ended = written or transition.sources == ANY_STATUS
        if transition.frees_session and ended:
            self.free_session(session_id, turn)
        if ended:
            try:
                self.budgets.settle(session_id, turn, charge)
            except (ClientError, BotoCoreError, Throttled) as err:
                if transition is END_FROM_STREAM:
                    raise
                logger.warning(
                    "could not settle the turn's reservation; it stays charged",
                    extra={"session_id": session_id, "turn": turn, "error": type(err).__name__, "detail": str(err)},
                )
        return written

    def _write_outcome(
        self, transition: Transition, session_id: str, turn: int, fields: dict[str, Any], cleared: list[str]
    ) -> None:
        """Write a turn's outcome: with its texts, or, when they make the item larger than DynamoDB allows, without
        them, read from the turn's records instead (the consumer stores a turn's text records before it ends the
        turn)."""
        if fields.get(TEXTS_IN_RECORDS):
            self._write(transition, session_id, turn, fields, [*cleared, *_TEXT_FIELDS])
            return
        try:
            self._write(transition, session_id, turn, fields, [*cleared, TEXTS_IN_RECORDS])
        except ClientError as err:
            if not too_large(err):
                raise
            logger.info(
                "turn's texts too large for its item; read from its records",
                extra={"session_id": session_id, "turn": turn},
            )
            fields = {name: value for name, value in fields.items() if name not in _TEXT_FIELDS}
            fields[TEXTS_IN_RECORDS] = True
            self._write(transition, session_id, turn, fields, [*cleared, *_TEXT_FIELDS])

    def _write(
        self,
        transition: Transition,
        session_id: str,
        turn: int,
        fields: Mapping[str, Any],
        removed: Sequence[str] = (),
        **extra: Any,
    ) -> Any:
        """The one write of an existing turn item: set ``fields``, remove ``removed`` (those of them not set), on
        ``transition``'s condition. The only place a turn's ``status`` changes."""
        if fields.get("status", TurnStatus.IN_PROGRESS) not in transition.dests:
            raise ValueError(f"{transition.name} makes a turn {sorted(transition.dests)}, not {fields.get('status')}")
        expression, names, values = condition(transition, self.store.now_ms())
        removed = [name for name in removed if name not in fields]
        return call(
            self.store.client.update_item,
            TableName=self.store.table_name,
            Key=ser(turn_key(session_id, turn)),
            UpdateExpression="SET "
            + ", ".join(f"#{name} = :{name}" for name in fields)
            + (" REMOVE " + ", ".join(f"#{name}" for name in removed) if removed else ""),
            ConditionExpression=expression,
            ExpressionAttributeNames={**names, **{f"#{name}": name for name in (*fields, *removed)}},
            ExpressionAttributeValues=ser({**values, **{f":{name}": value for name, value in fields.items()}}),
            **extra,
        )

    def _item(
        self,
        session_id: str,
        turn: int,
        message: str,
        now: int,
        max_tokens: int | None,
        temperature: float | None,
        options: TurnOptions | None,
    ) -> dict[str, Any]:
        """A new turn's item: the user's message and the turn's options, in progress."""
        item: dict[str, Any] = {
            **turn_key(session_id, turn),
            "turn": turn,
            "user": message,
            "status": TurnStatus.IN_PROGRESS,
            "cancel_requested": False,
            "created_at": now,
            "updated_at": now,
            "expires_at": self.store.expires_at(now),
        }
        if max_tokens is not None:
            item["max_tokens"] = max_tokens
        if temperature is not None:
            item["temperature"] = number(temperature)
        if options is not None:
            item.update(
                {key: number(value) if isinstance(value, float) else value for key, value in options.to_item().items()}
            )
        return item

    def _with_texts(self, session_id: str, item: Mapping[str, Any]) -> Turn:
        """The turn an item holds, with its texts read from its records when they did not fit in it."""
        turn = _turn_from_item(session_id, item)
        if not item.get(TEXTS_IN_RECORDS):
            return turn
        records = self.records.query(session_id, turn.turn)
        return replace(
            turn,
            assistant=assistant_text(records),
            reasoning=reasoning_text(records) or None,
            tool_calls=tuple(assembled_tool_calls(records)),
        )


def _outcome(record: TokenRecord, now_ms: int, texts: tuple[str, str, tuple[ToolCall, ...]] | None) -> dict[str, Any]:
    """The turn item's attributes that a terminal record sets: its outcome, as the record carries it, and ``texts``
    (the reply, the reasoning and the tool calls; None: read from the turn's records)."""
    if not record.is_terminal:
        raise ValueError(f"a turn ends with its stop or error record, not a {record.type.value} record")
    fields: dict[str, Any] = {"status": record.turn_status, "updated_at": now_ms}
    if texts is None:
        fields[TEXTS_IN_RECORDS] = True
    else:
        assistant, reasoning, calls = texts
        fields["assistant"] = assistant
        if reasoning:
            fields["reasoning"] = reasoning
        if calls:
            fields["tool_calls"] = [call.to_item() for call in calls]
    carried = record.to_dict()
    fields.update({name: carried[name] for name in _OUTCOME_FIELDS if name in carried})
    return fields


def _turn_from_item(session_id: str, item: Mapping[str, Any]) -> Turn:
    usage = item.get("usage")
    temperature = item.get("temperature")
    max_tokens = item.get("max_tokens")
    stop_reason = item.get("stop_reason")
    return Turn(
        session_id=session_id,
        turn=int(item["turn"]),
        user=str(item.get("user", "")),
        status=TurnStatus(item.get("status", TurnStatus.IN_PROGRESS)),
        cancel_requested=bool(item.get("cancel_requested", False)),
        stop_reason=None if stop_reason is None else StopReason(stop_reason),
        usage=None if usage is None else {key: int(value) for key, value in usage.items()},
        error=item.get("error"),
        assistant=item.get("assistant"),
        reasoning=item.get("reasoning"),
        tool_calls=tuple(ToolCall.from_item(call) for call in item.get("tool_calls") or ()),
        max_tokens=None if max_tokens is None else int(max_tokens),
        temperature=None if temperature is None else float(temperature),
        created_at=int(item.get("created_at", 0)),
        options=TurnOptions.from_item(dict(item)),
        generator=None if item.get("generator") is None else str(item["generator"]),
    )
