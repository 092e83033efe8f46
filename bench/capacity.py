"""Capacity and the first token's latency on AWS, on paper: docs/CAPACITY.md, computed from bench/results.json.

Usage::

    python -m bench.capacity            # write docs/CAPACITY.md
    python -m bench.capacity --check    # exit 1 if docs/CAPACITY.md is not what results.json gives

What a chat needs is measured by ``make bench`` on the local stack (records, table writes and reads per 1,000 tokens,
the relay's reads per follower, CPU and invocation time per chat, the calls before the first token); what AWS allows
is its documented default quotas (:data:`LIMITS`, each with its page); the latency of each call on AWS is a cited
typical figure (:data:`STEPS`, each saying whether AWS publishes it, a named public benchmark measured it, or it is
an estimate). The settings come from template.yaml's defaults (memory, PollMinMs, ConsumerParallelizationFactor) and
the relay's polling constants, so the page follows the code.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.firsttoken import FirstTokenPath
from bench.records import RunRecord
from chatstream.relay.follow import FIRST_TOKEN_FLAT_S, FIRST_TOKEN_MAX_FACTOR
from chatstream_local.template import Template

if TYPE_CHECKING:
    from collections.abc import Sequence

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS = REPO_ROOT / "bench" / "results.json"
PAGE = REPO_ROOT / "docs" / "CAPACITY.md"
SCALES = (1_000, 10_000, 100_000)
VARIANT = "chatstream"  # the template's defaults, read through enhanced fan-out
POLLING_VARIANT = "chatstream-polling"  # EnhancedFanOut=false
DIRECT = "direct"
BASIS_DELAY_MS = 20  # the workload's model: a delta every 20 ms, 50 tokens a second
VCPU_MB = 1769  # Lambda: "At 1,769 MB, a function has the equivalent of one vCPU"

# ---------------------------------------------------------------------------------------------- AWS's sources
LAMBDA_QUOTAS = "https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html"
LAMBDA_SCALING = "https://docs.aws.amazon.com/lambda/latest/dg/scaling-behavior.html"
LAMBDA_MEMORY = "https://docs.aws.amazon.com/lambda/latest/dg/configuration-memory.html"
LAMBDA_KINESIS = "https://docs.aws.amazon.com/lambda/latest/dg/with-kinesis.html"
KINESIS_QUOTAS = "https://docs.aws.amazon.com/streams/latest/dev/service-sizes-and-limits.html"
KINESIS_MODES = "https://docs.aws.amazon.com/streams/latest/dev/how-do-i-size-a-stream.html"
KINESIS_EFO = "https://docs.aws.amazon.com/streams/latest/dev/enhanced-consumers.html"
DYNAMODB_QUOTAS = "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html"
DYNAMODB_ON_DEMAND = "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/on-demand-capacity-mode.html"
DYNAMODB_PARTITIONS = "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/warm-throughput-scenarios.html"
DYNAMODB_TRANSACTIONS = "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html"
MESSAGING_BENCHMARK = "https://bitesizedserverless.com/bite/serverless-messaging-latency-compared/"


@dataclass(frozen=True)
class Limit:
    """A default quota or a fixed limit of AWS, as its page states it."""

    name: str
    value: float
    unit: str
    source: str


LAMBDA_CONCURRENCY = Limit("Lambda concurrent executions, per account and region", 1000, "executions", LAMBDA_QUOTAS)
LAMBDA_SCALING_RATE = Limit("Lambda scaling, per function", 1000, "environments every 10 s", LAMBDA_SCALING)
PARALLELIZATION_MAX = Limit("Kinesis event source mapping, concurrent batches per shard", 10, "batches", LAMBDA_KINESIS)
SHARD_WRITE_RECORDS = Limit("Kinesis shard writes", 1000, "records/s (or 1 MB/s)", KINESIS_QUOTAS)
ON_DEMAND_START = Limit(
    "Kinesis on-demand stream, a new stream's write capacity", 4, "MB/s (4 shards, 4,000 records/s)", KINESIS_QUOTAS
)
ON_DEMAND_MAX_ELSEWHERE = Limit(
    "Kinesis on-demand stream, most write capacity (outside us-east-1, us-west-2, eu-west-1)",
    200,
    "MB/s",
    KINESIS_QUOTAS,
)
SHARD_QUOTA_ELSEWHERE = Limit("Kinesis shards per account (provisioned), most regions", 1000, "shards", KINESIS_QUOTAS)
TABLE_READS = Limit("DynamoDB on-demand table, read request units", 40000, "RRU/s", DYNAMODB_QUOTAS)
TABLE_WRITES = Limit("DynamoDB on-demand table, write request units", 40000, "WRU/s", DYNAMODB_QUOTAS)
NEW_TABLE_READS = Limit("DynamoDB new on-demand table, reads at once", 12000, "RRU/s", DYNAMODB_ON_DEMAND)
NEW_TABLE_WRITES = Limit(
    "DynamoDB new on-demand table, at once (or 12,000 RRU/s, or a mix)", 4000, "WRU/s", DYNAMODB_ON_DEMAND
)
PARTITION_READS = Limit("DynamoDB partition (one session)", 3000, "RRU/s (or 1,000 WRU/s)", DYNAMODB_PARTITIONS)


@dataclass(frozen=True)
class Step:
    """One call (or wait) on the first token's path, priced at a typical latency on AWS."""

    what: str
    ms: float
    basis: str  # "AWS" (AWS documents it), "benchmark" (a named public measurement), "estimate", "model"
    why: str


@dataclass(frozen=True)
class Settings:
    """What template.yaml deploys by default, and the relay's polling before a first token."""

    memory_mb: int
    poll_min_ms: float
    parallelization_factor: int

    @classmethod
    def from_template(cls, template: Template) -> Settings:
        return cls(
            memory_mb=int(template.raw["Globals"]["Function"]["MemorySize"]),
            poll_min_ms=float(template.parameter("PollMinMs")),
            parallelization_factor=int(template.parameter("ConsumerParallelizationFactor")),
        )

    @property
    def vcpu(self) -> float:
        return self.memory_mb / VCPU_MB


@dataclass(frozen=True)
class PerChat:
    """What one chat needs, from the benchmark's runs (model delay ``BASIS_DELAY_MS``)."""

    tokens_per_s: float
    reply_tokens: int
    records_per_s: float
    kb_per_record: float  # as billed: each record rounded up to 1 KB
    write_units_per_s: float
    read_units_per_s: float
    follower_queries_per_s: float
    cpu_ms: dict[str, float]  # role -> CPU ms for one reply
    consumer_cpu_ms_per_record: float  # the least measured (the largest batches)
    invocation_s: float  # every function's invocation time for one reply (GB-seconds / memory)
    cost_usd_per_million_tokens: dict[str, float]  # read mode -> usage-proportional cost

    @property
    def reply_s(self) -> float:
        return self.reply_tokens / self.tokens_per_s


def _run(runs: Sequence[RunRecord], variant: str, delay_ms: int, concurrency: int) -> RunRecord:
    for run in runs:
        cell = run.cell
        if (cell.variant, cell.model_delay_ms, cell.concurrency, cell.arrival_gap_ms) == (
            variant,
            delay_ms,
            concurrency,
            None,
        ):
            return run
    raise ValueError(f"results.json has no {variant} run at {delay_ms} ms and {concurrency} chats")


def per_chat(results: dict[str, Any], settings: Settings) -> PerChat:
    runs = [RunRecord.from_json(raw) for raw in results["runs"]]
    basis = _run(runs, VARIANT, BASIS_DELAY_MS, 1)
    units = basis.aws.units
    tokens_per_s = 1000 / BASIS_DELAY_MS
    reply_tokens = int(results["environment"]["workload"]["deltas_per_reply"])
    per_token = 1 / units.tokens
    records = basis.aws.kinesis_records_per_1k_tokens / 1000 * units.tokens
    consumer_runs = [r for r in runs if r.cell.variant == VARIANT and r.cell.model_delay_ms == BASIS_DELAY_MS]
    consumer_per_1k = min(
        r.cpu.cpu_ms_per_1k_tokens_by_function["consumer"] or math.inf
        for r in consumer_runs
        if r.cell.arrival_gap_ms is None
    )
    gb = settings.memory_mb / 1024
    return PerChat(
        tokens_per_s=tokens_per_s,
        reply_tokens=reply_tokens,
        records_per_s=basis.aws.kinesis_records_per_1k_tokens / 1000 * tokens_per_s,
        kb_per_record=units.kinesis_ingest_kb / records,
        write_units_per_s=units.dynamodb_write_units * per_token * tokens_per_s,
        read_units_per_s=units.dynamodb_read_units * per_token * tokens_per_s,
        follower_queries_per_s=basis.aws.relay_queries_per_turn / (reply_tokens / tokens_per_s),
        cpu_ms={
            role: (value or 0.0) * reply_tokens / 1000
            for role, value in basis.cpu.cpu_ms_per_1k_tokens_by_function.items()
        },
        consumer_cpu_ms_per_record=consumer_per_1k / basis.aws.kinesis_records_per_1k_tokens,
        invocation_s=units.lambda_gb_seconds / gb / basis.clients.chats,
        cost_usd_per_million_tokens={
            "enhanced fan-out": float(results["cost_per_million_output_tokens"][VARIANT]),
            "polling": float(results["cost_per_million_output_tokens"][POLLING_VARIANT]),
        },
    )


# ------------------------------------------------------------------------------------------------ capacity


@dataclass(frozen=True)
class Scale:
    """What ``chats`` concurrent chats need, with the template's defaults."""

    chats: int
    relay_concurrency: int
    proxy_concurrency: int
    records_per_s: float
    shards: int  # on demand: what the stream must have grown to (at least its first 4 MB/s)
    consumer_concurrency: int  # shards x ConsumerParallelizationFactor
    consumer_share: float  # of the consumer's capacity (CPU) at that concurrency
    write_units_per_s: float
    read_units_per_s: float
    cost_per_hour: dict[str, float]

    @property
    def lambda_concurrency(self) -> int:
        return self.relay_concurrency + self.proxy_concurrency + self.consumer_concurrency


def consumer_records_per_s(chat: PerChat, settings: Settings) -> float:
    """Records one consumer invocation takes a second, if its CPU were all it waited on (its share of a vCPU)."""
    return settings.vcpu * 1000 / chat.consumer_cpu_ms_per_record


def scale(chats: int, chat: PerChat, settings: Settings, prices: dict[str, Any]) -> Scale:
    records = chats * chat.records_per_s
    # An on-demand stream starts with 4 MB/s (4 shards) and grows to what its records need: 1,000 a second a shard
    # (records under 1 KB reach that before a shard's 1 MB/s).
    shards = max(math.ceil(ON_DEMAND_START.value), math.ceil(records / SHARD_WRITE_RECORDS.value))
    consumers = shards * settings.parallelization_factor
    capacity = consumers * consumer_records_per_s(chat, settings)
    tokens_per_hour = chats * chat.tokens_per_s * 3600
    kinesis_hourly = float(prices["kinesis_on_demand_per_stream_hour"])
    costs = {
        mode: tokens_per_hour / 1_000_000 * per_million + kinesis_hourly
        for mode, per_million in chat.cost_usd_per_million_tokens.items()
    }
    return Scale(
        chats=chats,
        relay_concurrency=chats,
        proxy_concurrency=chats,
        records_per_s=records,
        shards=shards,
        consumer_concurrency=consumers,
        consumer_share=records / capacity,
        write_units_per_s=chats * chat.write_units_per_s,
        read_units_per_s=chats * chat.read_units_per_s,
        cost_per_hour=costs,
    )


@dataclass(frozen=True)
class Binding:
    """A limit, and the number of concurrent chats at which the template's defaults reach it."""

    short: str  # its name in the table of scales
    limit: Limit
    chats: float
    needs: str  # what one chat takes of it
    lever: str


def bindings(chat: PerChat, settings: Settings) -> list[Binding]:
    """Every limit the pipeline reaches, first first."""
    consumer_chats_per_shard = consumer_records_per_s(chat, settings) * settings.parallelization_factor
    found = [
        Binding(
            "Lambda concurrency",
            LAMBDA_CONCURRENCY,
            (LAMBDA_CONCURRENCY.value - math.ceil(ON_DEMAND_START.value) * settings.parallelization_factor) / 2,
            "2 executions for the whole reply (the relay's stream, the proxy's generation), and the consumers",
            "ask for more (Service Quotas, Lambda, Concurrent executions); cap the relay with RelayReservedConcurrency "
            "and reserve the proxy's with ProxyReservedConcurrency, so one cannot starve the other and the consumer",
        ),
        Binding(
            "the consumer",
            Limit(
                "the consumer, one batch at a time per shard (ConsumerParallelizationFactor "
                f"{settings.parallelization_factor})",
                round(consumer_chats_per_shard),
                "records/s per shard",
                LAMBDA_KINESIS,
            ),
            math.ceil(ON_DEMAND_START.value) * consumer_chats_per_shard / chat.records_per_s,
            f"{chat.records_per_s:.1f} records/s; {chat.consumer_cpu_ms_per_record:.2f} CPU ms each",
            f"ConsumerParallelizationFactor (up to {PARALLELIZATION_MAX.value:.0f} batches a shard at once): "
            f"{math.ceil(SHARD_WRITE_RECORDS.value / consumer_records_per_s(chat, settings))} keeps up with a full "
            "shard; or more memory for the consumer",
        ),
        Binding(
            "a new table's first peak",
            NEW_TABLE_WRITES,
            1 / (chat.write_units_per_s / NEW_TABLE_WRITES.value + chat.read_units_per_s / NEW_TABLE_READS.value),
            f"{chat.write_units_per_s:.1f} WRU/s and {chat.read_units_per_s:.1f} RRU/s (a new table serves a linear "
            "mix of 4,000 WRU/s and 12,000 RRU/s at once)",
            "a new table doubles its previous peak within 30 minutes: ramp traffic up, or set its warm throughput",
        ),
        Binding(
            "a new stream's first peak",
            ON_DEMAND_START,
            ON_DEMAND_START.value * 1000 / chat.records_per_s,
            f"{chat.records_per_s:.1f} records/s (records under 1 KB: the records/s limit comes first)",
            "an on-demand stream doubles its previous peak within 15 minutes: ramp up, or deploy "
            "StreamMode=PROVISIONED with ShardCount for the peak",
        ),
        Binding(
            "the table's reads",
            TABLE_READS,
            TABLE_READS.value / chat.read_units_per_s,
            f"{chat.read_units_per_s:.1f} RRU/s, most of it the relay's polls",
            "ask for more (Service Quotas, DynamoDB, table-level read throughput); fewer polls (PollMinMs)",
        ),
        Binding(
            "the table's writes",
            TABLE_WRITES,
            TABLE_WRITES.value / chat.write_units_per_s,
            f"{chat.write_units_per_s:.1f} WRU/s",
            "ask for more (Service Quotas, DynamoDB, table-level write throughput); FlushIntervalMs",
        ),
        Binding(
            "the on-demand stream's ceiling (most regions)",
            ON_DEMAND_MAX_ELSEWHERE,
            ON_DEMAND_MAX_ELSEWHERE.value * 1000 / chat.records_per_s,
            f"{chat.records_per_s:.1f} records/s",
            "a support request raises it to 10 GB/s; or StreamMode=PROVISIONED (1,000 or 6,000 shards by default "
            "there, more on request)",
        ),
        Binding(
            "the shard quota (most regions)",
            SHARD_QUOTA_ELSEWHERE,
            SHARD_QUOTA_ELSEWHERE.value * SHARD_WRITE_RECORDS.value / chat.records_per_s,
            f"{chat.records_per_s:.1f} records/s, 1,000 a shard",
            "ask for more shards (Service Quotas, Kinesis); us-east-1, us-west-2 and eu-west-1 start at 20,000",
        ),
    ]
    return sorted(found, key=lambda binding: binding.chats)


# ------------------------------------------------------------------------------------------------- latency


@dataclass(frozen=True)
class Latency:
    steps: list[Step]
    local_overhead_ms: float  # measured: chatstream's p50 time to first token minus direct's, one chat
    poll_cap_ms: float  # the relay's wait between polls before a first token, once it has grown
    flat_ms: float  # how long after the stream starts the relay polls at PollMinMs, before a first token

    @property
    def total_ms(self) -> float:
        return sum(step.ms for step in self.steps)


DYNAMODB_ITEM_MS = 5.0  # within DynamoDB's "single-digit millisecond" latency
INVOKE_MS = 15.0
ASYNC_QUEUE_MS = round(((118 - 77.3) + (142 - 99.1)) / 2, 1)  # async minus sync invocation, Express and Standard
PUT_RECORDS_MS = 20.0
EFO_PUSH_MS = 49.4  # put to a Lambda consumer through enhanced fan-out, p50
POLLING_PUSH_MS = 627.0  # put to a Lambda consumer through the standard (polling) mapping, p50


def latency(results: dict[str, Any], settings: Settings) -> Latency:
    runs = [RunRecord.from_json(raw) for raw in results["runs"]]
    (path,) = [FirstTokenPath.from_json(raw) for raw in results["first_token_path"] if raw["variant"] == VARIANT]
    chatstream = _run(runs, VARIANT, BASIS_DELAY_MS, 1).clients.ttft_ms.p50
    direct = _run(runs, DIRECT, BASIS_DELAY_MS, 1).clients.ttft_ms.p50
    if chatstream is None or direct is None:
        raise ValueError("results.json has no time to first token for the one-chat runs")
    calls = path.calls_before_first_token
    expected = {
        "relay.TransactWriteItems",
        "relay.Invoke",
        "proxy.UpdateItem",
        "proxy.ConverseStream",
        "proxy.PutRecords",
        "proxy.BatchWriteItem",
    }
    if set(calls) != expected or path.sequential_calls_before_first_token != 7:
        raise ValueError(f"the measured first-token path changed: {sorted(calls)}; update bench/capacity.py's model")
    cap, flat = settings.poll_min_ms * FIRST_TOKEN_MAX_FACTOR, FIRST_TOKEN_FLAT_S * 1000
    extra = extra_queries(settings, cap)
    cpu = path.cpu_ms_to_first_token
    relay_cpu, proxy_cpu = cpu.get("relay") or 0.0, cpu.get("proxy") or 0.0
    steps = [
        Step(
            "relay: TransactWriteItems (the turn, the session, the caller's budget)",
            2 * DYNAMODB_ITEM_MS,
            "estimate",
            "two item writes' time: DynamoDB writes each item of a transaction twice, to prepare and to commit it "
            f"([transactions]({DYNAMODB_TRANSACTIONS})), each within its single-digit milliseconds; the caller's "
            "budget and idempotency key are items of the same transaction, written beside the turn's",
        ),
        Step(
            "relay: Invoke, InvocationType Event (until Lambda has queued it)",
            INVOKE_MS,
            "estimate",
            "AWS publishes no figure for Lambda's API; a request in the region, as a synchronous invoke's overhead. "
            "With budgets on, the read of the caller's x-ratelimit-* counters (a BatchGetItem of two items, "
            "single-digit milliseconds) runs beside it and ends first",
        ),
        Step(
            "Lambda's asynchronous queue, until the proxy's handler runs (warm)",
            ASYNC_QUEUE_MS,
            "benchmark",
            f"[Bite-Sized Serverless]({MESSAGING_BENCHMARK}), eu-west-1, 2022: Step Functions invoking Lambda "
            "asynchronously vs synchronously, p50 118 vs 77.3 ms (Express), 142 vs 99.1 ms (Standard)",
        ),
        Step(
            "proxy: UpdateItem (the claim, returning the turn)",
            DYNAMODB_ITEM_MS,
            "AWS",
            f'DynamoDB: "single-digit millisecond latency" ([on-demand mode]({DYNAMODB_ON_DEMAND}))',
        ),
        Step(
            "proxy: ConverseStream to the first delta",
            0.0,
            "model",
            "the model's own time to first token: the direct path waits for it as long",
        ),
        Step(
            "proxy: PutRecords (start and first delta)",
            PUT_RECORDS_MS,
            "estimate",
            "AWS publishes no put latency; below the 49.4 ms p50 the same benchmark measured from a put to a Lambda "
            "consumer through enhanced fan-out",
        ),
        Step(
            "proxy: BatchWriteItem (the first delta, written through)",
            DYNAMODB_ITEM_MS,
            "AWS",
            "DynamoDB, single-digit milliseconds (one item)",
        ),
        Step(
            "relay: the wait for its next poll",
            (settings.poll_min_ms + DYNAMODB_ITEM_MS) / 2,
            "model",
            f"before a first token the relay polls every PollMinMs ({settings.poll_min_ms:.0f} ms) for "
            f"{flat / 1000:.0f} s after the stream starts, then at most {cap:.0f} ms apart (a model's first token on "
            "AWS comes within the first); a token lands on average half a poll interval (wait and Query) before it. "
            "The cost: about "
            f"{extra:.0f} more Queries a turn than a wait grown to {cap:.0f} ms, for a model that answers in 0.5 s "
            f"(one read unit each: ${extra * 0.125:.2f} a million turns)",
        ),
        Step(
            "relay: Query (finds it)",
            DYNAMODB_ITEM_MS,
            "AWS",
            "DynamoDB, single-digit milliseconds (strongly consistent, one page)",
        ),
        Step(
            "CPU of the relay and the proxy before the first token",
            round(relay_cpu + proxy_cpu, 1),
            "measured",
            f"relay {relay_cpu} + proxy {proxy_cpu} ms here (results.json, first_token_path), counted as measured; "
            f"at {settings.memory_mb} MB a function has {settings.vcpu:.2f} of a vCPU "
            f"([memory and CPU]({LAMBDA_MEMORY})), and if that share slowed these bursts in proportion they would "
            f"take {(relay_cpu + proxy_cpu) / settings.vcpu:.0f} ms",
        ),
    ]
    return Latency(steps, round(chatstream - direct, 1), cap, flat)


def extra_queries(settings: Settings, cap_ms: float) -> float:
    """The Queries a turn's first 0.5 s takes at PollMinMs beyond what it took with the wait grown to ``cap_ms``."""
    return 500 / (settings.poll_min_ms + DYNAMODB_ITEM_MS) - 500 / (cap_ms + DYNAMODB_ITEM_MS)


@dataclass(frozen=True)
class Shortening:
    change: str
    saves_ms: float
    cost: str


def shortenings(latency_: Latency, settings: Settings) -> list[Shortening]:
    return [
        Shortening(
            "the relay invokes the proxy beside its turn write instead of after it (the proxy's claim waits for "
            "the turn item if it comes first)",
            2 * DYNAMODB_ITEM_MS,
            "a claim that finds no turn item yet must retry; a failed turn write leaves an invocation to end it",
        ),
        Shortening(
            "the relay invokes the proxy synchronously (RequestResponse) from a thread of its stream, instead of "
            "through Lambda's asynchronous queue",
            ASYNC_QUEUE_MS,
            "no asynchronous retries, event age or on-failure destination: the relay would end a failed generation "
            "itself, and a relay that dies takes its generation with it",
        ),
    ]


# -------------------------------------------------------------------------------------------------- the page


def _idle(results: dict[str, Any], mode: str, read: str = "enhanced-fan-out") -> float:
    """results.json's monthly charges that accrue whatever the traffic, for a stream mode and a read mode."""
    return float(results["fixed_monthly_usd"][mode][read]["total"])


def _n(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


def render(results: dict[str, Any], settings: Settings) -> str:
    chat = per_chat(results, settings)
    prices = results["environment"]["prices"]
    found = bindings(chat, settings)
    lat = latency(results, settings)
    started = results["environment"]["started_at"]
    lines = [
        "# Capacity and latency on AWS, on paper",
        "",
        "<!-- Written by `make capacity` (bench/capacity.py) from bench/results.json; "
        "`make test` checks it is current. -->",
        "",
        f"What 1,000, 10,000 and 100,000 concurrent chats need on AWS, what limits them, what they cost, and how long "
        "the first token takes there: computed from what `make bench` measured on the local stack "
        f"(bench/results.json, the run of {started}) with the template's defaults, AWS's documented default "
        "quotas, and cited typical "
        f"latencies. A chat here is the benchmark's reply: {chat.reply_tokens} tokens at "
        f"{chat.tokens_per_s:.0f} tokens a second ({chat.reply_s:.0f} s), one reader.",
        "",
        "Not counted: the model. Bedrock's own quotas (tokens and requests per minute for the model, Service Quotas, "
        '"Amazon Bedrock") and its price come before everything below at any of these scales: check them first.',
        "",
        "## What one chat needs",
        "",
        "| | per chat | from |",
        "|---|---|---|",
        f"| Lambda concurrency | 2 for the whole reply (relay and proxy), {chat.invocation_s:.1f} s of invocation "
        f"time in all | `units.lambda_gb_seconds` / {settings.memory_mb} MB |",
        f"| CPU | relay {chat.cpu_ms.get('relay', 0):.0f} ms, proxy {chat.cpu_ms.get('proxy', 0):.0f} ms, consumer "
        f"{chat.cpu_ms.get('consumer', 0):.0f} ms a reply (this machine's CPU) | `cpu_ms_per_1k_tokens_by_function` |",
        f"| Kinesis | {chat.records_per_s:.1f} records/s ({chat.records_per_s * 1000 / chat.tokens_per_s:.0f} per "
        f"1,000 tokens), each under {chat.kb_per_record:.0f} KB (billed as 1 KB) | `kinesis_records_per_1k_tokens`, "
        "`units.kinesis_ingest_kb` |",
        f"| DynamoDB writes | {chat.write_units_per_s:.1f} WRU/s | `units.dynamodb_write_units` |",
        f"| DynamoDB reads | {chat.read_units_per_s:.1f} RRU/s, of which the reader's polls "
        f"{chat.follower_queries_per_s:.1f} Queries/s | `units.dynamodb_read_units`, `relay_queries_per_turn` |",
        f"| the consumer | {chat.consumer_cpu_ms_per_record:.2f} CPU ms a record (its largest batches); one "
        f"invocation at {settings.memory_mb} MB ({settings.vcpu:.2f} vCPU) takes about "
        f"{_n(consumer_records_per_s(chat, settings))} records/s | the same, at 50 chats |",
        f"| cost besides the model | ${chat.cost_usd_per_million_tokens['enhanced fan-out']:.2f} per million output "
        f"tokens (EnhancedFanOut=true), ${chat.cost_usd_per_million_tokens['polling']:.2f} (false) | "
        "`cost_per_million_output_tokens` |",
        "",
        f"Idle, a stack costs the on-demand stream's hour, ${float(prices['kinesis_on_demand_per_stream_hour']):.2f} "
        f"(${_idle(results, 'ON_DEMAND'):.2f} a month; `StreamMode=PROVISIONED` with one shard: "
        f"${_idle(results, 'PROVISIONED (1 shard)'):.2f} with enhanced fan-out, "
        f"${_idle(results, 'PROVISIONED (1 shard)', 'polling'):.2f} without), and CloudWatch's alarms and "
        "dashboard; Lambda, DynamoDB on demand and SQS cost nothing while no one chats.",
        "",
        "One session's items share a partition key (`S#<session_id>`): a partition serves 3,000 RRU/s, so about "
        f"{_n(PARTITION_READS.value / chat.follower_queries_per_s)} readers can follow one session at once "
        f"({chat.follower_queries_per_s:.1f} strongly consistent Queries a second each) before it throttles; its "
        f"writes ({chat.write_units_per_s:.1f} WRU/s) are far from the partition's 1,000.",
        "",
        "## What limits it, in the order reached",
        "",
        "| limit (default) | reached at | per chat | lever |",
        "|---|---|---|---|",
    ]
    for binding in found:
        limit = binding.limit
        lines.append(
            f"| [{limit.name}]({limit.source}): {_n(limit.value)} {limit.unit} | {_n(binding.chats)} chats | "
            f"{binding.needs} | {binding.lever} |"
        )
    lines += [
        "",
        f"Lambda's per-function scaling ([{_n(LAMBDA_SCALING_RATE.value)} {LAMBDA_SCALING_RATE.unit}]"
        f"({LAMBDA_SCALING_RATE.source})) sets how fast a burst is met: 10,000 new streams at once need 100 s of "
        "ramp for the relay and as long for the proxy; requests beyond it get 429 (relay) or wait in the queue "
        "(proxy).",
        "",
        "## At 1,000, 10,000 and 100,000 concurrent chats",
        "",
        "| | " + " | ".join(_n(n) for n in SCALES) + " |",
        "|---|" + "---|" * len(SCALES),
    ]
    rows = [scale(n, chat, settings, prices) for n in SCALES]
    lines += [
        f"| Lambda concurrency (relay + proxy + consumer; the default quota: {_n(LAMBDA_CONCURRENCY.value)}) | "
        + " | ".join(
            f"{_n(r.lambda_concurrency)} ({_n(r.relay_concurrency)} + {_n(r.proxy_concurrency)} + "
            f"{_n(r.consumer_concurrency)})"
            for r in rows
        )
        + " |",
        "| Kinesis records/s (shards an on-demand stream grows to) | "
        + " | ".join(f"{_n(r.records_per_s)} ({_n(r.shards)})" for r in rows)
        + " |",
        f"| consumer load, ParallelizationFactor {settings.parallelization_factor} | "
        + " | ".join(f"{r.consumer_share:.0%}" for r in rows)
        + " |",
        "| DynamoDB WRU/s, RRU/s | "
        + " | ".join(f"{_n(r.write_units_per_s)}, {_n(r.read_units_per_s)}" for r in rows)
        + " |",
        "| limits reached, in the order reached | "
        + " | ".join("; ".join(b.short for b in found if b.chats <= r.chats) or "none" for r in rows)
        + " |",
        "| USD per hour, enhanced fan-out (polling) | "
        + " | ".join(f"{_n(r.cost_per_hour['enhanced fan-out'])} ({_n(r.cost_per_hour['polling'])})" for r in rows)
        + " |",
        "",
        "Cost per hour is the measured usage (Lambda requests and duration, table writes and reads, Kinesis data in "
        "and out) at the list prices of bench/results.json (us-east-1), plus the on-demand stream's hour; without "
        "the model, CloudWatch and data transfer. A consumer load over 100% means the consumer falls behind (its "
        "lag grows: `ConsumerIteratorAgeGrowingAlarm`) until ConsumerParallelizationFactor is raised.",
        "",
        "## The levers",
        "",
        "- **Reserved concurrency for the proxy** (`ProxyReservedConcurrency`) and a cap on the relay "
        "(`RelayReservedConcurrency`): open streams hold relay executions for minutes; without a split, a flood of "
        "readers can leave no concurrency for generations or for the consumer.",
        "- **Quotas to raise**: Lambda concurrent executions first; then DynamoDB's table-level read throughput "
        "(the relay's polls); for the largest scales, Kinesis's shards or on-demand throughput.",
        "- **`ConsumerParallelizationFactor`**: up to 10 batches of a shard at once, in order per session (the "
        "partition key).",
        f"- **EFO consumers** (`EnhancedFanOut=true`, the default): each has its own 2 MB/s a shard "
        f"([enhanced fan-out]({KINESIS_EFO})), so other consumers of the token log never slow the materializer.",
        "- **Provisioned mode** (`StreamMode=PROVISIONED`, `ShardCount`): a stream sized for the peak from the "
        "start, with no doubling ramp, and cheaper per hour at a steady load.",
        "",
        "## The first token on AWS, predicted",
        "",
        "`make bench` measures that the first token passes seven AWS calls in a row (bench/results.json, "
        "`first_token_path`): the relay's TransactWriteItems and Invoke, the proxy's claim, ConverseStream, "
        "PutRecords and write-through, and the relay's Query. On this machine each costs about a millisecond, and "
        f"the first token comes {lat.local_overhead_ms} ms after direct streaming's (p50, one chat, "
        f"{BASIS_DELAY_MS} ms model delay). On AWS each call costs more:",
        "",
        "| step | ms (p50) | basis | source |",
        "|---|---|---|---|",
    ]
    for step in lat.steps:
        lines.append(f"| {step.what} | {step.ms:g} | {step.basis} | {step.why} |")
    fallback_efo = lat.total_ms - DYNAMODB_ITEM_MS + EFO_PUSH_MS + DYNAMODB_ITEM_MS
    fallback_polling = lat.total_ms - DYNAMODB_ITEM_MS + POLLING_PUSH_MS + DYNAMODB_ITEM_MS
    lines += [
        f"| **predicted first-token overhead over direct** | **{lat.total_ms:.0f}** | | |",
        "",
        "Both read modes give the first token the same path: the proxy writes it through to the table, so it waits "
        "for neither the consumer nor the stream's push. The read mode shows after it:",
        "",
        "| EnhancedFanOut | first token over direct | first token if the write-through fails | a later record, put "
        "to table |",
        "|---|---|---|---|",
        f"| true (default) | {lat.total_ms:.0f} ms | {fallback_efo:.0f} ms | {EFO_PUSH_MS + DYNAMODB_ITEM_MS:.0f} ms |",
        f"| false | {lat.total_ms:.0f} ms | {fallback_polling:.0f} ms | {POLLING_PUSH_MS + DYNAMODB_ITEM_MS:.0f} ms |",
        "",
        f"A later record reaches the table through the consumer: {EFO_PUSH_MS} ms p50 from a put to a Lambda consumer "
        f"through enhanced fan-out, {POLLING_PUSH_MS:.0f} ms through the standard mapping, which polls each shard "
        f'once a second ([Bite-Sized Serverless]({MESSAGING_BENCHMARK}); AWS says "typically an average of 70 ms" for '
        f"enhanced fan-out's push, [enhanced fan-out]({KINESIS_EFO})), then its BatchWriteItem. The relay paces "
        "each record's text over the turn's cadence, so the readers see rhythm, not this wait. A cold proxy adds its "
        "start (bench/results.json, `cold_start`).",
        "",
    ]
    shorter = shortenings(lat, settings)
    lines += [
        "### What would shorten it",
        "",
        f"The prediction is {'over' if lat.total_ms > 150 else 'under'} 150 ms. The steps that could still go, by the "
        "same model:",
        "",
        "| change | saves (ms) | at the cost of |",
        "|---|---|---|",
        *(f"| {item.change} | {item.saves_ms:g} | {item.cost} |" for item in shorter),
        "",
        f"Both: {lat.total_ms - sum(item.saves_ms for item in shorter):.0f} ms.",
        "",
    ]
    return "\n".join(lines).rstrip("\n") + "\n"


def build(results_path: Path = RESULTS) -> str:
    results = json.loads(results_path.read_text(encoding="utf-8"))
    return render(results, Settings.from_template(Template.load()))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.capacity", description="Write docs/CAPACITY.md from bench/results.json."
    )
    parser.add_argument("--results", type=Path, default=RESULTS, help="the benchmark's results.json")
    parser.add_argument("--out", type=Path, default=PAGE, help="the page to write")
    parser.add_argument("--check", action="store_true", help="compare with the page instead of writing it")
    args = parser.parse_args(argv)
    page = build(args.results)
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        if current != page:
            sys.stderr.write(f"capacity: {args.out} is not what {args.results} gives: run make capacity\n")
            return 1
        return 0
    args.out.write_text(page, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
