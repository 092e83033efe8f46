"""The main loop: init errors, serving, surviving failures."""

from __future__ import annotations

import json
import sys
import time
import uuid
from typing import TYPE_CHECKING, Any

from streaming_runtime import bootstrap
from streaming_runtime.client import RuntimeAPIError
from streaming_runtime.context import Invocation

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

    from streaming_runtime.errors import ErrorReport


class ScriptedClient:
    """Stands in for RuntimeClient: hands out the given events, records responses and errors."""

    instances: list[ScriptedClient] = []

    def __init__(self, address: str, events: list[object] | None = None, refuse: bool = False) -> None:
        self.address = address
        self.events = list(events or [])
        self.refuse = refuse
        self.sent: list[tuple[str, Any]] = []
        ScriptedClient.instances.append(self)

    def next_invocation(self) -> Invocation:
        request_id = f"req-{len(self.sent) + 1}"
        body = json.dumps(self.events.pop(0)).encode()
        return Invocation(request_id, int(time.time() * 1000) + 60_000, body)

    def post_response(self, request_id: str, body: bytes, content_type: str) -> None:
        self.sent.append(("response", json.loads(body)))
        if self.refuse:
            raise RuntimeAPIError(f"/invocation/{request_id}/response", 413, b"too large")

    def post_error(self, request_id: str, error: ErrorReport) -> None:
        self.sent.append(("error", error.error_type))

    def post_init_error(self, error: ErrorReport) -> None:
        self.sent.append(("init-error", error.to_dict()))


def divide(event: Any, context: Any) -> dict[str, float]:
    return {"result": 1 / event["by"]}


def test_without_runtime_api_it_exits_with_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN no AWS_LAMBDA_RUNTIME_API WHEN started THEN exit status 2 and a message naming the variable
    assert bootstrap.main({}) == 2
    assert "AWS_LAMBDA_RUNTIME_API" in capsys.readouterr().err


def test_init_error_is_posted_and_exits_non_zero(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a handler setting naming a module that does not exist
    monkeypatch.setattr(bootstrap, "RuntimeClient", ScriptedClient)
    monkeypatch.setattr(sys, "path", list(sys.path))
    env = {
        "AWS_LAMBDA_RUNTIME_API": "127.0.0.1:9001",
        "_HANDLER": f"m{uuid.uuid4().hex}.h",
        "LAMBDA_TASK_ROOT": str(tmp_path),
    }
    # WHEN started
    status = bootstrap.main(env)
    # THEN it reported the init error to the Runtime API, logged it, and exits 1
    assert status == 1
    kind, error = ScriptedClient.instances[-1].sent[0]
    assert kind == "init-error"
    assert error["errorType"] == "Runtime.ImportModuleError"
    assert "[ERROR] Runtime.ImportModuleError" in capsys.readouterr().err


def test_serve_survives_a_failed_invocation() -> None:
    # GIVEN a handler that fails on the first event and not on the second
    client = ScriptedClient("127.0.0.1:9001", [{"by": 0}, {"by": 4}])
    # WHEN two invocations are served
    bootstrap.serve(client, divide, limit=2)  # type: ignore[arg-type]
    # THEN the first was reported as an error and the second answered
    assert client.sent == [("error", "ZeroDivisionError"), ("response", {"result": 0.25})]


def test_serve_survives_a_refused_response(capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a Runtime API that refuses the responses (e.g. too large)
    client = ScriptedClient("127.0.0.1:9001", [{"by": 1}, {"by": 2}], refuse=True)
    # WHEN two invocations are served THEN both were attempted, and the refusal was logged
    bootstrap.serve(client, divide, limit=2)  # type: ignore[arg-type]
    assert [kind for kind, _ in client.sent] == ["response", "response"]
    assert "413" in capsys.readouterr().err
