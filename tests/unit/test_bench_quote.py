"""The figures the documents quote (bench/quote.py): each one what bench/results.json gives, every marker a quote."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from bench import quote
from bench.results import BenchResults
from tests.support import require_or_skip

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture(scope="module")
def figures() -> quote.Figures:
    require_or_skip(
        quote.RESULTS.exists(), "bench/results.json is missing: make bench writes it (the repository holds it)"
    )
    return quote.figures()


def _quotes(text: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for match in quote.MARKER.finditer(text):
        found.setdefault(match["name"], []).append(match["body"])
    return found


def test_every_quoted_figure_is_what_results_json_gives(figures: quote.Figures) -> None:
    # GIVEN every document of the repository WHEN its quotes are rendered again from the committed results.json
    for path in quote.documents():
        text = path.read_text(encoding="utf-8")
        rendered = quote.rewrite(text, figures)
        # THEN each says what the run measured (make bench rewrites them; `python -m bench.quote` alone does too)
        assert _quotes(text) == _quotes(rendered), f"{path.relative_to(quote.REPO_ROOT)}: run python -m bench.quote"
    assert quote.main(["--check"]) == 0


def test_a_figure_that_disagrees_with_results_json_is_found(
    figures: quote.Figures, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN results.json with the product's first token at one chat 40 ms later than the committed run's
    raw: dict[str, Any] = json.loads(quote.RESULTS.read_text(encoding="utf-8"))
    for run in raw["runs"]:
        if (run["variant"], run["model_delay_ms"], run["concurrency"]) == ("chatstream", 20, 1):
            run["ttft_ms"]["p50"] += 40
    later = tmp_path / "results.json"
    later.write_text(json.dumps(raw), encoding="utf-8")
    # WHEN the documents are checked against it
    # THEN the README's figure disagrees, and the check says so and fails
    assert quote.main(["--check", "--results", str(later)]) == 1
    assert "README.md is not what" in capsys.readouterr().err
    over = figures.overhead() + 40
    assert quote.first_token_overhead(quote.figures(later)) == f"+{over:.0f} ms"
    # AND a document's quote edited by hand is found as well
    readme = tmp_path / "README.md"
    text = (quote.REPO_ROOT / "README.md").read_text(encoding="utf-8")
    first = next(quote.MARKER.finditer(text))
    readme.write_text(text[: first.start("body")] + "an older figure" + text[first.end("body") :], encoding="utf-8")
    assert quote.stale(figures, [readme]) == [readme]
    assert quote.write(figures, [readme]) == [readme]
    assert readme.read_text(encoding="utf-8") == text


def test_every_marker_names_a_quote_and_every_quote_is_quoted(figures: quote.Figures) -> None:
    # GIVEN the markers of every document
    used = {name for path in quote.documents() for name in _quotes(path.read_text(encoding="utf-8"))}
    # THEN each names a quote, and each quote stands somewhere (a quote nothing shows would rot)
    assert used == set(quote.QUOTES)
    # AND a marker naming none is an error that says so, not a silent pass
    with pytest.raises(quote.QuoteError, match="no quote named 'nothing'"):
        quote.rewrite("a <!-- bench:nothing -->1 ms<!-- /bench --> figure", figures)


def test_a_block_quote_stands_on_lines_of_its_own(figures: quote.Figures) -> None:
    # GIVEN a table's markers written on one line WHEN rewritten
    text = quote.rewrite("before\n\n<!-- bench:glance --><!-- /bench -->\n\nafter\n", figures)
    # THEN the table is on its own lines, blank lines around it, so Markdown reads the markers as comments
    lines = text.splitlines()
    start = lines.index("<!-- bench:glance -->")
    assert lines[start + 1] == "" and lines[start + 2].startswith("| ")
    end = lines.index("<!-- /bench -->")
    assert lines[end - 1] == "" and lines[end - 2].startswith("| ")


def test_the_glance_table_puts_the_aws_prediction_beside_the_local_figure(figures: quote.Figures) -> None:
    # GIVEN the README's table
    table = quote.glance(figures).splitlines()
    (row,) = [line for line in table if line.startswith("| first token")]
    # THEN the first token's row gives the local overhead and docs/CAPACITY.md's prediction from the same run
    local, aws = row.split(" | ")[1:3]
    assert local == quote.first_token_overhead(figures)
    assert aws.startswith(f"+{figures.aws.total_ms:.0f} ms, predicted")
    capacity_page = (quote.REPO_ROOT / "docs" / "CAPACITY.md").read_text(encoding="utf-8")
    assert f"| **predicted first-token overhead over direct** | **{figures.aws.total_ms:.0f}** |" in capacity_page


def test_a_run_without_a_figure_is_a_clear_error(figures: quote.Figures) -> None:
    # GIVEN results without a cold start or a first-token path (a run with --no-coldstart, or an older file)
    bare = quote.Figures(BenchResults(figures.results.environment, figures.results.runs), figures.aws)
    # THEN the quotes that need them say what is missing
    with pytest.raises(quote.QuoteError, match="no cold start"):
        quote.cold_starts(bare)
    with pytest.raises(quote.QuoteError, match="no first-token path"):
        quote.first_token_cpu(bare)
