"""`make chaos`: many concurrent chats on the local stack while faults are injected outside the product code.

The run wires the parts: the plan (:mod:`chaos.plan`: which chats, seeded), the faults (:mod:`chaos.faults`
between the functions and moto, :mod:`chaos.inject` on the stack), the clients (:mod:`chaos.client`), the
read-back (:mod:`chaos.readback`) and the checks (:mod:`chaos.checks`). It prints every problem it counts, the
local stack's reports of function errors (a 502, an asynchronous invocation that failed, an init that timed out),
and one line, ``chaos: chats=N lost_tokens=0 duplicated_tokens=0 unfinished_turns=0 … exact_streams=N/N …
cut_posts=N duplicated_generations=0 …``; it exits 1 when anything is lost, duplicated, unfinished or inexact, a
generation was lost that the run did not kill, a POST sent again started a second turn, or the proxy did not drop
exactly the events the local Lambda delivered twice. docs/RELIABILITY.md says what
is injected and checked.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx

from chaos.checks import (
    ChaosResult,
    ChatCounts,
    DlqCounts,
    DuplicateCounts,
    check_chat,
    check_dlq,
    is_dropped_duplicate,
    is_reinvoked,
    poison_payload_of,
)
from chaos.client import StreamSeen, run_chat
from chaos.faults import FaultProxy, FaultRates
from chaos.inject import CONSUMER, PROXY, CpuStress, EnvironmentKiller, killed_generation, put_poison
from chaos.plan import ChaosSettings, ChatPlan, plan_chats
from chaos.readback import QueueReadError, Readback
from chatstream.dlq import DeadLetterQueue
from chatstream.materialize import Materializer
from chatstream_local.stack import LocalStack, StackSettings
from chatstream_ops.redrive import Redrive, RedriveReport

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from chatstream_local.lambda_.invocation import KilledInvocation

RELAY = "RelayFunction"
FAULTY_ENDPOINTS = ("AWS_ENDPOINT_URL_KINESIS", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_SQS")
SETTLE_POLL_S = 0.5
STACK_REPORTS = ("stack", "url")  # the local stack's own components: what they log is always shown


@dataclass(frozen=True)
class ChatsRun:
    """What the chats left for the checks: each chat's stream (in plan order), the poison put, the kills (and the
    proxy invocations killed)."""

    streams: tuple[StreamSeen, ...]
    poisoned: tuple[bytes, ...]
    proxy_kills: int
    consumer_kills: int
    killed_proxies: tuple[KilledInvocation, ...]


class DroppedDuplicates:
    """Counts the deliveries the proxy dropped as duplicates, and the second events the relay sent for turns a retried
    POST joined, from their log lines saying so: warnings, which the stack passes on at any verbosity."""

    def __init__(self) -> None:
        self.count = 0
        self.reinvoked = 0
        self._lock = threading.Lock()

    def see(self, component: str, line: str) -> None:
        function = component.split("#", 1)[0]
        if function == PROXY and is_dropped_duplicate(line):
            with self._lock:
                self.count += 1
        elif function == RELAY and is_reinvoked(line):
            with self._lock:
                self.reinvoked += 1


def stack_logger(
    log: Callable[[str], None], dropped: DroppedDuplicates, *, verbose: bool
) -> Callable[[str, str], None]:
    """The local stack's log for a run: its own reports (a function error answered 502, an asynchronous invocation
    that failed, an init that timed out) always; the functions' warnings and errors only when ``verbose``. Every line
    goes to ``dropped`` first."""

    def stack_log(component: str, line: str) -> None:
        dropped.see(component, line)
        if verbose or component in STACK_REPORTS or line.startswith("INIT_REPORT"):
            log(f"[{component}] {line}")

    return stack_log


def run(
    settings: ChaosSettings, log: Callable[[str], None] = lambda line: None, *, verbose: bool = False
) -> ChaosResult:
    """Run the chaos scenario on a fresh local stack; the result says what held.

    ``log`` gets the stack's reports (see :func:`stack_logger`), and with ``verbose`` progress and every line the
    functions log.
    """
    with CpuStress() if settings.cpu_stress else contextlib.nullcontext():
        return _run(settings, log, verbose=verbose)


def _run(settings: ChaosSettings, log: Callable[[str], None], *, verbose: bool) -> ChaosResult:
    plans = plan_chats(settings)
    rng = random.Random(settings.seed + 1)
    progress = log if verbose else (lambda line: None)
    dropped = DroppedDuplicates()
    stack_box: list[LocalStack] = []
    with FaultProxy(lambda: stack_box[0].moto_url, settings.rates) as proxy:
        faulty = dict.fromkeys(FAULTY_ENDPOINTS, proxy.url)
        overrides = {
            PROXY: dict(faulty),
            CONSUMER: dict(faulty),
            RELAY: {**faulty, "STALE_TURN_S": str(settings.stale_turn_s)},
        }
        proxy.enabled.clear()  # no faults while the stack starts
        stack = LocalStack(
            StackSettings(
                port=0,
                model_delay_ms=settings.model_delay_ms,
                function_overrides=overrides,
                duplicate_events=settings.duplicate_events,
                duplicate_seed=settings.seed + 2,
            ),
            log=stack_logger(log, dropped, verbose=verbose),
        )
        stack_box.append(stack)
        try:
            stack.start()
            proxy.enabled.set()
            chats = _run_chats(stack, settings, plans, rng, progress)
            proxy.enabled.clear()  # the checks and the redrive read the emulator without faults
            counts, dlq, run_problems, again = _settle_and_check(stack, settings, plans, chats, progress)
            assert stack.invoke_endpoint is not None
            delivered = stack.invoke_endpoint.duplicates.get(stack.name(PROXY), 0)
            failed = stack.invoke_endpoint.failed_duplicates.get(stack.name(PROXY), 0)
        finally:
            stack.stop()
    return ChaosResult.of(
        counts,
        dlq,
        proxy_kills=chats.proxy_kills,
        consumer_kills=chats.consumer_kills,
        faults=proxy.stats.counts,
        duplicates=DuplicateCounts(
            delivered=delivered, dropped=dropped.count, failed=failed, reinvoked=dropped.reinvoked
        ),
        run_problems=run_problems,
        duplicated_generations=again,
    )


def _run_chats(
    stack: LocalStack,
    settings: ChaosSettings,
    plans: Sequence[ChatPlan],
    rng: random.Random,
    log: Callable[[str], None],
) -> ChatsRun:
    """Run every chat, ``concurrency`` at a time, with the killer going and poison put along the way."""
    deadline = time.monotonic() + settings.run_timeout_s
    poison_every = max(1, len(plans) // max(settings.poison_records, 1))
    poisoned: list[bytes] = []
    lock = threading.Lock()
    streams: list[StreamSeen] = [StreamSeen() for _ in plans]
    limits = httpx.Limits(max_connections=settings.concurrency * 2, max_keepalive_connections=settings.concurrency)
    timeout = httpx.Timeout(30.0, read=settings.stale_turn_s + 60.0)

    def one(plan: ChatPlan) -> None:
        streams[plan.index] = seen = run_chat(http, plan, deadline, settings.retry_budget_s)
        with lock:
            due = seen.session_id and plan.index % poison_every == 0 and len(poisoned) < settings.poison_records
            if due:
                poisoned.append(put_poison(stack, seen.session_id, len(poisoned)))
        if (plan.index + 1) % 20 == 0:
            log(f"chaos: {plan.index + 1}/{len(plans)} chats done")

    budget = {PROXY: settings.proxy_kills, CONSUMER: settings.consumer_kills}
    with (
        EnvironmentKiller(stack, budget, rng) as killer,
        httpx.Client(base_url=stack.url, timeout=timeout, limits=limits) as http,
        ThreadPoolExecutor(settings.concurrency, thread_name_prefix="chat") as pool,
    ):
        for future in [pool.submit(one, plan) for plan in plans]:
            future.result()
    while len(poisoned) < settings.poison_records:  # fewer chats than poison records: poison a known session
        session = next((seen.session_id for seen in streams if seen.session_id), "chaos-poison-session")
        poisoned.append(put_poison(stack, session, len(poisoned)))
    return ChatsRun(
        tuple(streams), tuple(poisoned), killer.kills[PROXY], killer.kills[CONSUMER], tuple(killer.killed_proxies)
    )


def _unsettled(stack: LocalStack, readback: Readback, chats: ChatsRun) -> list[str]:
    """What the stack has still to do: turns not finished (the consumer or the reaper behind), poison not in the
    DLQ yet, asynchronous invocations still queued or running (a second delivery among them). Empty when it has
    settled."""
    waiting = [f"chat {index}" for index, seen in enumerate(chats.streams) if not readback.turn_finished(seen)]
    poison_seen = sum(1 for body in readback.dlq_bodies() if poison_payload_of(body) is not None)
    found = []
    if waiting:
        found.append(f"{len(waiting)} turns not finished ({', '.join(waiting[:10])})")
    if poison_seen < len(chats.poisoned):
        found.append(f"{poison_seen} of {len(chats.poisoned)} poison records in the DLQ")
    assert stack.invoke_endpoint is not None
    if not stack.invoke_endpoint.wait_idle(timeout=0):
        found.append("asynchronous invocations still running")
    return found


def _settle(stack: LocalStack, readback: Readback, settings: ChaosSettings, chats: ChatsRun) -> list[str]:
    """Wait (bounded) for the consumer and the reaper to catch up: every turn finished, every poison record in the
    DLQ, every asynchronous invocation run. What was still missing when the wait ran out (empty: it settled)."""
    deadline = time.monotonic() + settings.settle_timeout_s
    while True:
        try:
            missing = _unsettled(stack, readback, chats)
        except QueueReadError as err:
            missing = [str(err)]
        if not missing:
            return []
        if time.monotonic() >= deadline:
            return [f"the stack did not settle within {settings.settle_timeout_s:g} s: {'; '.join(missing)}"]
        time.sleep(SETTLE_POLL_S)


def _redrive(stack: LocalStack, readback: Readback) -> RedriveReport:
    """Redrive what the fault budget pushed to the DLQ as on-failure pointers; poison stays (still invalid)."""
    dlq = DeadLetterQueue(readback.sqs, readback.dlq_url)
    return Redrive(
        dlq=dlq,
        kinesis=stack.client("kinesis"),
        materializer=Materializer(table=readback.table, poison_sink=dlq, reconcile_finished_turns=True),
        stream_name=stack.name("TokenStream"),
        visibility_timeout_s=0,
        receive_wait_s=0,
    ).run()


def _settle_and_check(
    stack: LocalStack, settings: ChaosSettings, plans: Sequence[ChatPlan], chats: ChatsRun, log: Callable[[str], None]
) -> tuple[list[ChatCounts], DlqCounts, list[str], int]:
    """Settle, redrive, then check every chat; also the sessions in the table that no chat streamed (the last)."""
    readback = Readback(stack)
    run_problems = _settle(stack, readback, settings, chats)
    report = _redrive(stack, readback)
    log(report.render().rstrip())
    try:
        dlq = check_dlq(readback.dlq_bodies(), chats.poisoned, report)
    except QueueReadError as err:
        run_problems.append(str(err))
        dlq = DlqCounts(poison_expected=len(chats.poisoned))
    counts = []
    for plan, seen in zip(plans, chats.streams, strict=True):
        stored = readback.stored_turn(seen)
        generator = stored.turn.generator if stored.turn is not None else None
        killed = killed_generation((seen.session_id, seen.turn), generator, chats.killed_proxies)
        counts.append(check_chat(plan, seen, stored, killed=killed))
    streamed = {seen.session_id for seen in chats.streams if seen.session_id}
    return counts, dlq, run_problems, len(readback.sessions() - streamed)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.run", description=__doc__.split("\n")[0] if __doc__ else "")
    parser.add_argument("--chats", type=int, default=ChaosSettings.chats)
    parser.add_argument("--concurrency", type=int, default=ChaosSettings.concurrency)
    parser.add_argument("--seed", type=int, default=ChaosSettings.seed)
    parser.add_argument("--poison", type=int, default=ChaosSettings.poison_records, help="poison records to put")
    parser.add_argument("--proxy-kills", type=int, default=ChaosSettings.proxy_kills)
    parser.add_argument("--consumer-kills", type=int, default=ChaosSettings.consumer_kills)
    parser.add_argument(
        "--duplicate-events",
        type=float,
        default=ChaosSettings.duplicate_events,
        metavar="P",
        help="deliver each proxy event a second time with probability P, as Lambda may (0: never)",
    )
    parser.add_argument("--stale-turn-s", type=int, default=ChaosSettings.stale_turn_s)
    parser.add_argument("--retry-budget-s", type=float, default=ChaosSettings.retry_budget_s)
    parser.add_argument(
        "--no-faults", action="store_true", help="no injected AWS faults (kills and drops still happen)"
    )
    parser.add_argument("--cpu-stress", action="store_true", help="keep one core busy for the whole run")
    parser.add_argument("--verbose", action="store_true", help="progress, the functions' log lines, the redrive report")
    args = parser.parse_args(argv)
    if not 0.0 <= args.duplicate_events <= 1.0:
        parser.error(f"--duplicate-events is a probability, 0 to 1: got {args.duplicate_events}")
    settings = ChaosSettings(
        chats=args.chats,
        concurrency=args.concurrency,
        seed=args.seed,
        rates=FaultRates(seed=args.seed) if args.no_faults else FaultRates.chaos(args.seed),
        poison_records=args.poison,
        proxy_kills=args.proxy_kills,
        consumer_kills=args.consumer_kills,
        duplicate_events=args.duplicate_events,
        stale_turn_s=args.stale_turn_s,
        retry_budget_s=args.retry_budget_s,
        cpu_stress=args.cpu_stress,
    )
    printing = threading.Lock()  # the stack logs from many threads: one whole line at a time

    def log(line: str) -> None:
        with printing:
            print(line, file=sys.stderr, flush=True)

    result = run(settings, log, verbose=args.verbose)
    for problem in result.problems:
        print(f"problem: {problem}", file=sys.stderr, flush=True)
    print(result.line(), flush=True)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
