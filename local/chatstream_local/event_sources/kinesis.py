"""An emulator of Lambda's Kinesis event source mapping, configured from template.yaml.

It polls each shard of the stream (moto in server mode, or anything speaking the Kinesis API),
builds the events Lambda builds (``Records[].kinesis`` with base64 ``data``, sequence numbers,
partition keys, arrival timestamps; ``eventSourceARN``, ``eventID`` ``shardId-…:seq`` …), invokes
the consumer through an injected invoker, and applies the mapping's settings as read from the
function's Kinesis event in the template:

- ``BatchSize``, ``StartingPosition`` (TRIM_HORIZON, LATEST);
- ``FunctionResponseTypes: [ReportBatchItemFailures]``: the function's ``batchItemFailures`` are
  checkpointed: processing resumes from the lowest failed sequence number; an empty or absent list
  means the whole batch succeeded; an invalid response (not JSON, an identifier that is empty or not
  in the batch) fails the whole batch;
- ``BisectBatchOnFunctionError``: a batch whose invocation failed is split in two (not counted as a
  retry) until the failing record is alone;
- ``MaximumRetryAttempts`` and ``MaximumRecordAgeInSeconds``: what is still failing after the retries,
  or older than the maximum age, is skipped and an on-failure record goes to the
  ``DestinationConfig.OnFailure`` queue in Lambda's shape (``requestContext``, ``responseContext``,
  ``version``, ``timestamp``, ``KinesisBatchInfo``; built and sent by
  :mod:`chatstream_local.lambda_.destinations`);
- a throttled invocation (the function at its reserved concurrency) is tried again after a pause, using no retry
  and splitting nothing, until its records are older than ``MaximumRecordAgeInSeconds``.

Each shard is read by its own :class:`ShardPoller` (the steps of a
:class:`~chatstream_local.event_sources.poller.Poller`), on its own thread (``start``/``stop``), or
deterministically, one batch per shard, with :meth:`EventSourceMapping.poll_once`. Checkpoints are kept in memory.

How records reach the mapping follows the template's ``Stream`` (:class:`ReadMode`), as ``EnhancedFanOut``
resolved it:

- the stream's ARN, a **standard iterator** (``EnhancedFanOut=false``): each shard is polled with
  ``GetRecords`` on Lambda's documented schedule (:class:`PollSchedule`). The Lambda developer guide
  (with-kinesis.html, "Polling and batching streams"): "Lambda polls each shard in your Kinesis stream for
  records at a base rate of once per second. When more records are available, Lambda keeps processing batches
  until the function catches up with the stream. The event source mapping shares read throughput with other
  consumers of the shard." The Kinesis developer guide (service-sizes-and-limits.html): "Each shard can
  support up to five read transactions per second." So a shard is read once a second while it is empty, again
  at once after a read that found records, and never more than five times in any second.
- an **enhanced fan-out consumer**'s ARN (``EnhancedFanOut=true``): Kinesis pushes records to the consumer over
  HTTP/2 (``SubscribeToShard``), "typically an average of 70 ms" after the put (Kinesis developer guide,
  building-consumers.html). Locally each ``GetRecords`` asks moto to hold an empty answer until a record is
  put (``push_wait_ms``, ``chatstream_local.moto.kinesis_push``), so records arrive at once without polling.

``ParallelizationFactor`` is not emulated: each shard is processed by one batch at a time, which
keeps the same per-partition-key order.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import TYPE_CHECKING, Any

from chatstream_local.account import ACCOUNT_ID
from chatstream_local.event_sources.poller import Attempt, Handled, Poller, batch_item_failures
from chatstream_local.event_sources.unemulated import warn_unemulated
from chatstream_local.lambda_.destinations import (
    RECORD_AGE_EXCEEDED,
    RETRY_ATTEMPTS_EXHAUSTED,
    KinesisOnFailureRecord,
    SqsDestination,
)
from chatstream_local.lambda_.exceptions import FunctionThrottled
from chatstream_local.moto import WAIT_HEADER
from chatstream_local.template import TemplateError

if TYPE_CHECKING:
    from collections.abc import Callable

    from mypy_boto3_kinesis import KinesisClient
    from mypy_boto3_sqs import SQSClient

    from chatstream_local.event_sources.invoker import InvokeOutcome, Invoker
    from chatstream_local.template import Template

logger = logging.getLogger(__name__)

POLL_INTERVAL_IDLE_S = 1.0  # Lambda polls a shard "at a base rate of once per second"
SHARD_READS_PER_SECOND = 5  # Kinesis: "up to five read transactions per second" per shard, shared by its readers
THROTTLE_WAIT_S = 0.5  # between tries of a throttled batch
PUSH_WAIT_MS = 500  # enhanced fan-out: how long one local GetRecords waits for a put before it is asked again


class ReadMode(Enum):
    """How Lambda reads the stream: what the event's ``Stream`` (template.yaml's ``EnhancedFanOut``) chose."""

    POLLING = "polling"  # a standard iterator: Lambda polls each shard with GetRecords
    ENHANCED_FAN_OUT = "enhanced-fan-out"  # a registered consumer: Kinesis pushes records (SubscribeToShard)

    @classmethod
    def of_stream(cls, stream: str) -> ReadMode:
        """The mode of a mapping's ``EventSourceArn``: a stream consumer's ARN (``…/consumer/…``) is read through
        enhanced fan-out, a stream's ARN with a standard iterator."""
        return cls.ENHANCED_FAN_OUT if "/consumer/" in stream else cls.POLLING


class PollSchedule:
    """When a standard-iterator poller reads its shard next (the rates in the module docstring).

    A read that found records is followed by another at once, one that found none by the next a second later
    (Lambda's base rate), and no read comes sooner than a second after the fifth-last one (the shard's limit).
    Times are any monotonic clock's, in seconds.
    """

    def __init__(
        self, idle_interval_s: float = POLL_INTERVAL_IDLE_S, reads_per_second: int = SHARD_READS_PER_SECOND
    ) -> None:
        if reads_per_second < 1:
            raise ValueError(f"a shard allows at least one read a second, got {reads_per_second}")
        self.idle_interval_s = idle_interval_s
        self._reads: deque[float] = deque(maxlen=reads_per_second)

    def read(self, at: float) -> None:
        """A ``GetRecords`` call was made at ``at``."""
        self._reads.append(at)

    def next_read(self, now: float, *, found_records: bool) -> float:
        """The earliest time for the next read, after the last one found records (or none) and ended at ``now``."""
        if not self._reads:
            return now
        earliest = now if found_records else self._reads[-1] + self.idle_interval_s
        if len(self._reads) == self._reads.maxlen:
            earliest = max(earliest, self._reads[0] + 1.0)
        return earliest


def _wait_header(wait_ms: int) -> Callable[..., None]:
    def add(request: Any, **_: Any) -> None:
        request.headers[WAIT_HEADER] = str(wait_ms)

    return add


# The Kinesis event's properties this emulator does (the others are named at start, unless they change nothing).
EMULATED = frozenset(
    {
        "Stream",
        "StartingPosition",
        "BatchSize",
        "BisectBatchOnFunctionError",
        "MaximumRetryAttempts",
        "MaximumRecordAgeInSeconds",
        "FunctionResponseTypes",
        "DestinationConfig",
    }
)


@dataclass(frozen=True)
class MappingSettings:
    """The event source mapping's settings (Lambda's defaults where the template says nothing)."""

    batch_size: int = 100
    starting_position: str = "LATEST"
    bisect_on_function_error: bool = False
    maximum_retry_attempts: int = -1  # -1: until the record expires
    maximum_record_age_s: int = -1  # -1: no limit
    report_batch_item_failures: bool = False
    on_failure_destination: str | None = None  # an SQS queue ARN

    @classmethod
    def from_event(cls, properties: dict[str, Any]) -> MappingSettings:
        """From the resolved ``Properties`` of a SAM ``Kinesis`` event."""
        destination = properties.get("DestinationConfig", {}).get("OnFailure", {}).get("Destination")
        starting_position = str(properties.get("StartingPosition", "LATEST"))
        if starting_position not in ("TRIM_HORIZON", "LATEST"):
            raise TemplateError(
                f"StartingPosition {starting_position!r}: the local mapping reads TRIM_HORIZON or LATEST"
            )
        return cls(
            batch_size=int(properties.get("BatchSize", 100)),
            starting_position=starting_position,
            bisect_on_function_error=_bool(properties.get("BisectBatchOnFunctionError", False)),
            maximum_retry_attempts=int(properties.get("MaximumRetryAttempts", -1)),
            maximum_record_age_s=int(properties.get("MaximumRecordAgeInSeconds", -1)),
            report_batch_item_failures="ReportBatchItemFailures" in properties.get("FunctionResponseTypes", []),
            on_failure_destination=None if destination is None else str(destination),
        )


@dataclass(frozen=True)
class _Record:
    sequence_number: str
    partition_key: str
    data: bytes
    arrival: float  # epoch seconds


_Attempt = Attempt[_Record]


@dataclass
class ShardStats:
    invocations: int = 0
    batches_sent_to_on_failure: int = 0
    records_delivered: int = 0
    throttles: int = 0  # invocations the function's reserved concurrency refused


class EventSourceMapping:
    """One Kinesis stream → one function, as Lambda's event source mapping does it."""

    def __init__(
        self,
        *,
        kinesis: KinesisClient,
        stream_name: str,
        invoke: Invoker,
        settings: MappingSettings,
        function_arn: str,
        sqs: SQSClient | None = None,
        region: str = "us-east-1",
        role_arn: str | None = None,
        read_mode: ReadMode = ReadMode.POLLING,
        push_wait_ms: int = PUSH_WAIT_MS,
        push_pause_s: float = 0.02,
        push_latency_s: float = 0.0,
        retry_delay_s: float = 0.0,
        now: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], object] | None = None,
    ) -> None:
        """``read_mode`` decides how shards are read (see the module docstring). With enhanced fan-out each
        ``GetRecords`` waits up to ``push_wait_ms`` for a put, and ``push_pause_s`` separates two empty answers (a
        moto without the push patch answers at once); a pushed batch is delivered ``push_latency_s`` after its first
        record's arrival (Kinesis's push latency, default none). ``now`` is the wall clock of record ages and on-failure
        records; ``monotonic`` and ``sleep`` (default: wait until :meth:`stop`) pace the polling."""
        if read_mode is ReadMode.ENHANCED_FAN_OUT and push_wait_ms:
            kinesis.meta.events.register("before-sign.kinesis.GetRecords", _wait_header(push_wait_ms))
        self.kinesis = kinesis
        self.stream_name = stream_name
        self.invoke = invoke
        self.settings = settings
        self.function_arn = function_arn
        self.sqs = sqs
        self.region = region
        self.role_arn = role_arn or f"arn:aws:iam::{ACCOUNT_ID}:role/{stream_name}-consumer-role"
        self.read_mode = read_mode
        self.push_pause_s = push_pause_s
        self.push_latency_s = push_latency_s
        self.retry_delay_s = retry_delay_s
        self.now = now
        self.monotonic = monotonic
        self._stop = threading.Event()
        self.sleep: Callable[[float], object] = sleep or self._stop.wait
        self._threads: list[threading.Thread] = []
        self._shards: dict[str, ShardPoller] | None = None
        self._lock = threading.Lock()
        self._stream_arn: str | None = None
        self._on_failure: SqsDestination | None = None  # the settings' on-failure destination, once it is used

    @classmethod
    def from_template(
        cls,
        template: Template,
        *,
        function_logical_id: str,
        kinesis: KinesisClient,
        invoke: Invoker,
        sqs: SQSClient | None = None,
        event_name: str | None = None,
        **kwargs: Any,
    ) -> EventSourceMapping:
        """The mapping of the function's Kinesis event in template.yaml, with the template's settings."""
        events = template.properties(function_logical_id).get("Events", {})
        kinesis_events = {name: ev for name, ev in events.items() if ev.get("Type") == "Kinesis"}
        if not kinesis_events:
            raise ValueError(f"{function_logical_id} has no Kinesis event in template.yaml")
        name = event_name or next(iter(kinesis_events))
        properties = kinesis_events[name]["Properties"]
        warn_unemulated(f"{function_logical_id}'s Kinesis event {name}", properties, EMULATED)
        stream_name = _stream_name(str(properties["Stream"]), template)
        kwargs.setdefault("read_mode", ReadMode.of_stream(str(properties["Stream"])))
        return cls(
            kinesis=kinesis,
            stream_name=stream_name,
            invoke=invoke,
            settings=MappingSettings.from_event(properties),
            function_arn=template.arn(function_logical_id),
            sqs=sqs,
            region=template.region,
            role_arn=f"arn:aws:iam::{ACCOUNT_ID}:role/{template.physical_name(function_logical_id)}-role",
            **kwargs,
        )

    # ------------------------------------------------------------------------------ control

    @property
    def stopping(self) -> threading.Event:
        """Set when :meth:`stop` is called: the shard readers' loops end."""
        return self._stop

    @property
    def stream_arn(self) -> str:
        if self._stream_arn is None:
            summary = self.kinesis.describe_stream_summary(StreamName=self.stream_name)
            self._stream_arn = summary["StreamDescriptionSummary"]["StreamARN"]
        return self._stream_arn

    def shards(self) -> dict[str, ShardPoller]:
        with self._lock:
            if self._shards is None:
                shard_ids = [s["ShardId"] for s in self.kinesis.list_shards(StreamName=self.stream_name)["Shards"]]
                self._shards = {shard_id: ShardPoller(self, shard_id) for shard_id in shard_ids}
            return self._shards

    def poll_once(self) -> int:
        """Read and deliver one batch (with its retries) on every shard; the number of records read."""
        return sum(reader.poll_once() for reader in self.shards().values())

    def drain(self, max_polls: int = 1000) -> int:
        """Poll until every shard is caught up; the number of records read."""
        total = 0
        for _ in range(max_polls):
            read = self.poll_once()
            total += read
            if read == 0:
                return total
        raise RuntimeError(f"the stream was not drained in {max_polls} polls")

    def start(self) -> EventSourceMapping:
        self._stop.clear()
        for reader in self.shards().values():
            thread = threading.Thread(target=reader.run, name=f"esm-{reader.shard_id}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)
        self._threads.clear()

    def stats(self) -> dict[str, ShardStats]:
        return {shard_id: reader.stats for shard_id, reader in self.shards().items()}

    def __enter__(self) -> EventSourceMapping:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------------------- helpers

    def event(self, shard_id: str, records: list[_Record]) -> dict[str, Any]:
        return {
            "Records": [
                {
                    "kinesis": {
                        "kinesisSchemaVersion": "1.0",
                        "partitionKey": record.partition_key,
                        "sequenceNumber": record.sequence_number,
                        "data": base64.b64encode(record.data).decode("ascii"),
                        "approximateArrivalTimestamp": record.arrival,
                    },
                    "eventSource": "aws:kinesis",
                    "eventVersion": "1.0",
                    "eventID": f"{shard_id}:{record.sequence_number}",
                    "eventName": "aws:kinesis:record",
                    "invokeIdentityArn": self.role_arn,
                    "awsRegion": self.region,
                    "eventSourceARN": self.stream_arn,
                }
                for record in records
            ]
        }

    def send_on_failure(
        self,
        shard_id: str,
        attempt: _Attempt,
        condition: str,
        last: InvokeOutcome | None,
    ) -> None:
        """Lambda's invocation record for a skipped batch, to the on-failure destination."""
        records = attempt.records
        record = KinesisOnFailureRecord(
            request_id=str(getattr(last, "request_id", None) or uuid.uuid4()),
            function_arn=self.function_arn,
            condition=condition,
            approximate_invoke_count=attempt.invocations,
            status_code=int(getattr(last, "status_code", 200) or 200),
            executed_version=str(getattr(last, "executed_version", "$LATEST") or "$LATEST"),
            function_error=None if last is None else last.function_error,
            timestamp=self.now(),
            shard_id=shard_id,
            start_sequence_number=records[0].sequence_number,
            end_sequence_number=records[-1].sequence_number,
            approximate_arrival_of_first_record=records[0].arrival,
            approximate_arrival_of_last_record=records[-1].arrival,
            batch_size=len(records),
            stream_arn=self.stream_arn,
        )
        logger.warning(
            "event source mapping: %d records of %s skipped (%s), on-failure record sent",
            len(records),
            shard_id,
            condition,
        )
        destination = self.settings.on_failure_destination
        if destination is None or self.sqs is None:
            return
        if self._on_failure is None:
            self._on_failure = SqsDestination(self.sqs, destination)
        self._on_failure.send(record)


class ShardPoller(Poller[_Record, "InvokeOutcome | None | FunctionThrottled"]):
    """Reads one shard and delivers its batches in order, with Lambda's retry semantics, in the steps of a
    :class:`~chatstream_local.event_sources.poller.Poller`:

    - fetch: ``GetRecords`` into a buffer (after what was read, else after the checkpoint, else from the mapping's
      ``StartingPosition``), and a batch of at most ``BatchSize`` from it; with enhanced fan-out, when Kinesis would
      push it;
    - filter: records older than ``MaximumRecordAgeInSeconds`` are skipped to the on-failure destination;
    - invoke: the mapping's event; a throttle is told apart, and an invoker that could not invoke counts as a
      function error;
    - handle: a throttled batch is tried again whole after a pause, using no retry; a partial batch response
      resumes from the lowest failed record; a function error bisects the batch (no retry used) or retries it; what
      still fails after ``MaximumRetryAttempts`` goes to the on-failure destination;
    - checkpoint: the batch's last sequence number, in memory;
    - on error (the mapping's own call failed: its on-failure send, the stream's description): the batch is read
      again at the next poll, the records it had delivered too (at least once, as Lambda delivers), so that failure
      costs a retry, never the records.
    """

    def __init__(self, mapping: EventSourceMapping, shard_id: str) -> None:
        super().__init__()
        self.mapping = mapping
        self.shard_id = shard_id
        self.stats = ShardStats()
        self.checkpointed: str | None = None  # the last sequence number done with
        self._read_upto: str | None = None  # the last sequence number read into the buffer
        self._iterator: str | None = None
        self._buffer: list[_Record] = []
        self.get_records_calls = 0

    def run(self) -> None:
        """Read and deliver until the mapping stops, in the mapping's :class:`ReadMode`."""
        if self.mapping.read_mode is ReadMode.POLLING:
            self._run_polling()
        else:
            self._run_pushed()

    def _run_polling(self) -> None:
        """Poll on Lambda's schedule (:class:`PollSchedule`), counting only the polls that called ``GetRecords``."""
        mapping = self.mapping
        schedule = PollSchedule()
        next_read = mapping.monotonic()
        while not mapping.stopping.is_set():
            wait = next_read - mapping.monotonic()
            if wait > 0:
                mapping.sleep(wait)
                continue
            calls, started = self.get_records_calls, mapping.monotonic()
            read = self._poll_safely()
            if self.get_records_calls != calls:
                schedule.read(started)
            next_read = schedule.next_read(mapping.monotonic(), found_records=read > 0)

    def _run_pushed(self) -> None:
        """Read as records are pushed: each ``GetRecords`` waits for a put (``push_wait_ms``)."""
        mapping = self.mapping
        while not mapping.stopping.is_set():
            if self._poll_safely() == 0:
                mapping.sleep(mapping.push_pause_s)

    def _poll_safely(self) -> int:
        try:
            return self.poll_once()
        except Exception:  # a poller survives a bad poll, as Lambda's does, and says why
            logger.exception("event source mapping: polling %s failed", self.shard_id)
            return 0

    # -------------------------------------------------------------------------------- fetch

    def fetch(self) -> list[_Record]:
        size = self.mapping.settings.batch_size
        if len(self._buffer) < size:
            self._fill(size - len(self._buffer))
        batch, self._buffer = self._buffer[:size], self._buffer[size:]
        if batch:
            self._await_push_latency(batch[0])
        return batch

    def _fill(self, limit: int) -> None:
        kinesis = self.mapping.kinesis
        if self._iterator is None:
            kwargs: dict[str, Any] = {"StreamName": self.mapping.stream_name, "ShardId": self.shard_id}
            position = self._read_upto or self.checkpointed
            if position is not None:
                kwargs.update(ShardIteratorType="AFTER_SEQUENCE_NUMBER", StartingSequenceNumber=position)
            else:
                kwargs.update(ShardIteratorType=self.mapping.settings.starting_position)
            self._iterator = kinesis.get_shard_iterator(**kwargs)["ShardIterator"]
        self.get_records_calls += 1
        try:
            response = kinesis.get_records(ShardIterator=self._iterator, Limit=max(1, min(limit, 10_000)))
        except Exception:
            self._iterator = None  # expired or invalid: the next poll starts again after what was read
            raise
        self._iterator = response.get("NextShardIterator")
        for raw in response["Records"]:
            arrival = raw.get("ApproximateArrivalTimestamp")
            self._buffer.append(
                _Record(
                    sequence_number=raw["SequenceNumber"],
                    partition_key=raw["PartitionKey"],
                    data=bytes(raw["Data"]),
                    arrival=arrival.timestamp() if isinstance(arrival, datetime) else self.mapping.now(),
                )
            )
            self._read_upto = raw["SequenceNumber"]
        # A closed shard (no next iterator) has nothing more to read; resharding is not emulated.

    def _await_push_latency(self, first: _Record) -> None:
        """Enhanced fan-out: wait until the batch's first record is ``push_latency_s`` old, as Kinesis pushes it."""
        mapping = self.mapping
        if mapping.read_mode is ReadMode.ENHANCED_FAN_OUT and mapping.push_latency_s:
            wait = first.arrival + mapping.push_latency_s - mapping.now()
            if wait > 0:
                mapping.sleep(wait)

    # ------------------------------------------------------------------------------- filter

    def filter(self, attempt: _Attempt) -> _Attempt | None:
        """Records older than the maximum record age are skipped (to the on-failure destination)."""
        limit = self.mapping.settings.maximum_record_age_s
        if limit < 0:
            return attempt
        now = self.mapping.now()
        expired = [record for record in attempt.records if now - record.arrival > limit]
        if not expired:
            return attempt
        self.stats.batches_sent_to_on_failure += 1
        skipped = _Attempt(expired, attempt.invocations, attempt.retries)
        self.mapping.send_on_failure(self.shard_id, skipped, RECORD_AGE_EXCEEDED, None)
        fresh = [record for record in attempt.records if now - record.arrival <= limit]
        return _Attempt(fresh, attempt.invocations, attempt.retries) if fresh else None

    # ------------------------------------------------------------------------------- invoke

    def invoke(self, attempt: _Attempt) -> InvokeOutcome | None | FunctionThrottled:
        payload = json.dumps(self.mapping.event(self.shard_id, attempt.records)).encode("utf-8")
        try:
            outcome = self.mapping.invoke(payload)
        except FunctionThrottled as throttled:
            return throttled
        except Exception:  # the invoker could not invoke: Lambda retries such errors like function errors
            self.stats.invocations += 1
            logger.exception("event source mapping: invoking %s failed", self.mapping.function_arn)
            return None
        self.stats.invocations += 1
        return outcome

    # ------------------------------------------------------------------------------- handle

    def handle(self, attempt: _Attempt, result: InvokeOutcome | None | FunctionThrottled) -> Handled[_Record]:
        settings = self.mapping.settings
        if isinstance(result, FunctionThrottled):
            # Throttled: tried again after a pause, using no retry and splitting nothing, until its records are
            # too old (Lambda: "retries ... until the record expires"); every shard's batches wait alike.
            self.stats.throttles += 1
            time.sleep(THROTTLE_WAIT_S)
            return Handled(again=[attempt])
        attempt.invocations += 1
        failed_from = self._failed_from(attempt.records, result)
        if failed_from is None:
            self.stats.records_delivered += len(attempt.records)
            return Handled(delivered=attempt.records)
        function_failed = failed_from == 0 and (result is None or result.function_error is not None)
        if function_failed and settings.bisect_on_function_error and len(attempt.records) > 1:
            # Splitting does not count as a retry.
            half = len(attempt.records) // 2
            return Handled(
                again=[
                    _Attempt(attempt.records[:half], attempt.invocations, attempt.retries),
                    _Attempt(attempt.records[half:], attempt.invocations, attempt.retries),
                ]
            )
        self.stats.records_delivered += failed_from
        delivered = attempt.records[:failed_from]
        remaining = _Attempt(attempt.records[failed_from:], attempt.invocations, attempt.retries + 1)
        if 0 <= settings.maximum_retry_attempts < remaining.retries:
            self.stats.batches_sent_to_on_failure += 1
            self.mapping.send_on_failure(self.shard_id, remaining, RETRY_ATTEMPTS_EXHAUSTED, result)
            return Handled(delivered=delivered)
        if self.mapping.retry_delay_s:
            time.sleep(self.mapping.retry_delay_s)
        return Handled(delivered=delivered, again=[remaining])

    def _failed_from(self, records: list[_Record], outcome: InvokeOutcome | None) -> int | None:
        """Index of the first record to retry, or None when the whole batch succeeded."""
        if outcome is None or outcome.function_error is not None:
            return 0
        if not self.mapping.settings.report_batch_item_failures:
            return None
        # A blank response is no response: a complete success
        failures = batch_item_failures(outcome.payload) if outcome.payload.strip() else []
        if failures is None:
            return 0  # an invalid response fails the whole batch
        if not failures:
            return None
        positions = {record.sequence_number: index for index, record in enumerate(records)}
        if any(identifier not in positions for identifier in failures):
            return 0
        return min(positions[identifier] for identifier in failures)

    # --------------------------------------------------------------------------- checkpoint

    def checkpoint(self, batch: list[_Record], delivered: list[_Record]) -> None:
        self.checkpointed = batch[-1].sequence_number

    def on_error(self, batch: list[_Record]) -> None:
        self._buffer[:0] = batch


def _stream_name(stream: str, template: Template) -> str:
    """The stream of the event's ``Stream`` (a stream ARN, or an enhanced fan-out consumer of the stream)."""
    if ":stream/" in stream:
        return stream.split(":stream/", 1)[1].split("/", 1)[0]
    streams = template.resources_of_type("AWS::Kinesis::Stream")
    if len(streams) != 1:
        raise ValueError(f"cannot tell which stream {stream!r} reads")
    return template.physical_name(streams[0])


def _bool(value: Any) -> bool:
    return value if isinstance(value, bool) else str(value).lower() == "true"
