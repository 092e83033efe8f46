"""A runtime process's output, as Lambda's log agent reads it: :class:`OutputPump`.

One pump reads one pipe (the process's stdout or stderr) with ``os.read`` and passes every line on as it is
complete. :meth:`OutputPump.caught_up` waits until every byte written to the pipe so far has been passed on: a
runtime writes its log lines before it posts the response, so an execution environment that waits for its pumps
when the response arrives has the invocation's whole log (``LogType: Tail``) without guessing how long to wait.
"""

from __future__ import annotations

import fcntl
import os
import struct
import termios
import threading
import time
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

_READ_SIZE = 65536


def unread_bytes(fd: int) -> int:
    """How many bytes wait in a pipe (``FIONREAD``)."""
    raw = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
    return int(struct.unpack("i", raw)[0])


class OutputPump:
    """Reads ``stream`` line by line (the thread runs :meth:`run`), calling ``on_line`` with each, decoded."""

    def __init__(self, stream: IO[bytes], on_line: Callable[[str], None]) -> None:
        self._fd = stream.fileno()
        self._stream = stream
        self._on_line = on_line
        self._cond = threading.Condition()
        self._waiting = False  # in (or about to enter) os.read, with every line read so far passed on
        self._closed = False

    def run(self) -> None:
        pending = b""
        while True:
            with self._cond:
                self._waiting = True
                self._cond.notify_all()
            try:
                data = os.read(self._fd, _READ_SIZE)
            except OSError:
                data = b""
            with self._cond:
                self._waiting = False
            if not data:
                break
            *lines, pending = (pending + data).split(b"\n")
            for line in lines:
                self._on_line(line.decode("utf-8", "replace"))
        if pending:
            self._on_line(pending.decode("utf-8", "replace"))
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def caught_up(self, timeout: float) -> bool:
        """Wait (up to ``timeout`` s) until every byte written so far was passed on, or the pipe closed."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._closed:
                if self._waiting and self._unread() == 0:
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(min(remaining, 0.01))
        return True

    def _unread(self) -> int:
        try:
            return unread_bytes(self._fd)
        except OSError:
            return 0
