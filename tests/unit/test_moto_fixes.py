"""The local stack's moto patches behave as the services do (see chatstream_local.moto and docs/LOCAL_STACK.md)."""

from __future__ import annotations

import base64
import json
import sys
import threading
from typing import TYPE_CHECKING, Any

import pytest
from botocore.exceptions import ClientError

from chatstream_local.moto import WAIT_HEADER
from chatstream_local.moto.dynamodb_wire_form import NotWireForm, wire_attribute_value
from chatstream_local.moto.kinesis_push import PUTS

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_kinesis import KinesisClient


def _iterator(kinesis: KinesisClient, stream_name: str, kind: str = "TRIM_HORIZON", **at: str) -> str:
    shard = kinesis.list_shards(StreamName=stream_name)["Shards"][0]["ShardId"]
    return kinesis.get_shard_iterator(StreamName=stream_name, ShardId=shard, ShardIteratorType=kind, **at)[
        "ShardIterator"
    ]


def test_concurrent_writers_lose_no_kinesis_record(kinesis: KinesisClient, stream_name: str) -> None:
    # GIVEN eight writers putting 100 records each at the same time
    def write(writer: int) -> None:
        for batch in range(10):
            kinesis.put_records(
                StreamName=stream_name,
                Records=[{"Data": f"{writer}-{batch}-{i}".encode(), "PartitionKey": str(writer)} for i in range(10)],
            )

    threads = [threading.Thread(target=write, args=(writer,)) for writer in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # WHEN the shard is read in pages of 64 THEN every record is there once, in sequence-number order
    iterator, seen, sequence_numbers = _iterator(kinesis, stream_name), [], []
    while True:
        page = kinesis.get_records(ShardIterator=iterator, Limit=64)
        if not page["Records"]:
            break
        seen += [record["Data"].decode() for record in page["Records"]]
        sequence_numbers += [int(record["SequenceNumber"]) for record in page["Records"]]
        iterator = page["NextShardIterator"]
    assert sorted(seen) == sorted(f"{w}-{b}-{i}" for w in range(8) for b in range(10) for i in range(10))
    assert sequence_numbers == sorted(set(sequence_numbers))


def test_get_records_starts_at_the_iterators_position(kinesis: KinesisClient, stream_name: str) -> None:
    sequence_numbers = [
        kinesis.put_record(StreamName=stream_name, Data=str(i).encode(), PartitionKey="k")["SequenceNumber"]
        for i in range(5)
    ]
    after = _iterator(kinesis, stream_name, "AFTER_SEQUENCE_NUMBER", StartingSequenceNumber=sequence_numbers[1])
    assert [r["Data"] for r in kinesis.get_records(ShardIterator=after)["Records"]] == [b"2", b"3", b"4"]
    at = _iterator(kinesis, stream_name, "AT_SEQUENCE_NUMBER", StartingSequenceNumber=sequence_numbers[3])
    assert [r["Data"] for r in kinesis.get_records(ShardIterator=at, Limit=1)["Records"]] == [b"3"]


def test_query_reads_one_partition_in_order_with_pages(dynamodb: DynamoDBClient, table_name: str) -> None:
    # GIVEN two partitions
    for pk in ("a", "b"):
        for sk in range(30):
            dynamodb.put_item(TableName=table_name, Item={"pk": {"S": pk}, "sk": {"S": f"{sk:03d}"}})

    # WHEN one is queried in pages of 7, forwards and backwards
    def query(forward: bool) -> list[str]:
        keys, start = [], None
        while True:
            kwargs = {"ExclusiveStartKey": start} if start else {}
            page = dynamodb.query(
                TableName=table_name,
                KeyConditionExpression="pk = :pk AND sk BETWEEN :lo AND :hi",
                ExpressionAttributeValues={":pk": {"S": "b"}, ":lo": {"S": "005"}, ":hi": {"S": "024"}},
                Limit=7,
                ScanIndexForward=forward,
                **kwargs,
            )
            keys += [item["sk"]["S"] for item in page["Items"]]
            start = page.get("LastEvaluatedKey")
            if not start:
                return keys

    # THEN it gets exactly that partition's range, in order, across pages; a scan still sees every item
    assert query(True) == [f"{sk:03d}" for sk in range(5, 25)]
    assert query(False) == [f"{sk:03d}" for sk in reversed(range(5, 25))]
    assert dynamodb.scan(TableName=table_name)["Count"] == 60


def test_an_index_query_reads_the_index_not_a_partition_of_the_table(dynamodb: DynamoDBClient) -> None:
    # GIVEN a table with a global secondary index on g, whose items are in many table partitions
    dynamodb.create_table(
        TableName="indexed",
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": name, "AttributeType": "S"} for name in ("pk", "sk", "g")],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "by-g",
                "KeySchema": [{"AttributeName": "g", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
    )
    for n in range(6):
        item = {"pk": {"S": f"p{n}"}, "sk": {"S": f"{n:02d}"}, "g": {"S": "even" if n % 2 == 0 else "odd"}}
        dynamodb.put_item(TableName="indexed", Item=item)
    # WHEN the index is queried (a base-table partition with the same key value has other items)
    dynamodb.put_item(TableName="indexed", Item={"pk": {"S": "even"}, "sk": {"S": "99"}, "g": {"S": "none"}})
    items = dynamodb.query(
        TableName="indexed",
        IndexName="by-g",
        KeyConditionExpression="g = :g",
        ExpressionAttributeValues={":g": {"S": "even"}},
    )["Items"]
    # THEN it answers from the index: the items whose g matches, across partitions, in sort-key order
    assert [item["pk"]["S"] for item in items] == ["p0", "p2", "p4"]


@pytest.fixture
def frequent_thread_switches() -> Iterator[None]:
    """Switch threads every microsecond (not every 5 ms), so races between requests show up in a short test."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


def _transact_put(dynamodb: DynamoDBClient, table_name: str, items: list[dict[str, str]], *, fail: bool) -> bool:
    """Put ``items`` in one transaction, plus a condition check that fails when ``fail``; whether it committed."""
    actions: list[dict[str, Any]] = [
        {"Put": {"TableName": table_name, "Item": {k: {"S": v} for k, v in item.items()}}} for item in items
    ]
    actions.append(
        {
            "ConditionCheck": {
                "TableName": table_name,
                "Key": {"pk": {"S": "guard"}, "sk": {"S": "guard"}},
                "ConditionExpression": "attribute_not_exists(pk)" if fail else "attribute_exists(pk)",
            }
        }
    )
    try:
        dynamodb.transact_write_items(TransactItems=actions)  # type: ignore[arg-type]
    except ClientError as err:  # not client.exceptions.…: botocore builds those lazily, racily across threads
        assert err.response["Error"]["Code"] == "TransactionCanceledException"
        reasons = [r["Code"] for r in err.response["CancellationReasons"]]  # type: ignore[typeddict-item]
        assert reasons == ["None"] * len(items) + ["ConditionalCheckFailed"]
        return False
    return True


def test_a_cancelled_transaction_restores_exactly_its_items(dynamodb: DynamoDBClient, table_name: str) -> None:
    # GIVEN an item the transaction will overwrite, and the guard item its condition checks
    dynamodb.put_item(TableName=table_name, Item={"pk": {"S": "a"}, "sk": {"S": "1"}, "v": {"S": "before"}})
    dynamodb.put_item(TableName=table_name, Item={"pk": {"S": "guard"}, "sk": {"S": "guard"}})
    # WHEN a transaction overwrites it and creates another, then fails its condition
    committed = _transact_put(
        dynamodb, table_name, [{"pk": "a", "sk": "1", "v": "after"}, {"pk": "a", "sk": "2", "v": "new"}], fail=True
    )
    # THEN nothing it did is left; and the same transaction without the failing check commits both
    assert not committed
    items = dynamodb.query(
        TableName=table_name, KeyConditionExpression="pk = :a", ExpressionAttributeValues={":a": {"S": "a"}}
    )["Items"]
    assert [(i["sk"]["S"], i["v"]["S"]) for i in items] == [("1", "before")]
    assert _transact_put(dynamodb, table_name, [{"pk": "a", "sk": "2", "v": "new"}], fail=False)


@pytest.mark.usefixtures("frequent_thread_switches")
def test_cancelled_transactions_never_undo_other_writers(dynamodb: DynamoDBClient, table_name: str) -> None:
    # GIVEN a guard item, so that one thread's transactions are all cancelled (unpatched moto rolls back by putting
    # back a copy of the whole table, taken before the transaction: other writers' items are lost)
    dynamodb.put_item(TableName=table_name, Item={"pk": {"S": "guard"}, "sk": {"S": "guard"}})
    for i in range(200):
        dynamodb.put_item(TableName=table_name, Item={"pk": {"S": "filler"}, "sk": {"S": f"{i:04d}"}})
    stop = threading.Event()

    cancelled = []

    def cancel_forever() -> None:
        while not stop.is_set():
            cancelled.append(not _transact_put(dynamodb, table_name, [{"pk": "t", "sk": "x"}], fail=True))

    canceller = threading.Thread(target=cancel_forever)
    canceller.start()
    # WHEN another writer puts 150 items meanwhile
    try:
        for i in range(150):
            dynamodb.put_item(TableName=table_name, Item={"pk": {"S": "w"}, "sk": {"S": f"{i:04d}"}})
    finally:
        stop.set()
        canceller.join()
    # THEN the other thread's transactions were all cancelled meanwhile, and every one of the items is there
    assert cancelled and all(cancelled)
    count = dynamodb.query(
        TableName=table_name,
        KeyConditionExpression="pk = :w",
        ExpressionAttributeValues={":w": {"S": "w"}},
        Select="COUNT",
    )["Count"]
    assert count == 150


@pytest.mark.usefixtures("frequent_thread_switches")
def test_a_conditional_put_wins_once_under_contention(dynamodb: DynamoDBClient, table_name: str) -> None:
    # GIVEN 16 threads that each try to create the same 60 items, each with its own keys
    wins: list[int] = []
    codes: list[str] = []
    barrier = threading.Barrier(16)

    def create(writer: int) -> None:
        barrier.wait()
        for n in range(60):
            try:
                dynamodb.put_item(
                    TableName=table_name,
                    Item={"pk": {"S": "race"}, "sk": {"S": f"{n:02d}"}, "w": {"N": str(writer)}},
                    ConditionExpression="attribute_not_exists(pk)",
                )
            except ClientError as err:
                codes.append(err.response["Error"]["Code"])
                continue
            wins.append(n)

    threads = [threading.Thread(target=create, args=(w,)) for w in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # THEN each item was created by exactly one writer, and every other attempt failed its condition
    assert sorted(wins) == list(range(60))
    assert len(codes) == 16 * 60 - 60 and set(codes) == {"ConditionalCheckFailedException"}


def _claim(dynamodb: DynamoDBClient, table_name: str, key: dict[str, Any], writer: int) -> None:
    # w is replaced, not added: moto's UpdateItem handler copies the item before it takes the write lock, and an
    # attribute added meanwhile breaks that copy (a race of moto's the patches leave alone)
    dynamodb.update_item(
        TableName=table_name,
        Key=key,
        UpdateExpression="SET w = :w",
        ConditionExpression="w = :free",
        ExpressionAttributeValues={":w": {"N": str(writer + 1)}, ":free": {"N": "0"}},
    )


def _remove(dynamodb: DynamoDBClient, table_name: str, key: dict[str, Any], writer: int) -> None:
    dynamodb.delete_item(TableName=table_name, Key=key, ConditionExpression="attribute_exists(pk)")


@pytest.mark.parametrize("write", [_claim, _remove], ids=["UpdateItem", "DeleteItem"])
@pytest.mark.usefixtures("frequent_thread_switches")
def test_a_conditional_update_or_delete_wins_once_under_contention(
    dynamodb: DynamoDBClient, table_name: str, write: Callable[[DynamoDBClient, str, dict[str, Any], int], None]
) -> None:
    # GIVEN 60 free items, and 16 threads that each try the same conditional write on every one of them
    keys = [{"pk": {"S": "race"}, "sk": {"S": f"{n:02d}"}} for n in range(60)]
    for key in keys:
        dynamodb.put_item(TableName=table_name, Item={**key, "w": {"N": "0"}})
    wins: list[int] = []
    codes: list[str] = []
    barrier = threading.Barrier(16)

    def race(writer: int) -> None:
        barrier.wait()
        for n, key in enumerate(keys):
            try:
                write(dynamodb, table_name, key, writer)
            except ClientError as err:
                codes.append(err.response["Error"]["Code"])
                continue
            wins.append(n)

    threads = [threading.Thread(target=race, args=(w,)) for w in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # THEN each item's write succeeded for exactly one writer, and every other attempt failed its condition
    assert sorted(wins) == list(range(60))
    assert len(codes) == 16 * 60 - 60 and set(codes) == {"ConditionalCheckFailedException"}


def test_a_get_records_with_the_wait_header_returns_the_record_put_while_it_waits(
    kinesis: KinesisClient, stream_name: str
) -> None:
    # GIVEN an empty shard, and a record that is put 0.3 s from now
    iterator = _iterator(kinesis, stream_name, "LATEST")
    kinesis.meta.events.register(
        "before-sign.kinesis.GetRecords", lambda request, **_: request.headers.__setitem__(WAIT_HEADER, "5000")
    )
    timer = threading.Timer(0.3, lambda: kinesis.put_record(StreamName=stream_name, Data=b"late", PartitionKey="k"))
    timer.start()
    try:
        # WHEN GetRecords asks to wait THEN it answers with that record
        records = kinesis.get_records(ShardIterator=iterator)["Records"]
    finally:
        timer.join()
    assert [r["Data"] for r in records] == [b"late"]


def test_every_put_wakes_the_waiting_get_records(kinesis: KinesisClient, stream_name: str) -> None:
    # GIVEN the count of puts a waiting GetRecords watches
    seen = PUTS.count
    # WHEN three records are put in one PutRecords call, and one by PutRecord
    kinesis.put_records(
        StreamName=stream_name, Records=[{"Data": str(i).encode(), "PartitionKey": "k"} for i in range(3)]
    )
    kinesis.put_record(StreamName=stream_name, Data=b"3", PartitionKey="k")
    # THEN each of them counted, and would have woken a waiting GetRecords
    assert PUTS.count == seen + 4


def test_a_get_records_without_the_header_answers_at_once(kinesis: KinesisClient, stream_name: str) -> None:
    # GIVEN an empty shard and a record put only after the call has answered
    iterator = _iterator(kinesis, stream_name, "LATEST")
    # WHEN GetRecords is called as Kinesis clients call it THEN it answers empty, as Kinesis does
    assert kinesis.get_records(ShardIterator=iterator)["Records"] == []
    kinesis.put_record(StreamName=stream_name, Data=b"x", PartitionKey="k")
    assert [r["Data"] for r in kinesis.get_records(ShardIterator=iterator)["Records"]] == [b"x"]


EVERY_TYPE: dict[str, Any] = {
    "s": {"S": "text ✓"},
    "n": {"N": "-12.5"},
    "b": {"B": b"\x00\x01binary"},
    "yes": {"BOOL": True},
    "no": {"BOOL": False},
    "nothing": {"NULL": True},
    "ss": {"SS": ["a", "b"]},
    "ns": {"NS": ["1", "2.5"]},
    "bs": {"BS": [b"x", b"\xff"]},
    "m": {"M": {"inner": {"S": "x"}, "deeper": {"M": {"l": {"L": [{"N": "1"}, {"S": "y"}, {"NULL": True}]}}}}},
    "empty_m": {"M": {}},
    "empty_l": {"L": []},
}


def test_attribute_values_of_every_type_survive_a_round_trip(dynamodb: DynamoDBClient, table_name: str) -> None:
    # GIVEN an item with an attribute of every type, nested maps and lists included
    item = {"pk": {"S": "every"}, "sk": {"S": "type"}, **EVERY_TYPE}
    dynamodb.put_item(TableName=table_name, Item=item)  # type: ignore[arg-type]

    # WHEN it is read back, alone and by a Query
    got = dynamodb.get_item(TableName=table_name, Key={"pk": {"S": "every"}, "sk": {"S": "type"}})["Item"]
    queried = dynamodb.query(
        TableName=table_name, KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": {"S": "every"}}
    )["Items"]

    # THEN botocore reads back exactly what was written (sets in any order)
    for read in (got, queried[0]):
        for name in ("ss", "ns", "bs"):
            member = next(iter(item[name]))
            assert sorted(read.pop(name)[member]) == sorted(item[name][member])  # type: ignore[literal-required]
        assert read == {k: v for k, v in item.items() if k not in ("ss", "ns", "bs")}


@pytest.mark.parametrize(
    "items",
    [
        [{"pk": {"S": "p"}, "sk": {"S": "s"}, **EVERY_TYPE}],
        [{"pk": {"S": "p"}, "b_text": {"B": "already text"}}],  # moto may hold binary as str
        [{"pk": {"S": "p"}, "odd": {"X": "not a member"}}],  # not wire form: moto's own path
        [{"pk": {"S": "p"}, "n": {"N": 5}}],  # not wire form (a number, not its string): moto's own path
        [{"pk": {"S": "p"}, "absent": {"S": None, "N": "1"}}],
    ],
)
def test_the_fast_attribute_value_path_writes_what_motos_serializer_writes(
    monkeypatch: pytest.MonkeyPatch, items: list[dict[str, Any]]
) -> None:
    from moto.core.serialize import BaseJSONSerializer, ResponseSerializer, XFormedAttributePicker, get_serializer_class
    from moto.core.utils import get_service_model

    operation = get_service_model("dynamodb").operation_model("Query")
    result = {"Items": items, "Count": len(items), "ScannedCount": len(items)}

    def serialize() -> Any:
        serializer = get_serializer_class("dynamodb", "json")(operation, value_picker=XFormedAttributePicker())
        return json.loads(serializer.serialize(result)["body"])

    fast = serialize()
    monkeypatch.setattr(BaseJSONSerializer, "_serialize_type_structure", ResponseSerializer._serialize_type_structure)
    assert fast == serialize()


def test_wire_form_is_recognized_strictly() -> None:
    def b64(value: Any) -> str:
        return base64.b64encode(value if isinstance(value, bytes) else value.encode()).decode()

    assert wire_attribute_value({"L": [{"S": "a"}, {"M": {"k": {"BOOL": False}}}]}, b64) == {
        "L": [{"S": "a"}, {"M": {"k": {"BOOL": False}}}]
    }
    assert wire_attribute_value({"B": b"\x00"}, b64) == {"B": "AA=="}
    for odd in ({"X": "?"}, {"N": 1}, {"L": [{"S": 1}]}, {"M": {"k": "bare"}}, {"SS": ["a", 1]}, ["S", "x"]):
        with pytest.raises(NotWireForm):
            wire_attribute_value(odd, b64)


@pytest.mark.parametrize("exists", [True, False], ids=["an item", "no item"])
def test_a_refused_update_leaves_the_item_as_it_was(dynamodb: DynamoDBClient, table_name: str, exists: bool) -> None:
    # GIVEN an item in progress (or none)
    key = {"pk": {"S": "big"}, "sk": {"S": "T#000001"}}
    if exists:
        dynamodb.put_item(TableName=table_name, Item={**key, "status": {"S": "in_progress"}})
    before = dynamodb.get_item(TableName=table_name, Key=key).get("Item")
    # WHEN an update sets its status and an attribute that makes it larger than 400 KB
    with pytest.raises(ClientError) as refused:
        dynamodb.update_item(
            TableName=table_name,
            Key=key,
            UpdateExpression="SET #status = :done, assistant = :text",
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues={":done": {"S": "complete"}, ":text": {"S": "x" * 500_000}},
        )
    # THEN DynamoDB's error, and the item is as it was: no action of the update applied (DynamoDB's updates are
    # all or nothing), no item created
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    assert "maximum allowed size" in refused.value.response["Error"]["Message"]
    assert dynamodb.get_item(TableName=table_name, Key=key).get("Item") == before
