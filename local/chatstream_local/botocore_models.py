"""The botocore models the deployed functions have, for the local stack's functions (botocore's ``AWS_DATA_PATH``).

The chatstream layer's build trims botocore's models of the services the functions call to the operations they call
(``layers/chatstream/prune_botocore_data.py``). The local stack runs the functions on the development environment's
botocore (linked into their site, ``chatstream_local.lambda_.deployed_site``), so it writes those same trimmed models,
from that botocore, into a folder that each function's ``AWS_DATA_PATH`` puts before botocore's own data: a function
that calls an operation the layer does not keep fails locally, in every test that runs it, as it would on Lambda.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import botocore
from botocore.loaders import Loader

from chatstream_local.template import REPO_ROOT

if TYPE_CHECKING:
    from types import ModuleType

PRUNE_SCRIPT = REPO_ROOT / "layers" / "chatstream" / "prune_botocore_data.py"


def _prune_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("chatstream_prune_botocore_data", PRUNE_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def layer_models() -> Path:
    """A folder with the layer's trimmed model of each service in the build's ``OPERATIONS``, written once per botocore
    version and build script (a folder in the temporary directory, reused by every later stack)."""
    script = PRUNE_SCRIPT.read_bytes()
    key = hashlib.sha256(script + botocore.__version__.encode()).hexdigest()[:16]
    root = Path(tempfile.gettempdir()) / f"chatstream-layer-models-{botocore.__version__}-{key}"
    if root.is_dir():
        return root
    prune = _prune_module()
    loader = Loader()  # botocore's own data only, whatever AWS_DATA_PATH this process has
    staging = Path(tempfile.mkdtemp(prefix=f"{root.name}-", dir=root.parent))
    try:
        for service in sorted(prune.OPERATIONS):
            version = loader.determine_latest_version(service, "service-2")
            model, _ = loader.load_data_with_path(f"{service}/{version}/service-2")
            target = staging / service / version / "service-2.json"
            target.parent.mkdir(parents=True)
            target.write_text(json.dumps(prune.layer_model(service, model), separators=(",", ":")), encoding="utf-8")
        with contextlib.suppress(OSError):  # another stack wrote it meanwhile: theirs is the same
            os.rename(staging, root)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return root
