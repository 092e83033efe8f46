"""The benchmark's arithmetic: the cost model, the billed units of a call, and the results file's schema.

No timing here: performance is measured by ``make bench`` and reported as ratios, never asserted in tests.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from bench import cost
from chatstream_local.moto.callcount import measure
from tests.support import require_or_skip

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results.json"
RUN_KEYS = {
    "variant",
    "concurrency",
    "exact",
    "ttft_ms",
    "gap_ms",
    "tokens_per_s",
    "kinesis_records_per_1k_tokens",
    "put_calls_per_1k_tokens",
    "dynamodb_writes_per_1k_tokens",
    "relay_queries_per_turn",
    "relay_cpu_ms_per_1k_tokens",
}


UNITS = cost.UnitCounts(
    tokens=1000,
    kinesis_ingest_kb=1024,
    kinesis_put_payload_units=500,
    dynamodb_write_units=2000,
    dynamodb_read_units=4000,
    lambda_requests=10,
    lambda_gb_seconds=8,
)
MB_IN_GB = 1024 * 1024 / cost.GB


def test_cost_per_million_tokens_applies_each_list_price_to_its_unit() -> None:
    # GIVEN a workload of 1,000 tokens: 1,024 KB into Kinesis, 2,000 write and 4,000 read units, 10 requests, 8 GB-s
    # WHEN it is scaled to a million tokens, for a consumer that polls the stream
    breakdown = cost.cost_per_million_tokens(UNITS, enhanced_fan_out=False)

    # THEN every service is its units × 1,000 × its price
    in_out = cost.KINESIS_ON_DEMAND_PER_GB_IN + cost.KINESIS_ON_DEMAND_PER_GB_OUT
    assert breakdown.kinesis == pytest.approx(1000 * MB_IN_GB * in_out)
    # and a provisioned stream would bill its PUT payload units, the polling consumer's reads being in its shard-hours
    assert breakdown.kinesis_provisioned == pytest.approx(0.5 * cost.KINESIS_PROVISIONED_PER_MILLION_PUT_UNITS)
    assert breakdown.dynamodb_writes == pytest.approx(2 * cost.DYNAMODB_PER_MILLION_WRITE_UNITS)
    assert breakdown.dynamodb_reads == pytest.approx(4 * cost.DYNAMODB_PER_MILLION_READ_UNITS)
    assert breakdown.lambda_requests == pytest.approx(0.01 * cost.LAMBDA_PER_MILLION_REQUESTS)
    assert breakdown.lambda_duration == pytest.approx(8000 * cost.LAMBDA_ARM64_PER_GB_SECOND)
    # and the total leaves out the provisioned alternative (the template's stream is on demand)
    parts = [breakdown.kinesis, breakdown.dynamodb_writes, breakdown.dynamodb_reads]
    assert breakdown.total == pytest.approx(sum(parts) + breakdown.lambda_requests + breakdown.lambda_duration)
    assert breakdown.to_dict()["total"] == round(breakdown.total, 4)


def test_enhanced_fan_out_prices_the_consumers_reads_at_its_own_rate() -> None:
    # GIVEN the same workload read through enhanced fan-out
    polling = cost.cost_per_million_tokens(UNITS, enhanced_fan_out=False)
    # WHEN it is priced
    fan_out = cost.cost_per_million_tokens(UNITS, enhanced_fan_out=True)
    # THEN on demand the data out costs enhanced fan-out's rate instead of the shared consumer's
    in_out = cost.KINESIS_ON_DEMAND_PER_GB_IN + cost.KINESIS_ON_DEMAND_EFO_PER_GB_OUT
    assert fan_out.kinesis == pytest.approx(1000 * MB_IN_GB * in_out)
    assert fan_out.kinesis > polling.kinesis
    # and provisioned, its retrievals are billed per GB on top of the PUT payload units
    efo_out = 1000 * MB_IN_GB * cost.KINESIS_PROVISIONED_EFO_PER_GB_OUT
    assert fan_out.kinesis_provisioned == pytest.approx(polling.kinesis_provisioned + efo_out)
    # and nothing else changes
    assert (fan_out.dynamodb_writes, fan_out.lambda_duration) == (polling.dynamodb_writes, polling.lambda_duration)


def test_fixed_monthly_charges_by_stream_mode_and_read_mode() -> None:
    hours = cost.HOURS_PER_MONTH
    # On demand: the stream-hour, and enhanced fan-out adds no hourly charge (it is billed per GB)
    on_demand = cost.fixed_monthly(cost.ON_DEMAND, enhanced_fan_out=False)
    assert on_demand == cost.fixed_monthly(cost.ON_DEMAND, enhanced_fan_out=True)
    assert on_demand.total == pytest.approx(hours * cost.KINESIS_ON_DEMAND_PER_STREAM_HOUR)
    # Provisioned: shard-hours, and with enhanced fan-out a consumer-shard hour per shard
    polled = cost.fixed_monthly(cost.PROVISIONED, enhanced_fan_out=False, shards=2)
    pushed = cost.fixed_monthly(cost.PROVISIONED, enhanced_fan_out=True, shards=2)
    assert polled.total == pytest.approx(2 * hours * cost.KINESIS_PROVISIONED_PER_SHARD_HOUR)
    assert pushed.enhanced_fan_out == pytest.approx(2 * hours * cost.KINESIS_PROVISIONED_EFO_PER_CONSUMER_SHARD_HOUR)
    assert pushed.total == pytest.approx(polled.total + pushed.enhanced_fan_out)
    assert pushed.to_dict()["total"] == round(pushed.total, 2)
    # Bad input says what it takes
    with pytest.raises(ValueError, match="ON_DEMAND or PROVISIONED"):
        cost.fixed_monthly("SERVERLESS", enhanced_fan_out=False)
    with pytest.raises(ValueError, match="at least one shard"):
        cost.fixed_monthly(cost.PROVISIONED, enhanced_fan_out=True, shards=0)


def test_unit_counts_add_up_and_no_tokens_has_no_cost_per_token() -> None:
    a = cost.UnitCounts(tokens=10, dynamodb_write_units=3)
    b = cost.UnitCounts(tokens=5, dynamodb_write_units=1, lambda_requests=2)

    assert a + b == cost.UnitCounts(tokens=15, dynamodb_write_units=4, lambda_requests=2)
    with pytest.raises(ValueError, match="no tokens"):
        cost.cost_per_million_tokens(cost.UnitCounts(tokens=0))


def test_prices_are_dated_and_for_one_region() -> None:
    table = cost.price_table()

    assert table["region"] == "us-east-1"
    assert str(table["as_of"])[:2] == "20" and str(table["kinesis_as_of"])[:2] == "20"
    assert set(table["sources"]) == {"kinesis", "dynamodb", "lambda"}  # type: ignore[arg-type]


def test_billed_units_of_calls() -> None:
    # GIVEN a PutRecords of a 100-byte and a 30,000-byte record
    small, big = base64.b64encode(b"x" * 100).decode(), base64.b64encode(b"x" * 30_000).decode()
    put = measure(
        "PutRecords", {"Records": [{"Data": small, "PartitionKey": "s"}, {"Data": big, "PartitionKey": "s"}]}, {}
    )
    # THEN on demand rounds each record up to 1 KB, provisioned to 25 KB chunks
    assert (put.items, put.ingest_kb, put.put_payload_units) == (2, 1 + 30, 1 + 2)

    # GIVEN a batch of two small items and a transaction of two
    batch = {"RequestItems": {"t": [{"PutRequest": {"Item": {"pk": {"S": "a"}}}}] * 2}}
    transaction = {"TransactItems": [{"Put": {"Item": {"pk": {"S": "a"}}}}] * 2}
    # THEN one write unit per small item, twice that in a transaction
    assert measure("BatchWriteItem", batch, {}).write_units == 2
    assert measure("TransactWriteItems", transaction, {}).write_units == 4

    # GIVEN queries that return nothing: still one unit when consistent, half when not
    assert measure("Query", {"ConsistentRead": True}, {"Items": []}).read_units == 1
    assert measure("Query", {}, {"Items": []}).read_units == 0.5
    assert measure("GetItem", {"ConsistentRead": True}, {"Item": {"pk": {"S": "x" * 9000}}}).read_units == 3


def test_committed_results_follow_the_issue_schema() -> None:
    require_or_skip(RESULTS.exists(), "bench/results.json is missing: make bench writes it (the repository holds it)")
    results = json.loads(RESULTS.read_text())

    assert {"environment", "runs", "cost_per_million_output_tokens", "fixed_monthly_usd"} <= set(results)
    assert {"naive", "chatstream"} <= set(results["cost_per_million_output_tokens"])
    variants = {run["variant"] for run in results["runs"]}
    assert {"direct", "naive", "chatstream"} <= variants
    # the pipeline ran in both ways of reading the stream, each priced
    read_modes = results["environment"]["settings"]["read_modes"]
    assert set(read_modes.values()) == {"polling", "enhanced-fan-out"}
    assert set(read_modes) <= variants and set(read_modes) <= set(results["cost_per_million_output_tokens"])
    for run in results["runs"]:
        assert set(run) >= RUN_KEYS, run["variant"]
        assert set(run["ttft_ms"]) == {"p50", "p95", "p99"}
        assert set(run["gap_ms"]) == {"p50", "p99"}
        assert isinstance(run["exact"], bool)
    for run in results.get("spread_arrivals", []):  # informative cells: chats sent apart instead of at once
        assert set(run) >= {*RUN_KEYS, "arrival_gap_ms"}, run["variant"]
