"""What every event source mapping's poller does, in Lambda's order: :class:`Poller`.

LocalStack's event source mappings are laid out the same way (``event_source_mapping/pollers/``: one ``Poller``
base, one poller per source), and the base fixes the order of the steps as Powertools' batch processor does
(``utilities/batch/base.py``); each source fills in the steps:

1. **fetch** a batch from the source (:meth:`Poller.fetch`: ``GetRecords``, ``ReceiveMessage``);
2. until nothing of it is left to try, one attempt after another, the first being the whole batch:
   **filter** out what may no longer be invoked (:meth:`Poller.filter`), **invoke** the function with the rest
   (:meth:`Poller.invoke`), and **handle** what it returned (:meth:`Poller.handle`): which records the function
   processed, and what to try next (a retry, the halves of a bisected batch), or nothing;
3. **checkpoint**: tell the source what is done with (:meth:`Poller.checkpoint`).

A poller's own call that fails in 2 or 3 gives the batch back to the source (:meth:`Poller.on_error`) and
propagates. One poller runs one poll at a time.

A function reports the records it failed in a partial batch response (``ReportBatchItemFailures``), which every
source reads the same way: :func:`batch_item_failures`.
"""

from __future__ import annotations

import json
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from collections.abc import Sequence

RecordT = TypeVar("RecordT")  # one record of the source (a stream record, a queue message)
ResultT = TypeVar("ResultT")  # what invoking the function returned, as the source tells it


@dataclass
class Attempt(Generic[RecordT]):
    """Records to invoke the function with, and what was tried with them so far."""

    records: list[RecordT]
    invocations: int = 0  # invocations of these records so far
    retries: int = 0


@dataclass(frozen=True)
class Handled(Generic[RecordT]):
    """What an attempt came to: the records the function processed, and the attempts to make next (first)."""

    delivered: Sequence[RecordT] = ()
    again: Sequence[Attempt[RecordT]] = ()


class Poller(ABC, Generic[RecordT, ResultT]):
    """One reader of an event source: :meth:`poll_once` runs the steps in order; a subclass fills them in."""

    def __init__(self) -> None:
        self._poll_lock = threading.Lock()

    def poll_once(self) -> int:
        """Fetch one batch and deliver it (with its retries), then checkpoint; the number of records fetched."""
        with self._poll_lock:
            batch = self.fetch()
            if not batch:
                return 0
            try:
                delivered = self._deliver(batch)
                self.checkpoint(batch, delivered)
            except BaseException:
                self.on_error(batch)
                raise
            return len(batch)

    def _deliver(self, batch: list[RecordT]) -> list[RecordT]:
        """Filter, invoke and handle until no attempt is left; the records the function processed."""
        delivered: list[RecordT] = []
        pending: list[Attempt[RecordT]] = [Attempt(batch)]
        while pending:
            attempt = self.filter(pending.pop(0))
            if attempt is None:
                continue
            handled = self.handle(attempt, self.invoke(attempt))
            delivered.extend(handled.delivered)
            pending[:0] = handled.again
        return delivered

    # ---------------------------------------------------------------------------- the steps

    @abstractmethod
    def fetch(self) -> list[RecordT]:
        """The next batch from the source; empty when it has nothing new."""

    def filter(self, attempt: Attempt[RecordT]) -> Attempt[RecordT] | None:
        """What of ``attempt`` may still be invoked (None: nothing). By default, all of it."""
        return attempt

    @abstractmethod
    def invoke(self, attempt: Attempt[RecordT]) -> ResultT:
        """Invoke the function with the attempt's records."""

    @abstractmethod
    def handle(self, attempt: Attempt[RecordT], result: ResultT) -> Handled[RecordT]:
        """Read what the invocation returned: what succeeded, and what to try next."""

    @abstractmethod
    def checkpoint(self, batch: list[RecordT], delivered: list[RecordT]) -> None:
        """The batch is done with (``delivered``: what the function processed): tell the source."""

    def on_error(self, batch: list[RecordT]) -> None:
        """A call of the poller's own failed while it delivered ``batch``. By default the source keeps it."""


def batch_item_failures(payload: bytes) -> list[str] | None:
    """The item identifiers a partial batch response reports failed ([]: the batch succeeded), or None when the
    response fails the whole batch, as Lambda reads it (services-sqs-errorhandling, with-kinesis "Reporting batch
    item failures"): a null response, an empty or null ``batchItemFailures``, is a complete success; a response that
    is not JSON, or an ``itemIdentifier`` that is empty, null or under another key, is a complete failure. Whether an
    identifier names a record of the batch is the source's to check."""
    try:
        response: Any = json.loads(payload)
    except ValueError:
        return None
    if response is None:
        return []
    if not isinstance(response, dict):
        return None
    failures = response.get("batchItemFailures")
    if failures is None:
        return []
    if not isinstance(failures, list):
        return None
    identifiers = []
    for failure in failures:
        identifier = failure.get("itemIdentifier") if isinstance(failure, dict) else None
        if not isinstance(identifier, str) or not identifier:
            return None
        identifiers.append(identifier)
    return identifiers
