"""Kinesis adapter: the token stream's writer, and one stream record as its readers see it.

:class:`TokenStreamWriter` is how the proxy writes: one ``PutRecords`` call at a time, retried with
backoff until every record of it is stored, so the stream holds a clean prefix of a turn (ARCHITECTURE.md,
"Coalescing"; the one exception is a turn's ``start`` record, which shares its call with the first delta).
:class:`StreamRecord` is one record read back, from a Lambda Kinesis event (the consumer)
or a ``GetRecords`` response (the redrive tool), with its stream coordinates.
"""

from __future__ import annotations

import base64
import binascii
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from chatstream.backoff import Backoff
from chatstream.config import PUT_MAX_ATTEMPTS_DEFAULT
from chatstream.errors import Throttled

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

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
    """Writes token records, one call at a time, each call retried with backoff until Kinesis stored all of it.

    :meth:`put` returns once every record it was given is stored, so nothing given to a later call is ever
    stored before them. The records of one call are entries that Kinesis stores or refuses one by one: when an
    earlier entry is refused and a later one stored, the refused one is put again and lands after it. So the
    proxy gives one call more than one record only for a turn's opening, the ``start`` record and the first
    delta: ``start`` carries nothing a reader needs once a later record is there (readers order by ``seq``
    and take a missing or late ``start`` as seen; ARCHITECTURE.md, "Coalescing").

    A failed entry (throttled, internal failure) or a failed call (throttling, transport error) is
    retried up to ``max_attempts`` calls; then :class:`Throttled` is raised and nothing later is written.
    """

    client: KinesisClient
    stream_name: str
    max_attempts: int = PUT_MAX_ATTEMPTS_DEFAULT
    backoff: Backoff = field(default_factory=Backoff)
    sleep: Callable[[float], None] = time.sleep
    put_calls: int = field(default=0, init=False)
    throttle_retries: int = field(default=0, init=False)

    def put(self, *records: TokenRecord) -> None:
        """Store ``records`` (in one call when Kinesis takes them all), retrying what it refuses."""
        pending: list[tuple[TokenRecord, PutRecordsRequestEntryTypeDef]] = [
            (record, {"Data": record.encode(), "PartitionKey": record.session_id}) for record in records
        ]
        last_error = "unknown"
        for attempt in range(self.max_attempts):
            if attempt:
                self.throttle_retries += 1
                self.sleep(self.backoff.delay(attempt))
            self.put_calls += 1
            try:
                response = self.client.put_records(StreamName=self.stream_name, Records=[entry for _, entry in pending])
            except ClientError as err:
                code = err.response["Error"]["Code"]
                if code not in RETRYABLE_CALL_ERRORS:
                    raise
                last_error = code
                continue
            except BotoCoreError as err:
                # Connection reset, read timeout…: the records may or may not be stored. Writing them again is
                # safe, since readers de-duplicate by (session_id, turn, seq); losing them is not.
                last_error = type(err).__name__
                continue
            refused = [
                (item, result.get("ErrorCode"))
                for item, result in zip(pending, response["Records"], strict=True)
                if result.get("ErrorCode") is not None
            ]
            if not refused:
                return
            pending = [item for item, _ in refused]
            last_error = str(refused[0][1])
        raise Throttled(
            f"Kinesis did not accept record seq {pending[0][0].seq} after {self.max_attempts} attempts: {last_error}"
        )


@dataclass(frozen=True)
class StreamRecord:
    """One Kinesis record as a reader sees it: its payload and its stream coordinates."""

    sequence_number: str
    partition_key: str
    data: bytes
    shard_id: str = ""
    stream_arn: str = ""
    approximate_arrival: float | None = None  # epoch seconds
    undecodable: str | None = None  # why ``data`` could not be taken from the event (kept raw)

    @classmethod
    def from_lambda_record(cls, raw: Mapping[str, Any]) -> StreamRecord:
        """From one ``Records[]`` entry of a Lambda Kinesis event."""
        kinesis = raw["kinesis"]
        encoded = str(kinesis.get("data", ""))
        undecodable = None
        try:
            data = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            data, undecodable = encoded.encode("utf-8"), "data is not base64"
        event_id = str(raw.get("eventID", ""))
        arrival = kinesis.get("approximateArrivalTimestamp")
        return cls(
            sequence_number=str(kinesis["sequenceNumber"]),
            partition_key=str(kinesis.get("partitionKey", "")),
            data=data,
            shard_id=event_id.split(":", 1)[0] if ":" in event_id else "",
            stream_arn=stream_arn_of(str(raw.get("eventSourceARN", ""))),
            approximate_arrival=None if arrival is None else float(arrival),
            undecodable=undecodable,
        )

    @classmethod
    def from_get_records(cls, raw: Mapping[str, Any], shard_id: str, stream_arn: str) -> StreamRecord:
        """From one ``Records[]`` entry of a boto3 ``GetRecords`` response."""
        arrival = raw.get("ApproximateArrivalTimestamp")
        return cls(
            sequence_number=str(raw["SequenceNumber"]),
            partition_key=str(raw["PartitionKey"]),
            data=bytes(raw["Data"]),
            shard_id=shard_id,
            stream_arn=stream_arn,
            approximate_arrival=arrival.timestamp() if isinstance(arrival, datetime) else None,
        )

    @property
    def coordinates(self) -> str:
        return f"{self.shard_id}:{self.sequence_number}"


def stream_arn_of(source_arn: str) -> str:
    """The stream ARN of an event source ARN (an enhanced fan-out consumer ARN names its stream first)."""
    return source_arn.split("/consumer/", 1)[0]


def stream_name_of(arn: str) -> str:
    """The stream name in a stream (or enhanced fan-out consumer) ARN."""
    if ":stream/" not in arn:
        raise ValueError(f"not a Kinesis stream ARN: {arn!r}")
    return arn.split(":stream/", 1)[1].split("/", 1)[0]
