"""The local stack's stream, table and queues are made from template.yaml's own properties (moto in-process)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import boto3
import pytest
from botocore.exceptions import ClientError

from chatstream_local.resources import ON_DEMAND_SHARDS, create_queue, create_stream, create_table, dead_letter_queue
from chatstream_local.template import Template, TemplateError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


def test_a_queue_with_a_redrive_policy_gets_its_dead_letter_queue_first(moto: None, template: Template) -> None:
    sqs = boto3.client("sqs")
    # WHEN the queue the reaper reads is created from the template
    url = create_queue(sqs, template, "ProxyFailureQueue")
    # THEN its dead-letter queue exists, and the queue carries the template's redrive policy and visibility
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    dlq_url = sqs.get_queue_url(QueueName=template.physical_name("ProxyFailureDLQ"))["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    redrive = template.properties("ProxyFailureQueue")["RedrivePolicy"]
    assert json.loads(attributes["RedrivePolicy"]) == {
        "deadLetterTargetArn": dlq_arn,
        "maxReceiveCount": redrive["maxReceiveCount"],
    }
    assert attributes["VisibilityTimeout"] == str(template.properties("ProxyFailureQueue")["VisibilityTimeout"])


def test_a_message_received_too_often_moves_to_the_dead_letter_queue(moto: None, template: Template) -> None:
    # GIVEN a failed generation in ProxyFailureQueue that the reaper keeps failing on
    sqs = boto3.client("sqs")
    url = create_queue(sqs, template, "ProxyFailureQueue")
    sqs.send_message(QueueUrl=url, MessageBody='{"requestPayload": {"session_id": "abc", "turn": 1}}')
    for _ in range(template.properties("ProxyFailureQueue")["RedrivePolicy"]["maxReceiveCount"]):
        (message,) = sqs.receive_message(QueueUrl=url, VisibilityTimeout=0)["Messages"]
    # WHEN it is received once more THEN it is in ProxyFailureDLQ instead, as SQS moves it
    assert sqs.receive_message(QueueUrl=url, VisibilityTimeout=0).get("Messages", []) == []
    dlq_url = sqs.get_queue_url(QueueName=template.physical_name("ProxyFailureDLQ"))["QueueUrl"]
    (moved,) = sqs.receive_message(QueueUrl=dlq_url)["Messages"]
    assert moved["Body"] == message["Body"]


def test_a_redrive_policy_naming_no_queue_of_the_template_is_a_clear_error(template: Template) -> None:
    template.raw["Resources"]["ProxyFailureQueue"]["Properties"]["RedrivePolicy"]["deadLetterTargetArn"] = (
        "arn:aws:sqs:us-east-1:123456789012:elsewhere"
    )
    with pytest.raises(TemplateError, match="ProxyFailureQueue: its RedrivePolicy names .*elsewhere"):
        dead_letter_queue(template, "ProxyFailureQueue")


def test_the_table_refuses_deletion_as_the_deployed_one_does(dynamodb: DynamoDBClient, template: Template) -> None:
    # GIVEN the table created from the template (DeletionProtectionEnabled)
    name = create_table(dynamodb, template)
    # WHEN someone deletes it THEN DynamoDB refuses
    with pytest.raises(ClientError, match="DeletionProtectionEnabled is set to True"):
        dynamodb.delete_table(TableName=name)


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"Nope": "1"}, "declares no such parameter"),
        ({"RelayReservedConcurrency": "two"}, "not a number"),
        ({"RelayReservedConcurrency": "-1"}, "below its MinValue 0"),
        ({"EnhancedFanOut": "maybe"}, "not one of true, false"),
        ({"ModelRequestFields": '["thinking"]'}, "does not match its AllowedPattern"),
        ({"ModelRequestFields": "{" + "x" * 1024 + "}"}, "longer than its MaxLength 1024"),
        ({"ModelId": ""}, "shorter than its MinLength 1"),
        ({"FoundationModelId": ""}, "shorter than its MinLength 1"),
    ],
)
def test_a_parameter_override_cloudformation_would_refuse_is_refused(overrides: dict[str, str], problem: str) -> None:
    with pytest.raises(TemplateError, match=problem):
        Template.load(parameter_overrides=overrides)


def test_model_request_fields_reach_the_proxy() -> None:
    fields = '{"thinking":{"type":"enabled","budget_tokens":2048}}'
    template = Template.load(parameter_overrides={"ModelRequestFields": fields})
    assert template.function_settings("ProxyFunction")["Environment"]["Variables"]["MODEL_REQUEST_FIELDS"] == fields
    assert Template.load().function_settings("ProxyFunction")["Environment"]["Variables"]["MODEL_REQUEST_FIELDS"] == ""


def test_a_reserved_concurrency_override_reaches_the_function() -> None:
    template = Template.load(parameter_overrides={"RelayReservedConcurrency": "2"})
    assert int(template.function_settings("RelayFunction")["ReservedConcurrentExecutions"]) == 2
    assert "ReservedConcurrentExecutions" not in Template.load().function_settings("RelayFunction")


@pytest.mark.parametrize(
    ("overrides", "mode", "shards"),
    [({}, "ON_DEMAND", ON_DEMAND_SHARDS), ({"StreamMode": "PROVISIONED", "ShardCount": "2"}, "PROVISIONED", 2)],
)
def test_the_stream_describes_itself_in_the_templates_mode(
    moto: None, overrides: dict[str, str], mode: str, shards: int
) -> None:
    # GIVEN the template's stream (on demand by default) WHEN it is created locally
    kinesis = boto3.client("kinesis", region_name="us-east-1")
    name = create_stream(kinesis, Template.load(parameter_overrides=overrides))
    # THEN DescribeStreamSummary (what OPERATIONS has you inspect) tells its mode and shards as deployed
    summary = kinesis.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]
    assert (summary["StreamModeDetails"]["StreamMode"], summary["OpenShardCount"]) == (mode, shards)
