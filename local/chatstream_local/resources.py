"""Create template.yaml's stream, table and queues in an AWS emulator (moto), from their own properties."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from chatstream_local.template import TemplateError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_kinesis import KinesisClient
    from mypy_boto3_kinesis.type_defs import StreamModeDetailsTypeDef
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
    if "DeletionProtectionEnabled" in props:
        kwargs["DeletionProtectionEnabled"] = bool(props["DeletionProtectionEnabled"])
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
    # moto gives an on-demand stream its own 4 shards: a shard count the caller chose (tests) makes it provisioned
    on_demand = on_demand and shard_count is None
    mode: StreamModeDetailsTypeDef = {"StreamMode": "ON_DEMAND" if on_demand else "PROVISIONED"}
    client.create_stream(StreamName=name, ShardCount=shards, StreamModeDetails=mode)  # described as deployed
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


QUEUE_ATTRIBUTES = ("MessageRetentionPeriod", "VisibilityTimeout", "SqsManagedSseEnabled")


def create_queue(client: SQSClient, template: Template, logical_id: str) -> str:
    """Create the queue (its dead-letter queue first, when it has a ``RedrivePolicy``); returns its URL.

    Creating a queue that exists with the same attributes returns its URL, as SQS does, so a dead-letter
    queue shared by several queues, or created on its own too, is created once.
    """
    props = template.properties(logical_id)
    attributes: dict[Any, str] = {
        key: str(props[key]).lower() if isinstance(props[key], bool) else str(props[key])
        for key in QUEUE_ATTRIBUTES
        if key in props
    }
    redrive = props.get("RedrivePolicy")
    if redrive is not None:
        create_queue(client, template, dead_letter_queue(template, logical_id))
        attributes["RedrivePolicy"] = json.dumps(
            {"deadLetterTargetArn": redrive["deadLetterTargetArn"], "maxReceiveCount": int(redrive["maxReceiveCount"])}
        )
    return client.create_queue(QueueName=template.physical_name(logical_id), Attributes=attributes)["QueueUrl"]


def dead_letter_queue(template: Template, logical_id: str) -> str:
    """The logical id of the queue that the queue's ``RedrivePolicy`` names as its dead-letter queue."""
    target = template.properties(logical_id)["RedrivePolicy"]["deadLetterTargetArn"]
    for candidate in template.resources_of_type("AWS::SQS::Queue"):
        if template.arn(candidate) == target:
            return candidate
    raise TemplateError(f"{logical_id}: its RedrivePolicy names {target}, which is no queue of template.yaml")
