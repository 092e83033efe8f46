"""The Runtime API's error report: ``{errorMessage, errorType, requestId, stackTrace}``.

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


class ErrorReport:
    """What the runtime tells Lambda about a failed init or invocation."""

    __slots__ = ("error_type", "message", "stack_trace", "request_id")

    def __init__(self, error_type: str, message: str, stack_trace: Sequence[str] = (), request_id: str = "") -> None:
        self.error_type = error_type
        self.message = message
        self.stack_trace = tuple(stack_trace)
        self.request_id = request_id

    @classmethod
    def from_exception(cls, exc: BaseException, request_id: str = "") -> ErrorReport:
        """The report for an exception the handler (or its module) raised: type name, message, its frames."""
        import traceback

        frames = traceback.extract_tb(exc.__traceback__)
        user_frames = [frame for frame in frames if not frame.filename.startswith(_RUNTIME_DIR)]
        return cls(type(exc).__name__, str(exc), traceback.format_list(user_frames), request_id)

    @classmethod
    def from_fault(cls, fault: FaultException, request_id: str = "") -> ErrorReport:
        """The report for one of the runtime's own faults (bad handler name, marshalling, …)."""
        return cls(fault.exception_type, fault.msg, fault.trace or (), request_id)

    def to_dict(self) -> dict[str, object]:
        return {
            "errorMessage": self.message,
            "errorType": self.error_type,
            "requestId": self.request_id,
            "stackTrace": list(self.stack_trace),
        }

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict(), ensure_ascii=False).encode("utf-8")

    def trailers(self) -> dict[str, str]:
        """The trailers that end a response stream that failed after its first byte."""
        import base64

        return {
            ERROR_TYPE_HEADER: self.error_type,
            ERROR_BODY_TRAILER: base64.b64encode(self.to_json()).decode("ascii"),
        }

    def log_line(self) -> str:
        """One line for the function's log (stderr), like the managed runtime's ``[ERROR]`` line."""
        trace = "".join(self.stack_trace).replace("\n", "\r")
        return f"[ERROR] {self.error_type}: {self.message}\rTraceback (most recent call last):\r{trace}\n"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ErrorReport) and self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash((self.error_type, self.message, self.stack_trace, self.request_id))

    def __repr__(self) -> str:
        return f"ErrorReport({self.error_type!r}, {self.message!r}, request_id={self.request_id!r})"
