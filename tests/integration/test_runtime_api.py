"""The local Runtime API: execution environments on awslambdaric and a streaming runtime, over loopback."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from chatstream_local.lambda_ import execution_environment
from chatstream_local.lambda_.exceptions import UnknownFunction
from chatstream_local.lambda_.function_spec import FUNCTION_NICE, SHARED_FUNCTION_NICE, FunctionSpec
from chatstream_local.lambda_.runtime_executor import environment_variables, exit_detail, has_exited, runtime_command
from chatstream_local.lambda_.service import LocalLambda
from chatstream_local.lambda_.telemetry_log import MalformedFrame, TelemetryRecord, read_records, split_records
from tests.fixtures.local_handlers.specs import HANDLERS, buffered, on_layer, streamed, wait_until

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


pytestmark = pytest.mark.integration

SPECS = [
    buffered("echo", "echo", memory_mb=256),
    buffered("echo-shared", "echo", nice=SHARED_FUNCTION_NICE),
    buffered("fail", "fail"),
    buffered("crash", "crash"),
    buffered("broken", "broken_import.handler"),
    buffered("slow", "sleep_if_asked", timeout_s=1.0),
    buffered("hold", "hold"),
    buffered("big", "big"),
    buffered("noisy", "noisy"),
    streamed("gated", "gated"),
    streamed("big-stream", "big"),
    streamed("fail-mid", "fail_mid"),
    streamed("fail-before", "fail_before"),
    streamed("broken-stream", "nope"),
    on_layer("layer", "by_case"),
    FunctionSpec(name="no-runtime", handler="x.y", code_dirs=[HANDLERS], command=["/nonexistent/bootstrap"]),
]


@pytest.fixture
def log_lines() -> list[tuple[str, str]]:
    return []


@pytest.fixture
def local(log_lines: list[tuple[str, str]]) -> Iterator[LocalLambda]:
    with LocalLambda(SPECS, log_sink=lambda label, line: log_lines.append((label, line))) as running:
        yield running


def _exited(pid: int) -> bool:
    """Whether the process has exited: a zombie not yet reaped, or gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_buffered_invoke_gives_the_handler_its_event_context_and_environment(local: LocalLambda) -> None:
    # GIVEN a function on awslambdaric that echoes what it sees
    # WHEN it is invoked with an event and a client context
    result = local.invoke("echo", b'{"hello": "world"}', client_context='{"custom": {"caller": "test"}}')

    # THEN the caller gets the handler's return value, and the handler saw a Lambda-like context
    assert result.function_error is None
    seen = json.loads(result.payload)
    assert seen["event"] == {"hello": "world"}
    assert seen["request_id"] == result.request_id
    assert seen["function_name"] == "echo"
    assert seen["invoked_function_arn"].endswith(":function:echo")
    assert 0 < seen["remaining_ms"] <= 10_000
    assert seen["memory_limit_in_mb"] == "256"
    assert seen["log_group_name"] == "/aws/lambda/echo"
    assert seen["client_context"] == {"caller": "test"}
    assert seen["env"]["GREETING"] == "hello from the spec"
    assert seen["env"]["LAMBDA_TASK_ROOT"] == str(HANDLERS)


def test_environments_run_at_their_niceness_in_the_stacks_session(local: LocalLambda) -> None:
    # GIVEN a function at the default niceness and one at the shared functions' (an event source mapping's)
    # WHEN each is invoked
    default = json.loads(local.invoke("echo", b"{}").payload)
    shared = json.loads(local.invoke("echo-shared", b"{}").payload)

    # THEN each environment is its own process group (kill() reaches all of it) in this process's session: with
    # Linux's autogroup a session of its own would get an equal share of the CPU whatever its niceness
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    for seen in (default, shared):
        assert seen["process_group"] == seen["pid"]
        assert seen["session"] == os.getsid(0)
    assert default["nice"] == max(ours, FUNCTION_NICE)
    assert shared["nice"] == max(ours, SHARED_FUNCTION_NICE)


def test_a_warm_environment_is_reused(local: LocalLambda) -> None:
    # GIVEN a function invoked once
    first = json.loads(local.invoke("echo", b"{}").payload)

    # WHEN it is invoked again after the first invocation ended
    second = json.loads(local.invoke("echo", b"{}").payload)

    # THEN the same process served both, and only one environment was started
    assert first["pid"] == second["pid"]
    assert local.stats()["echo"].environments_started == 1


def test_a_handler_error_is_reported_as_an_unhandled_function_error(local: LocalLambda) -> None:
    # WHEN the handler raises
    result = local.invoke("fail", b"{}")

    # THEN the caller gets Lambda's error document, and the environment survives for the next invocation
    assert result.function_error == "Unhandled"
    assert result.error_type == "ValueError"
    document = json.loads(result.payload)
    assert document["errorMessage"] == "the handler failed on purpose"
    assert document["errorType"] == "ValueError"
    local.invoke("fail", b"{}")
    assert local.stats()["fail"].environments_started == 1


def test_the_handler_output_goes_to_the_log_sink(local: LocalLambda, log_lines: list[tuple[str, str]]) -> None:
    # WHEN a handler prints
    result = local.invoke("noisy", b"{}")

    # THEN its line reaches the log sink, labelled with the function and environment
    assert json.loads(result.payload) == "ok"
    wait_until(lambda: ("noisy#1", "a line the handler printed") in log_lines, what="the printed line")


def test_an_init_error_fails_the_invocation_and_discards_the_environment(local: LocalLambda) -> None:
    # GIVEN a handler module whose import raises
    # WHEN it is invoked
    result = local.invoke("broken", b"{}")

    # THEN the caller gets the runtime's init error, and no environment is left running
    assert result.function_error == "Unhandled"
    assert result.error_type == "Runtime.ImportModuleError"
    assert "cannot be imported (on purpose)" in json.loads(result.payload)["errorMessage"]
    wait_until(lambda: local.stats()["broken"].environments_alive == 0, what="the environment to go")


def test_an_init_error_of_a_streaming_runtime_is_reported(local: LocalLambda) -> None:
    # WHEN the streaming runtime cannot load its handler
    handle = local.invoke_stream("broken-stream", b"{}")

    # THEN nothing is streamed and the error is the init error it reported
    assert handle.read_all() == b""
    assert handle.error is not None
    assert handle.error.error_type == "Runtime.ImportModuleError"
    assert handle.response_start() is None


def test_a_process_that_exits_mid_invocation_gives_an_exit_error_and_is_replaced(local: LocalLambda) -> None:
    # WHEN the handler's process exits during the invocation
    result = local.invoke("crash", b"{}")

    # THEN the caller gets Runtime.ExitError with the exit status
    assert result.error_type == "Runtime.ExitError"
    assert "exit status 3" in json.loads(result.payload)["errorMessage"]

    # AND the next invocation runs on a new environment
    again = local.invoke("crash", b"{}")
    assert again.error_type == "Runtime.ExitError"
    assert local.stats()["crash"].environments_started == 2


def test_an_environment_whose_process_exits_while_idle_gives_the_next_invocation_a_new_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a local Lambda whose exit watcher has seen a process exit but not yet retired its environment (the
    # moment an invocation could be handed to a dead environment)
    watcher_saw_exit, release_watcher = threading.Event(), threading.Event()

    def held_exit_detail(returncode: int) -> str:
        watcher_saw_exit.set()
        release_watcher.wait(timeout=20)
        return exit_detail(returncode)

    monkeypatch.setattr(execution_environment, "exit_detail", held_exit_detail)
    with LocalLambda([buffered("echo", "echo")]) as local:
        # AND a warm environment whose process exits between invocations
        pid = json.loads(local.invoke("echo", b"{}").payload)["pid"]
        os.kill(pid, signal.SIGKILL)
        assert watcher_saw_exit.wait(timeout=20)

        # WHEN the next invocation comes
        result = local.invoke("echo", b"{}")
        release_watcher.set()

        # THEN it runs after a new init, as Lambda resets such an environment: no Runtime.ExitError
        assert result.function_error is None, result.payload
        assert json.loads(result.payload)["pid"] != pid
        assert local.stats()["echo"].environments_started == 2


def test_a_process_that_exited_is_known_before_it_is_reaped() -> None:
    # GIVEN a child process that has exited and not been reaped (a zombie)
    process = subprocess.Popen(["true"])
    wait_until(lambda: _exited(process.pid), what="the process to exit")

    # THEN it has exited, and it is still the caller's to reap, with its status
    assert has_exited(process)
    assert has_exited(process)
    assert process.wait(timeout=5) == 0
    assert has_exited(process)


def test_the_deadline_kills_the_environment_and_the_next_invocation_gets_a_fresh_one(local: LocalLambda) -> None:
    # GIVEN a function with a 1 s timeout, warmed up
    warm_pid = json.loads(local.invoke("slow", b"{}").payload)["pid"]

    # WHEN an invocation runs past its deadline
    result = local.invoke("slow", b'{"sleep": true}')

    # THEN the caller gets Lambda's timeout error and the environment's process is killed
    assert result.function_error == "Unhandled"
    assert result.error_type == "Sandbox.Timedout"
    assert "Task timed out after 1.00 seconds" in json.loads(result.payload)["errorMessage"]
    wait_until(lambda: not _alive(warm_pid), what="the timed-out process to die")

    # AND the next invocation works, on a new environment
    fresh = local.invoke("slow", b"{}")
    assert fresh.function_error is None
    assert json.loads(fresh.payload)["pid"] != warm_pid
    assert local.stats()["slow"].environments_started == 2


def test_concurrent_invocations_are_served_by_separate_environments(local: LocalLambda, tmp_path: Path) -> None:
    # GIVEN two invocations that each hold until released
    payload = json.dumps({"dir": str(tmp_path)}).encode()
    first = local.invoke_stream("hold", payload)
    second = local.invoke_stream("hold", payload)

    # WHEN both have started (only possible if they run at the same time)
    wait_until(lambda: len(list(tmp_path.glob("started-*"))) == 2, what="both invocations to start")
    (tmp_path / "release").touch()

    # THEN two processes served them, and a later invocation reuses a warm one
    pids = {json.loads(first.read_all())["pid"], json.loads(second.read_all())["pid"]}
    assert len(pids) == 2
    third = json.loads(local.invoke("hold", payload).payload)["pid"]
    assert third in pids
    assert local.stats()["hold"].environments_started == 2


def test_a_buffered_response_over_6_mb_is_a_function_error(local: LocalLambda) -> None:
    # WHEN the handler returns more than the synchronous payload quota
    result = local.invoke("big", json.dumps({"size": 7 * 1024 * 1024}).encode())

    # THEN the caller gets Function.ResponseSizeTooLarge
    assert result.error_type == "Function.ResponseSizeTooLarge"
    assert "6291556 bytes" in json.loads(result.payload)["errorMessage"]


def test_a_streaming_runtime_is_held_to_6_mb_when_the_invocation_is_buffered(local: LocalLambda) -> None:
    # GIVEN a streaming handler that writes 7 MB
    payload = json.dumps({"size": 7 * 1024 * 1024}).encode()

    # WHEN it is read as a stream (a RESPONSE_STREAM Function URL, InvokeWithResponseStream) THEN it passes whole
    streamed = local.invoke_stream("big-stream", payload, streamed=True).result()
    assert streamed.function_error is None and len(streamed.payload) >= 7 * 1024 * 1024
    # AND invoked buffered (Invoke, an event source, an Event), Lambda holds it to 6 MB
    buffered = local.invoke("big-stream", payload)
    assert buffered.error_type == "Function.ResponseSizeTooLarge"


def test_a_streamed_chunk_reaches_the_caller_before_the_handler_produces_the_next(
    local: LocalLambda, tmp_path: Path
) -> None:
    # GIVEN a streaming handler that yields, then waits for a signal file, then yields again
    signal = tmp_path / "signal"
    event = {"queryStringParameters": {"signal": str(signal)}}
    handle = local.invoke_stream("gated", json.dumps(event).encode())

    # WHEN the caller reads the stream
    received = b""
    chunks = iter(handle)
    while b"first\n" not in received:
        received += next(chunks)

    # THEN "first" arrived while the handler still waits, before any "second"
    assert b"second" not in received
    assert not handle.done
    start = handle.response_start()
    assert start is not None and start.streaming
    assert start.content_type == "application/vnd.awslambda.http-integration-response"

    # AND once signalled, the rest follows and the stream ends without error
    signal.touch()
    received += b"".join(chunks)
    assert received.endswith(b"first\nsecond\n")
    assert handle.error is None


def test_an_error_mid_stream_arrives_in_the_trailers(local: LocalLambda) -> None:
    # WHEN a streaming handler fails after its first bytes
    handle = local.invoke_stream("fail-mid", b"{}")
    body = handle.read_all()

    # THEN the bytes sent so far arrive, and the error type and body come from the trailers
    assert body.endswith(b"partial ")
    assert handle.error is not None
    assert handle.error.error_type == "RuntimeError"
    assert handle.error.document()["errorMessage"] == "the stream broke"

    # AND the buffered view of the same invocation reports it as the Invoke API would
    result = local.invoke("fail-mid", b"{}")
    assert result.function_error == "Unhandled"
    assert json.loads(result.payload)["errorType"] == "RuntimeError"


def test_an_error_before_the_first_byte_is_reported_without_a_response(local: LocalLambda) -> None:
    # WHEN a streaming handler fails before returning a response
    handle = local.invoke_stream("fail-before", b"{}")

    # THEN there is no response, only the error it posted
    assert handle.read_all() == b""
    assert handle.response_start() is None
    assert handle.error is not None
    assert handle.error.error_type == "KeyError"


def test_stop_kills_every_environment(log_lines: list[tuple[str, str]], tmp_path: Path) -> None:
    # GIVEN environments, one of them busy
    local = LocalLambda(SPECS).start()
    pid = json.loads(local.invoke("echo", b"{}").payload)["pid"]
    busy = local.invoke_stream("hold", json.dumps({"dir": str(tmp_path)}).encode())

    def started() -> bool:  # the file exists, and the pid is written
        return any(path.read_text() for path in tmp_path.glob("started-*"))

    wait_until(started, what="the busy invocation to start")
    busy_pid = int(next(tmp_path.glob("started-*")).read_text())

    # WHEN the local Lambda stops
    local.stop()

    # THEN no process is left, and the busy invocation ended with an error
    assert not _alive(pid)
    assert not _alive(busy_pid)
    busy.read_all()
    assert busy.error is not None


def test_a_runtime_that_cannot_start_fails_the_invocation(local: LocalLambda) -> None:
    # WHEN the runtime's command does not exist
    result = local.invoke("no-runtime", b"{}")

    # THEN the invocation fails with an exit error, and nothing is left behind
    assert result.error_type == "Runtime.ExitError"
    assert "could not start the runtime" in json.loads(result.payload)["errorMessage"]
    assert local.stats()["no-runtime"].environments_alive == 0


def test_an_unknown_function_is_refused(local: LocalLambda) -> None:
    with pytest.raises(UnknownFunction):
        local.invoke("nope", b"{}")


def test_the_process_gets_lambdas_reserved_variables(tmp_path: Path) -> None:
    # GIVEN a spec whose own variables try to override reserved ones
    spec = FunctionSpec(
        name="fn",
        handler="app.handler",
        code_dirs=[tmp_path / "code", tmp_path / "layer"],
        environment={"TABLE": "t", "AWS_LAMBDA_FUNCTION_NAME": "spoofed"},
        timeout_s=30,
        memory_mb=512,
        runtime="streaming",
        exec_wrapper=tmp_path / "wrapper",
    )

    # WHEN its process environment and command are built
    env = environment_variables(spec, "127.0.0.1:9001", "stream", parent={"PATH": "/bin", "AWS_REGION": "eu-west-1"})
    command = runtime_command(spec, python="/py")

    # THEN Lambda's variables win, the code dirs are on PYTHONPATH, and the wrapper starts the runtime
    assert env["TABLE"] == "t"
    assert env["AWS_LAMBDA_FUNCTION_NAME"] == "fn"
    assert env["AWS_LAMBDA_RUNTIME_API"] == "127.0.0.1:9001"
    assert env["LAMBDA_TASK_ROOT"] == str(tmp_path / "code")
    assert env["PYTHONPATH"] == f"{tmp_path / 'code'}{os.pathsep}{tmp_path / 'layer'}"
    assert env["AWS_DEFAULT_REGION"] == env["AWS_REGION"] == "eu-west-1"
    assert env["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] == "512"
    assert env["PATH"] == "/bin"
    assert command == [str(tmp_path / "wrapper"), "/py", "-m", "streaming_runtime"]
    # AND the telemetry log pipe's number, when it gets one, is in _LAMBDA_TELEMETRY_LOG_FD
    assert "_LAMBDA_TELEMETRY_LOG_FD" not in env
    with_pipe = environment_variables(spec, "127.0.0.1:9001", "s", parent={}, telemetry_fd=7)
    assert with_pipe["_LAMBDA_TELEMETRY_LOG_FD"] == "7"


def _layer_pid(local: LocalLambda) -> int:
    seen = json.loads(local.invoke("layer", b'{"case": "pid"}').payload)
    assert seen["telemetry_fd"] is None  # the runtime took it out of the handler's environment, as awslambdaric does
    return int(seen["pid"])


@pytest.mark.parametrize("raise_on_close", [False, True], ids=["generator", "generator-raising-in-close"])
def test_a_cut_response_connection_costs_one_invocation_not_the_environment(
    local: LocalLambda, tmp_path: Path, raise_on_close: bool
) -> None:
    # GIVEN a warm environment of the streaming runtime layer, streaming a response (from a generator that may
    # raise when it is closed)
    pid = _layer_pid(local)
    signal, marker = tmp_path / "signal", tmp_path / "marker"
    event = {"case": "keep_streaming", "signal": str(signal), "marker": str(marker), "raise_on_close": raise_on_close}
    handle = local.invoke_stream("layer", json.dumps(event).encode())
    chunks, received = iter(handle), b""
    while b"first" not in received:
        received += next(chunks)

    # WHEN the connection it streams on breaks (the Runtime API drops it), and the handler goes on writing
    assert local.cut_response_connection("layer")
    signal.touch()
    b"".join(chunks)

    # THEN that invocation fails as a response cut short
    assert handle.error is not None and handle.error.error_type == "Runtime.TruncatedResponse"
    # AND the runtime closed the body at its first failed write (its generator's finally ran, well before the end)
    wait_until(lambda: marker.exists() and marker.read_text() != "", what="the generator to be closed")
    assert int(marker.read_text()) < 200
    # AND the same process serves the next invocation: no new environment, no cold start
    assert _layer_pid(local) == pid
    assert local.stats()["layer"].environments_started == 1


def test_a_body_whose_close_raises_ends_its_stream_and_the_environment_lives_on(local: LocalLambda) -> None:
    # GIVEN a warm environment of the streaming runtime layer
    pid = _layer_pid(local)

    # WHEN the handler's body yields everything, then raises in close()
    handle = local.invoke_stream("layer", b'{"case": "close_raises"}')
    body = b"".join(handle)

    # THEN the stream ended at once, with every item and the close's error in its trailers (not at the timeout)
    assert body.endswith(b"ab")
    assert handle.error is not None and handle.error.error_type == "RuntimeError"
    assert handle.error.document()["errorMessage"] == "the cursor would not close"
    # AND the same process serves the next invocation
    assert _layer_pid(local) == pid
    assert local.stats()["layer"].environments_started == 1


def test_an_error_whose_xray_cause_is_refused_still_reaches_the_caller(local: LocalLambda) -> None:
    # GIVEN a handler on the layer that fails 700 calls deep: its X-Ray cause is over the local Runtime API's
    # 64 KiB header line (http.server answers 431), though under awslambdaric's 1 MiB
    pid = _layer_pid(local)
    # WHEN it is invoked
    result = local.invoke("layer", b'{"case": "fail_deep"}')
    # THEN the runtime posted the error again without the cause: the caller gets the handler's own error, and the
    # environment lives on
    assert (result.function_error, result.error_type) == ("Unhandled", "ValueError")
    assert json.loads(result.payload)["errorMessage"] == "failed deep down"
    assert _layer_pid(local) == pid


def test_a_multi_line_record_reaches_the_log_whole(local: LocalLambda, log_lines: list[tuple[str, str]]) -> None:
    # WHEN a handler on awslambdaric logs a record of two lines, and one on the layer fails with a traceback
    local.invoke("noisy", b"{}")
    local.invoke("layer", b'{"case": "fail"}')

    # THEN each record is one entry of the function's log: both runtimes wrote it to the telemetry log pipe
    def entry(label: str, check: Callable[[str], bool]) -> bool:
        return any(seen == label and check(line) for seen, line in log_lines)

    wait_until(lambda: entry("noisy#1", lambda line: line.endswith("a record\nof two lines")), what="the record")
    expected = "[ERROR] LookupError: no turn 9\nTraceback (most recent call last):\n"
    wait_until(lambda: entry("layer#1", lambda line: line.startswith(expected)), what="the error record")


def test_telemetry_records_are_read_whole_and_anything_else_is_refused() -> None:
    # GIVEN two frames as awslambdaric writes them, the second with a newline and a multi-byte character
    def frame(kind: int, text: str) -> bytes:
        data = text.encode()
        stamp = (1_700_000_000_000_000).to_bytes(8, "big")
        return kind.to_bytes(4, "big") + len(data).to_bytes(4, "big") + stamp + data

    stream = io.BytesIO(frame(0xA55A0003, "one") + frame(0xA55A0017, "two\nlïnes"))
    # WHEN read THEN each record comes back whole
    assert list(read_records(stream)) == [
        TelemetryRecord(0xA55A0003, 1_700_000_000_000_000, "one"),
        TelemetryRecord(0xA55A0017, 1_700_000_000_000_000, "two\nlïnes"),
    ]
    # AND bytes that are not frames, or a frame cut short, are refused
    with pytest.raises(MalformedFrame):
        list(read_records(io.BytesIO(b"plain text on the pipe\n")))
    with pytest.raises(MalformedFrame):
        list(read_records(io.BytesIO(frame(0xA55A0003, "cut short")[:-3])))
    # AND from a pipe read a few bytes at a time (as an environment's pump reads it), each record once it is whole
    data, rest, seen = frame(0xA55A0003, "one") + frame(0xA55A0017, "two\nlïnes"), b"", []
    for i in range(0, len(data), 5):
        records, rest, error = split_records(rest + data[i : i + 5])
        assert error is None
        seen += records
    assert ([r.message for r in seen], rest) == (["one", "two\nlïnes"], b"")
    assert split_records(frame(0xA55A0003, "one") + b"plain text on the pipe")[0][0].message == "one"
    assert split_records(b"plain text on the pipe")[2] is not None


def _gated_init(name: str, gate: Path, *, timeout_s: float) -> FunctionSpec:
    """A function whose init (the import of ``slow_init``) lasts until ``gate / "release"`` exists."""
    return FunctionSpec(
        name=name,
        handler="slow_init.handler",
        code_dirs=[HANDLERS],
        environment={"INIT_GATE": str(gate)},
        timeout_s=timeout_s,
    )


def _init_pid(lines: list[tuple[str, str]], label: str) -> int | None:
    """The pid the environment ``label`` printed when its init began (``slow_init``), if it got that far."""
    pids = [int(line.removeprefix("init pid=")) for who, line in lines if who == label and line.startswith("init pid=")]
    return pids[0] if pids else None


def test_an_init_past_the_init_timeout_is_retried_with_the_function_timeout(tmp_path: Path) -> None:
    # GIVEN a function whose init lasts until released, an init timeout far shorter, a function timeout far longer
    lines: list[tuple[str, str]] = []
    spec = _gated_init("slow-init", tmp_path, timeout_s=60.0)
    with LocalLambda([spec], log_sink=lambda label, line: lines.append((label, line)), init_timeout_s=0.5) as local:
        # WHEN it is invoked, its first init runs past the init timeout, and the retried init is then released
        handle = local.invoke_stream("slow-init", b"{}")
        wait_until(lambda: _init_pid(lines, "slow-init#2") is not None, what="the retried init to start")
        (tmp_path / "release").touch()
        result = handle.result()

        # THEN the invocation succeeds, served by the fresh process of the retried init
        assert result.function_error is None, result.payload
        assert json.loads(result.payload)["pid"] == _init_pid(lines, "slow-init#2")
        assert ("slow-init#1", "INIT_REPORT Init Duration: 500.00 ms Phase: init Status: timeout") in lines
        first = _init_pid(lines, "slow-init#1")  # None when its runtime had not even reached the import
        if first is not None:
            wait_until(lambda: not _alive(first), what="the timed-out init's process to die")
        assert local.stats()["slow-init"].environments_started == 2
        assert local.stats()["slow-init"].environments_alive == 1


def test_a_retried_init_past_the_function_timeout_times_the_invocation_out(tmp_path: Path) -> None:
    # GIVEN a function whose init never ends
    lines: list[tuple[str, str]] = []
    spec = _gated_init("stuck-init", tmp_path, timeout_s=1.0)
    with LocalLambda([spec], log_sink=lambda label, line: lines.append((label, line)), init_timeout_s=0.5) as local:
        # WHEN it is invoked: the init passes the init timeout, and its retry the function timeout
        result = local.invoke("stuck-init", b"{}")

        # THEN the invocation fails as Lambda reports a timeout, and no environment is left
        assert result.function_error == "Unhandled"
        assert result.error_type == "Sandbox.Timedout"
        assert json.loads(result.payload)["errorMessage"].endswith("Error: Task timed out after 1.00 seconds")
        wait_until(lambda: local.stats()["stuck-init"].environments_alive == 0, what="the environment to go")
        assert local.stats()["stuck-init"].environments_started == 2
        reports = [(label, line) for label, line in lines if line.startswith("INIT_REPORT")]
        assert reports == [
            ("stuck-init#1", "INIT_REPORT Init Duration: 500.00 ms Phase: init Status: timeout"),
            ("stuck-init#2", "INIT_REPORT Init Duration: 1000.00 ms Phase: invoke Status: timeout"),
        ]
