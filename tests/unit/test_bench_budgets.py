"""The benchmark's budgets cell (bench/budgets_mode.py): its record from the pairs' samples, results.json's
``budgets_mode`` and the report's section. No timing: the samples here are made up."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from bench import budgets_mode
from bench.budgets_mode import BudgetsOverhead
from bench.load import ChatSample
from bench.report import write_markdown
from bench.results import BenchResults
from bench.run import PIPELINE_VARIANTS, QUICK, environment, stack_template

if TYPE_CHECKING:
    from pathlib import Path

REPLY = "w1 w2"


def chat(ttft_ms: float | None, text: str = REPLY, error: str | None = None) -> ChatSample:
    return ChatSample(ok=error is None, text=text, ids_contiguous=True, token_events=2, ttft_ms=ttft_ms, error=error)


def test_the_overhead_is_the_median_of_the_pairs_differences() -> None:
    # GIVEN three pairs (off, on) whose chats with budgets were 0.5, 4 and 1 ms slower, on a drifting machine
    pairs = [(chat(40.0), chat(40.5)), (chat(60.0), chat(64.0)), (chat(50.0), chat(51.0))]
    cell = BudgetsOverhead.of("/long 2", 0, pairs, REPLY)
    # THEN the overhead is the median difference (1 ms), not the difference of the medians (0.5 ms)
    assert (cell.pairs, cell.exact, cell.overhead_ms_p50, cell.within_target) == (3, True, 1.0, True)
    assert (cell.ttft_ms_off.p50, cell.ttft_ms_on.p50) == (50.0, 51.0)
    # AND a refused or wrong chat makes the cell inexact and is reported; past 5 ms is not within the target
    refused = chat(47.0, text="", error="429 rate_limit_exceeded")
    worse = BudgetsOverhead.of("/long 2", 0, [(chat(40.0), refused)], REPLY)
    assert not worse.exact and worse.within_target is False and worse.failures == ("429 rate_limit_exceeded",)


def test_the_twin_is_chatstreams_stack_with_every_budget_on() -> None:
    # The twin differs from chatstream's stack by the three budgets only, each on (not 0, which is no limit)
    assert PIPELINE_VARIANTS["chatstream-budgets"].parameters == budgets_mode.PARAMETERS
    assert PIPELINE_VARIANTS["chatstream-budgets"].functions == {}
    relay = stack_template("chatstream-budgets").properties("RelayFunction")["Environment"]["Variables"]
    plain = stack_template("chatstream").properties("RelayFunction")["Environment"]["Variables"]
    changed = {k for k in relay if relay[k] != plain.get(k)}
    assert changed and all(int(relay[k]) > 0 for k in changed), changed


def test_the_cell_is_written_to_results_json_read_back_and_reported(tmp_path: Path) -> None:
    cell = BudgetsOverhead.of("/long 60", 0, [(chat(40.0), chat(42.25))], REPLY)
    results = BenchResults(environment(QUICK, ["chatstream"]), (), budgets_mode=cell)
    document = json.loads(results.dumps())
    assert document["budgets_mode"]["overhead_ms_p50"] == 2.25
    assert BenchResults.loads(results.dumps()) == results
    write_markdown(results, tmp_path / "results.md")
    report = (tmp_path / "results.md").read_text()
    assert "## The budgets per caller beside none" in report
    assert "| off | 1 | yes | 40.0 ms |" in report and "| on | 1 | yes | 42.2 ms |" in report
    assert "First token's overhead: **2.25 ms** (within 5 ms: yes)" in report
    # AND a run without the cell has neither the key nor the section
    without = BenchResults(environment(QUICK, ["chatstream"]), ())
    assert "budgets_mode" not in json.loads(without.dumps())
    write_markdown(without, tmp_path / "without.md")
    assert "budgets per caller beside" not in (tmp_path / "without.md").read_text()
