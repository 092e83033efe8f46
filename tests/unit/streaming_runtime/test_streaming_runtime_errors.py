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


def test_xray_cause_is_shaped_as_awslambdarics() -> None:
    # GIVEN an exception raised in handler code
    try:
        raise_value_error()
    except ValueError as exc:
        report = ErrorReport.from_exception(exc, "req-1")
    # WHEN its X-Ray cause is made
    cause = json.loads(report.xray_cause("/var/task"))
    # THEN it is {working_directory, exceptions: [{message, type, stack: [{label, path, line}]}], paths}
    assert cause["working_directory"] == "/var/task"
    (exception,) = cause["exceptions"]
    assert (exception["message"], exception["type"]) == ("no such session: s-1", "ValueError")
    labels = [frame["label"] for frame in exception["stack"]]
    assert labels == ["test_xray_cause_is_shaped_as_awslambdarics", "raise_value_error"]
    assert all(frame["path"] == __file__ and frame["line"] > 0 for frame in exception["stack"])
    assert cause["paths"] == [__file__]
    assert report.xray_cause().isascii()


def test_xray_cause_of_a_runtime_fault_is_a_validation_error() -> None:
    # GIVEN one of the runtime's own faults WHEN its cause is made THEN X-Ray hears LambdaValidationError, as from
    # awslambdaric, while the error type stays the runtime's
    fault = FaultException(FaultException.MARSHAL_ERROR, "Unable to marshal response")
    report = ErrorReport.from_fault(fault, "req-1")
    assert json.loads(report.xray_cause())["exceptions"][0]["type"] == "LambdaValidationError"
    assert report.error_type == "Runtime.MarshalError"


def test_log_lines_are_awslambdarics_error_record() -> None:
    # GIVEN a report with a two-line stack entry WHEN its log record is made THEN it has awslambdaric's lines, the
    # indentation as no-break spaces (CloudWatch keeps them)
    report = ErrorReport("KeyError", "'message'", ['  File "a.py", line 1, in f\n    x()\n'])
    assert report.log_lines() == [
        "[ERROR] KeyError: 'message'",
        "Traceback (most recent call last):",
        '\u00a0\u00a0File "a.py", line 1, in f',
        "\u00a0\u00a0\u00a0\u00a0x()",
    ]
