"""The handler-facing response type: what a streaming handler returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence


@dataclass(frozen=True)
class StreamingResponse:
    """An HTTP response for a Function URL in RESPONSE_STREAM mode.

    ``status_code``, ``headers`` and ``cookies`` form the prelude; every item of ``body`` (``str`` is
    UTF-8 encoded) is written to the client as soon as the iterator produces it. Empty items are skipped.
    The prelude goes out together with the first body item, so an exception raised before the first item
    is reported as an ordinary invocation error (the client sees an error status), and one raised after
    it ends the stream with Lambda's error trailers.
    """

    status_code: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    cookies: Sequence[str] = ()
    body: Iterable[str | bytes] = ()
