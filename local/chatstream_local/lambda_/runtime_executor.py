"""How an execution environment's process is run: its command, its environment variables, its process group.

The way Lambda prepares a sandbox for a function (:class:`~chatstream_local.lambda_.function_spec.FunctionSpec`):

- ``runtime="awslambdaric"`` runs the official Python runtime interface client
  (``python -m awslambdaric <handler>``), as the managed Python runtime does;
- ``runtime="streaming"`` runs the streaming runtime layer (``python -m streaming_runtime``), through the
  layer's exec wrapper when one is given.

The interpreter is the spec's (the stack's functions: one that sees only the packages a deployed function has,
:mod:`~chatstream_local.lambda_.deployed_site`). Every code directory goes on ``PYTHONPATH``, the task root first;
the reserved Lambda variables (``AWS_LAMBDA_RUNTIME_API``, ``_HANDLER``, ``LAMBDA_TASK_ROOT``...) are set over the
function's own. As Lambda does for a managed runtime, the process gets the write end of a telemetry log pipe, its
number in ``_LAMBDA_TELEMETRY_LOG_FD`` (:mod:`~chatstream_local.lambda_.telemetry_log`); a replacement ``command``
(a custom runtime) does not. The process gets a process group of its own, so one ``killpg`` leaves no orphan.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from chatstream_local.account import current_region
from chatstream_local.lambda_.telemetry_log import TELEMETRY_LOG_FD

if TYPE_CHECKING:
    from collections.abc import Mapping

    from chatstream_local.lambda_.function_spec import FunctionSpec

# Variables of the parent passed through to every environment when set (Lambda injects its own
# credentials; locally the caller's, or moto's dummy ones, play that part).
PASSTHROUGH_VARIABLES = (
    "PATH",
    "HOME",
    "LANG",
    "TZ",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
)


def runtime_command(spec: FunctionSpec, python: str | None = None) -> list[str]:
    """The argv of one execution environment's process, on ``python`` if given, else on the spec's interpreter, else
    on this process's."""
    if python is None:
        python = sys.executable if spec.python is None else str(spec.python)
    if spec.command is not None:
        return list(spec.command)
    if spec.runtime == "awslambdaric":
        return [python, "-m", "awslambdaric", spec.handler]
    if spec.exec_wrapper is not None:
        return [str(spec.exec_wrapper), python, "-m", "streaming_runtime"]
    return [python, "-m", "streaming_runtime"]


def environment_variables(
    spec: FunctionSpec,
    runtime_api: str,
    log_stream: str,
    parent: Mapping[str, str] | None = None,
    *,
    telemetry_fd: int | None = None,
) -> dict[str, str]:
    """The environment of one execution environment's process.

    ``runtime_api`` is the ``host:port`` of this environment's Runtime API; ``telemetry_fd`` the number of the
    telemetry log pipe's write end, if it gets one. The spec's own variables are applied over the passed-through
    ones, and the reserved Lambda variables over both.
    """
    parent = os.environ if parent is None else parent
    env = {name: parent[name] for name in PASSTHROUGH_VARIABLES if name in parent}
    env.update(spec.environment)
    region = current_region(parent)
    env.update(
        {
            "AWS_LAMBDA_RUNTIME_API": runtime_api,
            "_HANDLER": spec.handler,
            "LAMBDA_TASK_ROOT": str(spec.task_root),
            "AWS_LAMBDA_FUNCTION_NAME": spec.name,
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(spec.memory_mb),
            "AWS_LAMBDA_FUNCTION_TIMEOUT": str(int(spec.timeout_s)),
            "AWS_LAMBDA_LOG_GROUP_NAME": spec.log_group,
            "AWS_LAMBDA_LOG_STREAM_NAME": log_stream,
            "AWS_REGION": region,
            "AWS_DEFAULT_REGION": region,
            "PYTHONPATH": os.pathsep.join(str(Path(d)) for d in spec.code_dirs),
            "PYTHONUNBUFFERED": "1",
        }
    )
    if spec.runtime == "streaming" and spec.exec_wrapper is not None:
        env["AWS_LAMBDA_EXEC_WRAPPER"] = str(spec.exec_wrapper)
    if telemetry_fd is not None:
        env[TELEMETRY_LOG_FD] = str(telemetry_fd)
    return env


def log_stream_name() -> str:
    """A new environment's log stream, named as Lambda names them (``2024/01/31/[$LATEST]<hex>``)."""
    return f"{time.strftime('%Y/%m/%d')}/[$LATEST]{uuid.uuid4().hex}"


def gets_telemetry_log(spec: FunctionSpec) -> bool:
    """Whether Lambda would give the function's runtime a telemetry log pipe: a managed runtime's, not a custom one."""
    return spec.command is None


def start_runtime(
    spec: FunctionSpec, runtime_api: str, *, capture_output: bool, telemetry_fd: int | None = None
) -> subprocess.Popen[bytes]:
    """Start one execution environment's runtime process, in a process group of its own, at the spec's niceness.

    With ``capture_output`` its stdout and stderr are pipes (the caller reads them); otherwise they are discarded.
    ``telemetry_fd`` (a pipe's write end) is passed to the process as ``_LAMBDA_TELEMETRY_LOG_FD``.
    Raises ``OSError`` when the command cannot be started.
    """
    out = subprocess.PIPE if capture_output else subprocess.DEVNULL
    process = subprocess.Popen(  # noqa: S603 - argv from the function spec
        runtime_command(spec),
        cwd=spec.task_root,
        env=environment_variables(spec, runtime_api, log_stream_name(), telemetry_fd=telemetry_fd),
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=out,
        pass_fds=() if telemetry_fd is None else (telemetry_fd,),
        process_group=0,  # kill_process_group() leaves no orphan; still the stack's session (see FUNCTION_NICE)
    )
    if spec.nice:
        with contextlib.suppress(OSError):  # the process may already be gone; priority is not correctness
            os.setpriority(os.PRIO_PROCESS, process.pid, spec.nice)
    return process


def kill_process_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process and everything it started (what Lambda does at a timeout); a no-op once it exited."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)


def has_exited(process: subprocess.Popen[bytes]) -> bool:
    """Whether the process has exited, reaped or not, without reaping it (the thread that waits for it does)."""
    if process.returncode is not None:
        return True
    try:
        return os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped meanwhile
        return True


def exit_detail(returncode: int) -> str:
    """How a runtime process ended, in Lambda's words (its Go runtime's): ``signal: killed``, ``signal: segmentation
    fault`` or ``exit status 1``."""
    if returncode < 0:
        described = signal.strsignal(-returncode)  # the C library's words, which Go's signal names follow
        name = described.lower() if described else signal.Signals(-returncode).name.lower().removeprefix("sig")
        return f"signal: {name}"
    return f"exit status {returncode}"
