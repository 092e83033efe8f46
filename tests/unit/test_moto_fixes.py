"""The local stack's moto fixes behave as the services do (see chatstream_local.moto_server)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
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
