"""LocalLambda.kill_busy_environment: the crash the chaos run injects into the consumer and the proxy."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from chatstream_local.lambda_.service import LocalLambda
from tests.fixtures.local_handlers.specs import buffered, wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.integration


@pytest.fixture
def local() -> Iterator[LocalLambda]:
    with LocalLambda([buffered("hold", "hold")]) as running:
        yield running


def test_killing_a_busy_environment_fails_its_invocation_and_the_next_one_runs_fresh(
    local: LocalLambda, tmp_path: Path
) -> None:
    # GIVEN an invocation that holds until released
    payload = json.dumps({"dir": str(tmp_path)}).encode()
    handle = local.invoke_stream("hold", payload)
    wait_until(lambda: any(tmp_path.glob("started-*")), what="the invocation to start")

    # WHEN its execution environment is killed mid-invocation
    killed = local.kill_busy_environment("hold")

    # THEN the kill names the invocation, and it fails as a crashed runtime does
    assert killed is not None
    assert (killed.request_id, killed.payload) == (handle.request_id, payload)
    result = handle.result()
    assert result.error_type == "Runtime.ExitError"
    assert "Runtime exited with error: signal: killed" in json.loads(result.payload)["errorMessage"]

    # AND the next invocation runs on a new environment
    (tmp_path / "release").touch()
    assert local.invoke("hold", payload).function_error is None
    assert local.stats()["hold"].environments_started == 2


def test_nothing_is_killed_when_no_environment_is_busy(local: LocalLambda, tmp_path: Path) -> None:
    # GIVEN a warm, idle environment
    (tmp_path / "release").touch()
    payload = json.dumps({"dir": str(tmp_path)}).encode()
    assert local.invoke("hold", payload).function_error is None

    # WHEN asked to kill a busy one
    # THEN there is none, and the idle one still serves
    assert local.kill_busy_environment("hold") is None
    assert local.invoke("hold", payload).function_error is None
    assert local.stats()["hold"].environments_started == 1
