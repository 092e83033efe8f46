"""The benchmark's run records: for one cell (a variant at a model delay and a number of chats), what its
clients measured, what it cost in AWS calls and billed units, and the CPU it took.

Each part is built from what a cell measured (``ClientMeasures.of`` from the clients' samples, ``AwsUsage.of``
from moto's call counts, ``CpuUse.of`` from ``/proc``); :meth:`RunRecord.to_json` gives the object results.json
holds, and :meth:`RunRecord.from_json` reads a committed file's back (``bench.results.BenchResults`` holds the
records of a whole run, and ``bench/report.py`` is written from them).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from bench.cost import UnitCounts

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from bench.load import ChatSample

# What moto counts, per caller (relay, proxy, consumer) and operation: calls, items, seconds, billed units.
MotoCounts = dict[str, dict[str, dict[str, float]]]
WRITE_OPS = ("PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems")


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (``q`` in 0..100); ``None`` for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _r(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def _rounded(value: float, digits: int = 1) -> float:
    return round(value, digits)


def op_sum(
    counts: MotoCounts, field_name: str, *, label: str | None = None, ops: tuple[str, ...] | None = None
) -> float:
    """``field_name`` summed over the callers (or only ``label``) and operations (or only ``ops``)."""
    total = 0.0
    for who, by_op in counts.items():
        if label is not None and who != label:
            continue
        for op, values in by_op.items():
            if ops is None or op in ops:
                total += values.get(field_name, 0.0)
    return total


@dataclass(frozen=True)
class Cell:
    """Which run this is: the variant, the model's delay per delta, and how many chats ran at once."""

    variant: str
    model_delay_ms: int
    concurrency: int
    arrival_gap_ms: int | None = None  # the chats were sent this far apart instead of all at once


@dataclass(frozen=True)
class TtftMs:
    p50: float | None
    p95: float | None
    p99: float | None


@dataclass(frozen=True)
class GapMs:
    p50: float | None
    p99: float | None


@dataclass(frozen=True)
class ClientMeasures:
    """What the clients saw, by their own clock."""

    chats: int
    exact: bool  # every reply exactly the model's, ended by done, with contiguous ids, each sent once, never cut
    failures: tuple[str | None, ...]  # the first three failed or unclean chats' errors
    ttft_ms: TtftMs
    gap_ms: GapMs
    tokens_per_s: float
    token_events_per_chat: float
    wall_s: float
    ttft_samples_ms: tuple[float, ...]
    gap_samples_ms: tuple[float, ...]
    # Summed over the chats; None in results written before the client counted them.
    repeated_ids: int | None = None  # token events a relay sent twice
    unplanned_resumes: int | None = None  # streams that ended early or broke, resumed by the client
    retries: int | None = None  # requests sent again after 429/5xx or a failed connection

    @classmethod
    def of(cls, samples: Sequence[ChatSample], wall_s: float, expected: str) -> ClientMeasures:
        ttfts = [s.ttft_ms for s in samples if s.ttft_ms is not None]
        gaps = [g for s in samples for g in s.gaps_ms]
        return cls(
            chats=len(samples),
            exact=all(
                s.ok and s.text == expected and s.ids_contiguous and not s.repeated_ids and not s.unplanned_resumes
                for s in samples
            ),
            failures=tuple(s.error for s in samples if not s.ok or s.error is not None)[:3],
            ttft_ms=TtftMs(_r(percentile(ttfts, 50)), _r(percentile(ttfts, 95)), _r(percentile(ttfts, 99))),
            gap_ms=GapMs(_r(percentile(gaps, 50), 2), _r(percentile(gaps, 99), 2)),
            tokens_per_s=_rounded(tokens_of(samples) / wall_s if wall_s else 0.0),
            token_events_per_chat=_rounded(sum(s.token_events for s in samples) / max(len(samples), 1)),
            wall_s=_rounded(wall_s, 2),
            ttft_samples_ms=tuple(_rounded(v) for v in ttfts),
            gap_samples_ms=tuple(_rounded(v, 2) for v in gaps),
            repeated_ids=sum(s.repeated_ids for s in samples),
            unplanned_resumes=sum(s.unplanned_resumes for s in samples),
            retries=sum(s.retries for s in samples),
        )


def tokens_of(samples: Sequence[ChatSample]) -> int:
    """Output tokens the chats received: ``/long N`` replies are one word per model delta."""
    return sum(len(s.text.split()) for s in samples)


@dataclass(frozen=True)
class AwsUsage:
    """The AWS calls the pipeline made (as moto counted them) and the units AWS would bill for the cell."""

    kinesis_records_per_1k_tokens: float
    put_calls_per_1k_tokens: float
    dynamodb_writes_per_1k_tokens: float  # every item written, the turn and session writes included
    dynamodb_token_item_writes_per_1k_tokens: float  # the consumer's token items alone
    relay_queries_per_turn: float
    upstream_ms_per_call: Mapping[str, float]  # "<caller>.<operation>": mean time moto took to serve it
    calls: Mapping[str, int]  # "<caller>.<operation>": how many
    units: UnitCounts

    @classmethod
    def of(cls, counts: MotoCounts, tokens: int, chats: int, units: UnitCounts) -> AwsUsage:
        per_1k = 1000 / tokens if tokens else 0.0
        return cls(
            kinesis_records_per_1k_tokens=_rounded(op_sum(counts, "items", ops=("PutRecords",)) * per_1k, 2),
            put_calls_per_1k_tokens=_rounded(op_sum(counts, "calls", ops=("PutRecords",)) * per_1k, 2),
            dynamodb_writes_per_1k_tokens=_rounded(op_sum(counts, "items", ops=WRITE_OPS) * per_1k, 2),
            dynamodb_token_item_writes_per_1k_tokens=_rounded(
                op_sum(counts, "items", label="consumer", ops=("BatchWriteItem",)) * per_1k, 2
            ),
            relay_queries_per_turn=_rounded(op_sum(counts, "calls", label="relay", ops=("Query",)) / max(chats, 1)),
            upstream_ms_per_call={
                f"{who}.{op}": _rounded(v["seconds"] * 1000 / v["calls"], 2)
                for who, by_op in sorted(counts.items())
                for op, v in sorted(by_op.items())
                if v["calls"]
            },
            calls={
                f"{who}.{op}": int(v["calls"])
                for who, by_op in sorted(counts.items())
                for op, v in sorted(by_op.items())
            },
            units=units,
        )


@dataclass(frozen=True)
class CpuUse:
    """CPU milliseconds per 1,000 tokens, of the relay and of every process (``/proc``, see ``bench.procstat``).

    ``None`` is "not measured": no process of the relay was found, or one exited during the cell (its CPU went
    with it). It is never reported as 0.
    """

    relay_cpu_ms_per_1k_tokens: float | None
    cpu_ms_per_1k_tokens_by_process: Mapping[str, float | None]
    # role (relay, proxy, consumer) -> CPU ms per 1,000 tokens; empty in results written before it was kept
    cpu_ms_per_1k_tokens_by_function: Mapping[str, float | None] = field(default_factory=dict)

    @classmethod
    def of(
        cls, cpu_s: Mapping[str, float | None], relay: str, tokens: int, functions: Mapping[str, str] | None = None
    ) -> CpuUse:
        """``functions``: role -> function name, for the per-function figures (a role not measured is ``None``)."""
        per_1k = 1000 / tokens if tokens else 0.0

        def per_1k_ms(seconds: float | None) -> float | None:
            return None if seconds is None else _rounded(seconds * 1000 * per_1k)

        return cls(
            relay_cpu_ms_per_1k_tokens=per_1k_ms(cpu_s.get(relay)),
            cpu_ms_per_1k_tokens_by_process={k: per_1k_ms(v) for k, v in sorted(cpu_s.items())},
            cpu_ms_per_1k_tokens_by_function={
                role: per_1k_ms(cpu_s.get(name)) for role, name in (functions or {}).items()
            },
        )


@dataclass(frozen=True)
class RunRecord:
    """One cell of the benchmark, as results.json holds it."""

    cell: Cell
    clients: ClientMeasures
    aws: AwsUsage
    cpu: CpuUse

    def to_json(self) -> dict[str, Any]:
        """results.json's object for this run (its keys and their order)."""
        cell, clients, aws, cpu = self.cell, self.clients, self.aws, self.cpu
        out: dict[str, Any] = {
            "variant": cell.variant,
            "model_delay_ms": cell.model_delay_ms,
            "concurrency": cell.concurrency,
            "chats": clients.chats,
            "exact": clients.exact,
            "failures": list(clients.failures),
            **{
                name: value
                for name, value in (
                    ("repeated_ids", clients.repeated_ids),
                    ("unplanned_resumes", clients.unplanned_resumes),
                    ("retries", clients.retries),
                )
                if value is not None
            },
            "ttft_ms": asdict(clients.ttft_ms),
            "gap_ms": asdict(clients.gap_ms),
            "tokens_per_s": clients.tokens_per_s,
            "token_events_per_chat": clients.token_events_per_chat,
            "wall_s": clients.wall_s,
            "kinesis_records_per_1k_tokens": aws.kinesis_records_per_1k_tokens,
            "put_calls_per_1k_tokens": aws.put_calls_per_1k_tokens,
            "dynamodb_writes_per_1k_tokens": aws.dynamodb_writes_per_1k_tokens,
            "dynamodb_token_item_writes_per_1k_tokens": aws.dynamodb_token_item_writes_per_1k_tokens,
            "relay_queries_per_turn": aws.relay_queries_per_turn,
            "relay_cpu_ms_per_1k_tokens": cpu.relay_cpu_ms_per_1k_tokens,
            "cpu_ms_per_1k_tokens_by_process": dict(cpu.cpu_ms_per_1k_tokens_by_process),
            "upstream_ms_per_call": dict(aws.upstream_ms_per_call),
            "calls": dict(aws.calls),
            "units": asdict(aws.units),
            "ttft_samples_ms": list(clients.ttft_samples_ms),
            "gap_samples_ms": list(clients.gap_samples_ms),
        }
        if cpu.cpu_ms_per_1k_tokens_by_function:
            out["cpu_ms_per_1k_tokens_by_function"] = dict(cpu.cpu_ms_per_1k_tokens_by_function)
        if cell.arrival_gap_ms is not None:
            out["arrival_gap_ms"] = cell.arrival_gap_ms
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> RunRecord:
        """A run of a results.json (as :meth:`to_json` writes it)."""
        return cls(
            cell=Cell(raw["variant"], raw["model_delay_ms"], raw["concurrency"], raw.get("arrival_gap_ms")),
            clients=ClientMeasures(
                chats=raw["chats"],
                exact=raw["exact"],
                failures=tuple(raw["failures"]),
                ttft_ms=TtftMs(**raw["ttft_ms"]),
                gap_ms=GapMs(**raw["gap_ms"]),
                tokens_per_s=raw["tokens_per_s"],
                token_events_per_chat=raw["token_events_per_chat"],
                wall_s=raw["wall_s"],
                ttft_samples_ms=tuple(raw["ttft_samples_ms"]),
                gap_samples_ms=tuple(raw["gap_samples_ms"]),
                repeated_ids=raw.get("repeated_ids"),
                unplanned_resumes=raw.get("unplanned_resumes"),
                retries=raw.get("retries"),
            ),
            aws=AwsUsage(
                kinesis_records_per_1k_tokens=raw["kinesis_records_per_1k_tokens"],
                put_calls_per_1k_tokens=raw["put_calls_per_1k_tokens"],
                dynamodb_writes_per_1k_tokens=raw["dynamodb_writes_per_1k_tokens"],
                dynamodb_token_item_writes_per_1k_tokens=raw["dynamodb_token_item_writes_per_1k_tokens"],
                relay_queries_per_turn=raw["relay_queries_per_turn"],
                upstream_ms_per_call=dict(raw["upstream_ms_per_call"]),
                calls=dict(raw["calls"]),
                units=UnitCounts(**raw["units"]),
            ),
            cpu=CpuUse(
                relay_cpu_ms_per_1k_tokens=raw["relay_cpu_ms_per_1k_tokens"],
                cpu_ms_per_1k_tokens_by_process=dict(raw["cpu_ms_per_1k_tokens_by_process"]),
                cpu_ms_per_1k_tokens_by_function=dict(raw.get("cpu_ms_per_1k_tokens_by_function", {})),
            ),
        )
