"""Sessions: who owns one, how many turns it has taken, and which one (if any) is generating.

A session item is created here (:meth:`Sessions.create`, or with its turn 1 by
:meth:`~chatstream.table.turns.Turns.start_first`, from :meth:`Sessions.new`) and read here; its hold on a generating
turn (``active_turn``, ``active_since``) is taken and let go by the turn's lifecycle (:mod:`chatstream.table.turns`),
which allocates each turn and frees the session when the turn ends. An expired session reads as gone.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chatstream.errors import SessionNotFound
from chatstream.table.dynamodb import call, ser
from chatstream.table.store import BATCH_WRITE_MAX, pk, session_key

if TYPE_CHECKING:
    from chatstream.table.store import Store


def new_session_id() -> str:
    """128 random bits, URL-safe: session ids act as capabilities when the URL has no auth."""
    return secrets.token_hex(16)


@dataclass(frozen=True)
class Session:
    session_id: str
    owner: str
    turn_count: int
    active_turn: int | None
    active_since: int | None


@dataclass
class Sessions:
    store: Store

    def new(
        self, owner: str, now: int, *, active_turn: int | None = None, session_id: str | None = None
    ) -> tuple[str, dict[str, Any]]:
        """A new session's id (a new random one, unless ``session_id``) and its item: ``owner``'s, created at ``now``,
        holding ``active_turn`` (its turn 1) or none."""
        session_id = session_id or new_session_id()
        item: dict[str, Any] = {
            **session_key(session_id),
            "owner": owner,
            "turn_count": active_turn or 0,
            "created_at": now,
            "expires_at": self.store.expires_at(now),
        }
        if active_turn is not None:
            item.update(active_turn=active_turn, active_since=now)
        return session_id, item

    def create(self, owner: str) -> str:
        """A new session of ``owner``'s, with no turn yet; its id."""
        session_id, item = self.new(owner, self.store.now_ms())
        call(
            self.store.client.put_item,
            TableName=self.store.table_name,
            Item=ser(item),
            ConditionExpression="attribute_not_exists(pk)",
        )
        return session_id

    def get(self, session_id: str) -> Session | None:
        """The session, or None (none, or expired)."""
        item = self.store.get(session_key(session_id))
        if item is None or self.store.expired(item):
            return None
        return Session(
            session_id=session_id,
            owner=str(item.get("owner", "")),
            turn_count=int(item.get("turn_count", 0)),
            active_turn=None if item.get("active_turn") is None else int(item["active_turn"]),
            active_since=None if item.get("active_since") is None else int(item["active_since"]),
        )

    def owned(self, session_id: str, owner: str) -> Session:
        """The session, if it exists and ``owner`` owns it; :class:`SessionNotFound` otherwise."""
        session = self.get(session_id)
        if session is None or session.owner != owner:
            raise SessionNotFound(session_id)
        return session

    def delete(self, session_id: str) -> int:
        """Delete every item of a session (the session, its turns, their token records); how many there were."""
        keys = list(
            self.store.query(
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues=ser({":pk": pk(session_id)}),
                ProjectionExpression="pk, sk",
            )
        )
        for start in range(0, len(keys), BATCH_WRITE_MAX):
            batch = keys[start : start + BATCH_WRITE_MAX]
            self.store.batch_write([{"DeleteRequest": {"Key": ser(key)}} for key in batch])
        return len(keys)
