"""The local Lambda's own errors: misuse of the service, not failures of a function (those are FunctionError)."""

from __future__ import annotations


class LocalLambdaError(Exception):
    """Misuse of the local Lambda (unknown function, not started, stopped)."""


class UnknownFunction(LocalLambdaError):
    """No function of that name (the Invoke API's ``ResourceNotFoundException``)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"Function not found: {name}")
        self.name = name


class FunctionThrottled(LocalLambdaError):
    """The function is at its reserved concurrency (``ReservedConcurrentExecutions``): Lambda throttles the invocation
    rather than queue it (the Invoke API's ``TooManyRequestsException``, reason
    ``ReservedFunctionConcurrentInvocationLimitExceeded``; a Function URL's ``429``)."""

    def __init__(self, name: str, reserved: int) -> None:
        super().__init__(f"Rate Exceeded. ({name} is at its reserved concurrency, {reserved})")
        self.name = name
        self.reserved = reserved
