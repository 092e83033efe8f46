"""Kinesis adapter: write token records in order, retrying failed entries with backoff."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from chatstream.errors import Throttled

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from mypy_boto3_kinesis import KinesisClient
    from mypy_boto3_kinesis.type_defs import PutRecordsRequestEntryTypeDef

    from chatstream.records import TokenRecord

# Whole-call errors worth retrying; anything else is a bug or a misconfiguration and is raised.
RETRYABLE_CALL_ERRORS = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "LimitExceededException",
        "KMSThrottlingException",
        "InternalFailure",
        "InternalFailureException",
        "ServiceUnavailable",
        "ServiceUnavailableException",
    }
)


@dataclass
class TokenStreamWriter:
    """Writes token records in order, retrying failed entries with full-jitter exponential backoff.

    :meth:`put` writes one record per ``PutRecords`` call, so no record is ever stored after a later one.
    :meth:`put_all` writes several in one call: an entry that fails is retried (before anything after
    the call is written), but the call's later entries may then be stored before it, and a writer that
    dies before the retry leaves a gap. The proxy therefore writes one record per call (:meth:`put`).

    A failed entry (throttled, internal failure) or a failed call (throttling, transport error) is
    retried up to ``max_attempts`` calls; then :class:`Throttled` is raised and nothing later is written.
    """

    client: KinesisClient
    stream_name: str
    max_attempts: int = 8
    base_delay_s: float = 0.05
    max_delay_s: float = 2.0
    sleep: Callable[[float], None] = time.sleep
    put_calls: int = field(default=0, init=False)
    throttle_retries: int = field(default=0, init=False)

    def put(self, record: TokenRecord) -> None:
        self.put_all([record])

    def put_all(self, records: Sequence[TokenRecord]) -> None:
        pending = list(records)
        last_error = "unknown"
        for attempt in range(self.max_attempts):
            if attempt:
                self.throttle_retries += 1
                self.sleep(random.uniform(0, min(self.max_delay_s, self.base_delay_s * 2**attempt)))
            self.put_calls += 1
            entries: list[PutRecordsRequestEntryTypeDef] = [
                {"Data": record.encode(), "PartitionKey": record.session_id} for record in pending
            ]
            try:
                response = self.client.put_records(StreamName=self.stream_name, Records=entries)
            except ClientError as err:
                code = err.response["Error"]["Code"]
                if code not in RETRYABLE_CALL_ERRORS:
                    raise
                last_error = code
                continue
            except BotoCoreError as err:
                # Connection reset, read timeout…: the records may or may not be stored. Writing them again
                # is safe, since readers de-duplicate by (session_id, turn, seq); losing one is not.
                last_error = type(err).__name__
                continue
            failed = [
                (record, result["ErrorCode"])
                for record, result in zip(pending, response["Records"], strict=True)
                if "ErrorCode" in result
            ]
            if not failed:
                return
            pending, last_error = [record for record, _ in failed], failed[0][1]
        raise Throttled(
            f"Kinesis did not accept record seq {pending[0].seq} after {self.max_attempts} attempts: {last_error}"
        )
