"""`make limits` (ops/chatstream_ops/limits.py) against DynamoDB and CloudFormation in moto: one caller's own limits
set, shown, handed back and lifted without a deploy, and held by the next turn it starts; nonsense refused in one
line, writing nothing."""

from __future__ import annotations

import io
import json
from typing import TYPE_CHECKING, Any

import boto3
import pytest

from chatstream.config import Limits
from chatstream.table import ChatTable
from chatstream.table.budgets import Admission, LimitExceeded, LimitKind
from chatstream_ops.limits import main

if TYPE_CHECKING:
    from chatstream_local.template import Template

STACK = "chatstream-test"
OWNER = "arn:aws:iam::123456789012:user/alice"


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = main(list(argv), out=out, err=err)
    return status, out.getvalue(), err.getvalue()


def start(table: ChatTable, owner: str = OWNER, defaults: Limits | None = None) -> str:
    admission = Admission(owner, defaults or Limits(turns_at_once=5), reserve=100, stale_after_ms=1_260_000)
    return table.turns.start_first(owner, "hello", admission=admission)


def owner_limits_item(table: ChatTable, owner: str = OWNER) -> dict[str, Any] | None:
    item = table.client.get_item(TableName=table.table_name, Key={"pk": {"S": f"O#{owner}"}, "sk": {"S": "LIMITS"}})
    return item.get("Item")


@pytest.fixture
def region(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


def test_a_limit_set_holds_from_the_callers_next_turn_and_default_and_lift_hand_it_back(
    chat_table: ChatTable, table_name: str, region: None
) -> None:
    # GIVEN a relay's table (its environment knows the caller has no limits of its own), and a turn of the caller's
    relay = ChatTable(chat_table.client, table_name)
    start(relay)
    # WHEN the operator gives the caller one turn at once
    status, out, err = run("--owner", OWNER, "--table-name", table_name, "--turns-at-once", "1")
    # THEN it says so, and what the caller now has and uses
    assert (status, err) == (0, "")
    assert f"{OWNER}: set turns_at_once 1" in out
    assert "  turns_at_once: 1 (its own; 1 generating)" in out
    assert "requests_per_minute: ? (the deployment's CallerRequestsPerMinute (pass --stack-name to read it)" in out
    # AND the caller's next turn is refused by it, with no deploy
    with pytest.raises(LimitExceeded) as refused:
        start(relay)
    assert refused.value.refusal.limits.turns_at_once == 1
    # WHEN it is handed back to the deployment's (5) THEN the next turn starts
    status, out, _ = run("--owner", OWNER, "--table-name", table_name, "--turns-at-once", "default")
    assert status == 0 and "set turns_at_once the deployment's" in out and "(none of its own)" in out
    start(relay)
    # WHEN several are set and then all lifted THEN the caller has none of its own, and is told so twice over
    assert (
        run("--owner", OWNER, "--table-name", table_name, "--tokens-per-day", "0", "--requests-per-minute", "9")[0] == 0
    )
    assert owner_limits_item(relay) is not None
    status, out, _ = run("--owner", OWNER, "--table-name", table_name, "--lift")
    assert status == 0 and f"{OWNER}: its own limits lifted" in out and owner_limits_item(relay) is None
    assert "it had no limits of its own" in run("--owner", OWNER, "--table-name", table_name, "--lift")[1]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--owner", "alice"], "'alice' is not a caller: an owner is anonymous"),
        (["--owner", "anonymous "], "'anonymous ' is not a caller"),
        (["--owner", "arn:aws:iam::123:user/alice"], "is not a caller"),
        (["--owner", ""], "'' is not a caller"),
        (["--owner", OWNER, "--turns-at-once", "-1"], "--turns-at-once must be a whole number from 0 (no limit)"),
        (["--owner", OWNER, "--tokens-per-day", "1.5"], "--tokens-per-day must be a whole number"),
        (["--owner", OWNER, "--requests-per-minute", "lots"], "--requests-per-minute must be a whole number"),
        (["--owner", OWNER, "--turns-at-once", "1000000001"], "to 1,000,000,000, or default"),
        (["--owner", OWNER, "--lift", "--turns-at-once", "2"], "--lift hands every limit back"),
    ],
)
def test_nonsense_is_refused_in_one_line_and_writes_nothing(
    chat_table: ChatTable, table_name: str, region: None, argv: list[str], says: str
) -> None:
    status, out, err = run(*argv, "--table-name", table_name)
    assert status == 2 and out == "" and err.count("\n") == 1 and err.startswith("limits: ") and says in err
    assert chat_table.client.scan(TableName=table_name)["Items"] == []


def test_the_owners_of_every_auth_mode_are_taken(chat_table: ChatTable, table_name: str, region: None) -> None:
    owners = [
        "anonymous",
        "arn:aws:sts::123456789012:assumed-role/chat-user/alice@example.com",
        "cognito-identity:us-east-1:0f1e2d3c-aaaa-bbbb-cccc-1234567890ab:us-east-1:abcd-1234",
        "123456789012:AIDAEXAMPLE",
        "jwt:https://cognito-idp.us-east-1.amazonaws.com/us-east-1_AbC#6f1b8e2a-1c2d-4e5f",
    ]
    for owner in owners:
        status, out, err = run("--owner", owner, "--table-name", table_name, "--turns-at-once", "3")
        assert (status, err) == (0, ""), owner
        assert "turns_at_once: 3 (its own" in out


def test_with_the_stack_it_shows_the_deployments_defaults_and_warns_of_a_day_below_max_tokens(
    chat_table: ChatTable, table_name: str, template: Template, region: None
) -> None:
    # GIVEN a stack whose parameters are the deployment's limits, and the table it names
    cloudformation = boto3.client("cloudformation", region_name="us-east-1")
    parameters = template.raw["Parameters"]
    body = {
        "Parameters": {
            name: {"Type": "String", "Default": str(parameters[name]["Default"])}
            for name in ("CallerRequestsPerMinute", "CallerTokensPerDay", "CallerTurnsAtOnce", "MaxTokensLimit")
        },
        "Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
        "Outputs": {"ChatTableName": {"Value": table_name}},
    }
    cloudformation.create_stack(
        StackName=STACK,
        TemplateBody=json.dumps(body),
        Parameters=[{"ParameterKey": "CallerTurnsAtOnce", "ParameterValue": "2"}],
    )
    # WHEN the operator sets a day of 1,000 tokens, below the stack's MaxTokensLimit
    status, out, err = run("--owner", OWNER, "--stack-name", STACK, "--tokens-per-day", "1000")
    # THEN it is set, with a note on what it means, and the rest are the stack's own
    assert status == 0
    assert "note: a turn that asks for no max_tokens reserves MaxTokensLimit (4,096 tokens)" in err
    assert "  tokens_per_day: 1,000 (its own; 0 charged or held today (UTC))" in out
    assert "  turns_at_once: 2 (the deployment's CallerTurnsAtOnce; 0 generating)" in out
    assert "  requests_per_minute: 60 (the deployment's CallerRequestsPerMinute; 0 started this minute)" in out
    # AND a table named beside the stack must be the stack's
    status, _, err = run("--owner", OWNER, "--stack-name", STACK, "--table-name", "another")
    assert status == 2 and "is not stack 'chatstream-test''s ChatTableName" in err
    assert LimitKind.TOKENS in ChatTable(chat_table.client, table_name).budgets.overrides(OWNER).values  # type: ignore[union-attr]


def test_an_unknown_table_or_stack_is_one_line(moto: None, region: None) -> None:
    status, _, err = run("--owner", OWNER, "--table-name", "nowhere")
    assert status == 2 and "the table was not found" in err
    status, _, err = run("--owner", OWNER, "--stack-name", "nowhere")
    assert status == 2 and "stack 'nowhere' not found" in err
    status, _, err = run("--owner", OWNER)
    assert status == 2 and "the table is unknown: pass --stack-name" in err
