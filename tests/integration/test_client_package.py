"""The client tooling installs as a package (`pip install ./client`), so user code can import SigV4Auth."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import zipfile
from typing import TYPE_CHECKING

import pytest

from tests.support import REPO_ROOT

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.integration

# An import's top-level module → the distribution that provides it.
DISTRIBUTIONS = {"botocore": "botocore", "httpx": "httpx", "httpx_sse": "httpx-sse"}


def third_party_imports() -> set[str]:
    names: set[str] = set()
    for source in (REPO_ROOT / "client/chatstream_client").glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
    return {name for name in names if name not in sys.stdlib_module_names and name != "chatstream_client"}


def test_the_client_builds_a_wheel_that_declares_what_it_imports(tmp_path: Path) -> None:
    # GIVEN a copy of client/ (a build writes beside its sources)
    source = shutil.copytree(REPO_ROOT / "client", tmp_path / "client", ignore=shutil.ignore_patterns("__pycache__"))
    # WHEN pip builds it
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(source),
        ],
        check=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("chatstream_client-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        files = set(archive.namelist())
        metadata = next(archive.read(name).decode() for name in files if name.endswith(".dist-info/METADATA"))
    # THEN it holds the package, SigV4Auth's module among it, its typing marker and the licence, and describes itself
    assert {f"chatstream_client/{name}.py" for name in ("__init__", "auth", "api")} <= files
    assert "chatstream_client/py.typed" in files
    assert any(name.endswith(".dist-info/LICENSE") for name in files)
    assert "Description-Content-Type: text/markdown" in metadata and "# chatstream-client" in metadata
    # AND it requires every distribution the package imports
    required = {
        line.split(":", 1)[1].strip().split(">")[0].split("=")[0]
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist:")
    }
    assert {DISTRIBUTIONS[name] for name in third_party_imports()} == required


def test_the_clients_licence_is_the_repositorys() -> None:
    assert (REPO_ROOT / "client/LICENSE").read_text() == (REPO_ROOT / "LICENSE").read_text()
