"""A Lambda function's configuration, as the local Lambda runs it: :class:`FunctionSpec`.

What ``GetFunctionConfiguration`` would show for a function (handler, code and layers, environment, timeout,
memory, runtime), plus the few knobs the local stack needs (how many environments at most, their process
priority, a replacement command). :mod:`~chatstream_local.lambda_.template_functions` makes one per function of
``template.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from chatstream_local.account import ACCOUNT_ID, current_region

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

RuntimeKind = Literal["awslambdaric", "streaming"]

# The niceness of an execution environment's process: functions at FUNCTION_NICE, the few that an event source
# mapping invokes for every session (and the emulated services) at 0. docs/LOCAL_STACK.md says why.
FUNCTION_NICE = 10
SHARED_FUNCTION_NICE = 0


@dataclass(frozen=True)
class FunctionSpec:
    """One Lambda function as the local stack runs it.

    ``code_dirs``: the function's code (``LAMBDA_TASK_ROOT``) first, then its layers' Python directories.

    ``runtime``: ``awslambdaric`` (the managed Python runtime's interface client) or ``streaming`` (the
    streaming runtime layer, through ``exec_wrapper`` when one is given, as ``AWS_LAMBDA_EXEC_WRAPPER`` does).

    ``nice``: its environments' process priority (see :data:`FUNCTION_NICE`).

    ``python``: the interpreter the runtime runs on; ``None``, this process's (the development environment). The
    stack gives every function its deployed site's (:mod:`~chatstream_local.lambda_.deployed_site`): only the
    packages it has on Lambda.

    ``reserved_concurrency`` (``ReservedConcurrentExecutions``): with it, an invocation that finds that many
    environments busy is throttled (:class:`~chatstream_local.lambda_.exceptions.FunctionThrottled`), as Lambda
    throttles it; without it, the function may run ``max_concurrency`` environments and an invocation past them
    waits for one (the account's unreserved concurrency, which a machine never reaches).

    ``max_event_age_s`` (``MaximumEventAgeInSeconds``): how long an asynchronous event may wait (throttled, or
    between retries) before it goes to the on-failure destination as ``EventAgeExceeded``.

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
    max_event_age_s: float = 21_600.0  # Lambda's default: six hours
    max_concurrency: int = 10
    reserved_concurrency: int | None = None
    command: Sequence[str] | None = None
    nice: int = FUNCTION_NICE
    python: Path | None = None

    def __post_init__(self) -> None:
        if not self.code_dirs:
            raise ValueError(f"function {self.name!r}: code_dirs needs at least the task root")
        if self.timeout_s <= 0:
            raise ValueError(f"function {self.name!r}: timeout_s must be positive, got {self.timeout_s}")
        if self.max_concurrency < 1:
            raise ValueError(f"function {self.name!r}: max_concurrency must be at least 1")
        if self.reserved_concurrency is not None and self.reserved_concurrency < 0:
            raise ValueError(f"function {self.name!r}: reserved_concurrency must be 0 or more")

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
    """The ARN a function has locally (in the local account, see :mod:`chatstream_local.account`)."""
    return f"arn:aws:lambda:{region or current_region()}:{ACCOUNT_ID}:function:{name}"
