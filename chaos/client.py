"""The chaos run's client: one chat over SSE that drops its connection on purpose and resumes.

It sends ``POST /chat`` (with the plan's tools, each with an open object schema) with the chat's ``Idempotency-Key``
(every send of it carries the same one), reads the stream, and, as its :class:`~chaos.plan.ChatPlan` says, cuts its
first send before the answer's first byte (then sends it again: the relay joins the turn the cut send started, if it
did) or closes the connection after a few text or tool call events; then it resumes from the events URL with
``Last-Event-ID`` until the turn's ``done`` or ``error``. The relay paces text in word-sized pieces: a planned drop
waits for the first piece inside a record (an id ``<seq>.<offset>``) from the planned count on, so the resume starts
mid-record and the checks prove it exact (:attr:`StreamSeen.mid_record_resumes` counts those; a reply with no such
piece left is not dropped). A chat with tools waits instead for a ``tool_call`` event inside a call's arguments (one
without ``end``), so the resume starts inside them (:attr:`StreamSeen.mid_call_resumes`). A plan to drop after 0
events drops right after ``meta``. The ``tool_call`` events are assembled into :attr:`StreamSeen.tool_calls`, which the
checks compare with the model's. It retries as a user's client would, with exponential backoff and full jitter
(:class:`chatstream.backoff.Backoff`):

- an answer ``429``, ``500``, ``502``, ``503`` or ``504`` (throttled, the function failed before its first byte, the
  service is unavailable), no answer at all, or a stream that broke before its ``meta``: the same request again
  (``POST /chat`` too: its key makes the relay join the turn it may have started);
- an error the relay raised itself (no ``id``: not the turn's record) that says ``retryable``: a resume from
  the last id, as HTTP_API.md tells clients to;

until ``retry_budget_s`` pass without a new event. What it saw, across every connection, is a
:class:`StreamSeen`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import httpx
from httpx_sse import EventSource

from chatstream.backoff import Backoff
from chatstream.tools import ToolCall
from chatstream_client.api import event_position

if TYPE_CHECKING:
    from collections.abc import Iterator

    from httpx_sse import ServerSentEvent

    from chaos.plan import ChatPlan

MAX_RESUMES = 200
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})  # answers a client retries: throttled, failed, unavailable
CUT_AFTER_S = 0.001  # a cut send waits this long for its answer's first byte, then drops the connection
CLIENT_BACKOFF = Backoff(base_s=0.25, cap_s=8.0)
HEADERS = {"Accept": "text/event-stream"}


@dataclass
class StreamSeen:
    """What one client saw of its turn, across drops and resumes."""

    session_id: str = ""
    turn: int = 0
    events_url: str = ""
    tokens: list[tuple[str, str]] = field(default_factory=list)  # (event id, text), every token event received
    tool_events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (event id, data): every tool_call
    tool_calls: list[ToolCall] = field(default_factory=list)  # the tool calls received, assembled, in index order
    done: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    resumes: int = 0  # GET …/events requests after the first stream
    mid_record_resumes: int = 0  # of those, the ones from a piece's id: inside a record
    mid_call_resumes: int = 0  # of those, the ones from inside a tool call's arguments
    drops: int = 0  # connections it closed on purpose mid-stream (as its plan says)
    relay_retries: int = 0  # resumes after a retryable error the relay raised itself (no id: not the turn's record)
    http_retries: int = 0  # requests sent again after a 429/5xx answer or no answer
    cut_posts: int = 0  # sends of POST /chat cut before the answer's first byte (as the plan says), then sent again
    error_from_record: bool = False
    failure: str = ""  # why the client gave up (no stream at all when ``session_id`` is empty)

    @property
    def event_ids(self) -> list[str]:
        """The ids of every text and tool call event received, in the order received."""
        return [event_id for event_id, _ in self.tokens] + [event_id for event_id, _ in self.tool_events]

    @property
    def last_id(self) -> str:
        """The furthest text or tool call event id received ("0": none), what a resume sends as ``Last-Event-ID``."""
        return max(self.event_ids, key=event_position, default="0")

    @property
    def inside_call(self) -> bool:
        """The furthest event received is a piece of a tool call's arguments, not its end."""
        furthest = max(self.tool_events, key=lambda event: event_position(event[0]), default=None)
        return furthest is not None and furthest[0] == self.last_id and furthest[1].get("end") is not True

    def add_tool_event(self, event_id: str, data: dict[str, Any]) -> None:
        """A ``tool_call`` event: its piece of arguments joins its call (by index), complete at its ``end``."""
        self.tool_events.append((event_id, data))
        calls: dict[int, ToolCall] = {}
        for _, piece in self.tool_events:
            index = int(piece["index"])
            before = calls.get(index, ToolCall(str(piece["id"]), str(piece["name"]), "", complete=False))
            calls[index] = replace(
                before, arguments=before.arguments + str(piece["arguments"]), complete=piece.get("end") is True
            )
        self.tool_calls = [calls[index] for index in sorted(calls)]

    @property
    def finished(self) -> bool:
        return self.done is not None or self.error is not None

    @property
    def text(self) -> str:
        return "".join(text for _, text in self.tokens)


def consume(
    events: Iterator[ServerSentEvent], seen: StreamSeen, stop_after: int | None, *, in_call: bool = False
) -> bool:
    """Read events into ``seen``; True when the connection was dropped on purpose after ``stop_after`` text or tool
    call events (at the first from there that is a piece inside a record, or with ``in_call`` a piece of a call's
    arguments before its end)."""
    tokens_here = 0
    for event in events:
        data = json.loads(event.data) if event.data else {}
        if event.event == "meta":
            seen.session_id, seen.turn, seen.events_url = data["session_id"], int(data["turn"]), data["events_url"]
        elif event.event == "token":
            seen.tokens.append((event.id, data["text"]))
            tokens_here += 1
        elif event.event == "tool_call":
            seen.add_tool_event(event.id, data)
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
        inside = seen.inside_call if in_call else "." in seen.last_id  # inside a call's arguments, or a record
        if planned and (stop_after == 0 or inside):
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
    tokens: int = 0  # the events (text and tool call) seen when it last saw a new one
    since: float = field(default_factory=time.monotonic)
    attempt: int = 0

    def retry(self, seen: StreamSeen) -> bool:
        """Before a retry: False when patience ran out; else wait the backoff and return True."""
        now = time.monotonic()
        if len(seen.event_ids) > self.tokens:
            self.tokens, self.since, self.attempt = len(seen.event_ids), now, 0
        if now - self.since >= self.budget_s or now >= self.deadline:
            return False
        time.sleep(self.backoff.delay(self.attempt))  # a client's backoff before it retries, not a wait for a condition
        self.attempt += 1
        return True


def _relay_error_is_retryable(seen: StreamSeen) -> bool:
    """The stream ended with an error the relay raised itself that says ``retryable`` (``timeout`` while the
    consumer lags, ``gap``, ``relay_error``): the client resumes from its last id."""
    return seen.error is not None and not seen.error_from_record and bool(seen.error.get("retryable"))


def _cut(http: httpx.Client, body: dict[str, Any], headers: dict[str, str]) -> bool:
    """Send ``POST /chat`` and drop the connection before the answer's first byte, as a phone going into a tunnel
    does: whether it was cut so (an answer that came sooner is closed unread: the next send joins its turn)."""
    try:
        with http.stream("POST", "/chat", json=body, headers=headers, timeout=httpx.Timeout(30.0, read=CUT_AFTER_S)):
            return False
    except httpx.ReadTimeout:
        return True
    except httpx.TransportError:
        return False  # it did not get through: the next send is the first


def _start(http: httpx.Client, plan: ChatPlan, seen: StreamSeen, patience: Patience) -> bool:
    """``POST /chat`` until it gives a stream (read up to the planned drop); False when the client gave up. Every
    send carries the chat's key; a plan's cut send goes first."""
    body: dict[str, Any] = {"message": plan.message}
    if plan.tools:
        body["tools"] = [{"name": name, "parameters": {"type": "object"}} for name in plan.tools]
    headers = {**HEADERS, "Idempotency-Key": f'"{plan.idempotency_key}"'}
    if plan.cut_post:
        seen.cut_posts += int(_cut(http, body, headers))
    while True:
        try:
            with http.stream("POST", "/chat", json=body, headers=headers) as response:
                if response.status_code == 200:
                    events = EventSource(response).iter_sse()
                    seen.drops += int(consume(events, seen, plan.drop_after, in_call=bool(plan.tools)))
                    return True  # leaving the block closes the connection: a drop when the turn is not finished
                response.read()
                failure = f"POST /chat {response.status_code}: {response.text[:200]}"
                retryable = response.status_code in RETRY_STATUSES
        except (httpx.TransportError, httpx.StreamError) as err:
            if seen.events_url:
                return True  # the stream broke after its meta event: resume from the events URL
            # before its meta: sent again with its key, the request joins the turn it may have started
            failure, retryable = f"POST /chat failed: {type(err).__name__}", True
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
    seen.mid_call_resumes += int(seen.inside_call)
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
