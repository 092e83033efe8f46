"""chatstream.tracing: the X-Ray SDK is imported, and the handler traced, only when TraceAwsCalls asks for it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from chatstream.tracing import aws_calls_traced

LAYER = Path(__file__).resolve().parents[2] / "layers" / "chatstream"

# A fresh interpreter decorates a handler and reports what was imported and whether the handler changed.
PROBE = """
import json, sys
from chatstream.tracing import traced_handler
def handler(event, context):
    return "ok"
decorated = traced_handler(capture_response=False)(handler)
print(json.dumps({
    "sdk": "aws_xray_sdk" in sys.modules,
    "same": decorated is handler,
    "answer": decorated({}, None) if decorated is handler else None,
}))
"""


def _probe(trace_disabled: str | None) -> dict[str, object]:
    env = {"PYTHONPATH": str(LAYER), "POWERTOOLS_SERVICE_NAME": "t", "AWS_REGION": "us-east-1"}
    if trace_disabled is not None:
        env["POWERTOOLS_TRACE_DISABLED"] = trace_disabled
    out = subprocess.run(  # noqa: S603 - our own interpreter and code
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True, timeout=60
    )
    return dict(json.loads(out.stdout))


@pytest.mark.parametrize("value", ["true", "1", None, "not-a-bool"])
def test_without_trace_aws_calls_the_handler_is_untouched_and_the_xray_sdk_never_imported(value: str | None) -> None:
    # GIVEN the template's default (POWERTOOLS_TRACE_DISABLED=true), the switch unset, or a value Powertools cannot read
    # WHEN a function decorates its handler THEN it is the same handler, and the X-Ray SDK is not loaded
    assert _probe(value) == {"sdk": False, "same": True, "answer": "ok"}


def test_with_trace_aws_calls_the_handler_is_traced_through_powertools() -> None:
    # GIVEN TraceAwsCalls=true (POWERTOOLS_TRACE_DISABLED=false) WHEN a function decorates its handler
    probe = _probe("false")
    # THEN Powertools' Tracer wraps it, with the X-Ray SDK loaded
    assert (probe["sdk"], probe["same"]) == (True, False)


def test_only_an_explicit_false_turns_tracing_on() -> None:
    assert aws_calls_traced({"POWERTOOLS_TRACE_DISABLED": "false"})
    assert aws_calls_traced({"POWERTOOLS_TRACE_DISABLED": " 0 "})
    for environ in ({}, {"POWERTOOLS_TRACE_DISABLED": "true"}, {"POWERTOOLS_TRACE_DISABLED": "maybe"}):
        assert not aws_calls_traced(environ)
