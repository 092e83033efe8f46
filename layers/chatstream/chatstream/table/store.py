"""The table itself: where each item lives (its keys), when it expires, and the calls its parts share.

:class:`Store` holds the client, the table's name, its ``TtlDays``, the clock and the retry settings; the parts of
ChatTable (sessions, turns, token records) take it, and read a partition through it (one consistent Query, every
page) and write in batches through it (unprocessed items retried with backoff). Every call, theirs and its own, goes
through :func:`.dynamodb.call`, which translates throttling.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from chatstream.backoff import Backoff
from chatstream.config import TTL_DAYS_DEFAULT
from chatstream.errors import Throttled
from chatstream.table.dynamodb import call, deser, ser

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping

    from mypy_boto3_dynamodb import DynamoDBClient

SESSION_SK = "SESSION"
BATCH_WRITE_MAX = 25


def pk(session_id: str) -> str:
    """Every item of a session shares its partition."""
    return f"S#{session_id}"


def session_key(session_id: str) -> dict[str, str]:
    return {"pk": pk(session_id), "sk": SESSION_SK}


def turn_sk(turn: int) -> str:
    return f"T#{turn:06d}"


def turn_key(session_id: str, turn: int) -> dict[str, str]:
    return {"pk": pk(session_id), "sk": turn_sk(turn)}


def record_sk(turn: int, seq: int) -> str:
    return f"R#{turn:06d}#{seq:08d}"


def reservation_key(session_id: str, turn: int) -> dict[str, str]:
    """A turn's reservation of its owner's budget (:mod:`chatstream.table.budgets`) lives beside the turn."""
    return {"pk": pk(session_id), "sk": f"B#{turn:06d}"}


def owner_pk(owner: str) -> str:
    """An owner's items (limits, counters, turns generating, idempotency keys) share the owner's partition."""
    return f"O#{owner}"


@dataclass
class Store:
    """The table's handle. ``client`` is a boto3 DynamoDB client."""

    client: DynamoDBClient
    table_name: str
    ttl_days: int = TTL_DAYS_DEFAULT
    now_ms: Callable[[], int] = field(default=lambda: int(time.time() * 1000))
    sleep: Callable[[float], None] = time.sleep
    max_attempts: int = 6
    backoff: Backoff = field(default_factory=Backoff)

    def get(self, key: Mapping[str, Any], **params: Any) -> dict[str, Any] | None:
        """The item at ``key`` as a consistent GetItem reads it, or None; ``params`` add to the call (a projection)."""
        raw = call(self.client.get_item, TableName=self.table_name, Key=ser(key), ConsistentRead=True, **params).get(
            "Item"
        )
        return None if raw is None else deser(raw)

    def batch_get(self, keys: Iterable[Mapping[str, str]]) -> dict[tuple[str, str], dict[str, Any]]:
        """The items at ``keys`` that exist, by ``(pk, sk)``, as a consistent BatchGetItem reads them, its unprocessed
        keys asked again with backoff; :class:`Throttled` when some are still unprocessed after ``max_attempts``."""
        pending: list[Any] = [ser(key) for key in keys]
        found: dict[tuple[str, str], dict[str, Any]] = {}
        for attempt in range(self.max_attempts):
            response = call(
                self.client.batch_get_item,
                RequestItems={self.table_name: {"Keys": pending, "ConsistentRead": True}},
            )
            for raw in response.get("Responses", {}).get(self.table_name, []):
                item = deser(raw)
                found[(str(item["pk"]), str(item["sk"]))] = item
            pending = list(response.get("UnprocessedKeys", {}).get(self.table_name, {}).get("Keys", []))
            if not pending:
                return found
            self.sleep(self.backoff.delay(attempt))
        raise Throttled(f"{len(pending)} keys still unprocessed after {self.max_attempts} attempts")

    def query(self, single_page: bool = False, **params: Any) -> Iterator[dict[str, Any]]:
        """The items a consistent Query finds, every page of them (the first only, ``single_page``)."""
        kwargs: dict[str, Any] = {"TableName": self.table_name, "ConsistentRead": True, **params}
        while True:
            page = call(self.client.query, **kwargs)
            for raw in page.get("Items", []):
                yield deser(raw)
            last = page.get("LastEvaluatedKey")
            if single_page or not last:
                return
            kwargs["ExclusiveStartKey"] = last

    def batch_write(self, requests: list[dict[str, Any]], attempts: int | None = None) -> None:
        """BatchWriteItem with its unprocessed items retried with backoff; :class:`Throttled` when some are still
        unprocessed after ``attempts`` (``max_attempts``)."""
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

    def expires_at(self, now_ms: int) -> int:
        """The ``expires_at`` of an item written at ``now_ms``: ``TtlDays`` later, in epoch seconds."""
        return now_ms // 1000 + self.ttl_days * 86_400

    def expired(self, item: Mapping[str, Any]) -> bool:
        """Whether an item's TTL has passed (its ``expires_at`` is now or earlier: DynamoDB's own rule), deleted by
        DynamoDB or not yet."""
        expires_at = item.get("expires_at")
        return expires_at is not None and int(expires_at) <= self.now_ms() // 1000
