"""Set, show or lift one caller's own limits, without a deploy (docs/OPERATIONS.md, "Budgets per caller").

Usage::

    python -m chatstream_ops.limits --owner OWNER [--stack-name NAME | --table-name NAME] [--region REGION]
        [--requests-per-minute N] [--tokens-per-day N] [--turns-at-once N]   # N: a number, 0 (no limit) or default
        [--lift]                                                              # all back to the deployment's

``make limits STACK=<stack> OWNER=<owner> ARGS="--turns-at-once 2"``. An owner is a session's owner, as the relay
names it in its ``turn refused`` log lines and the ``CallerRefusalsRule``: ``anonymous`` (``FunctionUrlAuthType``
``NONE``: every caller), an IAM principal's ARN (``arn:aws:iam::<account>:user/<name>``,
``arn:aws:sts::<account>:assumed-role/<role>/<session>``), ``cognito-identity:<pool>:<identity>``,
``<account>:<caller id>``, or ``jwt:<issuer>#<subject>``.

A limit given is the owner's own from the next turn it starts, in every execution environment of the relay (each
start checks the owner's limits item in its own transaction: :mod:`chatstream.table.budgets`); ``default`` hands that
one back to the deployment's parameter, ``--lift`` all three. Without a change, the command shows the owner's limits
and what it has used of them. Either way it prints the owner's limits as they now stand: its own, or the
deployment's (read from the stack's parameters with ``--stack-name``).

Nonsense is refused in one line on stderr (``limits: …``), and nothing is written: an owner of no auth mode's form, a
limit that is not a whole number from 0 to 1,000,000,000 (or ``default``), ``--lift`` beside a limit. The exit status
is 0, or 2 when the command cannot run.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import TYPE_CHECKING, TextIO

import boto3
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError

from chatstream import config
from chatstream.config import MAX_LIMIT, Limits
from chatstream.table import ChatTable
from chatstream.table.budgets import LimitKind, Overrides

if TYPE_CHECKING:
    from collections.abc import Sequence

    from chatstream.table.budgets import Standing

DEFAULT = "default"
# The template's parameter of each limit: the deployment's default for every owner.
PARAMETERS = {
    LimitKind.REQUESTS: "CallerRequestsPerMinute",
    LimitKind.TOKENS: "CallerTokensPerDay",
    LimitKind.TURNS: "CallerTurnsAtOnce",
}
# The owners the relay names (chatstream.relay.identity, chatstream.relay.bearer): one form per auth mode.
OWNER_FORMS = (
    re.compile(r"anonymous"),
    re.compile(r"arn:aws[a-z-]*:(iam|sts)::[0-9]{12}:[\x21-\x7e]+"),
    re.compile(r"cognito-identity:[a-z0-9-]+:[0-9a-f-]+:[\x21-\x7e]+"),
    re.compile(r"[0-9]{12}:[\x21-\x7e]+"),
    re.compile(r"jwt:https?://[\x21-\x22\x24-\x7e]+#[\x21-\x7e]+"),
)
MAX_OWNER_CHARS = 1024  # a key of the table holds 2,048 bytes; no principal's name comes near


class LimitsError(Exception):
    """The command cannot run as asked; the message is the one line printed."""


def check_owner(owner: str) -> str:
    if len(owner) <= MAX_OWNER_CHARS and any(form.fullmatch(owner) for form in OWNER_FORMS):
        return owner
    shown = owner if len(owner) <= 80 else owner[:80] + "…"
    raise LimitsError(
        f"{shown!r} is not a caller: an owner is anonymous (FunctionUrlAuthType NONE), an IAM principal's ARN "
        "(arn:aws:iam::<account>:user/<name>, arn:aws:sts::<account>:assumed-role/<role>/<session>), "
        "cognito-identity:<pool>:<identity>, <account>:<caller id>, or jwt:<issuer>#<subject>, as the relay's "
        "'turn refused' log lines name it"
    )


def parse_value(kind: LimitKind, text: str) -> int | None:
    """A limit as given: a whole number (0: no limit), or ``default`` (None: the deployment's)."""
    if text.strip().lower() == DEFAULT:
        return None
    if not (text.isascii() and text.isdigit()) or int(text) > MAX_LIMIT:
        flag = "--" + kind.value.replace("_", "-")
        raise LimitsError(
            f"{flag} must be a whole number from 0 (no limit) to {MAX_LIMIT:,}, or {DEFAULT} (the deployment's), "
            f"got {text!r}"
        )
    return int(text)


def describe(owner: str, overrides: Overrides | None, defaults: Limits | None, standing: Standing | None) -> str:
    """The owner's limits as they stand, one line each: its own or the deployment's, and what it has used."""
    own = {} if overrides is None else dict(overrides.values)
    lines = [f"limits of {owner}" + ("" if own else " (none of its own)") + ":"]
    used = {}
    if standing is not None:
        used = {
            LimitKind.REQUESTS: f"{standing.requests_used} started this minute",
            LimitKind.TOKENS: f"{standing.tokens_used:,} charged or held today (UTC)",
            LimitKind.TURNS: f"{standing.turns_running} generating",
        }
    for kind in LimitKind:
        if kind in own:
            value, whose = own[kind], "its own"
        elif defaults is not None:
            value, whose = getattr(defaults, kind.value), f"the deployment's {PARAMETERS[kind]}"
        else:
            value, whose = None, f"the deployment's {PARAMETERS[kind]} (pass --stack-name to read it)"
        shown = "?" if value is None else ("no limit" if value == 0 else f"{value:,}")
        extra = f"; {used[kind]}" if kind in used else ""
        lines.append(f"  {kind.value}: {shown} ({whose}{extra})")
    return "\n".join(lines) + "\n"


def _stack(session: boto3.session.Session, name: str) -> tuple[str, Limits, int]:
    """The stack's table, its callers' default limits and its MaxTokensLimit."""
    stack = session.client("cloudformation").describe_stacks(StackName=name)["Stacks"][0]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    parameters = {p["ParameterKey"]: p.get("ParameterValue", "") for p in stack.get("Parameters", [])}
    if "ChatTableName" not in outputs:
        raise LimitsError(f"stack {name!r} has no ChatTableName output: is it a chatstream stack?")

    def number(parameter: str, fallback: int) -> int:
        value = parameters.get(parameter, "")
        return int(value) if value.isdigit() else fallback

    defaults = Limits(**{kind.value: number(PARAMETERS[kind], 0) for kind in LimitKind})
    return outputs["ChatTableName"], defaults, number("MaxTokensLimit", 4096)


def main(argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    parser = argparse.ArgumentParser(
        prog="python -m chatstream_ops.limits", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    parser.add_argument("--owner", required=True, help="the caller, as the relay names it (see --help's text above)")
    parser.add_argument("--stack-name", help="the deployed stack: its table and its default limits")
    parser.add_argument("--table-name", help=f"ChatTable, without --stack-name (env {config.CHAT_TABLE_NAME})")
    parser.add_argument("--region", help="AWS region (default: the SDK's)")
    for kind in LimitKind:
        parser.add_argument("--" + kind.value.replace("_", "-"), metavar="N", help="a number, 0 (no limit), or default")
    parser.add_argument("--lift", action="store_true", help="all three back to the deployment's")
    args = parser.parse_args(argv)
    try:
        return _run(args, out, err)
    except LimitsError as failure:
        err.write(f"limits: {failure}\n")
        return 2
    except NoCredentialsError:
        err.write("limits: no AWS credentials: configure them (aws configure, AWS_PROFILE)\n")
        return 2
    except NoRegionError:
        err.write("limits: no AWS region: pass --region, or set AWS_DEFAULT_REGION\n")
        return 2
    except (ClientError, BotoCoreError) as failure:
        err.write(f"limits: {_explain(failure, args)}\n")
        return 2


def _run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    owner = check_owner(args.owner)
    values: dict[LimitKind, int | None] = {
        kind: parse_value(kind, given) for kind in LimitKind if (given := getattr(args, kind.value)) is not None
    }
    if args.lift and values:
        raise LimitsError("--lift hands every limit back to the deployment's: give it alone, or give the limits")
    session = boto3.session.Session(region_name=args.region)
    defaults: Limits | None = None
    max_tokens_limit: int | None = None
    table_name = args.table_name
    if args.stack_name:
        stack_table, defaults, max_tokens_limit = _stack(session, args.stack_name)
        if table_name and table_name != stack_table:
            raise LimitsError(
                f"--table-name {table_name!r} is not stack {args.stack_name!r}'s ChatTableName ({stack_table!r}): "
                "give one or the other"
            )
        table_name = stack_table
    table_name = table_name or _environ_table()
    if not table_name:
        raise LimitsError("the table is unknown: pass --stack-name (make limits STACK=...) or --table-name")
    budgets = ChatTable(session.client("dynamodb"), table_name).budgets
    if args.lift:
        lifted = budgets.lift(owner)
        out.write(f"{owner}: {'its own limits lifted' if lifted else 'it had no limits of its own'}\n")
    elif values:
        budgets.set_overrides(owner, values)
        out.write(f"{owner}: set {', '.join(_shown(kind, value) for kind, value in values.items())}\n")
        tokens = values.get(LimitKind.TOKENS)
        if tokens and max_tokens_limit and tokens < max_tokens_limit:
            err.write(
                f"note: a turn that asks for no max_tokens reserves MaxTokensLimit ({max_tokens_limit:,} tokens), more "
                f"than {tokens:,} a day: every such turn of {owner}'s is refused\n"
            )
    standing = budgets.standing(owner, defaults or Limits())
    out.write(describe(owner, budgets.overrides(owner), defaults, standing))
    return 0


def _shown(kind: LimitKind, value: int | None) -> str:
    return f"{kind.value} " + ("the deployment's" if value is None else "no limit" if value == 0 else f"{value:,}")


def _environ_table() -> str:
    return os.environ.get(config.CHAT_TABLE_NAME, "").strip()


def _explain(failure: Exception, args: argparse.Namespace) -> str:
    if isinstance(failure, ClientError):
        code = failure.response.get("Error", {}).get("Code", "")
        if code == "ValidationError" and args.stack_name:
            return f"stack {args.stack_name!r} not found: check STACK= and the region (--region)"
        if code == "ResourceNotFoundException":
            return "the table was not found: check STACK= (or --table-name) and the region (--region)"
        if code in ("AccessDeniedException", "AccessDenied"):
            return (
                "access denied: the command needs dynamodb:GetItem, BatchGetItem, UpdateItem and DeleteItem on the "
                "table (and cloudformation:DescribeStacks with --stack-name)"
            )
    return str(failure)


if __name__ == "__main__":
    sys.exit(main())
