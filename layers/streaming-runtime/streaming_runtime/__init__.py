"""A small Lambda runtime for Python that streams responses (Function URL RESPONSE_STREAM mode).

Run it with ``python -m streaming_runtime`` (the layer's exec wrapper does). Handlers import
``StreamingResponse`` from here; it is loaded on first use so the runtime itself starts without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streaming_runtime.response import StreamingResponse

__all__ = ["StreamingResponse"]


def __getattr__(name: str) -> Any:
    if name == "StreamingResponse":
        from streaming_runtime.response import StreamingResponse

        return StreamingResponse
    raise AttributeError(f"module 'streaming_runtime' has no attribute {name!r}")
