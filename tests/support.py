"""Shared test helpers: load a function's handler by path, read events, build AWS resources."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import random
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from types import ModuleType


REPO_ROOT = Path(__file__).resolve().parents[1]
EVENTS = REPO_ROOT / "events"
SAMPLES = REPO_ROOT / "docs" / "samples"  # messages no function is invoked with (what ConsumerDLQ holds)
FUNCTIONS = REPO_ROOT / "functions"


def under_ci() -> bool:
    """Whether this is CI's run (``CI=true``, as CI services set it and ``.ci/run`` exports it)."""
    return os.environ.get("CI") == "true"


def require_or_skip(available: bool, missing: str) -> None:
    """A prerequisite of the machine a test needs (a program, a browser, a Python): without it the test skips, but
    under CI (:func:`under_ci`) it fails, so that CI never passes a run that left a test out. ``missing`` says what is
    missing and how to get it. A condition that is no prerequisite (a platform the test does not apply to) is a plain
    ``pytest.skip``."""
    if available:
        return
    if under_ci():
        pytest.fail(f"{missing} (under CI=true a missing prerequisite fails the run)", pytrace=False)
    pytest.skip(missing)


FUZZ_SEED_VARIABLE = "CHATSTREAM_FUZZ_SEED"


@functools.cache
def fuzz_seed() -> int:
    """The seed of this run's random examples (hypothesis's, and schemathesis's beside its fixed ones):
    ``CHATSTREAM_FUZZ_SEED`` when set, else one drawn for the run. tests/conftest.py prints it when a test failed, so
    the run's examples can be drawn again."""
    value = os.environ.get(FUZZ_SEED_VARIABLE, "").strip()
    if not value:
        return random.SystemRandom().randrange(2**32)
    if not value.isdigit():
        raise ValueError(f"{FUZZ_SEED_VARIABLE} must be a whole number (a seed a run printed), not {value!r}")
    return int(value)


AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
}
# What else botocore takes from the environment that would send a test's requests past moto, or name a profile
# the empty config does not have: every AWS_ENDPOINT_URL* variable besides these.
_AWS_ENV_AWAY = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_USE_FIPS_ENDPOINT", "AWS_USE_DUALSTACK_ENDPOINT")


def isolate_aws(patch: pytest.MonkeyPatch, directory: Path) -> None:
    """Fake credentials and a region, and none of the developer's AWS configuration: botocore reads empty config
    and credentials files made in ``directory`` instead of ~/.aws (where ``use_fips_endpoint`` or ``endpoint_url``
    would send requests away from moto, or to a real account), and no variable that picks a profile, an endpoint
    or an endpoint variant."""
    for name in ("config", "credentials"):
        (directory / f"aws-{name}").touch()
    patch.setenv("AWS_CONFIG_FILE", str(directory / "aws-config"))
    patch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(directory / "aws-credentials"))
    for name, value in AWS_ENV.items():
        patch.setenv(name, value)
    for name in [*_AWS_ENV_AWAY, *(name for name in os.environ if name.startswith("AWS_ENDPOINT_URL"))]:
        patch.delenv(name, raising=False)


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
