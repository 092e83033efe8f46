"""One invocation as the Runtime API describes it, and the handler's context object.

The context is awslambdaric's own ``LambdaContext`` (the class Lambda's Python runtime passes to
handlers), so ``client_context``, ``identity`` and ``get_remaining_time_in_millis()`` behave exactly as
on the managed runtime.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from awslambdaric.lambda_runtime_exception import FaultException

if TYPE_CHECKING:
    from collections.abc import Mapping

    from awslambdaric.lambda_context import LambdaContext

REQUEST_ID = "lambda-runtime-aws-request-id"
DEADLINE_MS = "lambda-runtime-deadline-ms"
FUNCTION_ARN = "lambda-runtime-invoked-function-arn"
TRACE_ID = "lambda-runtime-trace-id"
CLIENT_CONTEXT = "lambda-runtime-client-context"
COGNITO_IDENTITY = "lambda-runtime-cognito-identity"
TENANT_ID = "lambda-runtime-aws-tenant-id"
CONTENT_TYPE = "content-type"


class InvalidInvocation(ValueError):
    """The Runtime API sent a /next response this runtime cannot serve (no request id, bad deadline)."""


class Invocation:
    """The headers and event body of one ``/invocation/next`` response."""

    __slots__ = (
        "request_id",
        "deadline_ms",
        "invoked_function_arn",
        "trace_id",
        "client_context",
        "cognito_identity",
        "tenant_id",
        "content_type",
        "body",
    )

    def __init__(
        self,
        request_id: str,
        deadline_ms: int,
        body: bytes,
        *,
        invoked_function_arn: str | None = None,
        trace_id: str | None = None,
        client_context: str | None = None,
        cognito_identity: str | None = None,
        tenant_id: str | None = None,
        content_type: str | None = None,
    ) -> None:
        self.request_id = request_id
        self.deadline_ms = deadline_ms
        self.body = body
        self.invoked_function_arn = invoked_function_arn
        self.trace_id = trace_id
        self.client_context = client_context
        self.cognito_identity = cognito_identity
        self.tenant_id = tenant_id
        self.content_type = content_type

    @classmethod
    def from_headers(cls, headers: Mapping[str, str], body: bytes) -> Invocation:
        """Build from the /next response; header names are matched case-insensitively."""
        lower = {name.lower(): value for name, value in headers.items()}
        request_id = lower.get(REQUEST_ID)
        if not request_id:
            raise InvalidInvocation("the /next response has no Lambda-Runtime-Aws-Request-Id header")
        deadline = lower.get(DEADLINE_MS, "")
        try:
            deadline_ms = int(deadline)
        except ValueError:
            raise InvalidInvocation(f"Lambda-Runtime-Deadline-Ms is not epoch milliseconds: {deadline!r}") from None
        return cls(
            request_id,
            deadline_ms,
            body,
            invoked_function_arn=lower.get(FUNCTION_ARN),
            trace_id=lower.get(TRACE_ID),
            client_context=lower.get(CLIENT_CONTEXT),
            cognito_identity=lower.get(COGNITO_IDENTITY),
            tenant_id=lower.get(TENANT_ID),
            content_type=lower.get(CONTENT_TYPE),
        )

    def __repr__(self) -> str:
        return f"Invocation({self.request_id!r}, deadline_ms={self.deadline_ms}, body={len(self.body)} bytes)"


def make_context(invocation: Invocation) -> LambdaContext:
    """The handler's context. A malformed client-context/identity header is ``Runtime.LambdaContextUnmarshalError``."""
    from awslambdaric.lambda_context import LambdaContext

    context = LambdaContext(
        invocation.request_id,
        _json_header(invocation.client_context, "Client Context"),
        _json_header(invocation.cognito_identity, "Cognito Identity"),
        invocation.deadline_ms,
        invocation.invoked_function_arn,
    )
    # Set after construction: older LambdaContext signatures (a managed runtime's own copy) lack tenant_id.
    context.tenant_id = invocation.tenant_id
    return context


def _json_header(value: str | None, name: str) -> object:
    if not value:
        return None
    try:
        return json.loads(value)
    except ValueError as err:
        raise FaultException(
            FaultException.LAMBDA_CONTEXT_UNMARSHAL_ERROR, f"Unable to parse {name} JSON: {err}", None
        ) from err
