"""The smallest handler: what the cold start benchmark starts to measure a runtime's own start-up."""

from __future__ import annotations

from typing import Any


def handler(event: Any, context: Any) -> dict[str, bool]:
    return {"ok": True}
