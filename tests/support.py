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
SAMPLES = REPO_ROOT / "docs" / "samples"  # messages no function is invoked with (what ConsumerDLQ holds)
FUNCTIONS = REPO_ROOT / "functions"


def load_event(name: str) -> Any:
    return json.loads((EVENTS / name).read_text(encoding="utf-8"))


def load_sample(name: str) -> Any:
    return json.loads((SAMPLES / name).read_text(encoding="utf-8"))


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


class FakeContext:
    """The Lambda context a handler gets (the attributes Powertools reads)."""

    def __init__(
        self,
        function_name: str = "function",
        remaining_ms: int = 900_000,
        request_id: str = "c6af9ac6-7b61-11e6-9a41-93e812345678",
    ) -> None:
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.invoked_function_arn = f"arn:aws:lambda:us-east-1:123456789012:function:{function_name}"
        self.memory_limit_in_mb = 512
        self.aws_request_id = request_id
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "2026/11/29/[$LATEST]abc"
        self._remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self._remaining_ms
