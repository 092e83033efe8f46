"""Runtime cold start: process start → the runtime's first ``GET /next``, our streaming layer against awslambdaric.

A tiny fake Runtime API on 127.0.0.1 notes when ``/next`` arrives and never answers it; the process is then
killed. Each case is started ``repeat`` times, one at a time, and the median reported. The cases: the relay's
own handler and the smallest handler, each on the streaming runtime layer (through its exec wrapper, as the relay
runs) and on awslambdaric (the managed Python runtime's interface client). The environment is the one the local
stack gives an execution environment (``chatstream_local.lambda_.runtime_executor``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from chatstream_local.lambda_.function_spec import FunctionSpec, RuntimeKind
from chatstream_local.lambda_.runtime_executor import environment_variables, runtime_command

ROOT = Path(__file__).resolve().parent.parent
EXEC_WRAPPER = ROOT / "layers/streaming-runtime/bin/chatstream-streaming"
LAYERS = [ROOT / "layers/chatstream", ROOT / "layers/streaming-runtime"]
RELAY_ENV = {
    "CHAT_TABLE_NAME": "bench-table",
    "PROXY_FUNCTION_NAME": "bench-proxy",
    "AUTH_TYPE": "NONE",
    "POWERTOOLS_SERVICE_NAME": "chatstream",
    "POWERTOOLS_TRACE_DISABLED": "true",
    "POWERTOOLS_METRICS_DISABLED": "true",
    "AWS_ACCESS_KEY_ID": "local",
    "AWS_SECRET_ACCESS_KEY": "local",
    "AWS_SESSION_TOKEN": "local",
}


class _NextServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _NextHandler)
        self.first_next = threading.Event()
        self.first_next_at = 0.0


class _NextHandler(BaseHTTPRequestHandler):
    server: _NextServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        return

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path.endswith("/invocation/next") and not self.server.first_next.is_set():
            self.server.first_next_at = time.monotonic()
            self.server.first_next.set()
        self.server.first_next.wait()
        time.sleep(30)  # hold the request; the process is killed long before

    def do_POST(self) -> None:  # noqa: N802 - an init error: report it by never setting first_next
        self.send_response(202)
        self.send_header("Content-Length", "0")
        self.end_headers()


def _spec(case: str, runtime: RuntimeKind) -> FunctionSpec:
    if case == "relay":
        code_dirs = [ROOT / "functions/relay", *LAYERS]
        env = RELAY_ENV
    else:
        code_dirs = [ROOT / "bench/hello", *LAYERS]
        env = {}
    return FunctionSpec(
        name=f"coldstart-{case}-{runtime}",
        handler="app.handler",
        code_dirs=code_dirs,
        environment=env,
        runtime=runtime,
        exec_wrapper=EXEC_WRAPPER if runtime == "streaming" else None,
    )


def time_to_first_next(spec: FunctionSpec, timeout_s: float = 30.0) -> float:
    """Seconds from spawning the runtime's process to its first ``GET /next``."""
    server = _NextServer()
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    host, port = server.server_address[:2]
    env = environment_variables(spec, f"{host!s}:{port}", "coldstart", parent=os.environ)
    started = time.monotonic()
    process = subprocess.Popen(  # noqa: S603 - argv from the spec
        runtime_command(spec),
        cwd=spec.task_root,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        if not server.first_next.wait(timeout_s):
            raise RuntimeError(f"{spec.name}: no /next within {timeout_s:g} s (exit status {process.poll()})")
        return server.first_next_at - started
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        server.shutdown()
        server.server_close()


def measure(repeat: int = 7) -> dict[str, Any]:
    """Median milliseconds per case, and the ratios streaming layer / awslambdaric."""
    cases = [(case, runtime) for case in ("hello", "relay") for runtime in ("streaming", "awslambdaric")]
    samples: dict[str, list[float]] = {f"{case}_{runtime}": [] for case, runtime in cases}
    for _ in range(repeat):  # interleaved, so a busy moment of the machine hits every case alike
        for case, runtime in cases:
            runtime_kind: RuntimeKind = "streaming" if runtime == "streaming" else "awslambdaric"
            samples[f"{case}_{runtime}"].append(time_to_first_next(_spec(case, runtime_kind)) * 1000)
    medians = {name: round(statistics.median(values), 1) for name, values in samples.items()}
    return {
        "repeat": repeat,
        "median_ms": medians,
        "samples_ms": {name: [round(v, 1) for v in values] for name, values in samples.items()},
        "ratio_streaming_over_awslambdaric": {
            case: round(medians[f"{case}_streaming"] / medians[f"{case}_awslambdaric"], 2)
            for case in ("hello", "relay")
        },
    }
