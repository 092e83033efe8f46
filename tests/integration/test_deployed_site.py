"""The local stack's functions run on an interpreter that sees only the packages a deployed function has."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from chatstream_local.lambda_ import deployed_site
from chatstream_local.lambda_.service import LocalLambda
from tests.fixtures.local_handlers.specs import buffered

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from chatstream_local.stack import LocalStack

pytestmark = pytest.mark.integration

# What a deployed function has (the layers' pins, the managed runtime's packages) and what only the development
# environment has: the CRT and pyOpenSSL, which botocore uses whenever it finds them, and the test tooling.
DEPLOYED = ("boto3", "botocore", "aws_lambda_powertools", "aws_xray_sdk", "awslambdaric", "simplejson", "jmespath")
DEV_ONLY = ("awscrt", "OpenSSL", "moto", "pytest", "httpx")


def test_a_function_on_the_deployed_site_imports_what_it_has_on_lambda_and_nothing_else() -> None:
    # GIVEN the same handler on the deployed site and on the development environment's interpreter
    python = deployed_site.interpreter()
    specs = [buffered("on-site", "importable", python=python), buffered("on-dev", "importable")]
    with LocalLambda(specs) as local:
        # WHEN each is asked which modules it can import
        event = json.dumps({"modules": [*DEPLOYED, *DEV_ONLY]}).encode()
        on_site, on_dev = (json.loads(local.invoke(name, event).payload) for name in ("on-site", "on-dev"))

    # THEN on the site every package a layer pins imports, and none that only the development environment has
    assert on_site["prefix"] == str(python.parent.parent)
    assert on_site["modules"] == {**dict.fromkeys(DEPLOYED, True), **dict.fromkeys(DEV_ONLY, False)}
    # AND the development environment has them all (what the functions saw before)
    assert all(on_dev["modules"].values()), on_dev


def test_the_site_is_made_once_and_reused() -> None:
    # WHEN the site is asked for twice
    first, second = deployed_site.interpreter(), deployed_site.interpreter()
    # THEN it is the same interpreter, which exists
    assert first == second and first.exists()


@pytest.mark.parametrize(
    ("pins", "error"),
    [
        ("boto3\nno-such-package-chatstream==1.0  # a pin\n", r"no-such-package-chatstream .* run `make venv`"),
        ("boto3==0.0.1\n", r"pins boto3==0\.0\.1, but .* has [\d.]+: pin the same version in requirements/dev\.txt"),
    ],
    ids=["not installed", "another version"],
)
def test_a_pin_the_environment_does_not_satisfy_is_a_clear_error(
    pins: str, error: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # GIVEN a layer that pins a package this environment does not have, or not in that version
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(pins)
    monkeypatch.setattr(deployed_site, "LAYER_REQUIREMENTS", (requirements,))
    # WHEN the site is made
    # THEN the error names the package and the fix, and no site is made
    with pytest.raises(deployed_site.SiteError, match=error):
        deployed_site.create(tmp_path / "site")
    assert not (tmp_path / "site").exists()


def test_a_site_made_with_a_pruner_has_botocore_pruned_by_that_script_alone(tmp_path: Path) -> None:
    # GIVEN a layer's pruner (an earlier commit's, say) that marks the data it was given, from its own folder
    layer = tmp_path / "layer"
    layer.mkdir()
    pruner = layer / "prune_botocore_data.py"
    pruner.write_text(
        "import pathlib, sys\n"
        "data = pathlib.Path(sys.argv[1])\n"
        "(data / 'pruned-by').write_text(pathlib.Path.cwd().name + ' ' + str(len(list(data.iterdir()))))\n"
    )
    # WHEN a site is made with it
    python = deployed_site.create(tmp_path / "site", pruner=pruner)
    # THEN its botocore is a copy (the environment's is untouched) whose data that script, run from its folder, was
    # given whole: this tree's pruner did not run first
    botocore = next(python.parent.parent.glob("lib/python*/site-packages/botocore"))
    assert not botocore.is_symlink()
    folder, entries = (botocore / "data" / "pruned-by").read_text().split()
    assert folder == "layer" and int(entries) > 100
    # AND without one, botocore is the environment's, linked
    plain = deployed_site.create(tmp_path / "plain")
    assert next(plain.parent.parent.glob("lib/python*/site-packages/botocore")).is_symlink()


def test_every_function_of_the_stack_runs_on_the_site(start_stack: Callable[..., LocalStack]) -> None:
    # GIVEN the local stack
    stack = start_stack()
    assert stack.local_lambda is not None
    python = deployed_site.interpreter()
    for logical_id in ("RelayFunction", "ProxyFunction", "ConsumerFunction", "TurnReaperFunction"):
        # THEN each function's runtime is started on the deployed site's interpreter
        assert stack.local_lambda.spec(stack.name(logical_id)).python == python, logical_id
