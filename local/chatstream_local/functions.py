"""What the local Lambda runs: a function's specification and the process of one execution environment.

A :class:`FunctionSpec` is what the lead builds from ``template.yaml`` (handler, code, layers, environment,
timeout, memory). :func:`runtime_command` and :func:`environment_variables` turn it into the argv and the
environment of one execution environment's process, the way Lambda prepares a sandbox:

- ``runtime="awslambdaric"`` runs the official Python runtime interface client
  (``python -m awslambdaric <handler>``), as the managed Python runtime does.
- ``runtime="streaming"`` runs the streaming runtime layer (``python -m streaming_runtime``), through the
  layer's exec wrapper when one is given, as ``AWS_LAMBDA_EXEC_WRAPPER`` does on Lambda.

The first code directory is ``LAMBDA_TASK_ROOT`` (the function's code); the others are layers' Python
directories. All of them go on ``PYTHONPATH``, the task root first.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

RuntimeKind = Literal["awslambdaric", "streaming"]

DEFAULT_REGION = "us-east-1"
LOCAL_ACCOUNT_ID = "123456789012"

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


# On AWS every execution environment has CPU of its own, and the services never wait for a function's.
# On one machine they all share a few cores, and each process gets an equal share: dozens of busy relay
# environments would get as much CPU each as the one moto process, or the one consumer environment, that
# serves them all. So environments run at this niceness by default, and the few environments that serve
# every session (an event source mapping's) at 0, like the emulated services. Niceness only ranks processes of
# one scheduling group: with Linux's autogroup (on by default on desktops) every session is its own group and
# gets an equal share whatever its niceness, so environments (and moto) get a process group of their own
# (kill() reaches all of it) but stay in the stack's session.
FUNCTION_NICE = 10
SHARED_FUNCTION_NICE = 0


@dataclass(frozen=True)
class FunctionSpec:
    """One Lambda function as the local stack runs it.

    ``nice``: its environments' process priority (see :data:`FUNCTION_NICE`).

    ``command`` replaces the runtime's process command entirely (a custom runtime, or a test double of one);
    it still gets the same environment variables.
    """

    name: str
    handler: str
    code_dirs: Sequence[Path]
    environment: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 3.0
    memory_mb: int = 128
    runtime: RuntimeKind = "awslambdaric"
    exec_wrapper: Path | None = None
    max_retry_attempts: int = 0
    max_concurrency: int = 10
    command: Sequence[str] | None = None
    nice: int = FUNCTION_NICE

    def __post_init__(self) -> None:
        if not self.code_dirs:
            raise ValueError(f"function {self.name!r}: code_dirs needs at least the task root")
        if self.timeout_s <= 0:
            raise ValueError(f"function {self.name!r}: timeout_s must be positive, got {self.timeout_s}")
        if self.max_concurrency < 1:
            raise ValueError(f"function {self.name!r}: max_concurrency must be at least 1")

    @property
    def task_root(self) -> Path:
        return Path(self.code_dirs[0])

    @property
    def arn(self) -> str:
        return function_arn(self.name)

    @property
    def log_group(self) -> str:
        return f"/aws/lambda/{self.name}"


def function_arn(name: str, region: str | None = None) -> str:
    """The ARN a function has locally (account 123456789012, like moto's)."""
    return f"arn:aws:lambda:{region or current_region()}:{LOCAL_ACCOUNT_ID}:function:{name}"


def current_region() -> str:
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or DEFAULT_REGION


def runtime_command(spec: FunctionSpec, python: str = sys.executable) -> list[str]:
    """The argv of one execution environment's process."""
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
) -> dict[str, str]:
    """The environment of one execution environment's process.

    ``runtime_api`` is the ``host:port`` of this environment's Runtime API. The spec's own variables are
    applied over the passed-through ones, and the reserved Lambda variables over both.
    """
    parent = os.environ if parent is None else parent
    env = {name: parent[name] for name in PASSTHROUGH_VARIABLES if name in parent}
    env.update(spec.environment)
    region = parent.get("AWS_REGION") or parent.get("AWS_DEFAULT_REGION") or DEFAULT_REGION
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
    return env
