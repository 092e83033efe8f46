"""What the tests expect the chatstream layer's botocore models to keep: the operations the functions call, per service
(functions/*/app.py and the chatstream package), stated here apart from the build script that trims the models."""

from __future__ import annotations

FUNCTION_OPERATIONS = {
    "dynamodb": {"BatchGetItem", "BatchWriteItem", "GetItem", "PutItem", "Query", "TransactWriteItems", "UpdateItem"},
    "kinesis": {"PutRecords"},
    "lambda": {"Invoke"},
    "bedrock-runtime": {"ConverseStream"},
    "sqs": {"SendMessage"},
    "ssm": {"GetParameter"},
}
