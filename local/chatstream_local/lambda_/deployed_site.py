"""The Python a function runs on locally: this interpreter, seeing only the packages the function has on Lambda.

On Lambda a Python function's process sees the standard library, the managed runtime's own packages (its runtime
interface client, awslambdaric, and the AWS SDK, boto3 and botocore) and the function's code and layers; the managed
runtime has no AWS CRT (``awscrt``: aws/aws-lambda-base-images#147 asks for images with it). The development
environment holds far more (the CRT, pyOpenSSL, moto, pytest...), and some of it changes what the functions do:

- botocore signs every request with the CRT, and imports pyOpenSSL, whenever they are importable (``botocore.compat``,
  ``botocore.httpsession``): other code on every AWS call, and ~50 ms more init;
- a function that imports a package its layers do not pin would run locally and fail on Lambda.

So the local Lambda runs every function on a virtual environment of this interpreter whose site-packages hold only the
closures the layers' ``requirements.txt`` pin (the chatstream layer's, which every function has, and the streaming
runtime layer's: awslambdaric and what it needs, which the managed runtime has too), linked from the development
environment: the versions the tests run with, nothing copied, nothing downloaded. The development environment must
have each pin in its version (``requirements/dev.txt`` pins the same, ``tests/unit/test_packaging.py``); where it does
not, the stack does not start (:class:`SiteError` names the package and the fix). :func:`interpreter` makes it once per
development environment and reuses it (a folder in the temporary directory, as ``botocore_models`` does);
:func:`create` makes one in a given folder (``bench/coldstart.py`` prunes its botocore copy as the layer's build does;
the stack's functions read the pruned models through ``AWS_DATA_PATH`` instead, ``chatstream_local.botocore_models``).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path, PurePosixPath

from chatstream_local.template import REPO_ROOT

LAYER_REQUIREMENTS = (
    REPO_ROOT / "layers" / "chatstream" / "requirements.txt",
    REPO_ROOT / "layers" / "streaming-runtime" / "requirements.txt",
)
PRUNE_BOTOCORE_DATA = REPO_ROOT / "layers" / "chatstream" / "prune_botocore_data.py"


class SiteError(RuntimeError):
    """The development environment does not have a package a layer pins, in the version it pins."""


def _pins(files: tuple[Path, ...] | None = None) -> list[tuple[str, str | None, Path]]:
    """(name, version pinned with ``==`` or None, file) of each requirement line of ``files``."""
    pins = []
    for path in LAYER_REQUIREMENTS if files is None else files:
        for line in path.read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                name = re.split(r"[=<>~!\[; ]", line, maxsplit=1)[0]
                version = re.search(r"==\s*([^\s;]+)", line)
                pins.append((name, version.group(1) if version else None, path))
    return pins


def _distributions() -> list[importlib.metadata.Distribution]:
    """The installed distribution of each layer pin: this environment's, which must be the pinned version."""
    distributions = []
    for name, version, path in _pins():
        where = path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            raise SiteError(f"{name} (pinned by {where}) is not installed in {sys.prefix}: run `make venv`") from None
        if version is not None and dist.version != version:
            raise SiteError(
                f"{where} pins {name}=={version}, but {sys.prefix} has {dist.version}: pin the same version in "
                "requirements/dev.txt and run `make venv`"
            )
        distributions.append(dist)
    return distributions


def create(directory: Path, *, pruner: Path | None = None) -> Path:
    """A virtual environment in ``directory`` (which must not exist or be empty) whose site-packages hold only the
    layers' pinned packages, linked from this environment (with ``pruner``, a layer's ``prune_botocore_data.py``,
    botocore copied and its data pruned by that script as that layer's build prunes it: :data:`PRUNE_BOTOCORE_DATA`
    is this tree's); its interpreter's path."""
    distributions = _distributions()
    venv.EnvBuilder(with_pip=False, symlinks=True).create(directory)
    site = next(directory.glob("lib/python*/site-packages"))
    for dist in distributions:
        for top in {PurePosixPath(str(f)).parts[0] for f in dist.files or ()}:
            if top in ("..", "__pycache__") or top.endswith(".pth"):
                continue
            source, target = Path(str(dist.locate_file(top))), site / top
            if pruner is not None and top == "botocore" and not target.exists():
                shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
                # run as the layer's Makefile runs it: from its folder
                subprocess.run([sys.executable, pruner.name, str(target / "data")], cwd=pruner.parent, check=True)  # noqa: S603
            elif source.exists() and not target.exists():
                target.symlink_to(source)
    return directory / "bin" / "python"


def interpreter() -> Path:
    """The interpreter of this environment's deployed site (:func:`create`, botocore linked), made once per interpreter,
    environment and set of pinned versions, and reused by every later stack."""
    distributions = _distributions()
    identity = [sys.version, os.path.realpath(sys.executable), sys.prefix]
    identity += [f"{d.metadata['Name']}=={d.version}@{d.locate_file('')}" for d in distributions]
    key = hashlib.sha256("\n".join(identity).encode()).hexdigest()[:16]
    root = Path(tempfile.gettempdir()) / f"chatstream-lambda-site-{key}"
    python = root / "bin" / "python"
    if python.exists():
        return python
    staging = Path(tempfile.mkdtemp(prefix=f"{root.name}-", dir=root.parent))
    try:
        create(staging)
        with contextlib.suppress(OSError):  # another stack made it meanwhile: theirs is the same
            os.rename(staging, root)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return python
