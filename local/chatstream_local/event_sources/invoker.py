"""How an event source mapping invokes its function: an :data:`Invoker` and the :class:`InvokeOutcome` it returns.

The mappings take the invoker as an argument, so they run against the local Lambda
(:meth:`~chatstream_local.lambda_.service.LocalLambda.invoke`, whose ``InvokeResult`` fits) or an in-process
function in tests (returning :class:`Invoked`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol


class InvokeOutcome(Protocol):
    """What an invocation returned (``chatstream_local.lambda_.invocation.InvokeResult`` fits)."""

    @property
    def payload(self) -> bytes: ...

    @property
    def function_error(self) -> str | None: ...


Invoker = Callable[[bytes], InvokeOutcome]
"""Invoke the function synchronously with an event's JSON bytes."""


@dataclass(frozen=True)
class Invoked:
    """A plain :class:`InvokeOutcome`, for in-process invokers."""

    payload: bytes
    function_error: str | None = None
    request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    executed_version: str = "$LATEST"
    status_code: int = 200
