"""An emulator of Lambda's SQS event source mapping, for the local stack.

Long-polls the queue in the AWS emulator, builds real SQS events (``Records[]`` with
``messageId``, ``receiptHandle``, ``body``, ``attributes``, ``md5OfBody``, ``eventSource:
aws:sqs``, ``eventSourceARN``, ``awsRegion``), invokes the function, and deletes what succeeded:
the whole batch after a success, all but the reported ``batchItemFailures`` when the function
uses ``ReportBatchItemFailures``, nothing after a function error (the messages come back after
their visibility timeout, as on Lambda). Settings (queue, batch size, response types) come from
the function's SQS event in template.yaml.

It is one :class:`~chatstream_local.event_sources.poller.Poller`: fetch is one ``ReceiveMessage`` (long polling);
nothing is filtered; handle reads the function error or the partial batch response (no message is retried here: the
queue redelivers what was not deleted); checkpoint deletes what the function processed.
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import TYPE_CHECKING, Any

from chatstream_local.event_sources.poller import Handled, Poller, batch_item_failures
from chatstream_local.event_sources.unemulated import warn_unemulated

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import MessageTypeDef

    from chatstream_local.event_sources.invoker import InvokeOutcome, Invoker
    from chatstream_local.event_sources.poller import Attempt
    from chatstream_local.template import Template

# The SQS event's properties this emulator does (the others are named at start, unless they change nothing).
EMULATED = frozenset({"Queue", "BatchSize", "FunctionResponseTypes"})


class SqsEventSource(Poller["MessageTypeDef", "InvokeOutcome"]):
    """One SQS queue → one function, as Lambda's event source mapping does it (one poller, one thread)."""

    def __init__(
        self,
        *,
        sqs: SQSClient,
        queue_url: str,
        queue_arn: str,
        invoke: Invoker,
        batch_size: int = 10,
        report_batch_item_failures: bool = False,
        region: str = "us-east-1",
        wait_s: int = 1,
    ) -> None:
        super().__init__()
        self.sqs = sqs
        self.queue_url = queue_url
        self.queue_arn = queue_arn
        self.invoker = invoke
        self.batch_size = batch_size
        self.report_batch_item_failures = report_batch_item_failures
        self.region = region
        self.wait_s = wait_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def from_template(
        cls, template: Template, *, function_logical_id: str, sqs: SQSClient, invoke: Invoker
    ) -> SqsEventSource:
        events = template.properties(function_logical_id).get("Events", {})
        sqs_events = [event["Properties"] for event in events.values() if event.get("Type") == "SQS"]
        if not sqs_events:
            raise ValueError(f"{function_logical_id} has no SQS event in template.yaml")
        properties = sqs_events[0]
        warn_unemulated(f"{function_logical_id}'s SQS event", properties, EMULATED)
        queue_arn = str(properties["Queue"])
        queue_name = queue_arn.rsplit(":", 1)[-1]
        return cls(
            sqs=sqs,
            queue_url=sqs.get_queue_url(QueueName=queue_name)["QueueUrl"],
            queue_arn=queue_arn,
            invoke=invoke,
            batch_size=int(properties.get("BatchSize", 10)),
            report_batch_item_failures="ReportBatchItemFailures" in properties.get("FunctionResponseTypes", []),
            region=template.region,
        )

    def event(self, messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return {
            "Records": [
                {
                    "messageId": message["MessageId"],
                    "receiptHandle": message["ReceiptHandle"],
                    "body": message["Body"],
                    "attributes": message.get("Attributes", {}),
                    "messageAttributes": message.get("MessageAttributes", {}),
                    "md5OfBody": message.get("MD5OfBody") or hashlib.md5(message["Body"].encode()).hexdigest(),  # noqa: S324
                    "eventSource": "aws:sqs",
                    "eventSourceARN": self.queue_arn,
                    "awsRegion": self.region,
                }
                for message in messages
            ]
        }

    # ---------------------------------------------------------------------------- the steps

    def fetch(self) -> list[MessageTypeDef]:
        """One batch: a ``ReceiveMessage`` that waits up to ``wait_s`` for a message."""
        return self.sqs.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=min(self.batch_size, 10),
            WaitTimeSeconds=self.wait_s,
            AttributeNames=["All"],
        ).get("Messages", [])

    def invoke(self, attempt: Attempt[MessageTypeDef]) -> InvokeOutcome:
        return self.invoker(json.dumps(self.event(attempt.records)).encode())

    def handle(self, attempt: Attempt[MessageTypeDef], result: InvokeOutcome) -> Handled[MessageTypeDef]:
        """What the function processed. A function error, or an invalid partial batch response, processed nothing:
        the messages come back after their visibility timeout."""
        messages = attempt.records
        if result.function_error:
            return Handled()
        failed: set[str] = set()
        if self.report_batch_item_failures:
            failed_or_none = _batch_item_failures(result.payload, {m["MessageId"] for m in messages})
            if failed_or_none is None:
                return Handled()  # an invalid response fails the whole batch
            failed = failed_or_none
        return Handled(delivered=[m for m in messages if m["MessageId"] not in failed])

    def checkpoint(self, batch: list[MessageTypeDef], delivered: list[MessageTypeDef]) -> None:
        """Delete what the function processed."""
        if delivered:
            self.sqs.delete_message_batch(
                QueueUrl=self.queue_url,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(delivered)],
            )

    # ------------------------------------------------------------------------------ control

    def start(self) -> SqsEventSource:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="sqs-event-source", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll_once()
            except Exception:  # the emulator keeps polling, as the service does
                self._stop.wait(1.0)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None


def _batch_item_failures(payload: bytes | None, message_ids: set[str]) -> set[str] | None:
    """The message ids a partial batch response reports failed, or ``None`` when the response fails the whole batch.

    As Lambda reads it (services-sqs-errorhandling, :func:`~chatstream_local.event_sources.poller.batch_item_failures`):
    no response is a complete success, and so is an empty object; an ``itemIdentifier`` that names no message of the
    batch is a complete failure."""
    identifiers = batch_item_failures(payload or b"null")
    if identifiers is None or any(identifier not in message_ids for identifier in identifiers):
        return None
    return set(identifiers)
