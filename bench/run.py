"""``make bench``: direct, naive and chatstream side by side on the local stack, in one run.

For each variant (``direct``: ConverseStream straight out as SSE, see ``bench/direct``; ``naive``: the pipeline with
coalescing off, one Kinesis record and one table item per model delta; ``chatstream``: the template's defaults; and
``chatstream-polling`` or ``chatstream-efo``: the defaults with the consumer reading the stream the other way,
``EnhancedFanOut`` false or true, so that both ways a user can deploy are measured), at
model delay 0 and 20 ms, at 1, 10 and 50 concurrent chats (and, on chatstream's stack, ``chatstream-unpaced``:
the same streams with ``?pace=0``, each record one event, at 20 ms and 1 and 10 chats), it measures what clients
see (exactness, time to first token, gaps between token events, throughput) and what the pipeline spends
(Kinesis records and calls, DynamoDB units, Lambda requests and durations, CPU by function), then writes
``bench/results.json``, ``bench/results.md`` and ``bench/results.png`` (and from them docs/CAPACITY.md and the
figures the documents quote, ``bench/quote.py``). Beside chatstream's stack it also starts
one in the JWT auth mode and compares the first token at one chat, and measures a token's verification CPU
(``bench/jwt_mode.py``). See ``bench/README.md``.

Usage: ``python -m bench.run [--quick] [--out-dir bench]``.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import json
import os
import platform
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import budgets_mode, capacity, coldstart, firsttoken, procstat, quote
from bench.budgets_mode import BudgetsOverhead
from bench.cost import ON_DEMAND, PROVISIONED, UnitCounts, cost_per_million_tokens, fixed_monthly, price_table
from bench.jwt_mode import JwtOverhead, verification_cpu
from bench.load import ChatSample, LoadRunner
from bench.pairs import alternate
from bench.records import AwsUsage, Cell, ClientMeasures, CpuUse, MotoCounts, RunRecord, op_sum, tokens_of
from bench.report import write_markdown, write_plot
from bench.results import (
    BenchResults,
    Costs,
    Environment,
    HourlyCosts,
    Machine,
    Prices,
    ServiceCosts,
    Settings,
    SpreadArrivals,
    WorkloadInfo,
)
from chatstream.config import JwtSettings
from chatstream.relay.bearer import BearerVerifier
from chatstream_local.bedrock.endpoint import LocalModelServer
from chatstream_local.bedrock.model import plan_reply
from chatstream_local.event_sources.kinesis import ReadMode
from chatstream_local.lambda_ import deployed_site
from chatstream_local.lambda_.function_spec import FunctionSpec
from chatstream_local.lambda_.function_url import FunctionUrlServer
from chatstream_local.lambda_.service import LocalLambda
from chatstream_local.moto.callcount import CALLER_ENV, CONTROL_PREFIX
from chatstream_local.stack import LOCAL_CREDENTIALS, LocalStack, StackSettings
from chatstream_local.template import Template

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

    from chatstream_local.lambda_.invocation import StreamHandle
    from chatstream_local.oidc.server import IssuerServer

ROOT = Path(__file__).resolve().parent.parent
NAIVE_PROXY = {"FLUSH_INTERVAL_MS": "0", "FLUSH_MAX_CHARS": "1"}


@dataclass(frozen=True)
class PipelineVariant:
    """The product with some settings changed: function environment variables, and template parameters."""

    functions: dict[str, dict[str, str]] = field(default_factory=dict)
    parameters: dict[str, str] = field(default_factory=dict)


# naive turns coalescing off; chatstream-polling and chatstream-efo read the stream one way or the other (the one the
# template does not default to runs by default); the others are candidate settings measured beside the defaults
# (``--variants direct,naive,chatstream,poll-fast``), for tuning; chatstream-budgets is chatstream with the budgets per
# caller on (``--variants direct,chatstream,chatstream-budgets``: what the admission costs the first token).
PIPELINE_VARIANTS: dict[str, PipelineVariant] = {
    "naive": PipelineVariant(functions={"ProxyFunction": NAIVE_PROXY}),
    "chatstream": PipelineVariant(),
    "chatstream-polling": PipelineVariant(parameters={"EnhancedFanOut": "false"}),
    "chatstream-efo": PipelineVariant(parameters={"EnhancedFanOut": "true"}),
    "poll-fast": PipelineVariant(functions={"RelayFunction": {"POLL_MAX_MS": "20"}}),
    "flush-100": PipelineVariant(functions={"ProxyFunction": {"FLUSH_INTERVAL_MS": "100"}}),  # smoother text
    # Budgets per caller on, as a deploy has them, but too high to refuse the bench's turns (bench/budgets_mode.py):
    # also the budgets cell's twin, which make bench runs beside chatstream's stack.
    "chatstream-budgets": PipelineVariant(parameters=budgets_mode.PARAMETERS),
}


# The JWT cell's stack (bench/jwt_mode.py): chatstream's settings in the JWT auth mode, with the local issuer. Not a
# variant of its own: its chats need a token, and it runs beside chatstream's stack only.
JWT_VARIANT = "chatstream-jwt"
JWT_PIPELINE = PipelineVariant(parameters={"FunctionUrlAuthType": "JWT"})


def stack_template(variant: str) -> Template:
    """template.yaml as the variant's local stack resolves it."""
    overrides = {**StackSettings().parameter_overrides, **PIPELINE_VARIANTS[variant].parameters}
    return Template.load(parameter_overrides=overrides)


def read_mode(variant: str) -> ReadMode:
    """How the variant's consumer reads the stream (``EnhancedFanOut`` as its template resolves)."""
    properties = stack_template(variant).properties("ConsumerFunction")["Events"]["TokenStream"]["Properties"]
    return ReadMode.of_stream(str(properties["Stream"]))


def default_variants() -> tuple[str, ...]:
    """direct, naive, chatstream (the template's defaults), and chatstream reading the stream the other way."""
    other = "chatstream-polling" if read_mode("chatstream") is ReadMode.ENHANCED_FAN_OUT else "chatstream-efo"
    return ("direct", "naive", "chatstream", other)


DIRECT_NAME = "bench-direct"


@dataclass(frozen=True)
class Workload:
    deltas: int = 300  # a typical chat reply: a few hundred tokens
    delays_ms: tuple[int, ...] = (0, 20)
    concurrency: tuple[int, ...] = (1, 10, 50)
    repeat_at_1: int = 5
    rounds_up_to_10: int = 3  # rounds of chats at once, up to 10: one round of 10 is 10 samples of a noisy p50
    coldstart_repeat: int = 15  # medians of 7 moved by ±3 ms from run to run, as much as the target's margin
    first_token_chats: int = 12  # chats one after another measured to their first token (bench/firsttoken.py)
    naive_max_concurrency: int = 10  # see bench/README.md: beyond this the local emulator falls behind for good
    # Informative cells beside those sent at once: the same numbers of chats, sent this far apart instead (at
    # 20 ms a token a reply lasts 6 s, so all of them still stream at the same time once the last one is sent).
    spread_gap_ms: int = 100
    spread_concurrency: tuple[int, ...] = (10, 50)
    spread_delay_ms: int = 20
    # chatstream's streams without pacing (?pace=0), beside the paced ones, on the same stack: what pacing changes
    unpaced_delay_ms: int = 20
    unpaced_concurrency: tuple[int, ...] = (1, 10)
    # The JWT cell (bench/jwt_mode.py): chats at one chat on each of chatstream's stack and its JWT twin, alternately,
    # at this model delay; and verifications of one token, timed in this process
    jwt_pairs: int = 40
    jwt_delay_ms: int = 0
    jwt_verifications: int = 2000
    # The budgets cell (bench/budgets_mode.py): chats at one chat on chatstream's stack and its twin with the budgets
    # per caller on, alternately, at the JWT cell's model delay
    budgets_pairs: int = 40

    @property
    def message(self) -> str:
        return f"/long {self.deltas}"

    def rounds(self, concurrency: int, variant: str) -> int:
        """How many rounds of ``concurrency`` chats started together a cell measures (naive's unit counts do not
        vary from round to round, and its time to first token is no target: one round above one chat)."""
        if concurrency == 1:
            return self.repeat_at_1
        return self.rounds_up_to_10 if concurrency <= 10 and variant != "naive" else 1


QUICK = Workload(
    deltas=60,
    delays_ms=(0, 20),
    concurrency=(1, 4),
    repeat_at_1=2,
    rounds_up_to_10=1,
    spread_concurrency=(4,),
    unpaced_concurrency=(1, 4),
    coldstart_repeat=2,
    first_token_chats=2,
    naive_max_concurrency=4,
    jwt_pairs=3,
    jwt_verifications=200,
    budgets_pairs=3,
)


def log(line: str) -> None:
    sys.stderr.write(f"[bench {time.strftime('%H:%M:%S')}] {line}\n")
    sys.stderr.flush()


# --------------------------------------------------------------------------------------- measurement helpers


class Invocations:
    """Times every invocation of a LocalLambda (invoke, async and Function URL streams alike)."""

    def __init__(self, local: LocalLambda) -> None:
        self._lock = threading.Lock()
        self._durations: dict[str, list[float]] = {}
        original: Callable[..., StreamHandle] = local.invoke_stream

        def timed(name: str, payload: bytes, **kwargs: Any) -> StreamHandle:
            started = time.monotonic()
            handle = original(name, payload, **kwargs)
            threading.Thread(target=self._wait, args=(name, handle, started), daemon=True).start()
            return handle

        local.invoke_stream = timed  # type: ignore[method-assign]  # measurement hook, bench only

    def _wait(self, name: str, handle: StreamHandle, started: float) -> None:
        handle.wait()
        with self._lock:
            self._durations.setdefault(name, []).append(time.monotonic() - started)

    def take(self) -> dict[str, list[float]]:
        with self._lock:
            out, self._durations = self._durations, {}
        return out


class CallCounts:
    """The AWS calls moto counted per function (``chatstream_local.moto.callcount``), read over its control paths."""

    def __init__(self, moto_url: str) -> None:
        self.moto_url = moto_url

    def _call(self, path: str, body: bytes | None = None) -> Any:
        request = urllib.request.Request(f"{self.moto_url}{CONTROL_PREFIX}{path}", data=body)
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def reset(self) -> None:
        self._call("reset", b"")

    def counts(self) -> MotoCounts:
        return dict(self._call("counts"))

    def idle_s(self) -> float | None:
        """Seconds since the last call a function made ended (None: none yet)."""
        idle = self._call("idle")["idle_s"]
        return None if idle is None else float(idle)


# --------------------------------------------------------------------------------------------- the targets


@dataclass
class Target:
    """One variant's running system: its URL, and how to read what it spent."""

    variant: str
    url: str
    model: LocalModelServer
    invocations: Invocations
    function_names: dict[str, str]  # role (relay, proxy, consumer) -> function name
    memory_mb: dict[str, int]
    stop: Callable[[], None]
    local: LocalLambda
    calls: CallCounts | None = None
    issuer: IssuerServer | None = None  # the JWT auth mode's local issuer


def start_direct() -> Target:
    model = LocalModelServer(delay_ms=0)
    model.start()
    spec = FunctionSpec(
        name=DIRECT_NAME,
        handler="app.handler",
        code_dirs=[ROOT / "bench/direct", ROOT / "layers/chatstream", ROOT / "layers/streaming-runtime"],
        environment={
            **LOCAL_CREDENTIALS,
            "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": model.url,
            "AWS_REGION": "us-east-1",
            "AWS_DEFAULT_REGION": "us-east-1",
        },
        timeout_s=900,
        memory_mb=512,
        runtime="streaming",
        exec_wrapper=ROOT / "layers/streaming-runtime/bin/chatstream-streaming",
        max_concurrency=100,
        python=deployed_site.interpreter(),  # as the stack runs the pipeline's functions
    )
    local = LocalLambda([spec]).start()
    invocations = Invocations(local)
    front = FunctionUrlServer(local, DIRECT_NAME, port=0, invoke_mode="RESPONSE_STREAM").start()

    def stop() -> None:
        front.stop()
        local.stop()
        model.stop()

    return Target("direct", front.url, model, invocations, {"relay": DIRECT_NAME}, {"relay": 512}, stop, local)


# Enhanced fan-out pushes a record to the consumer "typically an average of 70 ms" after its put (Kinesis developer
# guide); the local stack pushes at once unless told (StackSettings.fan_out_latency_ms). The benchmark sets AWS's
# figure, so that what waits for the consumer (every record after the first token, naive's first token) waits here
# as it would there.
FAN_OUT_LATENCY_MS = 70


def start_pipeline(variant: str, pipeline: PipelineVariant | None = None) -> Target:
    """The local stack of ``variant`` (its settings ``pipeline``, else :data:`PIPELINE_VARIANTS`' entry)."""
    roles = {"relay": "RelayFunction", "proxy": "ProxyFunction", "consumer": "ConsumerFunction"}
    changes = pipeline if pipeline is not None else PIPELINE_VARIANTS[variant]
    # moto counts each function's calls by the application id botocore puts in the User-Agent.
    overrides = {logical_id: {CALLER_ENV: role} for role, logical_id in roles.items()}
    for logical_id, variables in changes.functions.items():
        overrides[logical_id].update(variables)
    settings = StackSettings(
        port=0,
        model_delay_ms=0,
        function_overrides=overrides,
        count_calls=True,
        parameter_overrides={**StackSettings().parameter_overrides, **changes.parameters},
        fan_out_latency_ms=FAN_OUT_LATENCY_MS,
    )
    stack = LocalStack(settings, log=lambda component, line: log(f"{component}: {line}"))
    stack.start()
    assert stack.local_lambda is not None and stack.model is not None
    invocations = Invocations(stack.local_lambda)
    names = {role: stack.name(logical_id) for role, logical_id in roles.items()}
    memory = {role: stack.local_lambda.spec(name).memory_mb for role, name in names.items()}
    calls = CallCounts(stack.moto_url)
    return Target(
        variant, stack.url, stack.model, invocations, names, memory, stack.stop, stack.local_lambda, calls, stack.issuer
    )


# ------------------------------------------------------------------------------------------------ the runs


@dataclass(frozen=True)
class Measured:
    """One (variant, delay, concurrency) cell: the samples and what the system spent producing them."""

    samples: Sequence[ChatSample]
    wall_s: float
    counts: MotoCounts  # empty for direct, which calls no AWS service
    cpu_s: dict[str, float | None]  # None: not measured (see bench.procstat)
    durations: dict[str, list[float]]


WARM_UP_DELAY_MS = 20
WARM_UP_MESSAGE = "/long 25"  # half a second of generation at 20 ms a token


def warm_up(target: Target, load: LoadRunner, top: int) -> None:
    """Start as many execution environments as the largest run needs, a few at a time (cold starts are
    CPU-bound and the local init limit is 10 s), so the measured runs are warm as on a busy service. Each
    warm-up chat lasts half a second, so that ``top`` chats at once hold ``top`` environments of each function
    (instant replies would be served by fewer, and the measured cells would pay the missing cold starts)."""
    target.model.delay_ms = WARM_UP_DELAY_MS
    step = 5  # 10 new environments of two functions at once could pass the local 10 s init limit on two cores
    for concurrency in [*range(step, top, step), top, top]:
        samples = load.run(target.url, WARM_UP_MESSAGE, concurrency)
        failed = collections.Counter(str(s.error)[:160] for s in samples if not s.ok)
        why = f": {dict(failed)}" if failed else ""
        log(f"{target.variant}: warm-up {concurrency} chats, {sum(failed.values())} failed{why}")
    target.model.delay_ms = 0
    alive = {name: stats.environments_alive for name, stats in target.local.stats().items()}
    log(f"{target.variant}: warm environments {alive}")
    target.invocations.take()


def settle(target: Target, quiet_s: float = 1.0, limit_s: float = 90.0) -> None:
    """Wait until no function has called AWS for ``quiet_s`` (the consumer has worked off its backlog), so one
    cell's leftovers do not load the next one."""
    if target.calls is None:
        return
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        idle = target.calls.idle_s()
        if idle is None or idle >= quiet_s:
            return
        time.sleep(0.25)
    log(f"{target.variant}: still busy after {limit_s:g} s; going on")


def measure_cell(
    target: Target,
    load: LoadRunner,
    workload: Workload,
    concurrency: int,
    *,
    gap_s: float = 0.0,
    pace: bool | None = None,
) -> Measured:
    samples: list[ChatSample] = []
    wall_s = 0.0
    settle(target)
    if target.calls is not None:
        target.calls.reset()
    target.invocations.take()
    cpu_before = procstat.snapshot()
    for round_ in range(1 if gap_s else workload.rounds(concurrency, target.variant)):
        if round_ and concurrency > 1:
            settle(target)  # each round starts on a quiet stack, as the first did
        batch = load.run(target.url, workload.message, concurrency, gap_s, pace)
        samples.extend(batch)
        wall_s += max(s.finished for s in batch) - min(s.started for s in batch)
    settle(target)  # the consumer's turn completions land after the stop records the relay sent
    cpu_s = procstat.delta(procstat.snapshot(), cpu_before)
    durations = target.invocations.take()
    counts = target.calls.counts() if target.calls is not None else {}
    return Measured(samples, wall_s, counts, cpu_s, durations)


def units_of(target: Target, m: Measured, tokens: int) -> UnitCounts:
    requests = 0.0
    gb_seconds = 0.0
    for role, name in target.function_names.items():
        durations = m.durations.get(name, [])
        requests += len(durations)
        gb_seconds += sum(durations) * target.memory_mb[role] / 1024
    return UnitCounts(
        tokens=tokens,
        kinesis_ingest_kb=op_sum(m.counts, "ingest_kb", ops=("PutRecords",)),
        kinesis_put_payload_units=op_sum(m.counts, "put_payload_units", ops=("PutRecords",)),
        dynamodb_write_units=op_sum(m.counts, "write_units"),
        dynamodb_read_units=op_sum(m.counts, "read_units"),
        lambda_requests=requests,
        lambda_gb_seconds=gb_seconds,
    )


def run_record(target: Target, cell: Cell, m: Measured, expected: str) -> RunRecord:
    """The cell's record: what its clients saw, the AWS calls and units it took, its CPU."""
    tokens = tokens_of(m.samples)
    return RunRecord(
        cell=cell,
        clients=ClientMeasures.of(m.samples, m.wall_s, expected),
        aws=AwsUsage.of(m.counts, tokens, len(m.samples), units_of(target, m, tokens)),
        cpu=CpuUse.of(m.cpu_s, target.function_names["relay"], tokens, functions=target.function_names),
    )


@contextlib.contextmanager
def running(variant: str, pipeline: PipelineVariant | None = None) -> Iterator[Target]:
    target = start_direct() if variant == "direct" else start_pipeline(variant, pipeline)
    try:
        yield target
    finally:
        target.stop()


def environment(workload: Workload, variants: Sequence[str]) -> Environment:
    import boto3
    import moto

    template = ROOT / "template.yaml"
    return Environment(
        machine=Machine(
            platform=platform.platform(),
            python=platform.python_version(),
            cpus=os.cpu_count(),
            processor=platform.processor() or platform.machine(),
        ),
        versions={"boto3": boto3.__version__, "moto": moto.__version__},
        started_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        workload=WorkloadInfo(
            message=workload.message,
            deltas_per_reply=workload.deltas,
            model_delays_ms=workload.delays_ms,
            concurrency=workload.concurrency,
            chats_at_concurrency_1=workload.repeat_at_1,
            chats_at_higher_concurrency="one per client, all started together",
            rounds_up_to_10_at_once=workload.rounds_up_to_10,
            spread_arrivals=SpreadArrivals(
                gap_ms=workload.spread_gap_ms,
                concurrency=workload.spread_concurrency,
                model_delay_ms=workload.spread_delay_ms,
            ),
            naive_max_concurrency=workload.naive_max_concurrency,
        ),
        settings=Settings(
            variants={
                **{v: dataclasses.asdict(PIPELINE_VARIANTS[v]) for v in variants if v in PIPELINE_VARIANTS},
                "chatstream": "template.yaml defaults",
                **({UNPACED: "chatstream's stack, its streams with ?pace=0"} if "chatstream" in variants else {}),
                **({JWT_VARIANT: dataclasses.asdict(JWT_PIPELINE)} if "chatstream" in variants else {}),
            },
            read_modes={
                **{v: read_mode(v).value for v in variants if v in PIPELINE_VARIANTS},
                **({UNPACED: read_mode("chatstream").value} if "chatstream" in variants else {}),
            },
            fan_out_latency_ms=FAN_OUT_LATENCY_MS,
            template_sha1=_sha1(template),
        ),
        prices=Prices.from_json(price_table()),
        note="Local stack on one machine (moto, local model, local Lambda); other work may share the CPUs, "
        "so compare variants within this run, as ratios, not against other runs.",
    )


def _sha1(path: Path) -> str:
    import hashlib

    return hashlib.sha1(path.read_bytes()).hexdigest()  # noqa: S324 - a fingerprint, not security


COST_CONCURRENCY = 1


def costs(runs: Sequence[RunRecord], workload: Workload, read_modes: Mapping[str, str]) -> Costs:
    """Cost per million output tokens from the units of the realistic-delay runs at concurrency 1, where no
    variant is slowed by the local emulator's contention (Lambda durations there are what a warm function on
    AWS would bill: the reply's length), each priced for the way its consumer reads the stream (``read_modes``);
    and the monthly charges that accrue whatever the traffic, for each stream mode and read mode."""
    delay = max(workload.delays_ms)
    totals: dict[str, UnitCounts] = {}
    for run in runs:
        variant = run.cell.variant
        if variant == "direct" or run.cell.model_delay_ms != delay or run.cell.concurrency != COST_CONCURRENCY:
            continue
        units = run.aws.units
        totals[variant] = totals[variant] + units if variant in totals else units
    fan_out = {v: read_modes.get(v) == ReadMode.ENHANCED_FAN_OUT.value for v in totals}
    return Costs(
        breakdowns={
            v: ServiceCosts.of(cost_per_million_tokens(u, enhanced_fan_out=fan_out[v])) for v, u in totals.items()
        },
        basis=(
            f"measured units of the {delay} ms model delay runs at concurrency {COST_CONCURRENCY} "
            f"({workload.repeat_at_1} chats each), at the list prices in environment.prices, each variant's Kinesis "
            "data out at the price of its read mode (environment.settings.read_modes)"
        ),
        fixed_monthly=fixed_costs(),
    )


def fixed_costs() -> dict[str, dict[str, HourlyCosts]]:
    """The monthly hourly charges of the token stream and its consumer, per stream mode (provisioned with the
    template's ``ShardCount``) and read mode."""
    shards = int(Template.load().parameter("ShardCount"))
    modes = {ON_DEMAND: ON_DEMAND, f"{PROVISIONED} ({shards} shard{'s' if shards > 1 else ''})": PROVISIONED}
    return {
        label: {
            mode.value: HourlyCosts.of(
                fixed_monthly(stream_mode, enhanced_fan_out=mode is ReadMode.ENHANCED_FAN_OUT, shards=shards)
            )
            for mode in ReadMode
        }
        for label, stream_mode in modes.items()
    }


def rerender(path: Path) -> None:
    """Recompute the costs and rewrite results.md and the plot from an existing results.json."""
    results = BenchResults.loads(path.read_text())
    results = dataclasses.replace(
        results, costs=costs(results.runs, Workload(), results.environment.settings.read_modes)
    )
    write(results, path)


def write(results: BenchResults, path: Path) -> None:
    """results.json at ``path``, and beside it results.md and results.png. When ``path`` is the repository's own
    results.json, also what is written from it: docs/CAPACITY.md, and the figures every document quotes
    (bench/quote.py), so no document keeps a figure of an earlier run."""
    path.write_text(results.dumps())
    write_markdown(results, path.with_suffix(".md"))
    write_plot(results, path.with_suffix(".png"))
    if path.resolve() == quote.RESULTS.resolve():
        capacity.PAGE.write_text(capacity.build(path), encoding="utf-8")
        for changed in quote.write(quote.figures(path), quote.documents()):
            log(f"quoted figures rewritten: {changed.relative_to(ROOT)}")


def measure_first_token(target: Target, workload: Workload) -> firsttoken.FirstTokenPath:
    """The first token's path of a pipeline variant (bench/firsttoken.py): CPU per function, AWS calls before it."""
    calls = target.calls
    assert calls is not None

    def set_delay(ms: int) -> None:
        target.model.delay_ms = ms

    path = firsttoken.measure(
        target.variant,
        target.url,
        calls.moto_url,
        target.function_names,
        settle=lambda: settle(target, quiet_s=0.5),
        reset_calls=calls.reset,
        set_model_delay=set_delay,
        chats=workload.first_token_chats,
    )
    log(
        f"{target.variant}: first token's path: CPU ms {path.cpu_ms_to_first_token}, "
        f"{path.sequential_calls_before_first_token:g} sequential AWS calls, TTFT p50 {path.ttft_ms_p50} ms"
    )
    return path


def measure_variants(
    variants: Sequence[str],
    workload: Workload,
    first_token: list[firsttoken.FirstTokenPath] | None = None,
    jwt: list[JwtOverhead] | None = None,
    budgets: list[BudgetsOverhead] | None = None,
) -> tuple[list[RunRecord], list[RunRecord]]:
    """Every variant's cells, one variant's system at a time: the chats sent at once, and the spread-arrival ones (and,
    into ``first_token``, each pipeline variant's first-token path; into ``jwt`` and ``budgets``, the JWT cell and the
    budgets cell, beside chatstream's stack)."""
    expected = plan_reply(workload.message).text
    runs: list[RunRecord] = []
    spread: list[RunRecord] = []
    load = LoadRunner()
    try:
        for variant in variants:
            log(f"{variant}: starting")
            with running(variant) as target:
                top = max(workload.concurrency)
                warm_up(target, load, min(top, workload.naive_max_concurrency) if variant == "naive" else top)
                runs += _measure_cells(target, load, workload, expected)
                if variant == "chatstream":
                    runs += _measure_unpaced(target, load, workload, expected)
                if variant != "naive":
                    spread += _measure_spread(target, load, workload, expected)
                if first_token is not None and variant != "direct":
                    first_token.append(measure_first_token(target, workload))
                if jwt is not None and variant == "chatstream":
                    jwt.append(measure_jwt(target, load, workload, expected))
                if budgets is not None and variant == "chatstream":
                    budgets.append(measure_budgets(target, load, workload, expected))
    finally:
        load.close()
    return runs, spread


def measure_jwt(none: Target, load: LoadRunner, workload: Workload, expected: str) -> JwtOverhead:
    """The JWT cell (bench/jwt_mode.py): chatstream's stack, in the NONE mode, and a twin in the JWT mode started
    beside it: the first token at one chat on each, alternately, and a token's verification CPU."""
    log(f"{JWT_VARIANT}: starting beside chatstream")
    with running(JWT_VARIANT, JWT_PIPELINE) as jwt:
        assert jwt.issuer is not None
        token = jwt.issuer.issuer.mint("bench")
        for target in (none, jwt):
            target.model.delay_ms = workload.jwt_delay_ms
        for concurrency in (2, 2, 1):  # relay environments that have verified a token (its keys fetched)
            load.run(jwt.url, workload.message, concurrency, token=token)
        settle(none)
        settle(jwt)
        pairs = alternate(
            workload.jwt_pairs,
            base=lambda: load.run(none.url, workload.message, 1)[0],
            twin=lambda: load.run(jwt.url, workload.message, 1, token=token)[0],
        )
        verifier = BearerVerifier(JwtSettings.from_env(jwt.issuer.relay_environment()))
        authorization = f"Bearer {token}"
        cpu = verification_cpu(lambda: verifier.verify(authorization), workload.jwt_verifications)
    record = JwtOverhead.of(workload.message, workload.jwt_delay_ms, pairs, expected, cpu, workload.jwt_verifications)
    log(
        f"{JWT_VARIANT}: {record.pairs} chats per mode, exact={record.exact}: TTFT p50 NONE "
        f"{record.ttft_ms_none.p50} ms, JWT {record.ttft_ms_jwt.p50} ms, overhead (median of pairs) "
        f"{record.overhead_ms_p50} ms (target {record.overhead_target_ms:g} ms); verification "
        f"{record.verify_cpu_us_p50} µs CPU per request ({record.algorithm})"
    )
    return record


BUDGETS_VARIANT = "chatstream-budgets"


def measure_budgets(off: Target, load: LoadRunner, workload: Workload, expected: str) -> BudgetsOverhead:
    """The budgets cell (bench/budgets_mode.py): chatstream's stack, without budgets, and a twin with them started
    beside it: the first token at one chat on each, alternately."""
    log(f"{BUDGETS_VARIANT}: starting beside chatstream")
    with running(BUDGETS_VARIANT) as on:
        for target in (off, on):
            target.model.delay_ms = workload.jwt_delay_ms
        for concurrency in (2, 2, 1):  # warm relay and proxy environments, as chatstream's are
            load.run(on.url, workload.message, concurrency)
        settle(off)
        settle(on)
        pairs = alternate(
            workload.budgets_pairs,
            base=lambda: load.run(off.url, workload.message, 1)[0],
            twin=lambda: load.run(on.url, workload.message, 1)[0],
        )
    record = BudgetsOverhead.of(workload.message, workload.jwt_delay_ms, pairs, expected)
    log(
        f"{BUDGETS_VARIANT}: {record.pairs} chats per stack, exact={record.exact}: TTFT p50 without "
        f"{record.ttft_ms_off.p50} ms, with budgets {record.ttft_ms_on.p50} ms, overhead (median of pairs) "
        f"{record.overhead_ms_p50} ms (target {record.overhead_target_ms:g} ms)"
    )
    return record


def _measure_cells(target: Target, load: LoadRunner, workload: Workload, expected: str) -> list[RunRecord]:
    records = []
    for delay in workload.delays_ms:
        target.model.delay_ms = delay
        for concurrency in workload.concurrency:
            if target.variant == "naive" and concurrency > workload.naive_max_concurrency:
                log(f"naive: {concurrency} chats at once not run (naive_max_concurrency)")
                continue
            m = measure_cell(target, load, workload, concurrency)
            record = run_record(target, Cell(target.variant, delay, concurrency), m, expected)
            records.append(record)
            clients = record.clients
            log(
                f"{target.variant} delay={delay} c={concurrency}: exact={clients.exact} "
                f"ttft p50={clients.ttft_ms.p50} ms, gap p50={clients.gap_ms.p50} ms p99={clients.gap_ms.p99} ms, "
                f"{clients.tokens_per_s} tok/s, records/1k={record.aws.kinesis_records_per_1k_tokens}"
            )
    return records


UNPACED = "chatstream-unpaced"


def _measure_unpaced(target: Target, load: LoadRunner, workload: Workload, expected: str) -> list[RunRecord]:
    """chatstream's streams with ``?pace=0`` (each record one token event), beside the paced cells."""
    records = []
    target.model.delay_ms = workload.unpaced_delay_ms
    for concurrency in workload.unpaced_concurrency:
        m = measure_cell(target, load, workload, concurrency, pace=False)
        record = run_record(target, Cell(UNPACED, workload.unpaced_delay_ms, concurrency), m, expected)
        records.append(record)
        clients = record.clients
        log(
            f"{UNPACED} delay={workload.unpaced_delay_ms} c={concurrency}: exact={clients.exact} "
            f"ttft p50={clients.ttft_ms.p50} ms, gap p50={clients.gap_ms.p50} ms p99={clients.gap_ms.p99} ms"
        )
    return records


def _measure_spread(target: Target, load: LoadRunner, workload: Workload, expected: str) -> list[RunRecord]:
    records = []
    target.model.delay_ms = workload.spread_delay_ms
    for concurrency in workload.spread_concurrency:
        m = measure_cell(target, load, workload, concurrency, gap_s=workload.spread_gap_ms / 1000)
        cell = Cell(target.variant, workload.spread_delay_ms, concurrency, arrival_gap_ms=workload.spread_gap_ms)
        record = run_record(target, cell, m, expected)
        records.append(record)
        log(
            f"{target.variant} delay={workload.spread_delay_ms} c={concurrency} sent "
            f"{workload.spread_gap_ms} ms apart: exact={record.clients.exact} "
            f"ttft p50={record.clients.ttft_ms.p50} ms"
        )
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a tiny workload, to check the harness")
    parser.add_argument("--out-dir", type=Path, default=ROOT / "bench")
    parser.add_argument(
        "--variants",
        default=",".join(default_variants()),
        help=f"of direct, {', '.join(PIPELINE_VARIANTS)} (default: %(default)s)",
    )
    parser.add_argument("--deltas", type=int, help="model deltas per reply")
    parser.add_argument("--concurrency", help="comma-separated, e.g. 1,10,50")
    parser.add_argument("--delays", help="model delays in ms, comma-separated, e.g. 20")
    parser.add_argument("--rerender", type=Path, help="only rewrite the report from this results.json")
    parser.add_argument("--no-coldstart", action="store_true", help="skip the runtime cold start measurement")
    args = parser.parse_args(argv)
    if args.rerender:
        rerender(args.rerender)
        return 0
    workload = QUICK if args.quick else Workload()
    if args.deltas:
        workload = dataclasses.replace(workload, deltas=args.deltas)
    if args.concurrency:
        workload = dataclasses.replace(workload, concurrency=tuple(int(c) for c in args.concurrency.split(",")))
    if args.delays:
        workload = dataclasses.replace(workload, delays_ms=tuple(int(d) for d in args.delays.split(",")))
    variants = [v for v in args.variants.split(",") if v]
    began = time.monotonic()
    env = environment(workload, variants)
    cold_start = None
    if not args.no_coldstart:
        log(f"cold start: {workload.coldstart_repeat} starts per case")
        cold_start = coldstart.measure(workload.coldstart_repeat)
    first_token: list[firsttoken.FirstTokenPath] = []
    jwt: list[JwtOverhead] = []
    budgets: list[BudgetsOverhead] = []
    runs, spread = measure_variants(variants, workload, first_token, jwt, budgets)
    duration_s = round(time.monotonic() - began, 1)
    results = BenchResults(
        environment=dataclasses.replace(env, duration_s=duration_s),
        runs=tuple(runs),
        first_token_path=tuple(first_token),
        spread_arrivals=tuple(spread),
        cold_start=cold_start,
        costs=costs(runs, workload, env.settings.read_modes),
        jwt_mode=jwt[0] if jwt else None,
        budgets_mode=budgets[0] if budgets else None,
    )
    args.out_dir.mkdir(parents=True, exist_ok=True)
    write(results, args.out_dir / "results.json")
    log(f"done in {duration_s} s: {args.out_dir}/results.{{json,md,png}}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
