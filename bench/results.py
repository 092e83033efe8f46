"""results.json as typed records: :class:`BenchResults`, what ``make bench`` measured, from the measurement to the
report.

``bench/run.py`` builds one from its cells (:class:`~bench.records.RunRecord`), each pipeline variant's first-token
path (:class:`~bench.firsttoken.FirstTokenPath`), the cold starts (:class:`~bench.coldstart.ColdStart`), the JWT
cell (:class:`~bench.jwt_mode.JwtOverhead`), the budgets cell (:class:`~bench.budgets_mode.BudgetsOverhead`), the
costs (:class:`Costs`) and the run's :class:`Environment`;
:meth:`BenchResults.to_json` is the file's document and :meth:`BenchResults.load` reads a file back (the committed
``bench/results.json`` among them), so ``bench/report.py`` writes results.md and results.png from records, never
from the document's keys.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from bench.budgets_mode import BudgetsOverhead
from bench.coldstart import ColdStart
from bench.firsttoken import FirstTokenPath
from bench.jwt_mode import JwtOverhead
from bench.records import RunRecord

if TYPE_CHECKING:
    from collections.abc import Mapping

    from bench.cost import CostBreakdown, FixedMonthly


@dataclass(frozen=True)
class Machine:
    platform: str
    python: str
    cpus: int | None
    processor: str


@dataclass(frozen=True)
class SpreadArrivals:
    """The informative cells' workload: chats sent ``gap_ms`` apart instead of all at once."""

    gap_ms: int
    concurrency: tuple[int, ...]
    model_delay_ms: int


@dataclass(frozen=True)
class WorkloadInfo:
    """The workload as results.json describes it (``bench.run.Workload``, for a reader)."""

    message: str
    deltas_per_reply: int
    model_delays_ms: tuple[int, ...]
    concurrency: tuple[int, ...]
    chats_at_concurrency_1: int
    chats_at_higher_concurrency: str
    rounds_up_to_10_at_once: int
    spread_arrivals: SpreadArrivals
    naive_max_concurrency: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {
            "model_delays_ms": list(self.model_delays_ms),
            "concurrency": list(self.concurrency),
            "spread_arrivals": asdict(self.spread_arrivals) | {"concurrency": list(self.spread_arrivals.concurrency)},
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> WorkloadInfo:
        spread = raw["spread_arrivals"]
        return cls(
            message=raw["message"],
            deltas_per_reply=raw["deltas_per_reply"],
            model_delays_ms=tuple(raw["model_delays_ms"]),
            concurrency=tuple(raw["concurrency"]),
            chats_at_concurrency_1=raw["chats_at_concurrency_1"],
            chats_at_higher_concurrency=raw["chats_at_higher_concurrency"],
            rounds_up_to_10_at_once=raw.get("rounds_up_to_10_at_once", 1),
            spread_arrivals=SpreadArrivals(spread["gap_ms"], tuple(spread["concurrency"]), spread["model_delay_ms"]),
            naive_max_concurrency=raw["naive_max_concurrency"],
        )


# The settings' keys that are not a variant's.
_SETTINGS_KEYS = ("read_modes", "fan_out_latency_ms", "template_sha1")


@dataclass(frozen=True)
class Settings:
    """What each variant changed, how each pipeline variant's consumer read the stream, and the template measured."""

    variants: dict[str, Any]  # variant -> what it changed (functions' variables, parameters) or a description
    read_modes: dict[str, str]  # pipeline variant -> ``polling`` or ``enhanced-fan-out``
    fan_out_latency_ms: int
    template_sha1: str

    def to_json(self) -> dict[str, Any]:
        return {
            **self.variants,
            "read_modes": dict(self.read_modes),
            "fan_out_latency_ms": self.fan_out_latency_ms,
            "template_sha1": self.template_sha1,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Settings:
        return cls(
            variants={key: value for key, value in raw.items() if key not in _SETTINGS_KEYS},
            read_modes=dict(raw.get("read_modes", {})),
            fan_out_latency_ms=raw["fan_out_latency_ms"],
            template_sha1=raw["template_sha1"],
        )


@dataclass(frozen=True)
class Prices:
    """The list prices the costs were computed with (``bench.cost.price_table``)."""

    as_of: str  # DynamoDB and Lambda
    kinesis_as_of: str
    region: str
    sources: dict[str, str]
    per_unit: dict[str, float]  # every other entry: hours a month, and each unit's price

    def to_json(self) -> dict[str, Any]:
        named = {"as_of": self.as_of, "kinesis_as_of": self.kinesis_as_of, "region": self.region}
        return named | {"sources": dict(self.sources)} | self.per_unit

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Prices:
        named = ("as_of", "kinesis_as_of", "region", "sources")
        return cls(
            as_of=raw["as_of"],
            kinesis_as_of=raw.get("kinesis_as_of", raw["as_of"]),
            region=raw["region"],
            sources=dict(raw["sources"]),
            per_unit={key: value for key, value in raw.items() if key not in named},
        )


@dataclass(frozen=True)
class Environment:
    """Where and how the run ran (results.json's ``environment``)."""

    machine: Machine
    versions: dict[str, str]
    started_at: str
    workload: WorkloadInfo
    settings: Settings
    prices: Prices
    note: str
    duration_s: float | None = None  # the whole run's, set when it ends

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "machine": asdict(self.machine),
            "versions": dict(self.versions),
            "started_at": self.started_at,
            "workload": self.workload.to_json(),
            "settings": self.settings.to_json(),
            "prices": self.prices.to_json(),
            "note": self.note,
        }
        if self.duration_s is not None:
            out["duration_s"] = self.duration_s
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Environment:
        return cls(
            machine=Machine(**raw["machine"]),
            versions=dict(raw["versions"]),
            started_at=raw["started_at"],
            workload=WorkloadInfo.from_json(raw["workload"]),
            settings=Settings.from_json(raw["settings"]),
            prices=Prices.from_json(raw["prices"]),
            note=raw["note"],
            duration_s=raw.get("duration_s"),
        )


@dataclass(frozen=True)
class ServiceCosts:
    """A variant's cost per million output tokens, by service, as results.json holds it: each figure rounded, and
    the total of the unrounded ones (``bench.cost.CostBreakdown``)."""

    kinesis: float
    kinesis_provisioned: float
    dynamodb_writes: float
    dynamodb_reads: float
    lambda_requests: float
    lambda_duration: float
    total: float

    @classmethod
    def of(cls, breakdown: CostBreakdown) -> ServiceCosts:
        return cls(**breakdown.to_dict())


@dataclass(frozen=True)
class HourlyCosts:
    """USD a month whatever the traffic, rounded as results.json holds it (``bench.cost.FixedMonthly``)."""

    stream: float
    enhanced_fan_out: float
    total: float

    @classmethod
    def of(cls, fixed: FixedMonthly) -> HourlyCosts:
        return cls(**fixed.to_dict())


@dataclass(frozen=True)
class Costs:
    """What the measured units cost (``bench.run.costs``): per variant and service, and by the hour."""

    breakdowns: dict[str, ServiceCosts]  # variant -> its cost per million output tokens
    basis: str  # which runs, at which prices
    fixed_monthly: dict[str, dict[str, HourlyCosts]]  # stream mode -> read mode -> monthly charges

    def to_json(self) -> dict[str, Any]:
        return {
            "cost_per_million_output_tokens": {variant: costs.total for variant, costs in self.breakdowns.items()},
            "cost_breakdown_per_million_output_tokens": {
                variant: asdict(costs) for variant, costs in self.breakdowns.items()
            },
            "cost_basis": self.basis,
            "fixed_monthly_usd": {
                stream_mode: {read_mode: asdict(costs) for read_mode, costs in by_read_mode.items()}
                for stream_mode, by_read_mode in self.fixed_monthly.items()
            },
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Costs:
        return cls(
            breakdowns={
                variant: ServiceCosts(**costs)
                for variant, costs in raw.get("cost_breakdown_per_million_output_tokens", {}).items()
            },
            basis=raw.get("cost_basis", ""),
            fixed_monthly={
                stream_mode: {read_mode: HourlyCosts(**costs) for read_mode, costs in by_read_mode.items()}
                for stream_mode, by_read_mode in raw.get("fixed_monthly_usd", {}).items()
            },
        )


@dataclass(frozen=True)
class BenchResults:
    """One ``make bench``: its environment, its cells and everything measured beside them (results.json)."""

    environment: Environment
    runs: tuple[RunRecord, ...]
    first_token_path: tuple[FirstTokenPath, ...] = ()
    spread_arrivals: tuple[RunRecord, ...] = ()  # informative cells: chats sent apart instead of at once
    cold_start: ColdStart | None = None
    costs: Costs = field(default_factory=lambda: Costs({}, "", {}))
    jwt_mode: JwtOverhead | None = None  # the JWT auth mode beside NONE (runs before it had none)
    budgets_mode: BudgetsOverhead | None = None  # the budgets per caller beside none (runs before it had none)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "environment": self.environment.to_json(),
            "runs": [run.to_json() for run in self.runs],
            "first_token_path": [path.to_json() for path in self.first_token_path],
            "spread_arrivals": [run.to_json() for run in self.spread_arrivals],
        }
        if self.cold_start is not None:
            out["cold_start"] = self.cold_start.to_json()
        if self.jwt_mode is not None:
            out["jwt_mode"] = self.jwt_mode.to_json()
        if self.budgets_mode is not None:
            out["budgets_mode"] = self.budgets_mode.to_json()
        return out | self.costs.to_json()

    def dumps(self) -> str:
        """results.json's text."""
        return json.dumps(self.to_json(), indent=1) + "\n"

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> BenchResults:
        cold_start = raw.get("cold_start")
        return cls(
            environment=Environment.from_json(raw["environment"]),
            runs=tuple(RunRecord.from_json(run) for run in raw["runs"]),
            first_token_path=tuple(FirstTokenPath.from_json(path) for path in raw.get("first_token_path") or ()),
            spread_arrivals=tuple(RunRecord.from_json(run) for run in raw.get("spread_arrivals") or ()),
            cold_start=None if not cold_start else ColdStart.from_json(cold_start),
            costs=Costs.from_json(raw),
            jwt_mode=JwtOverhead.from_json(raw["jwt_mode"]) if raw.get("jwt_mode") else None,
            budgets_mode=BudgetsOverhead.from_json(raw["budgets_mode"]) if raw.get("budgets_mode") else None,
        )

    @classmethod
    def loads(cls, text: str) -> BenchResults:
        return cls.from_json(json.loads(text))
