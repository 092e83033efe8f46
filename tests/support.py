"""Shared test helpers: load a function's handler by path, read events, build AWS resources."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import ModuleType

REPO_ROOT = Path(__file__).resolve().parents[1]
EVENTS = REPO_ROOT / "events"
FUNCTIONS = REPO_ROOT / "functions"


def load_event(name: str) -> Any:
    return json.loads((EVENTS / name).read_text(encoding="utf-8"))


def load_function(name: str) -> ModuleType:
    """Import ``functions/<name>/app.py`` freshly (a cold start), under a unique module name."""
    module_name = f"chatstream_function_{name}"
    sys.modules.pop(module_name, None)
    spec = importlib.util.spec_from_file_location(module_name, FUNCTIONS / name / "app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module
