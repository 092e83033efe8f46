"""The chaos run's client: one chat over SSE that drops its connection on purpose and resumes.

It sends ``POST /chat``, reads the stream, and, as its :class:`~chaos.plan.ChatPlan` says, closes the
connection after a few token events; then it resumes from the events URL with ``Last-Event-ID`` until the
turn's ``done`` or ``error``. The relay paces text in word-sized pieces: a planned drop waits for the first piece
inside a record (an id ``<seq>.<offset>``) from the planned count on, so the resume starts mid-record and the
checks prove it exact (:attr:`StreamSeen.mid_record_resumes` counts those; a reply with no such piece left is
not dropped). A plan to drop after 0 tokens drops right after ``meta``. It retries as a user's client would, with
exponential backoff and full jitter (:class:`chatstream.backoff.Backoff`):

- an answer ``429``, ``502`` or ``503`` (throttled, the function failed before its first byte, the service is
  unavailable), or no answer at all: the same request again (``POST /chat`` only when it got no stream, so
  no turn was started for it);
- an error the relay raised itself (no ``id``: not the turn's record) that says ``retryable``: a resume from
  the last id, as HTTP_API.md tells clients to;

until ``retry_budget_s`` pass without a new token. What it saw, across every connection, is a
:class:`StreamSeen`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
from httpx_sse import EventSource

from chatstream.backoff import Backoff
from chatstream_client.api import event_position

if TYPE_CHECKING:
    from collections.abc import Iterator

    from httpx_sse import ServerSentEvent

    from chaos.plan import ChatPlan
    from chatstream.tools import ToolCall

MAX_RESUMES = 200
RETRY_STATUSES = frozenset({429, 502, 503})  # answers a client retries: throttled, bad gateway, unavailable
CLIENT_BACKOFF = Backoff(base_s=0.25, cap_s=8.0)
HEADERS = {"Accept": "text/event-stream"}


@dataclass
class StreamSeen:
    """What one client saw of its turn, across drops and resumes."""

    session_id: str = ""
    turn: int = 0
    events_url: str = ""
    tokens: list[tuple[str, str]] = field(default_factory=list)  # (event id, text), every token event received
    # the tool calls received, assembled, in index order (none while the native stream carries no tool call events)
    tool_calls: list[ToolCall] = field(default_factory=list)
    done: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    resumes: int = 0  # GET …/events requests after the first stream
    mid_record_resumes: int = 0  # of those, the ones from a piece's id: inside a record
    drops: int = 0  # connections it closed on purpose mid-stream (as its plan says)
    relay_retries: int = 0  # resumes after a retryable error the relay raised itself (no id: not the turn's record)
    http_retries: int = 0  # requests sent again after a 429/502/503 answer or no answer
    error_from_record: bool = False
    failure: str = ""  # why the client gave up (no stream at all when ``session_id`` is empty)

    @property
    def last_id(self) -> str:
        """The furthest token id received ("0": none), what a resume sends as ``Last-Event-ID``."""
        return max((event_id for event_id, _ in self.tokens), key=event_position, default="0")

    @property
    def finished(self) -> bool:
        return self.done is not None or self.error is not None

    @property
    def text(self) -> str:
        return "".join(text for _, text in self.tokens)


def consume(events: Iterator[ServerSentEvent], seen: StreamSeen, stop_after: int | None) -> bool:
    """Read events into ``seen``; True when the connection was dropped on purpose after ``stop_after`` tokens (at
    the first token from there that is a piece inside a record)."""
    tokens_here = 0
    for event in events:
        data = json.loads(event.data) if event.data else {}
        if event.event == "meta":
            seen.session_id, seen.turn, seen.events_url = data["session_id"], int(data["turn"]), data["events_url"]
        elif event.event == "token":
            seen.tokens.append((event.id, data["text"]))
            tokens_here += 1
        elif event.event == "done":
            seen.done = data
            return False
        elif event.event == "error":
            seen.error = data
            # The turn's own error record has an id past every token; SSE carries the last id over to events
            # without one, so an error the relay raised itself arrives with (at most) the last token's id.
            seen.error_from_record = event.id.isdigit() and event_position(event.id) > event_position(seen.last_id)
            return False
        elif event.event == "reconnect":
            seen.events_url = data.get("events_url", seen.events_url)
            return False
        planned = stop_after is not None and tokens_here >= stop_after and bool(seen.events_url)
        if planned and (stop_after == 0 or "." in seen.last_id):  # before any token, or inside a record
            return True
    return False


@dataclass
class Patience:
    """How long a client keeps retrying: until ``budget_s`` pass without a new token, or the run's ``deadline``.

    Each retry waits :data:`CLIENT_BACKOFF`'s delay, growing with the retries since the last new token.
    """

    budget_s: float
    deadline: float  # a time.monotonic() value
    backoff: Backoff = CLIENT_BACKOFF
    tokens: int = 0
    since: float = field(default_factory=time.monotonic)
    attempt: int = 0

    def retry(self, seen: StreamSeen) -> bool:
        """Before a retry: False when patience ran out; else wait the backoff and return True."""
        now = time.monotonic()
        if len(seen.tokens) > self.tokens:
            self.tokens, self.since, self.attempt = len(seen.tokens), now, 0
        if now - self.since >= self.budget_s or now >= self.deadline:
            return False
        time.sleep(self.backoff.delay(self.attempt))  # a client's backoff before it retries, not a wait for a condition
        self.attempt += 1
        return True


def _relay_error_is_retryable(seen: StreamSeen) -> bool:
    """The stream ended with an error the relay raised itself that says ``retryable`` (``timeout`` while the
    consumer lags, ``gap``, ``relay_error``): the client resumes from its last id."""
    return seen.error is not None and not seen.error_from_record and bool(seen.error.get("retryable"))


def _start(http: httpx.Client, plan: ChatPlan, seen: StreamSeen, patience: Patience) -> bool:
    """``POST /chat`` until it gives a stream (read up to the planned drop); False when the client gave up."""
    while True:
        try:
            with http.stream("POST", "/chat", json={"message": plan.message}, headers=HEADERS) as response:
                if response.status_code == 200:
                    seen.drops += int(consume(EventSource(response).iter_sse(), seen, plan.drop_after))
                    return True  # leaving the block closes the connection: a drop when the turn is not finished
                response.read()
                failure = f"POST /chat {response.status_code}: {response.text[:200]}"
                retryable = response.status_code in RETRY_STATUSES
        except httpx.ConnectError as err:  # nothing was sent: no turn was started
            failure, retryable = f"POST /chat failed: {type(err).__name__}", True
        except (httpx.TransportError, httpx.StreamError) as err:
            if seen.events_url:
                return True  # the stream broke after its meta event: resume from the events URL
            failure, retryable = f"POST /chat failed: {type(err).__name__}", False
        if not (retryable and patience.retry(seen)):
            seen.failure = failure
            return False
        seen.http_retries += 1


@dataclass(frozen=True)
class Failed:
    """A request that went wrong: what the client would report, and whether a client retries it."""

    what: str
    retryable: bool


def _resume(http: httpx.Client, seen: StreamSeen) -> Failed | None:
    """One ``GET`` of the events URL from the last id, read to its end; what went wrong, or None."""
    seen.resumes += 1
    seen.mid_record_resumes += int("." in seen.last_id)
    try:
        with http.stream("GET", seen.events_url, headers={**HEADERS, "Last-Event-ID": seen.last_id}) as response:
            if response.status_code != 200:
                response.read()
                what = f"GET events {response.status_code}: {response.text[:200]}"
                return Failed(what, response.status_code in RETRY_STATUSES)
            consume(EventSource(response).iter_sse(), seen, None)
    except (httpx.TransportError, httpx.StreamError) as err:
        return Failed(f"GET events failed: {type(err).__name__}", True)  # a GET changes nothing: resend it
    return None


def run_chat(
    http: httpx.Client,
    plan: ChatPlan,
    deadline: float,
    retry_budget_s: float = 180.0,
    backoff: Backoff = CLIENT_BACKOFF,
) -> StreamSeen:
    """One chat to its end (or ``deadline``, a ``time.monotonic()`` value), dropping and resuming as planned."""
    seen = StreamSeen()
    patience = Patience(retry_budget_s, deadline, backoff)
    if not _start(http, plan, seen, patience):
        return seen
    while not seen.finished or _relay_error_is_retryable(seen):
        if seen.finished:  # a retryable error of the relay's own: resume after a backoff
            if not patience.retry(seen):
                break
            seen.error = None
            seen.relay_retries += 1
        if seen.resumes >= MAX_RESUMES or time.monotonic() >= deadline:
            break
        failed = _resume(http, seen)
        while failed is not None:
            if not (failed.retryable and patience.retry(seen)):
                seen.failure = failed.what
                return seen
            seen.http_retries += 1
            failed = _resume(http, seen)
    if not seen.finished and not seen.failure:
        seen.failure = f"the stream did not end ({seen.resumes} resumes)"
    return seen
