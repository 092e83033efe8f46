"""moto in server mode for the local stack, with fixes where moto's performance departs from the services.

- **DynamoDB Query scaled with the whole table.** moto 5's ``Table.query`` on a base table sorts
  every item of the table to find one partition's items, so each Query costs O(n log n) in the
  table's size: a local stack that has served a few hundred chats spent ~50 ms a Query and the
  relay's polling saturated the emulator. The patched query reads one partition, as DynamoDB does.
- **Kinesis shards scaled with their length.** moto's ``Shard.get_records`` scans the shard from
  its first record on every call and ``put_record`` finds the shard's maximum by listing every key,
  so the event source mapping's polling slowed as the stream grew. The patched shard serves
  ``GetRecords`` from the iterator's position and finds its maximum in O(1). moto also documents
  ``put_record`` as "not safe for concurrency" (a record is numbered from the current maximum):
  the patched one numbers records under a lock, so concurrent writers can never share a number
  (we have not seen moto lose a record this way; the lock makes sure it cannot).

``python -m chatstream_local.moto_server -H 127.0.0.1 -p PORT`` = ``python -m moto.server`` + the fixes.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

_partition = threading.local()
_applied = False


def apply() -> None:
    """Patch moto's DynamoDB ``Table`` (idempotent)."""
    global _applied
    if _applied:
        return
    from moto.dynamodb.models.table import Table

    all_items, query = Table.all_items, Table.query

    def partition_items(self: Table) -> list[Any]:
        current = getattr(_partition, "current", None)
        if current is not None and current[0] is self and self.range_key_attr:
            return sorted(self.items.get(current[1], {}).values(), key=lambda item: item.range_key)
        return all_items(self)

    def partition_query(self: Table, hash_key: Any, *args: Any, **kwargs: Any) -> Any:
        index_name = args[6] if len(args) > 6 else kwargs.get("index_name")
        if index_name is not None:  # an index query: moto's own path
            return query(self, hash_key, *args, **kwargs)
        _partition.current = (self, hash_key)
        try:
            return query(self, hash_key, *args, **kwargs)
        finally:
            _partition.current = None

    Table.all_items = partition_items  # type: ignore[method-assign]
    Table.query = partition_query  # type: ignore[method-assign]
    _patch_kinesis_shard()
    _applied = True


def _patch_kinesis_shard() -> None:
    from moto.kinesis.models import Shard

    put_record = Shard.put_record
    lock = threading.Lock()

    def locked_put_record(self: Shard, *args: Any, **kwargs: Any) -> Any:
        with lock:
            return put_record(self, *args, **kwargs)

    def max_sequence_number(self: Shard) -> int:
        return next(reversed(self.records)) if self.records else 0

    def get_records(self: Shard, last_sequence_id: str, limit: int | None) -> tuple[list[Any], int, int]:
        # Sequence numbers are consecutive integers (each put is the maximum + 1): read from the position.
        last = int(last_sequence_id)
        if not self.records:
            return [], last, 0
        first, newest = next(iter(self.records)), next(reversed(self.records))
        results = []
        for sequence_number in range(max(last + 1, first), newest + 1):
            record = self.records.get(sequence_number)
            if record is None:
                continue
            results.append(record)
            last = sequence_number
            if limit is not None and len(results) >= limit:
                break
        behind = self.records[newest].created_at - results[-1].created_at if results else 0.0
        return results, last, int(behind * 1000)

    Shard.put_record = locked_put_record  # type: ignore[method-assign]
    Shard.get_max_sequence_number = max_sequence_number  # type: ignore[method-assign]
    Shard.get_records = get_records  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> None:
    apply()
    from moto.server import main as moto_main

    moto_main(argv if argv is not None else sys.argv[1:])


if __name__ == "__main__":
    main()
