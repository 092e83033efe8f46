"""The cost model: AWS list prices (one place, dated, one region) applied to measured unit counts.

Prices are the public list prices for US East (N. Virginia), us-east-1. DynamoDB and Lambda: their pricing pages as
of ``PRICES_AS_OF``. Kinesis Data Streams, as of ``KINESIS_PRICES_AS_OF`` (the pricing page renders its tables from
price tokens, so each figure was checked against a dated AWS source that states it):

- on-demand (Standard) mode: $0.04 per stream-hour, $0.08 per GB ingested, $0.04 per GB retrieved by shared-throughput
  (``GetRecords``) consumers, $0.05 per GB retrieved by enhanced fan-out consumers: AWS Big Data Blog, "Kinesis
  On-demand Advantage saves 60%+ on streaming costs" (2026-03-09, us-east-1 prices); the Kinesis developer guide
  ("Choose the right mode to stream in") names the premium of enhanced fan-out retrievals in this mode.
  On-demand has no consumer-shard-hour charge: its price-list usage types are ``OnDemand-StreamHour``,
  ``OnDemand-BilledIncomingBytes``, ``OnDemand-BilledOutgoingBytes`` and ``OnDemand-BilledOutgoingEFOBytes``.
- provisioned mode: $0.015 per shard-hour, $0.014 per million 25 KB PUT payload units, and for enhanced fan-out
  $0.015 per consumer-shard hour (usage type ``EnhancedFanoutHour``) and $0.013 per GB retrieved (``ReadBytes``):
  the AWS Price List API for us-east-1 (effective 2023-06-01, published 2023-08-01), the figures cost tools still
  quote in 2026.

Usage-proportional charges are priced per million output tokens; the charges that accrue by the hour whatever the
traffic (the on-demand stream-hour, provisioned shard-hours, enhanced fan-out's consumer-shard hours) are given apart
as a monthly figure (:func:`fixed_monthly`). Storage and free tiers are left out.

Billing rules applied (from the same pages):
- Kinesis on demand: data in per GB, each record rounded up to the next 1 KB; data out per GB at the price of the
  consumer's read mode (one consumer reads every record once; approximated with the same rounded size). Provisioned
  mode: PUT payload units of 25 KB, at least one per record; reads are included in the shard-hours, except enhanced
  fan-out's, billed per GB and per consumer-shard hour.
- DynamoDB on demand: one write request unit per 1 KB of item written (twice for a transactional write), one
  read request unit per 4 KB read with strong consistency (half with eventual consistency), at least one per
  request.
- Lambda arm64: per request, and per GB-second of configured memory times measured duration.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

PRICES_AS_OF = "2025-06-01"  # DynamoDB and Lambda
KINESIS_PRICES_AS_OF = "2026-12-01"  # checked against the sources in the module docstring on this date
REGION = "us-east-1"
SOURCES = {
    "kinesis": "https://aws.amazon.com/kinesis/data-streams/pricing/",
    "dynamodb": "https://aws.amazon.com/dynamodb/pricing/on-demand/",
    "lambda": "https://aws.amazon.com/lambda/pricing/",
}

ON_DEMAND = "ON_DEMAND"
PROVISIONED = "PROVISIONED"
HOURS_PER_MONTH = 730  # AWS's pricing examples use 730 hours a month

KINESIS_ON_DEMAND_PER_STREAM_HOUR = 0.04  # USD per stream-hour, whatever the traffic
KINESIS_ON_DEMAND_PER_GB_IN = 0.08  # USD per GB of data ingested (records rounded up to 1 KB)
KINESIS_ON_DEMAND_PER_GB_OUT = 0.04  # USD per GB retrieved by a shared-throughput (polling) consumer
KINESIS_ON_DEMAND_EFO_PER_GB_OUT = 0.05  # USD per GB retrieved by an enhanced fan-out consumer
KINESIS_PROVISIONED_PER_SHARD_HOUR = 0.015  # USD per shard-hour (reads by polling consumers included)
KINESIS_PROVISIONED_PER_MILLION_PUT_UNITS = 0.014  # USD per million 25 KB PUT payload units
KINESIS_PROVISIONED_EFO_PER_CONSUMER_SHARD_HOUR = 0.015  # USD per enhanced fan-out consumer-shard hour
KINESIS_PROVISIONED_EFO_PER_GB_OUT = 0.013  # USD per GB retrieved by an enhanced fan-out consumer
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
    """USD per million output tokens, by service, with an on-demand stream (the provisioned alternative beside it).

    ``kinesis`` is on demand: data in, and data out at the read mode's price. ``kinesis_provisioned`` is what
    the same records would cost a provisioned stream by usage: PUT payload units, and enhanced fan-out's retrievals.
    """

    kinesis: float
    kinesis_provisioned: float
    dynamodb_writes: float
    dynamodb_reads: float
    lambda_requests: float
    lambda_duration: float

    @property
    def total(self) -> float:
        return self.kinesis + self.dynamodb_writes + self.dynamodb_reads + self.lambda_requests + self.lambda_duration

    def to_dict(self) -> dict[str, float]:
        return {**{k: round(v, 4) for k, v in asdict(self).items()}, "total": round(self.total, 4)}


def cost_per_million_tokens(units: UnitCounts, *, enhanced_fan_out: bool = False) -> CostBreakdown:
    """The usage-proportional cost of ``units``, scaled to one million output tokens, for a consumer that reads
    the stream through enhanced fan-out or by polling it."""
    if units.tokens <= 0:
        raise ValueError("the workload produced no tokens; its cost per token is undefined")
    scale = MILLION / units.tokens
    gigabytes = units.kinesis_ingest_kb * 1024 / GB  # in, and out once: the consumer reads every record once
    out_price = KINESIS_ON_DEMAND_EFO_PER_GB_OUT if enhanced_fan_out else KINESIS_ON_DEMAND_PER_GB_OUT
    provisioned_out = gigabytes * KINESIS_PROVISIONED_EFO_PER_GB_OUT if enhanced_fan_out else 0.0
    put_units = units.kinesis_put_payload_units * KINESIS_PROVISIONED_PER_MILLION_PUT_UNITS / MILLION
    return CostBreakdown(
        kinesis=scale * gigabytes * (KINESIS_ON_DEMAND_PER_GB_IN + out_price),
        kinesis_provisioned=scale * (put_units + provisioned_out),
        dynamodb_writes=scale * units.dynamodb_write_units * DYNAMODB_PER_MILLION_WRITE_UNITS / MILLION,
        dynamodb_reads=scale * units.dynamodb_read_units * DYNAMODB_PER_MILLION_READ_UNITS / MILLION,
        lambda_requests=scale * units.lambda_requests * LAMBDA_PER_MILLION_REQUESTS / MILLION,
        lambda_duration=scale * units.lambda_gb_seconds * LAMBDA_ARM64_PER_GB_SECOND,
    )


@dataclass(frozen=True)
class FixedMonthly:
    """USD a month that accrue by the hour whatever the traffic: the stream's own hours, and enhanced fan-out's."""

    stream: float  # on demand: the stream-hour; provisioned: shard-hours
    enhanced_fan_out: float  # consumer-shard hours (provisioned only; on demand bills enhanced fan-out per GB)

    @property
    def total(self) -> float:
        return self.stream + self.enhanced_fan_out

    def to_dict(self) -> dict[str, float]:
        return {**{k: round(v, 2) for k, v in asdict(self).items()}, "total": round(self.total, 2)}


def fixed_monthly(stream_mode: str, *, enhanced_fan_out: bool, shards: int = 1) -> FixedMonthly:
    """The hourly charges of one stream with one consumer for a month, in ``stream_mode`` (``ON_DEMAND`` or
    ``PROVISIONED`` with ``shards``)."""
    if shards < 1:
        raise ValueError(f"a stream has at least one shard, got {shards}")
    if stream_mode == ON_DEMAND:
        return FixedMonthly(stream=KINESIS_ON_DEMAND_PER_STREAM_HOUR * HOURS_PER_MONTH, enhanced_fan_out=0.0)
    if stream_mode == PROVISIONED:
        shard_hours = shards * HOURS_PER_MONTH
        consumer = KINESIS_PROVISIONED_EFO_PER_CONSUMER_SHARD_HOUR * shard_hours if enhanced_fan_out else 0.0
        return FixedMonthly(stream=KINESIS_PROVISIONED_PER_SHARD_HOUR * shard_hours, enhanced_fan_out=consumer)
    raise ValueError(f"StreamMode must be {ON_DEMAND} or {PROVISIONED}, got {stream_mode!r}")


def price_table() -> dict[str, object]:
    """The constants, for results.json's environment."""
    return {
        "as_of": PRICES_AS_OF,
        "kinesis_as_of": KINESIS_PRICES_AS_OF,
        "region": REGION,
        "sources": SOURCES,
        "hours_per_month": HOURS_PER_MONTH,
        "kinesis_on_demand_per_stream_hour": KINESIS_ON_DEMAND_PER_STREAM_HOUR,
        "kinesis_on_demand_per_gb_in": KINESIS_ON_DEMAND_PER_GB_IN,
        "kinesis_on_demand_per_gb_out": KINESIS_ON_DEMAND_PER_GB_OUT,
        "kinesis_on_demand_efo_per_gb_out": KINESIS_ON_DEMAND_EFO_PER_GB_OUT,
        "kinesis_provisioned_per_shard_hour": KINESIS_PROVISIONED_PER_SHARD_HOUR,
        "kinesis_provisioned_per_million_put_units": KINESIS_PROVISIONED_PER_MILLION_PUT_UNITS,
        "kinesis_provisioned_efo_per_consumer_shard_hour": KINESIS_PROVISIONED_EFO_PER_CONSUMER_SHARD_HOUR,
        "kinesis_provisioned_efo_per_gb_out": KINESIS_PROVISIONED_EFO_PER_GB_OUT,
        "dynamodb_per_million_write_units": DYNAMODB_PER_MILLION_WRITE_UNITS,
        "dynamodb_per_million_read_units": DYNAMODB_PER_MILLION_READ_UNITS,
        "lambda_per_million_requests": LAMBDA_PER_MILLION_REQUESTS,
        "lambda_arm64_per_gb_second": LAMBDA_ARM64_PER_GB_SECOND,
    }
