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

    def __init__(
        self,
        address: str,
        events: list[object] | None = None,
        refuse: bool = False,
        *,
        broken_responses: int = 0,
        next_failures: int = 0,
    ) -> None:
        self.address = address
        self.events = list(events or [])
        self.refuse = refuse
        self.broken_responses = broken_responses  # this many responses fail on the connection
        self.next_failures = next_failures  # this many /next requests fail on the connection
        self.sent: list[tuple[str, Any]] = []
        self.closed = 0
        ScriptedClient.instances.append(self)

    def next_invocation(self) -> Invocation:
        if self.next_failures:
            self.next_failures -= 1
            raise ConnectionRefusedError(111, "Connection refused")
        request_id = f"req-{len(self.sent) + 1}"
        body = json.dumps(self.events.pop(0)).encode()
        return Invocation(request_id, int(time.time() * 1000) + 60_000, body)

    def post_response(self, request_id: str, body: bytes, content_type: str) -> None:
        self.sent.append(("response", json.loads(body)))
        if self.broken_responses:
            self.broken_responses -= 1
            raise ConnectionResetError(104, "Connection reset by peer")
        if self.refuse:
            raise RuntimeAPIError(f"/invocation/{request_id}/response", 413, b"too large")

    def close(self) -> None:
        self.closed += 1

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
    assert "[ERROR] Runtime.ImportModuleError" in capsys.readouterr().out


def test_serve_survives_a_failed_invocation() -> None:
    # GIVEN a handler that fails on the first event and not on the second
    client = ScriptedClient("127.0.0.1:9001", [{"by": 0}, {"by": 4}])
    # WHEN two invocations are served
    bootstrap.serve(client, divide, limit=2)  # type: ignore[arg-type]
    # THEN the first was reported as an error and the second answered
    assert client.sent == [("error", "ZeroDivisionError"), ("response", {"result": 0.25})]


def test_serve_survives_a_refused_response(caplog: pytest.LogCaptureFixture) -> None:
    # GIVEN a Runtime API that refuses the responses (e.g. too large)
    client = ScriptedClient("127.0.0.1:9001", [{"by": 1}, {"by": 2}], refuse=True)
    # WHEN two invocations are served THEN both were attempted, and the refusal was logged
    bootstrap.serve(client, divide, limit=2)  # type: ignore[arg-type]
    assert [kind for kind, _ in client.sent] == ["response", "response"]
    assert "413" in caplog.text


def test_serve_survives_a_broken_connection(caplog: pytest.LogCaptureFixture) -> None:
    # GIVEN a Runtime API connection that breaks while the first response is being sent
    client = ScriptedClient("127.0.0.1:9001", [{"by": 1}, {"by": 2}], broken_responses=1)
    # WHEN two invocations are served
    bootstrap.serve(client, divide, limit=2)  # type: ignore[arg-type]
    # THEN the loop dropped that connection, said so, and the same process served the next invocation
    assert client.sent == [("response", {"result": 1.0}), ("response", {"result": 0.5})]
    assert client.closed == 1
    assert "failed while answering req-1" in caplog.text


def test_next_invocation_is_retried_with_backoff() -> None:
    # GIVEN a Runtime API that refuses the first three connections
    client = ScriptedClient("127.0.0.1:9001", [{"by": 4}], next_failures=3)
    waits: list[float] = []
    # WHEN the loop asks for an invocation
    bootstrap.serve(client, divide, limit=1, sleep=waits.append)  # type: ignore[arg-type]
    # THEN it asked again after awslambdaric's doubling waits, and served the invocation
    assert waits == [0.1, 0.2, 0.4]
    assert client.sent == [("response", {"result": 0.25})]


def test_a_runtime_api_that_stays_away_ends_the_process(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN a Runtime API that refuses every connection
    (tmp_path / "fine.py").write_text("def handler(event, context):\n    return 1\n")
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(bootstrap, "RuntimeClient", lambda address: ScriptedClient(address, next_failures=99))
    monkeypatch.setattr(bootstrap.time, "sleep", lambda seconds: None)
    env = {"AWS_LAMBDA_RUNTIME_API": "127.0.0.1:9001", "_HANDLER": "fine.handler", "LAMBDA_TASK_ROOT": str(tmp_path)}
    # WHEN the runtime starts THEN after five attempts it exits 1 (Lambda starts a new environment), saying why
    assert bootstrap.main(env) == 1
    assert ScriptedClient.instances[-1].next_failures == 99 - 5
    assert "lost the Runtime API at 127.0.0.1:9001" in caplog.text
