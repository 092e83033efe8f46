"""The consumer's core against ChatTable in moto: idempotence, ordering, poison records, throttling."""

from __future__ import annotations

import base64
import json
import random
import threading
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from botocore.exceptions import ClientError

from chatstream.dlq import DeadLetterQueue, PoisonRecord
from chatstream.errors import DeadLetterError, Throttled
from chatstream.kinesis import StreamRecord
from chatstream.materialize import Materializer
from chatstream.records import ErrorInfo, TokenRecord
from chatstream.status import StopReason, TurnStatus
from chatstream.table import ChatTable
from chatstream_local.resources import create_queue
from tests.builders import turn_records

if TYPE_CHECKING:
    from collections.abc import Sequence

OWNER = "alice"
SHARD = "shardId-000000000000"
STREAM_ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/chatstream-local-TokenStream"


class Stream:
    """Assigns increasing sequence numbers, as a shard does."""

    def __init__(self) -> None:
        self.next = 49_600_000_000_000_000_000

    def record(self, data: bytes | TokenRecord, partition_key: str | None = None) -> StreamRecord:
        self.next += 1
        if isinstance(data, TokenRecord):
            partition_key = partition_key or data.session_id
            data = data.encode()
        assert partition_key is not None
        return StreamRecord(str(self.next), partition_key, data, SHARD, STREAM_ARN, 1_764_400_000.0)

    def records(self, tokens: Sequence[TokenRecord]) -> list[StreamRecord]:
        return [self.record(token) for token in tokens]


class RecordingSink:
    def __init__(self, fail: bool = False) -> None:
        self.sent: list[PoisonRecord] = []
        self.fail = fail

    def send_poison(self, poison: PoisonRecord) -> None:
        if self.fail:
            raise DeadLetterError("SQS ThrottlingException")
        self.sent.append(poison)


def new_turn(table: ChatTable, message: str = "hello") -> tuple[str, int]:
    session_id = table.create_session(OWNER)
    return session_id, table.turns.start_next(session_id, OWNER, message)


def stored_keys(table: ChatTable, session_id: str, turn: int) -> list[int]:
    return [record.seq for record in table.query_records(session_id, turn)]


def item_count(dynamodb: Any, table_name: str) -> int:
    return int(dynamodb.scan(TableName=table_name, Select="COUNT")["Count"])


@pytest.fixture
def sink() -> RecordingSink:
    return RecordingSink()


@pytest.fixture
def materializer(chat_table: ChatTable, sink: RecordingSink) -> Materializer:
    return Materializer(table=chat_table, poison_sink=sink)


def test_a_whole_turn_is_written_and_the_turn_completed_with_the_exact_text(chat_table, materializer) -> None:
    # GIVEN a turn in progress and its records on the stream
    session_id, turn = new_turn(chat_table)
    words = ["You", " said:", " hello", " \u00e9\u00e8 \U0001f600"]
    batch = Stream().records(turn_records(session_id, turn, words))
    # WHEN the batch is materialized
    outcome = materializer.process(batch)
    # THEN every record is an item, the turn is complete with the exact text, and the session is free
    assert outcome.ok and outcome.written == len(batch) and outcome.turns_completed == 1
    assert stored_keys(chat_table, session_id, turn) == list(range(len(batch)))
    stored = chat_table.get_turn(session_id, turn)
    assert stored is not None
    assert (stored.status, stored.assistant, stored.stop_reason) == (
        TurnStatus.COMPLETE,
        "".join(words),
        StopReason.END_TURN,
    )
    assert stored.usage == {"input_tokens": 1, "output_tokens": 4}
    session = chat_table.get_session(session_id)
    assert session is not None and session.active_turn is None


def test_a_reply_larger_than_a_table_item_completes_its_turn(chat_table, materializer) -> None:
    # GIVEN a turn in progress and a reply of four full records (480 KB in UTF-8, more than a 400 KB item holds)
    session_id, turn = new_turn(chat_table)
    words = ["\u00e9" * 60_000] * 4
    batch = Stream().records(turn_records(session_id, turn, words))
    # WHEN the batch is materialized
    outcome = materializer.process(batch)
    # THEN the batch succeeds (no retries, nothing for the DLQ), the turn is complete with the exact text, and the
    # session is free: before, DynamoDB refused the turn item's update and the turn stayed in progress
    assert outcome.ok and outcome.turns_completed == 1
    stored = chat_table.get_turn(session_id, turn)
    assert stored is not None and (stored.status, stored.assistant) == (TurnStatus.COMPLETE, "".join(words))
    session = chat_table.get_session(session_id)
    assert session is not None and session.active_turn is None


def test_error_and_cancelled_turns_get_their_status(chat_table, materializer) -> None:
    # GIVEN one turn that ends in error and, after it, one that is cancelled
    session_id, first = new_turn(chat_table)
    error = ErrorInfo("model_stream_error", "the model stopped", retryable=True)
    failed = turn_records(session_id, first, ["partial"], error=error)
    stream = Stream()
    materializer.process(stream.records(failed))
    second = chat_table.turns.start_next(session_id, OWNER, "again")
    # WHEN the cancelled turn is materialized
    materializer.process(stream.records(turn_records(session_id, second, ["Once"], stop_reason=StopReason.CANCELLED)))
    # THEN each turn has the status its terminal record says, with the text it got
    turns = {t.turn: t for t in chat_table.list_turns(session_id)}
    assert (turns[first].status, turns[first].assistant, turns[first].error) == (
        TurnStatus.ERROR,
        "partial",
        error.to_dict(),
    )
    assert (turns[second].status, turns[second].assistant) == (TurnStatus.CANCELLED, "Once")


def test_redelivered_and_replayed_batches_leave_exactly_one_item_per_record(
    chat_table, materializer, dynamodb, table_name
) -> None:
    # GIVEN a turn's records, materialized once
    session_id, turn = new_turn(chat_table)
    batch = Stream().records(turn_records(session_id, turn, ["a", "b", "c"]))
    materializer.process(batch)
    items_after_first = item_count(dynamodb, table_name)
    # WHEN the same batch is redelivered, then replayed in other batch boundaries, with duplicates inside
    materializer.process(batch)
    for start in range(0, len(batch), 2):
        materializer.process(batch[start : start + 2] + batch[start : start + 1])
    # THEN the table holds the same items: one per record, and the same completed turn
    assert item_count(dynamodb, table_name) == items_after_first
    assert stored_keys(chat_table, session_id, turn) == [0, 1, 2, 3, 4]
    stored = chat_table.get_turn(session_id, turn)
    assert stored is not None and (stored.status, stored.assistant) == (TurnStatus.COMPLETE, "abc")


def test_records_out_of_order_within_a_batch_still_complete_the_turn_with_every_delta(chat_table, materializer) -> None:
    # GIVEN a batch where the stop record comes before some of the turn's deltas
    session_id, turn = new_turn(chat_table)
    tokens = turn_records(session_id, turn, [f" w{i}" for i in range(12)])
    shuffled = tokens[:3] + [tokens[-1]] + tokens[3:-1]
    random.Random(7).shuffle(shuffled)
    # WHEN it is materialized
    outcome = materializer.process(Stream().records(shuffled))
    # THEN the turn's text has every delta in seq order
    stored = chat_table.get_turn(session_id, turn)
    assert outcome.ok and outcome.incomplete_turns == 0
    assert stored is not None and stored.assistant == "".join(f" w{i}" for i in range(12))


def test_a_turn_without_its_start_record_completes_whole(chat_table, materializer) -> None:
    # GIVEN a turn's records without the start (Kinesis refused it in the call it shared with the first delta, and
    # the proxy died before putting it again)
    session_id, turn = new_turn(chat_table)
    tokens = turn_records(session_id, turn, ["one", " two"])
    # WHEN they are materialized
    outcome = materializer.process(Stream().records(tokens[1:]))
    # THEN the turn is complete with all its text, and not reported as missing records
    stored = chat_table.get_turn(session_id, turn)
    assert outcome.ok and outcome.incomplete_turns == 0
    assert stored is not None and (stored.status, stored.assistant) == (TurnStatus.COMPLETE, "one two")


def test_a_later_batch_first_completes_the_turn_and_a_redrive_of_the_earlier_one_fixes_the_text(
    chat_table, sink
) -> None:
    # GIVEN the first half of a turn was skipped (its batch went to the DLQ) and the second half arrived
    session_id, turn = new_turn(chat_table)
    tokens = turn_records(session_id, turn, ["one", " two", " three", " four"])
    stream = Stream()
    early, late = stream.records(tokens[:3]), stream.records(tokens[3:])
    live = Materializer(table=chat_table, poison_sink=sink)
    outcome = live.process(late)
    # THEN the turn ends (no reader waits forever), reported as incomplete
    stored = chat_table.get_turn(session_id, turn)
    assert outcome.incomplete_turns == 1
    assert stored is not None and (stored.status, stored.assistant) == (TurnStatus.COMPLETE, " three four")
    # WHEN the earlier records are re-processed with reconciliation (what the redrive tool does)
    redrive = Materializer(table=chat_table, poison_sink=sink, reconcile_finished_turns=True)
    outcome = redrive.process(early)
    # THEN the turn's text is whole
    stored = chat_table.get_turn(session_id, turn)
    assert outcome.ok and outcome.turns_reconciled == 1
    assert stored is not None and stored.assistant == "one two three four"


def test_poison_records_go_to_the_dlq_with_payload_while_the_rest_of_the_batch_is_written(
    chat_table, template, moto
) -> None:
    # GIVEN the consumer's DLQ and a batch with an undecodable record and a schema-invalid one
    sqs = boto3.client("sqs", region_name="us-east-1")
    queue_url = create_queue(sqs, template, "ConsumerDLQ")
    materializer = Materializer(table=chat_table, poison_sink=DeadLetterQueue(sqs, queue_url))
    session_id, turn = new_turn(chat_table)
    tokens = turn_records(session_id, turn, ["ok", " fine"])
    stream = Stream()
    garbage = b"\xff\xfe not json"
    invalid = json.dumps({"v": 1, "session_id": session_id, "turn": turn, "seq": 9, "type": "delta", "ts": 1}).encode()
    batch = stream.records(tokens[:2]) + [stream.record(garbage, session_id), stream.record(invalid, session_id)]
    batch += stream.records(tokens[2:])
    # WHEN it is materialized
    outcome = materializer.process(batch)
    # THEN both poison records are in the DLQ with payload, reason and coordinates, and count as processed
    assert outcome.ok and outcome.poison == 2
    messages = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10)["Messages"]
    bodies = sorted((json.loads(m["Body"]) for m in messages), key=lambda body: int(body["sequenceNumber"]))
    assert [base64.b64decode(body["payload"]) for body in bodies] == [garbage, invalid]
    assert bodies[0]["reason"].startswith("not JSON")
    assert "carries ['text']" in bodies[1]["reason"]
    assert [body["sequenceNumber"] for body in bodies] == [batch[2].sequence_number, batch[3].sequence_number]
    assert {(body["kind"], body["shardId"], body["streamArn"], body["partitionKey"]) for body in bodies} == {
        ("poison-record", SHARD, STREAM_ARN, session_id)
    }
    # AND the valid records are written and the turn completed
    stored = chat_table.get_turn(session_id, turn)
    assert stored_keys(chat_table, session_id, turn) == [0, 1, 2, 3]
    assert stored is not None and stored.assistant == "ok fine"


def test_a_record_whose_partition_key_is_not_its_session_is_poison(chat_table, materializer, sink) -> None:
    # GIVEN a valid record written under another partition key (which breaks per-session ordering)
    session_id, turn = new_turn(chat_table)
    record = Stream().record(TokenRecord.start(session_id, turn, 1), partition_key="someone-else")
    # WHEN it is materialized
    outcome = materializer.process([record])
    # THEN it goes to the DLQ, not into the table
    assert outcome.ok and [p.record.sequence_number for p in sink.sent] == [record.sequence_number]
    assert "partition key" in sink.sent[0].reason
    assert stored_keys(chat_table, session_id, turn) == []


class ThrottlingClient:
    """A DynamoDB client whose BatchWriteItem leaves one session's items unprocessed, or raises for them."""

    def __init__(self, client: Any, session_id: str, raise_error: bool = False) -> None:
        self._client = client
        self.prefix = f"S#{session_id}"
        self.raise_error = raise_error

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def batch_write_item(self, RequestItems: dict[str, list[dict[str, Any]]], **kwargs: Any) -> Any:  # noqa: N803
        ((table_name, requests),) = RequestItems.items()
        throttled = [r for r in requests if r["PutRequest"]["Item"]["pk"]["S"] == self.prefix]
        if throttled and self.raise_error:
            error = {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow down"}}
            raise ClientError(error, "BatchWriteItem")
        rest = [r for r in requests if r not in throttled]
        if rest:
            self._client.batch_write_item(RequestItems={table_name: rest}, **kwargs)
        return {"UnprocessedItems": {table_name: throttled} if throttled else {}}


@pytest.mark.parametrize("raise_error", [False, True], ids=["unprocessed-items", "throughput-exceeded"])
def test_throttling_fails_the_session_from_its_first_unwritten_record_and_other_sessions_go_on(
    chat_table, dynamodb, table_name, sink, raise_error
) -> None:
    # GIVEN two sessions whose records interleave in one batch; session A's first records are already written
    a_session, a_turn = new_turn(chat_table)
    b_session, b_turn = new_turn(chat_table)
    a_tokens = turn_records(a_session, a_turn, ["a1", "a2", "a3"])
    b_tokens = turn_records(b_session, b_turn, ["b1", "b2"])
    stream = Stream()
    Materializer(table=chat_table, poison_sink=sink).process(stream.records(a_tokens[:2]))
    batch: list[StreamRecord] = []
    for a_token, b_token in zip(a_tokens[2:], b_tokens, strict=False):
        batch += [stream.record(a_token), stream.record(b_token)]
    batch += stream.records(b_tokens[len(a_tokens) - 2 :])
    # AND DynamoDB throttles every write of session A
    throttled = ChatTable(
        ThrottlingClient(dynamodb, a_session, raise_error=raise_error), table_name, sleep=lambda _: None, max_attempts=2
    )
    # WHEN the batch is materialized
    outcome = Materializer(table=throttled, poison_sink=sink).process(batch)
    # THEN exactly session A's records of the batch are batch item failures, with the reason
    a_sequence_numbers = {r.sequence_number for r in batch if r.partition_key == a_session}
    assert set(outcome.failures) == a_sequence_numbers
    assert all("Throttled" in reason for reason in outcome.failures.values())
    # AND nothing later of A was written (its stop record is not an item, its turn is still in progress)
    assert stored_keys(chat_table, a_session, a_turn) == [0, 1]
    a_stored = chat_table.get_turn(a_session, a_turn)
    assert a_stored is not None and a_stored.status is TurnStatus.IN_PROGRESS
    # AND session B, in the same batch, is written and completed
    b_stored = chat_table.get_turn(b_session, b_turn)
    assert stored_keys(chat_table, b_session, b_turn) == [0, 1, 2, 3]
    assert b_stored is not None and (b_stored.status, b_stored.assistant) == (TurnStatus.COMPLETE, "b1b2")
    # WHEN the event source mapping retries from the lowest failed record, without throttling
    lowest = min(outcome.failures, key=int)
    retry = [r for r in batch if int(r.sequence_number) >= int(lowest)]
    outcome = Materializer(table=chat_table, poison_sink=sink).process(retry)
    # THEN session A is whole
    a_stored = chat_table.get_turn(a_session, a_turn)
    assert outcome.ok and a_stored is not None and a_stored.assistant == "a1a2a3"


def test_a_failure_after_the_turn_records_keeps_the_terminal_item_out_of_the_table(
    chat_table, sink, monkeypatch
) -> None:
    # GIVEN completing the turn item is throttled
    session_id, turn = new_turn(chat_table)

    def throttled_complete(record: TokenRecord, assistant: str, **texts: object) -> None:
        raise Throttled("DynamoDB ThrottlingException")

    monkeypatch.setattr(chat_table.turns, "end_from_stream", throttled_complete)
    batch = Stream().records(turn_records(session_id, turn, ["x", "y"]))
    # WHEN the turn's records are materialized
    outcome = Materializer(table=chat_table, poison_sink=sink).process(batch)
    # THEN the deltas are written, but the terminal record is a batch item failure and not an item yet
    assert list(outcome.failures) == [batch[-1].sequence_number]
    assert stored_keys(chat_table, session_id, turn) == [0, 1, 2]


def test_an_unavailable_dlq_fails_the_poison_record_so_the_mapping_delivers_it_again(chat_table) -> None:
    # GIVEN a DLQ that throttles, and a poison record in the middle of a session's records
    session_id, turn = new_turn(chat_table)
    tokens = turn_records(session_id, turn, ["p", "q"])
    stream = Stream()
    batch = stream.records(tokens[:2]) + [stream.record(b"garbage", session_id)] + stream.records(tokens[2:])
    # WHEN the batch is materialized
    outcome = Materializer(table=chat_table, poison_sink=RecordingSink(fail=True)).process(batch)
    # THEN the poison record is the batch item failure: the mapping retries from it, so it and every later record
    # come again (the session's records are written now, and written again then: the same items)
    assert list(outcome.failures) == [batch[2].sequence_number]
    assert stored_keys(chat_table, session_id, turn) == [0, 1, 2, 3]


def test_a_poison_record_after_a_failed_write_goes_to_the_dlq_once_not_with_every_retry(
    chat_table, dynamodb, table_name
) -> None:
    # GIVEN a batch of session A's delta, whose write is throttled, then a poison record of session B
    a_session, a_turn = new_turn(chat_table)
    stream = Stream()
    batch = [stream.record(turn_records(a_session, a_turn, ["a"])[1]), stream.record(b"garbage", "session-b")]
    throttled = ChatTable(ThrottlingClient(dynamodb, a_session), table_name, sleep=lambda _: None, max_attempts=1)
    sink = RecordingSink()
    # WHEN it is materialized, throttled, three times (the mapping's retries from the lowest failure), then not
    for _ in range(3):
        outcome = Materializer(table=throttled, poison_sink=sink).process(batch)
        # THEN the poison record waits: the mapping delivers it again with the failed record
        assert list(outcome.failures) == [batch[0].sequence_number] and sink.sent == []
    outcome = Materializer(table=chat_table, poison_sink=sink).process(batch)
    # AND it reaches the DLQ once, when the batch goes through
    assert outcome.ok and [poison.record.sequence_number for poison in sink.sent] == [batch[1].sequence_number]


def test_lambda_event_records_are_parsed_with_their_coordinates() -> None:
    # GIVEN one record of a Lambda Kinesis event read through an enhanced fan-out consumer
    raw = {
        "kinesis": {
            "partitionKey": "s1",
            "sequenceNumber": "4960",
            "data": base64.b64encode(b"payload").decode(),
            "approximateArrivalTimestamp": 1764400000.5,
        },
        "eventID": "shardId-000000000003:4960",
        "eventSourceARN": STREAM_ARN + "/consumer/chatstream-materializer:1764400000",
    }
    # WHEN it is parsed
    record = StreamRecord.from_lambda_record(raw)
    # THEN payload, shard, stream and arrival are known
    assert (record.data, record.shard_id, record.stream_arn) == (b"payload", "shardId-000000000003", STREAM_ARN)
    assert record.approximate_arrival == 1764400000.5 and record.undecodable is None


class RendezvousTable:
    """A ChatTable whose first record write of each session waits until every session has started writing."""

    def __init__(self, table: ChatTable, sessions: int) -> None:
        self._table = table
        self._barrier = threading.Barrier(sessions, timeout=10)
        self._arrived: set[str] = set()
        self._lock = threading.Lock()

    def put_records(self, records: Sequence[TokenRecord]) -> None:
        with self._lock:
            first = records[0].session_id not in self._arrived
            self._arrived.add(records[0].session_id)
        if first:
            self._barrier.wait()  # a BrokenBarrierError (after 10 s) if sessions are written one after another
        self._table.put_records(records)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._table, name)


def test_the_sessions_of_a_batch_are_written_concurrently(chat_table, sink) -> None:
    # GIVEN a batch holding four sessions' whole turns, interleaved
    turns = [new_turn(chat_table) for _ in range(4)]
    replies = [turn_records(session_id, turn, [f"w{i}", " x"]) for i, (session_id, turn) in enumerate(turns)]
    stream = Stream()
    batch = [stream.record(token) for step in zip(*replies, strict=True) for token in step]
    # AND a table on which each session's first write waits for all four to be writing at once
    table = RendezvousTable(chat_table, sessions=4)
    # WHEN the batch is materialized
    outcome = Materializer(table=table, poison_sink=sink).process(batch)  # type: ignore[arg-type]
    # THEN it succeeded (it could not have, one session after another), and every turn is complete
    assert outcome.ok and outcome.turns_completed == 4 and outcome.written == len(batch)
    for i, (session_id, turn) in enumerate(turns):
        stored = chat_table.get_turn(session_id, turn)
        assert stored is not None and stored.assistant == f"w{i} x"


def test_later_batches_are_written_by_the_threads_of_the_first(chat_table, materializer) -> None:
    # GIVEN two batches one after the other, each of three sessions' whole turns
    stream = Stream()

    def batch_of_three() -> list[Any]:
        replies = [turn_records(*new_turn(chat_table), ["a", "b"]) for _ in range(3)]
        return [stream.record(token) for step in zip(*replies, strict=True) for token in step]

    def materialize_threads() -> set[threading.Thread]:
        return {thread for thread in threading.enumerate() if thread.name.startswith("materialize")}

    # WHEN both are materialized
    first = materializer.process(batch_of_three())
    after_first = materialize_threads()
    second = materializer.process(batch_of_three())

    # THEN both were written; the threads the first started outlived it and wrote the second, never more of them
    # than the materializer's parallel keys
    assert first.ok and second.ok and first.turns_completed == second.turns_completed == 3
    after_second = materialize_threads()
    assert after_first and after_first <= after_second and len(after_second) <= materializer.parallel_keys
