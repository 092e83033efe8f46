"""Cold start of this tree's functions beside an earlier commit's, on the same machine, in one run, as ratios.

``python -m bench.coldstart_against REV [repeat]`` (from the repository, with its git history): REV's ``functions/``
and ``layers/`` (``git archive``) and this tree's, each started as its layer's build deployed it (botocore's data
pruned only where that layer's build prunes it, and by that build's own pruner, ``layers/chatstream/
prune_botocore_data.py`` as REV has it: what it keeps changed from commit to commit), on the runtime each
function is deployed on, ``repeat`` times interleaved with the smallest handler as the machine's ruler; medians of
:func:`bench.coldstart.time_to_first_next`, and this tree's over REV's. Both run in this environment's pinned
packages: what changed is the functions' code and the layers' builds, not the packages.

An absolute figure is the machine's (bench/README.md, "Cold starts"); the ratio to an earlier commit, taken in
one run, is the code's.
"""

from __future__ import annotations

import io
import json
import statistics
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import replace
from pathlib import Path

from bench import coldstart
from chatstream_local.lambda_ import deployed_site

CASES = ("relay", "proxy", "consumer", "hello")
PRUNER = Path("layers/chatstream/prune_botocore_data.py")  # what the chatstream layer's build prunes botocore with


def _checkout(rev: str, into: Path, repository: Path = coldstart.ROOT) -> Path:
    """REV's ``functions/`` and ``layers/``, extracted under ``into``."""
    archive = subprocess.run(  # noqa: S603 - git, with a revision the user named
        ["git", "archive", "--format=tar", rev, "functions", "layers"],  # noqa: S607
        cwd=repository,
        check=True,
        capture_output=True,
    ).stdout
    into.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def _spec(case: str, root: Path | None, *, writes_bytecode: bool = False) -> coldstart.FunctionSpec:
    """:func:`bench.coldstart._spec` for this tree (``root`` None) or for the checkout at ``root``."""
    spec = coldstart._spec(case, coldstart.FUNCTIONS[case][1], writes_bytecode=writes_bytecode)
    if root is None or case == "hello":
        return spec
    layers = [root / "layers/chatstream", root / "layers/streaming-runtime"]
    wrapper = root / "layers/streaming-runtime/bin/chatstream-streaming"
    return replace(
        spec,
        name=f"{spec.name}-earlier",
        code_dirs=[root / "functions" / case, *layers],
        exec_wrapper=wrapper if spec.exec_wrapper is not None else None,
    )


def pruner_of(tree: Path) -> Path | None:
    """The botocore pruner the chatstream layer's build in ``tree`` (this tree, or a checkout) runs; None where that
    build prunes nothing."""
    pruner = tree / PRUNER
    return pruner if pruner.is_file() else None


def deployed_sites(trees: dict[str, Path], into: Path) -> dict[str, Path]:
    """The interpreter of each tree's deployed site (``deployed_site.create``, under ``into``): botocore pruned by
    that tree's own pruner, as its layer's build pruned it."""
    return {
        name: deployed_site.create(into / f"site-{i}", pruner=pruner_of(tree))
        for i, (name, tree) in enumerate(trees.items())
    }


def measure(rev: str, repeat: int = 9) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="chatstream-coldstart-against-") as tmp:
        earlier = _checkout(rev, Path(tmp) / "earlier")
        trees = {"this": coldstart.ROOT, rev: earlier}
        pruned = {name: pruner_of(tree) is not None for name, tree in trees.items()}
        pythons = {name: str(python) for name, python in deployed_sites(trees, Path(tmp)).items()}
        roots = {"this": None, rev: earlier}
        for name, root in roots.items():  # bytecode first, as the builds ship it (bench.coldstart says why)
            for case in CASES:
                coldstart.time_to_first_next(_spec(case, root, writes_bytecode=True), pythons[name])
        samples: dict[str, dict[str, list[float]]] = {name: {case: [] for case in CASES} for name in roots}
        for _ in range(repeat):
            for case in CASES:
                for name, root in roots.items():
                    seconds, _cpu = coldstart.time_to_first_next(_spec(case, root), pythons[name])
                    samples[name][case].append(seconds * 1000)
    medians = {name: {case: round(statistics.median(v), 1) for case, v in by.items()} for name, by in samples.items()}
    return {
        "against": rev,
        "repeat": repeat,
        "botocore_pruned": pruned,
        "median_ms": medians,
        "ratio_this_over_earlier": {case: round(medians["this"][case] / medians[rev][case], 2) for case in CASES},
    }


def main() -> int:
    if len(sys.argv) < 2:
        sys.stderr.write("usage: python -m bench.coldstart_against REV [repeat]\n")
        return 2
    repeat = int(sys.argv[2]) if len(sys.argv) > 2 else 9
    sys.stdout.write(json.dumps(measure(sys.argv[1], repeat), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
