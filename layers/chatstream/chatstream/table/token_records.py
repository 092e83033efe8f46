"""Token records in the table: one item per record, written idempotently, read back in ``seq`` order.

A record's item is keyed by its turn and ``seq`` (``R#<turn:06d>#<seq:08d>``), so a redelivered record rewrites
its own item; following a turn is one key-range Query after the last ``seq`` seen. A record's ``expires_at``
counts from its ``ts``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chatstream.records import MAX_SEQ, TokenRecord, assistant_text, reasoning_text
from chatstream.table.dynamodb import ser
from chatstream.table.store import BATCH_WRITE_MAX, pk, record_sk

if TYPE_CHECKING:
    from collections.abc import Sequence

    from chatstream.table.store import Store


@dataclass
class TokenRecords:
    store: Store

    def put(self, records: Sequence[TokenRecord], *, attempts: int | None = None) -> None:
        """Write token items idempotently (BatchWriteItem, unprocessed items retried with backoff).

        Raises :class:`~chatstream.errors.Throttled` when items are still unprocessed after ``attempts``
        (``max_attempts``).
        """
        unique: dict[tuple[str, int, int], TokenRecord] = {record.key: record for record in records}
        requests = [{"PutRequest": {"Item": self._item(record)}} for record in unique.values()]
        for start in range(0, len(requests), BATCH_WRITE_MAX):
            self.store.batch_write(requests[start : start + BATCH_WRITE_MAX], attempts)

    def query(self, session_id: str, turn: int, after_seq: int = -1, limit: int | None = None) -> list[TokenRecord]:
        """The turn's token records with ``seq > after_seq``, in seq order (strongly consistent)."""
        if after_seq >= MAX_SEQ:
            return []
        params: dict[str, Any] = {
            "KeyConditionExpression": "pk = :pk AND sk BETWEEN :lo AND :hi",
            "ExpressionAttributeValues": ser(
                {
                    ":pk": pk(session_id),
                    ":lo": record_sk(turn, max(after_seq + 1, 0)),
                    ":hi": record_sk(turn, MAX_SEQ),
                }
            ),
        }
        if limit is not None:
            params["Limit"] = limit
        items = self.store.query(single_page=limit is not None, **params)
        return [TokenRecord.decode(str(item["record"])) for item in items]

    def assemble_texts(self, session_id: str, turn: int) -> tuple[str, str]:
        """The reply and the reasoning of a turn so far, from its stored records (one Query)."""
        records = self.query(session_id, turn)
        return assistant_text(records), reasoning_text(records)

    def _item(self, record: TokenRecord) -> dict[str, Any]:
        return ser(
            {
                "pk": pk(record.session_id),
                "sk": record_sk(record.turn, record.seq),
                "record": record.encode().decode("utf-8"),
                "ts": record.ts,
                "expires_at": self.store.expires_at(record.ts),
            }
        )
