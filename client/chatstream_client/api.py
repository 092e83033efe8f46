"""A Python client for the relay's HTTP API (docs/HTTP_API.md): :class:`ChatClient`.

It speaks Server-Sent Events through httpx-sse and resumes a dropped stream (or a ``reconnect`` event) from the
last event id. For a Function URL with ``AWS_IAM`` auth, pass ``auth=SigV4Auth()``
(:mod:`chatstream_client.auth`). The terminal client (:mod:`chatstream_client.cli`), the end-to-end tests and the
benchmark use it.

Errors: a JSON error response is an :class:`ApiError`; a connection that cannot be made raises httpx's own
``httpx.TransportError`` (a stream that drops after the turn started is resumed instead).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
from httpx_sse import EventSource

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from httpx_sse import ServerSentEvent

DEFAULT_URL = "http://127.0.0.1:3000"


class ApiError(Exception):
    """A JSON error response (HTTP_API.md, "Errors before a stream starts")."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


@dataclass
class TurnResult:
    """How a streamed turn went, as the client saw it."""

    session_id: str = ""
    turn: int = 0
    events_url: str = ""
    text: str = ""
    last_event_id: int = 0
    ids: list[int] = field(default_factory=list)
    chunks: list[str] = field(default_factory=list)  # each token event's text, parallel to ids
    done: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    resumes: int = 0
    first_token_at: float | None = None
    token_times: list[float] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.done is not None or self.error is not None


class ChatClient:
    """The relay's HTTP API at ``base_url``: ``chat``, ``follow``, ``cancel``, ``history``, ``health``."""

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        *,
        auth: httpx.Auth | None = None,
        timeout: float = 30.0,
        read_timeout: float = 60.0,  # the relay sends a keep-alive every 10 s: a silent minute is a dead stream
        max_resumes: int = 20,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.max_resumes = max_resumes
        self._clock = clock
        self._http = httpx.Client(
            base_url=self.base_url, auth=auth, timeout=httpx.Timeout(timeout, read=read_timeout), follow_redirects=False
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ChatClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --------------------------------------------------------------------------- requests

    def chat(
        self,
        message: str,
        session_id: str | None = None,
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        on_token: Callable[[str], None] | None = None,
        on_meta: Callable[[TurnResult], None] | None = None,
    ) -> TurnResult:
        """Start a turn and follow it to its end, resuming from the last event id if the stream drops."""
        body: dict[str, Any] = {"message": message}
        if session_id is not None:
            body["session_id"] = session_id
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if temperature is not None:
            body["temperature"] = temperature
        result = TurnResult()
        started = self._clock()
        try:
            with self._http.stream("POST", "/chat", json=body, headers={"Accept": "text/event-stream"}) as response:
                self._raise_for_error(response)
                self._consume(EventSource(response).iter_sse(), result, started, on_token, on_meta)
        except (httpx.TransportError, httpx.StreamError):
            if not result.events_url:
                raise
        return self._resume_until_finished(result, started, on_token)

    def follow(
        self, events_url: str, after: int | None = None, *, on_token: Callable[[str], None] | None = None
    ) -> TurnResult:
        """Attach to a turn (from ``after``, or its start) and follow it to its end."""
        result = TurnResult(events_url=events_url, last_event_id=after or 0)
        started = self._clock()
        if after is None:
            try:
                with self._http.stream("GET", events_url, headers={"Accept": "text/event-stream"}) as response:
                    self._raise_for_error(response)
                    self._consume(EventSource(response).iter_sse(), result, started, on_token, None)
            except (httpx.TransportError, httpx.StreamError):
                pass
        return self._resume_until_finished(result, started, on_token)

    def cancel(self, session_id: str, turn: int) -> dict[str, Any]:
        response = self._http.post(f"/sessions/{session_id}/turns/{turn}/cancel")
        self._raise_for_error(response)
        return dict(response.json())

    def history(self, session_id: str) -> dict[str, Any]:
        response = self._http.get(f"/sessions/{session_id}")
        self._raise_for_error(response)
        return dict(response.json())

    def health(self) -> dict[str, Any]:
        response = self._http.get("/health")
        self._raise_for_error(response)
        return dict(response.json())

    # ---------------------------------------------------------------------------- streams

    def _resume_until_finished(
        self, result: TurnResult, started: float, on_token: Callable[[str], None] | None
    ) -> TurnResult:
        while not result.finished:
            if result.resumes >= self.max_resumes:
                raise ApiError(0, "resume_limit", f"the stream dropped {result.resumes} times; giving up")
            result.resumes += 1
            try:
                with self._http.stream(
                    "GET",
                    result.events_url,
                    headers={"Accept": "text/event-stream", "Last-Event-ID": str(result.last_event_id)},
                ) as response:
                    self._raise_for_error(response)
                    self._consume(EventSource(response).iter_sse(), result, started, on_token, None)
            except (httpx.TransportError, httpx.StreamError):
                time.sleep(min(1.0, 0.1 * result.resumes))
        return result

    def _consume(
        self,
        events: Iterator[ServerSentEvent],
        result: TurnResult,
        started: float,
        on_token: Callable[[str], None] | None,
        on_meta: Callable[[TurnResult], None] | None,
    ) -> None:
        for event in events:
            data = json.loads(event.data) if event.data else {}
            if event.event == "meta":
                result.session_id = data["session_id"]
                result.turn = int(data["turn"])
                result.events_url = data["events_url"]
                if on_meta is not None:
                    on_meta(result)
            elif event.event == "token":
                seq = int(event.id)
                if seq <= result.last_event_id:
                    continue  # a resumed stream never repeats text
                now = self._clock()
                if result.first_token_at is None:
                    result.first_token_at = now - started
                result.token_times.append(now)
                result.ids.append(seq)
                result.chunks.append(data["text"])
                result.last_event_id = seq
                result.text += data["text"]
                if on_token is not None:
                    on_token(data["text"])
            elif event.event == "done":
                result.done = data
                if event.id:
                    result.last_event_id = int(event.id)
                return
            elif event.event == "error":
                result.error = data
                return
            elif event.event == "reconnect":
                result.events_url = data.get("events_url", result.events_url)
                return

    @staticmethod
    def _raise_for_error(response: httpx.Response) -> None:
        if response.status_code < 400:
            return
        response.read()
        try:
            error = response.json()["error"]
            raise ApiError(response.status_code, str(error["code"]), str(error["message"]))
        except (ValueError, KeyError, TypeError):
            raise ApiError(response.status_code, "http_error", response.text[:200]) from None
