"""bench.coldstart_against: an earlier commit's functions and layers, each started on a deployed site whose botocore
that commit's own layer build pruned, with the pruner that commit has (or none where it had none)."""

from __future__ import annotations

import subprocess
from typing import TYPE_CHECKING

import pytest

from bench import coldstart, coldstart_against
from chatstream_local.lambda_ import deployed_site

if TYPE_CHECKING:
    from pathlib import Path

PRUNER = "layers/chatstream/prune_botocore_data.py"


def git(repository: Path, *args: str) -> str:
    identity = ["-c", "user.name=chatstream tests", "-c", "user.email=tests@example.com", "-c", "commit.gpgsign=false"]
    done = subprocess.run(["git", *identity, *args], cwd=repository, check=True, capture_output=True, text=True)  # noqa: S603, S607
    return done.stdout.strip()


def commit(repository: Path, files: dict[str, str | None], message: str) -> str:
    """Write (or, for None, remove) ``files`` and commit them; the commit's id."""
    for name, text in files.items():
        path = repository / name
        if text is None:
            path.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    git(repository, "add", "--all")
    git(repository, "commit", "--quiet", "-m", message)
    return git(repository, "rev-parse", "HEAD")


@pytest.fixture
def history(tmp_path: Path) -> dict[str, str]:
    """A repository whose pruner changed, then went: each commit's id by what its layer build prunes with."""
    repository = tmp_path / "repository"
    repository.mkdir()
    git(repository, "init", "--quiet")
    return {
        "none yet": commit(repository, {"functions/relay/app.py": "# relay\n", "layers/chatstream/x.py": ""}, "one"),
        "first": commit(repository, {PRUNER: "# the first pruner\n"}, "two"),
        "second": commit(repository, {PRUNER: "# the second pruner\n"}, "three"),
        "gone": commit(repository, {PRUNER: None}, "four"),
    }


def sites_built(monkeypatch: pytest.MonkeyPatch, trees: dict[str, Path], into: Path) -> dict[str, str | None]:
    """The text of the pruner each tree's deployed site was made with (None: botocore left unpruned)."""
    made: dict[Path, str | None] = {}

    def create(directory: Path, *, pruner: Path | None = None) -> Path:
        made[directory] = None if pruner is None else pruner.read_text(encoding="utf-8")
        return directory / "bin" / "python"

    monkeypatch.setattr(deployed_site, "create", create)
    pythons = coldstart_against.deployed_sites(trees, into)
    return {name: made[python.parent.parent] for name, python in pythons.items()}


@pytest.mark.parametrize(("rev", "pruner"), [("first", "# the first pruner\n"), ("second", "# the second pruner\n")])
def test_an_earlier_commits_botocore_is_pruned_by_that_commits_own_pruner(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, history: dict[str, str], rev: str, pruner: str
) -> None:
    # GIVEN a commit whose layer build pruned botocore with a pruner other than this tree's
    earlier = coldstart_against._checkout(history[rev], tmp_path / "earlier", repository=tmp_path / "repository")
    # WHEN the sites the commit and this tree run on are made
    pruned = sites_built(monkeypatch, {"this": coldstart.ROOT, rev: earlier}, tmp_path / "sites")
    # THEN the commit's botocore is pruned by the commit's pruner, this tree's by this tree's
    assert pruned == {"this": deployed_site.PRUNE_BOTOCORE_DATA.read_text(encoding="utf-8"), rev: pruner}


@pytest.mark.parametrize("rev", ["none yet", "gone"])
def test_an_earlier_commit_without_a_pruner_runs_on_botocore_unpruned(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, history: dict[str, str], rev: str
) -> None:
    # GIVEN a commit whose layer build pruned nothing (before the pruner, or after it went)
    earlier = coldstart_against._checkout(history[rev], tmp_path / "earlier", repository=tmp_path / "repository")
    # WHEN its site is made THEN its botocore is left whole, as its build left it
    assert coldstart_against.pruner_of(earlier) is None
    assert sites_built(monkeypatch, {rev: earlier}, tmp_path / "sites") == {rev: None}
