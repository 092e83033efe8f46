"""The relay's endpoints (HTTP_API.md), on an injected ChatTable, Lambda client and clock.

Identity (who owns a session):

- ``AUTH_TYPE=AWS_IAM``: the caller the Function URL authenticated, from
  ``requestContext.authorizer.iam``: its Cognito identity when it signed with a Cognito identity pool's
  credentials (they all share one role session), else its ``userArn`` (for an assumed role, the role session's
  ARN), else ``<accountId>:<callerId>``. A request without either is answered ``403 forbidden`` (a
  Function URL with IAM auth never sends one; a direct invocation might). Another caller's session
  reads as unknown: ``404 session_not_found``.
- ``AUTH_TYPE=NONE``: every caller is :data:`ANONYMOUS_OWNER`; a session id (128 random bits) is the
  capability to use the session.

The routes are declared once, at import (:data:`ROUTES`), and described by the OpenAPI document served at
``GET /openapi.json`` (:mod:`chatstream.relay.openapi`); every route under ``/sessions/{session_id}``
passes the one ownership check (:meth:`_Exchange.owned`) before it reads anything.

``POST /chat`` allocates the turn (one generating turn per session, a conditional write; the turn item
holds the message and its options), invokes ProxyFunction asynchronously with the turn's key only
(:class:`~chatstream.proxy_event.GenerateRequest`), and answers a stream: ``retry: 1000``, ``meta`` at once, then the
turn as :class:`~chatstream.relay.follow.Follower` emits it. When the invoke fails, the turn is ended
in the table as an ``error`` (``proxy_unavailable``, retryable) so the session is free again, and
the stream's ``meta`` is followed by that error; unless a proxy invocation has claimed the turn meanwhile (a failed
``Invoke`` may still have been queued), which then generates it as usual.

``POST …/cancel`` ends at once a turn no proxy invocation has claimed yet (its event still waits in Lambda's
queue), ``cancelled``, in a claiming write as that one; a turn a generation claimed gets its cancel flag
(:meth:`_Exchange.cancel_turn`).

Failures that are nobody's input (DynamoDB throttling before a stream starts) answer
``503 unavailable`` with ``Retry-After``; anything unexpected ``500 internal_error`` — never a traceback.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeAlias

from botocore.exceptions import BotoCoreError, ClientError

from chatstream.errors import SessionNotFound, Throttled, TurnFinished, TurnInProgress, TurnLimitReached, TurnNotFound
from chatstream.proxy_event import GenerateRequest
from chatstream.records import MAX_TURN, SESSION_ID_PATTERN, ErrorInfo, TokenRecord, Usage
from chatstream.relay import sse
from chatstream.relay.follow import (
    Clock,
    Follower,
    FollowSettings,
    FollowStats,
    StreamOutcome,
    cancel_unclaimed_turn,
    end_unclaimed_turn,
    events_url,
    render,
)
from chatstream.relay.http import (
    HttpError,
    Request,
    Response,
    Route,
    Router,
    StreamInfo,
    StreamKind,
    error_response,
    json_response,
    sse_response,
)
from chatstream.relay.openai.errors import render_error
from chatstream.relay.validation import parse_chat_request, parse_pace, parse_position
from chatstream.status import StopReason, TurnStatus

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    from mypy_boto3_lambda import LambdaClient

    from chatstream.config import RelayConfig
    from chatstream.relay.pace import Position
    from chatstream.table import ChatTable, Turn
    from chatstream.turn_options import TurnOptions

logger = logging.getLogger(__name__)

ANONYMOUS_OWNER = "anonymous"
# The advice of a POST /chat's 404 session_not_found: a path's session id (history, events, cancel) has no field to
# omit, and its 404 gives none.
OMIT_SESSION_ID = "omit session_id to start a new one"


def session_owner(auth_type: str, iam: Mapping[str, Any]) -> str | None:
    """The owner of the sessions a caller creates (see the module docstring); ``None``: IAM auth found nobody."""
    if auth_type == "NONE":
        return ANONYMOUS_OWNER
    cognito = iam.get("cognitoIdentity")
    if isinstance(cognito, dict):
        pool, identity = cognito.get("identityPoolId"), cognito.get("identityId")
        if isinstance(pool, str) and pool and isinstance(identity, str) and identity:
            # Every identity of a pool signs as one role session (…/CognitoIdentityCredentials): the identity owns
            return f"cognito-identity:{pool}:{identity}"
    user_arn, account_id, caller_id = iam.get("userArn"), iam.get("accountId"), iam.get("callerId")
    if isinstance(user_arn, str) and user_arn:
        return user_arn
    if isinstance(account_id, str) and account_id and isinstance(caller_id, str) and caller_id:
        return f"{account_id}:{caller_id}"
    return None


RETRY_MS = 1000
PROXY_UNAVAILABLE = "proxy_unavailable"
# How long an answer that is not streamed (a /v1 request without a stream) waits for its turn, from the request's
# arrival. OpenAI's SDKs give up on a request after 600 s (openai-python's and openai-node's DEFAULT_TIMEOUT) and send
# it again, twice (DEFAULT_MAX_RETRIES): each send would start a new generation beside the first. So such an answer
# comes well before then, however long the turn takes: the reply, or ``503 still_generating`` (not retried) naming the
# turn to follow. Within the invocation's own time too (``reconnect_margin_s`` before its end, as a stream's).
NON_STREAMED_WAIT_S = 540.0


@dataclass
class RelayService:
    """Serves one request at a time; build it once per execution environment."""

    table: ChatTable
    lambda_client: LambdaClient
    config: RelayConfig
    clock: Clock = field(default_factory=Clock)
    settings: FollowSettings | None = None
    non_streamed_wait_s: float = NON_STREAMED_WAIT_S
    # Proxy invocations that failed (the turn ended proxy_unavailable) so far in this environment: the function counts
    # each request's for its alarm, as a turn the relay could not start is its own failure, not a model's.
    proxy_invoke_failures: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.settings is None:
            self.settings = FollowSettings.from_config(self.config)

    def handle(self, request: Request, remaining_ms: Callable[[], int] | None = None) -> Response:
        """Answer one request. ``remaining_ms`` is the invocation's remaining time."""
        clock = self.clock if remaining_ms is None else replace(self.clock, remaining_ms=remaining_ms)
        try:
            return ROUTES.dispatch(request, _Exchange(self, request, clock, clock.monotonic()))
        except Throttled as err:
            logger.warning("throttled before the response", extra={"error": str(err)})
            return error_response(
                503, "unavailable", "the service is busy; try again in a second", {"Retry-After": "1"}
            )
        except Exception:
            logger.exception("unexpected failure before the response")
            failed = error_response(500, "internal_error", "the request failed unexpectedly; try again")
            return replace(failed, unexpected=True)


@dataclass(frozen=True)
class _Owned:
    """What the ownership check let through: the caller's session, and the turn number of a turn's route."""

    session_id: str
    turn_number: int | None = None

    @property
    def turn(self) -> int:
        if self.turn_number is None:
            raise ValueError("this route names no turn")
        return self.turn_number


@dataclass
class _Exchange:
    """One request being answered: the service's collaborators plus this request's clock."""

    service: RelayService
    request: Request
    clock: Clock
    started_at: float  # the clock's monotonic() when the request arrived

    @property
    def table(self) -> ChatTable:
        return self.service.table

    @property
    def config(self) -> RelayConfig:
        return self.service.config

    # -------------------------------------------------------------------------- endpoints

    def health(self, params: Mapping[str, str]) -> Response:
        return json_response(200, {"status": "ok"})

    # The document, the page and /v1 are imported by their first request, not at init (see _v1).

    def openapi(self, params: Mapping[str, str]) -> Response:
        from chatstream.relay.openai.endpoints import served_models
        from chatstream.relay.openapi import DOCUMENT

        return DOCUMENT.response(self.config.max_tokens_limit, served_models(self))

    def page(self, params: Mapping[str, str]) -> Response:
        from chatstream.relay.page import SITE

        return SITE.index()

    def asset(self, params: Mapping[str, str]) -> Response:
        from chatstream.relay.page import SITE

        return SITE.asset(params["name"])

    def vendor_asset(self, params: Mapping[str, str]) -> Response:
        from chatstream.relay.page import SITE, VENDOR

        return SITE.asset(f"{VENDOR}/{params['name']}")

    def chat(self, params: Mapping[str, str]) -> Response:
        pace = parse_pace(self.request.query.get("pace"))
        chat = parse_chat_request(
            self.request.body,
            max_tokens_limit=self.config.max_tokens_limit,
            valid_base64=self.request.body_is_valid_base64,
        )
        session_id, turn = self.begin_turn(
            chat.session_id,
            chat.message,
            max_tokens=chat.max_tokens,
            temperature=chat.temperature,
            not_found_advice=OMIT_SESSION_ID,
        )
        request = GenerateRequest(session_id, turn)
        failure = self.invoke_proxy(request)
        stats = FollowStats()
        info = StreamInfo(StreamKind.CHAT, session_id, turn, stats, self.started_at)
        meta = sse.json_message(
            {"session_id": session_id, "turn": turn, "events_url": events_url(session_id, turn)}, event="meta"
        )
        if failure is not None:
            return sse_response(self._failed_stream(meta, failure, stats), info)
        follower = self.follower(session_id, turn, None, stats, pace, new_turn=True, ends_unstarted=True)
        return sse_response(self._stream(meta, follower), info)

    def events(self, params: Mapping[str, str]) -> Response:
        header = parse_position(self.request.header("last-event-id"), "Last-Event-ID", header=True)
        query = parse_position(self.request.query.get("after"), "after")
        pace = parse_pace(self.request.query.get("pace"))
        after = header if header is not None else query
        owned = self.owned(params)
        turn = self.table.get_turn(owned.session_id, owned.turn, texts=False)
        if turn is None:
            raise _turn_not_found(owned.session_id, owned.turn)
        stats = FollowStats()
        info = StreamInfo(StreamKind.EVENTS, owned.session_id, turn.turn, stats, self.started_at)
        follower = self.follower(owned.session_id, turn.turn, after, stats, pace)
        return sse_response(self._stream(None, follower), info)

    def cancel(self, params: Mapping[str, str]) -> Response:
        owned = self.owned(params)
        session_id, turn = owned.session_id, owned.turn
        try:
            self.cancel_turn(session_id, turn)
        except TurnNotFound:
            raise _turn_not_found(session_id, turn) from None
        except TurnFinished:
            raise HttpError(
                409, "turn_finished", f"turn {turn} of session {session_id} already ended; there is nothing to cancel"
            ) from None
        return json_response(202, {"session_id": session_id, "turn": turn, "status": "cancelling"})

    def history(self, params: Mapping[str, str]) -> Response:
        session_id = self.owned(params).session_id
        turns = [self._turn_view(turn) for turn in self.table.list_turns(session_id)]
        return json_response(200, {"session_id": session_id, "turns": turns})

    # ---------------------------------------------------------------------------- helpers

    def begin_turn(
        self,
        session_id: str | None,
        message: str,
        *,
        max_tokens: int | None,
        temperature: float | None,
        options: TurnOptions | None = None,
        not_found_advice: str = "",
    ) -> tuple[str, int]:
        """Allocate the caller's next turn: turn 1 of a new session (``session_id`` None), or the session's next.

        ``not_found_advice`` ends the ``404 session_not_found`` of a session that is not the caller's: what the
        request can change, when it has a field to (``POST /chat``'s ``session_id``).
        """
        owner = self.owner()
        try:
            if session_id is None:
                session_id = self.table.turns.start_first(
                    owner, message, max_tokens=max_tokens, temperature=temperature, options=options
                )
                return session_id, 1
            session_id = _session_param(session_id, not_found_advice)
            # The table checks ownership in the same read that allocates the turn.
            turn = self.table.turns.start_next(
                session_id,
                owner,
                message,
                max_tokens=max_tokens,
                temperature=temperature,
                stale_after_ms=self.config.stale_turn_s * 1000,
                max_turns=self.config.max_turns_per_session,
                options=options,
            )
        except SessionNotFound:
            raise _session_not_found(str(session_id), not_found_advice) from None
        except TurnInProgress as err:
            raise HttpError(
                409, "turn_in_progress", f"{err}; wait for it to end (or cancel it), then send again"
            ) from None
        except TurnLimitReached as err:
            raise HttpError(409, "turn_limit", f"{err}; start a new session to go on") from None
        return session_id, turn

    def owner(self) -> str:
        """Who is asking (see the module docstring); ``403 forbidden`` when IAM auth found nobody."""
        owner = session_owner(self.config.auth_type, self.request.iam)
        if owner is None:
            raise HttpError(403, "forbidden", "the request carries no IAM caller identity; sign it with SigV4")
        return owner

    def owned(self, params: Mapping[str, str]) -> _Owned:
        """The ownership check of the routes under ``/sessions/{session_id}`` (with ``/turns/{turn}`` or not).

        In this order: the caller (``403``), the session id's shape and the turn number's (``404``), then the
        session must be the caller's (``404 session_not_found``, as for a session that does not exist).
        """
        owner = self.owner()
        session_id = _session_param(params["session_id"])
        turn = _turn_param(session_id, params["turn"]) if "turn" in params else None
        try:
            self.table.owned_session(session_id, owner)
        except SessionNotFound:
            raise _session_not_found(session_id) from None
        return _Owned(session_id, turn)

    def follower(
        self,
        session_id: str,
        turn: int,
        after: Position | None,
        stats: FollowStats,
        pace: bool | None,
        *,
        new_turn: bool = False,
        to_the_end: bool = False,
        ends_unstarted: bool = False,
    ) -> Follower:
        """A follower from ``after`` (``None``: the start); ``pace`` overrides the relay's setting (``?pace=``). A
        turn this request started is not read at once: the proxy has only just been invoked. ``to_the_end``: for an
        answer that is not streamed, no idle ``reconnect`` (there is no client to resume); only its wait
        (:data:`NON_STREAMED_WAIT_S`) or the function's remaining time ends it before the turn ends.
        ``ends_unstarted``: the request that started the turn and waits for it (not a ``/v1`` background one), whose
        follower ends the turn if no generation has begun it by the start timeout; a follower that attaches later
        leaves it to wait in the queue (:attr:`Follower.ends_unstarted`)."""
        settings = self.service.settings
        assert settings is not None
        clock = self.clock
        if pace is not None and pace is not settings.pace:
            settings = replace(settings, pace=pace)
        if to_the_end:
            settings = replace(settings, idle_reconnect_s=math.inf)
            clock = replace(clock, remaining_ms=self._unstreamed_remaining_ms)
        return Follower(
            self.table,
            session_id,
            turn,
            after=after,
            settings=settings,
            clock=clock,
            stats=stats,
            first_poll_after_s=settings.poll_min_s if new_turn else 0.0,
            ends_unstarted=ends_unstarted,
        )

    def _unstreamed_remaining_ms(self) -> int:
        """The time an answer that is not streamed has left, as a follower reads it (it ends ``reconnect_margin_s``
        before none is left): the invocation's, but no more than makes it end ``non_streamed_wait_s`` after the
        request arrived."""
        settings = self.service.settings
        assert settings is not None
        waited_s = self.clock.monotonic() - self.started_at
        left_s = self.service.non_streamed_wait_s - waited_s + settings.reconnect_margin_s
        return min(self.clock.remaining_ms(), int(left_s * 1000))

    def invoke_proxy(self, request: GenerateRequest) -> TokenRecord | None:
        """Start the generation; on failure end the turn in the table and return its error record.

        An ``Invoke`` that failed (a timeout, say) may still have been queued by Lambda. So the turn is ended only if
        no proxy invocation has claimed it, in the same write that claims it for the relay's error; if one has, it
        generates, and the turn is followed as usual (``None``).
        """
        try:
            response = self.service.lambda_client.invoke(
                FunctionName=self.config.proxy_function_name,
                InvocationType="Event",
                Payload=json.dumps(request.to_event(), ensure_ascii=False).encode("utf-8"),
            )
            _release_connection(response)
            status = response.get("StatusCode")
            if status != 202:
                raise _InvokeRefused(f"the invoke answered status {status}")
        except (ClientError, BotoCoreError, _InvokeRefused) as err:
            self.service.proxy_invoke_failures += 1
            logger.error(
                "invoking the proxy failed",
                extra={"session_id": request.session_id, "turn": request.turn, "error": str(err)},
            )
            return self._end_turn_in_error(request.session_id, request.turn, err)
        return None

    def cancel_turn(self, session_id: str, turn: int) -> bool:
        """Cancel a turn (the native cancel's and ``/v1``'s): whether it ended now, or only its flag was set.

        A turn no generation has claimed yet (its proxy invocation waits in Lambda's queue: throttled, a burst) is
        ended here, ``cancelled`` with nothing generated, in the write that claims it for the relay: its followers
        get ``done`` at once, its session is free at once, and the invocation, when it runs, finds it ended and calls
        no model. A turn a generation claimed gets its flag, which the generation reads between flushes.
        :class:`TurnFinished` when it had ended, :class:`TurnNotFound` when there is none.
        """
        stop = TokenRecord.stop(session_id, turn, 1, StopReason.CANCELLED, Usage(0, 0), self.table.now_ms())
        # A turn that is not claimable (claimed, ended, or none) is left as it is: request_cancel tells which.
        if not cancel_unclaimed_turn(self.table, stop):
            self.table.turns.request_cancel(session_id, turn)
            return False
        logger.info("cancelled before a generation started", extra={"session_id": session_id, "turn": turn})
        return True

    def _end_turn_in_error(self, session_id: str, turn: int, err: Exception) -> TokenRecord | None:
        code = err.response.get("Error", {}).get("Code", "") if isinstance(err, ClientError) else type(err).__name__
        error = ErrorInfo(
            PROXY_UNAVAILABLE, f"the generation could not be started ({code or 'unknown error'}); send again", True
        )
        failure = TokenRecord.failure(session_id, turn, 1, error, self.table.now_ms())
        try:
            if not end_unclaimed_turn(self.table, failure):
                logger.warning(
                    "the turn was claimed or ended meanwhile (a proxy invocation went through, or a cancel); followed",
                    extra={"session_id": session_id, "turn": turn},
                )
                return None
        except (ClientError, BotoCoreError, Throttled) as table_err:
            logger.error(
                "could not record the failed turn; it ends when it goes stale",
                extra={"session_id": session_id, "turn": turn, "error": str(table_err)},
            )
        return failure

    def _stream(self, meta: str | None, follower: Follower) -> Iterator[str]:
        # The first chunk goes out at once: the prelude is sent with it, before any table read.
        yield sse.retry(RETRY_MS) + (meta or "")
        if meta is not None:
            follower.stats.events_sent += 1
        yield from follower.events()

    def _failed_stream(self, meta: str, failure: TokenRecord, stats: FollowStats) -> Iterator[str]:
        yield sse.retry(RETRY_MS) + meta
        stats.events_sent += 2
        stats.outcome = StreamOutcome.ERROR
        stats.error_code = PROXY_UNAVAILABLE
        yield render(failure)

    def _turn_view(self, turn: Turn) -> dict[str, Any]:
        assistant, reasoning = turn.assistant, turn.reasoning
        if turn.status is TurnStatus.IN_PROGRESS:
            assistant, reasoning = self.table.assemble_texts(turn.session_id, turn.turn)
        view: dict[str, Any] = {
            "turn": turn.turn,
            "status": turn.status,
            "user": turn.user,
            "assistant": assistant or "",
            "stop_reason": turn.stop_reason,
            "usage": dict(turn.usage) if turn.usage is not None else None,
        }
        if reasoning:
            view["reasoning"] = reasoning  # apart from the reply; absent when the model showed none
        if turn.error is not None:
            view["error"] = dict(turn.error)
        return view


def _release_connection(response: Mapping[str, Any]) -> None:
    """Read the invoke's answer (empty for an asynchronous invoke) to its end, so its connection goes back to
    botocore's pool: left unread, the connection is not reused and every request opens a new one (on AWS, a TLS
    handshake on the first token's path). The invoke was answered already; a failure here only loses the connection.
    """
    payload = response.get("Payload")
    if payload is not None:
        with contextlib.suppress(BotoCoreError, OSError):
            payload.read()


class _InvokeRefused(Exception):
    """Lambda took the Invoke call but not the asynchronous invocation (private: its name is in the error message)."""


def _session_param(session_id: str, advice: str = "") -> str:
    if not SESSION_ID_PATTERN.match(session_id):
        raise _session_not_found(session_id, advice)
    return session_id


def _turn_param(session_id: str, value: str) -> int:
    digits = value.lstrip("0")
    if not (value.isascii() and value.isdigit()) or len(digits) > len(str(MAX_TURN)) or not int(digits or "0") >= 1:
        raise HttpError(404, "turn_not_found", f"no turn {value[:40]!r} in session {session_id}; turns count from 1")
    return int(digits)


def _session_not_found(session_id: str, advice: str = "") -> HttpError:
    shown = session_id if len(session_id) <= 128 else session_id[:128] + "…"
    return HttpError(404, "session_not_found", f"no session {shown!r}" + (f"; {advice}" if advice else ""))


def _turn_not_found(session_id: str, turn: int) -> HttpError:
    return HttpError(404, "turn_not_found", f"session {session_id} has no turn {turn}")


_Endpoint: TypeAlias = "Callable[[_Exchange, Mapping[str, str]], Response]"


def _v1(name: str) -> _Endpoint:
    """The ``/v1`` endpoint ``name`` of :mod:`chatstream.relay.openai.endpoints`, which the first ``/v1`` request
    imports. Deferred, like the OpenAPI document and the page: only their own requests need them, and importing them
    at init cost ~8 ms of the relay's cold start (bench/README.md, "Where init goes") that every native request
    paid for nothing."""

    def endpoint(exchange: _Exchange, params: Mapping[str, str]) -> Response:
        from chatstream.relay.openai import endpoints

        handler: _Endpoint = getattr(endpoints, name)
        return handler(exchange, params)

    endpoint.__name__ = endpoint.__qualname__ = name
    return endpoint


ROUTES: Router[_Exchange] = Router(
    (
        Route("GET", "/health", _Exchange.health),
        Route("GET", "/openapi.json", _Exchange.openapi),
        Route("GET", "/", _Exchange.page),
        Route("GET", "/static/{name}", _Exchange.asset),
        Route("GET", "/static/vendor/{name}", _Exchange.vendor_asset),
        Route("POST", "/chat", _Exchange.chat),
        Route("GET", "/sessions/{session_id}", _Exchange.history),
        Route("GET", "/sessions/{session_id}/turns/{turn}/events", _Exchange.events),
        Route("POST", "/sessions/{session_id}/turns/{turn}/cancel", _Exchange.cancel),
        Route("GET", "/v1/models", _v1("list_models")),
        Route("GET", "/v1/models/{model}", _v1("get_model")),
        Route("POST", "/v1/responses", _v1("create_response")),
        Route("GET", "/v1/responses/{response_id}", _v1("get_response")),
        Route("POST", "/v1/responses/{response_id}/cancel", _v1("cancel_response")),
        Route("POST", "/v1/chat/completions", _v1("create_chat_completion")),
    ),
    render_error=render_error,
)
