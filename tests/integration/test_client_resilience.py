"""The Python client against a scripted relay on loopback: what it reports and what it sends again.

The fake relay answers each route from a script (a stream that repeats an event, one the connection cuts,
503 then 200, a 502 after which the turn does or does not exist) and keeps every request it saw, so each test
checks both what the client reported and what reached the server. The client's waits are recorded, not slept.
"""

from __future__ import annotations

import io
import itertools
import json
import pickle
import socket
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from httpx_sse import SSEError

from chatstream_client.api import ApiError, ChatClient, TurnResult
from chatstream_client.cli import main
from chatstream_client.retry import RetryPolicy
from chatstream_client.smoke import main as smoke_main
from chatstream_local.loopback import LoopbackServer, QuietHandler

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.integration

SESSION = "s" * 32
EVENTS = f"/sessions/{SESSION}/turns/1/events"


def meta(turn: int = 1) -> str:
    url = f"/sessions/{SESSION}/turns/{turn}/events"
    return f"event: meta\ndata: {json.dumps({'session_id': SESSION, 'turn': turn, 'events_url': url})}\n\n"


def token(seq: int | str, text: str) -> str:
    return f"id: {seq}\nevent: token\ndata: {json.dumps({'text': text})}\n\n"


def reasoning(seq: int | str, text: str) -> str:
    return f"id: {seq}\nevent: reasoning\ndata: {json.dumps({'text': text})}\n\n"


def done(seq: int) -> str:
    return f'id: {seq}\nevent: done\ndata: {{"stop_reason":"end_turn"}}\n\n'


def reconnect(last: int, turn: int = 1) -> str:
    url = f"/sessions/{SESSION}/turns/{turn}/events"
    return f"event: reconnect\ndata: {json.dumps({'events_url': url, 'last_event_id': last})}\n\n"


@dataclass(frozen=True)
class Answer:
    """One scripted answer: an event stream (ended properly, or cut), or a JSON body (whole, or cut), or none."""

    status: int = 200
    events: tuple[str, ...] = ()
    body: dict[str, Any] | None = None
    headers: tuple[tuple[str, str], ...] = ()
    cut: bool = False  # close the connection in the middle of the body
    drop: bool = False  # close the connection without answering


def error(status: int, code: str = "unavailable", retry_after: str | None = None, *, cut: bool = False) -> Answer:
    headers = (("Retry-After", retry_after),) if retry_after is not None else ()
    return Answer(status, body={"error": {"code": code, "message": f"scripted {status}"}}, headers=headers, cut=cut)


DROPPED = Answer(drop=True)  # the connection closes before any answer


def stream(*events: str, cut: bool = False) -> Answer:
    return Answer(events=("retry: 1000\n\n", *events), cut=cut)


def history(*turns: tuple[int, str], cut: bool = False) -> Answer:
    rows = [{"turn": number, "user": user, "status": "complete"} for number, user in turns]
    return Answer(body={"session_id": SESSION, "turns": rows}, cut=cut)


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes = b""


@dataclass
class FakeRelay:
    """Scripted answers per ``METHOD /path`` (the last one repeats), and every request seen."""

    scripts: dict[str, list[Answer]] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    url: str = ""

    def script(self, route: str, *answers: Answer) -> None:
        self.scripts[route] = list(answers)

    def next(self, route: str) -> Answer:
        answers = self.scripts.get(route)
        if not answers:
            return error(404, "not_found")
        return answers.pop(0) if len(answers) > 1 else answers[0]

    def requests(self, route: str) -> list[Seen]:
        method, path = route.split(" ", 1)
        return [s for s in self.seen if (s.method, s.path) == (method, path)]


class _Handler(QuietHandler):
    server: LoopbackServer[FakeRelay]

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def _answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        relay = self.server.owner
        path = self.path.split("?", 1)[0]
        relay.seen.append(Seen(self.command, path, {k.lower(): v for k, v in self.headers.items()}, body))
        answer = relay.next(f"{self.command} {path}")
        if answer.drop:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.send_response(answer.status)
        for name, value in answer.headers:
            self.send_header(name, value)
        if answer.body is not None:
            payload = json.dumps(answer.body).encode()
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if answer.cut:
                self.wfile.write(payload[: len(payload) // 2])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            self.wfile.write(payload)
            return
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for event in answer.events:
            data = event.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        if answer.cut:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(b"0\r\n\r\n")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def relay() -> Iterator[FakeRelay]:
    fake = FakeRelay()
    server = LoopbackServer(("127.0.0.1", 0), _Handler, fake)
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield fake
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


@pytest.fixture
def waits() -> list[float]:
    return []


@pytest.fixture
def client(relay: FakeRelay, waits: list[float]) -> Iterator[ChatClient]:
    # The jitter draws its upper bound, so each recorded wait is the longest the policy allows.
    policy = RetryPolicy(uniform=lambda low, high: high)
    with ChatClient(relay.url, retry=policy, sleep=waits.append, timeout=10, read_timeout=10) as chat_client:
        yield chat_client


# ------------------------------------------------------------------------------------ reporting


def test_a_clean_stream_is_reported_clean(relay: FakeRelay, client: ChatClient) -> None:
    relay.script("POST /chat", stream(meta(), token(1, "a"), token(2, "b"), done(3)))

    result = client.chat("hi")

    assert (result.text, result.ids, result.clean, result.retries, result.incidents) == ("ab", ["1", "2"], True, 0, [])


def test_an_event_whose_data_is_not_json_is_a_bad_event_with_the_turn_so_far(
    relay: FakeRelay, client: ChatClient
) -> None:
    # GIVEN a stream whose second token's data is cut (as a reader splitting at U+2028 cuts it)
    relay.script("POST /chat", stream(meta(), token(1, "a"), 'event: token\nid: 2\ndata: {"text":"b\n\n', done(3)))
    # WHEN the client reads it THEN it raises bad_event, naming the event, with the turn so far (not a bare error)
    with pytest.raises(ApiError) as raised:
        client.chat("hi")
    assert raised.value.code == "bad_event" and "'token' event (id 2)" in raised.value.message
    assert raised.value.result is not None and raised.value.result.text == "a" and raised.value.turn == 1


def test_an_event_the_relay_repeats_is_shown_once_and_reported(relay: FakeRelay, client: ChatClient) -> None:
    # GIVEN a relay that sends token 2 twice in one stream
    relay.script("POST /chat", stream(meta(), token(1, "a"), token(2, "b"), token(2, "b"), token(3, "c"), done(4)))

    # WHEN the client reads it
    result = client.chat("hi")

    # THEN the text is not doubled, but the repeat is on the result and the stream is not clean
    assert (result.text, result.ids, result.repeated_ids) == ("abc", ["1", "2", "3"], ["2"])
    assert not result.clean


def test_a_cut_inside_a_record_resumes_from_the_pieces_id(relay: FakeRelay, client: ChatClient) -> None:
    # GIVEN paced pieces of record 2 ("b c d") cut after its second piece, and a resume that repeats that piece
    relay.script("POST /chat", stream(meta(), token(1, "a"), token("2.2", " b"), token("2.4", " c"), cut=True))
    relay.script(f"GET {EVENTS}", stream(token("2.4", " c"), token(2, " d"), token(3, " e"), done(4)))

    # WHEN the client follows the turn
    result = client.chat("hi")

    # THEN it resumed from the piece's id, skipped the repeated piece and reports it, and the text is exact
    assert [s.headers.get("last-event-id") for s in relay.requests(f"GET {EVENTS}")] == ["2.4"]
    assert (result.text, result.ids, result.repeated_ids) == ("a b c d e", ["1", "2.2", "2.4", "2", "3"], ["2.4"])


def test_reasoning_is_kept_apart_and_resumes_in_the_same_id_sequence(relay: FakeRelay, client: ChatClient) -> None:
    # GIVEN reasoning pieces, cut inside record 1, then a resume that repeats a piece before the reply
    relay.script("POST /chat", stream(meta(), reasoning("1.2", "r1"), reasoning("1.5", " r2"), cut=True))
    relay.script(f"GET {EVENTS}", stream(reasoning("1.5", " r2"), reasoning(1, " r3"), token(2, "Hi"), done(3)))
    shown: list[tuple[str, str]] = []

    # WHEN the client follows the turn, told of each piece of reply and reasoning
    result = client.chat(
        "hi", on_token=lambda t: shown.append(("token", t)), on_reasoning=lambda t: shown.append(("reasoning", t))
    )

    # THEN it resumed from the reasoning piece's id, showed each piece once, in order, and keeps reasoning apart
    assert [s.headers.get("last-event-id") for s in relay.requests(f"GET {EVENTS}")] == ["1.5"]
    assert shown == [("reasoning", "r1"), ("reasoning", " r2"), ("reasoning", " r3"), ("token", "Hi")]
    assert (result.reasoning, result.text) == ("r1 r2 r3", "Hi")
    assert (result.ids, result.repeated_ids) == (["1.2", "1.5", "1", "2"], ["1.5"])


def test_a_cut_connection_is_an_unplanned_resume(relay: FakeRelay, client: ChatClient) -> None:
    # GIVEN a stream whose connection is cut after token 2, and a resume that replays from the start
    relay.script("POST /chat", stream(meta(), token(1, "a"), token(2, "b"), cut=True))
    relay.script(f"GET {EVENTS}", stream(token(1, "a"), token(2, "b"), token(3, "c"), done(4)))

    # WHEN the client follows the turn
    result = client.chat("hi")

    # THEN it resumed after id 2 by itself, and reports both that resume and the ids the relay sent again
    assert result.text == "abc" and result.done is not None
    assert [s.headers.get("last-event-id") for s in relay.requests(f"GET {EVENTS}")] == ["2"]
    assert (result.resumes, result.unplanned_resumes, result.repeated_ids) == (1, 1, ["1", "2"])
    assert "the connection broke" in result.incidents[0] and not result.clean


def test_a_stream_that_ends_without_done_is_an_unplanned_resume(relay: FakeRelay, client: ChatClient) -> None:
    relay.script("POST /chat", stream(meta(), token(1, "a")))
    relay.script(f"GET {EVENTS}", stream(token(2, "b"), done(3)))

    result = client.chat("hi")

    assert (result.text, result.unplanned_resumes, result.repeated_ids) == ("ab", 1, [])
    assert "ended without done" in result.incidents[0] and not result.clean


def test_a_reconnect_event_is_a_planned_resume(relay: FakeRelay, client: ChatClient, waits: list[float]) -> None:
    # GIVEN a relay that ends the stream with `reconnect` (its time limit), then continues on the resume
    relay.script("POST /chat", stream(meta(), token(1, "a"), reconnect(1)))
    relay.script(f"GET {EVENTS}", stream(token(2, "b"), done(3)))

    result = client.chat("hi")

    # THEN the client resumed at once, and the stream counts as clean
    assert (result.text, result.resumes, result.unplanned_resumes, result.clean) == ("ab", 1, 0, True)
    assert waits == []


def test_a_stream_that_never_progresses_ends_in_a_resume_limit(relay: FakeRelay, waits: list[float]) -> None:
    relay.script("POST /chat", stream(meta(), token(1, "a")))
    relay.script(f"GET {EVENTS}", stream())

    with ChatClient(relay.url, max_resumes=3, sleep=waits.append) as client, pytest.raises(ApiError) as raised:
        client.chat("hi")

    assert raised.value.code == "resume_limit" and len(relay.requests(f"GET {EVENTS}")) == 3


# ------------------------------------------------------------------------------------ retries


def test_post_chat_answered_503_is_sent_again_after_retry_after(
    relay: FakeRelay, client: ChatClient, waits: list[float]
) -> None:
    # GIVEN a relay that answers 503 unavailable (Retry-After: 3), then streams the turn
    relay.script("POST /chat", error(503, retry_after="3"), stream(meta(), token(1, "a"), done(2)))

    # WHEN the client sends a message
    result = client.chat("hi")

    # THEN it waited at least what the answer asked, sent it again once, and counts the retry
    assert waits == [3.0]
    assert len(relay.requests("POST /chat")) == 2
    assert (result.text, result.retries, result.clean) == ("a", 1, True)
    assert result.incidents == ["retry 1: POST /chat: 503"]


def test_retries_back_off_and_are_bounded(relay: FakeRelay, client: ChatClient, waits: list[float]) -> None:
    # GIVEN a relay that is throttled for good
    relay.script("POST /chat", error(429, "http_error"))

    # WHEN the client sends a message THEN it tries five times in all, waiting up to 0.25, 0.5, 1 and 2 s, then fails
    with pytest.raises(ApiError) as raised:
        client.chat("hi")
    assert raised.value.status == 429
    assert len(relay.requests("POST /chat")) == 5
    assert waits == [0.25, 0.5, 1.0, 2.0]


def test_a_retry_after_beyond_the_limit_is_not_waited_for(relay: FakeRelay, client: ChatClient) -> None:
    relay.script("POST /chat", error(503, retry_after="120"), stream(meta(), done(1)))

    with pytest.raises(ApiError) as raised:
        client.chat("hi")

    assert raised.value.status == 503 and len(relay.requests("POST /chat")) == 1


def test_a_resume_answered_502_and_503_is_sent_again(relay: FakeRelay, client: ChatClient) -> None:
    # GIVEN a cut stream, and a relay whose resume fails twice before it streams
    relay.script("POST /chat", stream(meta(), token(1, "a"), cut=True))
    relay.script(f"GET {EVENTS}", error(502, "http_error"), error(503), stream(token(2, "b"), done(3)))

    result = client.chat("hi")

    # THEN every resume asked for what follows id 1, and the result counts one resume and two retries
    assert [s.headers.get("last-event-id") for s in relay.requests(f"GET {EVENTS}")] == ["1", "1", "1"]
    assert (result.text, result.resumes, result.unplanned_resumes, result.retries) == ("ab", 1, 1, 2)


def test_a_404_is_never_sent_again(relay: FakeRelay, client: ChatClient) -> None:
    relay.script(f"GET /sessions/{SESSION}", history((1, "first")))
    relay.script("POST /chat", error(404, "session_not_found"))

    with pytest.raises(ApiError) as raised:
        client.chat("hi", SESSION)

    assert raised.value.code == "session_not_found" and len(relay.requests("POST /chat")) == 1


def test_a_502_on_a_new_session_is_sent_again_with_its_key(relay: FakeRelay, client: ChatClient) -> None:
    # GIVEN a relay that fails before its first byte on a message that starts a session, then streams its turn
    relay.script("POST /chat", error(502, "http_error"), stream(meta(), token(1, "a"), done(2)))

    # WHEN the client sends it
    result = client.chat("hi")

    # THEN it sent it again with the same Idempotency-Key (the relay joins the turn the first send may have started)
    keys = [seen.headers.get("idempotency-key") for seen in relay.requests("POST /chat")]
    assert len(keys) == 2 and keys[0] == keys[1] == f'"{result.idempotency_key}"' and len(result.idempotency_key) == 32
    assert (result.text, result.retries) == ("a", 1)
    assert result.incidents == ["retry 1: POST /chat: 502"]


def test_every_message_has_its_own_key_and_a_key_can_be_given(relay: FakeRelay, client: ChatClient) -> None:
    relay.script("POST /chat", stream(meta(1), done(1)))
    first, second = client.chat("one"), client.chat("two")
    third = client.chat("two", idempotency_key="given-key")
    assert len({first.idempotency_key, second.idempotency_key, "given-key"}) == 3
    assert third.idempotency_key == "given-key"
    assert relay.requests("POST /chat")[-1].headers["idempotency-key"] == '"given-key"'


def test_a_stream_that_breaks_before_its_meta_is_sent_again_with_its_key(relay: FakeRelay, client: ChatClient) -> None:
    # GIVEN a relay whose first stream breaks before meta (a relay killed mid-answer), then answers whole
    relay.script("POST /chat", stream(cut=True), stream(meta(2), token(1, "b"), done(2)))

    # WHEN the client sends a message into a session it saw
    relay.script(f"GET /sessions/{SESSION}", history((1, "first")))
    result = client.chat("second", SESSION)

    # THEN the same request went again with its key, and the turn streamed; the history was read once, before
    sent = relay.requests("POST /chat")
    assert len(sent) == 2 and sent[0].headers["idempotency-key"] == sent[1].headers["idempotency-key"]
    assert sent[0].body == sent[1].body
    assert (result.turn, result.text, result.retries) == (2, "b", 1)


def test_a_connection_that_cannot_be_made_is_tried_again_then_raised(waits: list[float]) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"  # bound, never listening: connections are refused
        with ChatClient(closed, sleep=waits.append) as client, pytest.raises(httpx.ConnectError):
            client.chat("hi")
    assert len(waits) == 4


def test_the_cli_streams_a_reply_after_a_503(relay: FakeRelay, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a relay that is busy once
    relay.script("POST /chat", error(503, retry_after="0"), stream(meta(), token(1, "hello"), done(2)))

    # WHEN the terminal client sends a message
    status = main(["--url", relay.url, "--message", "hi", "--no-iam"])

    # THEN it sent the message again and printed the reply
    assert (status, capsys.readouterr().out.strip()) == (0, "hello")
    assert len(relay.requests("POST /chat")) == 2


class _LeftReader(io.StringIO):
    """A stdout whose reader left after the first words (`make chat … | head -c 5`)."""

    def write(self, text: str) -> int:
        if self.tell() >= 5:
            raise BrokenPipeError(32, "Broken pipe")
        return super().write(text)


def test_the_cli_stops_quietly_when_its_reader_leaves(relay: FakeRelay, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a reply of several words, and a stdout whose reader leaves after the first
    relay.script("POST /chat", stream(meta(), token(1, "hello"), token(2, " there"), token(3, " friend"), done(4)))
    # WHEN the terminal client prints the reply
    status = main(["--url", relay.url, "--message", "hi", "--no-iam"], out=_LeftReader())
    # THEN it stops with 141, as a command SIGPIPE ends, and says nothing (no traceback)
    assert status == 141 and capsys.readouterr().err == ""


def _typed(monkeypatch: pytest.MonkeyPatch, *lines: str) -> None:
    """The prompt reads ``lines``, then end of input."""
    typed = iter(lines)

    def prompt(_: str) -> str:
        try:
            return next(typed)
        except StopIteration:
            raise EOFError from None

    monkeypatch.setattr("builtins.input", prompt)


def test_ctrl_c_before_a_reply_began_goes_back_to_the_prompt(
    relay: FakeRelay, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a person at a terminal who presses Ctrl-C while the first message is being sent (no turn known yet to
    # cancel)
    relay.script("GET /health", Answer(body={"status": "ok"}))
    relay.script("POST /chat", stream(meta(), token(1, "hello"), done(2)))
    _typed(monkeypatch, "one", "two")
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    sent = ChatClient.chat

    def interrupted_once(self: ChatClient, *args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(ChatClient, "chat", sent)
        raise KeyboardInterrupt

    monkeypatch.setattr(ChatClient, "chat", interrupted_once)
    # WHEN they type a second message
    status = main(["--url", relay.url, "--no-iam"], out=_Terminal())
    # THEN the client went back to the prompt (Ctrl-C at the prompt quits, not before a reply), and the second was
    # answered
    assert status == 0 and "[interrupted]" in capsys.readouterr().err
    assert len(relay.requests("POST /chat")) == 1


def test_ctrl_c_twice_quits(
    relay: FakeRelay, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a person at a terminal who presses Ctrl-C during a reply, and again while the client cancels it
    relay.script("GET /health", Answer(body={"status": "ok"}))
    _typed(monkeypatch, "one", "two")
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)

    def interrupted(self: ChatClient, message: str, session_id: str | None = None, **kwargs: Any) -> Any:
        kwargs["on_meta"](TurnResult(SESSION, 1, EVENTS))
        raise KeyboardInterrupt

    def cancel_interrupted(self: ChatClient, session_id: str, turn: int) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(ChatClient, "chat", interrupted)
    monkeypatch.setattr(ChatClient, "cancel", cancel_interrupted)
    # WHEN that happens THEN the client quits with 130, sending no more messages (cli's docstring: "or twice, quits")
    assert main(["--url", relay.url, "--no-iam"], out=_Terminal()) == 130
    assert "[interrupted]" not in capsys.readouterr().err


def test_the_interactive_cli_starts_a_new_session_after_the_turn_limit(
    relay: FakeRelay, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a relay whose session takes one turn: the second message is refused 409 turn_limit
    relay.script("GET /health", Answer(body={"status": "ok"}))
    reply = stream(meta(), token(1, "hello"), done(2))
    relay.script("POST /chat", reply, error(409, "turn_limit"), reply)
    _typed(monkeypatch, "one", "two", "three")

    # WHEN a person types three messages
    status = main(["--url", relay.url, "--no-iam"])

    # THEN the second is refused with the relay's reason, the client says the next starts a new session, and the
    # third is sent without the full session's id
    assert status == 0
    assert "[the next message starts a new session]" in capsys.readouterr().err
    sent = [json.loads(seen.body) for seen in relay.requests("POST /chat")]
    assert [body.get("session_id") for body in sent] == [None, SESSION, None]


def test_the_interactive_cli_says_a_refused_message_was_not_sent_and_types_it_again(
    relay: FakeRelay, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a relay whose caller may start no more turns this minute, then may again
    relay.script("GET /health", Answer(body={"status": "ok"}))
    why = "too many messages this minute (the limit is 60 a minute): try again in 12 s"
    refused = Answer(
        429, body={"error": {"code": "rate_limit_exceeded", "message": why}}, headers=(("Retry-After", "12"),)
    )
    relay.script("POST /chat", refused, stream(meta(), token(1, "ok"), done(2)))
    # AND a person at a terminal who sends a message, then presses Enter on what the next prompt holds
    prompts: list[tuple[str, str]] = []
    typed = iter(["hello there", None])

    def prompt(text: str, draft: str) -> str:
        prompts.append((text, draft))
        line = next(typed, None) if len(prompts) < 3 else None
        if line is None and not draft:
            raise EOFError
        return line or draft

    monkeypatch.setattr("chatstream_client.cli._prompt", prompt)
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    err = io.StringIO()
    # WHEN the client runs
    status = main(["--url", relay.url, "--no-iam"], out=_Terminal(), err=err)
    # THEN the refusal is said plainly, with when to try again, the message was sent once and typed at the next prompt,
    # and Enter sent it
    assert status == 0 and f"not sent: {why}" in err.getvalue()
    assert [draft for _, draft in prompts[:2]] == ["", "hello there"]
    assert [json.loads(seen.body)["message"] for seen in relay.requests("POST /chat")] == ["hello there"] * 2


def test_the_interactive_cli_keeps_the_session_a_failed_message_started(
    relay: FakeRelay, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a relay whose first reply, in a new session, breaks on an event that is not JSON
    relay.script("GET /health", Answer(body={"status": "ok"}))
    broken = stream(meta(), token(1, "hel"), "id: 2\nevent: token\ndata: {not json\n\n")
    relay.script("POST /chat", broken, stream(meta(2), token(1, "again"), done(2)))
    _typed(monkeypatch, "one", "two")

    # WHEN a person types two messages
    status = main(["--url", relay.url, "--no-iam"])

    # THEN the first fails with the relay's reason, and the second goes on in the session the first one started
    assert status == 0 and "bad_event" in capsys.readouterr().err
    sent = [json.loads(seen.body) for seen in relay.requests("POST /chat")]
    assert [body.get("session_id") for body in sent] == [None, SESSION]


def test_the_interactive_cli_starts_a_new_session_when_its_session_is_gone(
    relay: FakeRelay, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a relay that knows no session "gone" (expired, mistyped, another caller's)
    relay.script("GET /health", Answer(body={"status": "ok"}))
    relay.script("GET /sessions/gone", error(404, "session_not_found"))
    relay.script("POST /chat", stream(meta(), token(1, "hello"), done(2)))
    _typed(monkeypatch, "one", "two")

    # WHEN a person continues that session and types two messages
    status = main(["--url", relay.url, "--no-iam", "--session", "gone"])

    # THEN the first is refused with the relay's reason, the client says the next starts a new session, and the
    # second is sent without the gone session's id
    err = capsys.readouterr().err
    assert status == 0 and "session_not_found" in err and "[the next message starts a new session]" in err
    sent = [json.loads(seen.body) for seen in relay.requests("POST /chat")]
    assert [body.get("session_id") for body in sent] == [None]
    assert len(relay.requests("GET /sessions/gone")) == 1


def test_the_interactive_cli_shows_control_characters_in_an_error_as_symbols(
    relay: FakeRelay, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a relay whose refusal carries a terminal escape, and stderr a terminal
    relay.script("GET /health", Answer(body={"status": "ok"}))
    relay.script("POST /chat", error(400, "invalid_request\x1b]0;PWNED\x07"))
    _typed(monkeypatch, "one")
    terminal = _Terminal()

    # WHEN a person types a message
    status = main(["--url", relay.url, "--no-iam"], out=io.StringIO(), err=terminal)

    # THEN the error line shows the escape as symbols, never obeys it
    assert status == 0 and "\x1b" not in terminal.getvalue() and "invalid_request\u241b]0;PWNED" in terminal.getvalue()


def test_ctrl_c_before_the_turns_meta_cancels_the_turn_the_message_started(
    relay: FakeRelay, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a session with one turn, whose second message's POST /chat is slow to answer (a 503 then a wait, in
    # which the person presses Ctrl-C), while the history already shows the turn it started
    relay.script("GET /health", Answer(body={"status": "ok"}))
    relay.script("POST /chat", stream(meta(), token(1, "hello"), done(2)), error(503))
    relay.script(f"GET /sessions/{SESSION}", history((1, "one"), (2, "two")))
    relay.script(f"POST /sessions/{SESSION}/turns/2/cancel", Answer(status=202, body={"status": "cancelling"}))
    events = f"/sessions/{SESSION}/turns/2/events"
    relay.script(f"GET {events}", stream(token(1, "part"), 'id: 2\nevent: done\ndata: {"stop_reason":"cancelled"}\n\n'))
    _typed(monkeypatch, "one", "two")

    def interrupted(_: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(
        "chatstream_client.cli._client", lambda url, *_: ChatClient(url, sleep=interrupted, timeout=10, read_timeout=10)
    )

    # WHEN the person types the two messages, pressing Ctrl-C before the second one's reply began
    status = main(["--url", relay.url, "--no-iam"])

    # THEN the client found the turn in the history, cancelled it, and showed its reply up to the cancel
    captured = capsys.readouterr()
    assert status == 0 and len(relay.requests(f"POST /sessions/{SESSION}/turns/2/cancel")) == 1
    assert captured.out == "hello\npart\n" and "[cancelled]" in captured.err


def test_a_message_of_several_lines_is_one_turn(
    relay: FakeRelay, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a relay that answers every message
    relay.script("GET /health", Answer(body={"status": "ok"}))
    relay.script("POST /chat", stream(meta(), token(1, "ok"), done(2)))
    # WHEN a person types a message over two lines (the first ends in a backslash), then a message of one line
    _typed(monkeypatch, "line one\\", "line two", "three")
    assert main(["--url", relay.url, "--no-iam"]) == 0
    # AND a script pipes a message of several lines to the one-shot client
    monkeypatch.setattr("sys.stdin", io.StringIO("first\n\nsecond\n"))
    assert main(["--url", relay.url, "--no-iam", "--message", "-"]) == 0

    # THEN each message was sent once, with its line breaks
    sent = [json.loads(seen.body)["message"] for seen in relay.requests("POST /chat")]
    assert sent == ["line one\nline two", "three", "first\n\nsecond"]


def test_the_cli_writes_no_escape_codes_with_no_color_set(relay: FakeRelay, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a reply with reasoning, and NO_COLOR set in the environment
    relay.script("POST /chat", stream(meta(), reasoning(1, "r1"), token(2, "hello"), done(3)))
    monkeypatch.setenv("NO_COLOR", "1")
    terminal = _Terminal()

    # WHEN the one-shot client prints it to a terminal
    status = main(["--url", relay.url, "--message", "hi", "--no-iam"], out=terminal, err=io.StringIO())

    # THEN the reasoning is marked in plain text instead of dimmed
    assert (status, terminal.getvalue()) == (0, "thinking: r1\nhello\n")


# ------------------------------------------------------------------ requests that change nothing twice


def test_a_history_whose_body_is_cut_is_read_again(relay: FakeRelay, client: ChatClient) -> None:
    # GIVEN a relay whose first answer to GET /sessions/{id} is cut after its headers
    relay.script(f"GET /sessions/{SESSION}", history((1, "first"), cut=True), history((1, "first")))

    # WHEN the client reads the history THEN it asked again, as after any connection that failed
    assert [turn["turn"] for turn in client.history(SESSION)["turns"]] == [1]
    assert len(relay.requests(f"GET /sessions/{SESSION}")) == 2


def test_a_503_whose_body_is_cut_is_sent_again(relay: FakeRelay, client: ChatClient) -> None:
    relay.script("GET /health", error(503, cut=True), Answer(body={"status": "ok"}))

    assert client.health() == {"status": "ok"}
    assert len(relay.requests("GET /health")) == 2


def test_a_cancel_whose_connection_breaks_is_sent_again(relay: FakeRelay, client: ChatClient) -> None:
    # GIVEN a relay that closes the first cancel's connection without an answer
    cancel = f"POST /sessions/{SESSION}/turns/1/cancel"
    relay.script(cancel, DROPPED, Answer(202, body={"session_id": SESSION, "turn": 1, "status": "cancelling"}))

    # WHEN the client cancels THEN it sent the cancel again (HTTP_API: a second cancel is harmless) and got its 202
    assert client.cancel(SESSION, 1)["status"] == "cancelling"
    assert len(relay.requests(cancel)) == 2


def test_one_chat_sends_its_message_at_most_five_times(relay: FakeRelay, client: ChatClient) -> None:
    # GIVEN a relay that answers 503 four times and 502 once, over and over
    relay.script("POST /chat", *([error(503)] * 4 + [error(502, "http_error")]) * 5)

    # WHEN the client sends a message THEN every send of it comes from one budget of 5, and the last failure may
    # have started the turn: the client says so, and names the key that would join it
    with pytest.raises(ApiError) as raised:
        client.chat("hi")
    assert (raised.value.status, raised.value.code) == (502, "turn_outcome_unknown")
    assert raised.value.result is not None and raised.value.result.idempotency_key in raised.value.message
    assert len(relay.requests("POST /chat")) == 5


# ----------------------------------------------------------------------- keys, refusals, and sending again


def test_a_refusal_of_the_budget_is_reported_with_when_to_try_again_not_waited_out(
    relay: FakeRelay, client: ChatClient
) -> None:
    # GIVEN a relay whose caller has started as many turns as it may this minute
    answer = error(429, "rate_limit_exceeded", retry_after="12")
    relay.script("POST /chat", answer, stream(meta(), done(1)))

    # WHEN the client sends a message THEN it is refused at once, with the relay's words and its wait
    with pytest.raises(ApiError) as raised:
        client.chat("hi")
    assert (raised.value.status, raised.value.code, raised.value.retry_after_s) == (429, "rate_limit_exceeded", 12)
    assert len(relay.requests("POST /chat")) == 1


def test_an_answer_that_says_not_to_retry_is_not_sent_again(relay: FakeRelay, client: ChatClient) -> None:
    relay.script(
        "POST /chat",
        Answer(503, body={"error": {"code": "unavailable", "message": "no"}}, headers=(("x-should-retry", "false"),)),
        stream(meta(), done(1)),
    )
    with pytest.raises(ApiError) as raised:
        client.chat("hi")
    assert raised.value.status == 503 and len(relay.requests("POST /chat")) == 1


def test_a_session_is_read_once_per_client(relay: FakeRelay, client: ChatClient) -> None:
    relay.script(f"GET /sessions/{SESSION}", history((1, "first")))
    relay.script("POST /chat", stream(meta(2), done(1)), stream(meta(3), done(1)))

    client.chat("second", SESSION)
    client.chat("third", SESSION)

    assert len(relay.requests(f"GET /sessions/{SESSION}")) == 1


# ---------------------------------------------------------------------------------- streams


def test_follow_names_the_turn_it_follows(relay: FakeRelay, client: ChatClient) -> None:
    relay.script(f"GET {EVENTS}", stream(token(1, "a"), done(2)))

    result = client.follow(EVENTS)

    assert (result.session_id, result.turn, result.text) == (SESSION, 1, "a")


def test_an_answer_that_is_not_an_event_stream_is_an_sse_error(relay: FakeRelay, client: ChatClient) -> None:
    # GIVEN a URL that answers 200 with JSON (not the relay)
    relay.script("POST /chat", Answer(body={"hello": "world"}))
    relay.script(f"GET {EVENTS}", Answer(body={"hello": "world"}))

    # WHEN the client sends a message, or follows a turn, THEN it says what it met, at once
    with pytest.raises(SSEError):
        client.chat("hi")
    with pytest.raises(SSEError):
        client.follow(EVENTS)
    assert len(relay.requests("POST /chat")) == 1 and len(relay.requests(f"GET {EVENTS}")) == 1


def test_the_cli_says_a_url_that_is_not_the_relays_is_not(relay: FakeRelay, capsys: pytest.CaptureFixture[str]) -> None:
    relay.script("POST /chat", Answer(body={"hello": "world"}))

    status = main(["--url", relay.url, "--message", "hi", "--no-iam"])

    assert status == 2 and "is it the relay's URL" in capsys.readouterr().err


def test_a_silent_model_is_followed_through_its_idle_reconnects(relay: FakeRelay, waits: list[float]) -> None:
    # GIVEN a turn whose model is silent for 25 minutes: the relay ends each stream with `reconnect` after a minute
    relay.script("POST /chat", stream(meta(), token(1, "a"), reconnect(1)))
    relay.script(f"GET {EVENTS}", *[stream(reconnect(1))] * 25, stream(token(2, "b"), done(3)))
    minutes = itertools.count(0, 60)  # a clock on which each reading is a minute after the last

    # WHEN a client that gives up after 3 resumes that bring nothing follows it
    with ChatClient(relay.url, max_resumes=3, sleep=waits.append, clock=lambda: next(minutes)) as client:
        result = client.chat("hi")

    # THEN the planned reconnects never counted: it followed them all, at once, to the end
    assert (result.text, result.resumes, result.unplanned_resumes, result.clean) == ("ab", 26, 0, True)
    assert waits == []


def test_reconnects_that_come_back_at_once_with_nothing_end_in_a_resume_limit(
    relay: FakeRelay, waits: list[float]
) -> None:
    # GIVEN a relay that answers every resume with an immediate `reconnect` (no relay plans that: its idle one waits)
    relay.script("POST /chat", stream(meta(), token(1, "a"), reconnect(1)))
    relay.script(f"GET {EVENTS}", stream(reconnect(1)))
    frozen = 0.0  # a clock that never moves

    # WHEN a client follows it THEN it gives up rather than loop for ever
    with (
        ChatClient(relay.url, max_resumes=3, sleep=waits.append, clock=lambda: frozen) as client,
        pytest.raises(ApiError) as raised,
    ):
        client.chat("hi")
    assert raised.value.code == "resume_limit"


# ------------------------------------------------------------------------------------ errors


def test_a_resume_limit_carries_the_turn_so_far(relay: FakeRelay, waits: list[float]) -> None:
    relay.script("POST /chat", stream(meta(), token(1, "a")))
    relay.script(f"GET {EVENTS}", stream())

    with ChatClient(relay.url, max_resumes=1, sleep=waits.append) as client, pytest.raises(ApiError) as raised:
        client.chat("hi")

    error = raised.value
    assert (error.code, error.session_id, error.turn, error.events_url, error.last_event_id) == (
        "resume_limit",
        SESSION,
        1,
        EVENTS,
        "1",
    )
    assert error.result is not None and error.result.text == "a"
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.code, copy.status, copy.events_url, copy.last_event_id, str(copy)) == (
        "resume_limit",
        0,
        EVENTS,
        "1",
        str(error),
    )


def test_a_resume_that_cannot_connect_carries_the_turn_so_far(relay: FakeRelay, waits: list[float]) -> None:
    # GIVEN a stream cut after token 1, and a relay that then drops every connection
    relay.script("POST /chat", stream(meta(), token(1, "a"), cut=True))
    relay.script(f"GET {EVENTS}", DROPPED)

    # WHEN the client tries to resume, with no patience for an outage, THEN the failure names where to pick the turn
    # up
    with ChatClient(relay.url, sleep=waits.append, outage_s=0) as client, pytest.raises(ApiError) as raised:
        client.chat("hi")
    error = raised.value
    assert (error.code, error.events_url, error.last_event_id, error.turn) == ("resume_failed", EVENTS, "1", 1)
    assert isinstance(error.__cause__, httpx.TransportError)


class Clock:
    """Time that passes only when the client waits: an outage of minutes takes no time in a test."""

    def __init__(self) -> None:
        self.now = 0.0
        self.waits: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds


def test_a_resume_keeps_trying_through_an_outage_and_finishes_the_turn(relay: FakeRelay) -> None:
    # GIVEN a stream cut after token 1, then a relay out of reach for 12 resume attempts (more than two rounds of
    # the retry policy's 5), then busy once, then back
    relay.script("POST /chat", stream(meta(), token(1, "a"), cut=True))
    relay.script(f"GET {EVENTS}", *[DROPPED] * 12, error(503), stream(token(2, "b"), done(3)))
    clock = Clock()

    # WHEN the client follows the turn
    with ChatClient(relay.url, sleep=clock.sleep, clock=lambda: clock.now) as client:
        result = client.chat("hi")

    # THEN it resumed until the relay was back, and the reply is whole; each failed round is an unplanned resume
    assert (result.text, result.done) == ("ab", {"stop_reason": "end_turn"})
    assert len(relay.requests(f"GET {EVENTS}")) == 14
    assert result.unplanned_resumes == 1 + 2 and sum("failed" in line for line in result.incidents) == 2


def test_a_resume_through_an_outage_waits_what_a_busy_relay_asks(relay: FakeRelay) -> None:
    # GIVEN a stream cut after token 1, then a relay busy for a while: it asks for 45 s, more than a retry waits
    relay.script("POST /chat", stream(meta(), token(1, "a"), cut=True))
    relay.script(f"GET {EVENTS}", error(503, retry_after="45"), stream(token(2, "b"), done(3)))
    clock = Clock()

    # WHEN the client follows the turn
    with ChatClient(relay.url, sleep=clock.sleep, clock=lambda: clock.now) as client:
        result = client.chat("hi")

    # THEN it waited what the relay asked before resuming again (not its own few seconds), and the reply is whole
    assert result.text == "ab" and 45 in clock.waits


def test_a_resume_gives_up_once_the_relay_was_out_of_reach_for_outage_s(relay: FakeRelay) -> None:
    # GIVEN a stream cut after token 1, and a relay that is never reached again
    relay.script("POST /chat", stream(meta(), token(1, "a"), cut=True))
    relay.script(f"GET {EVENTS}", DROPPED)
    clock = Clock()

    # WHEN the client follows the turn, with a minute's patience
    with (
        ChatClient(relay.url, sleep=clock.sleep, clock=lambda: clock.now, outage_s=60) as client,
        pytest.raises(ApiError) as raised,
    ):
        client.chat("hi")

    # THEN it tried round after round, each wait capped by the retry policy, for a minute, then gave up naming the
    # turn and where it stopped
    assert clock.now >= 60 and max(clock.waits) <= RetryPolicy().cap_s
    assert len(relay.requests(f"GET {EVENTS}")) > RetryPolicy().attempts
    error = raised.value
    assert (error.code, error.events_url, error.last_event_id) == ("resume_failed", EVENTS, "1")
    assert isinstance(error.__cause__, httpx.TransportError)


@pytest.mark.parametrize("after", ["abc", "7.", "-1", "1e3"])
def test_the_cli_refuses_an_after_that_is_no_event_id(
    relay: FakeRelay, capsys: pytest.CaptureFixture[str], after: str
) -> None:
    # WHEN --after is not an event id THEN the CLI says so about --after (not about a header), and asks nothing
    with pytest.raises(SystemExit) as stopped:
        main(["--url", relay.url, "--follow", EVENTS, "--after", after, "--no-iam"])
    assert stopped.value.code == 2 and "--after must be an event id" in capsys.readouterr().err
    assert relay.requests(f"GET {EVENTS}") == []


def test_the_cli_follows_a_turn_under_way_from_an_event_id(
    relay: FakeRelay, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a turn under way
    relay.script(f"GET {EVENTS}", stream(token(3, " c"), done(4)))

    # WHEN the terminal client is asked to follow it after id 2
    status = main(["--url", relay.url, "--follow", EVENTS, "--after", "2", "--no-iam"])

    # THEN it asked for the events after that id and printed the rest of the reply
    assert (status, capsys.readouterr().out) == (0, " c\n")
    assert [seen.headers.get("last-event-id") for seen in relay.requests(f"GET {EVENTS}")] == ["2"]


@pytest.mark.parametrize(
    "elsewhere",
    ["http://127.0.0.1:9/sessions/s/turns/1/events", "//127.0.0.1:9/sessions/s/turns/1/events", "/health"],
)
@pytest.mark.parametrize("where", ["meta", "reconnect"])
def test_an_events_url_a_relay_names_elsewhere_is_never_followed(
    relay: FakeRelay, client: ChatClient, where: str, elsewhere: str
) -> None:
    # GIVEN a relay (or whatever answers in its place) naming an events URL on another host, or another path: the
    # client signs its requests, so following it would hand the signature to that host
    named = {"session_id": SESSION, "turn": 1, "events_url": elsewhere}
    first = f"event: meta\ndata: {json.dumps(named)}\n\n" if where == "meta" else meta()
    ending = [] if where == "meta" else [f"event: reconnect\ndata: {json.dumps({'events_url': elsewhere})}\n\n"]
    relay.script("POST /chat", stream(first, token(1, "a"), *ending))
    # WHEN the client follows the turn THEN it stops at that event, a bad_event, and requests nothing more
    with pytest.raises(ApiError) as raised:
        client.chat("hi")
    assert raised.value.code == "bad_event" and "not its own path" in raised.value.message
    assert relay.requests(f"GET {EVENTS}") == []


def test_follow_takes_a_url_on_the_relay_only(relay: FakeRelay, client: ChatClient) -> None:
    # GIVEN a turn under way on this relay
    relay.script(f"GET {EVENTS}", stream(token(1, "a"), done(2)))
    # THEN the client follows it by its path or by its absolute URL on the relay, and refuses another host's
    assert client.follow(EVENTS).text == "a" and client.follow(relay.url + EVENTS).text == "a"
    assert client.follow(EVENTS.lstrip("/")).text == "a"  # a path typed without its leading slash
    with pytest.raises(ApiError) as raised:
        client.follow("http://127.0.0.2:9" + EVENTS)
    assert raised.value.code == "bad_url"


def test_an_unknown_outcome_in_a_new_session_names_no_session(relay: FakeRelay, client: ChatClient) -> None:
    relay.script("POST /chat", DROPPED)

    with pytest.raises(ApiError) as raised:
        client.chat("hi")

    assert (raised.value.code, raised.value.session_id, raised.value.turn) == ("turn_outcome_unknown", None, None)
    assert pickle.loads(pickle.dumps(raised.value)).code == "turn_outcome_unknown"


def test_a_503_whose_body_keeps_breaking_is_reported_as_a_503(relay: FakeRelay, client: ChatClient) -> None:
    # GIVEN a relay whose 503 answers to a new session's message all break off after their headers
    relay.script("POST /chat", error(503, cut=True))

    # WHEN the client sends the message THEN it sent it again as after any 503, and reports the 503 it met
    with pytest.raises(ApiError) as raised:
        client.chat("hi")
    assert (raised.value.status, raised.value.code) == (503, "http_error")
    assert len(relay.requests("POST /chat")) == 5


@pytest.mark.parametrize(
    ("stop_reason", "says"),
    [
        ("max_tokens", "[stopped at the token limit]"),
        ("model_context_window_exceeded", "[stopped: the conversation filled the model's context window]"),
    ],
)
def test_the_cli_says_when_a_reply_stopped_at_a_limit_while_the_model_reasoned(
    relay: FakeRelay, capsys: pytest.CaptureFixture[str], stop_reason: str, says: str
) -> None:
    # GIVEN a turn whose token limit ran out while the model reasoned: no reply at all
    stop = f"id: 3\nevent: done\ndata: {json.dumps({'stop_reason': stop_reason})}\n\n"
    relay.script("POST /chat", stream(meta(), reasoning(1, "Let me"), reasoning(2, " think"), stop))
    # WHEN the terminal client sends a message, one-shot, its stdout piped
    status = main(["--url", relay.url, "--message", "/think 10 hello", "--max-tokens", "3", "--no-iam"])
    # THEN the reply is empty, and stderr says after the reasoning why it stopped (the turn itself did not fail)
    captured = capsys.readouterr()
    assert (status, captured.out) == (0, "\n")
    assert captured.err == f"Let me think\n{says}\n"


def test_smoke_of_an_aws_iam_url_without_iam_says_pass_iam_once(
    relay: FakeRelay, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a relay that refuses unsigned requests as an AWS_IAM Function URL does (`make local ARGS="--auth-type
    # AWS_IAM"`, which make smoke does not know to sign for)
    lambda_403 = {"Message": "Forbidden. For troubleshooting Function URL authorization issues, see: https://…"}
    relay.script("GET /health", Answer(403, body=lambda_403))
    # WHEN make smoke runs unsigned
    status = smoke_main(["--url", relay.url, "--no-iam"])
    # THEN one failed check says to pass --iam, instead of every check failing on a raw 403
    out = capsys.readouterr().out
    assert status != 0 and "pass --iam (make smoke ARGS=--iam)" in out
    assert out.splitlines()[-1].startswith("smoke: 1 of 1 checks failed")
