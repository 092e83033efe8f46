"""docs/CAPACITY.md (bench/capacity.py): current with bench/results.json, and its model's arithmetic."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest

from bench import capacity
from chatstream_local.template import Template

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture(scope="module")
def results() -> dict[str, Any]:
    return dict(json.loads(capacity.RESULTS.read_text(encoding="utf-8")))


@pytest.fixture(scope="module")
def settings() -> capacity.Settings:
    return capacity.Settings.from_template(Template.load())


def test_capacity_md_is_what_results_json_gives() -> None:
    # GIVEN the committed page WHEN it is computed again from results.json, template.yaml and the relay's constants
    page = capacity.build()
    # THEN it is the same, word for word (run `make capacity` after `make bench`)
    assert capacity.PAGE.read_text(encoding="utf-8") == page


def test_check_mode_fails_on_a_page_that_is_not_current(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stale = tmp_path / "CAPACITY.md"
    stale.write_text("# an older page\n", encoding="utf-8")
    assert capacity.main(["--check", "--out", str(stale)]) == 1
    assert "run make capacity" in capsys.readouterr().err
    assert capacity.main(["--out", str(stale)]) == 0
    assert capacity.main(["--check", "--out", str(stale)]) == 0


def test_what_a_chat_needs_comes_from_the_measured_run(results: dict[str, Any], settings: capacity.Settings) -> None:
    # GIVEN the benchmark's one-chat run of the product
    (run,) = [
        r
        for r in results["runs"]
        if (r["variant"], r["model_delay_ms"], r["concurrency"]) == ("chatstream", capacity.BASIS_DELAY_MS, 1)
        and "arrival_gap_ms" not in r
    ]
    chat = capacity.per_chat(results, settings)
    # THEN a chat's records a second are its records per 1,000 tokens at the model's rate (a delta every 20 ms)
    assert chat.records_per_s == pytest.approx(run["kinesis_records_per_1k_tokens"] / 1000 * 50)
    # AND its reads a second are the run's read units per token at that rate
    assert chat.read_units_per_s == pytest.approx(run["units"]["dynamodb_read_units"] / run["units"]["tokens"] * 50)


def test_the_limits_come_in_the_order_they_are_reached(results: dict[str, Any], settings: capacity.Settings) -> None:
    found = capacity.bindings(capacity.per_chat(results, settings), settings)
    assert [b.chats for b in found] == sorted(b.chats for b in found)
    # AND two Lambda executions a chat, beside the consumer's four (an on-demand stream's first shards), fill the
    # account's default 1,000
    (concurrency,) = [b for b in found if b.limit is capacity.LAMBDA_CONCURRENCY]
    assert concurrency.chats == (1000 - 4 * settings.parallelization_factor) / 2


def test_a_faster_consumer_is_reached_later(results: dict[str, Any], settings: capacity.Settings) -> None:
    # GIVEN the consumer at its default, and with ten batches a shard at once
    chat = capacity.per_chat(results, settings)
    one = capacity.scale(10_000, chat, settings, results["environment"]["prices"])
    ten = capacity.scale(10_000, chat, replace(settings, parallelization_factor=10), results["environment"]["prices"])
    # THEN ten times the consumers carry a tenth of the load each
    assert ten.consumer_concurrency == 10 * one.consumer_concurrency
    assert ten.consumer_share == pytest.approx(one.consumer_share / 10)


def test_the_latency_prediction_adds_up_its_steps(results: dict[str, Any], settings: capacity.Settings) -> None:
    predicted = capacity.latency(results, settings)
    # THEN the prediction is the sum of its steps, the model's own time is not counted (direct waits for it too),
    # and every step says what its figure rests on
    assert predicted.total_ms == pytest.approx(sum(step.ms for step in predicted.steps))
    (model,) = [step for step in predicted.steps if "ConverseStream" in step.what]
    assert model.ms == 0
    assert {step.basis for step in predicted.steps} <= {"AWS", "benchmark", "estimate", "model", "measured"}
    # AND the relay's wait follows PollMinMs: half of it polls sooner
    faster = capacity.latency(results, replace(settings, poll_min_ms=settings.poll_min_ms / 2))
    assert faster.total_ms < predicted.total_ms


def test_a_changed_first_token_path_stops_the_model(results: dict[str, Any], settings: capacity.Settings) -> None:
    # GIVEN results whose first token passes one more call
    changed = json.loads(json.dumps(results))
    for path in changed["first_token_path"]:
        path["calls_before_first_token"]["proxy.Query"] = 1.0
    # THEN the model refuses to price a chain it does not know
    with pytest.raises(ValueError, match="first-token path changed"):
        capacity.latency(changed, settings)
