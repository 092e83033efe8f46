"""Delete a deployed chatstream stack: what blocks the deletion, the stack, and the data it keeps only when asked.

Usage (docs/DEPLOY.md, "Tear down")::

    python -m chatstream_ops.delete --stack-name NAME [--yes-delete-data] [--region REGION]

In order:

1. Reads the stack: its resources, and the ``DeletionPolicy`` of each in its deployed template (what a deletion keeps).
2. Counts the messages in the stack's queues, which the deletion deletes with them. Messages there are data (a
   ConsumerDLQ message still to redrive, a failed generation to read): the run goes on only once their loss is
   confirmed (a prompt, or ``--yes-delete-data``); otherwise it stops, having changed nothing.
3. Detaches the stack's managed policies (the caller policy, output ``RelayInvokePolicyArn``) from every user, role
   and group they are attached to: IAM refuses to delete an attached policy, which fails the stack's deletion.
4. Deletes the stack (CloudFormation ``DeleteStack``) and waits for the deletion to end.
5. Reports what the deletion kept (each resource whose ``DeletionPolicy`` is ``Retain``: the table of conversations,
   deletion-protected) and how to delete it; deletes a kept table only once that is confirmed (the prompt asks for
   the table's name; ``--yes-delete-data``).

The exit status is 0 when the stack is deleted (its kept data deleted or kept, as chosen), 1 when it is not (the
deletion was declined, or CloudFormation failed: the report names the resource and the reason), 2 when the run
cannot start (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

import boto3
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError, WaiterError
from samtranslator.yaml_helper import yaml_parse

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from mypy_boto3_cloudformation import CloudFormationClient
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_iam import IAMClient
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.literals import QueueAttributeNameType

# What a deletion keeps: CloudFormation's policies that leave the resource in place.
KEEPING_POLICIES = frozenset({"Retain", "RetainExceptOnCreate"})
# A stack in one of these is being changed: deleting it now would fail or race the change.
BUSY_SUFFIX = "_IN_PROGRESS"
# A queue's messages: visible, received by a reader (in flight), and delayed.
QUEUE_COUNTS: tuple[QueueAttributeNameType, ...] = (
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
)


class DeleteError(Exception):
    """The run cannot go on; the message is the one line printed."""


@dataclass(frozen=True)
class StackResource:
    logical_id: str
    type: str
    physical_id: str
    deletion_policy: str


@dataclass(frozen=True)
class Attachment:
    """A user, role or group that a managed policy of the stack is attached to."""

    policy_arn: str
    kind: str  # "user", "role", "group"
    name: str


@dataclass(frozen=True)
class QueueBacklog:
    logical_id: str
    url: str
    messages: int


@dataclass(frozen=True)
class KeptTable:
    logical_id: str
    name: str
    items: int  # DynamoDB's ItemCount: updated about every six hours
    deletion_protection: bool


class StackDeletion:
    """Deletes one stack as the module docstring says, writing what it does to ``out``."""

    def __init__(
        self,
        *,
        cloudformation: CloudFormationClient,
        iam: IAMClient,
        dynamodb: DynamoDBClient,
        sqs: SQSClient,
        out: TextIO,
        confirm: Callable[[str, str], bool],  # (question, the answer that means yes) -> whether it was given
        delete_data: bool = False,
        wait_delay_s: int = 10,
        wait_attempts: int = 360,
    ) -> None:
        self.cloudformation = cloudformation
        self.iam = iam
        self.dynamodb = dynamodb
        self.sqs = sqs
        self.out = out
        self.confirm = confirm
        self.delete_data = delete_data
        self.waiter_config = {"Delay": wait_delay_s, "MaxAttempts": wait_attempts}

    def run(self, stack_name: str) -> int:
        stack_id, status = self._stack(stack_name)
        if status.endswith(BUSY_SUFFIX):
            raise DeleteError(f"stack {stack_name!r} is {status}: wait for it to end, then run again")
        resources = self._resources(stack_id)
        backlog = self._backlog(resources)
        if backlog and not self._messages_may_go(stack_name, backlog):
            self._say(f"nothing deleted: stack {stack_name!r} and its queues are as they were")
            return 1
        for attachment in self._attachments(resources):
            self._detach(attachment)
        if not self._delete_stack(stack_name, stack_id):
            return 1
        self._say(f"deleted stack {stack_name}")
        kept = [resource for resource in resources if resource.deletion_policy in KEEPING_POLICIES]
        for resource in kept:
            self._kept(resource, stack_name)
        if not kept:
            self._say("kept nothing: every resource of the stack was deleted with it")
        return 0

    # ------------------------------------------------------------------------------------------ reading the stack

    def _stack(self, stack_name: str) -> tuple[str, str]:
        try:
            (stack,) = self.cloudformation.describe_stacks(StackName=stack_name)["Stacks"]
        except ClientError as err:
            if _code(err) == "ValidationError" and "does not exist" in _message(err):
                region = self.cloudformation.meta.region_name
                raise DeleteError(
                    f"stack {stack_name!r} not found in region {region}: check STACK= (the stack's name) and the "
                    "region (--region, or your AWS profile's)"
                ) from None
            raise
        return stack["StackId"], stack["StackStatus"]

    def _resources(self, stack_id: str) -> list[StackResource]:
        policies = _deletion_policies(self.cloudformation.get_template(StackName=stack_id, TemplateStage="Processed"))
        resources = []
        for page in self.cloudformation.get_paginator("list_stack_resources").paginate(StackName=stack_id):
            for summary in page["StackResourceSummaries"]:
                if not summary.get("PhysicalResourceId") or summary["ResourceStatus"] == "DELETE_COMPLETE":
                    continue
                logical_id = summary["LogicalResourceId"]
                resources.append(
                    StackResource(
                        logical_id=logical_id,
                        type=summary["ResourceType"],
                        physical_id=summary["PhysicalResourceId"],
                        deletion_policy=policies.get(logical_id, "Delete"),
                    )
                )
        return resources

    # ---------------------------------------------------------------------------------------------------- queues

    def _backlog(self, resources: list[StackResource]) -> list[QueueBacklog]:
        backlog = []
        for resource in resources:
            if resource.type != "AWS::SQS::Queue" or resource.deletion_policy in KEEPING_POLICIES:
                continue
            attributes = self.sqs.get_queue_attributes(
                QueueUrl=resource.physical_id, AttributeNames=list(QUEUE_COUNTS)
            )["Attributes"]
            messages = sum(int(attributes.get(name, "0")) for name in QUEUE_COUNTS)
            if messages:
                backlog.append(QueueBacklog(resource.logical_id, resource.physical_id, messages))
        return backlog

    def _messages_may_go(self, stack_name: str, backlog: list[QueueBacklog]) -> bool:
        for queue in backlog:
            self._say(f"queue {queue.logical_id} holds {queue.messages} message(s): {queue.url}")
        if any(queue.logical_id == "ConsumerDLQ" for queue in backlog):
            self._say(f"  redrive ConsumerDLQ first: make redrive STACK={stack_name} (docs/OPERATIONS.md, Redrive)")
        self._say("  deleting the stack deletes these queues and their messages")
        total = sum(queue.messages for queue in backlog)
        if self.delete_data:
            self._say(f"--yes-delete-data: deleting them with the stack ({total} message(s))")
            return True
        return self.confirm(f"delete the stack and {total} queued message(s)? type 'delete' to go on: ", "delete")

    # ------------------------------------------------------------------------------------------------- policies

    def _attachments(self, resources: list[StackResource]) -> list[Attachment]:
        attachments = []
        for resource in resources:
            if resource.type != "AWS::IAM::ManagedPolicy":
                continue
            arn = resource.physical_id
            try:
                for page in self.iam.get_paginator("list_entities_for_policy").paginate(PolicyArn=arn):
                    attachments += [Attachment(arn, "user", u["UserName"]) for u in page.get("PolicyUsers", [])]
                    attachments += [Attachment(arn, "role", r["RoleName"]) for r in page.get("PolicyRoles", [])]
                    attachments += [Attachment(arn, "group", g["GroupName"]) for g in page.get("PolicyGroups", [])]
            except ClientError as err:
                if _code(err) != "NoSuchEntity":  # gone already (an earlier deletion got that far): nothing to detach
                    raise
        return attachments

    def _detach(self, attachment: Attachment) -> None:
        arn, name = attachment.policy_arn, attachment.name
        if attachment.kind == "user":
            self.iam.detach_user_policy(UserName=name, PolicyArn=arn)
        elif attachment.kind == "role":
            self.iam.detach_role_policy(RoleName=name, PolicyArn=arn)
        else:
            self.iam.detach_group_policy(GroupName=name, PolicyArn=arn)
        self._say(f"detached {arn} from {attachment.kind} {name}")

    # ---------------------------------------------------------------------------------------------- the deletion

    def _delete_stack(self, stack_name: str, stack_id: str) -> bool:
        self._say(f"deleting stack {stack_name} (CloudFormation; this takes a few minutes)")
        self.cloudformation.delete_stack(StackName=stack_id)
        try:
            self.cloudformation.get_waiter("stack_delete_complete").wait(
                StackName=stack_id,
                WaiterConfig=self.waiter_config,  # type: ignore[arg-type]
            )
        except WaiterError:
            (stack,) = self.cloudformation.describe_stacks(StackName=stack_id)["Stacks"]
            self._say(f"stack {stack_name} was not deleted: {stack['StackStatus']}")
            for summary in self._failed_resources(stack_id):
                self._say(f"  {summary}")
            self._say("  fix what is named above, then run again (a second run deletes what is left)")
            return False
        return True

    def _failed_resources(self, stack_id: str) -> list[str]:
        failed = []
        for page in self.cloudformation.get_paginator("list_stack_resources").paginate(StackName=stack_id):
            for summary in page["StackResourceSummaries"]:
                if summary["ResourceStatus"] == "DELETE_FAILED":
                    reason = summary.get("ResourceStatusReason", "no reason given")
                    failed.append(f"{summary['LogicalResourceId']} ({summary['ResourceType']}): {reason}")
        return failed

    # --------------------------------------------------------------------------------------------- what is kept

    def _kept(self, resource: StackResource, stack_name: str) -> None:
        if resource.type != "AWS::DynamoDB::Table":
            self._say(
                f"kept {resource.logical_id} ({resource.type}) {resource.physical_id}: its DeletionPolicy is "
                f"{resource.deletion_policy}; delete it yourself when you no longer need it"
            )
            return
        table = self._table(resource)
        if table is None:
            self._say(f"kept {resource.logical_id}: table {resource.physical_id} is already gone")
            return
        protection = "deletion protection on" if table.deletion_protection else "deletion protection off"
        self._say(
            f"kept table {table.name} ({resource.logical_id}, about {table.items} items, {protection}): the "
            f"conversations of stack {stack_name}; its items expire by TTL, and a new stack does not use it"
        )
        if self._table_may_go(table):
            self._delete_table(table)
            return
        self._say("  to delete it and every conversation in it:")
        if table.deletion_protection:
            self._say(f"    aws dynamodb update-table --table-name {table.name} --no-deletion-protection-enabled")
        self._say(f"    aws dynamodb delete-table --table-name {table.name}")

    def _table(self, resource: StackResource) -> KeptTable | None:
        try:
            description = self.dynamodb.describe_table(TableName=resource.physical_id)["Table"]
        except ClientError as err:
            if _code(err) == "ResourceNotFoundException":
                return None
            raise
        return KeptTable(
            logical_id=resource.logical_id,
            name=resource.physical_id,
            items=int(description.get("ItemCount", 0)),
            deletion_protection=bool(description.get("DeletionProtectionEnabled", False)),
        )

    def _table_may_go(self, table: KeptTable) -> bool:
        if self.delete_data:
            self._say(f"--yes-delete-data: deleting table {table.name}")
            return True
        return self.confirm(
            f"delete table {table.name} and every conversation in it? type its name to delete it, anything else "
            "to keep it: ",
            table.name,
        )

    def _delete_table(self, table: KeptTable) -> None:
        if table.deletion_protection:
            self.dynamodb.update_table(TableName=table.name, DeletionProtectionEnabled=False)
        self.dynamodb.delete_table(TableName=table.name)
        self.dynamodb.get_waiter("table_not_exists").wait(TableName=table.name, WaiterConfig=self.waiter_config)  # type: ignore[arg-type]
        self._say(f"deleted table {table.name}")

    def _say(self, line: str) -> None:
        self.out.write(line + "\n")
        self.out.flush()


def _deletion_policies(template: Any) -> dict[str, str]:
    """Each resource's ``DeletionPolicy`` in a ``GetTemplate`` answer (``Delete``, CloudFormation's default, when
    none is written)."""
    body = template["TemplateBody"]
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except ValueError:
            body = yaml_parse(body)
    return {name: str(resource.get("DeletionPolicy", "Delete")) for name, resource in body["Resources"].items()}


def _code(err: ClientError) -> str:
    return str(err.response.get("Error", {}).get("Code", ""))


def _message(err: ClientError) -> str:
    return str(err.response.get("Error", {}).get("Message", err))


def terminal_confirm(stdin: TextIO, out: TextIO) -> Callable[[str, str], bool]:
    """Asks on the terminal; without one (a script, CI) every answer is no: data goes only with --yes-delete-data."""

    def confirm(question: str, expected: str) -> bool:
        if not stdin.isatty():
            out.write(f"{question}no terminal to ask on: kept (pass --yes-delete-data to delete)\n")
            return False
        out.write(question)
        out.flush()
        return stdin.readline().strip() == expected

    return confirm


def main(argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    parser = argparse.ArgumentParser(
        prog="python -m chatstream_ops.delete",
        description="Delete a chatstream stack: detach its caller policy, delete it, and report what it kept.",
    )
    parser.add_argument("--stack-name", required=True, help="the stack to delete (make delete STACK=...)")
    parser.add_argument("--region", default=None, help="AWS region (default: your AWS profile's)")
    parser.add_argument(
        "--yes-delete-data",
        action="store_true",
        help="delete the messages in the stack's queues and the tables it keeps, without asking",
    )
    args = parser.parse_args(argv)
    try:
        session = boto3.session.Session(region_name=args.region)
        deletion = StackDeletion(
            cloudformation=session.client("cloudformation"),
            iam=session.client("iam"),
            dynamodb=session.client("dynamodb"),
            sqs=session.client("sqs"),
            out=out,
            confirm=terminal_confirm(sys.stdin, out),
            delete_data=args.yes_delete_data,
        )
        return deletion.run(args.stack_name)
    except DeleteError as error:
        return _fail(err, str(error))
    except NoCredentialsError:
        return _fail(
            err,
            "no AWS credentials found: configure them (`aws configure`, AWS_PROFILE or "
            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY) and run again",
        )
    except NoRegionError:
        return _fail(err, "no AWS region: pass --region, or set a region in your AWS profile (or AWS_DEFAULT_REGION)")
    except ClientError as error:
        return _fail(err, _explain(error))
    except BotoCoreError as error:
        return _fail(err, f"{error} (check your AWS configuration)")


def _fail(err: TextIO, message: str) -> int:
    """The one line a run that cannot go on prints: what went wrong and what to do; exit status 2."""
    err.write(f"delete: {message}\n")
    return 2


def _explain(error: ClientError) -> str:
    code, message = _code(error), _message(error)
    if code in ("UnrecognizedClientException", "InvalidClientTokenId", "ExpiredToken", "ExpiredTokenException"):
        return f"AWS refused your credentials ({code}): refresh them (`aws sso login`, `aws configure`) and run again"
    if code in ("AccessDenied", "AccessDeniedException"):
        return (
            f"access denied ({message}): run as an identity allowed to delete the stack and its resources, and to "
            "detach its policy (docs/DEPLOY.md, Tear down)"
        )
    return f"AWS error {code}: {message}"


if __name__ == "__main__":
    sys.exit(main())
