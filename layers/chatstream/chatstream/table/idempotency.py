"""Idempotency keys: which turn a request sent with an ``Idempotency-Key`` started, so that the same request sent again
joins that turn instead of starting another.

A key's record is an owner's item (``O#<owner>`` / ``K#<key>``): the request's fingerprint (its method, path and
canonical body, which the relay computes), the session and turn it started, and when it expires (:data:`KEY_TTL_S`
after it was written). It is written by the start's own transaction (:meth:`~chatstream.table.turns.Turns._start`,
on ``attribute_not_exists(pk) OR expires_at <= :now``), so a request either starts its turn and records its key in
one write, or finds the key recorded and starts nothing (:class:`KeyInUse`, carrying the record).
The record is never changed after: a key names one turn until it expires, and a key that expired (read as gone, as
every expired item) may start a new one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chatstream.errors import ChatstreamError
from chatstream.table.dynamodb import ser
from chatstream.table.store import owner_pk

if TYPE_CHECKING:
    from collections.abc import Mapping

    from chatstream.table.store import Store

KEY_TTL_S = 86_400  # a key names its turn for 24 hours (Stripe's window), then may be used again
KEY_PREFIX = "K#"


def key_sk(key: str) -> str:
    return f"{KEY_PREFIX}{key}"


@dataclass(frozen=True)
class KeyClaim:
    """What a request sent with an ``Idempotency-Key`` asks the start to record: the key, and the fingerprint of the
    request it came with."""

    key: str
    fingerprint: str


@dataclass(frozen=True)
class KeyRecord:
    """A key's record: the turn the request that first came with it started."""

    owner: str
    key: str
    fingerprint: str
    session_id: str
    turn: int
    created_at: int = 0

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> KeyRecord:
        return cls(
            owner=str(item["pk"])[2:],
            key=str(item["sk"])[len(KEY_PREFIX) :],
            fingerprint=str(item.get("fingerprint", "")),
            session_id=str(item.get("session_id", "")),
            turn=int(item.get("turn", 0)),
            created_at=int(item.get("created_at", 0)),
        )


class KeyInUse(ChatstreamError):
    """The request's idempotency key already names a turn (``record``): nothing was started."""

    def __init__(self, record: KeyRecord) -> None:
        super().__init__(f"the idempotency key names turn {record.turn} of session {record.session_id}")
        self.record = record


@dataclass
class IdempotencyKeys:
    store: Store

    def put(self, owner: str, claim: KeyClaim, session_id: str, turn: int, now_ms: int) -> dict[str, Any]:
        """The start transaction's write of ``claim``'s record (``owner``'s, naming ``session_id``'s ``turn``): only
        if the key has no record, or its record expired. Its old record comes back with a failure."""
        item = {
            "pk": owner_pk(owner),
            "sk": key_sk(claim.key),
            "fingerprint": claim.fingerprint,
            "session_id": session_id,
            "turn": turn,
            "created_at": now_ms,
            "expires_at": now_ms // 1000 + KEY_TTL_S,
        }
        return {
            "Put": {
                "TableName": self.store.table_name,
                "Item": ser(item),
                "ConditionExpression": "attribute_not_exists(pk) OR expires_at <= :now",
                "ExpressionAttributeValues": ser({":now": now_ms // 1000}),
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }

    def get(self, owner: str, key: str) -> KeyRecord | None:
        """The key's record, or None (none, or expired)."""
        item = self.store.get({"pk": owner_pk(owner), "sk": key_sk(key)})
        if item is None or self.store.expired(item):
            return None
        return KeyRecord.from_item(item)
