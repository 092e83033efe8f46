"""Cold start: process start → the runtime's first ``GET /next``, for each function, on its runtime and on awslambdaric.

A tiny fake Runtime API on 127.0.0.1 notes when ``/next`` arrives and never answers it; the process is then
killed. Each case is started ``repeat`` times, interleaved with the others, and the median reported.

The cases: the relay, the proxy and the consumer (``functions/<name>``, with the environment the template gives them)
and the smallest handler (``bench/hello``), each on the runtime it is deployed on (the relay on the streaming runtime
layer through its exec wrapper; the proxy and the consumer on the managed runtime, whose interface client is
awslambdaric) and on the other one, running the same handler.

Where the packages come from matters as much as the code: the development virtual environment holds far more than a
function has on Lambda (the CRT, pyOpenSSL, moto...), and botocore imports some of them when they are there
(``awscrt`` in ``botocore.compat``, pyOpenSSL's context in ``botocore.httpsession``). So each case is measured twice:

- ``deployed``: an interpreter that sees only what the deployed function has, the closures the layers'
  ``requirements.txt`` pin (the chatstream layer's and the streaming runtime layer's), linked from the development
  environment into a virtual environment of their own, with botocore's data pruned as the layer's build prunes it
  (``chatstream_local.lambda_.deployed_site``, on which the local stack runs the functions too);
- ``dev``: the development environment, every package ``make venv`` installs.

Both as Lambda has a deployed function's code: what a start imports is compiled before the first measured start (one
start of each case that may write bytecode, standing in for the bytecode the builds ship, ``make/bytecode.mk``), and
no measured start writes any (``PYTHONDONTWRITEBYTECODE=1``: ``/opt`` and ``/var/task`` are read-only on Lambda), so
the first of the starts is no different from the others.
"""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chatstream_local.lambda_ import deployed_site
from chatstream_local.lambda_.function_spec import FunctionSpec, RuntimeKind
from chatstream_local.lambda_.runtime_executor import environment_variables, runtime_command

if TYPE_CHECKING:
    from collections.abc import Mapping

ROOT = Path(__file__).resolve().parent.parent
EXEC_WRAPPER = ROOT / "layers/streaming-runtime/bin/chatstream-streaming"
LAYERS = [ROOT / "layers/chatstream", ROOT / "layers/streaming-runtime"]
COMMON_ENV = {
    "CHAT_TABLE_NAME": "bench-table",
    "POWERTOOLS_SERVICE_NAME": "chatstream",
    "POWERTOOLS_TRACE_DISABLED": "true",
    "POWERTOOLS_METRICS_DISABLED": "true",
    "AWS_ACCESS_KEY_ID": "local",
    "AWS_SECRET_ACCESS_KEY": "local",
    "AWS_SESSION_TOKEN": "local",
}
# Each function's own variables (template.yaml's, with placeholder values), and the runtime it is deployed on.
FUNCTIONS: dict[str, tuple[dict[str, str], RuntimeKind]] = {
    "relay": ({"PROXY_FUNCTION_NAME": "bench-proxy", "AUTH_TYPE": "NONE"}, "streaming"),
    "proxy": ({"TOKEN_STREAM_NAME": "bench-stream", "MODEL_ID": "bench-model"}, "awslambdaric"),
    "consumer": ({"DLQ_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/bench-dlq"}, "awslambdaric"),
    "hello": ({}, "streaming"),
}
# A measured start writes no bytecode: on Lambda the code's folders are read-only.
NO_BYTECODE_WRITES = {"PYTHONDONTWRITEBYTECODE": "1"}
RUNTIMES: tuple[RuntimeKind, ...] = ("streaming", "awslambdaric")
SITES = ("deployed", "dev")


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


def _spec(case: str, runtime: RuntimeKind, *, writes_bytecode: bool = False) -> FunctionSpec:
    env, _ = FUNCTIONS[case]
    code = ROOT / "bench/hello" if case == "hello" else ROOT / "functions" / case
    return FunctionSpec(
        name=f"coldstart-{case}-{runtime}",
        handler="app.handler",
        code_dirs=[code, *LAYERS],
        environment={**COMMON_ENV, **env, **({} if writes_bytecode else NO_BYTECODE_WRITES)},
        runtime=runtime,
        exec_wrapper=EXEC_WRAPPER if runtime == "streaming" else None,
    )


def time_to_first_next(
    spec: FunctionSpec, python: str = sys.executable, timeout_s: float = 30.0
) -> tuple[float, float]:
    """Seconds from spawning the runtime's process to its first ``GET /next``, and the CPU seconds (user and system)
    the process had spent by the time it was killed: its init's, since it waits on ``/next`` from then on."""
    server = _NextServer()
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    host, port = server.server_address[:2]
    env = environment_variables(spec, f"{host!s}:{port}", "coldstart", parent=os.environ)
    started = time.monotonic()
    process = subprocess.Popen(  # noqa: S603 - argv from the spec
        runtime_command(spec, python),
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
        wall = server.first_next_at - started
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        server.shutdown()
        server.server_close()
    return wall, usage.ru_utime + usage.ru_stime


# site ("deployed", "dev") -> case (relay, proxy, consumer, hello) -> runtime -> milliseconds
BySite = dict[str, dict[str, dict[str, float]]]


@dataclass(frozen=True)
class ColdStart:
    """What :func:`measure` found (results.json's ``cold_start``): per site, case and runtime, the median init of
    ``repeat`` starts, wall clock and CPU; each case's deployed runtime, and its ratio to awslambdaric."""

    repeat: int
    deployed_runtime: dict[str, str]  # case -> the runtime it is deployed on
    median_ms: BySite
    cpu_median_ms: BySite | None  # None in results written before the CPU was measured
    ratio_deployed_runtime_over_awslambdaric: dict[str, dict[str, float]]  # site -> case -> ratio
    samples_ms: dict[str, dict[str, dict[str, list[float]]]]

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        if self.cpu_median_ms is None:
            del out["cpu_median_ms"]
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ColdStart:
        return cls(
            repeat=raw["repeat"],
            deployed_runtime=dict(raw["deployed_runtime"]),
            median_ms=raw["median_ms"],
            cpu_median_ms=raw.get("cpu_median_ms"),
            ratio_deployed_runtime_over_awslambdaric=raw["ratio_deployed_runtime_over_awslambdaric"],
            samples_ms=raw["samples_ms"],
        )


def measure(repeat: int = 7) -> ColdStart:
    """Median milliseconds per function, runtime and site (wall clock to the first ``/next``, and the process's CPU
    by then); each function's runtime as deployed; ratios of the deployed runtime to awslambdaric (the relay's:
    streaming layer / awslambdaric)."""
    with tempfile.TemporaryDirectory(prefix="chatstream-deployed-site-") as tmp:
        pythons = {
            "deployed": str(deployed_site.create(Path(tmp), pruner=deployed_site.PRUNE_BOTOCORE_DATA)),
            "dev": sys.executable,
        }
        samples: dict[str, dict[str, dict[str, list[float]]]] = {
            site: {case: {runtime: [] for runtime in RUNTIMES} for case in FUNCTIONS} for site in SITES
        }
        cpu_samples: dict[str, dict[str, dict[str, list[float]]]] = {
            site: {case: {runtime: [] for runtime in RUNTIMES} for case in FUNCTIONS} for site in SITES
        }
        for site in SITES:  # the bytecode every case loads, compiled as the builds compile it before deploying
            for case in FUNCTIONS:
                for runtime in RUNTIMES:
                    time_to_first_next(_spec(case, runtime, writes_bytecode=True), pythons[site])
        for _ in range(repeat):  # interleaved, so a busy moment of the machine hits every case alike
            for site in SITES:
                for case in FUNCTIONS:
                    for runtime in RUNTIMES:
                        seconds, cpu_seconds = time_to_first_next(_spec(case, runtime), pythons[site])
                        samples[site][case][runtime].append(seconds * 1000)
                        cpu_samples[site][case][runtime].append(cpu_seconds * 1000)
    medians, cpu_medians = (
        {
            site: {
                case: {runtime: round(statistics.median(v), 1) for runtime, v in by_runtime.items()}
                for case, by_runtime in by_case.items()
            }
            for site, by_case in table.items()
        }
        for table in (samples, cpu_samples)
    )
    deployed_on: dict[str, str] = {case: runtime for case, (_, runtime) in FUNCTIONS.items()}
    return ColdStart(
        repeat=repeat,
        deployed_runtime=deployed_on,
        median_ms=medians,
        cpu_median_ms=cpu_medians,
        ratio_deployed_runtime_over_awslambdaric={
            site: {
                case: round(by_case[case][deployed_on[case]] / by_case[case]["awslambdaric"], 2) for case in FUNCTIONS
            }
            for site, by_case in medians.items()
        },
        samples_ms={
            site: {case: {rt: [round(x, 1) for x in v] for rt, v in by_rt.items()} for case, by_rt in by_case.items()}
            for site, by_case in samples.items()
        },
    )


def main() -> int:
    """``python -m bench.coldstart [repeat]``: the cold start table alone, as JSON."""
    import json

    repeat = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    result = measure(repeat).to_json()
    sys.stdout.write(json.dumps({k: result[k] for k in ("repeat", "median_ms", "cpu_median_ms")}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
