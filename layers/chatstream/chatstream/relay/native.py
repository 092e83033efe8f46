"""The native endpoints (HTTP_API.md), declared on their own :data:`router`: health, the OpenAPI document, the page,
the page's sign-in configuration, ``POST /chat``, a session's history, a turn's events and its cancel. The first
four are public: they answer whoever asks (under ``AUTH_TYPE=JWT`` without a token); every other route names its
caller first (:mod:`chatstream.relay.identity`).

``POST /chat`` allocates the turn (:meth:`~chatstream.relay.exchange.Exchange.begin_turn`), invokes ProxyFunction
(:meth:`~chatstream.relay.exchange.Exchange.invoke_proxy`), and answers a stream: ``retry: 1000``, ``meta`` at once,
then the turn as :class:`~chatstream.relay.follow.Follower` emits it. When the invoke fails and the turn was ended as
an ``error`` (``proxy_unavailable``), the stream's ``meta`` is followed by that error. A request sent again with its
``Idempotency-Key`` joins the turn the first send started: the same stream, from its start or from the request's
``Last-Event-ID``; the proxy is invoked again only for a turn no generation has claimed (the first send may have
failed before it invoked it; a second invocation of a claimed turn generates nothing).

``POST …/cancel`` ends at once a turn no proxy invocation has claimed yet, ``cancelled``; a turn a generation claimed
gets its cancel flag (:meth:`~chatstream.relay.exchange.Exchange.cancel_turn`): ``202 cancelling`` either way.

The OpenAPI document, the page and the sign-in configuration are imported by their first request, not at init: only
their own requests need them (bench/README.md, "Where init goes").
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from chatstream.errors import TurnFinished, TurnNotFound
from chatstream.records import assistant_text, reasoning_text, tool_calls
from chatstream.relay import sse
from chatstream.relay.exchange import PROXY_UNAVAILABLE, Exchange
from chatstream.relay.follow import FollowStats, StreamOutcome, events_url, render
from chatstream.relay.http import HttpError, Response, Router, StreamInfo, StreamKind, json_response, sse_response
from chatstream.relay.tool_requests import check_answers
from chatstream.relay.validation import parse_chat_request, parse_pace, parse_position
from chatstream.status import TurnStatus

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from chatstream.records import TokenRecord
    from chatstream.relay.follow import Follower
    from chatstream.table import Turn
    from chatstream.tools import ToolCall
    from chatstream.turn_options import TurnOptions

RETRY_MS = 1000
# The advice of a POST /chat's 404 session_not_found: a path's session id (history, events, cancel) has no field to
# omit, and its 404 gives none.
OMIT_SESSION_ID = "omit session_id to start a new one"

router: Router[Exchange] = Router()


@router.get("/health", public=True)
def health(exchange: Exchange, params: Mapping[str, str]) -> Response:
    return json_response(200, {"status": "ok"})


@router.get("/openapi.json", public=True)
def openapi(exchange: Exchange, params: Mapping[str, str]) -> Response:
    from chatstream.relay.openai.endpoints import served_models
    from chatstream.relay.openapi import DOCUMENT

    return DOCUMENT.response(exchange.config.max_tokens_limit, served_models(exchange))


@router.get("/", public=True)
def page(exchange: Exchange, params: Mapping[str, str]) -> Response:
    from chatstream.relay.page import SITE
    from chatstream.relay.signin import page_sources

    return SITE.index(page_sources(exchange.config, exchange.service.verifier))


@router.get("/auth/config", public=True)
def auth_config(exchange: Exchange, params: Mapping[str, str]) -> Response:
    from chatstream.relay import signin

    return signin.auth_config(exchange.config, exchange.service.verifier)


@router.get("/static/{name}", public=True)
def asset(exchange: Exchange, params: Mapping[str, str]) -> Response:
    from chatstream.relay.page import SITE

    return SITE.asset(params["name"])


@router.get("/static/vendor/{name}", public=True)
def vendor_asset(exchange: Exchange, params: Mapping[str, str]) -> Response:
    from chatstream.relay.page import SITE, VENDOR

    return SITE.asset(f"{VENDOR}/{params['name']}")


@router.post("/chat")
def chat(exchange: Exchange, params: Mapping[str, str]) -> Response:
    pace = parse_pace(exchange.request.query.get("pace"))
    after = parse_position(exchange.request.header("last-event-id"), "Last-Event-ID", header=True)
    chat = parse_chat_request(
        exchange.request.body,
        max_tokens_limit=exchange.config.max_tokens_limit,
        valid_base64=exchange.request.body_is_valid_base64,
    )
    begun = None
    if chat.options is not None and chat.options.tool_results:
        assert chat.session_id is not None  # results come with one (parse_chat_request)
        try:
            _check_tool_results(exchange, chat.session_id, chat.options)
        except HttpError:
            # Sent again with its Idempotency-Key after its turn began: the results answered the turn before that one,
            # which is no longer the latest. The key names the turn to join.
            if (begun := exchange.keyed_turn()) is None:
                raise
    if begun is None:
        begun = exchange.begin_turn(
            chat.session_id,
            chat.message,
            max_tokens=chat.max_tokens,
            temperature=chat.temperature,
            options=chat.options,
            not_found_advice=OMIT_SESSION_ID,
        )
    session_id, turn = begun.session_id, begun.turn
    failure = exchange.generate(begun)
    stats = FollowStats()
    info = StreamInfo(StreamKind.CHAT, session_id, turn, stats, exchange.started_at)
    meta = sse.json_message(
        {"session_id": session_id, "turn": turn, "events_url": events_url(session_id, turn)}, event="meta"
    )
    limits = exchange.limit_headers()
    if failure is not None:
        return _with_headers(sse_response(_failed_stream(meta, failure, stats), info), limits)
    follower = exchange.follower(
        session_id, turn, after if begun.joined else None, stats, pace, new_turn=not begun.joined, ends_unstarted=True
    )
    return _with_headers(sse_response(_stream(meta, follower), info), limits)


def _with_headers(response: Response, headers: Mapping[str, str]) -> Response:
    return replace(response, headers={**response.headers, **headers}) if headers else response


@router.get("/sessions/{session_id}")
def history(exchange: Exchange, params: Mapping[str, str]) -> Response:
    session_id = exchange.owned(params).session_id
    turns = [_turn_view(exchange, turn) for turn in exchange.table.list_turns(session_id)]
    return json_response(200, {"session_id": session_id, "turns": turns})


@router.get("/sessions/{session_id}/turns/{turn}/events")
def events(exchange: Exchange, params: Mapping[str, str]) -> Response:
    header = parse_position(exchange.request.header("last-event-id"), "Last-Event-ID", header=True)
    query = parse_position(exchange.request.query.get("after"), "after")
    pace = parse_pace(exchange.request.query.get("pace"))
    after = header if header is not None else query
    owned = exchange.owned(params)
    turn = exchange.table.get_turn(owned.session_id, owned.turn, texts=False)
    if turn is None:
        raise _turn_not_found(owned.session_id, owned.turn)
    stats = FollowStats()
    info = StreamInfo(StreamKind.EVENTS, owned.session_id, turn.turn, stats, exchange.started_at)
    follower = exchange.follower(owned.session_id, turn.turn, after, stats, pace)
    return sse_response(_stream(None, follower), info)


@router.post("/sessions/{session_id}/turns/{turn}/cancel")
def cancel(exchange: Exchange, params: Mapping[str, str]) -> Response:
    owned = exchange.owned(params)
    session_id, turn = owned.session_id, owned.turn
    try:
        exchange.cancel_turn(session_id, turn)
    except TurnNotFound:
        raise _turn_not_found(session_id, turn) from None
    except TurnFinished:
        raise HttpError(
            409, "turn_finished", f"turn {turn} of session {session_id} already ended; there is nothing to cancel"
        ) from None
    return json_response(202, {"session_id": session_id, "turn": turn, "status": "cancelling"})


def _check_tool_results(exchange: Exchange, session_id: str, options: TurnOptions) -> None:
    """A turn's ``tool_results`` answer exactly the complete tool calls of the session's latest turn (``400`` naming
    a result for no such call, or a call left without one). A message without results after a turn that called
    tools is no such turn: the calls go unanswered, and the model is not shown them again."""
    owned = exchange.owned({"session_id": session_id})
    session = exchange.table.get_session(owned.session_id)
    latest = (
        None if session is None or not session.turn_count else exchange.table.get_turn(session_id, session.turn_count)
    )
    if latest is not None and not latest.finished:
        raise HttpError(
            409,
            "turn_in_progress",
            f"turn {latest.turn} of session {session_id} is still generating; send its tool results once it ends",
        )
    before = f"turn {latest.turn}" if latest is not None else "the session's latest turn"
    check_answers(latest.tool_calls if latest is not None else (), options.tool_results, "tool_results", before)


def _stream(meta: str | None, follower: Follower) -> Iterator[str]:
    # The first chunk goes out at once: the prelude is sent with it, before any table read.
    yield sse.retry(RETRY_MS) + (meta or "")
    if meta is not None:
        follower.stats.events_sent += 1
    yield from follower.events()


def _failed_stream(meta: str, failure: TokenRecord, stats: FollowStats) -> Iterator[str]:
    yield sse.retry(RETRY_MS) + meta
    stats.events_sent += 2
    stats.outcome = StreamOutcome.ERROR
    stats.error_code = PROXY_UNAVAILABLE
    yield render(failure)


def _turn_view(exchange: Exchange, turn: Turn) -> dict[str, Any]:
    assistant, reasoning, calls = turn.assistant, turn.reasoning, turn.tool_calls
    if turn.status is TurnStatus.IN_PROGRESS:
        records = exchange.table.query_records(turn.session_id, turn.turn)
        assistant, reasoning, calls = assistant_text(records), reasoning_text(records), tuple(tool_calls(records))
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
    if calls:
        view["tool_calls"] = [tool_call_view(index, call) for index, call in enumerate(calls)]
    if turn.options.tool_results:
        view["tool_results"] = [result.to_item() for result in turn.options.tool_results]
    if turn.error is not None:
        view["error"] = dict(turn.error)
    return view


def tool_call_view(index: int, call: ToolCall) -> dict[str, Any]:
    """A tool call as the history shows it: its ``index`` in the reply, ``id``, ``name``, its whole ``arguments``
    (JSON text), and ``complete`` (false for a call the turn ended inside, whose arguments are cut short)."""
    return {"index": index, "id": call.id, "name": call.name, "arguments": call.arguments, "complete": call.complete}


def _turn_not_found(session_id: str, turn: int) -> HttpError:
    return HttpError(404, "turn_not_found", f"session {session_id} has no turn {turn}")
