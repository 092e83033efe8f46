"""The figures the documents quote from bench/results.json, written between markers that ``make bench`` rewrites.

A measured figure in a document stands between ``<!-- bench:NAME -->`` and ``<!-- /bench -->``; :data:`QUOTES` says
what each name's text is, rendered from the run's typed records (:class:`~bench.results.BenchResults`) and, for the
first token on AWS, from :mod:`bench.capacity`'s latency model of the same run. So a figure has one source: a new
``make bench`` rewrites every quote, and ``tests/unit/test_bench_quote.py`` fails while a document says something
else.

Usage::

    python -m bench.quote            # rewrite the quotes of every document from bench/results.json
    python -m bench.quote --check    # exit 1 if a document's quote is not what results.json gives

An inline quote is a few words inside a sentence; a block quote (a table) stands on lines of its own, a blank line
on either side, so that Markdown reads the markers as comments and the table as a table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import capacity
from bench.results import BenchResults
from chatstream_local.template import Template

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from bench.budgets_mode import BudgetsOverhead
    from bench.jwt_mode import JwtOverhead
    from bench.records import RunRecord

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS = REPO_ROOT / "bench" / "results.json"
# The documents that quote figures (docs/CAPACITY.md and bench/results.md are written whole from results.json).
GENERATED = ("docs/CAPACITY.md", "bench/results.md")
SKIPPED_FOLDERS = ("node_modules", "__pycache__")
MARKER = re.compile(r"<!-- bench:(?P<name>[a-z0-9-]+) -->(?P<body>.*?)<!-- /bench -->", re.DOTALL)

PRODUCT = "chatstream"  # the template's defaults
UNPACED = "chatstream-unpaced"
POLLING = "chatstream-polling"
NAIVE = "naive"
DIRECT = "direct"
TYPICAL_DELAY_MS = 20  # the workload's realistic model: a token every 20 ms, 50 a second
CAPACITY_ANCHOR = "docs/CAPACITY.md#the-first-token-on-aws-predicted"  # from the README, where the table stands


class QuoteError(ValueError):
    """A marker names no quote, or results.json lacks a figure a quote needs."""


@dataclass(frozen=True)
class Figures:
    """One run's measurements, as the quotes read them."""

    results: BenchResults
    aws: capacity.Latency  # the first token on AWS, predicted from the same run (docs/CAPACITY.md)

    def run(self, variant: str, concurrency: int = 1, delay_ms: int = TYPICAL_DELAY_MS) -> RunRecord:
        for run in self.results.runs:
            cell = run.cell
            if (cell.variant, cell.model_delay_ms, cell.concurrency, cell.arrival_gap_ms) == (
                variant,
                delay_ms,
                concurrency,
                None,
            ):
                return run
        raise QuoteError(f"results.json has no {variant} run at {delay_ms} ms a token and {concurrency} chats")

    def ttft(self, variant: str, concurrency: int = 1, delay_ms: int = TYPICAL_DELAY_MS) -> float:
        value = self.run(variant, concurrency, delay_ms).clients.ttft_ms.p50
        if value is None:
            raise QuoteError(f"results.json has no time to first token for {variant} at {concurrency} chats")
        return value

    def overhead(self, concurrency: int = 1, delay_ms: int = TYPICAL_DELAY_MS) -> float:
        """The product's p50 time to first token minus direct streaming's, in the same cell."""
        return self.ttft(PRODUCT, concurrency, delay_ms) - self.ttft(DIRECT, concurrency, delay_ms)

    def gaps(self, variant: str, concurrency: int = 1) -> tuple[float, float]:
        gap = self.run(variant, concurrency).clients.gap_ms
        if gap.p50 is None or gap.p99 is None:
            raise QuoteError(f"results.json has no gaps between token events for {variant} at {concurrency} chats")
        return gap.p50, gap.p99

    def relay_cpu(self, variant: str, concurrency: int) -> float:
        value = self.run(variant, concurrency).cpu.relay_cpu_ms_per_1k_tokens
        if value is None:
            raise QuoteError(f"results.json has no relay CPU for {variant} at {concurrency} chats")
        return value

    def cost(self, variant: str) -> float:
        try:
            return self.results.costs.breakdowns[variant].total
        except KeyError:
            raise QuoteError(f"results.json has no cost for {variant}") from None

    def idle_per_month(self) -> float:
        """What the template's stream (on demand, read through enhanced fan-out) costs a month whatever the traffic."""
        try:
            return self.results.costs.fixed_monthly["ON_DEMAND"]["enhanced-fan-out"].total
        except KeyError:
            raise QuoteError("results.json has no monthly charge for an on-demand stream") from None

    def cold_start(self, case: str, runtime: str | None = None) -> float:
        cold = self.results.cold_start
        if cold is None:
            raise QuoteError("results.json has no cold start")
        return cold.median_ms["deployed"][case][runtime or cold.deployed_runtime[case]]

    def jwt_mode(self) -> JwtOverhead:
        if self.results.jwt_mode is None or self.results.jwt_mode.overhead_ms_p50 is None:
            raise QuoteError("results.json has no JWT cell")
        return self.results.jwt_mode

    def budgets_mode(self) -> BudgetsOverhead:
        if self.results.budgets_mode is None or self.results.budgets_mode.overhead_ms_p50 is None:
            raise QuoteError("results.json has no budgets cell")
        return self.results.budgets_mode

    def first_token_cpu(self) -> dict[str, float]:
        for path in self.results.first_token_path:
            if path.variant == PRODUCT:
                return {role: value or 0.0 for role, value in path.cpu_ms_to_first_token.items()}
        raise QuoteError("results.json has no first-token path for chatstream")


def _ms(value: float) -> str:
    """A time as the documents give it: whole milliseconds from 10 up, one decimal below."""
    return f"{value:,.0f}" if abs(value) >= 10 else f"{value:.1f}"


def _over(value: float) -> str:
    return f"+{value:,.0f} ms" if value >= 0 else f"{value:,.0f} ms"


def _usd(value: float) -> str:
    return f"${value:,.2f}"


def _count(value: float) -> str:
    return f"{value:,.0f}"


def _more(value: float, base: float) -> str:
    return f"{(value / base - 1):.0%}"


# --------------------------------------------------------------------------------------------------- the quotes


def run_date(f: Figures) -> str:
    return f.results.environment.started_at[:10]


def first_token_overhead(f: Figures) -> str:
    return _over(f.overhead())


def aws_first_token_overhead(f: Figures) -> str:
    return f"+{f.aws.total_ms:.0f} ms"


def cost_per_million(f: Figures) -> str:
    return _usd(f.cost(PRODUCT))


def idle_per_month(f: Figures) -> str:
    return _usd(f.idle_per_month())


def glance(f: Figures) -> str:
    """README's performance table: one chat at a time, the realistic model, and the AWS prediction beside it."""
    product, naive = f.run(PRODUCT).aws, f.run(NAIVE).aws
    gap_p50, gap_p99 = f.gaps(PRODUCT)
    direct_p50, direct_p99 = f.gaps(DIRECT)
    exact = all(run.clients.exact for run in (*f.results.runs, *f.results.spread_arrivals))
    most = max(run.cell.concurrency for run in f.results.runs)
    return "\n".join(
        [
            f"| one chat at a time, {f.results.environment.workload.deltas_per_reply}-token replies at "
            f"{1000 // TYPICAL_DELAY_MS} tokens a second | local stack (`make bench`, {run_date(f)}) | on AWS |",
            "|---|---:|---:|",
            f"| first token, after what streaming from Bedrock directly takes (p50) | {first_token_overhead(f)} | "
            f"{aws_first_token_overhead(f)}, predicted ([CAPACITY.md]({CAPACITY_ANCHOR})) |",
            f"| gaps between token events, p50 / p99 (direct: {_ms(direct_p50)} / {_ms(direct_p99)} ms) | "
            f"{_ms(gap_p50)} / {_ms(gap_p99)} ms | the same pacing |",
            f"| Kinesis records / table writes per 1,000 tokens (one per token: "
            f"{_count(naive.kinesis_records_per_1k_tokens)} / {_count(naive.dynamodb_writes_per_1k_tokens)}) | "
            f"{_count(product.kinesis_records_per_1k_tokens)} / {_count(product.dynamodb_writes_per_1k_tokens)} "
            "| the same |",
            f"| cost per million output tokens besides Bedrock (one per token: {_usd(f.cost(NAIVE))}) | – | "
            f"{cost_per_million(f)} (us-east-1 list prices) |",
            f"| every reply exact, up to {most} chats at once | {'yes' if exact else '**no**'} | – |",
        ]
    )


def pacing(f: Figures) -> str:
    """ARCHITECTURE's pacing: the gaps between token events paced and not, and what pacing costs the relay's CPU."""
    one, ten = f.gaps(PRODUCT, 1), f.gaps(PRODUCT, 10)
    unpaced, direct = f.gaps(UNPACED, 1), f.gaps(DIRECT, 1)
    events = f.run(PRODUCT).clients.token_events_per_chat / f.run(UNPACED).clients.token_events_per_chat
    return (
        f"from {_ms(unpaced[0])} / {_ms(unpaced[1])} ms (p50 / p99, one event a record) to {_ms(one[0])} / "
        f"{_ms(one[1])} ms at one chat and {_ms(ten[0])} / {_ms(ten[1])} ms at ten, beside direct's "
        f"{_ms(direct[0])} / {_ms(direct[1])} ms, with the same records; writing {events:.0f} times as many events "
        f"costs the relay {_more(f.relay_cpu(PRODUCT, 1), f.relay_cpu(UNPACED, 1))} more CPU at one chat and "
        f"{_more(f.relay_cpu(PRODUCT, 10), f.relay_cpu(UNPACED, 10))} at ten"
    )


def read_modes(f: Figures) -> str:
    """The consumer pushed to or polling: the first token alike, the text after it not."""
    pushed, polled = f.gaps(PRODUCT), f.gaps(POLLING)
    return (
        f"the first token {_over(f.overhead())} over direct pushed and "
        f"{_over(f.ttft(POLLING) - f.ttft(DIRECT))} polled; gaps between token events p50 / p99 {_ms(pushed[0])} / "
        f"{_ms(pushed[1])} ms pushed, {_ms(polled[0])} / {_ms(polled[1])} ms polled (text in bursts); "
        f"${f.cost(PRODUCT):.3f} and ${f.cost(POLLING):.3f} per million output tokens"
    )


def concurrency(f: Figures) -> str:
    """The first token's overhead when chats arrive together, on the local stack's two shared cores."""
    cells = sorted({run.cell.concurrency for run in f.results.runs if run.cell.variant == PRODUCT} - {1})
    return ", ".join(f"{_over(f.overhead(c))} at {c} chats sent together" for c in cells)


def first_token_cpu(f: Figures) -> str:
    cpu = f.first_token_cpu()
    return (
        f"{cpu.get('product', 0.0):.1f} ms (relay {cpu.get('relay', 0.0):.1f}, proxy {cpu.get('proxy', 0.0):.1f}, "
        f"consumer {cpu.get('consumer', 0.0):.1f})"
    )


def jwt_mode(f: Figures) -> str:
    """What the JWT mode adds: to the first token at one chat (the JWT cell), and the relay's CPU per request."""
    jwt = f.jwt_mode()
    assert jwt.overhead_ms_p50 is not None  # Figures.jwt_mode
    return (
        f"{jwt.overhead_ms_p50:+.1f} ms on the first token at one chat (median of {jwt.pairs} pairs of chats beside "
        f"NONE) and {jwt.verify_cpu_us_p50 / 1000:.2f} ms of CPU per request ({jwt.algorithm})"
    )


def budgets_mode(f: Figures) -> str:
    """What the budgets per caller add to the first token at one chat (the budgets cell)."""
    budgets = f.budgets_mode()
    assert budgets.overhead_ms_p50 is not None  # Figures.budgets_mode
    return (
        f"{budgets.overhead_ms_p50:+.1f} ms on the first token at one chat (median of {budgets.pairs} pairs of chats "
        "beside a stack without budgets)"
    )


def cold_starts(f: Figures) -> str:
    return (
        f"relay {f.cold_start('relay'):.0f} ms, proxy {f.cold_start('proxy'):.0f} ms, consumer "
        f"{f.cold_start('consumer'):.0f} ms, on a machine that starts the smallest handler in "
        f"{f.cold_start('hello'):.0f} ms"
    )


def runtime_start(f: Figures) -> str:
    """How much later each handler starts on the streaming runtime than on awslambdaric (the deployed packages)."""
    parts = [
        f"{case} {f.cold_start(case, 'streaming') - f.cold_start(case, 'awslambdaric'):.1f} ms"
        for case in ("relay", "proxy", "consumer")
    ]
    hello = f.cold_start("hello", "streaming") - f.cold_start("hello", "awslambdaric")
    return f"{', '.join(parts)}; the smallest handler {hello:.1f} ms"


@dataclass(frozen=True)
class Quote:
    name: str
    render: Callable[[Figures], str]
    block: bool = False  # a table, on lines of its own


QUOTES = {
    quote.name: quote
    for quote in (
        Quote("run-date", run_date),
        Quote("first-token-overhead", first_token_overhead),
        Quote("aws-first-token-overhead", aws_first_token_overhead),
        Quote("cost-per-million", cost_per_million),
        Quote("idle-per-month", idle_per_month),
        Quote("glance", glance, block=True),
        Quote("pacing", pacing),
        Quote("read-modes", read_modes),
        Quote("concurrency", concurrency),
        Quote("first-token-cpu", first_token_cpu),
        Quote("jwt-mode", jwt_mode),
        Quote("budgets-mode", budgets_mode),
        Quote("cold-starts", cold_starts),
        Quote("runtime-start", runtime_start),
    )
}


# ------------------------------------------------------------------------------------------------- the documents


def figures(results_path: Path = RESULTS) -> Figures:
    raw: dict[str, Any] = json.loads(results_path.read_text(encoding="utf-8"))
    settings = capacity.Settings.from_template(Template.load())
    return Figures(BenchResults.from_json(raw), capacity.latency(raw, settings))


def markdown_files(root: Path = REPO_ROOT) -> list[Path]:
    """Every Markdown file of the repository but installed packages' and what tools keep (dot folders: the
    virtual environments, the build)."""
    found = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(name for name in subfolders if not name.startswith(".") and name not in SKIPPED_FOLDERS)
        found += [Path(folder) / name for name in sorted(files) if name.endswith(".md")]
    return found


def documents(root: Path = REPO_ROOT) -> list[Path]:
    """The Markdown files that may quote figures: all but the ones written whole from results.json."""
    generated = {root / name for name in GENERATED}
    return [path for path in markdown_files(root) if path not in generated]


def rewrite(text: str, f: Figures) -> str:
    """``text`` with every quote's body rendered from ``f``; a marker naming no quote is a :class:`QuoteError`."""

    def body(match: re.Match[str]) -> str:
        name = match["name"]
        quote = QUOTES.get(name)
        if quote is None:
            raise QuoteError(f"no quote named {name!r} (bench/quote.py's QUOTES)")
        rendered = quote.render(f)
        inner = f"\n\n{rendered}\n\n" if quote.block else rendered
        return f"<!-- bench:{name} -->{inner}<!-- /bench -->"

    return MARKER.sub(body, text)


def stale(f: Figures, paths: Sequence[Path]) -> list[Path]:
    """The documents whose quotes are not what ``f`` gives."""
    return [path for path in paths if rewrite(text := path.read_text(encoding="utf-8"), f) != text]


def write(f: Figures, paths: Sequence[Path]) -> list[Path]:
    """Rewrite the quotes of ``paths`` from ``f``; the documents changed."""
    changed = stale(f, paths)
    for path in changed:
        path.write_text(rewrite(path.read_text(encoding="utf-8"), f), encoding="utf-8")
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.quote", description="Rewrite the documents' quoted figures from bench/results.json."
    )
    parser.add_argument("--results", type=Path, default=RESULTS, help="the benchmark's results.json")
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    try:
        f = figures(args.results)
        paths = documents()
        if args.check:
            differ = stale(f, paths)
            for path in differ:
                sys.stderr.write(f"quote: {path.relative_to(REPO_ROOT)} is not what {args.results} gives\n")
            if differ:
                sys.stderr.write("quote: run python -m bench.quote (make bench runs it)\n")
            return 1 if differ else 0
        for path in write(f, paths):
            sys.stderr.write(f"quote: rewrote {path.relative_to(REPO_ROOT)}\n")
    except QuoteError as err:
        sys.stderr.write(f"quote: {err}\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
