"""The redrive tool on both kinds of DLQ message, against Kinesis, DynamoDB and SQS in moto."""

from __future__ import annotations

import base64
import json
import time
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from moto.sqs.exceptions import SQSException
from moto.sqs.models import SQSBackend

from chatstream.dlq import DeadLetterQueue
from chatstream.kinesis import StreamRecord
from chatstream.materialize import Materializer
from chatstream.records import TokenRecord
from chatstream.status import TurnStatus
from chatstream_local.resources import create_queue
from chatstream_ops.redrive import Redrive, RedriveStatus, main
from tests.builders import turn_records
from tests.support import load_sample

if TYPE_CHECKING:
    from chatstream.table import ChatTable

OWNER = "alice"
SHARD = "shardId-000000000000"


@pytest.fixture
def sqs(moto: None) -> Any:
    return boto3.client("sqs", region_name="us-east-1")


@pytest.fixture
def dlq(sqs: Any, template: Any) -> DeadLetterQueue:
    return DeadLetterQueue(sqs, create_queue(sqs, template, "ConsumerDLQ"))


@pytest.fixture
def redrive(dlq: DeadLetterQueue, kinesis: Any, chat_table: ChatTable) -> Redrive:
    materializer = Materializer(table=chat_table, poison_sink=dlq, reconcile_finished_turns=True)
    return Redrive(dlq=dlq, kinesis=kinesis, materializer=materializer, receive_wait_s=0)


def queued(dlq: DeadLetterQueue) -> list[dict[str, Any]]:
    """Every message in the queue (received, then made visible again)."""
    messages = dlq.receive(10, visibility_timeout_s=0, wait_s=0)
    return [json.loads(message.body) for message in messages]


def put_turn(kinesis: Any, stream_name: str, tokens: list[TokenRecord]) -> list[str]:
    return [
        kinesis.put_record(StreamName=stream_name, Data=t.encode(), PartitionKey=t.session_id)["SequenceNumber"]
        for t in tokens
    ]


def new_turn(table: ChatTable) -> tuple[str, int]:
    session_id = table.create_session(OWNER)
    return session_id, table.turns.start_next(session_id, OWNER, "hello")


def on_failure_message(stream_arn: str, start: str, end: str, batch_size: int) -> str:
    """The sample on-failure record (docs/samples/), pointing at a range of this test's stream."""
    body = load_sample("consumer-dlq-onfailure-message.json")
    body["KinesisBatchInfo"].update(
        startSequenceNumber=start, endSequenceNumber=end, batchSize=batch_size, streamArn=stream_arn
    )
    return json.dumps(body)


def test_an_on_failure_range_is_re_read_and_restores_the_missing_items(
    redrive, dlq, sqs, kinesis, stream_name, chat_table
) -> None:
    # GIVEN a turn whose first records the consumer skipped (their batch went to the DLQ) while the rest arrived
    session_id, turn = new_turn(chat_table)
    tokens = turn_records(session_id, turn, ["Re", "drive", "n"])
    sequence_numbers = put_turn(kinesis, stream_name, tokens)
    arn = kinesis.describe_stream_summary(StreamName=stream_name)["StreamDescriptionSummary"]["StreamARN"]
    live = Materializer(table=chat_table, poison_sink=dlq)
    live.process([StreamRecord(sequence_numbers[-1], session_id, tokens[-1].encode(), SHARD, arn)])
    sqs.send_message(
        QueueUrl=dlq.queue_url, MessageBody=on_failure_message(arn, sequence_numbers[0], sequence_numbers[-2], 4)
    )
    # WHEN the DLQ is redriven
    report = redrive.run()
    # THEN the missing items are written, the turn's text is whole, and the message is gone
    assert report.ok, report.render()
    assert [r.seq for r in chat_table.query_records(session_id, turn)] == [0, 1, 2, 3, 4]
    stored = chat_table.get_turn(session_id, turn)
    assert stored is not None and (stored.status, stored.assistant) == (TurnStatus.COMPLETE, "Redriven")
    assert queued(dlq) == []
    assert "1 redriven" in report.render()


def test_a_poison_message_that_is_now_valid_is_written_and_one_that_is_not_stays_with_a_reason(
    redrive, dlq, sqs, chat_table, monkeypatch
) -> None:
    # GIVEN the sample poison message (a truncated record), and one whose payload is a valid record
    bad = load_sample("consumer-dlq-poison-message.json")
    session_id = bad["partitionKey"]
    monkeypatch.setattr("chatstream.table.sessions.new_session_id", lambda: session_id)
    chat_table.create_session(OWNER)
    turn = chat_table.turns.start_next(session_id, OWNER, "hi")
    good = dict(bad, payload=base64.b64encode(TokenRecord.delta(session_id, turn, 2, " there", 5).encode()).decode())
    good["sequenceNumber"] = str(int(bad["sequenceNumber"]) + 1)
    for body in (bad, good):
        sqs.send_message(QueueUrl=dlq.queue_url, MessageBody=json.dumps(body))
    # WHEN the DLQ is redriven
    report = redrive.run()
    # THEN the valid record is an item and its message is deleted
    assert [r.seq for r in chat_table.query_records(session_id, turn)] == [2]
    # AND the still-invalid one stays in the queue, reported with the reason, and the run fails
    assert not report.ok
    (left,) = [r for r in report.results if r.status is RedriveStatus.LEFT]
    assert "still not a valid token record (not JSON" in left.detail
    assert [body["sequenceNumber"] for body in queued(dlq)] == [bad["sequenceNumber"]]


def test_redrive_is_idempotent_when_run_twice(
    redrive, dlq, sqs, kinesis, stream_name, chat_table, dynamodb, table_name
) -> None:
    # GIVEN an on-failure message for a whole turn the consumer never wrote
    session_id, turn = new_turn(chat_table)
    sequence_numbers = put_turn(kinesis, stream_name, turn_records(session_id, turn, ["a", "b"]))
    arn = kinesis.describe_stream_summary(StreamName=stream_name)["StreamDescriptionSummary"]["StreamARN"]
    sqs.send_message(
        QueueUrl=dlq.queue_url, MessageBody=on_failure_message(arn, sequence_numbers[0], sequence_numbers[-1], 4)
    )
    # WHEN the redrive runs twice
    first = redrive.run()
    items = dynamodb.scan(TableName=table_name, Select="COUNT")["Count"]
    second = redrive.run()
    # THEN the first restored the turn, and the second found nothing to do and changed nothing
    stored = chat_table.get_turn(session_id, turn)
    assert first.ok and [r.status for r in first.results] == [RedriveStatus.REDRIVEN]
    assert stored is not None and stored.assistant == "ab"
    assert second.ok and second.results == []
    assert dynamodb.scan(TableName=table_name, Select="COUNT")["Count"] == items


def test_records_no_longer_in_the_stream_are_reported_lost_by_shard_and_range(
    redrive, dlq, sqs, kinesis, stream_name
) -> None:
    # GIVEN an on-failure message for a range the stream no longer has (before its oldest record: trimmed; moto
    # numbers a shard's records from 1)
    put_turn(kinesis, stream_name, turn_records("s1", 1, ["x"]))
    arn = kinesis.describe_stream_summary(StreamName=stream_name)["StreamDescriptionSummary"]["StreamARN"]
    sqs.send_message(QueueUrl=dlq.queue_url, MessageBody=on_failure_message(arn, "0", "0", 1))
    # WHEN the DLQ is redriven
    report = redrive.run()
    # THEN the range is reported lost by shard and sequence numbers, the message stays, and the run fails
    (result,) = report.results
    (lost,) = result.lost
    assert (lost.shard_id, lost.first, lost.last) == (SHARD, "0", "0")
    assert not report.ok and "LOST shardId-000000000000 sequence numbers 0 (no longer in the stream)" in report.render()
    assert result.status is RedriveStatus.LEFT and len(queued(dlq)) == 1
    # WHEN the operator accepts the loss, in a dry run first
    redrive.discard_lost = True
    dry = redrive.run(dry_run=True)
    # THEN the dry run says the message would be discarded (not redriven)
    assert [r.status for r in dry.results] == [RedriveStatus.WOULD_DISCARD] and len(queued(dlq)) == 1
    # WHEN the run is made
    report = redrive.run()
    # THEN the message is deleted and reported discarded, not redriven, with its loss
    (result,) = report.results
    assert result.status is RedriveStatus.DISCARDED and result.lost
    assert "] discarded: " in report.render() and "summary: 1 discarded; 1 lost range(s)" in report.render()
    assert queued(dlq) == []


def test_a_shard_the_stream_no_longer_has_is_lost(redrive, dlq, sqs, kinesis, stream_name) -> None:
    # GIVEN an on-failure message for a shard the stream no longer has (a shard closed by a reshard expires)
    arn = kinesis.describe_stream_summary(StreamName=stream_name)["StreamDescriptionSummary"]["StreamARN"]
    body = json.loads(on_failure_message(arn, "1", "2", 2))
    body["KinesisBatchInfo"]["shardId"] = "shardId-000000000007"
    sqs.send_message(QueueUrl=dlq.queue_url, MessageBody=json.dumps(body))
    # WHEN the DLQ is redriven
    report = redrive.run()
    # THEN its range is lost
    (result,) = report.results
    assert [(lost.shard_id, lost.first, lost.last) for lost in result.lost] == [("shardId-000000000007", "1", "2")]
    assert "the stream no longer has the shard" in report.render()


def test_a_message_is_not_read_from_another_stream_than_its_own(
    redrive, dlq, sqs, kinesis, stream_name, chat_table
) -> None:
    # GIVEN an on-failure message whose records are in the stream, and a redrive told another stream's name (a
    # stale TOKEN_STREAM_NAME, a typo in --stream-name) that accepts lost records
    session_id, turn = new_turn(chat_table)
    sequence_numbers = put_turn(kinesis, stream_name, turn_records(session_id, turn, ["a"]))
    arn = kinesis.describe_stream_summary(StreamName=stream_name)["StreamDescriptionSummary"]["StreamARN"]
    sqs.send_message(
        QueueUrl=dlq.queue_url, MessageBody=on_failure_message(arn, sequence_numbers[0], sequence_numbers[-1], 3)
    )
    redrive.stream_name = "chatstream-staging-TokenStream"
    redrive.discard_lost = True
    # WHEN the DLQ is redriven
    report = redrive.run()
    # THEN the message is left, not lost, saying which stream holds its records; the queue and the table keep it all
    (result,) = report.results
    assert result.status is RedriveStatus.LEFT and result.lost == []
    assert f"its records are in stream '{stream_name}', not 'chatstream-staging-TokenStream'" in result.detail
    assert f"--stream-name {stream_name}" in result.detail
    assert not report.ok and len(queued(dlq)) == 1
    assert chat_table.query_records(session_id, turn) == []


def test_a_message_of_another_accounts_stream_of_the_same_name_is_not_read(
    redrive, dlq, sqs, kinesis, stream_name, chat_table
) -> None:
    # GIVEN an on-failure message of a stream named as this run's, in another account (whose records a read by name
    # would look for in this account's stream, and find lost), and a redrive that accepts lost records
    other = f"arn:aws:kinesis:us-east-1:999999999999:stream/{stream_name}"
    sqs.send_message(QueueUrl=dlq.queue_url, MessageBody=on_failure_message(other, "1", "2", 2))
    redrive.stream_name = stream_name
    redrive.discard_lost = True
    # WHEN the DLQ is redriven THEN the message is left, naming the account, and nothing is counted lost
    (result,) = redrive.run().results
    assert result.status is RedriveStatus.LEFT and result.lost == []
    assert "is in account 999999999999, not 123456789012" in result.detail and len(queued(dlq)) == 1


def test_the_cli_reads_one_stream_and_one_stacks_resources_only(
    dlq, chat_table, table_name, stream_name, monkeypatch, capsys
) -> None:
    monkeypatch.delenv("TOKEN_STREAM_NAME", raising=False)
    monkeypatch.delenv("CHATSTREAM_STACK_NAME", raising=False)
    # GIVEN no stream named anywhere WHEN the CLI runs THEN it stops in one line: it reads one stream's records only
    assert main(["--queue-url", dlq.queue_url, "--table-name", table_name]) == 2
    assert "the token stream is unknown: pass --stream-name" in capsys.readouterr().err
    # GIVEN a stack, and a table named besides it that is not the stack's (another deployment's)
    cloudformation = boto3.client("cloudformation", region_name="us-east-1")
    outputs = {"ConsumerDLQUrl": dlq.queue_url, "ChatTableName": table_name, "TokenStreamName": stream_name}
    body = {
        "Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
        "Outputs": {name: {"Value": value} for name, value in outputs.items()},
    }
    cloudformation.create_stack(StackName="chat", TemplateBody=json.dumps(body))
    # WHEN the CLI runs THEN it refuses in one line, naming both, rather than redrive one stack's DLQ into another
    assert main(["--stack-name", "chat", "--table-name", "other-ChatTable"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'other-ChatTable' is not stack 'chat'" in err


def test_a_stream_that_is_not_found_is_not_a_loss(redrive, dlq, sqs, kinesis, stream_name) -> None:
    # GIVEN an on-failure message naming a stream this account and region do not have, and a redrive that accepts
    # lost records
    gone = on_failure_message("arn:aws:kinesis:us-east-1:123456789012:stream/elsewhere", "1", "2", 2)
    sqs.send_message(QueueUrl=dlq.queue_url, MessageBody=gone)
    redrive.discard_lost = True
    # WHEN the DLQ is redriven
    report = redrive.run()
    # THEN the message is left, not lost, saying the stream was not found and what to check
    (result,) = report.results
    assert result.status is RedriveStatus.LEFT and result.lost == []
    assert "stream 'elsewhere' not found in region us-east-1" in result.detail and "check the account" in result.detail
    assert not report.ok and len(queued(dlq)) == 1


def test_a_message_of_another_region_is_not_read_here(redrive, dlq, sqs, kinesis, stream_name) -> None:
    # GIVEN an on-failure message naming a stream of the same name in another region
    arn = kinesis.describe_stream_summary(StreamName=stream_name)["StreamDescriptionSummary"]["StreamARN"]
    sqs.send_message(
        QueueUrl=dlq.queue_url, MessageBody=on_failure_message(arn.replace("us-east-1", "eu-west-1"), "1", "2", 2)
    )
    redrive.discard_lost = True
    # WHEN the DLQ is redriven in us-east-1
    report = redrive.run()
    # THEN the message is left, not lost, naming the region to run in
    (result,) = report.results
    assert result.status is RedriveStatus.LEFT and result.lost == []
    assert "is in region eu-west-1, not us-east-1: run with --region eu-west-1" in result.detail
    assert len(queued(dlq)) == 1


def test_dry_run_writes_and_deletes_nothing(redrive, dlq, sqs, kinesis, stream_name, chat_table) -> None:
    # GIVEN an on-failure message for records the table does not have
    session_id, turn = new_turn(chat_table)
    sequence_numbers = put_turn(kinesis, stream_name, turn_records(session_id, turn, ["x"]))
    arn = kinesis.describe_stream_summary(StreamName=stream_name)["StreamDescriptionSummary"]["StreamARN"]
    sqs.send_message(
        QueueUrl=dlq.queue_url, MessageBody=on_failure_message(arn, sequence_numbers[0], sequence_numbers[-1], 3)
    )
    # WHEN a dry run is made
    report = redrive.run(dry_run=True)
    # THEN it says what it would do, and the table and the queue are unchanged
    assert [(r.status, r.records) for r in report.results] == [(RedriveStatus.WOULD_REDRIVE, 3)]
    assert chat_table.query_records(session_id, turn) == []
    assert len(queued(dlq)) == 1


def test_the_cli_takes_the_queue_and_table_and_caps_with_max(
    dlq, sqs, kinesis, chat_table, table_name, stream_name, capsys
) -> None:
    # GIVEN three unknown messages in the DLQ
    for i in range(3):
        sqs.send_message(QueueUrl=dlq.queue_url, MessageBody=json.dumps({"something": i}))
    # WHEN the CLI runs with --max 2
    status = main(
        ["--queue-url", dlq.queue_url, "--table-name", table_name, "--stream-name", stream_name, "--max", "2"]
    )
    # THEN it handled two, printed the report, and exits non-zero because they could not be redriven
    out = capsys.readouterr().out
    assert status == 1
    assert out.count("not a poison-record or on-failure message") == 2
    assert len(queued(dlq)) == 3


def test_the_cli_names_what_is_missing(monkeypatch, capsys) -> None:
    # GIVEN no queue URL anywhere
    monkeypatch.delenv("DLQ_URL", raising=False)
    monkeypatch.delenv("CHATSTREAM_STACK_NAME", raising=False)
    # WHEN the CLI runs
    status = main(["--table-name", "t"])
    # THEN it stops with one line naming the option
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "--queue-url" in err


def test_discard_invalid_deletes_what_can_never_be_redriven_and_keeps_the_rest(
    dlq, sqs, kinesis, chat_table, table_name, stream_name, capsys
) -> None:
    # GIVEN a poison record that is still invalid, a message that is not one of this DLQ's, an on-failure record
    # without its stream ARN, and an on-failure record of a stream that is not found
    poison = load_sample("consumer-dlq-poison-message.json")
    sqs.send_message(QueueUrl=dlq.queue_url, MessageBody=json.dumps(poison))
    sqs.send_message(QueueUrl=dlq.queue_url, MessageBody=json.dumps({"something": 1}))
    no_stream = json.loads(on_failure_message("", "1", "2", 2))
    del no_stream["KinesisBatchInfo"]["streamArn"]
    sqs.send_message(QueueUrl=dlq.queue_url, MessageBody=json.dumps(no_stream))
    lost = on_failure_message("arn:aws:kinesis:us-east-1:123456789012:stream/gone", "1", "2", 2)
    sqs.send_message(QueueUrl=dlq.queue_url, MessageBody=lost)
    args = ["--queue-url", dlq.queue_url, "--table-name", table_name, "--stream-name", stream_name]
    # WHEN the run does not ask for it THEN each of the three says --discard-invalid deletes it
    assert main(args) == 1
    out = capsys.readouterr().out
    assert out.count("(--discard-invalid deletes it)") == 3
    assert "an on-failure record without KinesisBatchInfo.streamArn (--discard-invalid deletes it)" in out
    # WHEN a dry run asks for it THEN it says what it would discard and deletes nothing
    assert main([*args, "--discard-invalid", "--dry-run"]) == 1
    assert capsys.readouterr().out.count("] would discard: ") == 3 and len(queued(dlq)) == 4
    # WHEN the run asks for it THEN the three are deleted and reported, without their payload; the other stays
    assert main([*args, "--discard-invalid"]) == 1
    out = capsys.readouterr().out
    assert out.count("] discarded: ") == 3
    assert poison["payload"] not in out
    assert [body.get("requestContext", {}).get("condition") for body in queued(dlq)] == ["RetryAttemptsExhausted"]


def test_with_a_stack_the_items_written_expire_after_its_ttl_days(
    dlq, sqs, kinesis, chat_table, table_name, stream_name, dynamodb, monkeypatch
) -> None:
    # GIVEN a stack deployed with TtlDays=7, whose DLQ holds a poison record that is now valid
    cloudformation = boto3.client("cloudformation", region_name="us-east-1")
    body = {
        "Parameters": {"TtlDays": {"Type": "Number"}},
        "Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
        "Outputs": {
            "ConsumerDLQUrl": {"Value": dlq.queue_url},
            "ChatTableName": {"Value": table_name},
            "TokenStreamName": {"Value": stream_name},
        },
    }
    cloudformation.create_stack(
        StackName="chat", TemplateBody=json.dumps(body), Parameters=[{"ParameterKey": "TtlDays", "ParameterValue": "7"}]
    )
    poison = load_sample("consumer-dlq-poison-message.json")
    session_id = poison["partitionKey"]
    monkeypatch.setattr("chatstream.table.sessions.new_session_id", lambda: session_id)
    chat_table.create_session(OWNER)
    turn = chat_table.turns.start_next(session_id, OWNER, "hi")
    record = TokenRecord.delta(session_id, turn, 2, " there", 1_700_000_000_000)
    poison["payload"] = base64.b64encode(record.encode()).decode()
    sqs.send_message(QueueUrl=dlq.queue_url, MessageBody=json.dumps(poison))
    monkeypatch.delenv("TTL_DAYS", raising=False)
    # WHEN it is redriven by the stack's name
    assert main(["--stack-name", "chat"]) == 0
    # THEN the item expires TtlDays (7) after the record was written, as the consumer's items do
    key = {"pk": {"S": f"S#{session_id}"}, "sk": {"S": f"R#{turn:06d}#{2:08d}"}}
    item = dynamodb.get_item(TableName=table_name, Key=key).get("Item")
    assert item is not None and int(item["expires_at"]["N"]) == 1_700_000_000 + 7 * 86_400


def test_a_range_the_reads_stop_short_of_is_kept_not_redriven_as_whole(
    redrive, dlq, sqs, kinesis, stream_name, chat_table
) -> None:
    # GIVEN an on-failure message whose range ends past every record the stream gives (its last records unread)
    session_id, turn = new_turn(chat_table)
    sequence_numbers = put_turn(kinesis, stream_name, turn_records(session_id, turn, ["a", "b"]))
    arn = kinesis.describe_stream_summary(StreamName=stream_name)["StreamDescriptionSummary"]["StreamARN"]
    end = str(int(sequence_numbers[-1]) + 1000)
    sqs.send_message(QueueUrl=dlq.queue_url, MessageBody=on_failure_message(arn, sequence_numbers[0], end, 6))
    # WHEN the DLQ is redriven
    report = redrive.run()
    # THEN what was read is written, but the message stays, its unread tail reported, for a later run
    assert [r.seq for r in chat_table.query_records(session_id, turn)] == [0, 1, 2, 3]
    assert not report.ok and f"{sequence_numbers[-1]}..{end} (not read after the first" in report.render()
    assert len(queued(dlq)) == 1
    # AND --discard-lost does not delete it: its records are not known to be gone
    redrive.discard_lost = True
    assert redrive.run().results[0].status is RedriveStatus.LEFT and len(queued(dlq)) == 1


class Clock:
    """One clock for moto's SQS (when a received message is visible again) and the redrive, moved on by the test."""

    def __init__(self) -> None:
        self.s = time.time()

    def __call__(self) -> float:
        return self.s

    def millis(self) -> float:
        return self.s * 1000


def expired_messages_refuse_visibility_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    """moto's ChangeMessageVisibility as SQS answers it for a message whose visibility timeout ran out."""
    original = SQSBackend.change_message_visibility

    def change(self: SQSBackend, queue_name: str, receipt_handle: str, visibility_timeout: int) -> None:
        queue = self.get_queue(queue_name)
        if any(m.had_receipt_handle(receipt_handle) and m.visible for m in queue._messages):
            raise SQSException("AWS.SimpleQueueService.MessageNotInflight", "The message is not in flight.")
        original(self, queue_name, receipt_handle, visibility_timeout)

    monkeypatch.setattr(SQSBackend, "change_message_visibility", change)


@pytest.mark.parametrize(
    ("seconds_per_message", "strict"),
    [(20, False), (40, True)],
    ids=["the-run-keeps-its-messages-hidden", "its-messages-come-back-and-are-held-again"],
)
def test_a_run_longer_than_the_visibility_timeout_reads_every_message(
    redrive, dlq, sqs, monkeypatch, seconds_per_message, strict
) -> None:
    # GIVEN twelve messages (more than one receive hands out), a visibility timeout of 30 s, and a run that spends
    # 20 s on each message (or 40 s, longer than the timeout, where SQS refuses to hide again a message visible
    # again), so the first ten received outlast their visibility timeout before the last two are received
    for i in range(12):
        sqs.send_message(QueueUrl=dlq.queue_url, MessageBody=json.dumps({"something": i}))
    clock = Clock()
    monkeypatch.setattr("moto.sqs.models.unix_time_millis", clock.millis)
    if strict:
        expired_messages_refuse_visibility_changes(monkeypatch)
    redrive.now, redrive.visibility_timeout_s = clock, 30
    handle = redrive.redrive

    def slow(message: Any, dry_run: bool = False) -> Any:
        clock.s += seconds_per_message
        return handle(message, dry_run)

    monkeypatch.setattr(redrive, "redrive", slow)
    # WHEN the DLQ is redriven
    report = redrive.run()
    # THEN every message is reported once, and all stay in the queue, visible again (a moment after the run)
    assert len(report.results) == 12 and len({r.message_id for r in report.results}) == 12
    clock.s += 1
    attributes = sqs.get_queue_attributes(QueueUrl=dlq.queue_url, AttributeNames=["ApproximateNumberOfMessages"])
    assert attributes["Attributes"]["ApproximateNumberOfMessages"] == "12"
    assert report.unfinished is None and "not finished" not in report.render()


def test_the_cli_stops_in_one_line_when_the_table_is_not_found(dlq, sqs, capsys) -> None:
    # GIVEN a DLQ holding a message, and a table name that no table has
    sqs.send_message(QueueUrl=dlq.queue_url, MessageBody=json.dumps({"something": 1}))
    # WHEN the CLI runs
    status = main(["--queue-url", dlq.queue_url, "--table-name", "chatstream-typo-ChatTable"])
    # THEN it stops with one line naming the table and what to check, exit 2, and leaves the queue as it was
    captured = capsys.readouterr()
    assert status == 2 and captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith("redrive: table 'chatstream-typo-ChatTable' not found in region us-east-1")
    assert "--table-name" in captured.err
    assert len(queued(dlq)) == 1
