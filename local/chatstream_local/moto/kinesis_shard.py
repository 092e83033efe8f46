"""A Kinesis shard serves GetRecords from the iterator's position, finds its newest record in O(1), and numbers
records under a lock.

moto's ``Shard`` keeps its records in a dict from sequence number to record, in the order put; ``put_record``
numbers each record as the current maximum + 1, so sequence numbers are consecutive integers. Its ``get_records``
walks the dict from the first record on every call and ``get_max_sequence_number`` lists every key: both cost the
shard's length, and the event source mapping's polling slowed as the stream grew.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from moto.kinesis.models import Shard

from chatstream_local.moto.patch import Patch

if TYPE_CHECKING:
    from collections.abc import Callable


def get_records(self: Shard, last_sequence_id: str, limit: int | None) -> tuple[list[Any], int, int]:
    """Up to ``limit`` records after ``last_sequence_id``, the last one's sequence number, and the milliseconds
    between the last one and the newest (moto's ``millis_behind_latest``), read from the position."""
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


def max_sequence_number(self: Shard) -> int:
    """The newest record's sequence number (0 for an empty shard)."""
    return next(reversed(self.records)) if self.records else 0


_NUMBERING = threading.Lock()


def numbered_under_lock(put_record: Callable[..., str], *args: Any, **kwargs: Any) -> str:
    with _NUMBERING:
        return put_record(*args, **kwargs)


GET_RECORDS_FROM_POSITION = Patch(
    Shard,
    "get_records",
    get_records,
    parameters=("self", "last_sequence_id", "limit"),
    source_sha256="1188a73a6b3db1f9",  # the same answer, read from the position instead of from the first record
    why="moto's Shard.get_records scans the shard from its first record on every call. Sequence numbers are "
    "consecutive integers (put_record numbers each record max + 1), so the replacement reads from the "
    "iterator's position.",
    measured="each GetRecords cost the shard's length (no number of its own: fixed with PARTITION_QUERY, when a "
    "local stack that had served a few hundred chats saturated moto)",
)

O1_MAX_SEQUENCE_NUMBER = Patch(
    Shard,
    "get_max_sequence_number",
    max_sequence_number,
    parameters=("self",),
    source_sha256="eff48df162f5a63d",  # list(self.records.keys())[-1]
    why="moto's Shard.get_max_sequence_number lists every key to find the last, and put_record calls it on every "
    "put; the replacement takes the dict's last key",
    measured="each put cost the shard's length (as GET_RECORDS_FROM_POSITION)",
)

LOCKED_NUMBERING = Patch(
    Shard,
    "put_record",
    numbered_under_lock,
    pass_original=True,
    parameters=("self", "partition_key", "data", "explicit_hash_key"),
    source_sha256="e2d15174261bc63e",  # numbers a record as the current maximum + 1 ("not safe for concurrency")
    why="moto documents Shard.put_record as not safe for concurrency: it numbers a record from the current maximum, "
    "so two concurrent puts could share a number. Puts are numbered under a lock.",
    measured="no record seen lost without it: the lock makes sure none can be "
    "(tests/unit/test_moto_fixes.py::test_concurrent_writers_lose_no_kinesis_record: 8 writers, 800 records, each "
    "read back once, in order)",
)

PATCHES = (GET_RECORDS_FROM_POSITION, O1_MAX_SEQUENCE_NUMBER, LOCKED_NUMBERING)
