"""``python -m chatstream_local`` (what ``make local`` runs): the whole pipeline in the foreground.

Prints ``chatstream local stack ready at http://127.0.0.1:PORT`` once a chat would succeed;
Ctrl-C or SIGTERM stops every process it started. The port serves the relay's Function URL and, under its own
paths, the Lambda API (``AWS_ENDPOINT_URL_LAMBDA=http://127.0.0.1:PORT``; what ``make invoke`` calls).

``--auth-type AWS_IAM`` makes the Function URL and the Lambda API on its port verify SigV4 signatures (the
template's default; locally the default is ``NONE``); ``--auth-type JWT`` makes the relay check bearer tokens of a
local OpenID Connect issuer it also starts, whose URL a second line gives after the ready line
(``local OpenID issuer at http://127.0.0.1:PORT``; ``make token SUB=alice`` prints a token of it); ``--built``
runs what ``sam build`` wrote to ``.aws-sam/build`` instead of the source tree; ``--duplicate-events P`` delivers
each asynchronous invocation twice with probability P, as Lambda may.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING

from chatstream_local.process import die_with_parent
from chatstream_local.stack import AUTH_TYPES, LocalStack, StackError, StackSettings, check_port_free
from chatstream_local.template import TemplateError

if TYPE_CHECKING:
    from types import FrameType

_print_lock = threading.Lock()
ISSUER_LINE = "local OpenID issuer at "  # under --auth-type JWT, the line after the ready line


def _log(component: str, line: str) -> None:
    with _print_lock:
        print(f"[{component}] {line}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chatstream_local", description=__doc__)
    parser.add_argument("--port", type=int, help="port of the relay's Function URL (default: $CHATSTREAM_PORT or 3000)")
    parser.add_argument("--verbose", "-v", action="store_true", help="every component's log lines, not only problems")
    parser.add_argument(
        "--model-delay-ms", type=int, help="local model: milliseconds between deltas ($CHATSTREAM_LOCAL_MODEL_DELAY_MS)"
    )
    parser.add_argument(
        "--auth-type",
        choices=AUTH_TYPES,
        default="NONE",
        help="the Function URL's auth: NONE (default), AWS_IAM (SigV4, by a key of your AWS config), or JWT (bearer "
        "tokens of a local OpenID issuer the stack starts; `make token SUB=alice` prints one)",
    )
    parser.add_argument("--built", action="store_true", help="run .aws-sam/build (after `make build`), not the source")
    parser.add_argument(
        "--duplicate-events",
        type=float,
        default=0.0,
        metavar="P",
        help="deliver each asynchronous invocation a second time with probability P, as Lambda may (default 0)",
    )
    parser.add_argument(
        "--parameter-overrides",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="template parameters, as `sam deploy --parameter-overrides` takes them (e.g. RelayReservedConcurrency=2)",
    )
    args = parser.parse_args(argv)
    overrides = {"FunctionUrlAuthType": args.auth_type}
    for pair in args.parameter_overrides:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            parser.error(f"--parameter-overrides takes KEY=VALUE pairs: got {pair!r}")
        overrides[key] = value
    if not 0.0 <= args.duplicate_events <= 1.0:
        parser.error(f"--duplicate-events is a probability, 0 to 1: got {args.duplicate_events}")
    die_with_parent(signal.SIGTERM)  # make (or a shell) dying stops the whole tree
    ready = stopping = False

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        # Takes no lock: a handler runs between any two bytecodes of the main thread, itself included, so a second
        # signal arriving while a lock is held here would wait on it forever (threading.Event.set did).
        nonlocal stopping
        if stopping:
            return  # shutdown has begun: let it finish
        stopping = True
        if not ready:
            raise KeyboardInterrupt  # abort start-up; LocalStack.start() stops what it started

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        settings = StackSettings.from_env(
            verbose=args.verbose,
            model_delay_ms=args.model_delay_ms,
            parameter_overrides=overrides,
            code="build" if args.built else "source",
            duplicate_events=args.duplicate_events,
        )
        if args.port is not None:
            settings.port = args.port
        check_port_free(settings.port)
        stack = LocalStack(settings, log=_log)
        _log("stack", "starting moto, the local model, the functions and the Function URL …")
        stack.start()
    except (StackError, TemplateError) as err:
        print(f"chatstream local stack: {err}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        return 130
    ready = True
    try:
        print(f"chatstream local stack ready at {stack.url}", flush=True)
        if stack.issuer_url is not None:
            # The sign-in page's issuer, and make token's (which finds it through the relay's GET /auth/config)
            print(f"{ISSUER_LINE}{stack.issuer_url} (make token SUB=alice prints an access token)", flush=True)
        # For tools that talk to the local AWS services (make redrive, the AWS CLI): docs/OPERATIONS.md, "Locally"
        print(
            f"local AWS services at {stack.moto_url} (region {settings.region}): ConsumerDLQ "
            f"{stack.template.ref_overrides.get('ConsumerDLQ', '?')}, ChatTable {stack.name('ChatTable')}, "
            f"TokenStream {stack.name('TokenStream')}",
            flush=True,
        )
        while not stopping:
            time.sleep(0.2)
    finally:
        _log("stack", "stopping …")
        stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
