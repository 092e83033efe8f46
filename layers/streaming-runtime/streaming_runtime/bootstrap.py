"""The runtime's main loop: load the handler, then serve invocations one at a time, forever."""

from __future__ import annotations

import io
import os
import sys
from typing import TYPE_CHECKING

from awslambdaric.lambda_runtime_exception import FaultException

from streaming_runtime.client import RuntimeAPIError, RuntimeClient
from streaming_runtime.errors import ErrorReport
from streaming_runtime.loader import load_handler

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping


def main(environ: Mapping[str, str] | None = None) -> int:
    """Run until the Runtime API goes away; the exit status is non-zero when init fails."""
    env = os.environ if environ is None else environ
    address = env.get("AWS_LAMBDA_RUNTIME_API")
    if not address:
        sys.stderr.write("streaming_runtime: AWS_LAMBDA_RUNTIME_API is not set; run me inside Lambda\n")
        return 2
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)  # logs reach CloudWatch as they are written
    client = RuntimeClient(address)
    try:
        handler = load_handler(env.get("_HANDLER", ""), env.get("LAMBDA_TASK_ROOT"))
    except FaultException as fault:
        return _init_failed(client, ErrorReport.from_fault(fault))
    except Exception as exc:  # the handler's module raised while being imported
        return _init_failed(client, ErrorReport.from_exception(exc))
    try:
        serve(client, handler)
    except OSError as err:
        sys.stderr.write(f"streaming_runtime: lost the Runtime API at {address}: {err}\n")
        return 1
    return 0


def serve(client: RuntimeClient, handler: Callable[[object, object], object], limit: int | None = None) -> None:
    """Serve invocations (``limit`` of them, or forever); a handler's failure never ends the loop."""
    from streaming_runtime.dispatch import handle_invocation

    served = 0
    while limit is None or served < limit:
        invocation = client.next_invocation()
        try:
            handle_invocation(client, handler, invocation)
        except RuntimeAPIError as err:  # e.g. 413: the response was refused; the next one may be fine
            sys.stderr.write(f"streaming_runtime: {err}\n")
        served += 1


def _init_failed(client: RuntimeClient, report: ErrorReport) -> int:
    sys.stderr.write(report.log_line())
    client.post_init_error(report)
    return 1
