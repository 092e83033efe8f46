"""The benchmark's JWT cell (bench/jwt_mode.py): its record from the pairs' samples, results.json's ``jwt_mode`` and
the report's section. No timing: the samples and CPU figures here are made up."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from bench.jwt_mode import JwtOverhead, verification_cpu
from bench.load import ChatSample
from bench.pairs import alternate
from bench.report import write_markdown
from bench.results import BenchResults
from bench.run import QUICK, environment

if TYPE_CHECKING:
    from pathlib import Path

REPLY = "w1 w2"


def chat(ttft_ms: float | None, text: str = REPLY) -> ChatSample:
    return ChatSample(ok=True, text=text, ids_contiguous=True, token_events=2, ttft_ms=ttft_ms)


def test_the_overhead_is_the_median_of_the_pairs_differences() -> None:
    # GIVEN three pairs (NONE, JWT) whose JWT chats were 1, 3 and 2 ms slower, on a drifting machine
    pairs = [(chat(40.0), chat(41.0)), (chat(60.0), chat(63.0)), (chat(50.0), chat(52.0))]
    # WHEN the cell is recorded, with three batches' CPU per verification
    cell = JwtOverhead.of("/long 2", 0, pairs, REPLY, [0.0002, 0.00025, 0.0003], 300)
    # THEN the overhead is the median difference (2 ms), not the difference of medians; the CPU in microseconds
    assert (cell.pairs, cell.exact, cell.overhead_ms_p50, cell.within_target) == (3, True, 2.0, True)
    assert (cell.ttft_ms_none.p50, cell.ttft_ms_jwt.p50) == (50.0, 52.0)
    assert (cell.verify_cpu_us_p50, cell.verify_cpu_us_min) == (250.0, 200.0)
    # AND a wrong reply makes the cell inexact, and an overhead past 5 ms is not within the target
    worse = JwtOverhead.of("/long 2", 0, [(chat(40.0), chat(50.0, text="w1"))], REPLY, [0.0001], 10)
    assert not worse.exact and worse.within_target is False


def test_the_modes_alternate_which_goes_first() -> None:
    sent: list[str] = []
    pairs = alternate(
        3, base=lambda: (sent.append("none"), chat(1.0))[1], twin=lambda: (sent.append("jwt"), chat(2.0))[1]
    )
    assert sent == ["none", "jwt", "jwt", "none", "none", "jwt"]
    assert all((a.ttft_ms, b.ttft_ms) == (1.0, 2.0) for a, b in pairs)


def test_verification_cpu_is_per_call_after_one_that_warms_it() -> None:
    calls: list[int] = []
    batches = verification_cpu(lambda: calls.append(1), verifications=100, batches=4)
    assert len(calls) == 101 and len(batches) == 4 and all(cpu >= 0 for cpu in batches)


def test_the_cell_is_written_to_results_json_read_back_and_reported(tmp_path: Path) -> None:
    # GIVEN a run's results with a JWT cell
    cell = JwtOverhead.of("/long 60", 0, [(chat(40.0), chat(41.5))], REPLY, [0.00031], 200)
    results = BenchResults(environment(QUICK, ["chatstream"]), (), jwt_mode=cell)
    # WHEN written and read back THEN the record is the same, under results.json's jwt_mode
    document = json.loads(results.dumps())
    assert document["jwt_mode"]["overhead_ms_p50"] == 1.5 and document["jwt_mode"]["verify_cpu_us_p50"] == 310.0
    assert BenchResults.loads(results.dumps()) == results
    # AND the report has its section: both modes, the overhead against the target, the CPU per request
    write_markdown(results, tmp_path / "results.md")
    report = (tmp_path / "results.md").read_text()
    assert "## The JWT auth mode beside NONE" in report
    assert "| NONE | 1 | yes | 40.0 ms |" in report and "| JWT | 1 | yes | 41.5 ms |" in report
    assert "First token's overhead: **1.50 ms** (within 5 ms: yes)" in report
    assert "Verification CPU per request: **310 µs**" in report
    # AND a run without the cell (every run before it) has neither the key nor the section
    without = BenchResults(environment(QUICK, ["chatstream"]), ())
    assert "jwt_mode" not in json.loads(without.dumps())
    write_markdown(without, tmp_path / "without.md")
    assert "JWT auth mode" not in (tmp_path / "without.md").read_text()
