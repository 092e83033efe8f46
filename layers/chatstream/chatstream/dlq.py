"""SQS adapter for the consumer's dead-letter queue (ConsumerDLQ).

Two kinds of message land there:

- **poison-record** messages, sent by the consumer: a record that is not a valid token record, with
  its payload (base64), the reason and its stream coordinates (see ``PoisonRecord.message``);
- **on-failure** records, sent by the event source mapping when a batch exhausted its retries or
  its maximum record age: Lambda's invocation record with ``KinesisBatchInfo`` (shard id and the
  start/end sequence numbers), without the records themselves.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from chatstream.materialize import POISON_MESSAGE_KIND, DeadLetterError

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

    from chatstream.materialize import PoisonRecord

KIND_POISON = POISON_MESSAGE_KIND
KIND_ON_FAILURE = "on-failure"
KIND_UNKNOWN = "unknown"
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


@dataclass(frozen=True)
class DlqMessage:
    message_id: str
    receipt_handle: str
    body: str

    def document(self) -> dict[str, Any] | None:
        """The body as a JSON object, or None if it is not one."""
        try:
            doc = json.loads(self.body)
        except ValueError:
            return None
        return doc if isinstance(doc, dict) else None

    @property
    def kind(self) -> str:
        doc = self.document()
        if doc is None:
            return KIND_UNKNOWN
        if doc.get("kind") == KIND_POISON:
            return KIND_POISON
        if isinstance(doc.get("KinesisBatchInfo"), dict) and isinstance(doc.get("requestContext"), dict):
            return KIND_ON_FAILURE
        return KIND_UNKNOWN


@dataclass
class DeadLetterQueue:
    """The DLQ: the consumer sends poison records to it; the redrive tool reads, deletes and releases."""

    client: SQSClient
    queue_url: str

    def send_poison(self, poison: PoisonRecord) -> None:
        body = json.dumps(poison.message(), separators=(",", ":"))
        try:
            self.client.send_message(QueueUrl=self.queue_url, MessageBody=body)
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

    def release(self, message: DlqMessage) -> None:
        """Make a received message visible again at once (it stays in the queue)."""
        self.client.change_message_visibility(
            QueueUrl=self.queue_url, ReceiptHandle=message.receipt_handle, VisibilityTimeout=0
        )
