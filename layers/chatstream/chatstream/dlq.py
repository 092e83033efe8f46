"""The consumer's dead-letter queue (ConsumerDLQ): its two kinds of message, and the SQS adapter.

This module is the one place that builds and parses DLQ messages:

- **poison-record** messages (:class:`PoisonRecord`), sent by the consumer: a record that is not a
  valid token record, with its payload (base64; left out above :data:`MAX_INLINE_PAYLOAD_CHARS`), the
  reason and its stream coordinates (docs/samples/consumer-dlq-poison-message.json);
- **on-failure** records (:class:`FailedBatch`), sent by the event source mapping when a batch
  exhausted its retries or its maximum record age: Lambda's invocation record with ``KinesisBatchInfo``
  (shard id and the start/end sequence numbers), without the records themselves
  (docs/samples/consumer-dlq-onfailure-message.json).

:class:`DeadLetterQueue` sends poison records (raising :class:`~chatstream.errors.DeadLetterError` when
SQS cannot take one) and lets the redrive tool receive, delete and release messages.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from chatstream.errors import DeadLetterError, InvalidDeadLetter
from chatstream.kinesis import StreamRecord

if TYPE_CHECKING:
    from collections.abc import Mapping

    from mypy_boto3_sqs import SQSClient

POISON_MESSAGE_VERSION = "1"
# SQS takes 256 KiB per message: a payload whose base64 is longer is left out of the message (the
# redrive tool re-reads it from the stream by its coordinates while the stream still holds it).
MAX_INLINE_PAYLOAD_CHARS = 200_000
TRANSIENT_SQS_CODES = frozenset(
    {
        "ThrottlingException",
        "RequestThrottled",
        "KmsThrottled",
        "KMS.ThrottlingException",
        "ServiceUnavailable",
        "InternalError",
        "InternalFailure",
    }
)
RECEIVE_MAX = 10
# ChangeMessageVisibility's answers for a message no longer in flight under this receipt handle (the JSON protocol's
# code, and the query protocol's, which SQS still sends to clients that ask for it).
NOT_IN_FLIGHT_CODES = frozenset(
    {
        "MessageNotInflight",
        "AWS.SimpleQueueService.MessageNotInflight",
        "ReceiptHandleIsInvalid",
        "InvalidParameterValue",
    }
)


class DlqKind(StrEnum):
    POISON = "poison-record"
    ON_FAILURE = "on-failure"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class PoisonRecord:
    """A record that is not a valid token record, with the reason: a poison-record message.

    ``payload_truncated``: the message left the payload out (``record.data`` is then empty).
    """

    record: StreamRecord
    reason: str
    payload_truncated: bool = False

    def message(self, now: datetime | None = None) -> dict[str, Any]:
        """The message: payload (base64), reason and stream coordinates."""
        payload = base64.b64encode(self.record.data).decode("ascii")
        truncated = len(payload) > MAX_INLINE_PAYLOAD_CHARS
        arrival = self.record.approximate_arrival
        return {
            "kind": DlqKind.POISON.value,
            "version": POISON_MESSAGE_VERSION,
            "reason": self.reason,
            "payload": None if truncated else payload,
            "payloadTruncated": truncated,
            "payloadBytes": len(self.record.data),
            "partitionKey": self.record.partition_key,
            "sequenceNumber": self.record.sequence_number,
            "shardId": self.record.shard_id,
            "streamArn": self.record.stream_arn,
            "approximateArrivalTimestamp": arrival,
            "detectedAt": _iso(now or datetime.now(UTC)),
        }

    def body(self, now: datetime | None = None) -> str:
        """The message as the SQS message body (compact JSON)."""
        return json.dumps(self.message(now), separators=(",", ":"))

    @staticmethod
    def describes(body: Mapping[str, Any]) -> bool:
        """Whether a DLQ message body is a poison-record message."""
        return body.get("kind") == DlqKind.POISON

    @classmethod
    def from_message(cls, body: Mapping[str, Any]) -> PoisonRecord:
        """Parse a poison-record message; :class:`InvalidDeadLetter` when it is not one."""
        if not cls.describes(body):
            raise InvalidDeadLetter("not a poison-record message")
        if "sequenceNumber" not in body:
            raise InvalidDeadLetter("a poison-record message without sequenceNumber")
        payload = body.get("payload")
        arrival = body.get("approximateArrivalTimestamp")
        try:
            data = b"" if payload is None else base64.b64decode(str(payload), validate=True)
            approximate_arrival = None if arrival is None else float(arrival)
        except (binascii.Error, ValueError) as err:
            raise InvalidDeadLetter(f"a poison-record message with a malformed field: {err}") from err
        record = StreamRecord(
            sequence_number=str(body["sequenceNumber"]),
            partition_key=str(body.get("partitionKey", "")),
            data=data,
            shard_id=str(body.get("shardId", "")),
            stream_arn=str(body.get("streamArn", "")),
            approximate_arrival=approximate_arrival,
        )
        return cls(
            record=record, reason=str(body.get("reason", "")), payload_truncated=bool(body.get("payloadTruncated"))
        )


@dataclass(frozen=True)
class FailedBatch:
    """An on-failure record: the range of a shard whose batch the event source mapping gave up on."""

    shard_id: str
    start: str  # first sequence number of the batch
    end: str  # last sequence number of the batch
    stream_arn: str
    batch_size: int | None
    condition: str  # why the mapping gave up (RetryAttemptsExhausted, RecordAgeExceeded…)

    @staticmethod
    def describes(body: Mapping[str, Any]) -> bool:
        """Whether a DLQ message body is an on-failure record of a Kinesis event source mapping."""
        return isinstance(body.get("KinesisBatchInfo"), dict) and isinstance(body.get("requestContext"), dict)

    @classmethod
    def from_message(cls, body: Mapping[str, Any]) -> FailedBatch:
        """Parse an on-failure record; :class:`InvalidDeadLetter` when it is not one."""
        if not cls.describes(body):
            raise InvalidDeadLetter("not an on-failure record")
        info, context = body["KinesisBatchInfo"], body["requestContext"]
        missing = [name for name in ("shardId", "startSequenceNumber", "endSequenceNumber") if name not in info]
        if missing:
            raise InvalidDeadLetter(f"an on-failure record without KinesisBatchInfo.{missing[0]}")
        stream_arn = info.get("streamArn")
        if not stream_arn:
            raise InvalidDeadLetter("an on-failure record without KinesisBatchInfo.streamArn")
        if not isinstance(stream_arn, str) or ":kinesis:" not in stream_arn or ":stream/" not in stream_arn:
            raise InvalidDeadLetter("an on-failure record whose KinesisBatchInfo.streamArn is not a Kinesis stream ARN")
        size = info.get("batchSize")
        return cls(
            shard_id=str(info["shardId"]),
            start=str(info["startSequenceNumber"]),
            end=str(info["endSequenceNumber"]),
            stream_arn=stream_arn,
            batch_size=size if isinstance(size, int) and not isinstance(size, bool) else None,
            condition=str(context.get("condition", "?")),
        )


@dataclass(frozen=True)
class DlqMessage:
    """One message received from the DLQ."""

    message_id: str
    receipt_handle: str
    body: str

    @property
    def kind(self) -> DlqKind:
        document = self._document()
        if document is not None and PoisonRecord.describes(document):
            return DlqKind.POISON
        if document is not None and FailedBatch.describes(document):
            return DlqKind.ON_FAILURE
        return DlqKind.UNKNOWN

    def parse(self) -> PoisonRecord | FailedBatch:
        """The message's content; :class:`InvalidDeadLetter` when it is neither kind (or is missing a field)."""
        document = self._document()
        if document is not None and PoisonRecord.describes(document):
            return PoisonRecord.from_message(document)
        if document is not None and FailedBatch.describes(document):
            return FailedBatch.from_message(document)
        raise InvalidDeadLetter("not a poison-record or on-failure message")

    def _document(self) -> dict[str, Any] | None:
        """The body as a JSON object, or None if it is not one."""
        try:
            document = json.loads(self.body)
        except ValueError:
            return None
        return document if isinstance(document, dict) else None


@dataclass
class DeadLetterQueue:
    """The DLQ: the consumer sends poison records to it; the redrive tool reads, deletes and releases."""

    client: SQSClient
    queue_url: str

    def send_poison(self, poison: PoisonRecord) -> None:
        try:
            self.client.send_message(QueueUrl=self.queue_url, MessageBody=poison.body())
        except ClientError as err:
            code = err.response["Error"]["Code"]
            if code in TRANSIENT_SQS_CODES:
                raise DeadLetterError(f"SQS {code}") from err
            raise

    def receive(
        self, max_messages: int = RECEIVE_MAX, visibility_timeout_s: int = 300, wait_s: int = 1
    ) -> list[DlqMessage]:
        """Up to ``max_messages`` (at most 10) messages, hidden from other readers for the timeout.

        ``wait_s`` > 0 long-polls, so an empty answer means the queue is empty (not just a sampled server).
        """
        response = self.client.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=max(1, min(RECEIVE_MAX, max_messages)),
            VisibilityTimeout=visibility_timeout_s,
            WaitTimeSeconds=wait_s,
        )
        return [
            DlqMessage(message["MessageId"], message["ReceiptHandle"], message.get("Body", ""))
            for message in response.get("Messages", [])
        ]

    def delete(self, message: DlqMessage) -> None:
        self.client.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message.receipt_handle)

    def hide(self, message: DlqMessage, visibility_timeout_s: int) -> bool:
        """Keep a received message hidden for ``visibility_timeout_s`` more seconds, counted from now; False when
        SQS no longer holds it for this receipt (its visibility timeout ran out: it is visible again, and the next
        receive hands it out with a new receipt handle)."""
        return self._change_visibility(message, visibility_timeout_s)

    def release(self, message: DlqMessage) -> None:
        """Make a received message visible again at once (it stays in the queue); one whose visibility timeout
        already ran out is visible already."""
        self._change_visibility(message, 0)

    def _change_visibility(self, message: DlqMessage, visibility_timeout_s: int) -> bool:
        # ChangeMessageVisibility on a message whose visibility timeout ran out "might result in an error"
        # (MessageNotInflight; SQS API reference, ChangeMessageVisibility), as does a receipt handle that a later
        # receive replaced (ReceiptHandleIsInvalid), and, past the 12-hour maximum, InvalidParameterValue.
        try:
            self.client.change_message_visibility(
                QueueUrl=self.queue_url, ReceiptHandle=message.receipt_handle, VisibilityTimeout=visibility_timeout_s
            )
        except ClientError as err:
            if err.response.get("Error", {}).get("Code", "") in NOT_IN_FLIGHT_CODES:
                return False
            raise
        return True


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
