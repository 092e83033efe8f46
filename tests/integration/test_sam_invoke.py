"""`make invoke FUNCTION=… EVENT=…` (sam local invoke without Docker) on every file in events/, as a user runs it.

The command runs in a subprocess with the Makefile's PYTHONPATH against a running local stack (found on
CHATSTREAM_PORT), and once with nothing listening there (it starts and stops a stack of its own) on what `sam build`
writes. Each event's answer is checked for what a user would look for in it; an event file added later is run too
(its function named by its file name's prefix) and must at least succeed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from chatstream.status import StopReason, TurnStatus
from chatstream_local.iam import Principal, Principals
from chatstream_local.lambda_.function_url import PRELUDE_DELIMITER
from chatstream_local.stack import LocalStack, StackSettings
from tests.support import EVENTS, REPO_ROOT

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

pytestmark = pytest.mark.integration

LOCAL_PATH = "local:layers/chatstream:layers/streaming-runtime"
FUNCTION_OF_PREFIX = {
    "relay": "RelayFunction",
    "proxy": "ProxyFunction",
    "consumer": "ConsumerFunction",
    "reaper": "TurnReaperFunction",
}
SAMPLE_SESSION = "3f9c2a7e5b1d4c8e9f0a1b2c3d4e5f60"
SAMPLE_REPLY = "You said: hello"


@dataclass
class Invoked:
    returncode: int
    stdout: bytes
    stderr: str

    def payload(self) -> Any:
        return json.loads(self.stdout)

    def http(self) -> tuple[dict[str, Any], bytes]:
        """A Function URL response as the relay streamed it: the prelude, and the body."""
        prelude, body = self.stdout.split(PRELUDE_DELIMITER, 1)
        return json.loads(prelude), body

    def json_body(self, status: int) -> Any:
        prelude, body = self.http()
        assert prelude["statusCode"] == status, self.stdout
        return json.loads(body)

    def sse(self) -> list[tuple[str | None, str, Any]]:
        """The body's events as (id, event, data), after a 200 prelude."""
        prelude, body = self.http()
        assert prelude["statusCode"] == 200, self.stdout
        events = []
        for block in body.decode().strip().split("\n\n"):
            fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
            if "event" in fields:
                events.append((fields.get("id"), fields["event"], json.loads(fields["data"])))
        return events

    def log(self) -> list[str]:
        """The function's log (between START and REPORT) that stderr shows."""
        lines = self.stderr.splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith("START RequestId: "))
        report = next(i for i, line in enumerate(lines) if line.startswith("REPORT RequestId: "))
        return lines[start : report + 1]


def invoke(
    function: str | None,
    event: str | None,
    port: int,
    *,
    build_dir: Path | None = None,
    timeout: float = 180,
    environ: dict[str, str] | None = None,
) -> Invoked:
    """`make invoke` as make runs it: python -m chatstream_local.sam.invoke with the Makefile's PYTHONPATH (and the
    test's environment, or ``environ``)."""
    args = [*([function] if function else []), *(["--event", event] if event else [])]
    if build_dir is not None:
        args += ["--build-dir", str(build_dir)]
    env = {**(os.environ if environ is None else environ), "PYTHONPATH": LOCAL_PATH, "CHATSTREAM_PORT": str(port)}
    result = subprocess.run(
        [sys.executable, "-m", "chatstream_local.sam.invoke", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        timeout=timeout,
        check=False,
    )
    return Invoked(result.returncode, result.stdout, result.stderr.decode())


@contextlib.contextmanager
def unused_port() -> Iterator[int]:
    """A port nothing listens on: held bound, never listening, so connections are refused and no server takes it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    """A running local stack, as `make local` runs it (auth NONE, the source tree)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        running = LocalStack(StackSettings(port=0, model_delay_ms=5)).start()
        try:
            yield running
        finally:
            running.stop()


# --------------------------------------------------------------------------- what each event must show


def _relay_health(run: Invoked) -> None:
    assert run.json_body(200) == {"status": "ok"}


def _relay_chat(run: Invoked) -> None:
    events = run.sse()
    assert events[0][1] == "meta" and events[-1][1] == "done"
    assert events[-1][2]["stop_reason"] == StopReason.END_TURN
    assert "".join(data["text"] for _, kind, data in events if kind == "token") == SAMPLE_REPLY
    assert events[0][2]["session_id"] != SAMPLE_SESSION  # POST /chat starts a session of its own


def _relay_bad_json(run: Invoked) -> None:
    assert run.json_body(400)["error"]["code"] == "invalid_json"


def _relay_events(run: Invoked) -> None:
    # Last-Event-ID 2 (or ?after=2) on the seeded turn: the rest of the reply, then done
    assert run.sse() == [
        ("3", "token", {"text": " hello"}),
        ("4", "done", {"stop_reason": "end_turn", "usage": {"input_tokens": 1, "output_tokens": 3}}),
    ]


def _relay_history(run: Invoked) -> None:
    history = run.json_body(200)
    assert history["session_id"] == SAMPLE_SESSION
    assert [(t["turn"], t["status"], t["user"], t["assistant"]) for t in history["turns"]] == [
        (1, TurnStatus.COMPLETE, "hello", SAMPLE_REPLY)
    ]


def _relay_cancel(run: Invoked) -> None:
    assert run.json_body(409)["error"]["code"] == "turn_finished"


def _relay_v1_chat_completion(run: Invoked) -> None:
    completion = run.json_body(200)
    assert completion["object"] == "chat.completion"
    assert completion["choices"][0]["message"] == {
        "role": "assistant",
        "content": SAMPLE_REPLY,
        "refusal": None,
        "annotations": [],
    }
    assert completion["choices"][0]["finish_reason"] == "stop"


def _proxy_generate(run: Invoked) -> None:
    result = run.payload()
    assert (result["session_id"], result["turn"]) == (SAMPLE_SESSION, 1)
    assert (result["type"], result["stop_reason"], result["error"]) == ("stop", StopReason.END_TURN, None)
    assert result["records"] >= 3  # start, the reply, stop


def _batch_without_failures(run: Invoked) -> None:
    assert run.payload() == {"batchItemFailures": []}


def _consumer_poison(run: Invoked) -> None:
    _batch_without_failures(run)  # the poison record went to the DLQ; the turn is completed without it
    assert any("completed without 1 of its records" in line for line in run.log())


EXPECTED: dict[str, Callable[[Invoked], None]] = {
    "relay-health.json": _relay_health,
    "relay-chat.json": _relay_chat,
    "relay-chat-base64.json": _relay_chat,
    "relay-chat-bad-json.json": _relay_bad_json,
    "relay-events.json": _relay_events,
    "relay-events-after.json": _relay_events,
    "relay-history.json": _relay_history,
    "relay-cancel.json": _relay_cancel,
    "relay-v1-chat-completions.json": _relay_v1_chat_completion,
    "proxy-generate.json": _proxy_generate,
    "consumer-turn.json": _batch_without_failures,
    "consumer-poison.json": _consumer_poison,
    "reaper-proxy-failure.json": _batch_without_failures,
}


def _succeeded(run: Invoked) -> None:
    """An event file without its own expectations: the function succeeded, and a relay's answer is not a 5xx."""
    if run.stdout.find(PRELUDE_DELIMITER) >= 0:
        assert run.http()[0]["statusCode"] < 500
    else:
        assert "errorType" not in run.payload()


def function_of(name: str) -> str:
    prefix = name.split("-", 1)[0]
    assert prefix in FUNCTION_OF_PREFIX, f"events/{name}: name it <{'|'.join(FUNCTION_OF_PREFIX)}>-….json"
    return FUNCTION_OF_PREFIX[prefix]


@pytest.mark.parametrize("name", sorted(path.name for path in EVENTS.glob("*.json")))
def test_every_sample_event_runs_on_the_running_stack(stack: LocalStack, name: str) -> None:
    # WHEN `make invoke FUNCTION=<its function> EVENT=events/<name>` runs while `make local` runs
    port = int(stack.url.rsplit(":", 1)[1])
    run = invoke(function_of(name), f"events/{name}", port)

    # THEN it succeeds, on that stack, saying which code ran, with the function's log on stderr
    assert run.returncode == 0, run.stderr
    assert f"on the local stack at {stack.url}" in run.stderr
    assert "(the source tree)" in run.stderr
    log = run.log()
    assert log[0].startswith("START RequestId: ") and log[-2].startswith("END RequestId: ")
    # AND its payload on stdout is what the event should produce
    EXPECTED.get(name, _succeeded)(run)


def test_the_seeded_session_is_said_on_stderr(stack: LocalStack) -> None:
    port = int(stack.url.rsplit(":", 1)[1])
    run = invoke("RelayFunction", "events/relay-history.json", port)
    assert f"invoke: seeded session {SAMPLE_SESSION} turn 1: finished ('hello' → '{SAMPLE_REPLY}')" in run.stderr
    assert "invoke: seeded" not in invoke("RelayFunction", "events/relay-health.json", port).stderr


def test_a_function_error_exits_1_with_the_error_document(stack: LocalStack, tmp_path: Path) -> None:
    # GIVEN an event the proxy refuses
    event = tmp_path / "bad-proxy-event.json"
    event.write_text(json.dumps({"session_id": "not a session id", "turn": 1}))
    port = int(stack.url.rsplit(":", 1)[1])
    # WHEN it is invoked THEN the error document is the payload, stderr says so, and the exit status is 1
    run = invoke("ProxyFunction", str(event), port)
    assert run.returncode == 1
    assert run.payload()["errorType"] == "InvalidEvent"
    assert "invoke: ProxyFunction returned an error (Unhandled)" in run.stderr


def sam_build(into: Path) -> Path:
    """What `sam build` (BuildMethod makefile) writes, from each resource's own Makefile target, without the
    layers' wheels (PIP/PYTHON=true: the local environment's packages stand in for them)."""
    targets = {
        "ChatstreamLayer": "layers/chatstream",
        "StreamingRuntimeLayer": "layers/streaming-runtime",
        "ProxyFunction": "functions/proxy",
        "RelayFunction": "functions/relay",
        "ConsumerFunction": "functions/consumer",
        "TurnReaperFunction": "functions/reaper",
    }
    for logical_id, source in targets.items():
        out = into / logical_id
        out.mkdir(parents=True)
        subprocess.run(
            ["make", "-s", "-C", str(REPO_ROOT / source), f"build-{logical_id}", f"ARTIFACTS_DIR={out}"]
            + ["PIP=true", "PYTHON=true"],
            check=True,
            timeout=120,
        )
    return into


def test_with_no_stack_running_it_starts_one_on_what_sam_build_wrote(tmp_path: Path) -> None:
    # GIVEN `sam build`'s output, whose proxy says so when it loads, and nothing listening on CHATSTREAM_PORT
    built = sam_build(tmp_path / "build")
    with (built / "ProxyFunction" / "app.py").open("a") as app:
        app.write('\nprint("the built copy of the proxy")  # noqa: T201\n')
    # The build's Python 3.13 bytecode is loaded without a look at the source (make/bytecode.mk): edited, it goes.
    for bytecode in (built / "ProxyFunction" / "__pycache__").glob("app.*.pyc"):
        bytecode.unlink()
    # WHEN `make invoke` runs the proxy's sample event
    with unused_port() as port:
        run = invoke("ProxyFunction", "events/proxy-generate.json", port, build_dir=built)

    # THEN it started a stack of its own, ran the built handler (its log says so), and the turn was generated
    assert run.returncode == 0, run.stderr
    assert f"invoke: nothing listens on port {port}: starting a local stack for this invocation" in run.stderr
    assert f"code: {built / 'ProxyFunction'} with layers {built / 'ChatstreamLayer' / 'python'}" in run.stderr
    assert "(sam build's output)" in run.stderr
    lines = run.stderr.splitlines()  # the cold start's own output comes before START, as in CloudWatch
    assert lines.index("the built copy of the proxy") < lines.index(run.log()[0])
    _proxy_generate(run)
    # AND it stopped that stack: nothing it started is left listening, and the port is still free
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_a_running_stack_on_the_source_tree_says_how_to_run_the_build(stack: LocalStack, tmp_path: Path) -> None:
    built = tmp_path / "build"
    shutil.copytree(REPO_ROOT / "functions" / "relay", built / "RelayFunction")
    port = int(stack.url.rsplit(":", 1)[1])
    run = invoke("RelayFunction", "events/relay-health.json", port, build_dir=built)
    assert run.returncode == 0
    assert "is not what that stack runs: `make local ARGS=--built` would run it" in run.stderr


INVOKER = Principal("invoker", "AKIAINVOKEREXAMPLE", "invoker-secret")


def test_under_aws_iam_it_signs_with_your_key(start_stack: Callable[..., LocalStack], tmp_path: Path) -> None:
    # GIVEN `make local ARGS="--auth-type AWS_IAM"`, whose principals are the keys of the user's AWS configuration
    stack = start_stack(parameter_overrides={"FunctionUrlAuthType": "AWS_IAM"}, principals=Principals([INVOKER]))
    port = int(stack.url.rsplit(":", 1)[1])
    no_files = {"AWS_CONFIG_FILE": str(tmp_path / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none")}
    base = {name: value for name, value in os.environ.items() if not name.startswith("AWS_")} | no_files
    keys = {"AWS_ACCESS_KEY_ID": INVOKER.access_key, "AWS_SECRET_ACCESS_KEY": INVOKER.secret_key}
    # WHEN the user runs `make invoke` with their key in the environment
    run = invoke("RelayFunction", "events/relay-health.json", port, environ={**base, **keys})
    # THEN the Lambda API takes its signed calls, as the AWS CLI's would be
    assert run.returncode == 0, run.stderr
    _relay_health(run)
    # AND without a key of theirs it says what is missing, in one line
    unsigned = invoke("RelayFunction", "events/relay-health.json", port, environ=base)
    assert unsigned.returncode == 2
    assert f"invoke: the local stack at {stack.url} runs with --auth-type AWS_IAM" in unsigned.stderr
    assert "set AWS_PROFILE to a profile with a static key" in unsigned.stderr
