"""The Runtime API's error report: ``{errorMessage, errorType, requestId, stackTrace}``, and its X-Ray cause.

The same shape and type names as awslambdaric (``Runtime.ImportModuleError`` …), so Lambda, its logs and
X-Ray read our errors as they read the managed runtime's.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from awslambdaric.lambda_runtime_exception import FaultException

_RUNTIME_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep

ERROR_TYPE_HEADER = "Lambda-Runtime-Function-Error-Type"
ERROR_BODY_TRAILER = "Lambda-Runtime-Function-Error-Body"
XRAY_CAUSE_HEADER = "Lambda-Runtime-Function-XRay-Error-Cause"
#: awslambdaric sends the X-Ray cause only when it is under 1 MiB (``lambda_runtime_client.post_invocation_error``).
XRAY_CAUSE_LIMIT = 1024 * 1024
#: The X-Ray exception type awslambdaric reports for the runtime's own faults (``bootstrap.handle_event_request``).
XRAY_FAULT_TYPE = "LambdaValidationError"
#: awslambdaric's text error log: lines end with ``\r`` on stdout, leading spaces of the stack become U+00A0.
_LOG_INDENT = "\u00a0"

Frame = tuple[str, int, str]  # (path, line, function): one stack frame of the X-Ray cause


class ErrorReport:
    """What the runtime tells Lambda about a failed init or invocation.

    ``frames`` are the stack's ``(path, line, function)`` for the X-Ray cause; ``xray_type`` is the exception type
    X-Ray is told (the error type unless the runtime itself failed, as awslambdaric reports it).
    """

    __slots__ = ("error_type", "message", "stack_trace", "request_id", "frames", "xray_type")

    def __init__(
        self,
        error_type: str,
        message: str,
        stack_trace: Sequence[str] = (),
        request_id: str = "",
        *,
        frames: Sequence[Frame] = (),
        xray_type: str | None = None,
    ) -> None:
        self.error_type = error_type
        self.message = message
        self.stack_trace = tuple(stack_trace)
        self.request_id = request_id
        self.frames = tuple(frames)
        self.xray_type = xray_type or error_type

    @classmethod
    def from_exception(cls, exc: BaseException, request_id: str = "") -> ErrorReport:
        """The report for an exception the handler (or its module) raised: type name, message, its frames."""
        import traceback

        frames = traceback.extract_tb(exc.__traceback__)
        user_frames = [frame for frame in frames if not frame.filename.startswith(_RUNTIME_DIR)]
        return cls(
            type(exc).__name__,
            str(exc),
            traceback.format_list(user_frames),
            request_id,
            frames=[(frame.filename, frame.lineno or 0, frame.name) for frame in user_frames],
        )

    @classmethod
    def from_fault(cls, fault: FaultException, request_id: str = "") -> ErrorReport:
        """The report for one of the runtime's own faults (bad handler name, marshalling, …)."""
        return cls(fault.exception_type, fault.msg, fault.trace or (), request_id, xray_type=XRAY_FAULT_TYPE)

    def to_dict(self) -> dict[str, object]:
        return {
            "errorMessage": self.message,
            "errorType": self.error_type,
            "requestId": self.request_id,
            "stackTrace": list(self.stack_trace),
        }

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict(), ensure_ascii=False).encode("utf-8")

    def xray_cause(self, working_directory: str | None = None) -> str:
        """The ``Lambda-Runtime-Function-XRay-Error-Cause`` value, shaped as awslambdaric's ``make_xray_fault``.

        ``{"working_directory", "exceptions": [{"message", "type", "stack": [{"label", "path", "line"}]}],
        "paths"}``, as ASCII JSON (a header value is one line of ASCII).
        """
        stack = [{"label": label, "path": path, "line": line} for path, line, label in self.frames]
        cause = {
            "working_directory": os.getcwd() if working_directory is None else working_directory,
            "exceptions": [{"message": self.message, "type": self.xray_type, "stack": stack}],
            "paths": sorted({path for path, _, _ in self.frames}),
        }
        return json.dumps(cause, separators=(",", ":"))

    def trailers(self) -> dict[str, str]:
        """The trailers that end a response stream that failed after its first byte."""
        import base64

        return {
            ERROR_TYPE_HEADER: self.error_type,
            ERROR_BODY_TRAILER: base64.b64encode(self.to_json()).decode("ascii"),
        }

    def log_lines(self) -> list[str]:
        """The ``[ERROR]`` record of the function's log, line by line, as awslambdaric's text ``log_error`` has it."""
        description = f"[ERROR] {self.error_type}: {self.message}" if self.message else f"[ERROR] {self.error_type}"
        lines = [description, "Traceback (most recent call last):"]
        for element in self.stack_trace:
            lines.extend(_indent_with_nbsp(line) for line in element.splitlines())
        return lines

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ErrorReport) and self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash((self.error_type, self.message, self.stack_trace, self.request_id))

    def __repr__(self) -> str:
        return f"ErrorReport({self.error_type!r}, {self.message!r}, request_id={self.request_id!r})"


def _indent_with_nbsp(line: str) -> str:
    stripped = line.lstrip(" ")
    return _LOG_INDENT * (len(line) - len(stripped)) + stripped
