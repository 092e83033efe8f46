"""Create template.yaml's stream, table and queues in an AWS emulator (moto), from their own properties."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_kinesis import KinesisClient
    from mypy_boto3_sqs import SQSClient

    from chatstream_local.template import Template


def create_table(client: DynamoDBClient, template: Template, logical_id: str = "ChatTable") -> str:
    props = template.properties(logical_id)
    name = template.physical_name(logical_id)
    kwargs: dict[str, Any] = {
        "TableName": name,
        "KeySchema": props["KeySchema"],
        "AttributeDefinitions": props["AttributeDefinitions"],
        "BillingMode": props.get("BillingMode", "PAY_PER_REQUEST"),
    }
    if "SSESpecification" in props:
        kwargs["SSESpecification"] = {"Enabled": bool(props["SSESpecification"].get("SSEEnabled"))}
    client.create_table(**kwargs)
    client.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 30})
    ttl = props.get("TimeToLiveSpecification")
    if ttl:
        client.update_time_to_live(
            TableName=name,
            TimeToLiveSpecification={"AttributeName": ttl["AttributeName"], "Enabled": bool(ttl["Enabled"])},
        )
    return name


ON_DEMAND_SHARDS = 4


def create_stream(
    client: KinesisClient, template: Template, logical_id: str = "TokenStream", shard_count: int | None = None
) -> str:
    """Create the stream with ``shard_count`` shards, else the template's ``ShardCount``, else, for an on-demand
    stream, the 4 shards of on-demand's initial capacity (4 MB/s of writes): partition keys spread over them and
    the event source mapping processes each shard's batches in parallel, as on AWS (moto does not scale)."""
    props = template.properties(logical_id)
    name = template.physical_name(logical_id)
    on_demand = props.get("StreamModeDetails", {}).get("StreamMode") == "ON_DEMAND"
    shards = int(shard_count or props.get("ShardCount") or (ON_DEMAND_SHARDS if on_demand else 1))
    client.create_stream(StreamName=name, ShardCount=shards)
    client.get_waiter("stream_exists").wait(StreamName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 30})
    encryption = props.get("StreamEncryption")
    if encryption:
        client.start_stream_encryption(
            StreamName=name, EncryptionType=encryption["EncryptionType"], KeyId=encryption["KeyId"]
        )
    retention = int(props.get("RetentionPeriodHours", 24))
    if retention > 24:
        client.increase_stream_retention_period(StreamName=name, RetentionPeriodHours=retention)
    return name


def create_queue(client: SQSClient, template: Template, logical_id: str) -> str:
    """Create the queue; returns its URL."""
    props = template.properties(logical_id)
    attributes: dict[Any, str] = {
        key: str(props[key]).lower() if isinstance(props[key], bool) else str(props[key])
        for key in ("MessageRetentionPeriod", "VisibilityTimeout", "SqsManagedSseEnabled")
        if key in props
    }
    return client.create_queue(QueueName=template.physical_name(logical_id), Attributes=attributes)["QueueUrl"]
