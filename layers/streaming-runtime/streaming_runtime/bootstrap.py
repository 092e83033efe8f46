"""The runtime's main loop: load the handler, then serve invocations one at a time, for as long as Lambda runs it.

A failure of the connection to the Runtime API costs at most the invocation it carried: the loop logs it and asks
for the next invocation on a new connection, as the Node.js runtime interface client does when a response stream
breaks (``StreamingInvokeProcessor.processInvoke`` catches the failed stream, logs it, and its loop calls
``next()`` again). Asking for the next invocation is retried as awslambdaric's multi-concurrent client retries it
(``LambdaMultiConcurrentRuntimeClient``: 5 attempts, 0.1 s doubling between them); only when the Runtime API
cannot be reached at all does the process exit, and Lambda starts a new environment.
"""

from __future__ import annotations

import io
import os
import sys
import time
from typing import TYPE_CHECKING

from awslambdaric.lambda_runtime_exception import FaultException

from streaming_runtime import logs
from streaming_runtime.client import RuntimeAPIError, RuntimeClient
from streaming_runtime.errors import ErrorReport
from streaming_runtime.loader import load_handler

if TYPE_CHECKING:
    from collections.abc import Callable, MutableMapping

    from streaming_runtime.context import Invocation
    from streaming_runtime.logs import RuntimeLog

#: The waits between attempts to fetch the next invocation (awslambdaric's DEFAULT_RETRY_* constants).
NEXT_RETRY_DELAYS_S = (0.1, 0.2, 0.4, 0.8)


def main(environ: MutableMapping[str, str] | None = None) -> int:
    """Run until the Runtime API goes away; the exit status is non-zero when init fails."""
    env = os.environ if environ is None else environ
    address = env.get("AWS_LAMBDA_RUNTIME_API")
    if not address:
        sys.stderr.write("streaming_runtime: AWS_LAMBDA_RUNTIME_API is not set; run me inside Lambda\n")
        return 2
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)  # logs reach CloudWatch as they are written
    log = logs.setup(env)  # before the handler's module: its import-time logging goes to the same sink
    client = RuntimeClient(address)
    try:
        handler = load_handler(env.get("_HANDLER", ""), env.get("LAMBDA_TASK_ROOT"))
    except FaultException as fault:
        return _init_failed(client, log, ErrorReport.from_fault(fault))
    except Exception as exc:  # the handler's module raised while being imported
        return _init_failed(client, log, ErrorReport.from_exception(exc))
    try:
        serve(client, handler, log=log)
    except (OSError, RuntimeAPIError) as err:
        log.warning(f"streaming_runtime: lost the Runtime API at {address}: {err}")
        return 1
    return 0


def serve(
    client: RuntimeClient,
    handler: Callable[[object, object], object],
    limit: int | None = None,
    *,
    log: RuntimeLog | None = None,
    sleep: Callable[[float], None] | None = None,
) -> None:
    """Serve invocations (``limit`` of them, or forever); neither a handler's failure nor a broken connection to
    the Runtime API ends the loop. Raises ``OSError`` when the next invocation cannot be fetched at all."""
    from streaming_runtime.dispatch import handle_invocation

    log = log or logs.RuntimeLog.standard()
    sleep = sleep or time.sleep
    served = 0
    while limit is None or served < limit:
        invocation = _next_invocation(client, log, sleep)
        try:
            handle_invocation(client, handler, invocation, log)
        except RuntimeAPIError as err:  # e.g. 413: the response was refused; the next one may be fine
            log.warning(f"streaming_runtime: {err}")
        except OSError as err:
            client.close()
            log.warning(
                f"streaming_runtime: the connection to the Runtime API failed while answering {invocation.request_id}"
                f" ({type(err).__name__}: {err}); serving the next invocation on a new one"
            )
        served += 1


def _next_invocation(client: RuntimeClient, log: RuntimeLog, sleep: Callable[[float], None]) -> Invocation:
    for delay in NEXT_RETRY_DELAYS_S:
        try:
            return client.next_invocation()
        except OSError as err:
            client.close()
            log.warning(f"streaming_runtime: asking for the next invocation failed ({err}); again in {delay:g} s")
            sleep(delay)
    return client.next_invocation()


def _init_failed(client: RuntimeClient, log: RuntimeLog, report: ErrorReport) -> int:
    log.error(report)
    try:
        client.post_init_error(report)
    except (OSError, RuntimeAPIError) as err:
        log.warning(f"streaming_runtime: could not report the init error to the Runtime API: {err}")
    return 1
