"""Kinesis adapter: write token records in order, retrying failed entries with backoff."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from chatstream.errors import Throttled

if TYPE_CHECKING:
    from collections.abc import Callable

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
    """Writes one record per ``PutRecords`` call, so no record is ever stored after a later one.

    A failed entry (throttled, internal failure) or a failed call (throttling, transport error) is retried
    with full-jitter exponential backoff
    up to ``max_attempts`` calls; then :class:`Throttled` is raised and nothing later is written.
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
        entry: PutRecordsRequestEntryTypeDef = {"Data": record.encode(), "PartitionKey": record.session_id}
        last_error = "unknown"
        for attempt in range(self.max_attempts):
            if attempt:
                self.throttle_retries += 1
                self.sleep(random.uniform(0, min(self.max_delay_s, self.base_delay_s * 2**attempt)))
            self.put_calls += 1
            try:
                response = self.client.put_records(StreamName=self.stream_name, Records=[entry])
            except ClientError as err:
                code = err.response["Error"]["Code"]
                if code not in RETRYABLE_CALL_ERRORS:
                    raise
                last_error = code
                continue
            except BotoCoreError as err:
                # Connection reset, read timeout…: the record may or may not be stored. Writing it again is
                # safe, since readers de-duplicate by (session_id, turn, seq); losing it is not.
                last_error = type(err).__name__
                continue
            result = response["Records"][0]
            if "ErrorCode" not in result:
                return
            last_error = result["ErrorCode"]
        raise Throttled(
            f"Kinesis did not accept record seq {record.seq} after {self.max_attempts} attempts: {last_error}"
        )
