"""`make chaos`: many concurrent chats on the local stack while faults are injected outside the product code.

Faults: the :class:`~chaos.faults.FaultProxy` between the functions and moto (Kinesis ``PutRecords``
throttling and partial failures, DynamoDB throttling on writes and reads and unprocessed batch items,
SQS errors); execution environments of the consumer and the proxy killed mid-invocation; poison
records put on the stream with a session's partition key; client connections dropped mid-stream and
resumed with ``Last-Event-ID``; model errors mid-stream (``/error-after N``).

At the end it checks everything against what the local model sent (``plan_reply``):

- every client stream exact: its token texts concatenate to the reply, no id twice, ending with
  ``done`` (``error`` where the model failed);
- every turn finished in the table, its records contiguous from seq 0 with one terminal record, its
  delta texts the reply;
- a generation whose proxy was killed loses the rest of that generation (the proxy runs once, as
  ``EventInvokeConfig`` says, and its failure lands in ProxyFailureQueue). The relay ends such a
  stream with ``error`` ``timeout`` once the turn is stale; what was streamed must still be a
  prefix of the reply. These are counted as ``generator_lost``, not as lost tokens;
- the DLQ holds exactly the poison records, after the on-failure pointers (if the fault budget
  pushed any there) were redriven, which must restore their turns.

It prints one line ``chaos: chats=N lost_tokens=0 duplicated_tokens=0 unfinished_turns=0
exact_streams=N/N …`` and exits 1 when anything is lost, duplicated, unfinished or inexact.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
from httpx_sse import EventSource

from chaos.faults import FaultProxy, FaultRates
from chatstream.dlq import DeadLetterQueue
from chatstream.materialize import Materializer
from chatstream.redrive import Redrive
from chatstream.table import ChatTable
from chatstream_local.bedrock.model import plan_reply, split_deltas
from chatstream_local.stack import LocalStack, StackSettings

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from httpx_sse import ServerSentEvent

MAX_RESUMES = 200
LOST_GENERATION_CODES = frozenset({"timeout", "generation_failed"})
REAPED_CODES = frozenset({"generation_failed"})  # a turn whose proxy died, ended from ProxyFailureQueue


@dataclass(frozen=True)
class ChaosSettings:
    chats: int = 200
    concurrency: int = 20
    seed: int = 0
    rates: FaultRates = field(default_factory=FaultRates.chaos)
    model_delay_ms: int = 2
    drop_rate: float = 0.25  # chats whose connection drops mid-stream and resumes
    model_error_rate: float = 0.1  # chats that end in a mid-stream model error
    poison_records: int = 5
    proxy_kills: int = 4
    consumer_kills: int = 8
    stale_turn_s: int = 30  # the relay's STALE_TURN_S: a killed generation's stream ends after this
    retry_budget_s: float = 180.0  # a client resumes after the relay's own retryable errors this long without progress
    settle_timeout_s: float = 60.0
    run_timeout_s: float = 1200.0


@dataclass(frozen=True)
class ChatPlan:
    index: int
    message: str
    drop_after: int | None  # close the connection after this many token events, then resume

    @property
    def expected_text(self) -> str:
        return plan_reply(self.message).text

    @property
    def model_fails(self) -> bool:
        return self.message.startswith("/error-after")


@dataclass
class StreamSeen:
    """What one client saw of its turn, across drops and resumes."""

    session_id: str = ""
    turn: int = 0
    events_url: str = ""
    tokens: list[tuple[int, str]] = field(default_factory=list)
    done: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    resumes: int = 0
    relay_retries: int = 0  # resumes after a retryable error the relay raised itself (no id: not the turn's record)
    error_from_record: bool = False
    failure: str = ""  # the client could not get a stream at all

    @property
    def last_id(self) -> int:
        return max((seq for seq, _ in self.tokens), default=0)

    @property
    def finished(self) -> bool:
        return self.done is not None or self.error is not None

    @property
    def text(self) -> str:
        return "".join(text for _, text in self.tokens)


@dataclass
class Tally:
    chats: int = 0
    lost_tokens: int = 0
    duplicated_tokens: int = 0
    unfinished_turns: int = 0
    exact_streams: int = 0
    generator_lost: int = 0
    model_errors: int = 0
    drops: int = 0
    resumes: int = 0
    relay_retries: int = 0
    poison_expected: int = 0
    poison_in_dlq: int = 0
    unexpected_dlq: int = 0
    onfailure_redriven: int = 0
    kills: str = ""
    faults: str = ""
    problems: list[str] = field(default_factory=list)

    @property
    def possible_exact(self) -> int:
        """Streams that can be exact: all but those whose generation was lost with its proxy."""
        return self.chats - self.generator_lost

    @property
    def ok(self) -> bool:
        return (
            self.lost_tokens == 0
            and self.duplicated_tokens == 0
            and self.unfinished_turns == 0
            and self.exact_streams + self.generator_lost == self.chats
            and self.poison_in_dlq == self.poison_expected
            and self.unexpected_dlq == 0
            and not self.problems
        )


# ------------------------------------------------------------------------------------------ plans


def plan_chats(settings: ChaosSettings) -> list[ChatPlan]:
    rng = random.Random(settings.seed)
    plans = []
    for index in range(settings.chats):
        roll = rng.random() if index > 2 else (0.99, 0.0, 0.5)[index]  # the first three: one of each kind
        if roll < settings.model_error_rate:
            message = f"/error-after {rng.randint(0, 60)}"
        elif roll < 0.55:
            message = f"/long {rng.choice([1, 5, 40, 120, 300, 600])}"
        else:
            message = f"chaos chat {index}: héllo 🙂 wörld {'tokens ' * rng.randint(0, 30)}".strip()
        drop_after = rng.randint(0, 6) if rng.random() < settings.drop_rate or index == 2 else None
        plans.append(ChatPlan(index, message, drop_after))
    return plans


# ------------------------------------------------------------------------------------------ client


def _consume(events: Iterator[ServerSentEvent], seen: StreamSeen, stop_after: int | None) -> bool:
    """Read events into ``seen``; True when the connection was dropped on purpose after ``stop_after`` tokens."""
    tokens_here = 0
    for event in events:
        data = json.loads(event.data) if event.data else {}
        if event.event == "meta":
            seen.session_id, seen.turn, seen.events_url = data["session_id"], int(data["turn"]), data["events_url"]
        elif event.event == "token":
            seen.tokens.append((int(event.id), data["text"]))
            tokens_here += 1
        elif event.event == "done":
            seen.done = data
            return False
        elif event.event == "error":
            seen.error = data
            # The turn's own error record has an id past every token; SSE carries the last id over to events
            # without one, so an error the relay raised itself arrives with (at most) the last token's id.
            seen.error_from_record = event.id.isdigit() and int(event.id) > seen.last_id
            return False
        elif event.event == "reconnect":
            seen.events_url = data.get("events_url", seen.events_url)
            return False
        if stop_after is not None and tokens_here >= stop_after and seen.events_url:
            return True
    return False


def _retry_relay_error(seen: StreamSeen, progress: tuple[int, float], budget_s: float) -> tuple[int, float] | None:
    """After a retryable error the relay raised itself (``timeout`` while the consumer lags, ``gap``,
    ``relay_error``), a client resumes from its last id, as HTTP_API.md's ``retryable`` says; it gives
    up after ``budget_s`` without a new token. The progress mark to go on with, or None to stop."""
    if seen.error is None or seen.error_from_record or not seen.error.get("retryable"):
        return None
    tokens, since = progress
    now = time.monotonic()
    if len(seen.tokens) > tokens:
        tokens, since = len(seen.tokens), now
    if now - since >= budget_s:
        return None
    seen.error = None
    seen.relay_retries += 1
    time.sleep(1.0)  # a client's backoff before resuming, not a wait for a condition
    return tokens, since


def run_chat(http: httpx.Client, plan: ChatPlan, deadline: float, retry_budget_s: float = 180.0) -> StreamSeen:
    seen = StreamSeen()
    headers = {"Accept": "text/event-stream"}
    try:
        with http.stream("POST", "/chat", json={"message": plan.message}, headers=headers) as response:
            if response.status_code != 200:
                response.read()
                seen.failure = f"POST /chat {response.status_code}: {response.text[:200]}"
                return seen
            _consume(EventSource(response).iter_sse(), seen, plan.drop_after)
            # leaving the block closes the connection: a drop mid-stream when the turn is not finished
    except (httpx.TransportError, httpx.StreamError) as err:
        if not seen.events_url:
            seen.failure = f"POST /chat failed: {type(err).__name__}"
            return seen
    progress = (len(seen.tokens), time.monotonic())
    while time.monotonic() < deadline:
        if seen.finished:
            retry = _retry_relay_error(seen, progress, retry_budget_s)
            if retry is None:
                break
            progress = retry
        if seen.resumes >= MAX_RESUMES:
            break
        seen.resumes += 1
        try:
            with http.stream(
                "GET", seen.events_url, headers={**headers, "Last-Event-ID": str(seen.last_id)}
            ) as response:
                if response.status_code != 200:
                    response.read()
                    seen.failure = f"GET events {response.status_code}: {response.text[:200]}"
                    return seen
                _consume(EventSource(response).iter_sse(), seen, None)
        except (httpx.TransportError, httpx.StreamError):
            continue
    if not seen.finished and not seen.failure:
        seen.failure = f"the stream did not end ({seen.resumes} resumes)"
    return seen


# ------------------------------------------------------------------------------------------ checks


def _deltas_covered(expected: str, received: str) -> int:
    """How many of the model's deltas ``received`` holds in full, from the start."""
    covered, at = 0, 0
    for delta in split_deltas(expected):
        if received[at : at + len(delta)] != delta:
            break
        at += len(delta)
        covered += 1
    return covered


def compare_text(expected: str, received: str) -> tuple[int, int]:
    """(lost, duplicated) deltas of ``received`` against ``expected``."""
    if received == expected:
        return 0, 0
    total = len(split_deltas(expected))
    covered = _deltas_covered(expected, received)
    extra = (
        received[len(expected) :]
        if received.startswith(expected)
        else received[sum(map(len, split_deltas(expected)[:covered])) :]
    )
    return total - covered, len(split_deltas(extra)) if extra else 0


class Checker:
    def __init__(self, stack: LocalStack, tally: Tally) -> None:
        self.stack = stack
        self.tally = tally
        self.table = ChatTable(stack.client("dynamodb"), stack.name("ChatTable"), sleep=time.sleep)

    def lost_generations(self) -> set[tuple[str, int]]:
        """Turns whose proxy invocation failed (killed): the messages in ProxyFailureQueue."""
        sqs = self.stack.client("sqs")
        url = sqs.get_queue_url(QueueName=self.stack.name("ProxyFailureQueue"))["QueueUrl"]
        turns: set[tuple[str, int]] = set()
        for body in _peek_all(sqs, url):
            payload = json.loads(body).get("requestPayload") or {}
            turns.add((str(payload.get("session_id")), int(payload.get("turn", 0))))
        return turns

    def turn_settled(self, seen: StreamSeen, lost: set[tuple[str, int]]) -> bool:
        if not seen.session_id:
            return True
        turn = self.table.get_turn(seen.session_id, seen.turn)
        return (turn is not None and turn.finished) or (seen.session_id, seen.turn) in lost

    def check(self, plan: ChatPlan, seen: StreamSeen, lost: set[tuple[str, int]]) -> None:
        tally = self.tally
        expected = plan.expected_text
        label = f"chat {plan.index} ({plan.message[:24]!r}, session {seen.session_id or '-'})"
        if seen.failure:
            tally.problems.append(f"{label}: {seen.failure}")
            tally.lost_tokens += len(split_deltas(expected))
            return
        turn = self.table.get_turn(seen.session_id, seen.turn)
        records = self.table.query_records(seen.session_id, seen.turn)
        table_text = "".join(record.text or "" for record in records if record.type.value == "delta")
        contiguous = [record.seq for record in records] == list(range(len(records)))
        terminals = [record for record in records if record.is_terminal]
        reaped = turn is not None and turn.status == "error" and (turn.error or {}).get("code") in REAPED_CODES
        generator_lost = (seen.session_id, seen.turn) in lost or reaped
        # -- the table
        if generator_lost:
            # Its proxy died: the turn is either still in progress (no terminal record) or was ended by the
            # reaper; either way what it holds is a clean prefix of the reply.
            clean_end = not terminals or (len(terminals) == 1 and records[-1].is_terminal)
            if not expected.startswith(table_text) or not contiguous or not clean_end:
                tally.problems.append(f"{label}: a lost generation's records are not a clean prefix")
        else:
            if turn is None or not turn.finished:
                tally.unfinished_turns += 1
                tally.problems.append(f"{label}: turn {seen.turn} not finished in the table")
            elif not contiguous or len(terminals) != 1 or not records[-1].is_terminal:
                tally.problems.append(f"{label}: records not contiguous with one terminal record")
            lost_tokens, duplicated = compare_text(expected, table_text)
            tally.lost_tokens += lost_tokens
            tally.duplicated_tokens += duplicated
            if lost_tokens or duplicated:
                tally.problems.append(f"{label}: table text differs (lost {lost_tokens}, duplicated {duplicated})")
        # -- the stream
        ids = [seq for seq, _ in seen.tokens]
        repeated = len(ids) - len(set(ids))
        tally.duplicated_tokens += repeated
        tally.resumes += seen.resumes
        tally.relay_retries += seen.relay_retries
        tally.drops += plan.drop_after is not None
        stream_lost, stream_duplicated = compare_text(expected, seen.text)
        if generator_lost and seen.done is None:
            code = (seen.error or {}).get("code")
            if code in LOST_GENERATION_CODES and expected.startswith(seen.text) and not repeated:
                tally.generator_lost += 1
            else:
                tally.problems.append(f"{label}: a lost generation ended with {code!r} and text not a prefix")
            return
        wanted_end_ok = (seen.error is not None) if plan.model_fails else (seen.done is not None)
        if plan.model_fails and seen.error is not None:
            tally.model_errors += 1
            wanted_end_ok = seen.error.get("code") == "model_stream_error"
        if not repeated and stream_lost == 0 and stream_duplicated == 0 and wanted_end_ok:
            tally.exact_streams += 1
            return
        tally.lost_tokens += stream_lost
        tally.duplicated_tokens += stream_duplicated
        ending = seen.done or seen.error
        tally.problems.append(
            f"{label}: stream not exact (lost {stream_lost}, duplicated {stream_duplicated + repeated}, end {ending})"
        )


def _peek_all(sqs: Any, url: str, limit: int = 10_000) -> list[str]:
    """Every message body of a queue, leaving them in it (visibility 0), bounded."""
    bodies: dict[str, str] = {}
    empty = 0
    for _ in range(200):
        messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0).get("Messages", [])
        fresh = [message for message in messages if message["MessageId"] not in bodies]
        bodies.update({message["MessageId"]: message["Body"] for message in messages})
        empty = 0 if fresh else empty + 1
        if empty >= 3 or len(bodies) >= limit:
            break
    return list(bodies.values())


# ------------------------------------------------------------------------------------------ chaos


class Killer:
    """Kills busy execution environments of the proxy and the consumer, a bounded number of times."""

    def __init__(self, stack: LocalStack, settings: ChaosSettings, rng: random.Random) -> None:
        self.stack = stack
        self.budget = {"ProxyFunction": settings.proxy_kills, "ConsumerFunction": settings.consumer_kills}
        self.kills = {"ProxyFunction": 0, "ConsumerFunction": 0}
        self.rng = rng
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="chaos-killer", daemon=True)

    def _run(self) -> None:
        assert self.stack.local_lambda is not None
        while not self.stop.wait(self.rng.uniform(0.2, 1.5)):
            wanted = [name for name, left in self.budget.items() if self.kills[name] < left]
            if not wanted:
                return
            name = self.rng.choice(wanted)
            if self.stack.local_lambda.kill_busy_environment(self.stack.name(name)):
                self.kills[name] += 1


POISON_SHAPES: tuple[Callable[[str, int], bytes], ...] = (
    lambda session, n: f"not json at all #{n}".encode(),
    lambda session, n: json.dumps(
        {"v": 1, "session_id": session, "turn": 1, "seq": "x", "type": "delta", "n": n}
    ).encode(),
    lambda session, n: json.dumps(
        {"v": 2, "session_id": session, "turn": 1, "seq": 0, "type": "start", "n": n}
    ).encode(),
    lambda session, n: b"\xff\xfe\x00 invalid utf-8 #" + str(n).encode(),
    lambda session, n: json.dumps([session, n]).encode(),
)


def _json(document: Any) -> bytes:
    return json.dumps(document).encode()


def put_poison(stack: LocalStack, session_id: str, n: int) -> bytes:
    payload = POISON_SHAPES[n % len(POISON_SHAPES)](session_id, n)
    stack.client("kinesis").put_record(StreamName=stack.name("TokenStream"), Data=payload, PartitionKey=session_id)
    return payload


def run(settings: ChaosSettings, log: Callable[[str], None] = lambda line: None) -> Tally:
    """Run the chaos scenario on a fresh local stack; the tally says what held."""
    plans = plan_chats(settings)
    tally = Tally(chats=len(plans), poison_expected=settings.poison_records)
    rng = random.Random(settings.seed + 1)
    stack_box: list[LocalStack] = []
    with FaultProxy(lambda: stack_box[0].moto_url, settings.rates) as proxy:
        endpoints = ("AWS_ENDPOINT_URL_KINESIS", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_SQS")
        faulty = {name: proxy.url for name in endpoints}
        overrides = {
            "ProxyFunction": dict(faulty),
            "ConsumerFunction": dict(faulty),
            "RelayFunction": {**faulty, "STALE_TURN_S": str(settings.stale_turn_s)},
        }
        proxy.enabled.clear()  # no faults while the stack starts
        stack = LocalStack(
            StackSettings(port=0, model_delay_ms=settings.model_delay_ms, function_overrides=overrides),
            log=lambda component, line: log(f"[{component}] {line}"),
        )
        stack_box.append(stack)
        try:
            stack.start()
            proxy.enabled.set()
            _chaos(stack, settings, plans, tally, rng, log)
            proxy.enabled.clear()  # the checks and the redrive read the emulator without faults
            _settle_and_check(stack, settings, plans, tally, log)
        finally:
            stack.stop()
        tally.faults = proxy.stats.summary()
    return tally


def _chaos(
    stack: LocalStack,
    settings: ChaosSettings,
    plans: Sequence[ChatPlan],
    tally: Tally,
    rng: random.Random,
    log: Callable[[str], None],
) -> list[StreamSeen]:
    """Run every chat, ``concurrency`` at a time, with the killer and the poisoner going."""
    deadline = time.monotonic() + settings.run_timeout_s
    killer = Killer(stack, settings, rng)
    poison_every = max(1, len(plans) // max(settings.poison_records, 1))
    poisoned: list[bytes] = []
    lock = threading.Lock()
    results: list[StreamSeen] = [StreamSeen() for _ in plans]
    limits = httpx.Limits(max_connections=settings.concurrency * 2, max_keepalive_connections=settings.concurrency)
    timeout = httpx.Timeout(30.0, read=settings.stale_turn_s + 60.0)

    def one(plan: ChatPlan) -> None:
        results[plan.index] = seen = run_chat(http, plan, deadline, settings.retry_budget_s)
        with lock:
            due = seen.session_id and plan.index % poison_every == 0 and len(poisoned) < settings.poison_records
            if due:
                poisoned.append(put_poison(stack, seen.session_id, len(poisoned)))
        if (plan.index + 1) % 20 == 0:
            log(f"chaos: {plan.index + 1}/{len(plans)} chats done")

    killer.thread.start()
    try:
        with (
            httpx.Client(base_url=stack.url, timeout=timeout, limits=limits) as http,
            ThreadPoolExecutor(settings.concurrency, thread_name_prefix="chat") as pool,
        ):
            for future in [pool.submit(one, plan) for plan in plans]:
                future.result()
    finally:
        killer.stop.set()
        killer.thread.join(timeout=5)
    while len(poisoned) < settings.poison_records:  # fewer chats than poison records: poison a known session
        session = next((seen.session_id for seen in results if seen.session_id), "chaos-poison-session")
        poisoned.append(put_poison(stack, session, len(poisoned)))
    tally.kills = f"proxy:{killer.kills['ProxyFunction']},consumer:{killer.kills['ConsumerFunction']}"
    stack_any: Any = stack
    stack_any.chaos_results, stack_any.chaos_poison = results, poisoned
    return results


def _settle_and_check(
    stack: LocalStack, settings: ChaosSettings, plans: Sequence[ChatPlan], tally: Tally, log: Callable[[str], None]
) -> None:
    stack_any: Any = stack
    results: list[StreamSeen] = stack_any.chaos_results
    poisoned: list[bytes] = stack_any.chaos_poison
    checker = Checker(stack, tally)
    sqs = stack.client("sqs")
    dlq_url = sqs.get_queue_url(QueueName=stack.name("ConsumerDLQ"))["QueueUrl"]
    # The consumer catches up: every turn finished (or its generation lost), every poison record in the DLQ.
    deadline = time.monotonic() + settings.settle_timeout_s
    while time.monotonic() < deadline:
        lost = checker.lost_generations()
        kinds = [_kind(body) for body in _peek_all(sqs, dlq_url)]
        poison_seen = sum(1 for kind, _ in kinds if kind == "poison-record")
        if poison_seen >= len(poisoned) and all(checker.turn_settled(seen, lost) for seen in results):
            break
        time.sleep(0.5)
    # Redrive whatever the fault budget pushed to the DLQ as on-failure pointers; poison stays (still invalid).
    table = ChatTable(stack.client("dynamodb"), stack.name("ChatTable"), sleep=time.sleep)
    dlq = DeadLetterQueue(sqs, dlq_url)
    report = Redrive(
        dlq=dlq,
        kinesis=stack.client("kinesis"),
        materializer=Materializer(table=table, poison_sink=dlq, reconcile_finished_turns=True),
        stream_name=stack.name("TokenStream"),
        visibility_timeout_s=0,
        receive_wait_s=0,
    ).run()
    tally.onfailure_redriven = sum(1 for result in report.results if result.kind == "on-failure")
    for result in report.results:
        if result.lost:
            tally.problems.append(f"redrive lost ranges: {result.lost}")
    # The DLQ now holds exactly the poison records.
    remaining = [_kind(body) for body in _peek_all(sqs, dlq_url)]
    payloads = {payload for kind, payload in remaining if kind == "poison-record"}
    tally.poison_in_dlq = len(payloads & set(poisoned))
    tally.unexpected_dlq = sum(1 for kind, payload in remaining if kind != "poison-record" or payload not in poisoned)
    lost = checker.lost_generations()
    for plan, seen in zip(plans, results, strict=True):
        checker.check(plan, seen, lost)
    log(report.render().rstrip())


def _kind(body: str) -> tuple[str, bytes]:
    """(kind, payload) of a DLQ message: ``poison-record`` with its payload, or ``on-failure``/``unknown``."""
    with contextlib.suppress(ValueError, TypeError):
        document = json.loads(body)
        if document.get("kind") == "poison-record":
            return "poison-record", base64.b64decode(document.get("payload") or "")
        if "KinesisBatchInfo" in document:
            return "on-failure", b""
    return "unknown", body.encode()


def summary(tally: Tally) -> str:
    return (
        f"chaos: chats={tally.chats} lost_tokens={tally.lost_tokens} duplicated_tokens={tally.duplicated_tokens} "
        f"unfinished_turns={tally.unfinished_turns} exact_streams={tally.exact_streams}/{tally.possible_exact} "
        f"generator_lost={tally.generator_lost} model_errors={tally.model_errors} drops={tally.drops} "
        f"resumes={tally.resumes} relay_retries={tally.relay_retries} "
        f"poison={tally.poison_in_dlq}/{tally.poison_expected} "
        f"unexpected_dlq={tally.unexpected_dlq} redriven_onfailure={tally.onfailure_redriven} "
        f"kills={tally.kills} faults={tally.faults}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.run", description=__doc__.split("\n")[0] if __doc__ else "")
    parser.add_argument("--chats", type=int, default=ChaosSettings.chats)
    parser.add_argument("--concurrency", type=int, default=ChaosSettings.concurrency)
    parser.add_argument("--seed", type=int, default=ChaosSettings.seed)
    parser.add_argument("--poison", type=int, default=ChaosSettings.poison_records, help="poison records to put")
    parser.add_argument("--proxy-kills", type=int, default=ChaosSettings.proxy_kills)
    parser.add_argument("--consumer-kills", type=int, default=ChaosSettings.consumer_kills)
    parser.add_argument("--stale-turn-s", type=int, default=ChaosSettings.stale_turn_s)
    parser.add_argument("--retry-budget-s", type=float, default=ChaosSettings.retry_budget_s)
    parser.add_argument(
        "--no-faults", action="store_true", help="no injected AWS faults (kills and drops still happen)"
    )
    parser.add_argument("--verbose", action="store_true", help="progress, the redrive report and every problem")
    args = parser.parse_args(argv)
    settings = ChaosSettings(
        chats=args.chats,
        concurrency=args.concurrency,
        seed=args.seed,
        rates=FaultRates(seed=args.seed) if args.no_faults else FaultRates.chaos(args.seed),
        poison_records=args.poison,
        proxy_kills=args.proxy_kills,
        consumer_kills=args.consumer_kills,
        stale_turn_s=args.stale_turn_s,
        retry_budget_s=args.retry_budget_s,
    )
    log = (lambda line: print(line, file=sys.stderr, flush=True)) if args.verbose else (lambda line: None)
    tally = run(settings, log)
    for problem in tally.problems[:50]:
        print(f"problem: {problem}", file=sys.stderr)
    print(summary(tally), flush=True)
    return 0 if tally.ok else 1


if __name__ == "__main__":
    sys.exit(main())
