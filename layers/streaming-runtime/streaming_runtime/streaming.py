"""HTTP/1.1 chunked transfer coding with trailers, written straight to the socket.

``http.client`` cannot send trailers, and Lambda reports a failure after the first byte in trailers,
so the runtime frames its streamed bodies itself: every chunk is one ``send`` (TCP_NODELAY is set on
the socket), nothing is buffered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

#: Chunks larger than this are sent as header, data, CRLF rather than copied into one buffer.
_COPY_LIMIT = 64 * 1024

DECLARED_TRAILERS = "Lambda-Runtime-Function-Error-Type, Lambda-Runtime-Function-Error-Body"


def frame_chunk(data: bytes) -> bytes:
    """One chunk: hex size, CRLF, the data, CRLF. An empty chunk would end the body, so it is refused."""
    if not data:
        raise ValueError("an empty chunk would terminate the chunked body")
    return b"%x\r\n%s\r\n" % (len(data), data)


def last_chunk(trailers: Mapping[str, str] | None = None) -> bytes:
    """The zero-size chunk that ends the body, with optional trailer fields."""
    fields = "".join(f"{name}: {_field_value(value)}\r\n" for name, value in (trailers or {}).items())
    return b"0\r\n" + fields.encode("latin-1", "replace") + b"\r\n"


def _field_value(value: str) -> str:
    # A header/trailer value is one line: anything that could end it early is replaced.
    return value.replace("\r", " ").replace("\n", " ")


class ChunkedBody:
    """The body of a streamed request being sent: ``write`` each chunk, then ``close`` (with trailers).

    A ``send`` that raises leaves the body :attr:`failed`: the connection is in an unknown state (part of a chunk
    may be on the wire), so nothing more can be written to it; the caller drops the connection.
    """

    __slots__ = ("_send", "_closed", "_failed", "bytes_written")

    def __init__(self, send: Callable[[bytes], object]) -> None:
        self._send = send
        self._closed = False
        self._failed = False
        self.bytes_written = 0

    def write(self, data: bytes) -> None:
        """Put ``data`` on the wire now, as its own chunk. Empty data is skipped."""
        if self._closed:
            raise ValueError("write to a closed chunked body")
        if not data:
            return
        if len(data) > _COPY_LIMIT:
            self._put(b"%x\r\n" % len(data), data, b"\r\n")
        else:
            self._put(frame_chunk(data))
        self.bytes_written += len(data)

    def close(self, trailers: Mapping[str, str] | None = None) -> None:
        """End the body; ``trailers`` (e.g. the error type and body) follow the last chunk."""
        if self._closed:
            raise ValueError("chunked body already closed")
        self._closed = True
        self._put(last_chunk(trailers))

    def _put(self, *parts: bytes) -> None:
        if self._failed:
            raise ValueError("write to a chunked body whose connection failed")
        try:
            for part in parts:
                self._send(part)
        except BaseException:
            self._failed = True
            raise

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def failed(self) -> bool:
        return self._failed
