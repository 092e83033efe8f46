"""The Runtime API client, over a socket pair standing in for the Runtime API (no network)."""

from __future__ import annotations

import json
import socket
import threading
from typing import TYPE_CHECKING

import pytest

from streaming_runtime import client as client_module
from streaming_runtime.client import RuntimeAPIError, RuntimeClient
from streaming_runtime.errors import ErrorReport

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.timeout(10)

NEXT_HEADERS = (
    b"HTTP/1.1 200 OK\r\n"
    b"Lambda-Runtime-Aws-Request-Id: req-1\r\n"
    b"Lambda-Runtime-Deadline-Ms: 1700000000000\r\n"
    b"Lambda-Runtime-Invoked-Function-Arn: arn:aws:lambda:us-east-1:1:function:f\r\n"
    b"Content-Type: application/json\r\n"
)
ACCEPTED = b'HTTP/1.1 202 Accepted\r\nContent-Length: 15\r\n\r\n{"status":"OK"}'


class Server:
    """The Runtime API's ends of the socket pairs the client connects through."""

    def __init__(self) -> None:
        self.peers: list[socket.socket] = []
        self.requests: list[bytes] = []
        self.answering: threading.Thread | None = None

    def connect(self, address: tuple[str, int], *args: object) -> socket.socket:
        ours, theirs = socket.socketpair()
        self.peers.append(ours)
        return theirs

    @property
    def peer(self) -> socket.socket:
        return self.peers[-1]

    def answer(self, response: bytes) -> None:
        """Send ``response`` once the next request's bytes arrive (as the Runtime API would)."""
        peer = self.peer

        def run() -> None:
            self.requests.append(peer.recv(1 << 20))
            peer.sendall(response)

        self.answering = threading.Thread(target=run, daemon=True)
        self.answering.start()

    def received(self) -> bytes:
        """What the client sent on the current connection."""
        data = b""
        if self.answering is not None:
            self.answering.join(timeout=10)
            self.answering = None
            data = self.requests[-1]
        self.peer.setblocking(False)
        try:
            while chunk := self.peer.recv(1 << 20):
                data += chunk
        except BlockingIOError:
            pass
        self.peer.setblocking(True)
        return data


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    fake = Server()
    monkeypatch.setattr(client_module.socket, "create_connection", fake.connect)
    # socketpair sockets are AF_UNIX: TCP_NODELAY does not apply to them.
    monkeypatch.setattr(socket.socket, "setsockopt", lambda self, *args: None)
    yield fake
    for peer in fake.peers:
        peer.close()


def prime(server: Server, client: RuntimeClient, response: bytes) -> None:
    """Open the client's connection; the Runtime API answers the request made on it with ``response``."""
    client._socket()
    server.answer(response)


def test_next_invocation(server: Server) -> None:
    # GIVEN the Runtime API has an invocation
    client = RuntimeClient("127.0.0.1:9001")
    prime(server, client, NEXT_HEADERS + b'Content-Length: 11\r\n\r\n{"a": "b"}\n')
    # WHEN the client asks for the next one
    invocation = client.next_invocation()
    # THEN it sent GET …/invocation/next and got the event and its headers
    assert server.received().startswith(b"GET /2018-06-01/runtime/invocation/next HTTP/1.1\r\nHost: 127.0.0.1:9001\r\n")
    assert invocation.request_id == "req-1"
    assert invocation.deadline_ms == 1700000000000
    assert invocation.body == b'{"a": "b"}\n'


def test_next_invocation_with_a_chunked_body(server: Server) -> None:
    # GIVEN a Runtime API that answers with a chunked body
    client = RuntimeClient("127.0.0.1:9001")
    prime(server, client, NEXT_HEADERS + b'Transfer-Encoding: chunked\r\n\r\n4\r\n{"a"\r\n4\r\n: 1}\r\n0\r\n\r\n')
    # WHEN read THEN the body is reassembled
    assert client.next_invocation().body == b'{"a": 1}'


def test_post_response(server: Server) -> None:
    # GIVEN an invocation's result
    client = RuntimeClient("127.0.0.1:9001")
    prime(server, client, ACCEPTED)
    # WHEN posted
    client.post_response("req-1", b'{"ok":true}', "application/json")
    # THEN it is a buffered POST with its length and type
    sent = server.received()
    assert sent.startswith(b"POST /2018-06-01/runtime/invocation/req-1/response HTTP/1.1\r\n")
    assert b"\r\nContent-Type: application/json\r\n" in sent
    assert b"\r\nContent-Length: 11\r\n" in sent
    assert sent.endswith(b'\r\n\r\n{"ok":true}')


def test_post_error_and_init_error(server: Server) -> None:
    # GIVEN a failure report
    client = RuntimeClient("127.0.0.1:9001")
    report = ErrorReport("Runtime.ImportModuleError", "Unable to import module 'app'")
    # WHEN posted for an invocation, and for init
    prime(server, client, ACCEPTED)
    client.post_error("req-1", report)
    invocation_error = server.received()
    prime(server, client, ACCEPTED)
    client.post_init_error(report)
    init_error = server.received()
    # THEN each goes to its endpoint with the error type header and the JSON body
    assert invocation_error.startswith(b"POST /2018-06-01/runtime/invocation/req-1/error HTTP/1.1\r\n")
    assert init_error.startswith(b"POST /2018-06-01/runtime/init/error HTTP/1.1\r\n")
    for sent in (invocation_error, init_error):
        assert b"\r\nLambda-Runtime-Function-Error-Type: Runtime.ImportModuleError\r\n" in sent
        assert sent.endswith(report.to_json())


def test_stream_headers_chunks_and_answer(server: Server) -> None:
    # GIVEN a streamed response begun
    client = RuntimeClient("127.0.0.1:9001")
    body = client.begin_stream("req-1", "application/vnd.awslambda.http-integration-response")
    # WHEN a chunk is written THEN headers and the chunk are on the wire at once
    body.write(b"hello")
    sent = server.received()
    head, _, first = sent.partition(b"\r\n\r\n")
    assert head.startswith(b"POST /2018-06-01/runtime/invocation/req-1/response HTTP/1.1")
    for header in (
        b"Lambda-Runtime-Function-Response-Mode: streaming",
        b"Transfer-Encoding: chunked",
        b"Trailer: Lambda-Runtime-Function-Error-Type, Lambda-Runtime-Function-Error-Body",
        b"Content-Type: application/vnd.awslambda.http-integration-response",
    ):
        assert header in head.split(b"\r\n")
    assert b"Content-Length" not in head
    assert first == b"5\r\nhello\r\n"
    # WHEN the body ends with trailers and the Runtime API accepts it
    server.peer.sendall(ACCEPTED)
    client.end_stream(body, {"Lambda-Runtime-Function-Error-Type": "ValueError"})
    # THEN the trailers followed the last chunk
    assert server.received() == b"0\r\nLambda-Runtime-Function-Error-Type: ValueError\r\n\r\n"


def test_unexpected_status_is_an_error(server: Server) -> None:
    # GIVEN a Runtime API that refuses a response as too large
    client = RuntimeClient("127.0.0.1:9001")
    prime(server, client, b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 8\r\n\r\ntoo big!")
    # WHEN the response is posted THEN the error names the endpoint and status
    with pytest.raises(RuntimeAPIError, match="413") as raised:
        client.post_response("req-1", b"x" * 10, "application/json")
    assert raised.value.status == 413
    assert raised.value.body == b"too big!"


def test_kept_alive_connection_closed_by_the_server_is_replaced(server: Server) -> None:
    # GIVEN a connection used once, then closed by the Runtime API while idle
    client = RuntimeClient("127.0.0.1:9001")
    prime(server, client, ACCEPTED)
    client.post_response("req-1", b"1", "application/json")
    server.peer.close()
    # WHEN the client makes its next request
    prime(server, client, ACCEPTED)
    # THEN it connected again, and the new connection works
    assert len(server.peers) == 2
    client.post_response("req-2", b"2", "application/json")
    assert server.received().startswith(b"POST /2018-06-01/runtime/invocation/req-2/response")


def test_a_kept_alive_connection_that_fails_the_first_write_is_replaced(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a connection used once, then closed by the Runtime API too late for the client to notice before it writes
    client = RuntimeClient("127.0.0.1:9001")
    prime(server, client, ACCEPTED)
    client.post_response("req-1", b"1", "application/json")
    server.peer.close()
    monkeypatch.setattr(client_module, "_peer_closed", lambda sock: False)
    connect = server.connect

    def connect_and_accept(*args: object) -> socket.socket:
        sock = connect(*args)
        server.answer(ACCEPTED)
        return sock

    monkeypatch.setattr(client_module.socket, "create_connection", connect_and_accept)
    # WHEN the client posts the next response: its first write fails, so none of it went out
    client.post_response("req-2", b"2", "application/json")
    # THEN it was sent once more, whole, on a new connection
    assert len(server.peers) == 2
    assert server.received().startswith(b"POST /2018-06-01/runtime/invocation/req-2/response")


def test_a_post_refused_before_its_body_was_read_is_reported_and_not_sent_again(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a kept-alive connection to a Runtime API that answers 413 as soon as it has read a request's head, and
    # closes the connection without reading the body (as the local Runtime API refuses a buffered response over 6 MB)
    client = RuntimeClient("127.0.0.1:9001")
    client._socket()
    peer = server.peer

    def refuse() -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            head += peer.recv(4096)
        peer.sendall(b"HTTP/1.1 413 Request Entity Too Large\r\nContent-Length: 8\r\n\r\ntoo big!")
        peer.close()

    threading.Thread(target=refuse).start()
    connections: list[object] = []

    def refuse_to_connect(*args: object) -> socket.socket:
        connections.append(args)
        raise ConnectionRefusedError

    monkeypatch.setattr(client_module.socket, "create_connection", refuse_to_connect)
    # WHEN a 7 MB response is posted: its body cannot all go out before the connection closes
    with pytest.raises(RuntimeAPIError) as raised:
        client.post_response("req-1", b"x" * (7 * 1024 * 1024), "application/json")
    # THEN the caller hears the 413, and no new connection was opened to send the response again
    assert (raised.value.status, raised.value.body) == (413, b"too big!")
    assert connections == []
    assert client._sock is None


def test_connection_close_is_honoured(server: Server) -> None:
    # GIVEN a Runtime API that closes after each response
    client = RuntimeClient("127.0.0.1:9001")
    prime(server, client, b"HTTP/1.1 202 Accepted\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
    # WHEN a request is answered THEN the client drops the connection and opens a new one next time
    client.post_response("req-1", b"1", "application/json")
    assert client._sock is None


def test_address_must_be_host_and_port() -> None:
    # GIVEN a malformed AWS_LAMBDA_RUNTIME_API WHEN a client is made THEN the message says what is expected
    with pytest.raises(ValueError, match="host:port"):
        RuntimeClient("localhost")


def test_post_error_sends_the_xray_cause(server: Server) -> None:
    # GIVEN a report with a stack frame
    client = RuntimeClient("127.0.0.1:9001")
    report = ErrorReport("ValueError", "bad turn", frames=[("/var/task/app.py", 12, "handler")])
    prime(server, client, ACCEPTED)
    # WHEN posted as an invocation error
    client.post_error("req-1", report)
    # THEN the X-Ray cause header carries awslambdaric's document, on one line
    head = server.received().partition(b"\r\n\r\n")[0].decode()
    cause = next(line for line in head.split("\r\n") if line.startswith("Lambda-Runtime-Function-XRay-Error-Cause: "))
    document = json.loads(cause.partition(": ")[2])
    stack = [{"label": "handler", "path": "/var/task/app.py", "line": 12}]
    assert document["exceptions"] == [{"message": "bad turn", "type": "ValueError", "stack": stack}]
    assert document["paths"] == ["/var/task/app.py"]


def test_an_xray_cause_of_a_mebibyte_or_more_is_left_out(server: Server) -> None:
    # GIVEN a report whose message alone makes the cause 1 MiB or more (awslambdaric's limit)
    client = RuntimeClient("127.0.0.1:9001")
    report = ErrorReport("ValueError", "x" * (1024 * 1024))
    client._socket()
    peer, sent = server.peer, bytearray()

    def read_all_then_accept() -> None:
        while not sent.endswith(report.to_json()):
            sent.extend(peer.recv(1 << 20))
        peer.sendall(ACCEPTED)

    reader = threading.Thread(target=read_all_then_accept)
    reader.start()
    # WHEN posted THEN the report is sent without the header
    client.post_error("req-1", report)
    reader.join(timeout=10)
    assert b"Lambda-Runtime-Function-XRay-Error-Cause" not in sent
    assert b"\r\nLambda-Runtime-Function-Error-Type: ValueError\r\n" in sent


def test_a_refused_xray_cause_is_dropped_and_the_error_posted_again(server: Server) -> None:
    # GIVEN a Runtime API that refuses the first request's headers as too large (431)
    client = RuntimeClient("127.0.0.1:9001")
    prime(server, client, b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\n\r\n")
    peer = server.peer

    def accept_the_retry() -> None:
        server.answering.join(timeout=10)  # type: ignore[union-attr]
        server.answer(ACCEPTED)

    retry = threading.Thread(target=accept_the_retry)
    retry.start()
    # WHEN the error is posted
    client.post_error("req-1", ErrorReport("ValueError", "bad turn"))
    retry.join(timeout=10)
    # THEN it went again, on the same connection, without the cause: the error itself is not lost
    first, second = server.requests
    assert server.peer is peer
    assert b"Lambda-Runtime-Function-XRay-Error-Cause" in first
    assert b"Lambda-Runtime-Function-XRay-Error-Cause" not in second
    assert second.endswith(ErrorReport("ValueError", "bad turn").to_json())


def test_a_failed_stream_write_drops_the_connection(server: Server) -> None:
    # GIVEN a streamed response whose connection the Runtime API closed
    client = RuntimeClient("127.0.0.1:9001")
    body = client.begin_stream("req-1", "application/octet-stream")
    server.peer.close()
    # WHEN a chunk is written THEN the write fails, and ending the stream drops the connection without writing
    with pytest.raises(OSError):
        for _ in range(100):
            body.write(b"x" * 1024)
    assert body.failed
    client.end_stream(body)
    assert client._sock is None


def test_ending_a_stream_whose_answer_never_comes_drops_the_connection(server: Server) -> None:
    # GIVEN a streamed response, and a Runtime API that closes the connection instead of answering
    client = RuntimeClient("127.0.0.1:9001")
    body = client.begin_stream("req-1", "application/octet-stream")
    body.write(b"all of it")

    def hang_up() -> None:
        server.received()
        server.peer.shutdown(socket.SHUT_RDWR)

    threading.Thread(target=hang_up).start()
    # WHEN the stream is ended THEN the error is raised and the connection dropped: the next request opens another
    with pytest.raises(ConnectionError):
        client.end_stream(body)
    assert client._sock is None
