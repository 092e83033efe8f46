"""`make delete` (ops/chatstream_ops/delete.py) against CloudFormation, IAM, DynamoDB and SQS in moto.

The stack deployed here is made of template.yaml's own resources (the table, a queue, the caller policy, as the
template writes them, with its DeletionPolicy), so the tool is tested against what a deployment creates.
"""

from __future__ import annotations

import io
import json
from typing import TYPE_CHECKING, Any

import boto3
import pytest

from chatstream_ops.delete import StackDeletion, main

if TYPE_CHECKING:
    from chatstream_local.template import Template

STACK = "chatstream-test"
CALLER = "alice"
KEPT_RESOURCES = ("ChatTable", "ConsumerDLQ", "RelayInvokePolicy")


class Answers:
    """The operator at the prompt: answers each question with the next reply, and remembers the questions."""

    def __init__(self, *replies: str) -> None:
        self.replies = list(replies)
        self.questions: list[str] = []

    def __call__(self, question: str, expected: str) -> bool:
        self.questions.append(question)
        return bool(self.replies) and self.replies.pop(0) == expected


@pytest.fixture
def clients(moto: None) -> dict[str, Any]:
    return {name: boto3.client(name, region_name="us-east-1") for name in ("cloudformation", "iam", "dynamodb", "sqs")}


@pytest.fixture
def stack(clients: dict[str, Any], template: Template) -> dict[str, str]:
    """A deployed stack of the template's table, ConsumerDLQ and caller policy; the policy attached to a user."""
    resources = {}
    for name in KEPT_RESOURCES:
        resource = template.resource(name)
        resources[name] = {
            key: value for key, value in resource.items() if key in ("Type", "DeletionPolicy", "UpdateReplacePolicy")
        }
        resources[name]["Properties"] = template.resolve(resource["Properties"])
    body = {
        "Resources": resources,
        "Outputs": {
            "ChatTableName": {"Value": {"Ref": "ChatTable"}},
            "ConsumerDLQUrl": {"Value": {"Ref": "ConsumerDLQ"}},
            "RelayInvokePolicyArn": {"Value": {"Ref": "RelayInvokePolicy"}},
        },
    }
    clients["cloudformation"].create_stack(StackName=STACK, TemplateBody=json.dumps(body))
    (deployed,) = clients["cloudformation"].describe_stacks(StackName=STACK)["Stacks"]
    outputs = {output["OutputKey"]: output["OutputValue"] for output in deployed["Outputs"]}
    clients["iam"].create_user(UserName=CALLER)
    clients["iam"].attach_user_policy(UserName=CALLER, PolicyArn=outputs["RelayInvokePolicyArn"])
    return outputs


def deletion(
    clients: dict[str, Any], confirm: Answers, *, delete_data: bool = False
) -> tuple[StackDeletion, io.StringIO]:
    out = io.StringIO()
    return StackDeletion(**clients, out=out, confirm=confirm, delete_data=delete_data, wait_delay_s=1), out


def stack_status(clients: dict[str, Any], stack_id: str) -> str:
    (described,) = clients["cloudformation"].describe_stacks(StackName=stack_id)["Stacks"]
    return str(described["StackStatus"])


def attached_to_caller(clients: dict[str, Any]) -> list[str]:
    return [p["PolicyArn"] for p in clients["iam"].list_attached_user_policies(UserName=CALLER)["AttachedPolicies"]]


def table_exists(clients: dict[str, Any], name: str) -> bool:
    return name in clients["dynamodb"].list_tables()["TableNames"]


def test_it_detaches_the_caller_policy_deletes_the_stack_and_keeps_the_table_unless_told(
    clients: dict[str, Any], stack: dict[str, str]
) -> None:
    # GIVEN a stack whose caller policy is attached to a user, and an operator who declines to delete the table
    stack_id = clients["cloudformation"].describe_stacks(StackName=STACK)["Stacks"][0]["StackId"]
    answers = Answers("no")
    tool, out = deletion(clients, answers)
    # WHEN the stack is deleted
    status = tool.run(STACK)
    # THEN the policy is detached from the user (IAM refuses to delete an attached policy), and the stack is gone
    report = out.getvalue()
    assert status == 0, report
    assert attached_to_caller(clients) == []
    assert f"detached {stack['RelayInvokePolicyArn']} from user {CALLER}" in report
    assert stack_status(clients, stack_id) == "DELETE_COMPLETE"
    assert f"deleted stack {STACK}" in report
    # AND the table (DeletionPolicy Retain) is kept, still protected, and the report says how to delete it
    table = stack["ChatTableName"]
    assert table_exists(clients, table)
    assert clients["dynamodb"].describe_table(TableName=table)["Table"]["DeletionProtectionEnabled"] is True
    assert f"kept table {table} (ChatTable" in report and "deletion protection on" in report
    assert f"aws dynamodb update-table --table-name {table} --no-deletion-protection-enabled" in report
    assert f"aws dynamodb delete-table --table-name {table}" in report
    # AND the operator was asked about the table only (the queue was empty), by its name
    assert len(answers.questions) == 1 and table in answers.questions[0]


def test_it_deletes_the_kept_table_only_when_the_operator_types_its_name(
    clients: dict[str, Any], stack: dict[str, str]
) -> None:
    # GIVEN an operator who types the table's name at the prompt
    table = stack["ChatTableName"]
    tool, out = deletion(clients, Answers(table))
    # WHEN the stack is deleted
    assert tool.run(STACK) == 0, out.getvalue()
    # THEN the table goes too (its deletion protection turned off first), and the report says so
    assert not table_exists(clients, table)
    assert f"deleted table {table}" in out.getvalue()


def test_queued_messages_stop_the_deletion_until_their_loss_is_confirmed(
    clients: dict[str, Any], stack: dict[str, str]
) -> None:
    # GIVEN a message waiting in ConsumerDLQ (deleting the stack deletes the queue with it)
    clients["sqs"].send_message(QueueUrl=stack["ConsumerDLQUrl"], MessageBody='{"kind": "poison-record"}')
    answers = Answers("no")
    tool, out = deletion(clients, answers)
    # WHEN the operator declines
    status = tool.run(STACK)
    # THEN nothing changed: the stack, its queue, the caller's policy; and the report says to redrive first
    report = out.getvalue()
    assert status == 1, report
    assert stack_status(clients, STACK) == "CREATE_COMPLETE"
    assert attached_to_caller(clients) == [stack["RelayInvokePolicyArn"]]
    assert "queue ConsumerDLQ holds 1 message(s)" in report
    assert f"make redrive STACK={STACK}" in report
    assert "nothing deleted" in report


def test_yes_delete_data_deletes_the_messages_and_the_table_without_asking(
    clients: dict[str, Any], stack: dict[str, str]
) -> None:
    # GIVEN a queued message, and the flag instead of an operator
    clients["sqs"].send_message(QueueUrl=stack["ConsumerDLQUrl"], MessageBody='{"kind": "poison-record"}')
    answers = Answers()
    tool, out = deletion(clients, answers, delete_data=True)
    # WHEN the stack is deleted
    assert tool.run(STACK) == 0, out.getvalue()
    # THEN everything went, and nobody was asked
    assert not table_exists(clients, stack["ChatTableName"])
    assert attached_to_caller(clients) == []
    assert answers.questions == []


def test_without_a_terminal_the_command_keeps_the_data(
    clients: dict[str, Any], stack: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN no terminal to ask on (a script, CI)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    # WHEN the command runs without --yes-delete-data
    status = main(["--stack-name", STACK])
    # THEN the stack is deleted and the table kept, with the reason
    output = capsys.readouterr().out
    assert status == 0, output
    assert table_exists(clients, stack["ChatTableName"])
    assert "no terminal to ask on: kept (pass --yes-delete-data to delete)" in output


def test_an_unknown_stack_is_one_line_and_exit_status_2(moto: None, capsys: pytest.CaptureFixture[str]) -> None:
    # WHEN the command is given a stack that does not exist
    status = main(["--stack-name", "no-such-stack"])
    # THEN it says so in one line, with what to check, and no traceback
    err = capsys.readouterr().err
    assert status == 2
    assert err.count("\n") == 1
    assert err.startswith("delete: stack 'no-such-stack' not found in region us-east-1: check STACK=")


def test_a_caller_policy_already_gone_does_not_stop_the_deletion(
    clients: dict[str, Any], stack: dict[str, str]
) -> None:
    # GIVEN a stack whose caller policy was deleted already (a deletion that got that far before it failed)
    clients["iam"].detach_user_policy(UserName=CALLER, PolicyArn=stack["RelayInvokePolicyArn"])
    clients["iam"].delete_policy(PolicyArn=stack["RelayInvokePolicyArn"])
    tool, out = deletion(clients, Answers())
    # WHEN the stack is deleted THEN the rest goes on
    assert tool.run(STACK) == 0, out.getvalue()
    assert f"deleted stack {STACK}" in out.getvalue()
