"""Push delivery for the local event source mapping: a GetRecords that carries ``X-Chatstream-Wait-Ms`` waits for
the next put.

On AWS, enhanced fan-out pushes records to the consumer as they are put. A ``GetRecords`` call that carries the
header :data:`~chatstream_local.moto.WAIT_HEADER` (only the local event source mapping sends it) and finds no
record waits up to that many milliseconds (at most :data:`MAX_WAIT_MS`) and answers as soon as a record is put
to any shard. Without the header, ``GetRecords`` answers at once, as Kinesis does.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from moto.kinesis.models import Shard
from moto.kinesis.responses import KinesisResponse

from chatstream_local.moto import WAIT_HEADER
from chatstream_local.moto.patch import Patch

if TYPE_CHECKING:
    from collections.abc import Callable

MAX_WAIT_MS = 5000


class Puts:
    """Counts Kinesis puts, so a waiting ``GetRecords`` wakes when there is something new."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.count = 0

    def put(self) -> None:
        with self.changed:
            self.count += 1
            self.changed.notify_all()

    def wait_after(self, seen: int, timeout: float) -> None:
        """Until a put after the ``seen``-th one, or ``timeout`` seconds."""
        with self.changed:
            self.changed.wait_for(lambda: self.count != seen, timeout=timeout)


PUTS = Puts()


def counted_put(put_record: Callable[..., str], *args: Any, **kwargs: Any) -> str:
    """moto's ``Shard.put_record``, then wake the waiting ``GetRecords`` calls."""
    sequence_number = put_record(*args, **kwargs)
    PUTS.put()
    return sequence_number


def waiting_get_records(get_records: Callable[[KinesisResponse], Any], self: KinesisResponse) -> Any:
    """moto's ``GetRecords`` handler, asked again after each put until it has records or the wait is over."""
    wait_ms = min(int(self.headers.get(WAIT_HEADER) or 0), MAX_WAIT_MS)
    deadline = time.monotonic() + wait_ms / 1000
    while True:
        seen = PUTS.count
        response = get_records(self)
        left = deadline - time.monotonic()
        result: dict[str, Any] = response.result  # get_records builds a dict
        if result["Records"] or left <= 0:
            return response
        PUTS.wait_after(seen, left)


COUNTED_PUTS = Patch(
    Shard,
    "put_record",
    counted_put,
    pass_original=True,
    parameters=("self", "partition_key", "data", "explicit_hash_key"),
    why="a waiting GetRecords (WAITING_GET_RECORDS) must learn of each put: every put counts in PUTS and wakes "
    "the waiting calls",
    measured="as WAITING_GET_RECORDS",
)

WAITING_GET_RECORDS = Patch(
    KinesisResponse,
    "get_records",
    waiting_get_records,
    pass_original=True,
    parameters=("self",),
    source_sha256="ff064b0a1a6eb944",  # answers an ActionResult whose result is a dict with "Records"
    why=f"a GetRecords with {WAIT_HEADER} and no record waits for the next put (at most {MAX_WAIT_MS} ms), as "
    "enhanced fan-out pushes records, instead of the local event source mapping polling moto; without the "
    "header it answers at once, as Kinesis does",
    measured="records reach the consumer within a millisecond or two of the put, without polling moto 50 times a "
    "second (the mapping polled every 20 ms before)",
)

PATCHES = (COUNTED_PUTS, WAITING_GET_RECORDS)
