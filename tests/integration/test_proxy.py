"""The proxy's core against the local model (real event-stream parsing) and Kinesis/DynamoDB in moto."""

from __future__ import annotations

import io
import json
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, EndpointConnectionError

from chatstream.errors import Throttled, TurnNotFound
from chatstream.generation import Generation, GenerationSettings, build_messages, turn_to_generate
from chatstream.kinesis import TokenStreamWriter
from chatstream.proxy_event import GenerateRequest
from chatstream.records import ErrorInfo, RecordType, TokenRecord, Usage, assistant_text, reasoning_text, tool_calls
from chatstream.status import StopReason, TurnStatus
from chatstream.tools import ToolCall, ToolResult, ToolSpec
from chatstream.turn_options import HistoryMessage, TurnOptions
from chatstream_local.bedrock.endpoint import LocalModelServer
from chatstream_local.bedrock.model import plan_reply
from tests.builders import ConverseEventStream
from tests.support import FakeContext, load_event, load_function

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import ModuleType

    from mypy_boto3_kinesis import KinesisClient

    from chatstream.table import ChatTable, Turn

OWNER = "owner"


@pytest.fixture
def local_model() -> Iterator[LocalModelServer]:
    with LocalModelServer(delay_ms=0) as server:
        yield server


@pytest.fixture
def bedrock(moto: None, local_model: LocalModelServer) -> Any:
    return boto3.client(
        "bedrock-runtime",
        endpoint_url=local_model.url,
        region_name="us-east-1",
        config=Config(retries={"total_max_attempts": 1}),
    )


def read_stream(kinesis: KinesisClient, stream_name: str) -> list[TokenRecord]:
    """Every record on the stream, in shard order."""
    shard_id = kinesis.list_shards(StreamName=stream_name)["Shards"][0]["ShardId"]
    iterator = kinesis.get_shard_iterator(StreamName=stream_name, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON")[
        "ShardIterator"
    ]
    records: list[TokenRecord] = []
    while True:
        page = kinesis.get_records(ShardIterator=iterator, Limit=10_000)
        records += [TokenRecord.decode(item["Data"]) for item in page["Records"]]
        if not page["Records"]:
            return records
        iterator = page["NextShardIterator"]


def start_turn(chat_table: ChatTable, message: str, **options: Any) -> Turn:
    """A new session's turn 1, as the relay starts it; returned as the proxy reads it back."""
    session_id = chat_table.create_session(OWNER)
    turn = chat_table.turns.start_next(session_id, OWNER, message, **options)
    return turn_to_generate(chat_table, GenerateRequest(session_id, turn), "proxy-request")


def generate(current: Turn, bedrock: Any, kinesis: Any, stream_name: str, chat_table: ChatTable, **kw: Any):
    writer = TokenStreamWriter(kinesis, stream_name, sleep=lambda _: None)
    settings = GenerationSettings(model_id="local.model", **kw)
    return Generation(turn=current, bedrock=bedrock, writer=writer, table=chat_table, settings=settings).run()


def assert_well_formed(records: list[TokenRecord]) -> None:
    """Contiguous seq from 0 in shard order, one start first, exactly one terminal record last."""
    assert [r.seq for r in records] == list(range(len(records)))
    assert records[0].type is RecordType.START
    assert [r.is_terminal for r in records].count(True) == 1 and records[-1].is_terminal


def test_long_reply_is_exact_ordered_and_coalesced(bedrock, kinesis, stream_name, chat_table) -> None:
    # GIVEN a turn asking for 2000 words
    current = start_turn(chat_table, "/long 2000")
    # WHEN the proxy generates it with the default flushing
    result = generate(current, bedrock, kinesis, stream_name, chat_table)
    # THEN the stream holds the exact reply, in order, in far fewer records than deltas
    records = read_stream(kinesis, stream_name)
    assert_well_formed(records)
    assert assistant_text(records) == plan_reply("/long 2000").text
    assert result.deltas == 2000
    assert len(records) < 2000 / 10
    assert records[-1].type is RecordType.STOP and records[-1].stop_reason is StopReason.END_TURN
    assert records[-1].usage is not None and records[-1].usage.output_tokens == 2000
    assert all(r.session_id == current.session_id and r.turn == current.turn for r in records)


def test_the_first_records_are_written_through_to_the_table_once_the_stream_has_them(
    bedrock, kinesis, stream_name, chat_table
) -> None:
    # GIVEN a turn, and no consumer materializing the stream (the table gets nothing from it)
    current = start_turn(chat_table, "/long 200")
    # WHEN the proxy generates it
    generate(current, bedrock, kinesis, stream_name, chat_table)
    # THEN the table holds the turn's first delta, as the stream holds it (the consumer writes the same item again,
    # and the start before it), and no other record: the first token needs no consumer
    records = read_stream(kinesis, stream_name)
    stored = chat_table.query_records(current.session_id, current.turn)
    assert [r.type for r in records[:2]] == [RecordType.START, RecordType.DELTA]
    assert stored == records[1:2]


@pytest.mark.parametrize(
    "failure", [Throttled("DynamoDB ProvisionedThroughputExceededException"), RuntimeError("a bug")]
)
def test_a_failed_write_through_leaves_the_first_records_to_the_consumer(
    bedrock, kinesis, stream_name, chat_table, monkeypatch, failure: Exception
) -> None:
    # GIVEN a table that fails every token write (throttled, or anything unexpected)
    def throttled(records: Any, **kwargs: Any) -> None:
        raise failure

    monkeypatch.setattr(chat_table, "put_records", throttled)
    current = start_turn(chat_table, "/long 20")
    # WHEN the proxy generates a turn
    result = generate(current, bedrock, kinesis, stream_name, chat_table)
    # THEN the reply is whole on the stream all the same: the write-through is only a shortcut
    assert result.terminal.type is RecordType.STOP and not result.terminal_via_table
    assert assistant_text(read_stream(kinesis, stream_name)) == plan_reply("/long 20").text


class GatedBedrock:
    """A scripted ConverseStream whose later deltas wait until the first delta record is written."""

    def __init__(self, deltas: list[str], first_written: threading.Event) -> None:
        self.deltas = deltas
        self.first_written = first_written

    def converse_stream(self, **_: Any) -> dict[str, Any]:
        def events() -> Iterator[dict[str, Any]]:
            yield {"messageStart": {"role": "assistant"}}
            for index, text in enumerate(self.deltas):
                if index == 1:
                    assert self.first_written.wait(timeout=10)
                yield {"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": text}}}
            yield {"messageStop": {"stopReason": StopReason.END_TURN}}
            yield {"metadata": {"usage": {"inputTokens": 2, "outputTokens": len(self.deltas)}, "metrics": {}}}

        return {"stream": ConverseEventStream(events())}


def test_first_delta_is_flushed_at_once_and_later_ones_coalesced(kinesis, stream_name, chat_table) -> None:
    # GIVEN a model whose later deltas come only after the first delta reached Kinesis
    first_written = threading.Event()
    writer = TokenStreamWriter(kinesis, stream_name)
    put = writer.put

    def put_and_signal(*records: TokenRecord) -> None:
        put(*records)
        if any(record.type is RecordType.DELTA for record in records):
            first_written.set()

    writer.put = put_and_signal  # type: ignore[method-assign]
    current = start_turn(chat_table, "hello there")
    bedrock = GatedBedrock(["You", " said:", " hello", " there"], first_written)
    # WHEN the reply is generated with a long flush interval
    settings = GenerationSettings(model_id="m", flush_interval_ms=60_000)
    Generation(turn=current, bedrock=bedrock, writer=writer, table=chat_table, settings=settings).run()  # type: ignore[arg-type]
    # THEN the first delta is a record of its own and the rest were coalesced into one
    records = read_stream(kinesis, stream_name)
    assert [r.text for r in records if r.type is RecordType.DELTA] == ["You", " said: hello there"]


class RecordingKinesis:
    """Delegates to a real client and records the records of each put_records call."""

    def __init__(self, client: KinesisClient) -> None:
        self.client = client
        self.calls: list[list[TokenRecord]] = []

    def put_records(self, **kwargs: Any) -> Any:
        self.calls.append([TokenRecord.decode(entry["Data"]) for entry in kwargs["Records"]])
        return self.client.put_records(**kwargs)


def test_start_and_the_first_delta_share_a_call_and_every_later_record_goes_alone(
    bedrock, kinesis, stream_name, chat_table
) -> None:
    # GIVEN a reply of several coalesced records
    recording = RecordingKinesis(kinesis)
    current = start_turn(chat_table, "/long 40")
    writer = TokenStreamWriter(recording, stream_name)  # type: ignore[arg-type]
    # WHEN it is generated
    settings = GenerationSettings(model_id="m", flush_max_chars=40)
    result = Generation(turn=current, bedrock=bedrock, writer=writer, table=chat_table, settings=settings).run()
    # THEN the first call carries the start and the first delta (one consumer batch before the first token), and
    # every later call one record, the terminal last
    kinds = [[record.type for record in call] for call in recording.calls]
    assert kinds[0] == [RecordType.START, RecordType.DELTA]
    assert all(len(call) == 1 for call in kinds[1:]) and kinds[-1] == [RecordType.STOP]
    assert result.put_calls == len(recording.calls) and result.records_written == len(recording.calls) + 1
    assert_well_formed(read_stream(kinesis, stream_name))


def test_flush_size_bounds_each_record(bedrock, kinesis, stream_name, chat_table) -> None:
    current = start_turn(chat_table, "/long 500")
    generate(current, bedrock, kinesis, stream_name, chat_table, flush_interval_ms=60_000, flush_max_chars=64)
    records = read_stream(kinesis, stream_name)
    assert_well_formed(records)
    assert max(len(r.text or "") for r in records) <= 64
    assert assistant_text(records) == plan_reply("/long 500").text


def test_mid_stream_model_error_ends_with_error_record(bedrock, kinesis, stream_name, chat_table) -> None:
    # GIVEN the model fails after 5 deltas
    current = start_turn(chat_table, "/error-after 5")
    generate(current, bedrock, kinesis, stream_name, chat_table)
    # THEN what was generated is kept and the turn ends with a retryable error record
    records = read_stream(kinesis, stream_name)
    assert_well_formed(records)
    assert assistant_text(records) == "w1 w2 w3 w4 w5"
    assert records[-1].type is RecordType.ERROR and records[-1].error is not None
    assert records[-1].error.code == "model_stream_error" and records[-1].error.retryable


def test_throttling_before_first_delta_is_a_retryable_error(bedrock, kinesis, stream_name, chat_table) -> None:
    current = start_turn(chat_table, "/throttle")
    generate(current, bedrock, kinesis, stream_name, chat_table)
    records = read_stream(kinesis, stream_name)
    assert [r.type for r in records] == [RecordType.START, RecordType.ERROR]
    assert records[-1].error is not None and records[-1].error.code == "throttled" and records[-1].error.retryable


class FlakyKinesis:
    """Delegates to a real client; fails put_records calls by a script (whole-call or per-entry)."""

    def __init__(self, client: KinesisClient, script: list[str]) -> None:
        self.client = client
        self.script = script
        self.calls = 0

    def put_records(self, **kwargs: Any) -> Any:
        self.calls += 1
        action = self.script.pop(0) if self.script else "ok"
        if action == "raise":
            raise ClientError(
                {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow"}}, "PutRecords"
            )
        if action == "transport":
            raise EndpointConnectionError(endpoint_url="http://127.0.0.1:1")
        if action == "entry":  # the first entry fails; any later ones of the call are stored
            failed = {"ErrorCode": "ProvisionedThroughputExceededException", "ErrorMessage": "slow"}
            rest = kwargs["Records"][1:]
            stored = self.client.put_records(StreamName=kwargs["StreamName"], Records=rest)["Records"] if rest else []
            return {"FailedRecordCount": 1, "Records": [failed, *stored]}
        return self.client.put_records(**kwargs)


def test_kinesis_throttling_is_retried_without_loss_or_reordering(bedrock, kinesis, stream_name, chat_table) -> None:
    # GIVEN Kinesis throttles whole calls and single entries, again and again
    flaky = FlakyKinesis(kinesis, ["entry", "raise", "entry", "ok", "entry", "transport", "ok", "raise"] * 6)
    current = start_turn(chat_table, "/long 300")
    # WHEN a reply is generated with small records
    writer = TokenStreamWriter(flaky, stream_name, sleep=lambda _: None)  # type: ignore[arg-type]
    settings = GenerationSettings(model_id="m", flush_max_chars=40)
    result = Generation(turn=current, bedrock=bedrock, writer=writer, table=chat_table, settings=settings).run()
    # THEN every record arrived once, and the text is exact
    records = read_stream(kinesis, stream_name)
    assert_well_formed(sorted(records, key=lambda r: r.seq))
    assert assistant_text(sorted(records, key=lambda r: r.seq)) == plan_reply("/long 300").text
    assert result.throttle_retries > 10
    # AND in seq order: a call is made only once every earlier one is stored; the one exception is the start,
    # refused in the call it shares with the first delta (the script's first "entry") and put again after it
    assert [r.seq for r in records] == [1, 0, *range(2, len(records))]


def test_kinesis_down_ends_the_turn_through_the_table(bedrock, kinesis, stream_name, chat_table) -> None:
    # GIVEN Kinesis accepts the first call (the start record and the first delta) and then refuses everything
    flaky = FlakyKinesis(kinesis, ["ok"] + ["raise"] * 1000)
    current = start_turn(chat_table, "/long 50")
    writer = TokenStreamWriter(flaky, stream_name, max_attempts=3, sleep=lambda _: None)  # type: ignore[arg-type]
    settings = GenerationSettings(model_id="m")
    result = Generation(turn=current, bedrock=bedrock, writer=writer, table=chat_table, settings=settings).run()
    # THEN the turn still ends: an error record in the read model, the turn marked error
    assert result.terminal_via_table and result.terminal.error is not None
    assert result.terminal.error.code == "write_failed"
    stored = chat_table.query_records(current.session_id, current.turn)  # the first delta written through, then
    assert [(r.type, r.seq) for r in stored] == [(RecordType.DELTA, 1), (RecordType.ERROR, 2)]
    turn = chat_table.get_turn(current.session_id, current.turn)
    assert turn is not None and turn.status is TurnStatus.ERROR
    assert turn.assistant and plan_reply("/long 50").text.startswith(turn.assistant)  # the first delta got through
    assert chat_table.get_session(current.session_id).active_turn is None  # type: ignore[union-attr]


def test_cancel_stops_generation_and_keeps_the_text(kinesis, stream_name, chat_table, moto) -> None:
    # GIVEN a slow model and a long reply
    with LocalModelServer(delay_ms=5) as slow:
        bedrock = boto3.client("bedrock-runtime", endpoint_url=slow.url, region_name="us-east-1")
        current = start_turn(chat_table, "/long 5000")
        outcome: dict[str, Any] = {}
        worker = threading.Thread(
            target=lambda: outcome.update(
                result=generate(current, bedrock, kinesis, stream_name, chat_table, cancel_check_interval_ms=50)
            )
        )
        worker.start()
        # WHEN the client cancels once some text was written
        deadline = time.monotonic() + 30
        while len(read_stream(kinesis, stream_name)) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        chat_table.turns.request_cancel(current.session_id, current.turn)
        worker.join(timeout=30)
    # THEN the turn ends 'cancelled' well before the whole reply, with the generated text kept
    records = read_stream(kinesis, stream_name)
    assert_well_formed(records)
    assert records[-1].type is RecordType.STOP and records[-1].stop_reason is StopReason.CANCELLED
    assert 0 < outcome["result"].deltas < 5000
    assert plan_reply("/long 5000").text.startswith(assistant_text(records))


class _UncalledBedrock:
    """A Bedrock client the test must not see called."""

    def __init__(self) -> None:
        self.calls = 0

    def converse_stream(self, **kwargs: Any) -> Any:
        self.calls += 1
        raise AssertionError("the model was called")


def cancelled_before_claim(chat_table: ChatTable, message: str) -> Turn:
    """A turn whose cancel flag was set before a generation claimed it, as the claim returns it."""
    session_id = chat_table.create_session(OWNER)
    turn = chat_table.turns.start_next(session_id, OWNER, message)
    chat_table.turns.request_cancel(session_id, turn)
    return turn_to_generate(chat_table, GenerateRequest(session_id, turn), "proxy-request")


def test_a_turn_cancelled_before_the_claim_is_not_generated(kinesis, stream_name, chat_table) -> None:
    # GIVEN a turn whose cancel flag was set before this generation claimed it
    current = cancelled_before_claim(chat_table, "/long 300")
    assert current.cancel_requested
    # WHEN the proxy generates it
    bedrock = _UncalledBedrock()
    result = generate(current, bedrock, kinesis, stream_name, chat_table)
    # THEN the model was not called, and the turn ends cancelled with nothing generated: start, then stop
    assert bedrock.calls == 0
    records = read_stream(kinesis, stream_name)
    assert_well_formed(records)
    assert [r.type for r in records] == [RecordType.START, RecordType.STOP]
    assert records[-1].stop_reason is StopReason.CANCELLED and records[-1].usage == Usage(0, 0)
    assert result.terminal == records[-1] and (result.deltas, result.records_written) == (0, 2)
    assert not result.terminal_via_table


def test_a_turn_cancelled_before_the_claim_ends_through_the_table_when_kinesis_is_down(
    kinesis, stream_name, chat_table
) -> None:
    # GIVEN a turn cancelled before the claim, and Kinesis refusing everything
    current = cancelled_before_claim(chat_table, "hello")
    flaky = FlakyKinesis(kinesis, ["raise"] * 1000)
    writer = TokenStreamWriter(flaky, stream_name, max_attempts=3, sleep=lambda _: None)  # type: ignore[arg-type]
    settings = GenerationSettings(model_id="m")
    bedrock = _UncalledBedrock()
    result = Generation(turn=current, bedrock=bedrock, writer=writer, table=chat_table, settings=settings).run()
    # THEN the model was not called, and the turn ends cancelled in the read model, its start and stop stored
    assert bedrock.calls == 0 and result.terminal_via_table
    stored = chat_table.query_records(current.session_id, current.turn)
    assert [(r.seq, r.type) for r in stored] == [(0, RecordType.START), (1, RecordType.STOP)]
    turn = chat_table.get_turn(current.session_id, current.turn)
    assert turn is not None and (turn.status, turn.stop_reason) == (TurnStatus.CANCELLED, StopReason.CANCELLED)
    assert chat_table.get_session(current.session_id).active_turn is None  # type: ignore[union-attr]


def prompt_of(chat_table: ChatTable, session_id: str, turn: int) -> list[tuple[str, str]]:
    """The Converse messages the proxy builds for ``turn``, as (role, text) pairs (each message is one text block)."""
    messages = build_messages(chat_table, turn_to_generate(chat_table, GenerateRequest(session_id, turn), "proxy"))
    return [(message["role"], block["text"]) for message in messages for (block,) in [message["content"]]]


def test_history_becomes_converse_messages(chat_table) -> None:
    # GIVEN a session with a complete turn, an errored turn, a cancelled turn without text, and a turn whose reply
    # is whitespace alone (a stop sequence that matched right after the model's opening newlines)
    session_id = chat_table.create_session(OWNER)
    endings = [
        ("first", TokenRecord.stop(session_id, 1, 2, StopReason.END_TURN, Usage(1, 1), 1), "One"),
        ("second", TokenRecord.failure(session_id, 2, 1, ErrorInfo("x", "y", True), 1), ""),
        ("third", TokenRecord.stop(session_id, 3, 2, StopReason.CANCELLED, Usage(1, 1), 1), ""),
        ("fourth", TokenRecord.stop(session_id, 4, 2, StopReason.STOP_SEQUENCE, Usage(1, 1), 1), "\n\n"),
    ]
    for message, terminal, text in endings:
        chat_table.turns.start_next(session_id, OWNER, message)
        chat_table.turns.end_from_stream(terminal, text)
    chat_table.turns.start_next(session_id, OWNER, "fifth")
    # WHEN the proxy builds the messages for turn 5 THEN only turns with text are replayed (Bedrock refuses a blank
    # text block), roles alternating, ending with the new message
    assert prompt_of(chat_table, session_id, 5) == [("user", "first"), ("assistant", "One"), ("user", "fifth")]


def test_the_history_a_client_sent_with_a_turn_stays_when_the_turn_failed(chat_table) -> None:
    # GIVEN a response continued with previous_response_id: its turn carried the client's earlier messages as history
    # (Ada's introduction), then failed (throttled) without a reply
    session_id = chat_table.create_session(OWNER)
    sent = TurnOptions(history=(HistoryMessage("user", "My name is Ada."), HistoryMessage("assistant", "Hi Ada.")))
    chat_table.turns.start_next(session_id, OWNER, "/throttle", options=sent)
    chat_table.turns.end_from_stream(
        TokenRecord.failure(session_id, 1, 1, ErrorInfo("throttled", "slow down", True), 1), ""
    )
    chat_table.turns.start_next(session_id, OWNER, "What is my name?")
    # WHEN the proxy builds the messages for turn 2 THEN the client's history is still there (only the failed turn's
    # own message, which got no reply, is left out)
    assert prompt_of(chat_table, session_id, 2) == [
        ("user", "My name is Ada."),
        ("assistant", "Hi Ada."),
        ("user", "What is my name?"),
    ]


SAMPLE = load_event("proxy-generate.json")


@pytest.fixture
def proxy_app(monkeypatch, template, local_model, stream_name, table_name) -> ModuleType:
    """The proxy's handler with its environment from template.yaml, pointed at the local model."""
    for name, value in template.function_settings("ProxyFunction")["Environment"]["Variables"].items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("CHAT_TABLE_NAME", table_name)
    monkeypatch.setenv("TOKEN_STREAM_NAME", stream_name)
    monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", local_model.url)
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    return load_function("proxy")


def start_sample_turn(monkeypatch, chat_table: ChatTable, message: str, **options: Any) -> None:
    """The turn the sample event names, as the relay writes it (the sample's session id)."""
    monkeypatch.setattr("chatstream.table.sessions.new_session_id", lambda: SAMPLE["session_id"])
    assert chat_table.turns.start_first(OWNER, message, **options) == SAMPLE["session_id"] and SAMPLE["turn"] == 1


def test_sample_event_runs_through_the_handler(monkeypatch, proxy_app, kinesis, stream_name, chat_table) -> None:
    # GIVEN the turn the sample event names, written by the relay with the user's message and options
    start_sample_turn(monkeypatch, chat_table, "hello", max_tokens=512, temperature=0.5)
    # WHEN the sample event (the turn's key, no text) is handled
    result = proxy_app.handler(SAMPLE, FakeContext("ProxyFunction"))
    # THEN the reply to the turn's message is on the stream and the handler reports how the turn ended
    records = read_stream(kinesis, stream_name)
    assert assistant_text(records) == "You said: hello"
    assert result["type"] == "stop" and result["stop_reason"] == StopReason.END_TURN
    assert records[-1].usage is not None and records[-1].usage.output_tokens == 3


def test_a_turn_that_asks_for_no_max_tokens_gets_the_deployments_cap(
    monkeypatch, template, proxy_app, kinesis, stream_name, chat_table
) -> None:
    # GIVEN the proxy as deployed: the relay's cap on max_tokens (MaxTokensLimit) is the proxy's too
    relay = template.function_settings("RelayFunction")["Environment"]["Variables"]
    proxy = template.function_settings("ProxyFunction")["Environment"]["Variables"]
    assert proxy["MAX_TOKENS_LIMIT"] == relay["MAX_TOKENS_LIMIT"]
    # ... here a cap of 5, and a turn whose client asked for no max_tokens
    monkeypatch.setenv("MAX_TOKENS_LIMIT", "5")
    capped = load_function("proxy")
    start_sample_turn(monkeypatch, chat_table, "/long 40")
    # WHEN the proxy generates it
    result = capped.handler(SAMPLE, FakeContext("ProxyFunction"))
    # THEN the model was asked for at most the cap (Bedrock would otherwise allow the model's own maximum)
    assert result["stop_reason"] == StopReason.MAX_TOKENS
    assert assistant_text(read_stream(kinesis, stream_name)) == "".join(plan_reply("/long 40").deltas[:5])


class _RefusingBedrock:
    """A Bedrock client that refuses every ConverseStream with ``code``."""

    def __init__(self, code: str) -> None:
        self.code = code

    def converse_stream(self, **kwargs: Any) -> Any:
        raise ClientError({"Error": {"Code": self.code, "Message": "refused"}}, "ConverseStream")


def _metrics_emitted(output: str) -> set[str]:
    """The metric names of the EMF lines Powertools printed."""
    return {
        metric["Name"]
        for line in output.splitlines()
        if line.startswith("{") and "_aws" in line
        for directive in json.loads(line)["_aws"]["CloudWatchMetrics"]
        for metric in directive["Metrics"]
    }


@pytest.mark.parametrize(
    ("code", "setup", "service"),
    [
        ("AccessDeniedException", True, True),
        ("ResourceNotFoundException", True, True),
        ("ThrottlingException", False, True),
        ("ValidationException", False, False),  # the request's: what it asked of the model
    ],
)
def test_a_failed_turn_is_counted_for_the_alarm_of_its_cause(
    monkeypatch, proxy_app, kinesis, stream_name, chat_table, capsys, code: str, setup: bool, service: bool
) -> None:
    # GIVEN Bedrock refusing the model (access not granted, or an id wrong for the region), throttling, or refusing
    # one request
    start_sample_turn(monkeypatch, chat_table, "hello")
    monkeypatch.setattr(proxy_app, "BEDROCK", _RefusingBedrock(code))
    # WHEN the proxy handles the turn
    result = proxy_app.handler(SAMPLE, FakeContext("ProxyFunction"))
    # THEN the turn ends in error, the invocation succeeds, and ModelAccessErrors (ProxyModelAccessAlarm's metric)
    # counts it only when the deployment's setup is the cause, ServiceFailures (ProxyGenerationErrorRateAlarm's)
    # whenever the request is not
    assert result["type"] == "error"
    emitted = _metrics_emitted(capsys.readouterr().out)
    assert "GenerationErrors" in emitted and ("ModelAccessErrors" in emitted) is setup
    assert ("ServiceFailures" in emitted) is service


def test_the_libraries_log_lines_are_the_functions_json_lines_with_their_fields(
    monkeypatch, proxy_app, kinesis, stream_name, chat_table
) -> None:
    # GIVEN the proxy as deployed, its Logger's output read here, and Bedrock refusing its model
    (handler,) = proxy_app.logger.handlers
    output = io.StringIO()
    monkeypatch.setattr(handler, "stream", output)
    start_sample_turn(monkeypatch, chat_table, "hello")
    monkeypatch.setattr(proxy_app, "BEDROCK", _RefusingBedrock("AccessDeniedException"))
    # WHEN the proxy handles the turn, and chatstream.generation logs the refusal through the standard library
    proxy_app.handler(SAMPLE, FakeContext("ProxyFunction"))
    # THEN the line is the function's JSON, with Bedrock's words (OPERATIONS' runbook for the alarm reads them), the
    # function's service and the turn: on Lambda, the runtime's text format would have dropped every field
    lines = [json.loads(line) for line in output.getvalue().splitlines()]
    refused = [line for line in lines if line["message"] == "the model refused this deployment"]
    assert len(refused) == 1
    assert refused[0]["error_code"] == "AccessDeniedException" and refused[0]["error_message"] == "refused"
    assert refused[0]["service"] == "chatstream-proxy" and refused[0]["session_id"] == SAMPLE["session_id"]
    assert refused[0]["name"] == "chatstream.generation"  # which module said it, at every invocation
    # AND it reaches no other handler (the runtime's, on Lambda): one line, not two
    assert not logging.getLogger("chatstream").propagate


def test_a_duplicate_delivery_of_the_event_generates_nothing(
    monkeypatch, proxy_app, kinesis, stream_name, chat_table, caplog
) -> None:
    # GIVEN the sample event handled once
    start_sample_turn(monkeypatch, chat_table, "hello")
    proxy_app.handler(SAMPLE, FakeContext("ProxyFunction", request_id="first-delivery"))
    generated = read_stream(kinesis, stream_name)
    # WHEN Lambda delivers it again (its asynchronous queue may), while the turn is still in progress
    result = proxy_app.handler(SAMPLE, FakeContext("ProxyFunction", request_id="second-delivery"))
    # THEN nothing more is written: the first delivery's reply is the turn's only one
    assert read_stream(kinesis, stream_name) == generated
    assert result == {**SAMPLE, "type": "duplicate", "stop_reason": None, "error": None, "records": 0}
    # AND the drop is logged, naming the invocation that has the turn, without the conversation's text
    (line,) = [r for r in caplog.records if r.getMessage() == "duplicate invocation; not generated"]
    assert line.levelname == "WARNING" and line.claimed_by == "first-delivery"  # type: ignore[attr-defined]
    assert "hello" not in json.dumps(vars(line), default=str)
    # WHEN a delivery comes after the turn ended THEN it generates nothing either
    chat_table.turns.end_from_stream(generated[-1], assistant_text(generated))
    result = proxy_app.handler(SAMPLE, FakeContext("ProxyFunction", request_id="third-delivery"))
    assert result["type"] == "duplicate" and read_stream(kinesis, stream_name) == generated
    # AND its line too names the invocation that generated it
    last = [r for r in caplog.records if r.getMessage() == "duplicate invocation; not generated"][-1]
    assert last.claimed_by == "first-delivery"  # type: ignore[attr-defined]


def test_the_event_of_a_turn_the_relay_ended_first_is_no_duplicate(
    monkeypatch, proxy_app, kinesis, stream_name, chat_table, caplog, capsys
) -> None:
    # GIVEN the sample's turn, ended by the relay before any proxy claimed it (a Stop while the event waited in
    # Lambda's queue): claimed for the relay, cancelled
    start_sample_turn(monkeypatch, chat_table, "hello")
    session_id, turn = SAMPLE["session_id"], SAMPLE["turn"]
    stop = TokenRecord.stop(session_id, turn, 1, StopReason.CANCELLED, Usage(0, 0), 5)
    assert chat_table.turns.cancel_unclaimed(stop)
    # WHEN its event's only delivery runs
    result = proxy_app.handler(SAMPLE, FakeContext("ProxyFunction", request_id="only-delivery"))
    # THEN nothing is generated, and it is not counted or logged as a duplicate delivery (an operator reads
    # DuplicateInvocations as Lambda delivering an event twice): an INFO line says what happened
    assert read_stream(kinesis, stream_name) == [] and result["type"] == "ended"
    assert "DuplicateInvocations" not in capsys.readouterr().out
    messages = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert ("INFO", "turn ended before its generation started; not generated") in messages
    assert not any(m == "duplicate invocation; not generated" for _, m in messages)


def test_an_event_from_an_earlier_relay_is_answered_from_the_turn_item(
    monkeypatch, proxy_app, kinesis, stream_name, chat_table
) -> None:
    # GIVEN a turn in the table, and an event that still carries a message (a relay of the previous version)
    start_sample_turn(monkeypatch, chat_table, "from the table")
    event = {**SAMPLE, "message": "from the event", "max_tokens": 7}
    # WHEN the proxy handles it
    proxy_app.handler(event, FakeContext("ProxyFunction"))
    # THEN it answered the turn item's message, not the event's
    assert assistant_text(read_stream(kinesis, stream_name)) == "You said: from the table"


def test_an_event_for_a_turn_that_does_not_exist_fails_naming_it(proxy_app, kinesis, stream_name, chat_table) -> None:
    # GIVEN no turn in the table WHEN the sample event is handled THEN the invocation fails, naming the turn
    with pytest.raises(TurnNotFound, match=f"session {SAMPLE['session_id']} has no turn 1"):
        proxy_app.handler(SAMPLE, FakeContext("ProxyFunction"))
    # AND nothing was written to the stream
    assert read_stream(kinesis, stream_name) == []


class RecordingBedrock:
    """The real client to the local model, keeping each ConverseStream request."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.requests: list[dict[str, Any]] = []

    def converse_stream(self, **params: Any) -> Any:
        self.requests.append(params)
        return self.client.converse_stream(**params)


def test_the_turn_items_message_and_options_go_to_the_model(bedrock, kinesis, stream_name, chat_table) -> None:
    # GIVEN a turn started with max_tokens and temperature
    current = start_turn(chat_table, "hello", max_tokens=64, temperature=0.25)
    recording = RecordingBedrock(bedrock)
    # WHEN the proxy generates it
    generate(current, recording, kinesis, stream_name, chat_table)
    # THEN the model got the turn's message and its options, read from the table
    (request,) = recording.requests
    assert request["messages"] == [{"role": "user", "content": [{"text": "hello"}]}]
    assert request["inferenceConfig"] == {"maxTokens": 64, "temperature": 0.25}


def test_flush_size_one_writes_one_record_per_delta(bedrock, kinesis, stream_name, chat_table) -> None:
    # GIVEN coalescing effectively off (the per-token pipeline the benchmark compares against)
    current = start_turn(chat_table, "/long 40")
    generate(current, bedrock, kinesis, stream_name, chat_table, flush_interval_ms=0, flush_max_chars=1)
    # THEN each model delta is one record, never split or merged
    records = read_stream(kinesis, stream_name)
    assert_well_formed(records)
    assert [r.text for r in records if r.type is RecordType.DELTA] == list(plan_reply("/long 40").deltas)


def test_the_local_models_reasoning_reaches_the_stream_apart_from_the_reply(
    bedrock, kinesis, stream_name, chat_table
) -> None:
    # GIVEN a turn asking the local model to reason in three words first
    current = start_turn(chat_table, "/think 3 hello")
    # WHEN the proxy generates it, reading Bedrock's real event stream
    result = generate(current, bedrock, kinesis, stream_name, chat_table)
    # THEN the reasoning is in reasoning records before the reply, the reply is exact, and usage is the model's
    records = read_stream(kinesis, stream_name)
    assert_well_formed(records)
    assert reasoning_text(records) == "r1 r2 r3"
    assert assistant_text(records) == "You said: hello"
    kinds = [r.type for r in records if r.type in (RecordType.REASONING, RecordType.DELTA)]
    assert kinds == sorted(kinds, key=lambda kind: kind is RecordType.DELTA) and RecordType.REASONING in kinds
    assert records[-1].usage is not None and records[-1].usage.output_tokens == 6
    assert result.reasoning_deltas == 3


class WatchedBedrock:
    """A scripted ConverseStream that notes, when each event is asked for, what ``seen`` returns."""

    def __init__(self, deltas: list[str], seen: Any) -> None:
        self.deltas = deltas
        self.seen = seen
        self.asked: list[Any] = []

    def converse_stream(self, **_: Any) -> dict[str, Any]:
        def events() -> Iterator[dict[str, Any]]:
            yield {"messageStart": {"role": "assistant"}}
            for text in self.deltas:
                self.asked.append(self.seen())
                yield {"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": text}}}
            yield {"messageStop": {"stopReason": StopReason.END_TURN}}
            yield {"metadata": {"usage": {"inputTokens": 2, "outputTokens": len(self.deltas)}, "metrics": {}}}

        return {"stream": ConverseEventStream(events())}


def test_the_stream_is_read_on_only_once_the_first_delta_is_written(kinesis, stream_name, chat_table) -> None:
    # GIVEN a model that sends its whole reply at once, and a Kinesis that takes 50 ms to store a call
    writer = TokenStreamWriter(kinesis, stream_name)
    put = writer.put

    def slow_put(*records: TokenRecord) -> None:
        time.sleep(0.05)
        put(*records)

    writer.put = slow_put  # type: ignore[method-assign]
    current = start_turn(chat_table, "hello there")
    bedrock = WatchedBedrock(
        ["You", " said:", " hello"], lambda: len(chat_table.query_records(current.session_id, current.turn))
    )
    # WHEN the reply is generated
    settings = GenerationSettings(model_id="m")
    Generation(turn=current, bedrock=bedrock, writer=writer, table=chat_table, settings=settings).run()  # type: ignore[arg-type]
    # THEN the events after the first delta were read only once it was on the stream and in the table: the first
    # token's calls did not share the interpreter with the parsing of the rest
    assert bedrock.asked == [0, 1, 1]
    assert assistant_text(read_stream(kinesis, stream_name)) == "You said: hello"


def test_a_first_write_that_hangs_holds_the_stream_only_so_long(kinesis, stream_name, chat_table, monkeypatch) -> None:
    # GIVEN a Kinesis whose first call hangs until the model's whole reply (40 deltas at once) has been read
    monkeypatch.setattr("chatstream.generation.FIRST_WRITE_WAIT_S", 0.05)
    read_all = threading.Event()
    writer = TokenStreamWriter(kinesis, stream_name)
    put = writer.put

    def hanging_put(*records: TokenRecord) -> None:
        assert read_all.wait(timeout=10), "the reader never read on past its wait for the first write"
        put(*records)

    writer.put = hanging_put  # type: ignore[method-assign]
    current = start_turn(chat_table, "hello there")
    deltas = [f" w{i}" for i in range(40)]
    bedrock = WatchedBedrock(deltas, time.monotonic)  # notes when each delta is asked for
    original = bedrock.converse_stream

    def converse_stream(**kwargs: Any) -> dict[str, Any]:
        stream = original(**kwargs)["stream"]

        def events() -> Iterator[dict[str, Any]]:
            yield from stream
            read_all.set()

        return {"stream": ConverseEventStream(events())}

    bedrock.converse_stream = converse_stream  # type: ignore[method-assign]
    # WHEN the reply is generated
    settings = GenerationSettings(model_id="m")
    result = Generation(turn=current, bedrock=bedrock, writer=writer, table=chat_table, settings=settings).run()  # type: ignore[arg-type]
    # THEN the reader waited once, not once per event (40 waits would be 2 s), and the reply is whole once Kinesis
    # answered
    assert bedrock.asked[-1] - bedrock.asked[0] < 1.0
    assert result.terminal.type is RecordType.STOP
    assert assistant_text(read_stream(kinesis, stream_name)) == "".join(deltas)


def test_the_local_models_tool_calls_reach_the_stream_and_their_results_the_model(
    bedrock, kinesis, stream_name, chat_table
) -> None:
    # GIVEN a turn that declares two tools and asks the local model for both, after a line of text
    tools = (ToolSpec("get_weather", {"type": "object"}), ToolSpec("get_time", {"type": "object"}))
    message = 'weather and time\n/call get_weather {"city": "Paris", "days": [1, 2, 3]}\n/call get_time'
    current = start_turn(chat_table, message, options=TurnOptions(tools=tools))
    # WHEN the proxy generates it, reading Bedrock's real event stream
    result = generate(current, bedrock, kinesis, stream_name, chat_table)
    # THEN the text, then the two calls numbered 0 and 1 (content blocks 1 and 2), each ended, exactly as planned
    records = read_stream(kinesis, stream_name)
    assert_well_formed(records)
    planned = plan_reply(message, tools=("get_weather", "get_time"))
    assert assistant_text(records) == planned.text == "You said: weather and time"
    assert tool_calls(records) == [
        ToolCall(planned.calls[0].id, "get_weather", '{"city": "Paris", "days": [1, 2, 3]}'),
        ToolCall(planned.calls[1].id, "get_time", "{}"),
    ]
    assert [r.call.index for r in records if r.call is not None and r.end] == [0, 1]
    assert records[-1].stop_reason is StopReason.TOOL_USE and result.tool_calls == 2

    # WHEN the turn ends as the consumer ends it, and the client sends both results as the next turn
    chat_table.turns.end_from_stream(records[-1], assistant_text(records), tool_calls=tool_calls(records))
    results = (ToolResult(planned.calls[0].id, "sunny"), ToolResult(planned.calls[1].id, "noon"))
    turn = chat_table.turns.start_next(
        current.session_id, OWNER, "", options=TurnOptions(tools=tools, tool_results=results)
    )
    writer_offset = len(records)
    generate(
        turn_to_generate(chat_table, GenerateRequest(current.session_id, turn), "p2"),
        bedrock,
        kinesis,
        stream_name,
        chat_table,
    )
    # THEN Bedrock accepted the round trip and the model answered each result
    second = read_stream(kinesis, stream_name)[writer_offset:]
    assert_well_formed(second)
    assert assistant_text(second) == "Tool get_weather said: sunny\nTool get_time said: noon"


def test_arguments_that_are_not_json_end_the_turn_with_malformed_tool_use(
    bedrock, kinesis, stream_name, chat_table
) -> None:
    current = start_turn(
        chat_table,
        "/call get_weather {city: Paris",
        options=TurnOptions(tools=(ToolSpec("get_weather", {"type": "object"}),)),
    )
    result = generate(current, bedrock, kinesis, stream_name, chat_table)
    records = read_stream(kinesis, stream_name)
    assert_well_formed(records)
    assert records[-1].error is not None and records[-1].error.code == "malformed_tool_use"
    assert "tool call 0 (get_weather)" in records[-1].error.message and result.terminal == records[-1]
