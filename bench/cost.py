"""The cost model: AWS list prices (one place, dated, one region) applied to measured unit counts.

Prices are the public on-demand list prices for US East (N. Virginia), us-east-1, as published on the AWS pricing
pages on the date below. Only usage-proportional charges are modelled; fixed charges (the on-demand stream's
hourly charge, shard hours, storage, free tiers) are left out because they do not scale with tokens.

Billing rules applied (from the same pages):
- Kinesis on demand: data in per GB, each record rounded up to the next 1 KB; data out per GB (the consumer
  reads every record once; approximated with the same rounded size). Provisioned mode: PUT payload units of
  25 KB, at least one per record.
- DynamoDB on demand: one write request unit per 1 KB of item written (twice for a transactional write), one
  read request unit per 4 KB read with strong consistency (half with eventual consistency), at least one per
  request.
- Lambda arm64: per request, and per GB-second of configured memory times measured duration.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

PRICES_AS_OF = "2025-06-01"
REGION = "us-east-1"
SOURCES = {
    "kinesis": "https://aws.amazon.com/kinesis/data-streams/pricing/",
    "dynamodb": "https://aws.amazon.com/dynamodb/pricing/on-demand/",
    "lambda": "https://aws.amazon.com/lambda/pricing/",
}

KINESIS_ON_DEMAND_PER_GB_IN = 0.08  # USD per GB of data ingested (records rounded up to 1 KB)
KINESIS_ON_DEMAND_PER_GB_OUT = 0.04  # USD per GB of data retrieved
KINESIS_PROVISIONED_PER_MILLION_PUT_UNITS = 0.014  # USD per million 25 KB PUT payload units
DYNAMODB_PER_MILLION_WRITE_UNITS = 0.625  # USD per million write request units (on demand, since 2024-11-01)
DYNAMODB_PER_MILLION_READ_UNITS = 0.125  # USD per million read request units (on demand, since 2024-11-01)
LAMBDA_PER_MILLION_REQUESTS = 0.20  # USD per million requests
LAMBDA_ARM64_PER_GB_SECOND = 0.0000133334  # USD per GB-second, arm64, first 7.5 billion GB-s a month

GB = 1024**3
MILLION = 1_000_000


@dataclass(frozen=True)
class UnitCounts:
    """What a workload consumed, in the units AWS bills, for ``tokens`` output tokens (model deltas)."""

    tokens: int
    kinesis_ingest_kb: float = 0.0
    kinesis_put_payload_units: float = 0.0
    dynamodb_write_units: float = 0.0
    dynamodb_read_units: float = 0.0
    lambda_requests: float = 0.0
    lambda_gb_seconds: float = 0.0

    def __add__(self, other: UnitCounts) -> UnitCounts:
        return UnitCounts(**{name: value + getattr(other, name) for name, value in asdict(self).items()})


@dataclass(frozen=True)
class CostBreakdown:
    """USD per million output tokens, by service (Kinesis on demand; the provisioned alternative beside it)."""

    kinesis: float
    kinesis_provisioned_put_units: float
    dynamodb_writes: float
    dynamodb_reads: float
    lambda_requests: float
    lambda_duration: float

    @property
    def total(self) -> float:
        return self.kinesis + self.dynamodb_writes + self.dynamodb_reads + self.lambda_requests + self.lambda_duration

    def to_dict(self) -> dict[str, float]:
        return {**{k: round(v, 4) for k, v in asdict(self).items()}, "total": round(self.total, 4)}


def cost_per_million_tokens(units: UnitCounts) -> CostBreakdown:
    """The usage-proportional cost of ``units``, scaled to one million output tokens."""
    if units.tokens <= 0:
        raise ValueError("the workload produced no tokens; its cost per token is undefined")
    scale = MILLION / units.tokens
    ingest_gb = units.kinesis_ingest_kb * 1024 / GB
    return CostBreakdown(
        kinesis=scale * ingest_gb * (KINESIS_ON_DEMAND_PER_GB_IN + KINESIS_ON_DEMAND_PER_GB_OUT),
        kinesis_provisioned_put_units=scale
        * units.kinesis_put_payload_units
        * KINESIS_PROVISIONED_PER_MILLION_PUT_UNITS
        / MILLION,
        dynamodb_writes=scale * units.dynamodb_write_units * DYNAMODB_PER_MILLION_WRITE_UNITS / MILLION,
        dynamodb_reads=scale * units.dynamodb_read_units * DYNAMODB_PER_MILLION_READ_UNITS / MILLION,
        lambda_requests=scale * units.lambda_requests * LAMBDA_PER_MILLION_REQUESTS / MILLION,
        lambda_duration=scale * units.lambda_gb_seconds * LAMBDA_ARM64_PER_GB_SECOND,
    )


def price_table() -> dict[str, object]:
    """The constants, for results.json's environment."""
    return {
        "as_of": PRICES_AS_OF,
        "region": REGION,
        "sources": SOURCES,
        "kinesis_on_demand_per_gb_in": KINESIS_ON_DEMAND_PER_GB_IN,
        "kinesis_on_demand_per_gb_out": KINESIS_ON_DEMAND_PER_GB_OUT,
        "kinesis_provisioned_per_million_put_units": KINESIS_PROVISIONED_PER_MILLION_PUT_UNITS,
        "dynamodb_per_million_write_units": DYNAMODB_PER_MILLION_WRITE_UNITS,
        "dynamodb_per_million_read_units": DYNAMODB_PER_MILLION_READ_UNITS,
        "lambda_per_million_requests": LAMBDA_PER_MILLION_REQUESTS,
        "lambda_arm64_per_gb_second": LAMBDA_ARM64_PER_GB_SECOND,
    }
