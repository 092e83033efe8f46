"""results.md (tables, ratios, targets, where the time goes) and results.png (TTFT and gap distributions), from the
run's typed records (:class:`~bench.results.BenchResults`: what ``bench/run.py`` measured, or a results.json read
back)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
    from pathlib import Path

    from bench.budgets_mode import BudgetsOverhead
    from bench.coldstart import ColdStart
    from bench.firsttoken import FirstTokenPath
    from bench.jwt_mode import JwtOverhead
    from bench.records import RunRecord
    from bench.results import BenchResults, HourlyCosts

VARIANT_ORDER = (
    "direct",
    "naive",
    "chatstream",
    "chatstream-unpaced",
    "chatstream-polling",
    "chatstream-efo",
    "poll-fast",
    "flush-100",
    "chatstream-budgets",
)
READ_MODE_VARIANTS = ("chatstream", "chatstream-polling", "chatstream-efo")  # the product, read one way or the other
TUNING_VARIANTS = ("poll-fast", "flush-100", "chatstream-budgets")
COLORS = {
    "direct": "#4c72b0",
    "naive": "#dd8452",
    "chatstream": "#55a868",
    "chatstream-unpaced": "#8c8c8c",
    "chatstream-polling": "#c44e52",
    "chatstream-efo": "#64b5cd",
    "poll-fast": "#8172b3",
    "flush-100": "#937860",
    "chatstream-budgets": "#da8bc3",
}


def _order(variant: str) -> int:
    return VARIANT_ORDER.index(variant) if variant in VARIANT_ORDER else len(VARIANT_ORDER)


def _present(runs: Sequence[RunRecord]) -> list[str]:
    return sorted({r.cell.variant for r in runs}, key=_order)


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "**NO**"
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 10 else f"{value:,.0f}"
    return str(value)


def _cpu(value: float | None) -> str:
    """A CPU figure; ``None`` is a process that was not measured (bench.procstat), never shown as 0."""
    return "n/m" if value is None else _cell(value)


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "–"
    return f"{a / b:.2f}"


Index = dict[tuple[str, int, int], "RunRecord"]


def _index(runs: Sequence[RunRecord]) -> Index:
    return {(r.cell.variant, r.cell.model_delay_ms, r.cell.concurrency): r for r in runs}


def _cells(runs: Sequence[RunRecord]) -> list[tuple[int, int]]:
    """Every (model delay, concurrency) that ran, in order."""
    return sorted({(r.cell.model_delay_ms, r.cell.concurrency) for r in runs})


def _runs(index: Index, delay: int, concurrency: int, variants: Iterable[str]) -> Iterator[tuple[str, RunRecord]]:
    """Each of ``variants`` that ran at this model delay and concurrency, with its run, in the order given."""
    for variant in variants:
        run = index.get((variant, delay, concurrency))
        if run is not None:
            yield variant, run


def _over(run: RunRecord | None, base: RunRecord | None) -> str:
    """``run``'s TTFT p50 minus ``base``'s, in ms."""
    if run is None or base is None or run.clients.ttft_ms.p50 is None or base.clients.ttft_ms.p50 is None:
        return "–"
    return f"{run.clients.ttft_ms.p50 - base.clients.ttft_ms.p50:+.0f}"


def run_table(runs: Sequence[RunRecord]) -> list[str]:
    lines = [
        "| variant | delay ms | chats at once | exact | TTFT p50 / p95 / p99 ms | gap p50 / p99 ms | tokens/s "
        "| token events/chat | Kinesis records /1k | PutRecords /1k | DynamoDB writes /1k | relay Query /turn "
        "| relay CPU ms /1k |",
        "|---|---:|---:|:---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sorted(runs, key=lambda r: (r.cell.model_delay_ms, r.cell.concurrency, _order(r.cell.variant))):
        cell, clients, aws = r.cell, r.clients, r.aws
        t, g = clients.ttft_ms, clients.gap_ms
        lines.append(
            f"| {cell.variant} | {cell.model_delay_ms} | {cell.concurrency} | {_cell(clients.exact)} "
            f"| {_cell(t.p50)} / {_cell(t.p95)} / {_cell(t.p99)} | {_cell(g.p50)} / {_cell(g.p99)} "
            f"| {_cell(clients.tokens_per_s)} | {_cell(clients.token_events_per_chat)} "
            f"| {_cell(aws.kinesis_records_per_1k_tokens)} | {_cell(aws.put_calls_per_1k_tokens)} "
            f"| {_cell(aws.dynamodb_writes_per_1k_tokens)} | {_cell(aws.relay_queries_per_turn)} "
            f"| {_cpu(r.cpu.relay_cpu_ms_per_1k_tokens)} |"
        )
    return lines


def _ttft_p50(r: RunRecord) -> float | None:
    return r.clients.ttft_ms.p50


def _tokens_per_s(r: RunRecord) -> float:
    return r.clients.tokens_per_s


def _kinesis_records(r: RunRecord) -> float:
    return r.aws.kinesis_records_per_1k_tokens


def _dynamodb_writes(r: RunRecord) -> float:
    return r.aws.dynamodb_writes_per_1k_tokens


def _relay_cpu(r: RunRecord) -> float | None:
    return r.cpu.relay_cpu_ms_per_1k_tokens


def ratio_table(runs: Sequence[RunRecord]) -> list[str]:
    index = _index(runs)
    lines = [
        "| delay ms | chats at once | TTFT p50 cs−direct ms | TTFT p50 cs/direct | tokens/s cs/direct "
        "| TTFT p50 cs/naive | records cs/naive | DynamoDB writes cs/naive | relay CPU cs/naive | tokens/s cs/naive |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for delay, c in _cells(runs):
        cs, d, n = (index.get((v, delay, c)) for v in ("chatstream", "direct", "naive"))
        if cs is None:
            continue

        def ratio(other: RunRecord | None, figure: Callable[[RunRecord], float | None], cs: RunRecord = cs) -> str:
            return "–" if other is None else _ratio(figure(cs), figure(other))

        lines.append(
            f"| {delay} | {c} | {_over(cs, d)} | {ratio(d, _ttft_p50)} | {ratio(d, _tokens_per_s)} "
            f"| {ratio(n, _ttft_p50)} | {ratio(n, _kinesis_records)} "
            f"| {ratio(n, _dynamodb_writes)} | {ratio(n, _relay_cpu)} "
            f"| {ratio(n, _tokens_per_s)} |"
        )
    return lines


def candidates_table(runs: Sequence[RunRecord]) -> list[str]:
    """Tuning candidates beside the defaults and naive: the numbers a change of default rests on."""
    present = [v for v in _present(runs) if v != "direct" and v not in READ_MODE_VARIANTS[1:]]
    if not any(v in TUNING_VARIANTS for v in present):
        return []
    index = _index(runs)
    lines = [
        "| delay ms | chats at once | variant | TTFT p50 ms | gap p50 / p99 ms | records /1k "
        "| DynamoDB writes /1k | relay Query /turn | tokens/s |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for delay, c in _cells(runs):
        for variant, r in _runs(index, delay, c, present):
            clients, aws = r.clients, r.aws
            lines.append(
                f"| {delay} | {c} | {variant} | {_cell(clients.ttft_ms.p50)} | {_cell(clients.gap_ms.p50)} / "
                f"{_cell(clients.gap_ms.p99)} | {_cell(aws.kinesis_records_per_1k_tokens)} "
                f"| {_cell(aws.dynamodb_writes_per_1k_tokens)} | {_cell(aws.relay_queries_per_turn)} "
                f"| {_cell(clients.tokens_per_s)} |"
            )
    return ["## Tuning candidates", "", *lines, ""]


def read_mode_table(runs: Sequence[RunRecord], modes: Mapping[str, str]) -> list[str]:
    """chatstream with its consumer reading the stream each way (template.yaml's ``EnhancedFanOut``), beside direct;
    ``modes``: how each pipeline variant's consumer read the stream."""
    variants = [v for v in _present(runs) if v in READ_MODE_VARIANTS and v in modes]
    if len({modes[v] for v in variants}) < 2:
        return []
    index = _index(runs)
    lines = [
        "| delay ms | chats at once | variant | read mode | TTFT p50 / p95 ms | − direct p50 ms | gap p50 / p99 ms "
        "| exact |",
        "|---:|---:|---|---|---:|---:|---:|:---:|",
    ]
    for delay, c in _cells(runs):
        d = index.get(("direct", delay, c))
        if d is not None:
            direct = d.clients
            lines.append(
                f"| {delay} | {c} | direct | – | {_cell(direct.ttft_ms.p50)} / {_cell(direct.ttft_ms.p95)} | – "
                f"| {_cell(direct.gap_ms.p50)} / {_cell(direct.gap_ms.p99)} | {_cell(direct.exact)} |"
            )
        for variant, r in _runs(index, delay, c, variants):
            clients = r.clients
            lines.append(
                f"| {delay} | {c} | {variant} | {modes[variant]} | {_cell(clients.ttft_ms.p50)} / "
                f"{_cell(clients.ttft_ms.p95)} | {_over(r, d)} | {_cell(clients.gap_ms.p50)} / "
                f"{_cell(clients.gap_ms.p99)} | {_cell(clients.exact)} |"
            )
    return [
        "## Kinesis to the consumer: polling vs enhanced fan-out",
        "",
        "The product with template.yaml's defaults (`chatstream`) and with its consumer reading the stream the other "
        "way (`EnhancedFanOut` flipped). `polling`: the local event source mapping reads each shard as Lambda's "
        "standard iterator does (once a second while it is empty, at once again while batches come, at most five "
        "reads a second); `enhanced-fan-out`: records are pushed to it as they are put.",
        "",
        *lines,
        "",
    ]


PACING_DELAY_MS = 20  # the gap targets hold at this model delay (a token every 20 ms)
GAP_P50_TARGET_MS = 50
GAP_P99_TARGET_MS = 150


def pacing_table(runs: Sequence[RunRecord]) -> list[str]:
    """The gaps between token events, paced (``chatstream``) and not (``chatstream-unpaced``), beside direct."""
    index = _index(runs)
    cells = sorted({r.cell.concurrency for r in runs if r.cell.variant == "chatstream-unpaced"})
    if not cells:
        return []
    lines = [
        "| chats at once | variant | gap p50 / p99 ms | token events a reply | TTFT p50 ms | exact |",
        "|---:|---|---:|---:|---:|:---:|",
    ]
    for c in cells:
        for variant, r in _runs(index, PACING_DELAY_MS, c, ("direct", "chatstream", "chatstream-unpaced")):
            clients = r.clients
            lines.append(
                f"| {c} | {variant} | {_cell(clients.gap_ms.p50)} / {_cell(clients.gap_ms.p99)} "
                f"| {_cell(clients.token_events_per_chat)} | {_cell(clients.ttft_ms.p50)} | {_cell(clients.exact)} |"
            )
    return [
        "## Smooth text: gaps between token events",
        "",
        f"At {PACING_DELAY_MS} ms a token. `chatstream` releases each record's text in word-sized pieces over the "
        "turn's interval between records (HTTP_API.md, \"Pacing\"); `chatstream-unpaced` is the same stack's streams "
        "with `?pace=0`, one event a record. Both write the same records.",
        "",
        *lines,
        "",
    ]


def targets(runs: Sequence[RunRecord]) -> list[str]:
    index = _index(runs)
    lines = []
    for r in runs:
        if r.cell.variant != "chatstream":
            continue
        key = (r.cell.model_delay_ms, r.cell.concurrency)
        n, d = index.get(("naive", *key)), index.get(("direct", *key))
        checks = [f"exact {'✔' if r.clients.exact else '✘'}"]
        if n is not None and n.aws.kinesis_records_per_1k_tokens:
            rec = r.aws.kinesis_records_per_1k_tokens / n.aws.kinesis_records_per_1k_tokens
            wr = r.aws.dynamodb_writes_per_1k_tokens / n.aws.dynamodb_writes_per_1k_tokens
            checks.append(f"records ×{rec:.3f} of naive {'✔' if rec <= 0.1 else '✘'}")
            checks.append(f"table writes ×{wr:.3f} of naive {'✔' if wr <= 0.1 else '✘'}")
        ttft, direct_ttft = r.clients.ttft_ms.p50, None if d is None else d.clients.ttft_ms.p50
        if ttft is not None and direct_ttft is not None:
            over = ttft - direct_ttft
            checks.append(f"TTFT p50 {over:+.0f} ms over direct {'✔' if over <= 100 else '✘'}")
        gap = r.clients.gap_ms
        if key[0] == PACING_DELAY_MS and gap.p50 is not None and gap.p99 is not None:
            smooth = gap.p50 <= GAP_P50_TARGET_MS and gap.p99 <= GAP_P99_TARGET_MS
            checks.append(
                f"gap p50 {gap.p50:.0f} ms / p99 {gap.p99:.0f} ms "
                f"(≤ {GAP_P50_TARGET_MS} / ≤ {GAP_P99_TARGET_MS}) {'✔' if smooth else '✘'}"
            )
        lines.append(f"- delay {key[0]} ms, {key[1]} at once: " + "; ".join(checks))
    return lines


def spread_table(spread: Sequence[RunRecord], modes: Mapping[str, str]) -> list[str]:
    """The informative cells: the same numbers of chats sent ``arrival_gap_ms`` apart instead of at once."""
    by = {(r.cell.variant, r.cell.concurrency): r for r in spread}
    variants = sorted({r.cell.variant for r in spread if r.cell.variant in READ_MODE_VARIANTS}, key=_order)
    lines = [
        "| chats | sent apart | delay ms | variant | exact | direct TTFT p50 / p95 ms | variant TTFT p50 / p95 ms "
        "| variant − direct p50 ms |",
        "|---:|---:|---:|---|:---:|---:|---:|---:|",
    ]
    for concurrency in sorted({r.cell.concurrency for r in spread}):
        d = by.get(("direct", concurrency))
        for variant in variants:
            c = by.get((variant, concurrency))
            if c is None:
                continue
            exact = "yes" if c.clients.exact and (d is None or d.clients.exact) else "**no**"
            direct = f"{_cell(d.clients.ttft_ms.p50)} / {_cell(d.clients.ttft_ms.p95)}" if d else "–"
            label = f"{variant} ({modes[variant]})" if variant in modes else variant
            lines.append(
                f"| {concurrency} | {c.cell.arrival_gap_ms} ms | {c.cell.model_delay_ms} | {label} | {exact} "
                f"| {direct} | {_cell(c.clients.ttft_ms.p50)} / {_cell(c.clients.ttft_ms.p95)} | {_over(c, d)} |"
            )
    return lines


def time_goes(runs: Sequence[RunRecord]) -> list[str]:
    lines = [
        "CPU milliseconds per 1,000 tokens, by process (the local stack's own front end, model and emulators run in "
        "`bench-process`; `moto` is the AWS emulator; `clients` the load generator), and the mean time of each AWS "
        "call as moto served it (its queueing not included):",
        "",
    ]
    top = max((x.cell.concurrency for x in runs), default=1)
    for r in runs:
        cell = r.cell
        if cell.variant not in ("naive", "chatstream") or cell.concurrency not in (1, top):
            continue
        by_process = r.cpu.cpu_ms_per_1k_tokens_by_process.items()
        cpu = ", ".join(f"{k} {'not measured' if v is None else v}" for k, v in by_process if v != 0)
        calls = ", ".join(f"{k} {v} ms" for k, v in r.aws.upstream_ms_per_call.items())
        lines.append(f"- **{cell.variant}**, delay {cell.model_delay_ms} ms, {cell.concurrency} at once: CPU {cpu}.")
        lines.append(f"  Calls per run: {dict(r.aws.calls)}. Mean call time: {calls}.")
    return lines


def fixed_table(fixed: Mapping[str, Mapping[str, HourlyCosts]]) -> list[str]:
    """What the stream and its consumer cost a month whatever the traffic, per stream mode and read mode."""
    if not fixed:
        return []
    lines = [
        "Charges by the hour, whatever the traffic (USD a month, one stream, one consumer; storage, Lambda and "
        "DynamoDB are usage-proportional and above):",
        "",
        "| stream mode | read mode | stream-hours / shard-hours | enhanced fan-out consumer-shard hours | total |",
        "|---|---|---:|---:|---:|",
    ]
    for stream_mode, by_mode in fixed.items():
        for mode, f in by_mode.items():
            lines.append(f"| {stream_mode} | {mode} | {f.stream:.2f} | {f.enhanced_fan_out:.2f} | {f.total:.2f} |")
    return [*lines, ""]


ROLES = ("relay", "proxy", "consumer")


def first_token_table(paths: Sequence[FirstTokenPath], runs: Sequence[RunRecord]) -> list[str]:
    """Per pipeline variant: CPU per function on the first token's path and per 1,000 tokens, and the AWS calls
    made before the first token (bench/firsttoken.py)."""
    if not paths:
        return []
    index = _index(runs)
    delay = max(r.cell.model_delay_ms for r in runs)
    lines = [
        "## The first token's path, per function",
        "",
        f"Chats of two model deltas {paths[0].model_delay_ms} ms apart, one after another ({paths[0].chats}; "
        "CPU as means, each process's CPU clock; the rest medians): CPU each function's execution "
        "environments spent from the request to the client's first `token` event, and to the chat's end; the AWS "
        "calls made before the first token (moto's timeline, plus the relay's `Invoke` and the proxy's "
        "`ConverseStream`), the relay's polls apart; `sequential` is the chain's length. CPU per 1,000 tokens: "
        f"the same variant's run at {delay} ms a token, 1 chat at once.",
        "",
        "| variant | TTFT p50 ms | CPU ms to first token: relay / proxy / consumer / **product** "
        "| CPU ms whole chat (product) | CPU ms /1k tokens: relay / proxy / consumer | calls before first token "
        "| relay polls | sequential |",
        "|---|---:|---:|---:|---:|---|---:|---:|",
    ]
    for path in sorted(paths, key=lambda p: _order(p.variant)):
        first, whole = path.cpu_ms_to_first_token, path.cpu_ms_whole_chat
        run = index.get((path.variant, delay, 1))
        by_function = {} if run is None else run.cpu.cpu_ms_per_1k_tokens_by_function
        per_1k = " / ".join(_cpu(by_function.get(role)) for role in ROLES) if by_function else "–"
        calls = ", ".join(f"{name} {count:g}" for name, count in path.calls_before_first_token.items())
        lines.append(
            f"| {path.variant} | {_cell(path.ttft_ms_p50)} "
            f"| {' / '.join(_cpu(first.get(role)) for role in ROLES)} / **{_cpu(first.get('product'))}** "
            f"| {_cpu(whole.get('product'))} | {per_1k} | {calls} | {path.relay_polls_before_first_token:g} "
            f"| {path.sequential_calls_before_first_token:g} |"
        )
    return [*lines, ""]


COLD_START_CASES = {
    "relay": "the relay (`functions/relay`)",
    "proxy": "the proxy (`functions/proxy`)",
    "consumer": "the consumer (`functions/consumer`)",
    "hello": "smallest handler (`bench/hello`)",
}


def _ms(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f} ms"


def jwt_table(jwt: JwtOverhead | None) -> list[str]:
    """The JWT auth mode beside NONE (bench/jwt_mode.py): the first token at one chat, and a token's verification."""
    if jwt is None:
        return []
    within = {True: "yes", False: "**no**", None: "n/m"}[jwt.within_target]
    lines = [
        "## The JWT auth mode beside NONE",
        "",
        f"chatstream's stack and a twin in the JWT mode (the local issuer's {jwt.algorithm} tokens), side by side: "
        f"`{jwt.message}` at model delay {jwt.model_delay_ms} ms, one chat at a time, {jwt.pairs} on each, "
        "alternately. The overhead is the median of the pairs' differences (JWT − NONE), against the "
        f"{jwt.overhead_target_ms:g} ms the first token may lose.",
        "",
        "| mode | chats | exact | TTFT p50 | TTFT p95 |",
        "|---|---:|---|---:|---:|",
        f"| NONE | {jwt.pairs} | {'yes' if jwt.exact else '**no**'} | {_ms(jwt.ttft_ms_none.p50)} "
        f"| {_ms(jwt.ttft_ms_none.p95)} |",
        f"| JWT | {jwt.pairs} | {'yes' if jwt.exact else '**no**'} | {_ms(jwt.ttft_ms_jwt.p50)} "
        f"| {_ms(jwt.ttft_ms_jwt.p95)} |",
        "",
        f"First token's overhead: **{_ms(jwt.overhead_ms_p50, 2)}** (within {jwt.overhead_target_ms:g} ms: "
        f"{within}). Verification CPU per request: **{jwt.verify_cpu_us_p50:g} µs** (median of batches; fastest "
        f"batch {jwt.verify_cpu_us_min:g} µs), {jwt.verifications} verifications of one token in the benchmark's "
        "process with the layer's PyJWT and cryptography, keys already fetched.",
        "",
    ]
    if jwt.failures:
        lines += [f"Failed chats: {'; '.join(str(f) for f in jwt.failures)}", ""]
    return lines


def budgets_table(budgets: BudgetsOverhead | None) -> list[str]:
    """The budgets per caller beside a stack without them (bench/budgets_mode.py): the first token at one chat."""
    if budgets is None:
        return []
    within = {True: "yes", False: "**no**", None: "n/m"}[budgets.within_target]
    exact = "yes" if budgets.exact else "**no**"
    lines = [
        "## The budgets per caller beside none",
        "",
        "chatstream's stack and a twin with the budgets per caller on (set too high to refuse a turn), side by side: "
        f"`{budgets.message}` at model delay {budgets.model_delay_ms} ms, one chat at a time, {budgets.pairs} on "
        "each, alternately. The overhead is the median of the pairs' differences (budgets − none), against the "
        f"{budgets.overhead_target_ms:g} ms the first token may lose.",
        "",
        "| budgets | chats | exact | TTFT p50 | TTFT p95 |",
        "|---|---:|---|---:|---:|",
        f"| off | {budgets.pairs} | {exact} | {_ms(budgets.ttft_ms_off.p50)} | {_ms(budgets.ttft_ms_off.p95)} |",
        f"| on | {budgets.pairs} | {exact} | {_ms(budgets.ttft_ms_on.p50)} | {_ms(budgets.ttft_ms_on.p95)} |",
        "",
        f"First token's overhead: **{_ms(budgets.overhead_ms_p50, 2)}** (within {budgets.overhead_target_ms:g} ms: "
        f"{within}).",
        "",
    ]
    if budgets.failures:
        lines += [f"Failed chats: {'; '.join(str(f) for f in budgets.failures)}", ""]
    return lines


def cold_start_table(cold: ColdStart | None) -> list[str]:
    """Init per function (process start → first ``/next``), on its runtime and on awslambdaric, in the packages the
    deployed function has and in the development environment (bench/coldstart.py)."""
    if cold is None:
        return []
    med, cpu_med, deployed_on = cold.median_ms, cold.cpu_median_ms, cold.deployed_runtime
    lines = [
        f"## Cold start: init per function (process start → first `/next`, median of {cold.repeat})",
        "",
        "`deployed`: an interpreter that sees only the packages the deployed function has (the layers' pinned "
        "requirements); `dev`: the development environment, where botocore also finds and imports the CRT and "
        "pyOpenSSL. The function's own runtime is in bold; in brackets, the CPU the process had spent by its first "
        "`/next`.",
        "",
        "| function | deployed on | deployed: streaming layer | deployed: awslambdaric | dev: streaming layer "
        "| dev: awslambdaric |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for case, label in COLD_START_CASES.items():
        if case not in med["deployed"]:
            continue
        cells = []
        for site in ("deployed", "dev"):
            for runtime in ("streaming", "awslambdaric"):
                value = f"{med[site][case][runtime]} ms"
                if cpu_med is not None:  # results written before the CPU was measured have none
                    value += f" (CPU {cpu_med[site][case][runtime]} ms)"
                cells.append(f"**{value}**" if runtime == deployed_on[case] else value)
        lines.append(f"| {label} | {deployed_on[case]} | {' | '.join(cells)} |")
    return [*lines, ""]


def write_markdown(results: BenchResults, path: Path) -> None:
    env, runs, modes = results.environment, results.runs, results.environment.settings.read_modes
    machine, workload, prices = env.machine, env.workload, env.prices
    lines = [
        "# chatstream benchmark results",
        "",
        f"Generated by `make bench` on {env.started_at} ({machine.cpus} CPUs, Python "
        f"{machine.python}, {machine.platform}); whole run {'?' if env.duration_s is None else env.duration_s} s. "
        f"Workload: `{workload.message}` ({workload.deltas_per_reply} model deltas a reply), "
        f"{workload.chats_at_concurrency_1} chats one after another at concurrency 1; above, one chat per "
        f"client, all started together, in {workload.rounds_up_to_10_at_once} rounds up to 10 at "
        "once (naive: one) and one round above. Local stack: moto, the local model, the local Lambda; numbers are "
        "local and noisy, compare them within this run.",
        "",
        "TTFT is request sent → first `token` event at the client. Gaps are between consecutive `token` events of one "
        "chat (chatstream coalesces deltas, so it sends fewer, larger events: see token events/chat). Per-1k figures "
        "are per 1,000 model deltas (output tokens).",
        "",
        "## Runs",
        "",
        *run_table(runs),
        "",
        "## Ratios (cs = chatstream)",
        "",
        *ratio_table(runs),
        "",
        "## Targets",
        "",
        *targets(runs),
        "",
        *pacing_table(runs),
        "## Arrivals spread out (informative, beside the chats sent at once)",
        "",
        "The same numbers of chats, each sent a fixed gap after the previous one instead of all in the same "
        "millisecond. At 20 ms a token a reply lasts about 6 s, longer than the last chat is sent after the first, so "
        "when it is sent nearly all of them are streaming: the concurrency is the same, only the burst of simultaneous "
        "starts is gone.",
        "",
        *spread_table(results.spread_arrivals, modes),
        "",
        *read_mode_table(runs, modes),
        "## Cost per million output tokens (USD, usage-proportional, us-east-1 list prices "
        f"as of {prices.as_of}; Kinesis as of {prices.kinesis_as_of})",
        "",
        "| variant | read mode | Kinesis (on demand) | DynamoDB writes | DynamoDB reads | Lambda requests "
        "| Lambda duration | **total** | (Kinesis provisioned, by usage, instead) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for variant, b in results.costs.breakdowns.items():
        lines.append(
            f"| {variant} | {modes.get(variant, '–')} | {b.kinesis:.4f} | {b.dynamodb_writes:.4f} "
            f"| {b.dynamodb_reads:.4f} | {b.lambda_requests:.4f} | {b.lambda_duration:.4f} "
            f"| **{b.total:.4f}** | {b.kinesis_provisioned:.4f} |"
        )
    lines += ["", f"Basis: {results.costs.basis}.", "", *fixed_table(results.costs.fixed_monthly)]
    lines += cold_start_table(results.cold_start)
    lines += first_token_table(results.first_token_path, runs)
    lines += jwt_table(results.jwt_mode)
    lines += budgets_table(results.budgets_mode)
    lines += candidates_table(runs)
    lines += ["## Where the time goes", "", *time_goes(runs), ""]
    path.write_text("\n".join(lines))


def write_plot(results: BenchResults, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = results.runs
    delays = sorted({r.cell.model_delay_ms for r in runs})
    concurrencies = sorted({r.cell.concurrency for r in runs})
    index = _index(runs)
    variants = _present(runs)
    fig, axes = plt.subplots(len(delays), 2, figsize=(13, 4.2 * len(delays)), squeeze=False)
    for row, delay in enumerate(delays):
        ax = axes[row][0]
        positions, data, colors = [], [], []
        for i, c in enumerate(concurrencies):
            for j, variant in enumerate(variants):
                run = index.get((variant, delay, c))
                if run is None or not run.clients.ttft_samples_ms:
                    continue
                positions.append(i * (len(variants) + 1) + j)
                data.append(list(run.clients.ttft_samples_ms))
                colors.append(COLORS.get(variant, "grey"))
        if data:
            boxes = ax.boxplot(data, positions=positions, widths=0.8, patch_artist=True, showfliers=True)
            for patch, color in zip(boxes["boxes"], colors, strict=False):
                patch.set_facecolor(color)
        width = len(variants) + 1
        ax.set_xticks(
            [i * width + (len(variants) - 1) / 2 for i in range(len(concurrencies))],
            [f"{c} at once" for c in concurrencies],
        )
        ax.set_yscale("log")
        ax.set_ylabel("time to first token (ms, log)")
        ax.set_title(f"TTFT, model delay {delay} ms")
        ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=COLORS.get(v, "grey")) for v in variants], labels=variants)
        ax = axes[row][1]
        for variant in variants:
            for c, style in zip(concurrencies, ("-", "--", ":"), strict=False):
                run = index.get((variant, delay, c))
                if run is None or not run.clients.gap_samples_ms:
                    continue
                gaps = sorted(max(g, 0.01) for g in run.clients.gap_samples_ms)
                ys = [(i + 1) / len(gaps) for i in range(len(gaps))]
                ax.plot(gaps, ys, style, color=COLORS.get(variant, "grey"), label=f"{variant}, {c} at once")
        ax.set_xscale("log")
        ax.set_xlabel("gap between token events (ms, log)")
        ax.set_ylabel("fraction of gaps ≤ x")
        ax.set_title(f"Inter-token gaps (CDF), model delay {delay} ms")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
