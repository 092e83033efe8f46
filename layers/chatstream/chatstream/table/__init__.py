"""ChatTable access layer: the only module that knows the table's keys.

Single table, partition key ``pk`` and sort key ``sk`` (both strings), TTL on ``expires_at``:

==========================  ==============================  =====================================
item                        key (pk / sk)                   attributes
==========================  ==============================  =====================================
session                     ``S#<session_id>`` / ``SESSION``  owner, turn_count, active_turn (while a
                                                            turn generates), active_since, created_at
turn                        ``S#<id>`` / ``T#<turn:06d>``     user, status, cancel_requested, stop_reason,
                                                            usage, error, assistant, reasoning (when
                                                            the model showed any), max_tokens,
                                                            temperature, system, top_p, stop, history
                                                            (``TurnOptions``), created_at, updated_at,
                                                            generator (who claimed the generation),
                                                            texts_in_records (a reply too large for the
                                                            item: its texts are read from its records)
token record                ``S#<id>`` / ``R#<turn:06d>#<seq:08d>``  record (the record's JSON), ts
==========================  ==============================  =====================================

Every read a function makes is a key lookup or a key-range Query in one partition: history is
``begins_with(sk, "T#")``; following a turn is ``sk BETWEEN R#<turn>#<after+1> AND R#<turn>#<max>``.
Token items are written idempotently (a redelivered record rewrites its own item). The session's
``active_turn`` enforces one generating turn per session with conditional writes.

Expiry is exact: DynamoDB's TTL deletes an expired item in the background, typically within a few days, and until
then reads return it (and a session item kept being written would live on past it). So a session or turn item whose
``expires_at`` has passed reads as gone, as AWS advises ("Working with expired items"): an expired session is not
found and gets no new turn, and a live session's history leaves out its turns that expired, from the moment they
did; a write that acts on a turn for a caller (a cancel, the relay's claim) refuses an expired one as reads do.
Token records are read only through their turn, which expires first: its ``expires_at`` counts from its creation, a
record's from the record's ``ts`` (when the proxy made it, after the turn began, whoever writes it), both with the
deployment's one ``TtlDays``. Lowering ``TtlDays`` while turns are live (or a redrive with a smaller one than the
stack's) can make a turn's records expire first: its replay and a reply read from its records then lack them.

A finished turn's item keeps its reply and reasoning, so history is one Query. DynamoDB refuses an item over
400 KB, and a reply of a few hundred thousand characters (with the turn's message and the history a client sent)
is more: such a turn's outcome is written without its texts, marked ``texts_in_records``, and its reads assemble
them from its token records, which hold them anyway (:meth:`ChatTable.complete_turn`).
"""

from __future__ import annotations

import logging
import secrets
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from chatstream.backoff import Backoff
from chatstream.errors import (
    SessionNotFound,
    Throttled,
    TurnClaimed,
    TurnFinished,
    TurnInProgress,
    TurnLimitReached,
    TurnNotFound,
)
from chatstream.records import MAX_SEQ, TokenRecord, assistant_text, reasoning_text
from chatstream.status import StopReason, TurnStatus
from chatstream.table.dynamodb import call, deser, number, ser, too_large
from chatstream.turn_options import TurnOptions

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

    from mypy_boto3_dynamodb import DynamoDBClient

SESSION_SK = "SESSION"
# A turn item's generator when the relay ended the turn before any generation claimed it (its Invoke of the proxy
# failed, or a cancel came first): the proxy invocation that arrives after it generates nothing.
RELAY_CLAIM = "relay"
BATCH_WRITE_MAX = 25


def new_session_id() -> str:
    """128 random bits, URL-safe: session ids act as capabilities when the URL has no auth."""
    return secrets.token_hex(16)


def _pk(session_id: str) -> str:
    return f"S#{session_id}"


def _turn_sk(turn: int) -> str:
    return f"T#{turn:06d}"


def _record_sk(turn: int, seq: int) -> str:
    return f"R#{turn:06d}#{seq:08d}"


@dataclass(frozen=True)
class Session:
    session_id: str
    owner: str
    turn_count: int
    active_turn: int | None
    active_since: int | None


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
    max_tokens: int | None = None
    temperature: float | None = None
    created_at: int = 0
    options: TurnOptions = field(default_factory=TurnOptions)
    generator: str | None = None  # who claimed its generation: the proxy invocation's request id (or "relay")

    @property
    def finished(self) -> bool:
        return self.status.finished


@dataclass
class ChatTable:
    """Typed operations on ChatTable. ``client`` is a boto3 DynamoDB client."""

    client: DynamoDBClient
    table_name: str
    ttl_days: int = 30
    now_ms: Callable[[], int] = field(default=lambda: int(time.time() * 1000))
    sleep: Callable[[float], None] = time.sleep
    max_attempts: int = 6
    backoff: Backoff = field(default_factory=Backoff)

    # ----------------------------------------------------------------- sessions and turns

    def create_session(self, owner: str) -> str:
        session_id = new_session_id()
        item = self._session_item(session_id, owner, self.now_ms(), active_turn=None)
        call(
            self.client.put_item,
            TableName=self.table_name,
            Item=ser(item),
            ConditionExpression="attribute_not_exists(pk)",
        )
        return session_id

    def get_session(self, session_id: str) -> Session | None:
        raw = call(
            self.client.get_item,
            TableName=self.table_name,
            Key=ser({"pk": _pk(session_id), "sk": SESSION_SK}),
            ConsistentRead=True,
        ).get("Item")
        if raw is None:
            return None
        item = deser(raw)
        if self._expired(item):
            return None
        return Session(
            session_id=session_id,
            owner=str(item.get("owner", "")),
            turn_count=int(item.get("turn_count", 0)),
            active_turn=None if item.get("active_turn") is None else int(item["active_turn"]),
            active_since=None if item.get("active_since") is None else int(item["active_since"]),
        )

    def owned_session(self, session_id: str, owner: str) -> Session:
        """The session, if it exists and ``owner`` owns it; :class:`SessionNotFound` otherwise."""
        session = self.get_session(session_id)
        if session is None or session.owner != owner:
            raise SessionNotFound(session_id)
        return session

    def start_turn(
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
    ) -> int:
        """Allocate the session's next turn; one generating turn per session.

        Raises :class:`SessionNotFound` (unknown or foreign session), :class:`TurnInProgress` (a turn is generating,
        or another request allocated one concurrently) or :class:`TurnLimitReached` (the session has ``max_turns``).
        An active turn older than ``stale_after_ms`` (its generator died without a terminal record) is taken over.
        """
        session = self.owned_session(session_id, owner)
        now = self.now_ms()
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
        condition = "turn_count = :prev AND "
        condition += "active_turn = :stale" if stale else "attribute_not_exists(active_turn)"
        values: dict[str, Any] = {":prev": session.turn_count, ":n": turn, ":now": now, ":exp": self._expires_at(now)}
        if stale:
            values[":stale"] = session.active_turn
        turn_item = self._turn_item(session_id, turn, message, now, max_tokens, temperature, options)
        try:
            call(
                self.client.transact_write_items,
                TransactItems=[
                    {
                        "Update": {
                            "TableName": self.table_name,
                            "Key": ser({"pk": _pk(session_id), "sk": SESSION_SK}),
                            # A session in use lives on: it expires TtlDays after its latest turn, each turn's
                            # text TtlDays after it was written.
                            "UpdateExpression": (
                                "SET turn_count = :n, active_turn = :n, active_since = :now, expires_at = :exp"
                            ),
                            "ConditionExpression": condition,
                            "ExpressionAttributeValues": ser(values),
                        }
                    },
                    {
                        "Put": {
                            "TableName": self.table_name,
                            "Item": ser(turn_item),
                            "ConditionExpression": "attribute_not_exists(pk)",
                        }
                    },
                ],
            )
        except ClientError as err:
            if err.response["Error"]["Code"] == "TransactionCanceledException":
                raise TurnInProgress(f"another turn of session {session_id} was started concurrently") from err
            raise
        if stale and session.active_turn is not None:
            self._end_stale_turn(session_id, session.active_turn, now)
        return turn

    def _end_stale_turn(self, session_id: str, turn: int, now: int) -> None:
        """End a stale turn the session has moved on from, if it is still in progress: ``error`` ``timeout``
        (retryable), its texts read from its records (``texts_in_records``: the records it has are its text), so its
        item does not say in progress for good (history, a ``/v1`` response polled until it ends). A terminal record
        that comes later still overrides it, as it does the reaper's. After the new turn's transaction, not in it: a
        turn item that is gone or ended must never stop a session from going on."""
        error = {"code": "timeout", "message": "the generation stopped without finishing", "retryable": True}
        try:
            call(
                self.client.update_item,
                TableName=self.table_name,
                Key=ser({"pk": _pk(session_id), "sk": _turn_sk(turn)}),
                UpdateExpression="SET #status = :error, #error = :info, #texts = :true, updated_at = :now"
                " REMOVE assistant, reasoning, stop_reason, #usage",
                ConditionExpression="attribute_exists(pk) AND #status = :in_progress",
                ExpressionAttributeNames={
                    "#status": "status",
                    "#error": "error",
                    "#texts": _TEXTS_IN_RECORDS,
                    "#usage": "usage",  # a DynamoDB reserved word
                },
                ExpressionAttributeValues=ser(
                    {
                        ":error": TurnStatus.ERROR,
                        ":info": error,
                        ":true": True,
                        ":now": now,
                        ":in_progress": TurnStatus.IN_PROGRESS,
                    }
                ),
            )
        except (ClientError, BotoCoreError, Throttled) as err:  # ended meanwhile, or gone: nothing to end
            if not isinstance(err, ClientError) or err.response["Error"]["Code"] != "ConditionalCheckFailedException":
                logger.warning(
                    "could not end the stale turn taken over",
                    extra={"session_id": session_id, "turn": turn, "error": type(err).__name__, "detail": str(err)},
                )

    def start_session(
        self,
        owner: str,
        message: str,
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        session_id: str | None = None,
        options: TurnOptions | None = None,
    ) -> str:
        """A new session with its turn 1 in progress, in one transaction (a new chat's fast path).

        ``session_id``: this id rather than a new random one (it must not exist yet).
        """
        session_id = session_id or new_session_id()
        now = self.now_ms()
        session = self._session_item(session_id, owner, now, active_turn=1)
        turn_item = self._turn_item(session_id, 1, message, now, max_tokens, temperature, options)
        call(
            self.client.transact_write_items,
            TransactItems=[
                {
                    "Put": {
                        "TableName": self.table_name,
                        "Item": ser(item),
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                }
                for item in (session, turn_item)
            ],
        )
        return session_id

    def _session_item(self, session_id: str, owner: str, now: int, active_turn: int | None) -> dict[str, Any]:
        item: dict[str, Any] = {
            "pk": _pk(session_id),
            "sk": SESSION_SK,
            "owner": owner,
            "turn_count": active_turn or 0,
            "created_at": now,
            "expires_at": self._expires_at(now),
        }
        if active_turn is not None:
            item.update(active_turn=active_turn, active_since=now)
        return item

    def _turn_item(
        self,
        session_id: str,
        turn: int,
        message: str,
        now: int,
        max_tokens: int | None,
        temperature: float | None,
        options: TurnOptions | None = None,
    ) -> dict[str, Any]:
        item: dict[str, Any] = {
            "pk": _pk(session_id),
            "sk": _turn_sk(turn),
            "turn": turn,
            "user": message,
            "status": TurnStatus.IN_PROGRESS,
            "cancel_requested": False,
            "created_at": now,
            "updated_at": now,
            "expires_at": self._expires_at(now),
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

    def delete_session(self, session_id: str) -> int:
        """Delete every item of a session (the session, its turns, their token records); how many there were."""
        keys = list(
            self._query(
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues=ser({":pk": _pk(session_id)}),
                ProjectionExpression="pk, sk",
            )
        )
        for start in range(0, len(keys), BATCH_WRITE_MAX):
            batch = keys[start : start + BATCH_WRITE_MAX]
            self._batch_write_requests([{"DeleteRequest": {"Key": ser(key)}} for key in batch])
        return len(keys)

    def get_turn(self, session_id: str, turn: int, *, texts: bool = True) -> Turn | None:
        """The turn, or None. ``texts=False``: without the reply and reasoning of a turn whose texts did not fit in
        its item (a read for its status or outcome only, which then needs no Query of its records)."""
        raw = call(
            self.client.get_item,
            TableName=self.table_name,
            Key=ser({"pk": _pk(session_id), "sk": _turn_sk(turn)}),
            ConsistentRead=True,
        ).get("Item")
        if raw is None or self._expired(item := deser(raw)):
            return None
        return self._turn(session_id, item) if texts else _turn_from_item(session_id, item)

    def claim_turn(self, session_id: str, turn: int, generator: str) -> Turn:
        """Claim a turn in progress for one generation and return its item, in one conditional write (which reads
        the latest item, as the strongly consistent read it replaces).

        Lambda may deliver an asynchronous event more than once, so the proxy claims its turn before it generates:
        the first delivery writes ``generator`` (its request id); a later one gets :class:`TurnClaimed`, or
        :class:`TurnFinished` when the turn already ended (the relay ended it when it could not invoke the proxy,
        or the reaper did), and generates nothing. :class:`TurnNotFound` when there is no such turn.
        """
        try:
            raw = call(
                self.client.update_item,
                TableName=self.table_name,
                Key=ser({"pk": _pk(session_id), "sk": _turn_sk(turn)}),
                UpdateExpression="SET #generator = :generator",
                ConditionExpression=_CLAIMABLE,
                ExpressionAttributeNames={"#status": "status", "#generator": "generator"},
                ExpressionAttributeValues=ser({":generator": generator, ":in_progress": TurnStatus.IN_PROGRESS}),
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )["Attributes"]
        except ClientError as err:
            if err.response["Error"]["Code"] != "ConditionalCheckFailedException":
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

    def list_turns(self, session_id: str) -> list[Turn]:
        """Every turn of the session that has not expired, oldest first (one Query, paginated)."""
        items = self._query(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
            ExpressionAttributeValues=ser({":pk": _pk(session_id), ":prefix": "T#"}),
        )
        return [self._turn(session_id, item) for item in items if not self._expired(item)]

    def request_cancel(self, session_id: str, turn: int) -> None:
        """Set the turn's cancel flag; :class:`TurnFinished` if it ended, :class:`TurnNotFound` if none (or it
        expired)."""
        now = self.now_ms()
        try:
            call(
                self.client.update_item,
                TableName=self.table_name,
                Key=ser({"pk": _pk(session_id), "sk": _turn_sk(turn)}),
                UpdateExpression="SET cancel_requested = :yes, updated_at = :now",
                ConditionExpression=f"attribute_exists(pk) AND #status = :in_progress AND {_UNEXPIRED}",
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues=ser(
                    {":yes": True, ":now": now, ":in_progress": TurnStatus.IN_PROGRESS, ":alive": now // 1000}
                ),
            )
        except ClientError as err:
            if err.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            if self.get_turn(session_id, turn, texts=False) is None:
                raise TurnNotFound(f"session {session_id} has no turn {turn}") from err
            raise TurnFinished(f"turn {turn} of session {session_id} already ended") from err

    def cancel_requested(self, session_id: str, turn: int) -> bool:
        raw = call(
            self.client.get_item,
            TableName=self.table_name,
            Key=ser({"pk": _pk(session_id), "sk": _turn_sk(turn)}),
            ConsistentRead=True,
            ProjectionExpression="cancel_requested",
        ).get("Item")
        return bool(raw and deser(raw).get("cancel_requested"))

    def complete_turn(
        self,
        record: TokenRecord,
        assistant: str,
        *,
        reasoning: str = "",
        if_in_progress: bool = False,
        claim: str | None = None,
        texts_in_records: bool = False,
    ) -> bool:
        """Record a turn's outcome from its terminal record, then free the session for the next turn.

        ``assistant`` is the reply, ``reasoning`` the reasoning text (kept apart; not stored when empty).
        Idempotent: a redelivered terminal record rewrites the same values. A terminal record from the stream
        overrides the outcome a presumption wrote (the reaper's), since the token log is what happened.

        ``if_in_progress`` (the reaper's, which presumes a generation lost without its terminal record): only a
        turn still in progress is ended, in the same conditional write, so a turn its terminal record ended
        meanwhile keeps that outcome. ``claim`` (the relay's, ending a turn whose proxy it could not invoke): only a
        turn in progress that no generation has claimed (:meth:`claim_turn`) is ended, and the claim is written with
        it, so a proxy invocation that arrives after all generates nothing. ``texts_in_records`` (the reaper's): the
        turn's texts are not stored in its item but read from its records, so records that reach the table after this
        write (a lagging consumer's, a redrive's) are part of its reply. Returns whether the turn item was written.
        """
        if not record.is_terminal:
            raise ValueError("complete_turn takes the turn's stop or error record")
        fields = _outcome(record, assistant, reasoning, self.now_ms())
        if texts_in_records:
            for name in _TEXT_FIELDS:
                fields.pop(name, None)
            fields[_TEXTS_IN_RECORDS] = True
        # An outcome written over another (a terminal record after the reaper's error) leaves none of the other's:
        # a complete turn carries no error, an errored one no stop_reason.
        cleared = [name for name in _OUTCOME_FIELDS if name not in fields]
        if claim is not None:
            fields["generator"] = claim
        values = {f":{name}": value for name, value in fields.items()}
        condition = "attribute_exists(pk)"
        if claim is not None:
            condition = f"{_CLAIMABLE} AND {_UNEXPIRED}"  # the relay acts for a caller, who cannot see an expired turn
            values[":in_progress"] = TurnStatus.IN_PROGRESS
            values[":alive"] = self.now_ms() // 1000
        elif if_in_progress:
            condition += " AND #status = :in_progress"
            values[":in_progress"] = TurnStatus.IN_PROGRESS
        try:
            self._write_outcome(record, fields, cleared, condition, values)
            written = True
        except ClientError as err:
            # No such turn (expired, or a record replayed from the stream after its TTL): nothing to complete.
            # With if_in_progress, also a turn that ended meanwhile: its outcome stands, its session was freed.
            if err.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            if if_in_progress or claim is not None:
                return False
            written = False
        self.free_session(record.session_id, record.turn)
        return written

    def free_session(self, session_id: str, turn: int) -> None:
        """Let the session take its next turn, if ``turn`` is still its active one (idempotent)."""
        try:
            call(
                self.client.update_item,
                TableName=self.table_name,
                Key=ser({"pk": _pk(session_id), "sk": SESSION_SK}),
                UpdateExpression="REMOVE active_turn, active_since",
                ConditionExpression="active_turn = :turn",
                ExpressionAttributeValues=ser({":turn": turn}),
            )
        except ClientError as err:
            # Already freed (a redelivery), or a newer turn took over a stale one: nothing to do.
            if err.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise

    # ---------------------------------------------------------------------- token records

    def put_records(self, records: Sequence[TokenRecord], *, attempts: int | None = None) -> None:
        """Write token items idempotently (BatchWriteItem, unprocessed items retried with backoff).

        Raises :class:`Throttled` when items are still unprocessed after ``attempts`` (``max_attempts``).
        """
        unique: dict[tuple[str, int, int], TokenRecord] = {record.key: record for record in records}
        items = [self._record_item(record) for record in unique.values()]
        for start in range(0, len(items), BATCH_WRITE_MAX):
            self._batch_write(items[start : start + BATCH_WRITE_MAX], attempts or self.max_attempts)

    def query_records(
        self, session_id: str, turn: int, after_seq: int = -1, limit: int | None = None
    ) -> list[TokenRecord]:
        """The turn's token records with ``seq > after_seq``, in seq order (strongly consistent)."""
        if after_seq >= MAX_SEQ:
            return []
        params: dict[str, Any] = {
            "KeyConditionExpression": "pk = :pk AND sk BETWEEN :lo AND :hi",
            "ExpressionAttributeValues": ser(
                {
                    ":pk": _pk(session_id),
                    ":lo": _record_sk(turn, max(after_seq + 1, 0)),
                    ":hi": _record_sk(turn, MAX_SEQ),
                }
            ),
        }
        if limit is not None:
            params["Limit"] = limit
        items = self._query(single_page=limit is not None, **params)
        return [TokenRecord.decode(str(item["record"])) for item in items]

    def assemble_texts(self, session_id: str, turn: int) -> tuple[str, str]:
        """The reply and the reasoning of a turn so far, from its stored records (one Query)."""
        records = self.query_records(session_id, turn)
        return assistant_text(records), reasoning_text(records)

    # -------------------------------------------------------------------------- internals

    def _write_outcome(
        self, record: TokenRecord, fields: dict[str, Any], cleared: list[str], condition: str, values: dict[str, Any]
    ) -> None:
        """Write a turn's outcome (:meth:`complete_turn`): with its texts, or, when they make the item larger than
        DynamoDB allows, without them, read from the turn's records instead (the consumer stores a turn's text
        records before it completes the turn)."""
        if fields.get(_TEXTS_IN_RECORDS):
            self._update_turn(record, fields, [*cleared, *_TEXT_FIELDS], condition, values)
            return
        try:
            self._update_turn(record, fields, [*cleared, _TEXTS_IN_RECORDS], condition, values)
        except ClientError as err:
            if not too_large(err):
                raise
            logger.info(
                "turn's texts too large for its item; read from its records",
                extra={"session_id": record.session_id, "turn": record.turn},
            )
            texts = {name: fields.pop(name) for name in _TEXT_FIELDS if name in fields}
            values = {key: value for key, value in values.items() if key[1:] not in texts}
            fields[_TEXTS_IN_RECORDS] = values[f":{_TEXTS_IN_RECORDS}"] = True
            self._update_turn(record, fields, [*cleared, *_TEXT_FIELDS], condition, values)

    def _update_turn(
        self,
        record: TokenRecord,
        fields: Mapping[str, Any],
        removed: Sequence[str],
        condition: str,
        values: Mapping[str, Any],
    ) -> None:
        """Set ``fields`` of the record's turn item (``values`` holds their values and the condition's), remove
        ``removed`` (those of them not set)."""
        removed = [name for name in removed if name not in fields]
        call(
            self.client.update_item,
            TableName=self.table_name,
            Key=ser({"pk": _pk(record.session_id), "sk": _turn_sk(record.turn)}),
            UpdateExpression="SET "
            + ", ".join(f"#{name} = :{name}" for name in fields)
            + (" REMOVE " + ", ".join(f"#{name}" for name in removed) if removed else ""),
            ConditionExpression=condition,
            ExpressionAttributeNames={f"#{name}": name for name in (*fields, *removed)},
            ExpressionAttributeValues=ser(values),
        )

    def _turn(self, session_id: str, item: Mapping[str, Any]) -> Turn:
        """The turn an item holds, with its texts read from its records when they did not fit in it."""
        turn = _turn_from_item(session_id, item)
        if not item.get(_TEXTS_IN_RECORDS):
            return turn
        assistant, reasoning = self.assemble_texts(session_id, turn.turn)
        return replace(turn, assistant=assistant, reasoning=reasoning or None)

    def _record_item(self, record: TokenRecord) -> dict[str, Any]:
        return ser(
            {
                "pk": _pk(record.session_id),
                "sk": _record_sk(record.turn, record.seq),
                "record": record.encode().decode("utf-8"),
                "ts": record.ts,
                "expires_at": self._expires_at(record.ts),
            }
        )

    def _batch_write(self, items: list[dict[str, Any]], attempts: int) -> None:
        self._batch_write_requests([{"PutRequest": {"Item": item}} for item in items], attempts)

    def _batch_write_requests(self, requests: list[dict[str, Any]], attempts: int | None = None) -> None:
        attempts = attempts or self.max_attempts
        pending: list[Any] = requests
        for attempt in range(attempts):
            response = call(self.client.batch_write_item, RequestItems={self.table_name: pending})
            pending = list(response.get("UnprocessedItems", {}).get(self.table_name, []))
            if not pending:
                return
            if attempt + 1 < attempts:
                self.sleep(self.backoff.delay(attempt))
        raise Throttled(f"{len(pending)} items still unprocessed after {attempts} attempts")

    def _query(self, single_page: bool = False, **params: Any) -> Iterator[dict[str, Any]]:
        kwargs: dict[str, Any] = {"TableName": self.table_name, "ConsistentRead": True, **params}
        while True:
            page = call(self.client.query, **kwargs)
            for raw in page.get("Items", []):
                yield deser(raw)
            last = page.get("LastEvaluatedKey")
            if single_page or not last:
                return
            kwargs["ExclusiveStartKey"] = last

    def _expires_at(self, now_ms: int) -> int:
        return now_ms // 1000 + self.ttl_days * 86_400

    def _expired(self, item: Mapping[str, Any]) -> bool:
        """Whether an item's TTL has passed (its ``expires_at`` is now or earlier: DynamoDB's own rule), deleted by
        DynamoDB or not yet."""
        expires_at = item.get("expires_at")
        return expires_at is not None and int(expires_at) <= self.now_ms() // 1000


def _outcome(record: TokenRecord, assistant: str, reasoning: str, now_ms: int) -> dict[str, Any]:
    """The turn item's attributes that a terminal record sets: its outcome, as the record carries it."""
    fields: dict[str, Any] = {"status": record.turn_status, "assistant": assistant, "updated_at": now_ms}
    if reasoning:
        fields["reasoning"] = reasoning
    carried = record.to_dict()
    fields.update({name: carried[name] for name in _OUTCOME_FIELDS if name in carried})
    return fields


_OUTCOME_FIELDS = ("stop_reason", "usage", "error")  # what a terminal record carries, one outcome's or the other's
_TEXT_FIELDS = ("assistant", "reasoning")
_TEXTS_IN_RECORDS = "texts_in_records"  # a finished turn whose texts did not fit in its item


# A turn a generation may claim: it exists, is in progress, and no generation has claimed it yet.
_CLAIMABLE = "attribute_exists(pk) AND #status = :in_progress AND attribute_not_exists(#generator)"
_UNEXPIRED = "(attribute_not_exists(expires_at) OR expires_at > :alive)"  # :alive: now, in epoch seconds


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
        max_tokens=None if max_tokens is None else int(max_tokens),
        temperature=None if temperature is None else float(temperature),
        created_at=int(item.get("created_at", 0)),
        options=TurnOptions.from_item(dict(item)),
        generator=None if item.get("generator") is None else str(item["generator"]),
    )
