"""A Python client for the relay's HTTP API (docs/HTTP_API.md): :class:`ChatClient`.

It speaks Server-Sent Events through httpx-sse, resumes a stream from the last event id when the relay asks
(``reconnect``) or the stream drops, and sends a request again after ``429``/``5xx`` with backoff and jitter
(:mod:`chatstream_client.retry`) where doing so cannot start a second turn (HTTP_API.md, "Retries"). For a
Function URL with ``AWS_IAM`` auth, pass ``auth=SigV4Auth()`` (:mod:`chatstream_client.auth`). The terminal
client (:mod:`chatstream_client.cli`), the end-to-end tests and the benchmark use it.

It never hides what it worked around: a :class:`TurnResult` counts the resumes nobody asked for, the token ids
the relay sent twice (skipped, never shown twice) and the requests sent again, so a caller that expects a clean
stream can check :attr:`TurnResult.clean`. Event ids are ``<seq>`` or ``<seq>.<offset>`` (HTTP_API.md, "Event
ids"): the client only compares them (:func:`event_position`) and sends the last one back.

Errors: a JSON error response is an :class:`ApiError`; a connection that cannot be made raises httpx's own
``httpx.TransportError`` once the retries are spent (a stream that drops after the turn started is resumed).
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
from httpx_sse import EventSource

from chatstream_client.retry import NOT_STARTED, RETRYABLE, RetryPolicy, retry_after_s

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterator, Mapping

    from httpx_sse import ServerSentEvent

DEFAULT_URL = "http://127.0.0.1:3000"
SSE = {"Accept": "text/event-stream"}
# After these, a POST /chat may have started its turn (the relay failed after allocating it, before its first
# byte): the client looks for the turn before it sends anything again.
OUTCOME_UNKNOWN = frozenset({500, 502, 504})


def event_position(event_id: str | int) -> tuple[int, float]:
    """An event id's place in its turn, for ordering: ``<seq>`` (a whole record) after every ``<seq>.<offset>``."""
    seq, dot, offset = str(event_id).strip().partition(".")
    return int(seq), float(offset) if dot else math.inf


def ids_in_order(ids: list[str], first_seq: int = 1) -> bool:
    """Token ids as a whole turn's should be: each after the one before, and records ``first_seq``, ``first_seq``
    + 1, … each completed (its last piece, or the whole record, carries its seq) with none missing."""
    positions = [event_position(i) for i in ids]
    if any(b <= a for a, b in zip(positions, positions[1:], strict=False)):
        return False
    whole = [seq for seq, offset in positions if offset == math.inf]
    return whole == list(range(first_seq, first_seq + len(whole))) and all(seq in whole for seq, _ in positions)


RECONNECT = "reconnect"  # the relay ended the stream and named where to resume: a resume the protocol plans
FINISHED = "finished"
ENDED_EARLY = "the stream ended without done, error or reconnect"


class ApiError(Exception):
    """A JSON error response (HTTP_API.md, "Errors before a stream starts"), or a failure the client gave up on."""

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
    last_event_id: str = "0"  # the id to resume from: "0" is before the first token
    reasoning: str = ""  # the model's reasoning, apart from the reply (``text``)
    ids: list[str] = field(default_factory=list)  # every text event's id (token and reasoning: one sequence)
    chunks: list[str] = field(default_factory=list)  # each text event's text, parallel to ids
    done: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    resumes: int = 0  # every GET of events_url after the first stream, the relay's `reconnect` included
    unplanned_resumes: int = 0  # of those, the ones nobody asked for: the stream ended early or the connection broke
    repeated_ids: list[str] = field(default_factory=list)  # token ids received again (skipped, not shown twice)
    retries: int = 0  # requests sent again after 429/5xx or a failed connection, and turns found after one
    incidents: list[str] = field(default_factory=list)  # one line for each unplanned resume and each retry
    first_token_at: float | None = None
    token_times: list[float] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.done is not None or self.error is not None

    @property
    def clean(self) -> bool:
        """The relay sent each token once, on streams that ended only where the protocol says they end."""
        return not self.repeated_ids and self.unplanned_resumes == 0


@dataclass(frozen=True)
class _Listener:
    """What a caller is told while a turn streams: each piece of the reply, each piece of the reasoning."""

    on_token: Callable[[str], None] | None = None
    on_reasoning: Callable[[str], None] | None = None


class ChatClient:
    """The relay's HTTP API at ``base_url``: ``chat``, ``follow``, ``cancel``, ``history``, ``health``."""

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        *,
        auth: httpx.Auth | None = None,
        timeout: float = 30.0,
        read_timeout: float = 60.0,  # the relay sends a keep-alive every 10 s: a silent minute is a dead stream
        max_resumes: int = 20,  # resumes in a row that bring no new event before the client gives up
        retry: RetryPolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        pace: bool | None = None,  # ?pace= on every stream (HTTP_API.md, "Pacing"); None: the relay's setting
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.pace = pace
        self.max_resumes = max_resumes
        self.retry = retry or RetryPolicy()
        self._clock = clock
        self._sleep = sleep
        self._latest_turns: dict[str, int] = {}  # session id -> the newest turn number this client has seen
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
        on_reasoning: Callable[[str], None] | None = None,
    ) -> TurnResult:
        """Start a turn and follow it to its end, resuming from the last event id if the stream drops.

        ``on_token`` gets each piece of the reply as it comes, ``on_reasoning`` each piece of the model's reasoning.
        """
        body: dict[str, Any] = {"message": message}
        if session_id is not None:
            body["session_id"] = session_id
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if temperature is not None:
            body["temperature"] = temperature
        result = TurnResult()
        started = self._clock()
        listener = _Listener(on_token, on_reasoning)
        ending = self._start_turn(body, result, started, listener, on_meta)
        return self._follow_to_end(result, started, listener, ending)

    def follow(
        self,
        events_url: str,
        after: str | int | None = None,
        *,
        on_token: Callable[[str], None] | None = None,
        on_reasoning: Callable[[str], None] | None = None,
    ) -> TurnResult:
        """Attach to a turn (from the event id ``after``, or its start) and follow it to its end."""
        listener = _Listener(on_token, on_reasoning)
        result = TurnResult(events_url=events_url, last_event_id="0" if after is None else str(after))
        started = self._clock()
        headers = SSE if after is None else {**SSE, "Last-Event-ID": str(after)}
        with self._open("GET", events_url, result, retry_on=RETRYABLE, headers=headers) as response:
            ending = self._read(response, result, started, listener, None)
        return self._follow_to_end(result, started, listener, ending)

    def cancel(self, session_id: str, turn: int) -> dict[str, Any]:
        # Sending a cancel twice is harmless: the second is 202 again, or 409 turn_finished.
        return self._json("POST", f"/sessions/{session_id}/turns/{turn}/cancel")

    def history(self, session_id: str) -> dict[str, Any]:
        history = self._json("GET", f"/sessions/{session_id}")
        turns = [turn["turn"] for turn in history.get("turns", []) if isinstance(turn.get("turn"), int)]
        if turns:
            self._saw_turn(session_id, max(turns))
        return history

    def health(self) -> dict[str, Any]:
        return self._json("GET", "/health")

    # ----------------------------------------------------------------------- starting a turn

    def _start_turn(
        self,
        body: dict[str, Any],
        result: TurnResult,
        started: float,
        listener: _Listener,
        on_meta: Callable[[TurnResult], None] | None,
    ) -> str:
        """POST /chat until a turn streams (HTTP_API.md, "Retries"); how its first stream ended."""
        for attempt in range(1, self.retry.attempts + 1):
            failure: Exception
            try:
                with self._open("POST", "/chat", result, retry_on=NOT_STARTED, json=body, headers=SSE) as response:
                    ending = self._read(response, result, started, listener, on_meta)
            except httpx.TransportError as err:
                if _not_sent(err):
                    raise  # _open already sent it again as often as the policy allows
                failure = err
            except ApiError as err:
                # 409 turn_in_progress after an unknown outcome: the earlier request's turn may be the one generating.
                if err.status not in OUTCOME_UNKNOWN and not (attempt > 1 and err.code == "turn_in_progress"):
                    raise
                failure = err
            else:
                if result.events_url or result.finished:
                    return ending
                failure = ApiError(200, "no_meta", f"the stream began without its meta event ({ending})")
            # The turn may exist: find it before sending anything again.
            if self._found_turn(body, result, failure):
                return self._attach_found(result, started, listener, on_meta)
            if attempt == self.retry.attempts:
                raise failure
            self._note_retry(result, attempt, None, f"POST /chat: {_describe(failure)}; the session has no new turn")
        raise AssertionError("unreachable: the last attempt raises")

    def _found_turn(self, body: Mapping[str, Any], result: TurnResult, failure: Exception) -> bool:
        """After a POST /chat whose outcome is unknown: whether it started a turn (then ``result`` names it).

        Only a session whose newest turn this client knows can be checked: its history shows a newer turn with
        this message, or none. A new session's id never reached the client, so nothing can be checked there.
        """
        session_id = body.get("session_id")
        known = self._latest_turns.get(session_id) if isinstance(session_id, str) else None
        if session_id is None or known is None:
            raise ApiError(
                getattr(failure, "status", 0),
                "turn_outcome_unknown",
                f"{_describe(failure)} before the stream started; the turn may have started in "
                + ("a new session the client cannot name" if session_id is None else f"session {session_id}")
                + ": look at the history, or send the message again",
            ) from failure
        turns = self.history(session_id).get("turns", [])
        mine = [t for t in turns if t.get("turn", 0) > known and t.get("user") == body["message"]]
        if not mine:
            return False
        result.session_id, result.turn = session_id, int(mine[0]["turn"])
        result.events_url = f"/sessions/{session_id}/turns/{result.turn}/events"
        result.retries += 1
        result.incidents.append(f"POST /chat: {_describe(failure)}; its turn {result.turn} was found in the history")
        return True

    def _attach_found(
        self,
        result: TurnResult,
        started: float,
        listener: _Listener,
        on_meta: Callable[[TurnResult], None] | None,
    ) -> str:
        if on_meta is not None:
            on_meta(result)
        with self._open("GET", result.events_url, result, retry_on=RETRYABLE, headers=SSE) as response:
            return self._read(response, result, started, listener, None)

    # ---------------------------------------------------------------------------- streams

    def _follow_to_end(self, result: TurnResult, started: float, listener: _Listener, ending: str) -> TurnResult:
        stalled = 0  # resumes in a row that brought no new event
        received = len(result.ids)
        while not result.finished:
            if ending != RECONNECT:
                result.unplanned_resumes += 1
                result.incidents.append(f"resumed after id {result.last_event_id}: {ending}")
            stalled = 0 if len(result.ids) > received else stalled + 1
            received = len(result.ids)
            if stalled > self.max_resumes:
                raise ApiError(0, "resume_limit", f"{stalled - 1} resumes in a row brought nothing; giving up")
            if ending != RECONNECT:
                self._sleep(self.retry.delay(stalled))
            result.resumes += 1
            headers = {**SSE, "Last-Event-ID": result.last_event_id}
            with self._open("GET", result.events_url, result, retry_on=RETRYABLE, headers=headers) as response:
                ending = self._read(response, result, started, listener, None)
        return result

    def _read(
        self,
        response: httpx.Response,
        result: TurnResult,
        started: float,
        listener: _Listener,
        on_meta: Callable[[TurnResult], None] | None,
    ) -> str:
        """Read one stream: :data:`FINISHED`, :data:`RECONNECT`, or what cut it short."""
        try:
            ending = self._consume(EventSource(response).iter_sse(), result, started, listener, on_meta)
        except (httpx.TransportError, httpx.StreamError) as err:
            return f"the connection broke ({_describe(err)})"
        return ending

    def _consume(
        self,
        events: Iterator[ServerSentEvent],
        result: TurnResult,
        started: float,
        listener: _Listener,
        on_meta: Callable[[TurnResult], None] | None,
    ) -> str:
        for event in events:
            data = json.loads(event.data) if event.data else {}
            if event.event == "meta":
                result.session_id = data["session_id"]
                result.turn = int(data["turn"])
                result.events_url = data["events_url"]
                self._saw_turn(result.session_id, result.turn)
                if on_meta is not None:
                    on_meta(result)
            elif event.event == "token":
                self._token(event.id, data["text"], result, started, listener.on_token)
            elif event.event == "reasoning":
                self._reasoning(event.id, data["text"], result, listener.on_reasoning)
            elif event.event == "done":
                result.done = data
                if event.id:
                    result.last_event_id = event.id
                return FINISHED
            elif event.event == "error":
                result.error = data
                return FINISHED
            elif event.event == RECONNECT:
                result.events_url = data.get("events_url", result.events_url)
                return RECONNECT
        return ENDED_EARLY

    def _token(
        self, event_id: str, text: str, result: TurnResult, started: float, on_token: Callable[[str], None] | None
    ) -> None:
        if not self._fresh(event_id, text, result):
            return
        now = self._clock()
        if result.first_token_at is None:
            result.first_token_at = now - started
        result.token_times.append(now)
        result.text += text
        if on_token is not None:
            on_token(text)

    def _reasoning(
        self, event_id: str, text: str, result: TurnResult, on_reasoning: Callable[[str], None] | None
    ) -> None:
        if not self._fresh(event_id, text, result):
            return
        result.reasoning += text
        if on_reasoning is not None:
            on_reasoning(text)

    @staticmethod
    def _fresh(event_id: str, text: str, result: TurnResult) -> bool:
        """Whether a text event (token or reasoning: one sequence of ids) is new; if so it is the last one seen."""
        if event_position(event_id) <= event_position(result.last_event_id):
            result.repeated_ids.append(event_id)  # skipped, so the text is never doubled, but counted
            return False
        result.ids.append(event_id)
        result.chunks.append(text)
        result.last_event_id = event_id
        return True

    def _saw_turn(self, session_id: str, turn: int) -> None:
        self._latest_turns[session_id] = max(turn, self._latest_turns.get(session_id, 0))

    # ------------------------------------------------------------------------ HTTP, retried

    def _json(self, method: str, url: str) -> dict[str, Any]:
        with self._open(method, url, None, retry_on=RETRYABLE) as response:
            response.read()
            return dict(response.json())

    @contextlib.contextmanager
    def _open(
        self, method: str, url: str, result: TurnResult | None, *, retry_on: Collection[int], **kwargs: Any
    ) -> Iterator[httpx.Response]:
        """A response below 400, after sending the request again (with backoff) when it answered a status in
        ``retry_on`` or could not connect; any other error answer is an :class:`ApiError`. A GET is also sent
        again after a connection that broke before any answer (it changes nothing)."""
        if self.pace is not None and kwargs.get("headers", {}).get("Accept") == SSE["Accept"]:
            kwargs = {**kwargs, "params": {"pace": "1" if self.pace else "0"}}  # a stream: POST /chat, GET events
        for attempt in range(1, self.retry.attempts + 1):
            last = attempt == self.retry.attempts
            with contextlib.ExitStack() as stack:
                try:
                    response = stack.enter_context(self._http.stream(method, url, **kwargs))
                except httpx.TransportError as err:
                    if last or not (_not_sent(err) or method == "GET"):
                        raise
                    self._note_retry(result, attempt, None, f"{method} {url}: {_describe(err)}")
                    continue
                if response.status_code in retry_on and not last:
                    response.read()
                    wait = retry_after_s(response.headers.get("retry-after"))
                    if self.retry.honours(wait):
                        self._note_retry(result, attempt, wait, f"{method} {url}: {response.status_code}")
                        continue
                _raise_for_error(response)
                yield response
                return
        raise AssertionError("unreachable: the last attempt yields or raises")

    def _note_retry(self, result: TurnResult | None, attempt: int, retry_after: float | None, why: str) -> None:
        if result is not None:
            result.retries += 1
            result.incidents.append(f"retry {attempt}: {why}")
        self._sleep(self.retry.delay(attempt, retry_after))


def _not_sent(err: httpx.TransportError) -> bool:
    """The request never reached the server: the connection could not be made."""
    return isinstance(err, httpx.ConnectError | httpx.ConnectTimeout)


def _describe(err: Exception) -> str:
    if isinstance(err, ApiError):
        return f"{err.status} {err.code}"
    return f"{type(err).__name__}: {err}"


def _raise_for_error(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    response.read()
    try:
        error = response.json()["error"]
        raise ApiError(response.status_code, str(error["code"]), str(error["message"]))
    except (ValueError, KeyError, TypeError):
        raise ApiError(response.status_code, "http_error", response.text[:200]) from None
