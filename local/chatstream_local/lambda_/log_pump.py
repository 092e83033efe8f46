"""A runtime process's output, as Lambda's log agent reads it: :class:`OutputPump`.

One pump reads one pipe (the process's stdout or stderr, or its telemetry log pipe) and passes every line (or
record) on as it is complete. Reads happen
under a lock, from a non-blocking pipe: the pump's thread reads whenever the pipe is readable, and
:meth:`OutputPump.catch_up` reads whatever is left in it right now. A runtime writes its log lines before it posts
the response, so an execution environment that calls :meth:`~OutputPump.catch_up` on every pump, the telemetry
log pipe's included, when the response arrives has the invocation's whole log (``LogType: Tail``) without waiting
for anything.
"""

from __future__ import annotations

import os
import select
import threading
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

_READ_SIZE = 65536


def split_lines(data: bytes) -> tuple[list[str], bytes]:
    """The complete lines at the start of ``data``, decoded, and the bytes after the last newline."""
    *lines, rest = data.split(b"\n")
    return [line.decode("utf-8", "replace") for line in lines], rest


def last_line(rest: bytes) -> list[str]:
    """What is left when the pipe closes: a last line without its newline."""
    return [rest.decode("utf-8", "replace")]


class OutputPump:
    """Reads ``stream`` (a thread runs :meth:`run`), calling ``on_line`` with each whole piece ``split`` finds in it:
    a line by default, or a telemetry log record (``telemetry_log.split_records``). ``at_end`` makes the pieces of
    what is left when the pipe closes."""

    def __init__(
        self,
        stream: IO[bytes],
        on_line: Callable[[str], None],
        split: Callable[[bytes], tuple[list[str], bytes]] = split_lines,
        at_end: Callable[[bytes], list[str]] = last_line,
    ) -> None:
        self._fd = stream.fileno()
        self._stream = stream  # kept open as long as the pump reads it
        self._on_line = on_line
        self._split = split
        self._at_end = at_end
        self._lock = threading.Lock()
        self._pending = b""
        self._closed = False
        os.set_blocking(self._fd, False)

    def run(self) -> None:
        while True:
            try:
                select.select([self._fd], [], [])
            except (OSError, ValueError):
                return
            with self._lock:
                if not self._drain():
                    return

    def catch_up(self) -> None:
        """Pass on every line written to the pipe so far."""
        with self._lock:
            self._drain()

    def _drain(self) -> bool:
        """Read what the pipe holds and pass on its complete lines; False once the pipe is closed."""
        while not self._closed:
            try:
                data = os.read(self._fd, _READ_SIZE)
            except BlockingIOError:
                return True
            except OSError:
                data = b""
            if not data:
                self._closed = True
                if self._pending:
                    for line in self._at_end(self._pending):
                        self._on_line(line)
                    self._pending = b""
                return False
            lines, self._pending = self._split(self._pending + data)
            for line in lines:
                self._on_line(line)
        return False
