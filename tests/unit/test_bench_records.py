"""The benchmark's run records: built from what a cell measured, written with results.json's keys, and the
committed results read back to the same file. No timing: the samples here are made up."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from bench.cost import GB, KINESIS_ON_DEMAND_EFO_PER_GB_OUT, KINESIS_ON_DEMAND_PER_GB_OUT, UnitCounts
from bench.firsttoken import ChatPath, FirstTokenPath
from bench.load import ChatSample
from bench.records import AwsUsage, Cell, ClientMeasures, CpuUse, RunRecord, percentile
from bench.report import run_table, time_goes, write_markdown
from bench.results import BenchResults
from bench.run import QUICK, Workload, costs, environment
from tests.support import require_or_skip

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results.json"
REPLY = "w1 w2 w3 w4"


def sample(text: str = REPLY, ttft_ms: float | None = 10.0, gaps: tuple[float, ...] = (20.0, 20.0, 20.0)) -> ChatSample:
    events = len(text.split())
    return ChatSample(ok=True, text=text, ids_contiguous=True, token_events=events, ttft_ms=ttft_ms, gaps_ms=list(gaps))


def test_percentile_interpolates_between_ranks() -> None:
    assert percentile([], 50) is None
    assert percentile([5.0], 99) == 5.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([4.0, 1.0, 3.0, 2.0], 100) == 4.0


def test_the_clients_measures_of_exact_chats() -> None:
    # GIVEN two exact chats, first tokens after 10 and 30 ms, 0.5 s of wall time
    samples = [sample(ttft_ms=10.0, gaps=(19.994, 20.0, 21.0)), sample(ttft_ms=30.0)]

    # WHEN they are measured
    clients = ClientMeasures.of(samples, wall_s=0.5, expected=REPLY)

    # THEN the percentiles interpolate, the rates are per second and per chat, and the samples are rounded
    assert clients.exact and clients.failures == ()
    assert (clients.ttft_ms.p50, clients.ttft_ms.p95, clients.ttft_ms.p99) == (20.0, 29.0, 29.8)
    assert (clients.gap_ms.p50, clients.gap_ms.p99) == (20.0, 20.95)
    assert (clients.chats, clients.tokens_per_s, clients.token_events_per_chat, clients.wall_s) == (2, 16.0, 4.0, 0.5)
    assert clients.ttft_samples_ms == (10.0, 30.0)
    assert clients.gap_samples_ms == (19.99, 20.0, 21.0, 20.0, 20.0, 20.0)


def test_one_wrong_or_failed_chat_makes_the_cell_inexact_and_names_the_first_three_failures() -> None:
    failed = [ChatSample(ok=False, error=f"boom {i}") for i in range(4)]

    assert not ClientMeasures.of([sample(), sample("w1 w2")], 1.0, REPLY).exact
    clients = ClientMeasures.of([sample(), *failed], 1.0, REPLY)
    assert not clients.exact
    assert clients.failures == ("boom 0", "boom 1", "boom 2")
    assert clients.ttft_samples_ms == (10.0,)  # a chat without a first token has no time to it


def test_a_repeated_event_or_an_unplanned_resume_makes_the_cell_inexact_and_a_retry_does_not() -> None:
    # GIVEN chats whose text is exact, but one whose relay sent an id twice, one whose stream the client had to
    # resume by itself, and one whose POST was answered 503 once
    repeated = dataclasses.replace(sample(), repeated_ids=1, error="repeated id 2")
    resumed = dataclasses.replace(sample(), unplanned_resumes=1, error="resumed after id 2: the connection broke")
    retried = dataclasses.replace(sample(), retries=1)

    # WHEN each is measured beside a clean chat
    measures = [ClientMeasures.of([sample(), chat], 1.0, REPLY) for chat in (repeated, resumed, retried)]

    # THEN the first two cells are not exact and say why, the third is; the totals are in the record
    assert [m.exact for m in measures] == [False, False, True]
    assert measures[0].failures == ("repeated id 2",) and "connection broke" in str(measures[1].failures[0])
    assert [(m.repeated_ids, m.unplanned_resumes, m.retries) for m in measures] == [(1, 0, 0), (0, 1, 0), (0, 0, 1)]
    document = RunRecord(
        Cell("chatstream", 0, 2), measures[1], AwsUsage.of({}, 4, 2, UnitCounts(tokens=4)), CpuUse.of({}, "relay", 4)
    ).to_json()
    assert (document["repeated_ids"], document["unplanned_resumes"], document["retries"]) == (0, 1, 0)


def test_aws_usage_per_thousand_tokens_and_per_turn() -> None:
    # GIVEN moto's counts for 2,000 tokens in two chats
    counts = {
        "proxy": {"PutRecords": {"calls": 4, "items": 10, "seconds": 0.02}},
        "consumer": {"BatchWriteItem": {"calls": 2, "items": 8, "seconds": 0.01}},
        "relay": {
            "BatchWriteItem": {"calls": 1, "items": 2, "seconds": 0.0},
            "Query": {"calls": 30, "items": 0, "seconds": 0.3},
            "TransactWriteItems": {"calls": 2, "items": 4, "seconds": 0.0},
        },
    }
    units = UnitCounts(tokens=2000, lambda_requests=6)

    aws = AwsUsage.of(counts, tokens=2000, chats=2, units=units)

    # THEN records and calls are per 1,000 tokens, every write op counts, the token items are the consumer's
    assert (aws.kinesis_records_per_1k_tokens, aws.put_calls_per_1k_tokens) == (5.0, 2.0)
    assert (aws.dynamodb_writes_per_1k_tokens, aws.dynamodb_token_item_writes_per_1k_tokens) == (7.0, 4.0)
    assert aws.relay_queries_per_turn == 15.0
    assert aws.calls == {
        "consumer.BatchWriteItem": 2,
        "proxy.PutRecords": 4,
        "relay.BatchWriteItem": 1,
        "relay.Query": 30,
        "relay.TransactWriteItems": 2,
    }
    assert aws.upstream_ms_per_call == {
        "consumer.BatchWriteItem": 5.0,
        "proxy.PutRecords": 5.0,
        "relay.BatchWriteItem": 0.0,
        "relay.Query": 10.0,
        "relay.TransactWriteItems": 0.0,
    }
    assert aws.units is units


def test_no_aws_calls_and_no_tokens_are_zeros_not_errors() -> None:
    aws = AwsUsage.of({}, tokens=0, chats=0, units=UnitCounts(tokens=0))
    cpu = CpuUse.of({"bench-relay": 1.0}, "bench-relay", tokens=0)

    assert (aws.kinesis_records_per_1k_tokens, aws.relay_queries_per_turn, aws.calls) == (0.0, 0.0, {})
    assert cpu.relay_cpu_ms_per_1k_tokens == 0.0


def test_cpu_per_thousand_tokens_by_process() -> None:
    cpu = CpuUse.of({"moto": 0.25, "relay-fn": 0.5}, "relay-fn", tokens=500)

    assert cpu.relay_cpu_ms_per_1k_tokens == 1000.0
    assert cpu.cpu_ms_per_1k_tokens_by_process == {"moto": 500.0, "relay-fn": 1000.0}


def test_cpu_of_a_relay_that_was_not_measured_is_none_never_zero() -> None:
    # GIVEN a cell where no process of the relay was found, and one where a relay process exited during the cell
    absent = CpuUse.of({"moto": 0.25}, "relay-fn", tokens=500)
    exited = CpuUse.of({"moto": 0.25, "relay-fn": None}, "relay-fn", tokens=500)

    # THEN the relay's CPU is not measured (None), while a relay that used no CPU is a measured 0
    assert absent.relay_cpu_ms_per_1k_tokens is None and exited.relay_cpu_ms_per_1k_tokens is None
    assert exited.cpu_ms_per_1k_tokens_by_process == {"moto": 500.0, "relay-fn": None}
    assert CpuUse.of({"relay-fn": 0.0}, "relay-fn", tokens=500).relay_cpu_ms_per_1k_tokens == 0.0
    # AND results.json says null, and reads back the same
    run = RunRecord(
        Cell("chatstream", 0, 1),
        ClientMeasures.of([sample()], 1.0, REPLY),
        AwsUsage.of({}, 4, 1, UnitCounts(tokens=4)),
        exited,
    )
    document = json.loads(json.dumps(run.to_json()))
    assert document["relay_cpu_ms_per_1k_tokens"] is None
    assert RunRecord.from_json(document) == run


def test_results_md_says_not_measured_instead_of_zero(tmp_path: Path) -> None:
    # GIVEN results with one cell whose relay CPU was not measured and one whose relay used none
    runs = []
    for delay, cpu in (
        (0, CpuUse.of({"moto": 0.5, "relay-fn": None}, "relay-fn", 500)),
        (20, CpuUse.of({"relay-fn": 0.0}, "relay-fn", 500)),
    ):
        clients = ClientMeasures.of([sample()], 1.0, REPLY)
        runs.append(RunRecord(Cell("chatstream", delay, 1), clients, AwsUsage.of({}, 4, 1, UnitCounts(tokens=4)), cpu))

    # WHEN the run table and the CPU breakdown are written
    table = "\n".join(run_table(runs))
    breakdown = "\n".join(time_goes(runs))

    # THEN the unmeasured figure reads n/m / not measured, and the measured zero stays a number
    rows = [line for line in table.splitlines() if line.startswith("| chatstream")]
    assert rows[0].endswith("| n/m |") and rows[1].endswith("| 0.00 |")
    assert "relay-fn not measured" in breakdown and "moto 1000" in breakdown


def record(variant: str, delay: int, concurrency: int, units: UnitCounts, gap: int | None = None) -> RunRecord:
    clients = ClientMeasures.of([sample()], 1.0, REPLY)
    aws = AwsUsage.of({}, tokens=units.tokens, chats=1, units=units)
    return RunRecord(Cell(variant, delay, concurrency, gap), clients, aws, CpuUse.of({}, "relay", units.tokens))


def test_a_record_serializes_to_the_results_keys_and_back() -> None:
    run = record("chatstream", 20, 10, UnitCounts(tokens=4, lambda_requests=3.0), gap=100)

    document = run.to_json()

    assert list(document)[:3] == ["variant", "model_delay_ms", "concurrency"]
    assert document["arrival_gap_ms"] == 100 and document["units"]["lambda_requests"] == 3.0
    assert RunRecord.from_json(json.loads(json.dumps(document))) == run
    assert "arrival_gap_ms" not in record("direct", 0, 1, UnitCounts(tokens=4)).to_json()


def test_the_committed_results_load_and_serialize_back_to_the_same_file() -> None:
    require_or_skip(RESULTS.exists(), "bench/results.json is missing: make bench writes it (the repository holds it)")
    results = json.loads(RESULTS.read_text())

    for run in [*results["runs"], *results.get("spread_arrivals", [])]:
        assert json.dumps(RunRecord.from_json(run).to_json()) == json.dumps(run), run["variant"]


def test_the_committed_results_load_as_records_and_write_back_the_same_document() -> None:
    require_or_skip(RESULTS.exists(), "bench/results.json is missing: make bench writes it (the repository holds it)")
    # GIVEN the committed results.json WHEN it is read into records
    document = json.loads(RESULTS.read_text())
    results = BenchResults.from_json(document)
    # THEN every part is there, typed, and the records write the same document back
    assert results.runs and results.spread_arrivals and results.first_token_path and results.cold_start is not None
    assert results.environment.settings.read_modes and results.costs.breakdowns
    assert results.to_json() == document
    assert BenchResults.loads(results.dumps()) == results


def test_the_committed_report_is_what_the_records_of_the_committed_results_make(tmp_path: Path) -> None:
    require_or_skip(RESULTS.exists(), "bench/results.json is missing: make bench writes it (the repository holds it)")
    # GIVEN the committed results, read into records WHEN the report is written from them
    write_markdown(BenchResults.loads(RESULTS.read_text()), tmp_path / "results.md")
    # THEN it is the committed results.md, line for line
    committed = RESULTS.with_suffix(".md").read_text().splitlines()
    assert (tmp_path / "results.md").read_text().splitlines() == committed


def test_the_committed_costs_are_recomputed_from_the_committed_runs() -> None:
    require_or_skip(RESULTS.exists(), "bench/results.json is missing: make bench writes it (the repository holds it)")
    results = BenchResults.loads(RESULTS.read_text())

    recomputed = costs(results.runs, Workload(), results.environment.settings.read_modes)

    assert recomputed == results.costs


def test_costs_come_from_the_pipeline_runs_at_one_chat_and_the_realistic_delay() -> None:
    # GIVEN two chatstream runs at one chat and 20 ms, and runs that must not count
    one = UnitCounts(tokens=1000, dynamodb_write_units=100, kinesis_ingest_kb=1024)
    runs = [
        record("chatstream", 20, 1, one),
        record("chatstream", 20, 1, one),
        record("chatstream", 0, 1, UnitCounts(tokens=1000, dynamodb_write_units=9999)),
        record("chatstream", 20, 10, UnitCounts(tokens=1000, dynamodb_write_units=9999)),
        record("direct", 20, 1, UnitCounts(tokens=1000, lambda_requests=9999)),
        record("chatstream-polling", 20, 1, one),
    ]

    entries = costs(runs, Workload(), {"chatstream": "enhanced-fan-out", "chatstream-polling": "polling"})

    # THEN only the first two are summed for chatstream: 200 write units for 2,000 tokens
    assert list(entries.breakdowns) == ["chatstream", "chatstream-polling"]
    breakdowns = entries.breakdowns
    assert breakdowns["chatstream"].dynamodb_writes == pytest.approx(0.0625)
    assert "20 ms model delay runs at concurrency 1" in entries.basis
    # AND each is priced for the way its consumer reads the stream: enhanced fan-out's reads cost more per GB
    gigabytes_per_million = 1000 * 1024 * 1024 / GB
    fan_out, polling = breakdowns["chatstream"].kinesis, breakdowns["chatstream-polling"].kinesis
    assert fan_out - polling == pytest.approx(
        gigabytes_per_million * (KINESIS_ON_DEMAND_EFO_PER_GB_OUT - KINESIS_ON_DEMAND_PER_GB_OUT), abs=1e-4
    )
    # AND results.json holds each variant's total beside its breakdown
    document = entries.to_json()
    assert document["cost_per_million_output_tokens"] == {v: b.total for v, b in breakdowns.items()}
    # AND the hourly charges are given for both stream modes and both read modes
    fixed = entries.fixed_monthly
    assert fixed["ON_DEMAND"]["enhanced-fan-out"] == fixed["ON_DEMAND"]["polling"]
    provisioned = next(value for key, value in fixed.items() if key.startswith("PROVISIONED"))
    assert provisioned["enhanced-fan-out"].total > provisioned["polling"].total


def test_cpu_per_thousand_tokens_by_function_names_each_role() -> None:
    functions = {"relay": "relay-fn", "proxy": "proxy-fn", "consumer": "consumer-fn"}
    cpu = CpuUse.of({"relay-fn": 0.5, "proxy-fn": 0.25, "consumer-fn": None}, "relay-fn", 500, functions=functions)

    assert cpu.cpu_ms_per_1k_tokens_by_function == {"relay": 1000.0, "proxy": 500.0, "consumer": None}


def test_the_first_token_path_is_the_median_chat_and_its_chain_of_calls() -> None:
    # GIVEN three chats' first tokens, one with a consumer that was not measured
    def path(ttft: float, relay: float, consumer: float | None, polls: int) -> ChatPath:
        calls = {"relay.TransactWriteItems": 1, "relay.Invoke": 1, "relay.Query": polls, "proxy.PutRecords": 2}
        cpu = {"relay": relay, "proxy": 10.0, "consumer": consumer}
        return ChatPath(ttft, cpu, cpu, calls)

    # WHEN they are summed up
    summary = FirstTokenPath.of("chatstream", 400, [path(50, 8, 5, 2), path(60, 13, 7, 3), path(40, 9, None, 1)])

    # THEN CPU is the mean per chat (a role not measured in one chat is not measured at all), TTFT the median
    assert summary.ttft_ms_p50 == 50
    assert summary.cpu_ms_to_first_token == {"relay": 10.0, "proxy": 10.0, "consumer": None, "product": None}
    # AND the polls are apart: only the one that found the token is on the chain
    assert summary.relay_polls_before_first_token == 2
    assert summary.sequential_calls_before_first_token == 1 + 1 + 2 + 1
    assert FirstTokenPath.from_json(summary.to_json()) == summary


def test_a_run_is_written_and_read_back_as_the_same_records_and_reported_from_them(tmp_path: Path) -> None:
    # GIVEN what a run measured, as records: its environment, a cell of two variants, their costs
    runs = (
        record("direct", 20, 1, UnitCounts(tokens=4)),
        record("chatstream", 20, 1, UnitCounts(tokens=4, dynamodb_write_units=2)),
    )
    env = environment(QUICK, ["direct", "chatstream"])
    results = BenchResults(env, runs, costs=costs(runs, QUICK, env.settings.read_modes))
    # WHEN results.json is written and read back
    again = BenchResults.loads(results.dumps())
    # THEN it holds the same records
    assert again == results
    # AND the report is written from them: each run in the table, its cost beside it
    write_markdown(again, tmp_path / "results.md")
    report = (tmp_path / "results.md").read_text()
    assert "| direct | 20 | 1 | yes |" in report and "| chatstream | 20 | 1 | yes |" in report
    assert f"| chatstream | {env.settings.read_modes['chatstream']} |" in report
