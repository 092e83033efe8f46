"""A runtime process's output, as Lambda's log agent reads it: :class:`OutputPump`.

One pump reads one pipe (the process's stdout or stderr) and passes every line on as it is complete. Reads happen
under a lock, from a non-blocking pipe: the pump's thread reads whenever the pipe is readable, and
:meth:`OutputPump.catch_up` reads whatever is left in it right now. A runtime writes its log lines before it posts
the response, so an execution environment that calls :meth:`~OutputPump.catch_up` when the response arrives has
the invocation's whole log (``LogType: Tail``) without waiting for anything.
"""

from __future__ import annotations

import os
import select
import threading
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

_READ_SIZE = 65536


class OutputPump:
    """Reads ``stream`` line by line (a thread runs :meth:`run`), calling ``on_line`` with each, decoded."""

    def __init__(self, stream: IO[bytes], on_line: Callable[[str], None]) -> None:
        self._fd = stream.fileno()
        self._stream = stream  # kept open as long as the pump reads it
        self._on_line = on_line
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
                    self._on_line(self._pending.decode("utf-8", "replace"))
                    self._pending = b""
                return False
            *lines, self._pending = (self._pending + data).split(b"\n")
            for line in lines:
                self._on_line(line.decode("utf-8", "replace"))
        return False
