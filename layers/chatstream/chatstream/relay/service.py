"""The relay's endpoints (HTTP_API.md), on an injected ChatTable, Lambda client and clock.

Identity (who owns a session):

- ``AUTH_TYPE=AWS_IAM``: the caller the Function URL authenticated, from
  ``requestContext.authorizer.iam``: its ``userArn`` (for an assumed role, the role session's ARN),
  else ``<accountId>:<callerId>``. A request without either is answered ``403 forbidden`` (a
  Function URL with IAM auth never sends one; a direct invocation might). Another caller's session
  reads as unknown: ``404 session_not_found``.
- ``AUTH_TYPE=NONE``: every caller is :data:`ANONYMOUS_OWNER`; a session id (128 random bits) is the
  capability to use the session.

``POST /chat`` allocates the turn (one generating turn per session, a conditional write), invokes
ProxyFunction asynchronously, and answers a stream: ``retry: 1000``, ``meta`` at once, then the
turn as :class:`~chatstream.relay.follow.Follower` emits it. When the invoke fails, the turn is ended
in the table as an ``error`` (``proxy_unavailable``, retryable) so the session is free again, and
the stream's ``meta`` is followed by that error.

Failures that are nobody's input (DynamoDB throttling before a stream starts) answer
``503 unavailable`` with ``Retry-After``; anything unexpected ``500 internal_error`` — never a traceback.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from chatstream.errors import SessionNotFound, Throttled, TurnFinished, TurnInProgress, TurnNotFound
from chatstream.records import MAX_TURN, SESSION_ID_PATTERN, ErrorInfo, TokenRecord
from chatstream.relay import sse
from chatstream.relay.follow import Clock, Follower, FollowSettings, FollowStats, events_url, render
from chatstream.relay.http import (
    HttpError,
    Request,
    Response,
    Router,
    StreamInfo,
    error_response,
    json_response,
    sse_response,
)
from chatstream.relay.page import SITE
from chatstream.relay.validation import parse_chat_request, parse_position
from chatstream.table import STATUS_IN_PROGRESS

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from mypy_boto3_lambda import LambdaClient

    from chatstream.config import RelayConfig
    from chatstream.relay.validation import ChatRequest
    from chatstream.table import ChatTable, Turn

logger = logging.getLogger(__name__)

ANONYMOUS_OWNER = "anonymous"
RETRY_MS = 1000
PROXY_UNAVAILABLE = "proxy_unavailable"


@dataclass
class RelayService:
    """Serves one request at a time; build it once per execution environment."""

    table: ChatTable
    lambda_client: LambdaClient
    config: RelayConfig
    clock: Clock = field(default_factory=Clock)
    settings: FollowSettings | None = None

    def __post_init__(self) -> None:
        if self.settings is None:
            self.settings = FollowSettings.from_config(self.config)

    def handle(self, event: object, remaining_ms: Callable[[], int] | None = None) -> Response:
        """Answer one Function URL event. ``remaining_ms`` is the invocation's remaining time."""
        request = Request.from_event(event)
        clock = self.clock if remaining_ms is None else replace(self.clock, remaining_ms=remaining_ms)
        try:
            return _Exchange(self, request, clock).run()
        except Throttled as err:
            logger.warning("throttled before the response", extra={"error": str(err)})
            return error_response(
                503, "unavailable", "the service is busy; try again in a second", {"Retry-After": "1"}
            )
        except Exception:
            logger.exception("unexpected failure before the response")
            return error_response(500, "internal_error", "the request failed unexpectedly; try again")


@dataclass
class _Exchange:
    """One request being answered: the service's collaborators plus this request's clock."""

    service: RelayService
    request: Request
    clock: Clock

    def run(self) -> Response:
        self.started_at = self.clock.monotonic()
        router = Router()
        router.add("GET", "/health", lambda request, params: json_response(200, {"status": "ok"}))
        router.add("GET", "/", lambda request, params: SITE.index())
        router.add("GET", "/static/{name}", lambda request, params: SITE.asset(params["name"]))
        router.add("POST", "/chat", lambda request, params: self.chat())
        router.add("GET", "/sessions/{session_id}", lambda request, params: self.history(params["session_id"]))
        router.add(
            "GET",
            "/sessions/{session_id}/turns/{turn}/events",
            lambda request, params: self.events(params["session_id"], params["turn"]),
        )
        router.add(
            "POST",
            "/sessions/{session_id}/turns/{turn}/cancel",
            lambda request, params: self.cancel(params["session_id"], params["turn"]),
        )
        return router.dispatch(self.request)

    @property
    def table(self) -> ChatTable:
        return self.service.table

    @property
    def config(self) -> RelayConfig:
        return self.service.config

    # -------------------------------------------------------------------------- endpoints

    def chat(self) -> Response:
        chat = parse_chat_request(
            self.request.body,
            max_tokens_limit=self.config.max_tokens_limit,
            valid_base64=self.request.body_is_valid_base64,
        )
        owner = self.owner()
        try:
            if chat.session_id is None:
                turn = 1
                session_id = self.table.start_session(
                    owner, chat.message, max_tokens=chat.max_tokens, temperature=chat.temperature
                )
            else:
                session_id = _session_param(chat.session_id)
                turn = self.table.start_turn(
                    session_id,
                    owner,
                    chat.message,
                    max_tokens=chat.max_tokens,
                    temperature=chat.temperature,
                    stale_after_ms=self.config.stale_turn_s * 1000,
                    max_turns=self.config.max_turns_per_session,
                )
        except SessionNotFound:
            raise _session_not_found(session_id) from None
        except TurnInProgress as err:
            raise HttpError(
                409, "turn_in_progress", f"{err}; wait for it to end (or cancel it), then send again"
            ) from None
        failure = self.invoke_proxy(session_id, turn, chat)
        stats = FollowStats()
        info = StreamInfo("chat", session_id, turn, stats, self.started_at)
        meta = sse.json_message(
            {"session_id": session_id, "turn": turn, "events_url": events_url(session_id, turn)}, event="meta"
        )
        if failure is not None:
            return sse_response(self._failed_stream(meta, failure, stats), info)
        follower = self.follower(session_id, turn, -1, stats)
        return sse_response(self._stream(meta, follower), info)

    def events(self, session_id: str, turn_param: str) -> Response:
        header = parse_position(self.request.header("last-event-id"), "Last-Event-ID", blank_is_absent=True)
        query = parse_position(self.request.query.get("after"), "after")
        after = header if header is not None else query
        turn = self.owned_turn(session_id, turn_param)
        stats = FollowStats()
        info = StreamInfo("events", session_id, turn.turn, stats, self.started_at)
        follower = self.follower(session_id, turn.turn, -1 if after is None else after, stats)
        return sse_response(self._stream(None, follower), info)

    def cancel(self, session_id: str, turn_param: str) -> Response:
        owner = self.owner()
        session_id = _session_param(session_id)
        turn = _turn_param(session_id, turn_param)
        self._owned_session(session_id, owner)
        try:
            self.table.request_cancel(session_id, turn)
        except TurnNotFound:
            raise _turn_not_found(session_id, turn) from None
        except TurnFinished:
            raise HttpError(
                409, "turn_finished", f"turn {turn} of session {session_id} already ended; there is nothing to cancel"
            ) from None
        return json_response(202, {"session_id": session_id, "turn": turn, "status": "cancelling"})

    def history(self, session_id: str) -> Response:
        owner = self.owner()
        session_id = _session_param(session_id)
        self._owned_session(session_id, owner)
        turns = [self._turn_view(turn) for turn in self.table.list_turns(session_id)]
        return json_response(200, {"session_id": session_id, "turns": turns})

    # ---------------------------------------------------------------------------- helpers

    def owner(self) -> str:
        if self.config.auth_type == "NONE":
            return ANONYMOUS_OWNER
        iam = self.request.iam
        user_arn, account_id, caller_id = iam.get("userArn"), iam.get("accountId"), iam.get("callerId")
        if isinstance(user_arn, str) and user_arn:
            return user_arn
        if isinstance(account_id, str) and account_id and isinstance(caller_id, str) and caller_id:
            return f"{account_id}:{caller_id}"
        raise HttpError(403, "forbidden", "the request carries no IAM caller identity; sign it with SigV4")

    def owned_turn(self, session_id: str, turn_param: str) -> Turn:
        owner = self.owner()
        session_id = _session_param(session_id)
        turn_number = _turn_param(session_id, turn_param)
        self._owned_session(session_id, owner)
        turn = self.table.get_turn(session_id, turn_number)
        if turn is None:
            raise _turn_not_found(session_id, turn_number)
        return turn

    def _owned_session(self, session_id: str, owner: str) -> None:
        try:
            self.table.owned_session(session_id, owner)
        except SessionNotFound:
            raise _session_not_found(session_id) from None

    def follower(self, session_id: str, turn: int, after: int, stats: FollowStats) -> Follower:
        assert self.service.settings is not None
        return Follower(
            self.table, session_id, turn, after=after, settings=self.service.settings, clock=self.clock, stats=stats
        )

    def invoke_proxy(self, session_id: str, turn: int, chat: ChatRequest) -> TokenRecord | None:
        """Start the generation; on failure end the turn in the table and return its error record."""
        payload: dict[str, Any] = {"session_id": session_id, "turn": turn, "message": chat.message}
        if chat.max_tokens is not None:
            payload["max_tokens"] = chat.max_tokens
        if chat.temperature is not None:
            payload["temperature"] = chat.temperature
        try:
            response = self.service.lambda_client.invoke(
                FunctionName=self.config.proxy_function_name,
                InvocationType="Event",
                Payload=json.dumps(payload, ensure_ascii=False).encode("utf-8"),
            )
            status = response.get("StatusCode")
            if status != 202:
                raise _InvokeRefused(f"the invoke answered status {status}")
        except (ClientError, BotoCoreError, _InvokeRefused) as err:
            logger.error("invoking the proxy failed", extra={"session_id": session_id, "turn": turn, "error": str(err)})
            return self._end_turn_in_error(session_id, turn, err)
        return None

    def _end_turn_in_error(self, session_id: str, turn: int, err: Exception) -> TokenRecord:
        code = err.response.get("Error", {}).get("Code", "") if isinstance(err, ClientError) else type(err).__name__
        error = ErrorInfo(
            PROXY_UNAVAILABLE, f"the generation could not be started ({code or 'unknown error'}); send again", True
        )
        now = self.table.now_ms()
        start = TokenRecord.start(session_id, turn, now)
        failure = TokenRecord.failure(session_id, turn, 1, error, now)
        try:
            # The consumer's order: the turn item first (frees the session), then the terminal token item.
            self.table.complete_turn(failure, "")
            self.table.put_records([start, failure])
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
        stats.outcome = "error"
        stats.error_code = PROXY_UNAVAILABLE
        yield render(failure)

    def _turn_view(self, turn: Turn) -> dict[str, Any]:
        assistant = turn.assistant
        if turn.status == STATUS_IN_PROGRESS:
            assistant = self.table.assemble_text(turn.session_id, turn.turn)
        view: dict[str, Any] = {
            "turn": turn.turn,
            "status": turn.status,
            "user": turn.user,
            "assistant": assistant or "",
            "stop_reason": turn.stop_reason,
            "usage": dict(turn.usage) if turn.usage is not None else None,
        }
        if turn.error is not None:
            view["error"] = dict(turn.error)
        return view


class _InvokeRefused(Exception):
    """Lambda accepted the call but not the asynchronous invocation."""


def _session_param(session_id: str) -> str:
    if not SESSION_ID_PATTERN.match(session_id):
        raise _session_not_found(session_id)
    return session_id


def _turn_param(session_id: str, value: str) -> int:
    digits = value.lstrip("0")
    if not (value.isascii() and value.isdigit()) or len(digits) > len(str(MAX_TURN)) or not int(digits or "0") >= 1:
        raise HttpError(404, "turn_not_found", f"no turn {value[:40]!r} in session {session_id}; turns count from 1")
    return int(digits)


def _session_not_found(session_id: str) -> HttpError:
    shown = session_id if len(session_id) <= 128 else session_id[:128] + "…"
    return HttpError(404, "session_not_found", f"no session {shown!r}; omit session_id to start a new one")


def _turn_not_found(session_id: str, turn: int) -> HttpError:
    return HttpError(404, "turn_not_found", f"session {session_id} has no turn {turn}")
