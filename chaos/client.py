"""The chaos run's client: one chat over SSE that drops its connection on purpose and resumes.

It sends ``POST /chat``, reads the stream, and, as its :class:`~chaos.plan.ChatPlan` says, closes the
connection after a few token events; then it resumes from the events URL with ``Last-Event-ID`` until the
turn's ``done`` or ``error``. After an error the relay raised itself (no ``id``: not the turn's record) that
says ``retryable``, it resumes again, as HTTP_API.md tells clients to, until a budget without progress runs
out. What it saw, across every connection, is a :class:`StreamSeen`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
from httpx_sse import EventSource

if TYPE_CHECKING:
    from collections.abc import Iterator

    from httpx_sse import ServerSentEvent

    from chaos.plan import ChatPlan

MAX_RESUMES = 200
RETRY_BACKOFF_S = 1.0  # a client's pause before resuming after a retryable error


@dataclass
class StreamSeen:
    """What one client saw of its turn, across drops and resumes."""

    session_id: str = ""
    turn: int = 0
    events_url: str = ""
    tokens: list[tuple[int, str]] = field(default_factory=list)
    done: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    resumes: int = 0
    relay_retries: int = 0  # resumes after a retryable error the relay raised itself (no id: not the turn's record)
    error_from_record: bool = False
    failure: str = ""  # the client could not get a stream at all

    @property
    def last_id(self) -> int:
        return max((seq for seq, _ in self.tokens), default=0)

    @property
    def finished(self) -> bool:
        return self.done is not None or self.error is not None

    @property
    def text(self) -> str:
        return "".join(text for _, text in self.tokens)


def consume(events: Iterator[ServerSentEvent], seen: StreamSeen, stop_after: int | None) -> bool:
    """Read events into ``seen``; True when the connection was dropped on purpose after ``stop_after`` tokens."""
    tokens_here = 0
    for event in events:
        data = json.loads(event.data) if event.data else {}
        if event.event == "meta":
            seen.session_id, seen.turn, seen.events_url = data["session_id"], int(data["turn"]), data["events_url"]
        elif event.event == "token":
            seen.tokens.append((int(event.id), data["text"]))
            tokens_here += 1
        elif event.event == "done":
            seen.done = data
            return False
        elif event.event == "error":
            seen.error = data
            # The turn's own error record has an id past every token; SSE carries the last id over to events
            # without one, so an error the relay raised itself arrives with (at most) the last token's id.
            seen.error_from_record = event.id.isdigit() and int(event.id) > seen.last_id
            return False
        elif event.event == "reconnect":
            seen.events_url = data.get("events_url", seen.events_url)
            return False
        if stop_after is not None and tokens_here >= stop_after and seen.events_url:
            return True
    return False


def _retry_relay_error(seen: StreamSeen, progress: tuple[int, float], budget_s: float) -> tuple[int, float] | None:
    """After a retryable error the relay raised itself (``timeout`` while the consumer lags, ``gap``,
    ``relay_error``), resume from the last id; give up after ``budget_s`` without a new token. The progress
    mark to go on with, or None to stop."""
    if seen.error is None or seen.error_from_record or not seen.error.get("retryable"):
        return None
    tokens, since = progress
    now = time.monotonic()
    if len(seen.tokens) > tokens:
        tokens, since = len(seen.tokens), now
    if now - since >= budget_s:
        return None
    seen.error = None
    seen.relay_retries += 1
    time.sleep(RETRY_BACKOFF_S)  # a client's backoff before resuming, not a wait for a condition
    return tokens, since


def run_chat(http: httpx.Client, plan: ChatPlan, deadline: float, retry_budget_s: float = 180.0) -> StreamSeen:
    """One chat to its end (or ``deadline``, a ``time.monotonic()`` value), dropping and resuming as planned."""
    seen = StreamSeen()
    headers = {"Accept": "text/event-stream"}
    try:
        with http.stream("POST", "/chat", json={"message": plan.message}, headers=headers) as response:
            if response.status_code != 200:
                response.read()
                seen.failure = f"POST /chat {response.status_code}: {response.text[:200]}"
                return seen
            consume(EventSource(response).iter_sse(), seen, plan.drop_after)
            # leaving the block closes the connection: a drop mid-stream when the turn is not finished
    except (httpx.TransportError, httpx.StreamError) as err:
        if not seen.events_url:
            seen.failure = f"POST /chat failed: {type(err).__name__}"
            return seen
    progress = (len(seen.tokens), time.monotonic())
    while time.monotonic() < deadline:
        if seen.finished:
            retry = _retry_relay_error(seen, progress, retry_budget_s)
            if retry is None:
                break
            progress = retry
        if seen.resumes >= MAX_RESUMES:
            break
        seen.resumes += 1
        try:
            with http.stream(
                "GET", seen.events_url, headers={**headers, "Last-Event-ID": str(seen.last_id)}
            ) as response:
                if response.status_code != 200:
                    response.read()
                    seen.failure = f"GET events {response.status_code}: {response.text[:200]}"
                    return seen
                consume(EventSource(response).iter_sse(), seen, None)
        except (httpx.TransportError, httpx.StreamError):
            continue
    if not seen.finished and not seen.failure:
        seen.failure = f"the stream did not end ({seen.resumes} resumes)"
    return seen
