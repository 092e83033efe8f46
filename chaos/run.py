"""`make chaos`: many concurrent chats on the local stack while faults are injected outside the product code.

The run wires the parts: the plan (:mod:`chaos.plan`: which chats, seeded), the faults (:mod:`chaos.faults`
between the functions and moto, :mod:`chaos.inject` on the stack), the clients (:mod:`chaos.client`), the
read-back (:mod:`chaos.readback`) and the checks (:mod:`chaos.checks`). It prints one line, ``chaos: chats=N
lost_tokens=0 duplicated_tokens=0 unfinished_turns=0 exact_streams=N/N …``, and exits 1 when anything is lost,
duplicated, unfinished or inexact. docs/RELIABILITY.md says what is injected and checked.
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx

from chaos.checks import ChaosResult, ChatCounts, DlqCounts, StoredTurn, check_chat, check_dlq, poison_payload_of
from chaos.client import StreamSeen, run_chat
from chaos.faults import FaultProxy, FaultRates
from chaos.inject import CONSUMER, PROXY, EnvironmentKiller, put_poison
from chaos.plan import ChaosSettings, ChatPlan, plan_chats
from chaos.readback import Readback
from chatstream.dlq import DeadLetterQueue
from chatstream.materialize import Materializer
from chatstream.redrive import Redrive, RedriveReport
from chatstream_local.stack import LocalStack, StackSettings

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

FAULTY_ENDPOINTS = ("AWS_ENDPOINT_URL_KINESIS", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_SQS")
SETTLE_POLL_S = 0.5


@dataclass(frozen=True)
class ChatsRun:
    """What the chats left for the checks: each chat's stream (in plan order), the poison put, the kills."""

    streams: tuple[StreamSeen, ...]
    poisoned: tuple[bytes, ...]
    proxy_kills: int
    consumer_kills: int


def run(settings: ChaosSettings, log: Callable[[str], None] = lambda line: None) -> ChaosResult:
    """Run the chaos scenario on a fresh local stack; the result says what held."""
    plans = plan_chats(settings)
    rng = random.Random(settings.seed + 1)
    stack_box: list[LocalStack] = []
    with FaultProxy(lambda: stack_box[0].moto_url, settings.rates) as proxy:
        faulty = dict.fromkeys(FAULTY_ENDPOINTS, proxy.url)
        overrides = {
            PROXY: dict(faulty),
            CONSUMER: dict(faulty),
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
            chats = _run_chats(stack, settings, plans, rng, log)
            proxy.enabled.clear()  # the checks and the redrive read the emulator without faults
            counts, dlq = _settle_and_check(stack, settings, plans, chats, log)
        finally:
            stack.stop()
    return ChaosResult.of(
        counts, dlq, proxy_kills=chats.proxy_kills, consumer_kills=chats.consumer_kills, faults=proxy.stats.counts
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
    return ChatsRun(tuple(streams), tuple(poisoned), killer.kills[PROXY], killer.kills[CONSUMER])


def _settle(readback: Readback, settings: ChaosSettings, chats: ChatsRun) -> None:
    """Wait (bounded) for the consumer to catch up: every turn finished or its generation lost, every poison
    record in the DLQ."""
    deadline = time.monotonic() + settings.settle_timeout_s
    while time.monotonic() < deadline:
        failures = readback.proxy_failures()
        poison_seen = sum(1 for body in readback.dlq_bodies() if poison_payload_of(body) is not None)
        if poison_seen >= len(chats.poisoned) and all(readback.turn_settled(s, failures) for s in chats.streams):
            return
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
) -> tuple[list[ChatCounts], DlqCounts]:
    readback = Readback(stack)
    _settle(readback, settings, chats)
    report = _redrive(stack, readback)
    dlq = check_dlq(readback.dlq_bodies(), chats.poisoned, report)
    failures = readback.proxy_failures()
    counts = [
        check_chat(
            plan,
            seen,
            readback.stored_turn(seen) if not seen.failure else StoredTurn(),
            (seen.session_id, seen.turn) in failures,
        )
        for plan, seen in zip(plans, chats.streams, strict=True)
    ]
    log(report.render().rstrip())
    return counts, dlq


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
    result = run(settings, log)
    for problem in result.problems[:50]:
        print(f"problem: {problem}", file=sys.stderr)
    print(result.line(), flush=True)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
