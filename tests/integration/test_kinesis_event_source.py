"""The Kinesis event source mapping emulator against moto in server mode, with the template's own settings."""

from __future__ import annotations

import base64
import dataclasses
import json
import threading
import time
import urllib.request
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from moto.moto_server.threaded_moto_server import ThreadedMotoServer

from chatstream.kinesis import TokenStreamWriter
from chatstream.records import TokenRecord
from chatstream.status import TurnStatus
from chatstream.table import ChatTable
from chatstream_local.event_sources import kinesis as kinesis_source
from chatstream_local.event_sources.invoker import Invoked
from chatstream_local.event_sources.kinesis import SHARD_READS_PER_SECOND, EventSourceMapping, ReadMode
from chatstream_local.lambda_.destinations import RECORD_AGE_EXCEEDED, RETRY_ATTEMPTS_EXHAUSTED
from chatstream_local.lambda_.exceptions import FunctionThrottled
from chatstream_local.resources import create_queue, create_stream, create_table
from chatstream_local.template import Template
from tests.builders import turn_records
from tests.support import FakeContext, load_function

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

pytestmark = pytest.mark.integration

REGION = "us-east-1"
OWNER = "alice"


class Stack:
    """Stream, table and DLQ from template.yaml, in a moto server on 127.0.0.1."""

    def __init__(self, url: str, template: Template) -> None:
        self.url = url
        self.template = template
        self.kinesis = boto3.client("kinesis", region_name=REGION, endpoint_url=url)
        self.sqs = boto3.client("sqs", region_name=REGION, endpoint_url=url)
        self.dynamodb = boto3.client("dynamodb", region_name=REGION, endpoint_url=url)
        self.stream_name = create_stream(self.kinesis, template, shard_count=1)  # one shard: batches are predictable
        self.table_name = create_table(self.dynamodb, template)
        self.dlq_url = create_queue(self.sqs, template, "ConsumerDLQ")
        self.table = ChatTable(self.dynamodb, self.table_name, sleep=lambda _: None)
        self.writer = TokenStreamWriter(self.kinesis, self.stream_name)

    def put(self, data: bytes, partition_key: str) -> str:
        return self.kinesis.put_record(StreamName=self.stream_name, Data=data, PartitionKey=partition_key)[
            "SequenceNumber"
        ]

    def dlq_bodies(self) -> list[dict[str, Any]]:
        messages = self.sqs.receive_message(QueueUrl=self.dlq_url, MaxNumberOfMessages=10).get("Messages", [])
        return [json.loads(message["Body"]) for message in messages]

    def mapping(
        self, invoke: Callable[[bytes], Any], template: Template | None = None, **kwargs: Any
    ) -> EventSourceMapping:
        return EventSourceMapping.from_template(
            template or self.template,
            function_logical_id="ConsumerFunction",
            kinesis=self.kinesis,
            sqs=self.sqs,
            invoke=invoke,
            **kwargs,
        )


@pytest.fixture(scope="module")
def moto_server() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def stack(aws_env: None, moto_server: str, template: Template) -> Iterator[Stack]:
    yield Stack(moto_server, template)
    # Each test gets a fresh backend.
    urllib.request.urlopen(urllib.request.Request(f"{moto_server}/moto-api/reset", method="POST")).close()


class Recorder:
    """Wraps an invoker; keeps every event it was given and whether the invocation failed."""

    def __init__(self, inner: Callable[[dict[str, Any]], Invoked]) -> None:
        self.inner = inner
        self.calls: list[tuple[dict[str, Any], Invoked]] = []
        self._lock = threading.Lock()

    def __call__(self, payload: bytes) -> Invoked:
        event = json.loads(payload)
        result = self.inner(event)
        with self._lock:
            self.calls.append((event, result))
        return result

    def sequence_numbers(self, call: int) -> list[str]:
        return [r["kinesis"]["sequenceNumber"] for r in self.calls[call][0]["Records"]]


@pytest.fixture
def consumer(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Recorder:
    """The real ConsumerFunction handler, in process, against the moto server."""
    for name, value in stack.template.function_settings("ConsumerFunction")["Environment"]["Variables"].items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("CHAT_TABLE_NAME", stack.table_name)
    monkeypatch.setenv("DLQ_URL", stack.dlq_url)
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", stack.url)
    monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", stack.url)
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    app = load_function("consumer")

    def invoke(event: dict[str, Any]) -> Invoked:
        try:
            return Invoked(json.dumps(app.handler(event, FakeContext("ConsumerFunction"))).encode())
        except Exception as err:
            return Invoked(
                json.dumps({"errorType": type(err).__name__, "errorMessage": str(err)}).encode(), "Unhandled"
            )

    return Recorder(invoke)


def write_turn(stack: Stack, words: list[str]) -> tuple[str, int]:
    session_id = stack.table.create_session(OWNER)
    turn = stack.table.turns.start_next(session_id, OWNER, "hello")
    for record in turn_records(session_id, turn, words):
        stack.writer.put(record)
    return session_id, turn


def test_the_mapping_takes_its_settings_from_template_yaml(stack, template) -> None:
    # GIVEN the consumer's Kinesis event in template.yaml
    props = template.properties("ConsumerFunction")["Events"]["TokenStream"]["Properties"]
    # WHEN the mapping is built from the template
    mapping = stack.mapping(lambda payload: Invoked(b"{}"))
    # THEN it has the template's settings and reads the template's stream
    settings = mapping.settings
    assert settings.batch_size == int(props["BatchSize"])
    assert settings.starting_position == props["StartingPosition"]
    assert settings.bisect_on_function_error is props["BisectBatchOnFunctionError"]
    assert settings.maximum_retry_attempts == int(props["MaximumRetryAttempts"])
    assert settings.maximum_record_age_s == int(props["MaximumRecordAgeInSeconds"])
    assert settings.report_batch_item_failures is True
    assert settings.on_failure_destination == template.arn("ConsumerDLQ")
    assert mapping.stream_name == stack.stream_name


def test_a_turn_on_the_stream_reaches_the_table_through_the_real_consumer(stack, consumer) -> None:
    # GIVEN a whole turn on the stream
    session_id, turn = write_turn(stack, ["You", " said:", " hello"])
    mapping = stack.mapping(consumer)
    # WHEN the mapping polls until caught up
    read = mapping.drain()
    # THEN the consumer got real-shaped events and the turn is complete with the exact text
    assert read == 5
    record = consumer.calls[0][0]["Records"][0]
    assert record["eventSource"] == "aws:kinesis" and record["eventName"] == "aws:kinesis:record"
    assert record["eventSourceARN"].endswith(f":stream/{stack.stream_name}")
    assert record["eventID"] == f"shardId-000000000000:{record['kinesis']['sequenceNumber']}"
    assert record["kinesis"]["partitionKey"] == session_id and record["awsRegion"] == REGION
    assert TokenRecord.decode(base64.b64decode(record["kinesis"]["data"])).type.value == "start"
    assert isinstance(record["kinesis"]["approximateArrivalTimestamp"], float)
    stored = stack.table.get_turn(session_id, turn)
    assert stored is not None and (stored.status, stored.assistant) == (TurnStatus.COMPLETE, "You said: hello")


def test_started_mapping_follows_the_stream_until_stopped(stack, consumer) -> None:
    # GIVEN a started mapping
    mapping = stack.mapping(consumer).start()
    try:
        # WHEN a turn is written to the stream
        session_id, turn = write_turn(stack, ["live", " tokens"])
        # THEN its thread materializes it
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            stored = stack.table.get_turn(session_id, turn)
            if stored is not None and stored.finished:
                break
            time.sleep(0.02)
        assert stored is not None and stored.assistant == "live tokens"
    finally:
        mapping.stop()
    # AND after stop, no thread is left running
    assert not [t for t in threading.enumerate() if t.name.startswith("esm-")]


def fail_on_bad(event: dict[str, Any]) -> Invoked:
    """A consumer that fails any batch holding the record ``bad``."""
    if any(base64.b64decode(r["kinesis"]["data"]) == b"bad" for r in event["Records"]):
        return Invoked(b'{"errorType":"Boom","errorMessage":"bad record"}', "Unhandled")
    return Invoked(b'{"batchItemFailures":[]}')


def test_a_failing_record_is_isolated_by_bisect_retried_and_sent_to_the_dlq(stack) -> None:
    # GIVEN a consumer that fails any batch containing one bad record
    good = [stack.put(f"ok-{i}".encode(), "k") for i in range(6)]
    bad = stack.put(b"bad", "k")
    good += [stack.put(f"ok-{i}".encode(), "k") for i in range(6, 9)]

    recorder = Recorder(fail_on_bad)
    mapping = stack.mapping(recorder)
    # WHEN the mapping processes the stream
    mapping.drain()
    # THEN every good record was delivered in a successful invocation, in order, exactly once
    delivered = [
        seq
        for index, (_, result) in enumerate(recorder.calls)
        if result.function_error is None
        for seq in recorder.sequence_numbers(index)
    ]
    assert delivered == good
    # AND the bad record alone was retried the template's number of times, then sent to the DLQ
    alone = [index for index in range(len(recorder.calls)) if recorder.sequence_numbers(index) == [bad]]
    assert len(alone) == mapping.settings.maximum_retry_attempts + 1
    (body,) = stack.dlq_bodies()
    assert body["version"] == "1.0" and body["requestContext"]["condition"] == RETRY_ATTEMPTS_EXHAUSTED
    assert body["requestContext"]["functionArn"] == stack.template.arn("ConsumerFunction")
    assert body["requestContext"]["approximateInvokeCount"] >= len(alone)
    assert body["responseContext"] == {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"}
    info = body["KinesisBatchInfo"]
    assert (info["shardId"], info["startSequenceNumber"], info["endSequenceNumber"], info["batchSize"]) == (
        "shardId-000000000000",
        bad,
        bad,
        1,
    )
    assert info["streamArn"] == mapping.stream_arn
    assert info["approximateArrivalOfFirstRecord"].endswith("Z") and body["timestamp"].endswith("Z")


def test_a_failure_of_the_mappings_own_calls_costs_a_retry_never_the_records(stack, monkeypatch) -> None:
    # GIVEN records around a bad one, a consumer that fails any batch holding it, and the mapping's first on-failure
    # send failing (SQS unavailable for a moment)
    before = [stack.put(f"ok-{i}".encode(), "k") for i in range(3)]
    bad = stack.put(b"bad", "k")
    after = [stack.put(f"ok-{i}".encode(), "k") for i in range(3, 6)]

    recorder = Recorder(fail_on_bad)
    mapping = stack.mapping(recorder)
    send = mapping.send_on_failure
    failures = iter([RuntimeError("SQS unavailable")])

    def flaky_send(*args: Any) -> None:
        failure = next(failures, None)
        if failure is not None:
            raise failure
        send(*args)

    monkeypatch.setattr(mapping, "send_on_failure", flaky_send)
    # WHEN the mapping processes the stream: its poll fails once (a running mapping's poller logs it and goes on)
    with pytest.raises(RuntimeError, match="SQS unavailable"):
        mapping.drain()
    mapping.drain()
    # THEN every good record was delivered (some twice, as Lambda may), and the bad one reached the DLQ
    delivered = {
        seq
        for index, (_, result) in enumerate(recorder.calls)
        if result.function_error is None
        for seq in recorder.sequence_numbers(index)
    }
    assert delivered == set(before + after)
    (body,) = stack.dlq_bodies()
    assert body["KinesisBatchInfo"]["startSequenceNumber"] == bad


def test_reported_batch_item_failures_resume_from_the_lowest_failed_record(stack) -> None:
    # GIVEN five records and a consumer that reports the 4th and the 3rd as failed, once
    sequence_numbers = [stack.put(f"r{i}".encode(), "k") for i in range(5)]
    state = {"failed_once": False}

    def partial(event: dict[str, Any]) -> Invoked:
        if state["failed_once"]:
            return Invoked(b'{"batchItemFailures":[]}')
        state["failed_once"] = True
        failures = [{"itemIdentifier": sequence_numbers[3]}, {"itemIdentifier": sequence_numbers[2]}]
        return Invoked(json.dumps({"batchItemFailures": failures}).encode())

    recorder = Recorder(partial)
    # WHEN the mapping processes the stream
    stack.mapping(recorder).drain()
    # THEN the retry starts at the 3rd record: the first two are not redelivered
    assert recorder.sequence_numbers(0) == sequence_numbers
    assert recorder.sequence_numbers(1) == sequence_numbers[2:]
    assert len(recorder.calls) == 2 and stack.dlq_bodies() == []


@pytest.mark.parametrize(
    "response",
    [b"not json", b'{"batchItemFailures":[{"itemIdentifier":""}]}', b'{"batchItemFailures":[{"itemIdentifier":"1"}]}'],
    ids=["not-json", "empty-identifier", "unknown-identifier"],
)
def test_an_invalid_response_fails_the_whole_batch(stack, response) -> None:
    # GIVEN a consumer whose first response is invalid
    sequence_numbers = [stack.put(f"r{i}".encode(), "k") for i in range(3)]
    answers = [response]

    def invalid_once(event: dict[str, Any]) -> Invoked:
        return Invoked(answers.pop() if answers else b"")

    recorder = Recorder(invalid_once)
    # WHEN the mapping processes the stream
    stack.mapping(recorder).drain()
    # THEN the whole batch is delivered again (and an empty response counts as success)
    assert [recorder.sequence_numbers(i) for i in range(len(recorder.calls))] == [sequence_numbers] * 2


def test_records_older_than_the_maximum_age_are_skipped_to_the_dlq_without_an_invocation(stack) -> None:
    # GIVEN records and a clock past the template's maximum record age
    sequence_numbers = [stack.put(f"r{i}".encode(), "k") for i in range(3)]
    recorder = Recorder(lambda event: Invoked(b"{}"))
    probe = stack.mapping(recorder)
    later = time.time() + probe.settings.maximum_record_age_s + 60
    mapping = stack.mapping(recorder, now=lambda: later)
    # WHEN the mapping processes the stream
    mapping.drain()
    # THEN nothing was invoked and the range is in the DLQ as RecordAgeExceeded
    assert recorder.calls == []
    (body,) = stack.dlq_bodies()
    assert body["requestContext"]["condition"] == RECORD_AGE_EXCEEDED
    info = body["KinesisBatchInfo"]
    assert (info["startSequenceNumber"], info["endSequenceNumber"], info["batchSize"]) == (
        sequence_numbers[0],
        sequence_numbers[-1],
        3,
    )


# ------------------------------------------------------------------------------- how records reach the mapping


class VirtualClock:
    """A monotonic clock that a poller's sleep advances at once; it stops the mapping at ``horizon_s``."""

    def __init__(self, horizon_s: float) -> None:
        self.t = 0.0
        self.horizon_s = horizon_s
        self.stopping: threading.Event | None = None

    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds
        if self.t >= self.horizon_s and self.stopping is not None:
            self.stopping.set()


def polled_reads(stack: Stack, horizon_s: float, batch_size: int | None = None) -> list[tuple[float, int]]:
    """Run the template's polling mapping on virtual time until ``horizon_s``: (time, records) of each GetRecords."""
    clock = VirtualClock(horizon_s)
    reads: list[tuple[float, int]] = []
    stack.kinesis.meta.events.register(
        "after-call.kinesis.GetRecords", lambda parsed, **_: reads.append((clock.t, len(parsed["Records"])))
    )
    mapping = stack.mapping(
        lambda payload: Invoked(b"{}"),
        template=Template.load(region=REGION, parameter_overrides={"EnhancedFanOut": "false"}),
        monotonic=clock.monotonic,
        sleep=clock.sleep,
    )
    if batch_size is not None:
        mapping.settings = dataclasses.replace(mapping.settings, batch_size=batch_size)
    clock.stopping = mapping.stopping
    (reader,) = mapping.shards().values()
    reader.run()  # returns when the virtual clock passes the horizon
    return reads


@pytest.mark.parametrize(
    ("enhanced_fan_out", "mode"), [("false", ReadMode.POLLING), ("true", ReadMode.ENHANCED_FAN_OUT)]
)
def test_the_read_mode_follows_the_templates_enhanced_fan_out(stack, enhanced_fan_out, mode) -> None:
    # GIVEN template.yaml resolved with EnhancedFanOut set
    template = Template.load(region=REGION, parameter_overrides={"EnhancedFanOut": enhanced_fan_out})
    # WHEN the mapping is built from it
    mapping = stack.mapping(lambda payload: Invoked(b"{}"), template=template)
    # THEN it reads the stream as that choice does (a consumer's ARN means enhanced fan-out), the same stream
    stream = template.properties("ConsumerFunction")["Events"]["TokenStream"]["Properties"]["Stream"]
    assert mapping.read_mode is mode and ReadMode.of_stream(stream) is mode
    assert mapping.stream_name == stack.stream_name


def test_polling_reads_an_idle_shard_once_a_second(stack) -> None:
    # GIVEN an empty shard and a mapping on a standard iterator (EnhancedFanOut=false)
    # WHEN it runs for ten seconds of virtual time
    reads = polled_reads(stack, horizon_s=10.0)
    # THEN it called GetRecords once a second: at 0, 1, …, 9 s, and found nothing
    assert [t for t, _ in reads] == [float(second) for second in range(10)]
    assert {records for _, records in reads} == {0}


def test_polling_reads_back_to_back_while_batches_come_and_at_most_five_times_a_second(stack) -> None:
    # GIVEN 23 records on the shard and batches of 2: twelve reads find records
    for i in range(23):
        stack.put(f"r{i}".encode(), "k")
    # WHEN the polling mapping runs for six seconds of virtual time
    reads = polled_reads(stack, horizon_s=6.0, batch_size=2)
    times = [t for t, _ in reads]
    # THEN while reads find records the next one comes at once, five in the shard's second, then the next second
    assert [records for _, records in reads[:13]] == [2] * 11 + [1, 0]
    assert times[:13] == [0.0] * 5 + [1.0] * 5 + [2.0] * 3
    # AND never more than five reads in any one second, and once a second when the shard is empty again
    limit = SHARD_READS_PER_SECOND
    assert all(times[i + limit] - times[i] >= 1.0 for i in range(len(times) - limit))
    assert times[13:] == [3.0, 4.0, 5.0]


def test_enhanced_fan_out_delivers_a_put_to_the_read_already_waiting(stack) -> None:
    # GIVEN a mapping through an enhanced fan-out consumer (EnhancedFanOut=true), its first GetRecords waiting
    template = Template.load(region=REGION, parameter_overrides={"EnhancedFanOut": "true"})
    recorder = Recorder(lambda event: Invoked(b"{}"))
    waiting = threading.Event()
    answers: list[int] = []
    stack.kinesis.meta.events.register("before-call.kinesis.GetRecords", lambda **_: waiting.set())
    stack.kinesis.meta.events.register(
        "after-call.kinesis.GetRecords", lambda parsed, **_: answers.append(len(parsed["Records"]))
    )
    mapping = stack.mapping(recorder, template=template, push_wait_ms=4000).start()
    try:
        assert waiting.wait(10), "the mapping never called GetRecords"
        # WHEN a record is put
        sequence_number = stack.put(b"pushed", "k")
        deadline = time.monotonic() + 20
        while not recorder.calls and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        mapping.stop(timeout=10)
    # THEN the read that was waiting when it was put answered with it (pushed, not found by a later poll)
    assert answers[0] == 1
    assert recorder.sequence_numbers(0) == [sequence_number]


def test_enhanced_fan_out_delivers_a_record_its_push_latency_after_the_put(stack) -> None:
    # GIVEN an enhanced fan-out mapping whose records reach the consumer 300 ms after their put (Kinesis pushes them
    # "typically an average of 70 ms" after it; the benchmark sets that)
    template = Template.load(region=REGION, parameter_overrides={"EnhancedFanOut": "true"})
    delivered: list[float] = []
    recorder = Recorder(lambda event: (delivered.append(time.time()), Invoked(b"{}"))[1])
    mapping = stack.mapping(recorder, template=template, push_wait_ms=4000, push_latency_s=0.3).start()
    try:
        # WHEN a record is put
        put_at = time.time()
        stack.put(b"pushed", "k")
        deadline = time.monotonic() + 20
        while not delivered and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        mapping.stop(timeout=10)
    # THEN the consumer gets it no sooner than the latency after the put (and not much later)
    assert delivered and 0.25 <= delivered[0] - put_at < 3


def test_a_throttled_batch_is_tried_again_whole_using_no_retry(stack, monkeypatch) -> None:
    # GIVEN five records, and a consumer throttled (at its reserved concurrency) more times than the mapping's
    # retries, then free
    monkeypatch.setattr(kinesis_source, "THROTTLE_WAIT_S", 0.01)
    sequence_numbers = [stack.put(f"r{i}".encode(), "k") for i in range(5)]
    recorder = Recorder(lambda event: throttled_then_free(event))
    mapping = stack.mapping(recorder)
    retries = mapping.settings.maximum_retry_attempts
    throttles = {"left": retries + 2}

    def throttled_then_free(event: dict[str, Any]) -> Invoked:
        if throttles["left"]:
            throttles["left"] -= 1
            raise FunctionThrottled("ConsumerFunction", 1)
        return Invoked(b'{"batchItemFailures":[]}')

    # WHEN the mapping processes the stream
    mapping.drain()
    # THEN the whole batch ran once the consumer was free: not split, not sent to the DLQ, no retry used
    assert [recorder.sequence_numbers(call) for call in range(len(recorder.calls))] == [sequence_numbers]
    assert stack.dlq_bodies() == []
    (shard,) = mapping.stats().values()
    assert (shard.throttles, shard.invocations, shard.records_delivered) == (retries + 2, 1, 5)
