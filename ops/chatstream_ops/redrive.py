"""Redrive ConsumerDLQ: re-process what the consumer could not, through the same materializer core.

Usage (see docs/OPERATIONS.md)::

    python -m chatstream_ops.redrive [--stack-name NAME | --queue-url URL --table-name NAME --stream-name NAME]
                                     [--dry-run] [--max N] [--discard-lost] [--discard-invalid]

Two kinds of message (``chatstream.dlq`` builds and parses both):

- **poison-record**: the payload is decoded again; if it is now a valid token record it is written
  (and its turn reconciled); otherwise the message stays, and the report says why. A payload too big
  to travel in the message is re-read from the stream by its coordinates.
- **on-failure** (the event source mapping gave up on a batch): the range is re-read with
  ``GetShardIterator AT_SEQUENCE_NUMBER`` from ``startSequenceNumber`` up to ``endSequenceNumber`` and
  re-processed. Records that are no longer in the stream (past its retention, or in a shard that expired)
  are reported as lost, by shard and sequence range; such a message stays unless ``--discard-lost``, which
  deletes it and reports it discarded.

A message is read from the stream its own ``streamArn`` names, never another: ``--stream-name`` is a check (a
message of another stream, or of another region, is left with the reason), and the stream of a poison-record
message that names none. A stream that is not found is not a loss (the name, region or account may be wrong): the
message stays.

A message is deleted only after it was redriven (or discarded as asked); running twice is harmless (writes are
idempotent, redriven messages are gone). Messages received are kept hidden while the run lasts, and those not
redriven are made visible again at the end. The exit status is 1 when anything could not be redriven or was lost,
2 when the run cannot start (one line on stderr).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

import boto3
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError

from chatstream import config
from chatstream.dlq import DeadLetterQueue, DlqKind, DlqMessage, FailedBatch, PoisonRecord
from chatstream.errors import ChatstreamError, InvalidDeadLetter, InvalidRecord
from chatstream.kinesis import StreamRecord, stream_arn_of, stream_name_of
from chatstream.materialize import Materializer, decode
from chatstream.table import ChatTable

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from mypy_boto3_kinesis import KinesisClient


class RedriveStatus(StrEnum):
    """What became of one DLQ message."""

    REDRIVEN = "redriven"
    WOULD_REDRIVE = "would redrive"
    DISCARDED = "discarded"
    WOULD_DISCARD = "would discard"
    LEFT = "left in queue"


STACK_NAME = "CHATSTREAM_STACK_NAME"
GET_RECORDS_LIMIT = 1000
MAX_EMPTY_READS = 5
MAX_STALE_RECEIVES = 3


class StreamRefused(ChatstreamError):
    """A message names a stream this run must not read for it (not the one it was told to read, or elsewhere)."""


@dataclass(frozen=True)
class LostRange:
    """Records of a failed batch that the stream no longer has."""

    shard_id: str
    first: str
    last: str
    reason: str
    unread: bool = False  # not known to be gone: the reads stopped short; never discarded, a later run reads it

    def __str__(self) -> str:
        span = self.first if self.first == self.last else f"{self.first}..{self.last}"
        return f"{self.shard_id} sequence numbers {span} ({self.reason})"


@dataclass
class MessageResult:
    message_id: str
    kind: DlqKind
    status: RedriveStatus
    detail: str
    records: int = 0
    lost: list[LostRange] = field(default_factory=list)


@dataclass
class RedriveReport:
    dry_run: bool
    results: list[MessageResult] = field(default_factory=list)
    unfinished: str | None = None  # why the run stopped before the queue had nothing more to hand out

    @property
    def ok(self) -> bool:
        return self.unfinished is None and all(
            result.status is not RedriveStatus.LEFT and not result.lost for result in self.results
        )

    def render(self) -> str:
        mode = " (dry run: nothing written or deleted)" if self.dry_run else ""
        lines = [f"chatstream redrive{mode}: {len(self.results)} message(s)"]
        for result in self.results:
            lines.append(f"  {result.message_id} [{result.kind}] {result.status}: {result.detail}")
            lines.extend(f"    LOST {lost}" for lost in result.lost)
        counts: dict[RedriveStatus, int] = {}
        for result in self.results:
            counts[result.status] = counts.get(result.status, 0) + 1
        summary = ", ".join(f"{count} {status}" for status, count in sorted(counts.items())) or "queue empty"
        lost = sum(len(result.lost) for result in self.results)
        lines.append(f"summary: {summary}; {lost} lost range(s)")
        if self.unfinished:
            lines.append(f"not finished: {self.unfinished}")
        return "\n".join(lines) + "\n"


@dataclass
class _Holds:
    """The messages a run has received and not deleted, kept hidden from other readers while the run lasts.

    Each is hidden again (ChangeMessageVisibility) once half its visibility timeout is spent, so a run longer than
    the timeout does not see its own messages come back as if they were the queue's last ones; the latest receipt
    handle of each is the one that deletes or releases it.
    """

    dlq: DeadLetterQueue
    visibility_timeout_s: int
    now: Callable[[], float]
    messages: dict[str, tuple[DlqMessage, float]] = field(default_factory=dict)

    def hold(self, message: DlqMessage) -> None:
        """A message just received (hidden for the visibility timeout from now), or received again."""
        self.messages[message.message_id] = (message, self.now())

    def pop(self, message: DlqMessage) -> DlqMessage:
        """The message, with its latest receipt handle, no longer held."""
        held, _ = self.messages.pop(message.message_id, (message, 0.0))
        return held

    def renew(self) -> None:
        if self.visibility_timeout_s <= 0:
            return
        for message_id, (message, hidden_at) in list(self.messages.items()):
            if self.now() - hidden_at >= self.visibility_timeout_s / 2 and self.dlq.hide(
                message, self.visibility_timeout_s
            ):
                self.messages[message_id] = (message, self.now())
            # else: visible again already; a later receive hands it back, and ``hold`` takes its new receipt handle

    def release_all(self) -> None:
        for message, _ in self.messages.values():
            self.dlq.release(message)
        self.messages.clear()


@dataclass
class Redrive:
    """Reads the DLQ and redrives each message through ``materializer`` (reconciling finished turns)."""

    dlq: DeadLetterQueue
    kinesis: KinesisClient
    materializer: Materializer
    stream_name: str | None = None  # the stream a message must name (a message without a stream ARN is read from it)
    discard_lost: bool = False
    discard_invalid: bool = False  # delete what can never be redriven: still invalid records, unknown messages
    # How long a received message stays hidden; the run renews it while it lasts. 0 holds nothing: the run then ends
    # at the first receive that brings no message it has not seen (the chaos run, over a queue of a few messages).
    visibility_timeout_s: int = 300
    receive_wait_s: int = 1
    now: Callable[[], float] = time.monotonic
    _account: str | None = field(default=None, init=False)

    def run(self, max_messages: int | None = None, dry_run: bool = False) -> RedriveReport:
        """Every message the queue hands out, until a receive brings none (or ``max_messages`` were redriven)."""
        report = RedriveReport(dry_run=dry_run)
        holds = _Holds(self.dlq, self.visibility_timeout_s, self.now)
        seen: set[str] = set()
        stale_receives = 0
        try:
            while max_messages is None or len(report.results) < max_messages:
                holds.renew()
                wanted = 10 if max_messages is None else max_messages - len(report.results)
                batch = self.dlq.receive(min(10, wanted), self.visibility_timeout_s, self.receive_wait_s)
                if not batch:
                    break  # nothing visible: what the run holds is hidden, the rest was redriven or deleted
                for message in batch:
                    holds.hold(message)
                fresh = [message for message in batch if message.message_id not in seen]
                if not fresh:
                    # messages this run holds came back: their visibility timeout ran out before a renewal
                    stale_receives += 1
                    if self.visibility_timeout_s <= 0:
                        break
                    if stale_receives >= MAX_STALE_RECEIVES:
                        report.unfinished = (
                            f"{stale_receives} receives in a row brought back only messages already handled (their "
                            "visibility timeout ran out): messages not yet read may remain; run the redrive again"
                        )
                        break
                    continue
                stale_receives = 0
                for message in fresh:
                    seen.add(message.message_id)
                    if max_messages is not None and len(report.results) >= max_messages:
                        continue  # held, and released at the end
                    holds.renew()
                    result = self.redrive(message, dry_run)
                    report.results.append(result)
                    if result.status in (RedriveStatus.REDRIVEN, RedriveStatus.DISCARDED):
                        self.dlq.delete(holds.pop(message))
        finally:
            holds.release_all()
        return report

    def redrive(self, message: DlqMessage, dry_run: bool = False) -> MessageResult:
        kind = message.kind
        try:
            letter = message.parse()
            if isinstance(letter, PoisonRecord):
                return self._poison(message, letter, dry_run)
            return self._on_failure(message, letter, dry_run)
        except InvalidDeadLetter as err:
            detail = str(err) if kind is DlqKind.UNKNOWN else f"failed: {err}"
            return self._invalid(message.message_id, kind, detail, dry_run)
        except StreamRefused as err:
            return MessageResult(message.message_id, kind, RedriveStatus.LEFT, f"not read: {err}")
        except (ClientError, BotoCoreError, KeyError, ValueError) as err:
            return MessageResult(message.message_id, kind, RedriveStatus.LEFT, f"failed: {type(err).__name__}: {err}")

    # ------------------------------------------------------------------------------ kinds

    def _poison(self, message: DlqMessage, poison: PoisonRecord, dry_run: bool) -> MessageResult:
        record = poison.record
        left = RedriveStatus.LEFT
        if poison.payload_truncated:
            found, lost = self.read_range(record.stream_arn, record.shard_id, record.sequence_number)
            if lost:
                return MessageResult(
                    message.message_id, DlqKind.POISON, left, "payload no longer in the stream", 0, lost
                )
            record = found[0]
        try:
            token = decode(record)
        except InvalidRecord as err:
            detail = f"still not a valid token record ({err}); first reported: {poison.reason}"
            return self._invalid(message.message_id, DlqKind.POISON, detail, dry_run)
        where = f"session {token.session_id} turn {token.turn} seq {token.seq}"
        if dry_run:
            return MessageResult(
                message.message_id, DlqKind.POISON, RedriveStatus.WOULD_REDRIVE, f"now valid: {where}", 1
            )
        return self._process(message, DlqKind.POISON, [record], f"written: {where}")

    def _invalid(self, message_id: str, kind: DlqKind, detail: str, dry_run: bool) -> MessageResult:
        """A message that no redrive can restore (not a token record, or not a message of ours): left in the
        queue, or with ``discard_invalid`` deleted (its coordinates and reason are in the report, not its payload)."""
        if not self.discard_invalid:
            return MessageResult(message_id, kind, RedriveStatus.LEFT, detail + " (--discard-invalid deletes it)")
        status = RedriveStatus.WOULD_DISCARD if dry_run else RedriveStatus.DISCARDED
        return MessageResult(message_id, kind, status, detail)

    def _on_failure(self, message: DlqMessage, batch: FailedBatch, dry_run: bool) -> MessageResult:
        records, lost = self.read_range(batch.stream_arn, batch.shard_id, batch.start, batch.end)
        size = "?" if batch.batch_size is None else batch.batch_size
        detail = f"{batch.condition}: {len(records)} of {size} records of {batch.shard_id} {batch.start}..{batch.end}"
        unread = any(range_.unread for range_ in lost)
        if dry_run:
            if unread or (lost and not self.discard_lost):
                status = RedriveStatus.LEFT
            else:
                status = RedriveStatus.WOULD_DISCARD if lost else RedriveStatus.WOULD_REDRIVE
            return MessageResult(message.message_id, DlqKind.ON_FAILURE, status, detail, len(records), lost)
        result = self._process(message, DlqKind.ON_FAILURE, records, detail)
        result.lost = lost
        if unread and result.status is RedriveStatus.REDRIVEN:
            result.status = RedriveStatus.LEFT
            result.detail += "; kept because records were not read (a later run reads them)"
        elif lost and result.status is RedriveStatus.REDRIVEN:
            if self.discard_lost:
                result.status = RedriveStatus.DISCARDED  # what was found is written; the message goes with the loss
                result.detail += "; deleted with its lost records (--discard-lost)"
            else:
                result.status = RedriveStatus.LEFT
                result.detail += "; kept because records are lost (--discard-lost deletes it)"
        return result

    def _process(
        self, message: DlqMessage, kind: DlqKind, records: Sequence[StreamRecord], detail: str
    ) -> MessageResult:
        outcome = self.materializer.process(records)
        if not outcome.ok:
            reasons = sorted(set(outcome.failures.values()))
            detail += f"; not written: {'; '.join(reasons)}"
            return MessageResult(message.message_id, kind, RedriveStatus.LEFT, detail)
        extra = f"; {outcome.poison} poison record(s) sent back to the DLQ" if outcome.poison else ""
        return MessageResult(message.message_id, kind, RedriveStatus.REDRIVEN, detail + extra, len(records))

    # --------------------------------------------------------------------------- the stream

    def read_range(
        self, stream_arn: str, shard_id: str, start: str, end: str | None = None
    ) -> tuple[list[StreamRecord], list[LostRange]]:
        """The shard's records from ``start`` to ``end`` (inclusive), and what of the range is gone.

        :class:`StreamRefused` when the stream is not one to read: not the stream the run was told to read, in
        another region, or not found (a record is lost only when its own stream says it no longer has it).
        """
        end = end or start
        stream_name = self._stream_to_read(stream_arn)
        try:
            iterator: str | None = self.kinesis.get_shard_iterator(
                StreamName=stream_name,
                ShardId=shard_id,
                ShardIteratorType="AT_SEQUENCE_NUMBER",
                StartingSequenceNumber=start,
            )["ShardIterator"]
        except ClientError as err:
            code = err.response["Error"]["Code"]
            reason = f"{code}: {err.response['Error'].get('Message', '')}"
            if code == "ResourceNotFoundException":
                # The stream or the shard is not found. A shard of a stream that is there has expired (a shard
                # closed by a reshard is kept for the stream's retention period, then its records are gone);
                # a stream that is not there is a wrong name, region or account as much as a deleted stream.
                self._require_stream(stream_name)
                return [], [LostRange(shard_id, start, end, f"the stream no longer has the shard ({reason})")]
            if code == "InvalidArgumentException":
                return [], [LostRange(shard_id, start, end, reason)]
            raise
        found: list[StreamRecord] = []
        empty_reads = 0
        reached_end = False
        arn = stream_arn_of(stream_arn)
        while iterator is not None and empty_reads < MAX_EMPTY_READS and not reached_end:
            response = self.kinesis.get_records(ShardIterator=iterator, Limit=GET_RECORDS_LIMIT)
            iterator = response.get("NextShardIterator")
            if not response["Records"]:
                empty_reads += 1
                if response.get("MillisBehindLatest", 0) == 0:
                    break
                continue
            empty_reads = 0
            for raw in response["Records"]:
                sequence_number = int(raw["SequenceNumber"])
                if sequence_number > int(end):
                    reached_end = True
                    break
                if sequence_number >= int(start):
                    found.append(StreamRecord.from_get_records(raw, shard_id, arn))
                reached_end = sequence_number == int(end)
        return found, _lost(shard_id, start, end, found, reached_end=reached_end)

    def _stream_to_read(self, stream_arn: str) -> str:
        """The stream named by a message's stream ARN, or for a message without one the run's ``stream_name``."""
        if not stream_arn:
            if self.stream_name:
                return self.stream_name
            raise StreamRefused("the message names no stream: pass --stream-name (or --stack-name)")
        named = stream_name_of(stream_arn)
        account = stream_arn.split(":")[4] if stream_arn.count(":") >= 5 else ""
        if self.stream_name and account and self._own_account() and account != self._own_account():
            # GetShardIterator reads the stream of this name in the caller's account: another account's records
            # would read as lost.
            raise StreamRefused(
                f"its stream {named!r} is in account {account}, not {self._own_account()}: run with that account's "
                "credentials"
            )
        if self.stream_name and named != self.stream_name:
            raise StreamRefused(
                f"its records are in stream {named!r}, not {self.stream_name!r} (--stream-name, TOKEN_STREAM_NAME or "
                f"the stack's TokenStreamName): redrive it with --stream-name {named}, or check the stack"
            )
        region = stream_arn.split(":")[3] if stream_arn.count(":") >= 5 else ""
        here = self.kinesis.meta.region_name
        if region and region != here:
            raise StreamRefused(f"its stream {named!r} is in region {region}, not {here}: run with --region {region}")
        return named

    def _own_account(self) -> str:
        """The account of the stream this run reads (``stream_name``), from its ARN (read once)."""
        if self._account is None:
            assert self.stream_name is not None
            try:
                summary = self.kinesis.describe_stream_summary(StreamName=self.stream_name)
            except ClientError as err:
                if err.response["Error"]["Code"] != "ResourceNotFoundException":
                    raise
                self._account = ""  # no such stream: the name check refuses what names another
            else:
                self._account = summary["StreamDescriptionSummary"]["StreamARN"].split(":")[4]
        return self._account

    def _require_stream(self, stream_name: str) -> None:
        try:
            self.kinesis.describe_stream_summary(StreamName=stream_name)
        except ClientError as err:
            if err.response["Error"]["Code"] != "ResourceNotFoundException":
                raise
            raise StreamRefused(
                f"stream {stream_name!r} not found in region {self.kinesis.meta.region_name} with these credentials "
                "(check the account and region; a stream that was deleted took its records with it)"
            ) from err


def _lost(shard_id: str, start: str, end: str, found: list[StreamRecord], *, reached_end: bool) -> list[LostRange]:
    """Kinesis trims a shard from its oldest record, so what is missing is at the start of the range; and should
    the reads stop before the range's last record (the stream answered nothing more), the rest was not read."""
    if not found:
        return [LostRange(shard_id, start, end, "no longer in the stream")]
    lost = []
    first, last = found[0].sequence_number, found[-1].sequence_number
    if int(first) > int(start):
        lost.append(LostRange(shard_id, start, first, "no longer in the stream (up to, not including, the last)"))
    if not reached_end:
        reason = "not read after the first: the stream gave nothing more before the range's end (run the redrive again)"
        lost.append(LostRange(shard_id, last, end, reason, unread=True))
    return lost


# --------------------------------------------------------------------------------------- CLI


def _stack(session: boto3.session.Session, stack_name: str) -> tuple[dict[str, str], dict[str, str]]:
    """The stack's outputs and parameters."""
    stack = session.client("cloudformation").describe_stacks(StackName=stack_name)["Stacks"][0]
    outputs = {output["OutputKey"]: output["OutputValue"] for output in stack.get("Outputs", [])}
    parameters = {item["ParameterKey"]: item.get("ParameterValue", "") for item in stack.get("Parameters", [])}
    return outputs, parameters


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m chatstream_ops.redrive", description="Re-process the messages of the consumer's DLQ."
    )
    parser.add_argument("--queue-url", default=os.environ.get(config.DLQ_URL), help="ConsumerDLQ URL (env DLQ_URL)")
    parser.add_argument(
        "--stack-name",
        default=os.environ.get(STACK_NAME),
        help=f"read defaults from the stack's outputs (env {STACK_NAME})",
    )
    parser.add_argument(
        "--stream-name",
        default=os.environ.get(config.TOKEN_STREAM_NAME),
        help=f"the token stream, the only one the run reads (env {config.TOKEN_STREAM_NAME}; or the stack's)",
    )
    parser.add_argument(
        "--table-name", default=os.environ.get(config.CHAT_TABLE_NAME), help="ChatTable (env CHAT_TABLE_NAME)"
    )
    parser.add_argument("--region", default=None, help="AWS region (default: the SDK's)")
    parser.add_argument("--max", type=int, default=None, metavar="N", help="redrive at most N messages")
    parser.add_argument(
        "--dry-run", action="store_true", help="report what would be redriven; write and delete nothing"
    )
    parser.add_argument("--discard-lost", action="store_true", help="delete on-failure messages whose records are lost")
    parser.add_argument(
        "--discard-invalid",
        action="store_true",
        help="delete messages that can never be redriven (records still invalid, messages not of this DLQ)",
    )
    parser.add_argument(
        "--ttl-days",
        type=int,
        default=None,
        help=(
            "expiry of the items written (default: the stack's TtlDays with --stack-name, else env TTL_DAYS, else "
            f"{config.TTL_DAYS_DEFAULT})"
        ),
    )
    args = parser.parse_args(argv)
    if args.max is not None and args.max < 1:
        return _fail("--max must be at least 1")
    if args.ttl_days is not None and args.ttl_days < 1:
        return _fail("--ttl-days must be at least 1")
    try:
        return _run(args)
    except NoCredentialsError:
        return _fail(
            "no AWS credentials found: configure them (`aws configure`, AWS_PROFILE or "
            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY) and run again"
        )
    except NoRegionError:
        return _fail("no AWS region: pass --region, or set AWS_DEFAULT_REGION (or a region in your AWS profile)")
    except ClientError as err:
        return _fail(_explain(err, args))
    except (BotoCoreError, ChatstreamError) as err:
        return _fail(f"{err} (check your AWS configuration and the options)")


def _fail(message: str) -> int:
    """The one line a failed redrive prints: what went wrong and what to do; exit status 2."""
    sys.stderr.write(f"redrive: {message}\n")
    return 2


def _explain(err: ClientError, args: argparse.Namespace) -> str:
    code = err.response.get("Error", {}).get("Code", "")
    message = err.response.get("Error", {}).get("Message", str(err))
    if code == "ValidationError" and "does not exist" in message:
        return f"stack {args.stack_name!r} not found: check STACK= (the stack's name) and the region (--region)"
    if code in ("AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"):
        return f"no queue at {args.queue_url}: check --queue-url (DLQ_URL) or STACK="
    if code in ("UnrecognizedClientException", "InvalidClientTokenId", "ExpiredToken", "ExpiredTokenException"):
        return f"AWS refused your credentials ({code}): refresh them (`aws sso login`, `aws configure`) and run again"
    if code in ("AccessDenied", "AccessDeniedException"):
        return f"access denied ({message}): run as an identity allowed to read the stack, queue, stream and table"
    return f"AWS error {code}: {message}"


def _table_exists(table: ChatTable) -> bool:
    """Whether the table is there, by reading a key no turn has (GetItem: a permission the redrive needs anyway)."""
    try:
        table.get_turn("redrive-probe", 0)
    except ClientError as err:
        if err.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
            return False
        raise
    return True


def _run(args: argparse.Namespace) -> int:
    session = boto3.session.Session(region_name=args.region)
    if args.stack_name:
        outputs, parameters = _stack(session, args.stack_name)
        # What is given besides the stack must be the stack's: a DLQ of one stack redriven into another's table
        # would copy one deployment's conversations into another's.
        for given, output in (("queue_url", "ConsumerDLQUrl"), ("table_name", "ChatTableName")):
            given_value, stack_value = getattr(args, given), outputs.get(output)
            if given_value and stack_value and given_value != stack_value:
                flag = "--" + given.replace("_", "-")
                return _fail(
                    f"{flag} {given_value!r} is not stack {args.stack_name!r}'s {output} ({stack_value!r}): give one "
                    "or the other (check DLQ_URL, CHAT_TABLE_NAME)"
                )
        if args.stream_name and outputs.get("TokenStreamName") and args.stream_name != outputs["TokenStreamName"]:
            return _fail(
                f"--stream-name {args.stream_name!r} is not stack {args.stack_name!r}'s TokenStreamName "
                f"({outputs['TokenStreamName']!r}): give one or the other (check TOKEN_STREAM_NAME)"
            )
        args.queue_url = args.queue_url or outputs.get("ConsumerDLQUrl")
        args.table_name = args.table_name or outputs.get("ChatTableName")
        args.stream_name = args.stream_name or outputs.get("TokenStreamName")
        if args.ttl_days is None and parameters.get("TtlDays", "").isdigit():
            args.ttl_days = int(parameters["TtlDays"])  # the items expire as the consumer's do
    if not args.queue_url:
        return _fail("the DLQ is unknown: pass --queue-url, set DLQ_URL, or pass --stack-name (make redrive STACK=...)")
    if not args.table_name:
        return _fail("the table is unknown: pass --table-name, set CHAT_TABLE_NAME, or pass --stack-name")

    ttl_days = (
        args.ttl_days or config.TableConfig.from_env({**os.environ, config.CHAT_TABLE_NAME: args.table_name}).ttl_days
    )
    table = ChatTable(session.client("dynamodb"), args.table_name, ttl_days=ttl_days)
    if not _table_exists(table):
        return _fail(
            f"table {args.table_name!r} not found in region {session.region_name}: check --table-name "
            "(CHAT_TABLE_NAME) or STACK=, and the region (--region)"
        )
    if not args.stream_name:
        # Each message names its stream; the run reads only this one, so a DLQ is never redriven from another.
        return _fail(
            "the token stream is unknown: pass --stream-name, set TOKEN_STREAM_NAME, or pass --stack-name "
            "(the redrive reads that stream's records only)"
        )
    dlq = DeadLetterQueue(session.client("sqs"), args.queue_url)
    redrive = Redrive(
        dlq=dlq,
        kinesis=session.client("kinesis"),
        materializer=Materializer(table=table, poison_sink=dlq, reconcile_finished_turns=True),
        stream_name=args.stream_name,
        discard_lost=args.discard_lost,
        discard_invalid=args.discard_invalid,
    )
    report = redrive.run(max_messages=args.max, dry_run=args.dry_run)
    sys.stdout.write(report.render())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
