"""Error reports: the invocation/init error body and the mid-stream trailers."""

from __future__ import annotations

import base64
import json

from awslambdaric.lambda_runtime_exception import FaultException

from streaming_runtime.errors import ErrorReport


def raise_value_error() -> None:
    raise ValueError("no such session: s-1")


def test_from_exception_has_the_standard_shape() -> None:
    # GIVEN an exception raised in handler code
    try:
        raise_value_error()
    except ValueError as exc:
        # WHEN it is turned into a report
        report = ErrorReport.from_exception(exc, "req-1")
    # THEN the body is {errorMessage, errorType, requestId, stackTrace}, the stack naming the handler's frames
    body = json.loads(report.to_json())
    assert set(body) == {"errorMessage", "errorType", "requestId", "stackTrace"}
    assert body["errorType"] == "ValueError"
    assert body["errorMessage"] == "no such session: s-1"
    assert body["requestId"] == "req-1"
    assert any("raise_value_error" in frame for frame in body["stackTrace"])


def test_from_fault_keeps_the_runtime_error_type() -> None:
    # GIVEN one of the runtime's own faults
    fault = FaultException(FaultException.IMPORT_MODULE_ERROR, "Unable to import module 'app': No module named 'x'")
    # WHEN reported THEN its type is the managed runtime's
    body = ErrorReport.from_fault(fault).to_dict()
    assert body == {
        "errorMessage": "Unable to import module 'app': No module named 'x'",
        "errorType": "Runtime.ImportModuleError",
        "requestId": "",
        "stackTrace": [],
    }


def test_trailers_carry_type_and_base64_json_body() -> None:
    # GIVEN a report with non-ASCII text
    report = ErrorReport("RuntimeError", "le journal a disparu ✗", ['  File "app.py", line 1\n'], "req-2")
    # WHEN it becomes trailers
    trailers = report.trailers()
    # THEN the type is plain and the body is the base64 of the JSON report
    assert trailers["Lambda-Runtime-Function-Error-Type"] == "RuntimeError"
    decoded = json.loads(base64.b64decode(trailers["Lambda-Runtime-Function-Error-Body"]))
    assert decoded == report.to_dict()
    assert trailers["Lambda-Runtime-Function-Error-Body"].isascii()


def test_log_line_is_one_line() -> None:
    # GIVEN a report with a multi-line stack WHEN logged THEN it is one log line (CloudWatch keeps it one event)
    line = ErrorReport("KeyError", "'message'", ['  File "a.py", line 1, in f\n    x()\n']).log_line()
    assert line.startswith("[ERROR] KeyError: 'message'")
    assert line.count("\n") == 1 and line.endswith("\n")
