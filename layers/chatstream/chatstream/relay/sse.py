"""Server-Sent Events framing (the WHATWG HTML "event stream" format).

An event is a block of ``field: value`` lines ended by a blank line. ``data`` that holds line
breaks (CRLF, CR or LF) becomes one ``data:`` line per line, which a client joins back with
``\\n``; ``event`` and ``id`` must be single lines (and ``id`` must not contain NUL, which makes a
client ignore it). A line starting with ``:`` is a comment, which clients ignore: it keeps idle
connections open through proxies.
"""

from __future__ import annotations

import json
import re
from typing import Any

LINE_BREAK = re.compile(r"\r\n|\r|\n")


def _single_line(name: str, value: str) -> str:
    if LINE_BREAK.search(value) or "\x00" in value:
        raise ValueError(f"an SSE {name} must be one line without NUL, got {value!r}")
    return value


def message(data: str, *, event: str | None = None, id: int | str | None = None) -> str:
    """One event: optional ``id:`` and ``event:`` lines, then ``data:`` lines, then a blank line."""
    lines: list[str] = []
    if id is not None:
        lines.append(f"id: {_single_line('id', str(id))}")
    if event is not None:
        lines.append(f"event: {_single_line('event', event)}")
    lines.extend(f"data: {line}" for line in LINE_BREAK.split(data))
    return "\n".join(lines) + "\n\n"


# Characters that end a line for str.splitlines() but not for SSE: escaped in JSON data, so that a reader that splits
# lines the Python way (httpx-sse before 0.4.2, anything on str.splitlines) still gets each data line whole.
_SPLITLINES_ONLY = str.maketrans({"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"})


def json_line(payload: Any) -> str:
    """``payload`` as compact JSON on one line for any line splitter: JSON escapes CR and LF, and this U+2028,
    U+2029 and U+0085 (the same text once parsed)."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).translate(_SPLITLINES_ONLY)


def json_message(payload: Any, *, event: str, id: int | str | None = None) -> str:
    """An event whose data is ``payload`` as compact JSON (:func:`json_line`)."""
    return message(json_line(payload), event=event, id=id)


def retry(milliseconds: int) -> str:
    """The client's reconnection delay."""
    if isinstance(milliseconds, bool) or not isinstance(milliseconds, int) or milliseconds < 0:
        raise ValueError(f"an SSE retry is a non-negative integer, got {milliseconds!r}")
    return f"retry: {milliseconds}\n\n"


def comment(text: str = "") -> str:
    """A comment block (one ``:`` line per line of ``text``), ignored by clients."""
    return "".join(f": {line}\n" if line else ":\n" for line in LINE_BREAK.split(text)) + "\n"
