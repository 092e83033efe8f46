"""A Python client for the relay's HTTP API (docs/HTTP_API.md): :class:`ChatClient`.

It speaks Server-Sent Events through httpx-sse, resumes a stream from the last event id when the relay asks
(``reconnect``) or the stream drops, and sends a request again after ``429``/``5xx`` with backoff and jitter
(:mod:`chatstream_client.retry`; never after an answer that says ``x-should-retry: false``). Every ``POST /chat``
carries an ``Idempotency-Key`` (one per message, the same in every send of it), so a message whose outcome is unknown
(a ``500``, ``502`` or ``504``, a connection that broke before the turn's ``meta``) is simply sent again: the relay
joins the turn the first send started, if it did, and starts it otherwise (HTTP_API.md, "Retries"). For a
Function URL with ``AWS_IAM`` auth, pass ``auth=SigV4Auth()`` (:mod:`chatstream_client.auth`). The terminal
client (:mod:`chatstream_client.cli`), the end-to-end tests and the benchmark use it.

It never hides what it worked around: a :class:`TurnResult` counts the resumes nobody asked for, the token ids
the relay sent twice (skipped, never shown twice) and the requests sent again, so a caller that expects a clean
stream can check :attr:`TurnResult.clean`. Event ids are ``<seq>`` or ``<seq>.<offset>`` (HTTP_API.md, "Event
ids"): the client only compares them (:func:`event_position`) and sends the last one back.

Errors: a JSON error response is an :class:`ApiError` with the relay's ``code``. The client raises one itself,
with ``status`` 0 unless an answer's status says more, under these codes:

- ``turn_outcome_unknown``: every send of a ``POST /chat`` failed where its turn may have started (``500``, ``502``,
  ``504``, a connection that broke, a ``200`` without ``meta``). ``session_id`` names the session when there is one,
  and ``result.idempotency_key`` the message's key: sending the message again with it (``chat(…,
  idempotency_key=…)``) follows its turn if one started, and starts it otherwise, within the key's 24 hours.
- ``resume_limit``: ``max_resumes`` resumes in a row that nobody planned brought nothing new.
- ``resume_failed``: the relay could not be reached to resume a turn for ``outage_s`` (the resume's connection
  could not be made, broke before its answer, or was answered ``429``/``5xx``, round after round: httpx's error or
  the last answer's :class:`ApiError` is ``__cause__``); the turn goes on, and ``events_url`` names it. The first
  GET of :meth:`ChatClient.follow` is not patient: it fails as soon as the retry policy's attempts are spent.
- ``bad_event``: an event whose data is not JSON (a relay of another protocol, or a line reader that splits where
  SSE does not); the turn so far is ``result``.
- ``http_error``: an error answer without the relay's JSON error body (Lambda's own ``429`` or ``413``, a front
  end's page), or one whose body broke off; ``message`` holds the start of the body, or what broke.

Once a turn is known, an error raised while following it carries it: ``session_id``, ``turn``, ``events_url``,
``last_event_id`` and the partial :class:`TurnResult` as ``result`` (follow it again with :meth:`ChatClient.follow`).
httpx's own ``httpx.TransportError`` is raised, once the retries are spent, only where no turn can be left
behind: a connection that could not be made, a ``history``, ``health`` or ``cancel`` that kept failing. An answer
that is not an event stream where one was asked for raises ``httpx_sse.SSEError`` at once (the URL is not the
relay's; it is an ``httpx.TransportError`` too).
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
from httpx_sse import EventSource, SSEError

from chatstream_client.retry import REFUSALS, RETRYABLE, RetryPolicy, retry_after_s

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterator, Mapping

    from httpx_sse import ServerSentEvent

DEFAULT_URL = "http://127.0.0.1:3000"
SSE = {"Accept": "text/event-stream"}
IDEMPOTENCY_KEY = "Idempotency-Key"  # the IETF httpapi draft's header; its value an sf-string (a quoted string)
# After these, a POST /chat may have started its turn (the relay failed after allocating it, before its first
# byte): only its key makes sending it again safe.
OUTCOME_UNKNOWN = frozenset({500, 502, 504})
# A turn's events URL, absolute or not: its session and turn.
_EVENTS_PATH = re.compile(r"/sessions/(?P<session_id>[^/?#]+)/turns/(?P<turn>\d+)/events(?:[?#]|$)")
# The only events URL a relay names (meta, reconnect): a path on the relay itself. The client signs its requests
# (SigV4, for an AWS_IAM URL), so it must never follow one elsewhere: an absolute URL (httpx would send it, and the
# signature, to that host) or another path is a bad event.
_RELAY_EVENTS_PATH = re.compile(r"/sessions/[A-Za-z0-9_-]{1,128}/turns/[0-9]{1,9}/events")
# A `reconnect` that brings nothing sooner than this after its stream opened is not one the relay plans (its idle
# reconnect comes after IDLE_RECONNECT_S, at least a second, without anything to send): it counts as a stall.
QUICK_RECONNECT_S = 1.0


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


# The relay sends a keep-alive every 10 s (KEEPALIVE_S): a stream silent for three of them was lost without a reset
# (Wi-Fi gone, a NAT that forgot it), and is resumed, as the chat page does after the same 30 s (IDLE_MS).
READ_TIMEOUT_S = 30.0
# How long a resume keeps trying to reach the relay (a network outage) before the client gives up; the chat page
# gives up after as long (retry.js's RESUME_GIVE_UP_MS).
OUTAGE_S = 300.0


class ApiError(Exception):
    """A JSON error response (HTTP_API.md, "Errors before a stream starts"), or a failure the client gave up on
    (the module's docstring lists the codes the client raises itself).

    ``result`` is the turn as far as the client got (``None`` before it knew of one); ``session_id``, ``turn``,
    ``events_url`` and ``last_event_id`` read from it, ``None`` where unknown. Picklable, ``result`` included.
    """

    def __init__(
        self, status: int, code: str, message: str, *, result: TurnResult | None = None, session_id: str | None = None
    ) -> None:
        super().__init__(f"{status} {code}: {message}" if status else f"{code}: {message}")  # 0: no HTTP answer
        self.status = status
        self.code = code
        self.message = message
        self.result = result
        self._session_id = session_id
        self.retry_after_s: float | None = None  # the answer's Retry-After, when it had one

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.__class__, (self.status, self.code, self.message), self.__dict__)

    @property
    def session_id(self) -> str | None:
        return (self.result.session_id if self.result is not None else None) or self._session_id

    @property
    def turn(self) -> int | None:
        return self.result.turn if self.result is not None and self.result.turn else None

    @property
    def events_url(self) -> str | None:
        return self.result.events_url if self.result is not None and self.result.events_url else None

    @property
    def last_event_id(self) -> str | None:
        return self.result.last_event_id if self.result is not None and self.result.events_url else None


@dataclass
class ToolCall:
    """A tool call the model made, as its ``tool_call`` events spell it (HTTP_API.md, "Tool calls"): its ``index``
    in the reply, ``id`` (what its result names), the tool's ``name``, its ``arguments`` (JSON text) so far, and
    ``complete`` once its last event (``end``) came."""

    index: int
    id: str
    name: str
    arguments: str = ""
    complete: bool = False

    def parsed(self) -> dict[str, Any]:
        """The arguments as an object (a complete call's are the JSON text of one)."""
        value = json.loads(self.arguments)
        if not isinstance(value, dict):
            raise ValueError(f"tool call {self.id}'s arguments are not a JSON object")
        return value


@dataclass
class TurnResult:
    """How a streamed turn went, as the client saw it."""

    session_id: str = ""
    turn: int = 0
    events_url: str = ""
    text: str = ""
    last_event_id: str = "0"  # the id to resume from: "0" is before the first token
    reasoning: str = ""  # the model's reasoning, apart from the reply (``text``)
    tool_calls: list[ToolCall] = field(default_factory=list)  # the tools the model called, in index order
    ids: list[str] = field(default_factory=list)  # every text event's id (token, reasoning, tool_call: one sequence)
    chunks: list[str] = field(default_factory=list)  # each text event's text, parallel to ids
    done: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    resumes: int = 0  # every GET of events_url after the first stream, the relay's `reconnect` included
    unplanned_resumes: int = 0  # of those, the ones nobody asked for: the stream ended early or the connection broke
    repeated_ids: list[str] = field(default_factory=list)  # text event ids (token and reasoning) received again
    retries: int = 0  # requests sent again after 429/5xx or a failed connection, and turns found after one
    incidents: list[str] = field(default_factory=list)  # one line for each unplanned resume and each retry
    first_token_at: float | None = None  # seconds from the call to the first reply token, by the client's ``clock``
    token_times: list[float] = field(default_factory=list)  # each new reply token's ``clock()`` reading (monotonic)
    idempotency_key: str = ""  # the key every send of the message carried (``chat``)

    @property
    def finished(self) -> bool:
        return self.done is not None or self.error is not None

    @property
    def clean(self) -> bool:
        """The relay sent each token once, on streams that ended only where the protocol says they end."""
        return not self.repeated_ids and self.unplanned_resumes == 0


@dataclass(frozen=True)
class _Listener:
    """What a caller is told while a turn streams: each piece of the reply, each piece of the reasoning, each tool
    call once it is complete."""

    on_token: Callable[[str], None] | None = None
    on_reasoning: Callable[[str], None] | None = None
    on_tool_call: Callable[[ToolCall], None] | None = None  # each call, once complete


@dataclass
class _Budget:
    """The attempts one request may make, shared by every send of it (HTTP_API.md: at most 5 per request)."""

    attempts: int
    used: int = 0

    def take(self) -> bool:
        """Count one attempt; whether it is the last one allowed."""
        self.used += 1
        return self.used >= self.attempts

    @property
    def spent(self) -> bool:
        return self.used >= self.attempts


class ChatClient:
    """The relay's HTTP API at ``base_url``: ``chat``, ``follow``, ``cancel``, ``history``, ``health``, and
    ``find_turn`` (the turn a ``chat`` that ended before its ``meta`` started).

    - ``auth``: an ``httpx.Auth`` for every request (``SigV4Auth()`` for an ``AWS_IAM`` Function URL);
    - ``timeout``: seconds to connect, write and wait for a pool connection; ``read_timeout``: seconds without a
      byte before a stream counts as broken (:data:`READ_TIMEOUT_S`);
    - ``max_resumes``: unplanned resumes in a row (the stream broke or ended early) that bring no new event before
      the client gives up (``resume_limit``); the relay's planned ``reconnect``s never count;
    - ``outage_s``: how long a resume keeps trying while the relay cannot be reached (a network outage) before the
      client gives up (``resume_failed``): each round is the retry policy's attempts, then a backoff wait;
    - ``retry``: the :class:`~chatstream_client.retry.RetryPolicy` (attempts per request, backoff);
    - ``clock`` and ``sleep``: the monotonic clock of :attr:`TurnResult.token_times`, and the waits (tests pass
      their own);
    - ``pace``: ``?pace=`` on every stream (HTTP_API.md, "Pacing"); ``None`` leaves it to the relay.

    To find the turn a message started when its ``chat`` was interrupted before the turn's ``meta`` (the terminal
    client's Ctrl-C, which cancels it: :meth:`find_turn`), it must know a session's newest turn, so the first
    ``chat`` into a session this client has not seen reads its history first: one ``GET /sessions/{id}`` per
    session per client.
    """

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        *,
        auth: httpx.Auth | None = None,
        timeout: float = 30.0,
        read_timeout: float = READ_TIMEOUT_S,
        max_resumes: int = 20,  # unplanned resumes in a row that bring no new event before the client gives up
        outage_s: float = OUTAGE_S,  # how long a resume keeps trying to reach the relay before the client gives up
        retry: RetryPolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        pace: bool | None = None,  # ?pace= on every stream (HTTP_API.md, "Pacing"); None: the relay's setting
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.pace = pace
        self.max_resumes = max_resumes
        self.outage_s = outage_s
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
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, str] | None = None,
        tool_results: list[dict[str, str]] | None = None,
        parallel_tool_calls: bool | None = None,
        on_tool_call: Callable[[ToolCall], None] | None = None,
        idempotency_key: str | None = None,
    ) -> TurnResult:
        """Start a turn and follow it to its end, resuming from the last event id if the stream drops.

        ``on_token`` gets each piece of the reply as it comes, ``on_reasoning`` each piece of the model's reasoning,
        ``on_tool_call`` each tool call once complete, ``on_meta`` the result once the turn is known. ``tools``,
        ``tool_choice``, ``parallel_tool_calls`` and ``tool_results`` (``[{"tool_call_id", "content"}]``, with
        ``message`` ``""`` or more) are ``POST /chat``'s (HTTP_API.md, "Tool calls"). Every send of the message
        carries ``idempotency_key`` (a new random one unless given: pass an earlier call's ``result.idempotency_key``
        to join the turn it may have started). Into a session this client has not seen, it reads the session's history
        first (once), so that :meth:`find_turn` can tell the turn a message started.
        """
        body: dict[str, Any] = {"message": message} if message or not tool_results else {}
        for name, value in (
            ("tools", tools),
            ("tool_choice", tool_choice),
            ("tool_results", tool_results),
            ("parallel_tool_calls", parallel_tool_calls),
        ):
            if value is not None:
                body[name] = value
        if session_id is not None:
            body["session_id"] = session_id
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if temperature is not None:
            body["temperature"] = temperature
        result = TurnResult(session_id=session_id or "", idempotency_key=idempotency_key or uuid.uuid4().hex)
        started = self._clock()
        listener = _Listener(on_token, on_reasoning, on_tool_call)
        try:
            if session_id is not None and session_id not in self._latest_turns:
                self.history(session_id)  # its newest turn, so that an unknown outcome can be looked for
            ending = self._start_turn(body, result, started, listener, on_meta)
            return self._follow_to_end(result, started, listener, ending)
        except ApiError as err:
            if err.result is None:
                err.result = result
            raise

    def follow(
        self,
        events_url: str,
        after: str | int | None = None,
        *,
        on_token: Callable[[str], None] | None = None,
        on_reasoning: Callable[[str], None] | None = None,
        on_meta: Callable[[TurnResult], None] | None = None,
        on_tool_call: Callable[[ToolCall], None] | None = None,
    ) -> TurnResult:
        """Attach to a turn (from the event id ``after``, or its start) and follow it to its end.

        The result's ``session_id`` and ``turn`` are read from ``events_url`` (empty and 0 for a URL of another
        shape); ``on_meta`` gets the result before the first request when they could be read. A tool call the turn
        was inside at ``after`` is in :attr:`TurnResult.tool_calls` with the rest of its arguments only.
        """
        listener = _Listener(on_token, on_reasoning, on_tool_call)
        events_url = self._own_url(events_url)
        result = TurnResult(events_url=events_url, last_event_id="0" if after is None else str(after))
        if coordinates := _EVENTS_PATH.search(events_url):
            result.session_id, result.turn = coordinates["session_id"], int(coordinates["turn"])
            if on_meta is not None:
                on_meta(result)
        started = self._clock()
        headers = SSE if after is None else {**SSE, "Last-Event-ID": str(after)}
        try:
            ending = self._resume(result, started, listener, headers)
            return self._follow_to_end(result, started, listener, ending)
        except ApiError as err:
            if err.result is None:
                err.result = result
            raise

    def _own_url(self, url: str) -> str:
        """``url`` as a path on this client's relay: a path as it is, an absolute URL only on the relay's own origin
        (its requests are signed for it; following another host would hand it the signature)."""
        if "://" not in url and not url.startswith("//"):
            return "/" + url.lstrip("/")  # a path on the relay (sessions/…/events, as typed)
        given, own = httpx.URL(url), httpx.URL(self.base_url)
        if (given.scheme, given.host, given.port) != (own.scheme, own.host, own.port):
            raise ApiError(
                0, "bad_url", f"{url[:200]} is not on the relay at {self.base_url}: name that relay with --url"
            )
        return given.raw_path.decode("ascii")

    def cancel(self, session_id: str, turn: int) -> dict[str, Any]:
        """Stop a turn; sent again like a GET (a second cancel is 202 again, or 409 turn_finished)."""
        return self._json("POST", f"/sessions/{session_id}/turns/{turn}/cancel")

    def find_turn(self, session_id: str, message: str) -> int | None:
        """The turn a ``chat`` of ``message`` into ``session_id`` started, when that call ended before the turn's
        ``meta`` (interrupted, or failed): a turn in the session's history newer than any this client has seen,
        with this message. ``None`` when there is none, or when this client has seen no turn of the session (it
        cannot tell a new turn from an old one)."""
        known = self._latest_turns.get(session_id)
        return None if known is None else self._newer_turn(session_id, known, message)

    def history(self, session_id: str) -> dict[str, Any]:
        """The session's turns; this client then knows its newest turn."""
        history = self._json("GET", f"/sessions/{session_id}")
        turns = [turn["turn"] for turn in history.get("turns", []) if isinstance(turn.get("turn"), int)]
        self._saw_turn(session_id, max(turns, default=0))
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
        """POST /chat until a turn streams (HTTP_API.md, "Retries"); how its first stream ended.

        Every send carries the message's idempotency key, so each may be sent again, whatever happened to the one
        before: a ``429``/``5xx``, a connection that failed, a stream that broke before its ``meta``. All of them
        share one budget of ``retry.attempts``; when it is spent on an outcome that may have started the turn, the
        failure is ``turn_outcome_unknown``.
        """
        budget = _Budget(self.retry.attempts)
        headers = {**SSE, IDEMPOTENCY_KEY: sf_string(result.idempotency_key)}
        while True:
            failure: Exception
            try:
                with self._open(
                    "POST",
                    "/chat",
                    result,
                    retry_on=RETRYABLE,
                    repeatable=True,
                    budget=budget,
                    json=body,
                    headers=headers,
                ) as response:
                    ending = self._read(response, result, started, listener, on_meta)
            except SSEError:
                raise  # not an event stream: not the relay
            except httpx.TransportError as err:
                if _not_sent(err):
                    raise  # no send ever reached the relay: nothing was started
                failure = err
            except ApiError as err:
                if err.status not in OUTCOME_UNKNOWN:
                    raise  # the relay answered: nothing was started (429, 503), or the request itself is wrong
                failure = err
            else:
                if result.events_url or result.finished:
                    return ending
                failure = ApiError(200, "no_meta", f"the stream began without its meta event ({ending})")
            if budget.spent:
                raise _outcome_unknown(failure, body.get("session_id"), result.idempotency_key) from failure
            self._note_retry(result, budget.used, None, f"POST /chat: {_describe(failure)}; sent again with its key")

    def _newer_turn(self, session_id: str, known: int, message: str) -> int | None:
        """The first turn in the session's history after turn ``known`` whose user message is ``message``."""
        turns = self.history(session_id).get("turns", [])
        mine = [t for t in turns if t.get("turn", 0) > known and t.get("user") == message]
        return int(mine[0]["turn"]) if mine else None

    # ---------------------------------------------------------------------------- streams

    def _follow_to_end(self, result: TurnResult, started: float, listener: _Listener, ending: str) -> TurnResult:
        """Resume until the turn ends. A ``reconnect`` is followed at once and, as the relay plans it (its time
        limit, or a turn with nothing new for a minute), never counts toward ``max_resumes``; a stream that broke
        or ended early is resumed after a backoff, and ``max_resumes`` of those in a row without a new event end
        in ``resume_limit``."""
        stalled = 0  # unplanned resumes in a row that brought no new event
        received = len(result.ids)
        opened = started  # when the stream that just ended was asked for
        while not result.finished:
            planned = ending == RECONNECT and (
                len(result.ids) > received or self._clock() - opened >= QUICK_RECONNECT_S
            )
            if ending != RECONNECT:
                result.unplanned_resumes += 1
                result.incidents.append(f"resumed after id {result.last_event_id}: {ending}")
            if len(result.ids) > received:
                stalled = 0
            elif not planned:
                stalled += 1
            received = len(result.ids)
            if stalled > self.max_resumes:
                raise ApiError(
                    0, "resume_limit", f"{stalled - 1} resumes in a row brought nothing; giving up", result=result
                )
            if ending != RECONNECT:
                self._sleep(self.retry.delay(stalled))
            result.resumes += 1
            opened = self._clock()
            ending = self._resume_patiently(result, started, listener)
        return result

    def _resume_patiently(self, result: TurnResult, started: float, listener: _Listener) -> str:
        """Resume from the last event id. While the relay cannot be reached (each round spends the retry policy's
        attempts on a connection that fails, or on ``429``/``5xx``), wait and try again, for up to ``outage_s``: a
        network outage is no reason to drop a turn that goes on without the client (HTTP_API.md, "Retries")."""
        since = self._clock()
        rounds = 0
        while True:
            try:
                return self._resume(result, started, listener, {**SSE, "Last-Event-ID": result.last_event_id})
            except ApiError as err:
                if err.code != "resume_failed" and err.status not in RETRYABLE:
                    raise  # the relay answered, and the answer is final (a 404, a 403, an event that is not JSON)
                cause: Exception = err
                asked = err.retry_after_s  # a busy relay's Retry-After, kept however long (within the outage)
                if err.code == "resume_failed" and isinstance(err.__cause__, Exception):
                    cause = err.__cause__  # httpx's error
                waited = self._clock() - since
                if waited >= self.outage_s:
                    raise ApiError(
                        0,
                        "resume_failed",
                        f"{_describe(cause)} resuming {result.events_url} after id {result.last_event_id}, "
                        f"for {waited:.0f} s",
                        result=result,
                    ) from cause
            rounds += 1
            result.resumes += 1
            result.unplanned_resumes += 1
            result.incidents.append(f"resume after id {result.last_event_id} failed: {_describe(cause)}")
            self._sleep(self.retry.delay(rounds, asked))

    def _resume(self, result: TurnResult, started: float, listener: _Listener, headers: Mapping[str, str]) -> str:
        """One GET of the turn's events: how its stream ended. A connection that fails as often as the retries
        allow is an :class:`ApiError` ``resume_failed`` that carries ``result``."""
        try:
            with self._open(
                "GET", result.events_url, result, retry_on=RETRYABLE, repeatable=True, headers=headers
            ) as response:
                return self._read(response, result, started, listener, None)
        except SSEError:
            raise
        except httpx.TransportError as err:
            raise ApiError(
                0,
                "resume_failed",
                f"{_describe(err)} resuming {result.events_url} after id {result.last_event_id}",
                result=result,
            ) from err

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
        except SSEError:
            raise  # an answer that is not an event stream: the URL is not the relay's, and resuming cannot help
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
            try:
                data = json.loads(event.data) if event.data else {}
            except ValueError:
                message = f"the {event.event!r} event (id {event.id or 'none'}) carries data that is not JSON"
                raise ApiError(0, "bad_event", message, result=result) from None
            if event.event == "meta":
                result.session_id = data["session_id"]
                result.turn = int(data["turn"])
                result.events_url = _relay_events_path(data["events_url"], result)
                self._saw_turn(result.session_id, result.turn)
                if on_meta is not None:
                    on_meta(result)
            elif event.event == "token":
                self._token(event.id, data["text"], result, started, listener.on_token)
            elif event.event == "reasoning":
                self._reasoning(event.id, data["text"], result, listener.on_reasoning)
            elif event.event == "tool_call":
                self._tool_call(event.id, data, result, listener.on_tool_call)
            elif event.event == "done":
                result.done = data
                if event.id:
                    result.last_event_id = event.id
                return FINISHED
            elif event.event == "error":
                result.error = data
                return FINISHED
            elif event.event == RECONNECT:
                result.events_url = _relay_events_path(data.get("events_url", result.events_url), result)
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

    def _tool_call(
        self,
        event_id: str,
        data: Mapping[str, Any],
        result: TurnResult,
        on_tool_call: Callable[[ToolCall], None] | None,
    ) -> None:
        arguments = str(data["arguments"])
        if not self._fresh(event_id, arguments, result):
            return
        index = int(data["index"])
        call = next((call for call in result.tool_calls if call.index == index), None)
        if call is None:
            call = ToolCall(index, str(data["id"]), str(data["name"]))
            result.tool_calls.append(call)
            result.tool_calls.sort(key=lambda known: known.index)
        call.arguments += arguments
        if data.get("end") is True:
            call.complete = True
            if on_tool_call is not None:
                on_tool_call(call)

    @staticmethod
    def _fresh(event_id: str, text: str, result: TurnResult) -> bool:
        """Whether a text event (token, reasoning or tool_call: one sequence of ids) is new; if so it is the last one
        seen."""
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
        """A JSON answer to a request that may be sent again (a GET, a cancel): the whole body is read within each
        attempt, so a body cut short is sent again like a connection that failed."""
        with self._open(method, url, None, retry_on=RETRYABLE, repeatable=True, whole=True) as response:
            return dict(response.json())

    @contextlib.contextmanager
    def _open(
        self,
        method: str,
        url: str,
        result: TurnResult | None,
        *,
        retry_on: Collection[int],
        repeatable: bool = False,
        whole: bool = False,
        budget: _Budget | None = None,
        **kwargs: Any,
    ) -> Iterator[httpx.Response]:
        """A response below 400, after sending the request again (with backoff) when it answered a status in
        ``retry_on`` or could not connect; any other error answer is an :class:`ApiError`. A ``repeatable`` request
        (one that changes nothing, or nothing twice: a GET, a cancel) is also sent again after a connection that
        broke, before or during its answer. ``whole`` reads the body within the attempt; an error answer's body is
        always read there. Attempts come from ``budget`` (a request's own, unless the caller shares one)."""
        if self.pace is not None and kwargs.get("headers", {}).get("Accept") == SSE["Accept"]:
            kwargs = {**kwargs, "params": {"pace": "1" if self.pace else "0"}}  # a stream: POST /chat, GET events
        budget = budget or _Budget(self.retry.attempts)
        while True:
            last = budget.take()
            with contextlib.ExitStack() as stack:
                status: int | None = None
                try:
                    response = stack.enter_context(self._http.stream(method, url, **kwargs))
                    status = response.status_code
                    if whole or status >= 400:
                        response.read()
                except httpx.TransportError as err:
                    # A status that says nothing was started (retry_on) may be sent again though its body broke.
                    if not last and (repeatable or _not_sent(err) or status in retry_on):
                        self._note_retry(result, budget.used, None, f"{method} {url}: {_describe(err)}")
                        continue
                    if status is not None and status >= 400:  # the status is known, its explanation is not
                        raise ApiError(status, "http_error", f"the answer broke off: {_describe(err)}") from err
                    raise
                # Told not to, or the caller's budget refused it: reported (with its Retry-After), not waited out.
                told_not_to = response.headers.get("x-should-retry") == "false" or _refused(response)
                if response.status_code in retry_on and not last and not told_not_to:
                    wait = retry_after_s(response.headers.get("retry-after"))
                    if self.retry.honours(wait):
                        self._note_retry(result, budget.used, wait, f"{method} {url}: {response.status_code}")
                        continue
                _raise_for_error(response)
                yield response
                return

    def _note_retry(self, result: TurnResult | None, attempt: int, retry_after: float | None, why: str) -> None:
        if result is not None:
            result.retries += 1
            result.incidents.append(f"retry {attempt}: {why}")
        self._sleep(self.retry.delay(attempt, retry_after))


def _not_sent(err: httpx.TransportError) -> bool:
    """The request never reached the server: the connection could not be made."""
    return isinstance(err, httpx.ConnectError | httpx.ConnectTimeout)


def _outcome_unknown(failure: Exception, session_id: object, key: str) -> ApiError:
    """``turn_outcome_unknown``: a POST /chat whose every send failed where its turn may have started."""
    where = f"session {session_id}" if isinstance(session_id, str) else "a new session"
    return ApiError(
        getattr(failure, "status", 0),
        "turn_outcome_unknown",
        f"{_describe(failure)} before the stream started, on every send; the turn may have started in {where}: send "
        f"the message again with its Idempotency-Key {key} to follow it if it did (or start it if not)",
        session_id=session_id if isinstance(session_id, str) else None,
    )


def sf_string(text: str) -> str:
    """``text`` as a Structured Field string (RFC 8941, 3.3.3: quoted, with ``"`` and the backslash escaped), as
    the draft's ``Idempotency-Key`` takes it."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _describe(err: Exception) -> str:
    if isinstance(err, ApiError):
        return f"{err.status} {err.code}"
    return f"{type(err).__name__}: {err}"


def _relay_events_path(url: object, result: TurnResult) -> str:
    """An events URL the relay named, if it is one of its own paths; else a ``bad_event`` (see _RELAY_EVENTS_PATH)."""
    if isinstance(url, str) and _RELAY_EVENTS_PATH.fullmatch(url):
        return url
    shown = repr(url)[:200]
    raise ApiError(
        0, "bad_event", f"the relay named an events URL that is not its own path ({shown}): not followed", result=result
    )


def _refused(response: httpx.Response) -> bool:
    """A ``429`` that is the caller's budget refusing the turn (its body read), not a busy service."""
    if response.status_code != 429:
        return False
    try:
        return str(response.json()["error"]["code"]) in REFUSALS
    except (ValueError, KeyError, TypeError):
        return False


def _raise_for_error(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    response.read()
    try:
        error = response.json()["error"]
        failure = ApiError(response.status_code, str(error["code"]), str(error["message"]))
    except (ValueError, KeyError, TypeError):
        failure = ApiError(response.status_code, "http_error", response.text[:200])
    failure.retry_after_s = retry_after_s(response.headers.get("retry-after"))
    raise failure
