"""One request being answered (:class:`Exchange`): what every endpoint, native or ``/v1``, is written against.

An exchange holds the request, the service's collaborators (:class:`Service`: ChatTable, the Lambda client, the
configuration, the auth mode's :class:`~chatstream.relay.identity.Identity`) and this request's clock, and does what
the endpoints share:

- **who is asking** (:meth:`Exchange.owner`, as :mod:`chatstream.relay.identity` names the caller, once per
  request: the router asks first, :meth:`Exchange.authenticate`, before any route that is not public) and
  **ownership**: every route under ``/sessions/{session_id}`` passes the one ownership check
  (:meth:`Exchange.owned`) before it reads anything; another caller's session reads as unknown,
  ``404 session_not_found``;
- **beginning a turn** (:meth:`Exchange.begin_turn`): one generating turn per session, a conditional write; the turn
  item holds the message and its options. The same transaction admits the turn against its owner's budget
  (:mod:`chatstream.table.budgets`: refused, ``429`` and nothing written, :mod:`chatstream.relay.ratelimit`) and
  records the request's ``Idempotency-Key``: a request sent again with its key joins the turn the first one started
  (:class:`Begun` ``joined``; :mod:`chatstream.relay.idempotency`). The answer carries the caller's limits in
  OpenAI's ``x-ratelimit-*`` headers (:meth:`Exchange.limit_headers`), read beside the proxy's invoke;
- **invoking the proxy** (:meth:`Exchange.invoke_proxy`) asynchronously with the turn's key only
  (:class:`~chatstream.proxy_event.GenerateRequest`). When the invoke fails, the turn is ended in the table as an
  ``error`` (``proxy_unavailable``, retryable) so the session is free again; unless a proxy invocation has claimed
  the turn meanwhile (a failed ``Invoke`` may still have been queued), which then generates it as usual;
- **cancelling** (:meth:`Exchange.cancel_turn`): a turn no proxy invocation has claimed yet (its event still waits in
  Lambda's queue) ends at once, ``cancelled``, in a claiming write as that one; a turn a generation claimed gets its
  cancel flag;
- **following** a turn (:meth:`Exchange.follower`): a :class:`~chatstream.relay.follow.Follower` on this request's
  clock, streamed or, for an answer that is not streamed, to its end within :data:`NON_STREAMED_WAIT_S`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from botocore.exceptions import BotoCoreError, ClientError

from chatstream.errors import SessionNotFound, Throttled, TurnInProgress, TurnLimitReached
from chatstream.proxy_event import GenerateRequest
from chatstream.records import MAX_TURN, SESSION_ID_PATTERN, ErrorInfo, TokenRecord, Usage
from chatstream.relay import idempotency, ratelimit
from chatstream.relay.follow import Clock, Follower, cancel_unclaimed_turn, end_unclaimed_turn
from chatstream.relay.http import HttpError
from chatstream.status import StopReason, TurnStatus
from chatstream.table.budgets import Admission, LimitExceeded
from chatstream.table.idempotency import KeyClaim, KeyInUse

if TYPE_CHECKING:
    from collections.abc import Mapping
    from concurrent.futures import Executor, Future

    from mypy_boto3_lambda import LambdaClient

    from chatstream.config import RelayConfig
    from chatstream.relay.bearer import BearerVerifier
    from chatstream.relay.follow import FollowSettings, FollowStats
    from chatstream.relay.http import Request
    from chatstream.relay.identity import Identity
    from chatstream.relay.pace import Position
    from chatstream.table import ChatTable
    from chatstream.table.budgets import Standing
    from chatstream.table.idempotency import KeyRecord
    from chatstream.turn_options import TurnOptions

logger = logging.getLogger(__name__)

PROXY_UNAVAILABLE = "proxy_unavailable"
# How long an answer that is not streamed (a /v1 request without a stream) waits for its turn, from the request's
# arrival. OpenAI's SDKs give up on a request after 600 s (openai-python's and openai-node's DEFAULT_TIMEOUT) and send
# it again, twice (DEFAULT_MAX_RETRIES): each send would start a new generation beside the first. So such an answer
# comes well before then, however long the turn takes: the reply, or ``503 still_generating`` (not retried) naming the
# turn to follow. Within the invocation's own time too (``reconnect_margin_s`` before its end, as a stream's).
NON_STREAMED_WAIT_S = 540.0
# What the relay logs when a request joins a turn no generation has claimed yet, and invokes the proxy again.
REINVOKED = "proxy invoked again for a joined turn no generation has claimed"
# How long an answer waits for the caller's standing (its x-ratelimit-* headers), read beside the proxy's invoke: the
# headers are left out rather than the answer held up.
STANDING_WAIT_S = 1.0


class Service(Protocol):
    """What an exchange uses of the service answering it (:class:`~chatstream.relay.service.RelayService`), built once
    per execution environment."""

    @property
    def table(self) -> ChatTable: ...

    @property
    def lambda_client(self) -> LambdaClient: ...

    @property
    def config(self) -> RelayConfig: ...

    @property
    def identity(self) -> Identity: ...

    @property
    def verifier(self) -> BearerVerifier | None: ...  # AUTH_TYPE=JWT's token verifier (GET /auth/config reads it)

    @property
    def settings(self) -> FollowSettings | None: ...

    @property
    def non_streamed_wait_s(self) -> float: ...

    @property
    def background(self) -> Executor:
        """Runs a request's reads that need not hold up its answer (the caller's standing, beside the invoke)."""
        ...

    # Proxy invocations that failed so far in this environment (the function counts each request's for its alarm).
    proxy_invoke_failures: int
    # Turns the callers' budgets refused so far in this environment (counted as proxy_invoke_failures are).
    refusals: int


@dataclass(frozen=True)
class Begun:
    """A turn a request begins: the one it started, or, ``joined``, the one its ``Idempotency-Key`` names, which an
    earlier send of the same request started."""

    session_id: str
    turn: int
    joined: bool = False


@dataclass(frozen=True)
class Owned:
    """What the ownership check let through: the caller's session, and the turn number of a turn's route."""

    session_id: str
    turn_number: int | None = None

    @property
    def turn(self) -> int:
        if self.turn_number is None:
            raise ValueError("this route names no turn")
        return self.turn_number


@dataclass
class Exchange:
    """One request being answered: the service's collaborators plus this request's clock."""

    service: Service
    request: Request
    clock: Clock
    started_at: float  # the clock's monotonic() when the request arrived
    known_owner: str | None = field(default=None, init=False)  # the caller, once asked (logged with the request)
    # the caller's standing, read after its turn began (limit_headers)
    _standing: Future[Standing | None] | None = field(default=None, init=False, repr=False)

    @property
    def table(self) -> ChatTable:
        return self.service.table

    @property
    def config(self) -> RelayConfig:
        return self.service.config

    def begin_turn(
        self,
        session_id: str | None,
        message: str,
        *,
        max_tokens: int | None,
        temperature: float | None,
        options: TurnOptions | None = None,
        not_found_advice: str = "",
    ) -> Begun:
        """Begin the caller's next turn: turn 1 of a new session (``session_id`` None), or the session's next; or,
        when the request's ``Idempotency-Key`` names a turn already, that one (``joined``).

        In one transaction with the turn's start, the caller's budget admits it (``429``, and nothing written, when it
        does not: :func:`~chatstream.relay.ratelimit.refused`) and the key is recorded; the same key with another
        request is ``422``. ``not_found_advice`` ends the ``404 session_not_found`` of a session that is not the
        caller's: what the request can change, when it has a field to (``POST /chat``'s ``session_id``).
        """
        owner = self.owner()
        key = idempotency.parse_key(self.request.header(idempotency.HEADER))
        admission = Admission(
            owner,
            self.config.caller_limits,
            reserve=max_tokens or self.config.max_tokens_limit,
            stale_after_ms=self.config.stale_turn_s * 1000,
            key=None if key is None else KeyClaim(key, self._fingerprint()),
        )
        try:
            if session_id is None:
                session_id = self.table.turns.start_first(
                    owner, message, max_tokens=max_tokens, temperature=temperature, options=options, admission=admission
                )
                return self._began(Begun(session_id, 1), owner)
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
                admission=admission,
            )
        except KeyInUse as used:
            return self._began(self._join(used.record), owner)
        except SessionNotFound:
            raise _session_not_found(str(session_id), not_found_advice) from None
        except TurnInProgress as err:
            # The session's turn may be the one this request started, sent before: the key names it.
            if (keyed := self.keyed_turn()) is not None:
                return keyed
            raise HttpError(
                409, "turn_in_progress", f"{err}; wait for it to end (or cancel it), then send again"
            ) from None
        except TurnLimitReached as err:
            if (keyed := self.keyed_turn()) is not None:
                return keyed
            raise HttpError(409, "turn_limit", f"{err}; start a new session to go on") from None
        except LimitExceeded as err:
            raise self._refused(owner, err) from None
        return self._began(Begun(session_id, turn), owner)

    def keyed_turn(self) -> Begun | None:
        """The turn the request's ``Idempotency-Key`` names (one read), when a check made before any write refused the
        request (its session's turn in progress, say): a request sent again after its turn began finds it so.
        ``None`` without a key, or when it names none; ``422`` when it names another request's."""
        key = idempotency.parse_key(self.request.header(idempotency.HEADER))
        if key is None:
            return None
        owner = self.owner()
        record = self.table.keys.get(owner, key)
        return None if record is None else self._began(self._join(record), owner)

    def generate(self, begun: Begun) -> TokenRecord | None:
        """Invoke the proxy for ``begun``'s turn (:meth:`invoke_proxy`): always for a turn this request started; for
        one it joined only while no generation has claimed it (the send that started it may have failed before it
        invoked the proxy; a second invocation of a claimed turn would generate nothing, its claim refused)."""
        if begun.joined:
            turn = self.table.get_turn(begun.session_id, begun.turn, texts=False)
            if turn is None or turn.status is not TurnStatus.IN_PROGRESS or turn.generator is not None:
                return None
            # A warning, as the proxy's dropped duplicate is: most often the first invocation is on its way, and this
            # one is dropped as a duplicate (DuplicateInvocations counts it).
            logger.warning(REINVOKED, extra={"session_id": begun.session_id, "turn": begun.turn})
        return self.invoke_proxy(GenerateRequest(begun.session_id, begun.turn))

    def limit_headers(self) -> dict[str, str]:
        """The caller's limits and what is left of them (``x-ratelimit-*``), as read beside the proxy's invoke; none
        when its limits are all off, or the read failed or took longer than :data:`STANDING_WAIT_S`."""
        if self._standing is None:
            return {}
        try:
            standing = self._standing.result(timeout=STANDING_WAIT_S)
            return {} if standing is None else ratelimit.headers(standing)
        except (FutureTimeout, ClientError, BotoCoreError, Throttled) as err:
            logger.warning("could not read the caller's limits", extra={"error": type(err).__name__})
            return {}

    def _began(self, begun: Begun, owner: str) -> Begun:
        """``begun``, with the caller's standing being read (for :meth:`limit_headers`) while the answer goes on: the
        counters its headers show (:meth:`~chatstream.table.budgets.Budgets.headline`), no more."""
        if self.table.budgets.limits_of(owner, self.config.caller_limits).any:
            self._standing = self.service.background.submit(
                self.table.budgets.headline, owner, self.config.caller_limits
            )
        if begun.joined:
            logger.info(
                "request joined the turn its Idempotency-Key names",
                extra={"session_id": begun.session_id, "turn": begun.turn},
            )
        return begun

    def _join(self, record: KeyRecord) -> Begun:
        if record.fingerprint != self._fingerprint():
            raise idempotency.reused(record.key)
        return Begun(record.session_id, record.turn, joined=True)

    def _fingerprint(self) -> str:
        return idempotency.fingerprint(self.request.method, self.request.path, self.request.body)

    def _refused(self, owner: str, err: LimitExceeded) -> HttpError:
        """The ``429`` of a turn the caller's budget refused, with its standing's headers; logged with its owner
        (``CallerRefusalsRule`` counts them by owner) and counted."""
        refusal = err.refusal
        self.service.refusals += 1
        logger.info(
            ratelimit.REFUSED,
            extra={"owner": owner, "limits": sorted(refusal.kinds), "retry_after_ms": refusal.retry_after_ms},
        )
        answer = ratelimit.refused(refusal)
        try:
            standing = self.table.budgets.standing(owner, self.config.caller_limits)
        except (ClientError, BotoCoreError, Throttled):
            return answer
        return HttpError(answer.status, answer.code, answer.message, {**ratelimit.headers(standing), **answer.headers})

    def owner(self) -> str:
        """Who is asking (:mod:`chatstream.relay.identity`), asked once per request; an :class:`HttpError` when the
        auth mode finds nobody (``403 forbidden``) or refuses the request's token (``401``, ``403``, ``503``)."""
        if self.known_owner is None:
            self.known_owner = self.service.identity.owner(self.request)
        return self.known_owner

    def authenticate(self) -> None:
        """The router's check before every route that is not public (:class:`~chatstream.relay.http.Router`)."""
        self.owner()

    def owned(self, params: Mapping[str, str]) -> Owned:
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
        return Owned(session_id, turn)

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
