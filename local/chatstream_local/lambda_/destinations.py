"""Lambda's invocation records and their delivery to an on-failure destination (LocalStack's ``event_manager``).

When Lambda gives up on work it sends a record of it, a JSON document, to the destination the function or the
mapping names. Two records, in the shapes AWS documents them:

- an asynchronous invocation's ``OnFailure`` record (:class:`AsyncOnFailureRecord`; Lambda developer guide,
  "Capturing records of Lambda asynchronous invocations"): ``version``, ``timestamp``, ``requestContext``
  (``requestId``, ``functionArn``, ``condition``, ``approximateInvokeCount``), ``requestPayload``, and for an event
  that ran, ``responseContext`` and ``responsePayload``. The event it records is a :class:`FailedEvent`: its retries
  used (:data:`RETRIES_EXHAUSTED`) or too old (:data:`EVENT_AGE_EXCEEDED`);
- a Kinesis event source mapping's on-failure record (:class:`KinesisOnFailureRecord`; "Retain discarded batch
  records for a Kinesis Data Streams event source"): ``requestContext``, ``responseContext``, ``version``,
  ``timestamp`` and ``KinesisBatchInfo`` (the shard, the batch's first and last sequence numbers and arrivals, its
  size, the stream), for a batch skipped after its retries (:data:`RETRY_ATTEMPTS_EXHAUSTED`) or too old
  (:data:`RECORD_AGE_EXCEEDED`). It carries no records: a consumer reads them back from the stream.

:class:`SqsDestination` sends either record to an SQS queue, the one destination type the local stack delivers to.
:class:`AsyncFailureDestinations` is the local Lambda's ``on_failure``: each function's ``EventInvokeConfig``
destination from the template, and one log line for each event given up on.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from mypy_boto3_sqs import SQSClient

    from chatstream_local.lambda_.invocation import FunctionError
    from chatstream_local.template import Template

# An asynchronous invocation's conditions
RETRIES_EXHAUSTED = "RetriesExhausted"
EVENT_AGE_EXCEEDED = "EventAgeExceeded"
# An event source mapping's conditions
RETRY_ATTEMPTS_EXHAUSTED = "RetryAttemptsExhausted"
RECORD_AGE_EXCEEDED = "RecordAgeExceeded"

RECORD_VERSION = "1.0"


@dataclass(frozen=True)
class FailedEvent:
    """An asynchronous event Lambda gave up on: what its on-failure destination record says."""

    name: str  # the function's
    payload: bytes
    condition: str  # RETRIES_EXHAUSTED or EVENT_AGE_EXCEEDED
    error: FunctionError | None  # the last invocation's; None when it never ran (throttled until too old)
    request_id: str  # the event's: the Invoke's x-amzn-RequestId, every attempt's aws_request_id
    attempts: int  # the invocations made


class InvocationRecord(Protocol):
    """A record a destination receives."""

    def encode(self) -> str: ...


@dataclass(frozen=True)
class AsyncOnFailureRecord:
    """The record of an asynchronous invocation Lambda gave up on, as its ``OnFailure`` destination receives it."""

    request_id: str
    function_arn: str  # qualified: the version that ran
    condition: str
    approximate_invoke_count: int
    request_payload: Any  # the event: its JSON, or its text when it is not JSON
    response_payload: dict[str, Any] | None  # the last invocation's error document; None when the event never ran
    timestamp: float  # epoch seconds

    @classmethod
    def of(cls, failed: FailedEvent, function_arn: str, timestamp: float) -> AsyncOnFailureRecord:
        try:
            request_payload = json.loads(failed.payload or b"null")
        except ValueError:
            request_payload = failed.payload.decode("utf-8", "replace")
        return cls(
            request_id=failed.request_id,
            function_arn=function_arn,
            condition=failed.condition,
            approximate_invoke_count=failed.attempts,
            request_payload=request_payload,
            response_payload=None if failed.error is None else failed.error.document(),
            timestamp=timestamp,
        )

    def document(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "version": RECORD_VERSION,
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(self.timestamp)),  # whole seconds
            "requestContext": {
                "requestId": self.request_id,
                "functionArn": self.function_arn,
                "condition": self.condition,
                "approximateInvokeCount": self.approximate_invoke_count,
            },
            "requestPayload": self.request_payload,
        }
        if self.response_payload is not None:  # an event that never ran has no response
            body["responseContext"] = {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"}
            body["responsePayload"] = self.response_payload
        return body

    def encode(self) -> str:
        return json.dumps(self.document())


@dataclass(frozen=True)
class KinesisOnFailureRecord:
    """The record of a Kinesis batch an event source mapping skipped, as its on-failure destination receives it."""

    request_id: str  # the last invocation's (a new one when the batch was never invoked)
    function_arn: str
    condition: str
    approximate_invoke_count: int
    status_code: int
    executed_version: str
    function_error: str | None  # the last invocation's ("Unhandled"); None when it succeeded or never ran
    timestamp: float  # epoch seconds
    shard_id: str
    start_sequence_number: str
    end_sequence_number: str
    approximate_arrival_of_first_record: float  # epoch seconds
    approximate_arrival_of_last_record: float
    batch_size: int
    stream_arn: str

    def document(self) -> dict[str, Any]:
        return {
            "requestContext": {
                "requestId": self.request_id,
                "functionArn": self.function_arn,
                "condition": self.condition,
                "approximateInvokeCount": self.approximate_invoke_count,
            },
            "responseContext": {
                "statusCode": self.status_code,
                "executedVersion": self.executed_version,
                "functionError": self.function_error,
            },
            "version": RECORD_VERSION,
            "timestamp": _iso(self.timestamp),
            "KinesisBatchInfo": {
                "shardId": self.shard_id,
                "startSequenceNumber": self.start_sequence_number,
                "endSequenceNumber": self.end_sequence_number,
                "approximateArrivalOfFirstRecord": _iso(self.approximate_arrival_of_first_record),
                "approximateArrivalOfLastRecord": _iso(self.approximate_arrival_of_last_record),
                "batchSize": self.batch_size,
                "streamArn": self.stream_arn,
            },
        }

    def encode(self) -> str:
        return json.dumps(self.document())


class SqsDestination:
    """An SQS queue as a destination, named by its ARN (``DestinationConfig.OnFailure.Destination``)."""

    def __init__(self, sqs: SQSClient, queue_arn: str) -> None:
        self.sqs = sqs
        self.queue_name = queue_arn.rsplit(":", 1)[-1]
        self._queue_url: str | None = None

    def send(self, record: InvocationRecord) -> None:
        """Send ``record`` as one message. A failure of SQS's calls propagates: the sender decides what it costs."""
        if self._queue_url is None:
            self._queue_url = self.sqs.get_queue_url(QueueName=self.queue_name)["QueueUrl"]
        self.sqs.send_message(QueueUrl=self._queue_url, MessageBody=record.encode())


@dataclass(frozen=True)
class _AsyncTarget:
    function_arn: str  # qualified, as the record names it
    destination: SqsDestination | None  # None: the function has no SQS OnFailure destination


class AsyncFailureDestinations:
    """Where the local Lambda sends the asynchronous events it gave up on: each function's ``OnFailure``.

    Call it with a :class:`FailedEvent` (it is an :class:`~chatstream_local.lambda_.invoke.InvokeEndpoint`'s
    ``on_failure``): it logs one line, ``<function>: asynchronous invocation failed: <errorType>: <errorMessage>``
    (or ``asynchronous event dropped: <condition> (it never ran)``) and where the record went, and sends the
    :class:`AsyncOnFailureRecord` there. ``label`` shortens a resource name for the log.
    """

    def __init__(
        self,
        targets: Mapping[str, _AsyncTarget],
        *,
        log: Callable[[str], None],
        label: Callable[[str], str] = str,
        now: Callable[[], float] = time.time,
    ) -> None:
        self._targets = dict(targets)
        self._log = log
        self._label = label
        self._now = now

    @classmethod
    def from_template(
        cls,
        template: Template,
        *,
        sqs: SQSClient,
        log: Callable[[str], None],
        now: Callable[[], float] = time.time,
    ) -> AsyncFailureDestinations:
        """Each function's ``EventInvokeConfig.DestinationConfig.OnFailure`` in template.yaml (an SQS queue only)."""
        targets = {}
        for logical_id in template.resources_of_type("AWS::Serverless::Function"):
            settings = template.function_settings(logical_id)
            on_failure = settings.get("EventInvokeConfig", {}).get("DestinationConfig", {}).get("OnFailure", {})
            destination = None
            if on_failure.get("Type") == "SQS":
                destination = SqsDestination(sqs, str(on_failure["Destination"]))
            targets[template.physical_name(logical_id)] = _AsyncTarget(
                f"{template.arn(logical_id)}:$LATEST", destination
            )
        return cls(targets, log=log, label=template.short_name, now=now)

    def __call__(self, failed: FailedEvent) -> None:
        name = failed.name
        target = self._targets.get(name, _AsyncTarget(name, None))
        if failed.error is None:  # throttled until too old: it never ran
            failure = f"{self._label(name)}: asynchronous event dropped: {failed.condition} (it never ran)"
        else:
            document = failed.error.document()
            error_type = document.get("errorType") or failed.error.error_type
            failure = (
                f"{self._label(name)}: asynchronous invocation failed: {error_type}: "
                + " ".join(str(document.get("errorMessage", "")).split())[:300]
            )
        if target.destination is None:
            self._log(f"{failure}; no SQS destination")
            return
        self._log(f"{failure}; sent to {self._label(target.destination.queue_name)}")
        target.destination.send(AsyncOnFailureRecord.of(failed, target.function_arn, self._now()))


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
