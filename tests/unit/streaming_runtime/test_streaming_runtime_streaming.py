"""Chunked transfer coding with trailers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streaming_runtime.streaming import ChunkedBody, frame_chunk, last_chunk


def decode_chunked(wire: bytes) -> tuple[list[bytes], dict[str, str]]:
    """A strict decoder of a chunked body, as the Runtime API reads it."""
    chunks, rest = [], wire
    while True:
        size_line, rest = rest.split(b"\r\n", 1)
        size = int(size_line, 16)
        if size == 0:
            break
        chunks.append(rest[:size])
        assert rest[size : size + 2] == b"\r\n"
        rest = rest[size + 2 :]
    trailers = {}
    while (line_end := rest.index(b"\r\n")) != 0:
        name, _, value = rest[:line_end].decode("latin-1").partition(": ")
        trailers[name] = value
        rest = rest[line_end + 2 :]
    assert rest == b"\r\n"
    return chunks, trailers


def test_frame_chunk() -> None:
    # GIVEN 26 bytes WHEN framed THEN hex size, CRLF, data, CRLF
    assert frame_chunk(b"abcdefghijklmnopqrstuvwxyz") == b"1a\r\nabcdefghijklmnopqrstuvwxyz\r\n"


def test_empty_chunk_is_refused() -> None:
    # GIVEN empty data WHEN framed THEN refused: it would end the body
    with pytest.raises(ValueError):
        frame_chunk(b"")


def test_last_chunk_with_and_without_trailers() -> None:
    # GIVEN / WHEN the body ends, with and without trailers THEN the zero chunk is followed by them and a blank line
    assert last_chunk() == b"0\r\n\r\n"
    assert last_chunk({"Lambda-Runtime-Function-Error-Type": "ValueError"}) == (
        b"0\r\nLambda-Runtime-Function-Error-Type: ValueError\r\n\r\n"
    )


def test_trailer_values_cannot_inject_lines() -> None:
    # GIVEN a trailer value with CR/LF WHEN written THEN it stays one field
    _, trailers = decode_chunked(last_chunk({"X-Type": "a\r\nInjected: yes"}))
    assert trailers == {"X-Type": "a  Injected: yes"}


def test_each_write_is_sent_at_once_and_empty_writes_are_skipped() -> None:
    # GIVEN a body writing to a recorder
    sent: list[bytes] = []
    body = ChunkedBody(sent.append)
    # WHEN chunks are written
    body.write(b"data: 1\n\n")
    assert sent == [b"9\r\ndata: 1\n\n\r\n"]  # THEN on the wire before the next write
    body.write(b"")
    body.close()
    # THEN the empty write sent nothing and the close ended the body
    assert sent == [b"9\r\ndata: 1\n\n\r\n", b"0\r\n\r\n"]
    assert body.closed and body.bytes_written == 9


def test_large_chunk_is_sent_without_copying_but_framed_the_same() -> None:
    # GIVEN a 1 MiB chunk
    data = bytes(range(256)) * 4096
    sent: list[bytes] = []
    # WHEN written
    ChunkedBody(sent.append).write(data)
    # THEN the bytes on the wire are one chunk of it
    assert b"".join(sent) == frame_chunk(data)
    assert any(part is data for part in sent)


def test_write_after_close_is_an_error() -> None:
    # GIVEN a closed body WHEN written or closed again THEN it refuses
    body = ChunkedBody(lambda data: None)
    body.close()
    with pytest.raises(ValueError):
        body.write(b"late")
    with pytest.raises(ValueError):
        body.close()


@given(st.lists(st.binary(max_size=200_000), max_size=8), st.sampled_from([None, {"A": "1", "B-C": "x y"}]))
def test_any_chunks_and_trailers_round_trip(chunks: list[bytes], trailers: dict[str, str] | None) -> None:
    # GIVEN any chunks (some empty) and trailers
    sent: list[bytes] = []
    body = ChunkedBody(sent.append)
    # WHEN written and closed
    for chunk in chunks:
        body.write(chunk)
    body.close(trailers)
    # THEN a strict decoder gets the non-empty chunks and the trailers back
    assert decode_chunked(b"".join(sent)) == ([c for c in chunks if c], trailers or {})
