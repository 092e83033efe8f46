"""The ``/v1`` endpoints: OpenAI's Responses and Chat Completions APIs on the relay's turns (HTTP_API.md, "/v1").

They share everything with the native API: a turn is allocated, the proxy invoked with its key only, and the reply
followed from the table by the same :class:`~chatstream.relay.follow.Follower`; ownership is the native routes'
(a response of another principal reads as unknown, ``404``). Every error is in OpenAI's shape
(:mod:`chatstream.relay.openai.errors`).
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from itertools import chain
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from chatstream.errors import Throttled, TurnFinished, TurnNotFound
from chatstream.records import RecordType, ToolCallRef
from chatstream.relay.follow import TOOL_CALL, FollowStats
from chatstream.relay.http import SSE_HEADERS, HttpError, Response, StreamInfo, StreamKind, json_response
from chatstream.relay.openai.chat import ChunkStream, completion_object
from chatstream.relay.openai.errors import OpenAIError, failed_status, invalid, openai_api
from chatstream.relay.openai.requests import (
    Said,
    leading_results,
    parse_chat_completion_request,
    parse_responses_request,
)
from chatstream.relay.openai.responses import (
    Output,
    ResponseStream,
    output_of,
    parse_item_id,
    parse_response_id,
    response_id,
    response_object,
)
from chatstream.relay.openai.status import ResponseStatus
from chatstream.relay.openai.turn_events import kept_alive, turn_events
from chatstream.relay.tool_requests import check_answers
from chatstream.relay.validation import parse_pace, parse_position
from chatstream.status import TurnStatus

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from chatstream.relay.exchange import Begun, Exchange
    from chatstream.relay.openai.requests import ChatCompletionRequest, ResponsesRequest
    from chatstream.table import Turn
    from chatstream.tools import ToolResult

logger = logging.getLogger(__name__)

MODEL_ALIAS = "chatstream"
SESSION_HEADER = "X-Chatstream-Session-Id"
TURN_HEADER = "X-Chatstream-Turn"
# OpenAI's SDKs retry a 409, 429 or 5xx unless the answer says otherwise (openai-python's _should_retry)
_NOT_RETRIED: Mapping[str, str] = MappingProxyType({"x-should-retry": "false"})
CANCEL_WAIT_S = 10.0  # how long a cancel waits for the turn to end before answering
_CANCEL_POLL_S = 0.1


def served_models(exchange: Exchange) -> list[str]:
    model_id = exchange.config.model_id
    return [model_id, MODEL_ALIAS] if model_id else []


def _check_model(exchange: Exchange, model: str) -> str:
    """The deployment's model id, when ``model`` names it (or its alias); else ``404 model_not_found``."""
    served = served_models(exchange)
    if model not in served:
        listed = " or ".join(repr(name) for name in served) or "no model (MODEL_ID is not set)"
        raise OpenAIError(
            404, "model_not_found", f"The model {model!r} does not exist; this deployment serves {listed}", "model"
        )
    return served[0]


def _model_object(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "chatstream"}


@openai_api
def list_models(exchange: Exchange, params: Mapping[str, str]) -> Response:
    return json_response(200, {"object": "list", "data": [_model_object(name) for name in served_models(exchange)]})


@openai_api
def get_model(exchange: Exchange, params: Mapping[str, str]) -> Response:
    _check_model(exchange, params["model"])
    return json_response(200, _model_object(params["model"]))


# ------------------------------------------------------------------------------ responses


@openai_api
def create_response(exchange: Exchange, params: Mapping[str, str]) -> Response:
    request = parse_responses_request(
        exchange.request.body,
        **_body_limits(exchange),
        resolve_item=lambda item_id, param: _referenced_item(exchange, item_id, param),
    )
    model, pace = _check_model(exchange, request.model), _pace(exchange)
    begun = _begin_response(exchange, request)
    session_id, turn_number = begun.session_id, begun.turn
    with _turn_started(session_id, turn_number) as headers:
        exchange.generate(begun)
        headers.update(exchange.limit_headers())
        turn = _turn(exchange, session_id, turn_number)
        if request.stream:
            return _response_stream(
                exchange, turn, -1, headers, pace, new_turn=not begun.joined, ends_unstarted=not request.background
            )
        if request.background and begun.joined:  # the same response, as it is now
            return json_response(200, _object(exchange, turn), headers)
        if request.background:
            queued = response_object(turn, model, Output(session_id, turn_number), status=ResponseStatus.QUEUED)
            return json_response(200, queued, headers)
        _drain(exchange, session_id, turn_number)
        turn = _turn(exchange, session_id, turn_number)
        if turn.status is TurnStatus.ERROR:
            # As a chat completion's: the SDK raises, and retries a 429 or 5xx (a new turn). Not a continuation's: its
            # previous_response_id is no longer its conversation's latest response, and a retry would be refused 400.
            continuation = request.previous_response_id is not None
            raise _turn_failed(turn, {**headers, **_NOT_RETRIED} if continuation else headers)
        if not turn.finished:
            raise _still_generating(session_id, turn_number, headers)
        return json_response(200, _object(exchange, turn), headers)


def _begin_response(exchange: Exchange, request: ResponsesRequest) -> Begun:
    """The turn a new response begins (:meth:`~chatstream.relay.exchange.Exchange.begin_turn`), after its
    ``previous_response_id``, which must be its conversation's latest response; a request sent again with its
    ``Idempotency-Key`` after its turn began (its previous response no longer the latest) joins that turn."""
    session_id = None
    if request.previous_response_id is not None:
        try:
            session_id = _previous(exchange, request.previous_response_id, leading_results(request))
        except OpenAIError:
            if (keyed := exchange.keyed_turn()) is not None:
                return keyed
            raise
    try:
        return exchange.begin_turn(
            session_id,
            request.message,
            max_tokens=request.max_tokens,
            temperature=request.temperature,
            options=request.options,
        )
    except HttpError as err:
        if request.previous_response_id is None or err.code not in ("turn_in_progress", "turn_limit"):
            raise
        raise _conversation_conflict(exchange, err.code, request.previous_response_id) from None


@openai_api
def get_response(exchange: Exchange, params: Mapping[str, str]) -> Response:
    turn = _owned_response(exchange, params["response_id"])
    query = exchange.request.query
    stream = query.get("stream", "false")
    if stream not in ("true", "false"):
        raise invalid("stream must be true or false", "stream")
    pace = _pace(exchange)
    after = _sequence_number(query.get("starting_after"), "starting_after")  # checked with or without a stream
    if stream == "false":
        return json_response(200, _object(exchange, turn), _session_headers(turn.session_id, turn.turn))
    return _response_stream(
        exchange, turn, -1 if after is None else after, _session_headers(turn.session_id, turn.turn), pace
    )


@openai_api
def cancel_response(exchange: Exchange, params: Mapping[str, str]) -> Response:
    turn = _owned_response(exchange, params["response_id"])
    try:
        ended_now = exchange.cancel_turn(turn.session_id, turn.turn)
    except TurnNotFound:
        raise _response_not_found(params["response_id"]) from None
    except TurnFinished:
        ended = _turn(exchange, turn.session_id, turn.turn)
        if ended.status is TurnStatus.CANCELLED:
            return json_response(200, _object(exchange, ended))
        raise OpenAIError(
            409,
            "response_finished",
            f"response {params['response_id']} already ended; there is nothing to cancel",
            headers=_NOT_RETRIED,  # it stays ended: OpenAI's SDKs would send it again twice for nothing
        ) from None
    if ended_now:  # no generation had claimed it: it ended cancelled here, nothing to wait for
        return json_response(200, _object(exchange, _turn(exchange, turn.session_id, turn.turn)))
    clock = exchange.clock
    deadline = clock.monotonic() + CANCEL_WAIT_S
    while not turn.finished and clock.monotonic() < deadline:
        clock.sleep(_CANCEL_POLL_S)
        turn = _turn(exchange, turn.session_id, turn.turn)
    return json_response(200, _object(exchange, turn))


def _response_stream(
    exchange: Exchange,
    turn: Turn,
    after: int,
    headers: Mapping[str, str],
    pace: bool | None,
    *,
    new_turn: bool = False,
    ends_unstarted: bool = False,
) -> Response:
    events = ResponseStream(exchange.table, turn, exchange.config.model_id, after)
    stats = FollowStats()
    # The events are numbered from the turn's start whatever `after` is: the stored pieces the client has are numbered
    # without being sent, and the follower goes on from the position after them (inside a record if need be), so the
    # numbers are the same in every request whether or not either paced the text.
    had, position = (
        events.resume_point(exchange.table.query_records(turn.session_id, turn.turn)) if after > 1 else ([], None)
    )
    follower = exchange.follower(
        turn.session_id, turn.turn, position, stats, pace, new_turn=new_turn, ends_unstarted=ends_unstarted
    )
    source = chain(had, turn_events(follower.events()))
    info = StreamInfo(
        StreamKind.EVENTS if after >= 0 else StreamKind.CHAT, turn.session_id, turn.turn, stats, exchange.started_at
    )
    body = kept_alive(events.events, source, follower.clock.monotonic, follower.settings.keepalive_s)
    return Response(200, {**SSE_HEADERS, **headers}, chain(events.prelude(), body), info)


def _object(exchange: Exchange, turn: Turn) -> dict[str, Any]:
    """The response object of ``turn`` as stored now (its output from its records)."""
    records = exchange.table.query_records(turn.session_id, turn.turn)
    if turn.finished and not (records and records[-1].is_terminal):
        # The consumer ends the turn item before it writes the turn's last records: the item has the whole reply and
        # every call.
        records = [record for record in records if record.type not in (RecordType.DELTA, RecordType.TOOL_USE)]
        output = output_of(turn.session_id, turn.turn, records, finished=False)
        if turn.assistant:
            output.add("token", turn.assistant)
        for index, call in enumerate(turn.tool_calls):
            output.add_call(ToolCallRef(index, call.id, call.name), call.arguments, call.complete)
        output.close()
    else:
        output = output_of(turn.session_id, turn.turn, records, finished=turn.finished)
    return response_object(turn, exchange.config.model_id, output)


def _previous(exchange: Exchange, previous: str, results: tuple[ToolResult, ...]) -> str:
    """The session a new response continues: ``previous`` must be the latest response of one of the caller's, and
    ``results`` (the ``function_call_output`` items the input begins with) answer exactly its complete tool calls,
    as OpenAI requires ("No tool output found for function call …")."""
    parsed = parse_response_id(previous)
    if parsed is None:
        raise _response_not_found(previous, "previous_response_id")
    session_id, turn_number = parsed
    session = exchange.table.get_session(session_id)
    if session is None or session.owner != exchange.owner() or turn_number > session.turn_count:
        raise _response_not_found(previous, "previous_response_id")
    if turn_number != session.turn_count:
        latest = response_id(session_id, session.turn_count)
        raise invalid(
            f"{previous} is not the latest response of its conversation; continue from {latest}",
            "previous_response_id",
        )
    if session.active_turn is None:  # a response in progress has no calls yet: the new turn's 409 says so
        calls = turn.tool_calls if (turn := exchange.table.get_turn(session_id, turn_number)) is not None else ()
        check_answers(calls, results, "input", previous)
    return session_id


def _conversation_conflict(exchange: Exchange, code: str, previous: str) -> OpenAIError:
    """A continuation the conversation cannot take now (``409``), in the Responses API's words.

    ``turn_limit`` never clears, so OpenAI's SDKs, which retry every ``409`` unless told not to (``x-should-retry``),
    are told not to. ``turn_in_progress`` may: nothing was started, and the response in progress may end during the
    SDK's retries (about a second or two), when a retry goes on from it."""
    if code == "turn_limit":
        limit = exchange.config.max_turns_per_session
        message = (
            f"the conversation of {previous} has taken its limit of {limit} responses; start a new conversation "
            "(no previous_response_id; its messages in input)"
        )
        return OpenAIError(409, code, message, "previous_response_id", _NOT_RETRIED)
    message = (
        f"the conversation of {previous} has a response still in progress; wait for it to end (or cancel it), "
        "then send again"
    )
    return OpenAIError(409, code, message, "previous_response_id")


def _owned_response(exchange: Exchange, value: str) -> Turn:
    parsed = parse_response_id(value)
    if parsed is None:
        raise _response_not_found(value)
    session_id, turn_number = parsed
    try:
        exchange.owned({"session_id": session_id})  # 403 without a caller
    except HttpError as err:
        if err.status != 404:
            raise
        raise _response_not_found(value) from None  # another principal's, or no such session
    turn = exchange.table.get_turn(session_id, turn_number)
    if turn is None:
        raise _response_not_found(value)
    return turn


def _referenced_item(exchange: Exchange, item_id: str, param: str) -> Said | None:
    """What the earlier output item an ``item_reference`` names said, the caller's own: a message's text, or a
    function call; ``None`` for a reasoning item (the model is never sent reasoning back)."""
    parsed = parse_item_id(item_id)
    shown = item_id if len(item_id) <= 160 else item_id[:160] + "…"
    if parsed is None:
        raise OpenAIError(404, "not_found", f"No item found with id {shown!r}", param)
    kind, session_id, turn_number, index = parsed
    try:
        turn = _owned_response(exchange, response_id(session_id, turn_number))
    except OpenAIError as err:
        if err.status != 404:
            raise
        raise OpenAIError(404, "not_found", f"No item found with id {shown!r}", param) from None
    if not turn.finished and kind != "reasoning":
        raise invalid(f"{param} names an item of a response still in progress ({shown})", param)
    if kind == TOOL_CALL:
        calls = [call for position, call in enumerate(turn.tool_calls) if position == index and call.complete]
        if not calls:
            raise OpenAIError(404, "not_found", f"No item found with id {shown!r}", param)
        return Said("assistant", "", calls=(calls[0],))
    if kind == "reasoning" or not turn.assistant:
        return None  # nothing the model is sent: reasoning, or a reply without text
    return Said("assistant", turn.assistant)


def _response_not_found(value: str, param: str | None = None) -> OpenAIError:
    shown = value if len(value) <= 160 else value[:160] + "…"
    return OpenAIError(404, "not_found", f"No response found with id {shown!r}", param)


# ------------------------------------------------------------------------------ chat completions


@openai_api
def create_chat_completion(exchange: Exchange, params: Mapping[str, str]) -> Response:
    request = parse_chat_completion_request(exchange.request.body, **_body_limits(exchange))
    model, pace = _check_model(exchange, request.model), _pace(exchange)
    begun = exchange.begin_turn(
        None, request.message, max_tokens=request.max_tokens, temperature=request.temperature, options=request.options
    )
    with _turn_started(begun.session_id, begun.turn) as headers:
        exchange.generate(begun)
        headers.update(exchange.limit_headers())
        return _chat_completion(exchange, request, model, pace, begun, headers)


def _chat_completion(
    exchange: Exchange,
    request: ChatCompletionRequest,
    model: str,
    pace: bool | None,
    begun: Begun,
    headers: dict[str, str],
) -> Response:
    session_id, turn_number = begun.session_id, begun.turn
    # A request that joined its turn answers what the first send did: the turn's own time (a new one's is now)
    created = _turn(exchange, session_id, turn_number).created_at // 1000 if begun.joined else None
    if request.stream:
        chunks = ChunkStream(session_id, model, created or exchange.clock.now_ms() // 1000, request.include_usage)
        stats = FollowStats()
        follower = exchange.follower(
            session_id, turn_number, None, stats, pace, new_turn=not begun.joined, ends_unstarted=True
        )
        info = StreamInfo(StreamKind.CHAT, session_id, turn_number, stats, exchange.started_at)
        rest = kept_alive(
            chunks.chunks, turn_events(follower.events()), follower.clock.monotonic, follower.settings.keepalive_s
        )
        stream = chain([chunks.first()], rest)
        return Response(200, {**SSE_HEADERS, **headers}, stream, info)
    _drain(exchange, session_id, turn_number)
    turn = _turn(exchange, session_id, turn_number)
    if turn.status is TurnStatus.ERROR:
        raise _turn_failed(turn, headers)
    if not turn.finished:
        raise _still_generating(session_id, turn_number, headers)
    # Not streamed: the turn's own time, so a request sent again with its key gets the same completion
    created = turn.created_at // 1000
    body = completion_object(
        session_id, model, created, turn.assistant or "", turn.stop_reason, turn.usage, turn.reasoning, turn.tool_calls
    )
    return json_response(200, body, headers)


# ------------------------------------------------------------------------------ helpers


@contextmanager
def _turn_started(session_id: str, turn_number: int) -> Iterator[dict[str, str]]:
    """The answer's work once its turn is allocated (its generation invoked, or being invoked), with the turn's
    headers. An error there (the table throttled, say) must not make an SDK send the request again, which could
    start a second generation beside this one: it names the turn, says where to follow it and carries
    ``x-should-retry: false``, which OpenAI's SDKs obey. An error the code raises itself (an :class:`HttpError`: a
    proxy that could not be invoked, a failed turn, one still generating) says its own."""
    headers = _session_headers(session_id, turn_number)
    try:
        yield headers
    except HttpError:
        raise
    except Exception as err:
        throttled = isinstance(err, Throttled)
        if throttled:
            logger.warning("throttled after the turn started", extra={"error": str(err)})
        else:
            logger.exception("unexpected failure after the turn started")
        url = f"/sessions/{session_id}/turns/{turn_number}/events"
        status, code = (503, "unavailable") if throttled else (500, "internal_error")
        message = f"the reply could not be read, but it is being generated: follow it at {url}"
        raise OpenAIError(
            status, code, message, headers={**headers, **_NOT_RETRIED}, unexpected=not throttled
        ) from None


def _turn_failed(turn: Turn, headers: Mapping[str, str]) -> OpenAIError:
    """The answer, not streamed, to a turn that failed: its error code, with the status OpenAI's SDKs raise for it
    (:func:`~chatstream.relay.openai.errors.failed_status`). It names the turn (its headers): the turn was started,
    and its history keeps what it produced."""
    error = dict(turn.error or {})
    code = str(error.get("code") or "model_error")
    message = str(error.get("message") or "the generation failed")
    return OpenAIError(failed_status(code), code, message, headers=headers)


def _still_generating(session_id: str, turn_number: int, headers: Mapping[str, str]) -> OpenAIError:
    """The answer, not streamed, to a turn that outlived its wait: where to follow it. Asking again would start a
    second generation while this one goes on, so OpenAI's SDKs are told not to retry (they obey ``x-should-retry``).
    """
    url = f"/sessions/{session_id}/turns/{turn_number}/events"
    read = f"GET /v1/responses/{response_id(session_id, turn_number)}"
    message = f"the reply is still being generated; follow it at {url}, or read it with {read} (?stream=true: follow)"
    return OpenAIError(503, "still_generating", message, headers={**headers, **_NOT_RETRIED})


def _sequence_number(value: str | None, name: str) -> int | None:
    """``starting_after``: a sequence number the stream sent (``None`` when not given)."""
    try:
        position = parse_position(value, name)
    except HttpError:
        position = None
        malformed = True
    else:
        malformed = position is not None and position.offset is not None
    if malformed:
        shown = value if value is None or len(value) <= 40 else value[:40] + "…"
        raise invalid(f"{name} must be a sequence number the stream sent (a non-negative integer), got {shown!r}", name)
    return None if position is None else position.seq


def _body_limits(exchange: Exchange) -> dict[str, Any]:
    """What a /v1 body parser needs of the deployment and the request besides the body."""
    return {
        "max_tokens_limit": exchange.config.max_tokens_limit,
        "valid_base64": exchange.request.body_is_valid_base64,
    }


def _pace(exchange: Exchange) -> bool | None:
    """``?pace=``, checked before anything is started: a malformed value is refused whether or not the answer
    streams."""
    return parse_pace(exchange.request.query.get("pace"))


def _session_headers(session_id: str, turn: int) -> dict[str, str]:
    return {SESSION_HEADER: session_id, TURN_HEADER: str(turn)}


def _turn(exchange: Exchange, session_id: str, turn_number: int) -> Turn:
    turn = exchange.table.get_turn(session_id, turn_number)
    if turn is None:
        raise _response_not_found(response_id(session_id, turn_number))
    return turn


def _drain(exchange: Exchange, session_id: str, turn_number: int) -> None:
    """Follow the turn to its end, for an answer that is not streamed; or until its wait is over
    (:data:`~chatstream.relay.exchange.NON_STREAMED_WAIT_S`, before OpenAI's SDKs time the request out and send it
    again) or the relay's time is."""
    follower = exchange.follower(
        session_id, turn_number, None, FollowStats(), pace=False, new_turn=True, to_the_end=True, ends_unstarted=True
    )
    for _ in follower.events():
        pass
