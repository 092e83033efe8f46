"""The benchmark's call counting inside moto (chatstream_local.moto.callcount), over real HTTP with botocore clients."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import boto3
import pytest
from botocore.config import Config
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

from chatstream_local.moto.callcount import CONTROL_PREFIX, CountingMiddleware, caller_of

if TYPE_CHECKING:
    from collections.abc import Iterator

REGION = "us-east-1"


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        return


@pytest.fixture
def counting_moto(aws_env: None) -> Iterator[str]:
    server = make_server(
        "127.0.0.1", 0, CountingMiddleware(DomainDispatcherApplication(create_backend_app)), handler_class=_Quiet
    )
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(5)


def _client(service: str, url: str, app_id: str | None) -> Any:
    config = Config(user_agent_appid=app_id) if app_id else None
    return boto3.client(service, region_name=REGION, endpoint_url=url, config=config)  # type: ignore[call-overload]


def _control(url: str, action: str, *, method: str = "GET") -> Any:
    request = urllib.request.Request(
        f"{url}{CONTROL_PREFIX}{action}", method=method, data=b"" if method == "POST" else None
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.loads(response.read())


def test_the_caller_is_the_user_agents_app_id() -> None:
    assert caller_of("Boto3/1.40.0 md/Botocore#1.40.0 ua/2.1 os/linux app/relay cfg/retry-mode#legacy") == "relay"
    assert caller_of("Boto3/1.40.0 md/Botocore#1.40.0 ua/2.1 os/linux cfg/retry-mode#legacy") is None


def test_calls_are_counted_per_caller_with_their_billed_units(counting_moto: str) -> None:
    setup = _client("dynamodb", counting_moto, None)
    setup.create_table(
        TableName="t",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "N"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    relay = _client("dynamodb", counting_moto, "relay")
    consumer = _client("dynamodb", counting_moto, "consumer")
    consumer.batch_write_item(
        RequestItems={"t": [{"PutRequest": {"Item": {"pk": {"S": "s"}, "sk": {"N": str(n)}}}} for n in range(3)]}
    )
    consumer.put_item(TableName="t", Item={"pk": {"S": "s"}, "sk": {"N": "9"}, "text": {"S": "x" * 1500}})
    items = relay.query(
        TableName="t",
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": "s"}},
        ConsistentRead=True,
    )["Items"]
    relay.query(TableName="t", KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": {"S": "none"}})
    kinesis = _client("kinesis", counting_moto, None)
    kinesis.create_stream(StreamName="k", ShardCount=1)
    _client("kinesis", counting_moto, "proxy").put_records(
        StreamName="k", Records=[{"Data": b"a" * 1100, "PartitionKey": "s"}, {"Data": b"b", "PartitionKey": "s"}]
    )

    counts = _control(counting_moto, "counts")

    assert len(items) == 4
    assert set(counts) == {"relay", "consumer", "proxy"}  # the unlabelled set-up calls are not counted
    assert counts["consumer"]["BatchWriteItem"]["calls"] == 1
    assert counts["consumer"]["BatchWriteItem"]["items"] == 3
    assert counts["consumer"]["BatchWriteItem"]["write_units"] == 3
    assert counts["consumer"]["PutItem"]["write_units"] == 2  # 1.5 KB of item: two 1 KB units
    assert counts["relay"]["Query"]["calls"] == 2
    assert counts["relay"]["Query"]["items"] == 4
    assert counts["relay"]["Query"]["read_units"] == 1 + 0.5  # a consistent read, then an eventually consistent one
    assert counts["proxy"]["PutRecords"]["items"] == 2
    assert counts["proxy"]["PutRecords"]["ingest_kb"] == 2 + 1
    assert all(op["seconds"] > 0 for ops in counts.values() for op in ops.values())
    timeline = _control(counting_moto, "timeline")
    assert [(who, op) for _, _, who, op, _ in timeline] == [
        ("consumer", "BatchWriteItem"),
        ("consumer", "PutItem"),
        ("relay", "Query"),
        ("relay", "Query"),
        ("proxy", "PutRecords"),
    ]


def test_reset_clears_the_counts_and_unknown_controls_are_404(counting_moto: str) -> None:
    assert _control(counting_moto, "idle") == {"idle_s": None}
    _client("dynamodb", counting_moto, "relay").list_tables()
    assert 0 <= _control(counting_moto, "idle")["idle_s"] < 5
    assert _control(counting_moto, "counts")["relay"]["ListTables"]["calls"] == 1
    assert _control(counting_moto, "reset", method="POST") == {}
    assert _control(counting_moto, "counts") == {}
    assert _control(counting_moto, "timeline") == []
    with pytest.raises(urllib.error.HTTPError) as raised:
        _control(counting_moto, "nothing")
    assert raised.value.code == 404
