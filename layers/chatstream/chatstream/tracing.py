"""X-Ray subsegments for the functions' AWS calls, when the deployer asks for them (``TraceAwsCalls``).

With ``Tracing: Active`` (template.yaml) Lambda records every invocation in X-Ray on its own: a segment for the
function with its initialization, invocation and overhead, on the service map, with no library in the function.
A subsegment per AWS call (DynamoDB, Kinesis, Lambda, Bedrock) needs an instrumentation library in the process:
Powertools' Tracer, which patches botocore through the AWS X-Ray SDK for Python. Importing that SDK costs about
13 ms of every cold start (it imports asyncio and wrapt; bench/README.md, "Where init goes"), and the SDK is in
maintenance mode since 25 February 2026 (AWS recommends OpenTelemetry instead). So the functions import it only
when ``TraceAwsCalls`` is ``true``, which the template passes on as Powertools' own switch,
``POWERTOOLS_TRACE_DISABLED`` (``false`` to trace).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, TypeVar

from aws_lambda_powertools.shared.functions import strtobool

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

H = TypeVar("H", bound="Callable[..., Any]")

TRACE_DISABLED = "POWERTOOLS_TRACE_DISABLED"


def aws_calls_traced(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether this environment traces its AWS calls: ``POWERTOOLS_TRACE_DISABLED`` is set and false."""
    value = environ.get(TRACE_DISABLED, "").strip()
    try:
        return bool(value) and not strtobool(value)
    except ValueError:
        return False  # Powertools' reading of an unknown value would fail later; not tracing is the safe side


def traced_handler(*, capture_response: bool = True, environ: Mapping[str, str] = os.environ) -> Callable[[H], H]:
    """A decorator for a function's handler: Powertools' ``Tracer.capture_lambda_handler`` (and botocore patched)
    when :func:`aws_calls_traced`, else the handler as it is, with neither Powertools' Tracer nor the X-Ray SDK
    imported."""
    if not aws_calls_traced(environ):
        return lambda handler: handler
    from aws_lambda_powertools import Tracer  # imports the X-Ray SDK

    tracer = Tracer(patch_modules=("botocore",))  # the only library these functions call AWS through
    decorate: Callable[[H], H] = tracer.capture_lambda_handler(capture_response=capture_response)
    return decorate
