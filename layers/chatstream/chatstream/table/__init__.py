"""ChatTable access layer: the only package that knows the table's items.

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
reservation                 ``S#<id>`` / ``B#<turn:06d>``     the turn's hold on its owner's budget: owner, day,
                                                            reserved, charged, held, entry, basis
owner's limits              ``O#<owner>`` / ``LIMITS``        the operator's overrides of the deployment's limits
owner's requests            ``O#<owner>`` / ``RPM#<minute>``  n: turns started in that minute
owner's tokens              ``O#<owner>`` / ``TPD#<day>``     tokens charged and reserved that UTC day, held
owner's turns at once       ``O#<owner>`` / ``ACTIVE``        turns: the set of its turns generating
idempotency key             ``O#<owner>`` / ``K#<key>``       fingerprint, session_id, turn (the turn it started)
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
them from its token records, which hold them anyway (:mod:`chatstream.table.turns`).

The owner's items (:mod:`chatstream.table.budgets`, :mod:`chatstream.table.idempotency`) are written by a turn's
start, in its own transaction (the owner's limits and the request's idempotency key admit it or refuse it, writing
nothing), and by its ending, which settles its reservation; and by an operator's command (the overrides).

The package, one concept a module: :mod:`~chatstream.table.dynamodb` (DynamoDB's wire: attribute values, errors),
:mod:`~chatstream.table.store` (the table's handle: keys, expiry, paginated Query, batch writes),
:mod:`~chatstream.table.sessions`, :mod:`~chatstream.table.turns` (a turn's lifecycle: its named transitions are the
only writes of its status), :mod:`~chatstream.table.token_records`, :mod:`~chatstream.table.budgets` (an owner's
limits, counters and turns generating; a turn's admission and settlement) and :mod:`~chatstream.table.idempotency`.
:class:`ChatTable` composes them on one handle: ``table.turns.<transition>(…)`` changes a turn; the reads every
function makes are the table's own methods.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from chatstream.table.budgets import Budgets
from chatstream.table.idempotency import IdempotencyKeys
from chatstream.table.sessions import Session, Sessions
from chatstream.table.store import Store
from chatstream.table.token_records import TokenRecords
from chatstream.table.turns import RELAY_CLAIM, Turn, Turns

if TYPE_CHECKING:
    from collections.abc import Sequence

    from chatstream.records import TokenRecord

__all__ = ["RELAY_CLAIM", "ChatTable", "Session", "Turn"]


@dataclass
class ChatTable(Store):
    """ChatTable: its sessions, turns and token records on one handle (``client``: a boto3 DynamoDB client).

    A turn changes only through ``turns`` (:class:`~chatstream.table.turns.Turns`: ``start_first``, ``start_next``,
    ``claim``, ``request_cancel``, the endings, ``free_session``); an owner's budget through them (admission and
    settlement) and ``budgets`` (the operator's overrides, the standing the relay reports); the methods below are
    the reads (and the token records' writes) the functions make, each one of a part's.
    """

    sessions: Sessions = field(init=False, repr=False)
    records: TokenRecords = field(init=False, repr=False)
    keys: IdempotencyKeys = field(init=False, repr=False)
    budgets: Budgets = field(init=False, repr=False)
    turns: Turns = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.sessions = Sessions(self)
        self.records = TokenRecords(self)
        self.keys = IdempotencyKeys(self)
        self.budgets = Budgets(self, self.keys)
        self.turns = Turns(self, self.sessions, self.records, self.budgets)

    def create_session(self, owner: str) -> str:
        return self.sessions.create(owner)

    def get_session(self, session_id: str) -> Session | None:
        return self.sessions.get(session_id)

    def owned_session(self, session_id: str, owner: str) -> Session:
        return self.sessions.owned(session_id, owner)

    def delete_session(self, session_id: str) -> int:
        return self.sessions.delete(session_id)

    def get_turn(self, session_id: str, turn: int, *, texts: bool = True) -> Turn | None:
        return self.turns.get(session_id, turn, texts=texts)

    def list_turns(self, session_id: str) -> list[Turn]:
        return self.turns.history(session_id)

    def cancel_requested(self, session_id: str, turn: int) -> bool:
        return self.turns.cancel_requested(session_id, turn)

    def put_records(self, records: Sequence[TokenRecord], *, attempts: int | None = None) -> None:
        self.records.put(records, attempts=attempts)

    def query_records(
        self, session_id: str, turn: int, after_seq: int = -1, limit: int | None = None
    ) -> list[TokenRecord]:
        return self.records.query(session_id, turn, after_seq, limit)

    def assemble_texts(self, session_id: str, turn: int) -> tuple[str, str]:
        return self.records.assemble_texts(session_id, turn)
