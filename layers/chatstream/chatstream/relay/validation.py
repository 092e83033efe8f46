"""Request validation, with the limits and error codes of HTTP_API.md.

``POST /chat`` body, checked in this order:

1. more than 256 KiB (262,144 bytes, after base64 decoding) → ``413 payload_too_large``;
2. not valid base64 or UTF-8, empty, not JSON (``NaN``/``Infinity`` are not JSON), nested beyond
   reason, or not a JSON object → ``400 invalid_json`` (a UTF-8 byte order mark before the JSON is ignored);
3. every field → ``400 invalid_request`` with a message that names the field:

   - ``message``: required, a string of 1 to 32,000 characters that is not only whitespace and is
     valid Unicode (no lone surrogates);
   - ``session_id``: optional (``null`` is the same as absent); otherwise a non-empty string. A string
     that cannot be a session id is answered ``404 session_not_found`` by the service, like any
     unknown session;
   - ``max_tokens``: optional, an integer (not a boolean; ``5.0`` is the integer 5, as JSON Schema's ``integer``
     and the OpenAPI document say, while ``5.5`` is refused) from 1 to the configured maximum;
   - ``temperature``: optional, a finite number (not a boolean) from 0 to 1;
   - ``tools``, ``tool_choice``, ``parallel_tool_calls``: the tools the model may call (``{"name", "description",
     "parameters"}``), which (``auto``, ``none``, ``required``, ``{"name": …}``), and whether several at once
     (:mod:`chatstream.relay.tool_requests` checks them);
   - ``tool_results``: ``[{"tool_call_id", "content"}]``, what the client's tools answered to the calls of the
     session's latest turn (it needs ``session_id``; the service checks that they answer exactly those calls).
     ``message`` is then optional;
   - any other field is refused (``invalid_request`` naming it), so a misspelt option such as
     ``"max_token"`` fails loudly instead of being ignored.

Resume position (``Last-Event-ID`` header or ``?after=``): an event id, ``<seq>`` (a non-negative decimal
integer of at most 8 digits) or ``<seq>.<offset>`` (a piece of a record: its offset at most 7 digits); else
``400 invalid_request``. The header's surrounding whitespace is allowed, and a blank one counts as absent; a query
parameter is taken exactly as sent, as ``?pace=`` is: ``?after=%202`` and a blank ``?after=`` are errors.

Pacing (``?pace=``): ``0`` (each record's text as one event) or ``1`` (paced text), whatever the relay's setting
(``PACE_TEXT``) says; else ``400 invalid_request``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from chatstream.records import MAX_SEQ
from chatstream.relay.http import HttpError
from chatstream.relay.pace import MAX_OFFSET_DIGITS, MalformedPosition, Position
from chatstream.relay.tool_requests import ToolStyle, call_id, parse_parallel, parse_tool_choice, parse_tools
from chatstream.text import WHITESPACE, is_blank
from chatstream.tools import ToolResult
from chatstream.turn_options import TurnOptions

MAX_MESSAGE_CHARS = 32_000
# A body holds a message of the full 32,000 characters however it is written: a character of the Basic Multilingual
# Plane takes at most 6 bytes in JSON (\uXXXX, as Python's json.dumps writes any non-ASCII one), 192,000 bytes, with
# room for the other fields (one beyond it, such as an emoji, escapes to a 12-byte surrogate pair: 21,000 of those
# fit). Lambda takes a 6 MB request, but a /v1 body's texts become the turn item (400 KB), which they must fit with
# room to spare: their UTF-8 is at most the body's size.
MAX_BODY_BYTES = 256 * 1024
CHAT_FIELDS = (
    "message",
    "session_id",
    "max_tokens",
    "temperature",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "tool_results",
)


@dataclass(frozen=True)
class ChatRequest:
    message: str  # "" for a turn of tool results alone
    session_id: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    options: TurnOptions | None = None  # the tools, the tool choice and the tool results, when given


def invalid_request(message: str) -> HttpError:
    return HttpError(400, "invalid_request", message)


def _invalid_json(message: str) -> HttpError:
    return HttpError(400, "invalid_json", message)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _parse_int(digits: str) -> int:
    """A JSON integer; one longer than any field takes (Python refuses to convert 4,300 digits) is read as the
    largest such number, out of every range, so the field's own check names it ("must be between …"), rather than a
    "not valid JSON" with Python's advice."""
    if len(digits) > _INT_DIGITS:
        return -_TOO_LONG if digits.startswith("-") else _TOO_LONG
    return int(digits)


_INT_DIGITS = 1000
_TOO_LONG = 10**_INT_DIGITS


def parse_json_object(
    body: bytes | None, *, valid_base64: bool = True, example: str = '{"message": "hello"}'
) -> dict[str, Any]:
    """The body as a JSON object, or the ``413``/``400`` error that says what is wrong with it."""
    if not valid_base64:
        raise _invalid_json("the body is marked base64-encoded but is not valid base64")
    if body is not None and len(body) > MAX_BODY_BYTES:
        limit = f"{MAX_BODY_BYTES} bytes ({MAX_BODY_BYTES // 1024} KiB)"
        raise HttpError(413, "payload_too_large", f"the body is {len(body)} bytes; the limit is {limit}")
    if not body or not body.strip():
        raise _invalid_json(f"the body is empty; send a JSON object such as {example}")
    try:
        # A byte order mark first (a file saved by a Windows editor, sent as the body) is ignored, as RFC 8259 (8.1)
        # lets a parser do.
        text = body.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as err:
        raise _invalid_json(f"the body is not valid UTF-8 (byte {err.start})") from None
    try:
        value = json.loads(text, parse_constant=_reject_constant, parse_int=_parse_int)
    except RecursionError:
        raise _invalid_json("the body is nested too deeply to be a chat request") from None
    except ValueError as err:
        raise _invalid_json(f"the body is not valid JSON: {err}") from None
    if not isinstance(value, dict):
        raise _invalid_json(f"the body must be a JSON object, not {_json_type(value)}")
    return value


def parse_chat_request(body: bytes | None, *, max_tokens_limit: int, valid_base64: bool = True) -> ChatRequest:
    fields = parse_json_object(body, valid_base64=valid_base64)
    unknown = sorted(name for name in fields if name not in CHAT_FIELDS)
    if unknown:
        raise invalid_request(f"unknown field {unknown[0]!r}; the fields are {', '.join(CHAT_FIELDS)}")
    session_id = _session_id(fields.get("session_id"))
    results = _tool_results(fields.get("tool_results"))
    if results and session_id is None:
        raise invalid_request("tool_results answer the tool calls of a session's latest turn: give its session_id")
    message = fields.get("message", _MISSING)
    tools = parse_tools(fields.get("tools"), ToolStyle.NATIVE)
    options = TurnOptions(
        tools=tools,
        tool_choice=parse_tool_choice(fields.get("tool_choice"), tools, ToolStyle.NATIVE),
        tool_results=results,
        parallel_tool_calls=parse_parallel(fields.get("parallel_tool_calls")),
    )
    return ChatRequest(
        message="" if results and message in (_MISSING, None, "") else _message(message),
        session_id=session_id,
        max_tokens=_max_tokens(fields.get("max_tokens"), max_tokens_limit),
        temperature=_temperature(fields.get("temperature")),
        options=options if options != TurnOptions() else None,
    )


_MISSING = object()


def _message(value: object) -> str:
    if value is _MISSING:
        raise invalid_request("message is required: the text to send to the model")
    if not isinstance(value, str):
        raise invalid_request(f"message must be a string, not {_json_type(value)}")
    if is_blank(value):
        raise invalid_request("message must not be empty or only whitespace")
    if len(value) > MAX_MESSAGE_CHARS:
        raise invalid_request(f"message is {len(value)} characters; the limit is {MAX_MESSAGE_CHARS}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise invalid_request("message contains invalid Unicode (a lone surrogate escape)") from None
    return value


def _tool_results(value: object) -> tuple[ToolResult, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not value:
        raise invalid_request('tool_results must be a non-empty list of {"tool_call_id", "content"}')
    results = []
    for index, item in enumerate(value):
        where = f"tool_results[{index}]"
        if not isinstance(item, dict) or set(item) != {"tool_call_id", "content"}:
            raise invalid_request(f'{where} must be {{"tool_call_id": "…", "content": "…"}}')
        results.append(
            ToolResult(call_id(item["tool_call_id"], f"{where}.tool_call_id"), _result(item["content"], where))
        )
    answered = [result.tool_call_id for result in results]
    if len(set(answered)) != len(answered):
        raise invalid_request("tool_results answer each tool call once")
    return tuple(results)


def _result(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise invalid_request(f"{where}.content must be a string (the tool's answer; it may be empty)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise invalid_request(f"{where}.content contains invalid Unicode (a lone surrogate escape)") from None
    return value


def _session_id(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid_request(f"session_id must be a string, not {_json_type(value)}")
    if not value:
        raise invalid_request("session_id must not be empty; omit it to start a new session")
    return value


def _max_tokens(value: object, limit: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # JSON has one number type: 5.0 and 5 are the same number
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid_request(f"max_tokens must be an integer, not {_json_type(value)}")
    if not 1 <= value <= limit:
        raise invalid_request(f"max_tokens must be between 1 and {limit}, got {value}")
    return value


def _temperature(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise invalid_request(f"temperature must be a number, not {_json_type(value)}")
    if not math.isfinite(value) or not 0 <= value <= 1:
        raise invalid_request(f"temperature must be between 0 and 1, got {value}")
    return float(value)


def parse_position(value: str | None, name: str, *, header: bool = False) -> Position | None:
    """A resume position: the last event id the client has (``None`` when not given).

    ``header``: a ``Last-Event-ID``, whose surrounding whitespace is not part of its value (HTTP trims a field's),
    and whose blank value means "no event yet" (what EventSource sends). A query parameter is taken as it is, as
    ``?pace=`` is: a client that writes ``?after=`` writes the id itself, and one it did not mean is an error.
    """
    if value is None:
        return None
    text = value.strip(WHITESPACE) if header else value
    if not text and header:
        return None
    try:
        return Position.parse(text)
    except MalformedPosition:
        raise invalid_request(
            f"{name} must be an event id the stream sent: <seq> (a non-negative integer up to {MAX_SEQ}) or "
            f"<seq>.<offset> (an offset of at most {MAX_OFFSET_DIGITS} digits), {_got(text)}"
        ) from None


def parse_pace(value: str | None) -> bool | None:
    """``?pace=``: ``0`` turns pacing off for this stream, ``1`` on; ``None``: the relay's setting."""
    if value is None:
        return None
    if value not in ("0", "1"):
        raise invalid_request(f"pace must be 0 (each record's text as one event) or 1 (paced text), {_got(value)}")
    return value == "1"


def _got(value: str) -> str:
    """How an error quotes a refused parameter: clipped, and with a hint when it holds a comma, since a Function URL
    joins the values of a query parameter (or header) sent more than once with commas (``?after=1&after=2`` arrives
    as ``1,2``)."""
    shown = value if len(value) <= 40 else value[:40] + "…"
    repeated = "; a parameter sent more than once arrives with its values joined by commas" if "," in value else ""
    return f"got {shown!r}{repeated}"


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"
