"""The local model's replies: what it answers to a message, decided without any HTTP.

The reply depends only on the text of the last user message:

=====================  ======================================================================
message                reply
=====================  ======================================================================
anything else          ``You said: <message>``, one delta per word (see :func:`split_deltas`)
``/long N``            ``w1 w2 … wN``, one delta per word (``w1``, `` w2``, …); 1 ≤ N ≤ 100,000
``/error-after N``     the first N deltas of ``/long N`` (0 ≤ N ≤ 100,000), then a mid-stream
                       ``modelStreamErrorException``
``/throttle``          ``ThrottlingException`` (HTTP 429) before the stream starts
``/history``           ``N messages: user: <text> | assistant: <text> | …``: every message of the
                       request, in order, the last (``/history``) included
``/system``            ``System: <text>`` (system blocks joined by `` | ``), or ``System: none``
``/think N <rest>``    N reasoning words (``r1 r2 … rN``, one ``reasoningContent`` delta per word,
                       then its signature), then exactly the reply to ``<rest>``; 1 ≤ N ≤ 100,000
``/call NAME {json}``  with tools declared: one line per tool call, in order (several lines:
                       parallel calls in one message), each call's ``{json}`` streamed as its
                       input in deltas of :data:`ARGUMENT_PIECE` characters after an empty one
                       (none: no input, ``{}`` for the reader), ``stopReason: tool_use``; the
                       message's other lines are answered first as text (``You said: …``). A
                       line naming a tool not declared: ``I have no tool named NAME.`` in text,
                       and no call. Without tools, ``/call`` is just text
tool results last      ``Tool NAME said: CONTENT``, one line per result, in order
=====================  ======================================================================

The arguments are streamed as written, so a ``{json}`` that is not a JSON object gives a reader arguments it must
refuse. A call's id is ``tooluse_`` and 24 hex digits that the request's messages and the call's place decide
(:func:`call_id`), so the same conversation always gets the same ids and a later turn's calls other ones. A reply
that calls tools is cut neither by ``maxTokens`` nor by stop sequences.

A command word (``/long``, ``/error-after``, ``/throttle``, ``/think``) with a missing, extra or out-of-range
argument is a ``ValidationException`` (``/think`` needs N and a message that is not itself ``/think``).
``inferenceConfig.maxTokens`` cuts the reply after that many deltas, reasoning deltas included, as a reasoning
model's budget counts its thinking (``stopReason: max_tokens``); ``inferenceConfig.stopSequences`` cut the reply's
text before the first occurrence of any of them (``stopReason: stop_sequence``), before ``maxTokens`` applies.
Tests, the chaos run and the benchmark compute the reply they expect with :func:`plan_reply`.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from chatstream_local.bedrock.converse import InvalidRequest

if TYPE_CHECKING:
    from collections.abc import Sequence

MAX_LONG = 100_000
ARGUMENT_PIECE = 8  # characters of a tool call's arguments per delta

_DIGITS = re.compile(r"[0-9]+")
_THINK = re.compile(r"\s*/think(?:\s+(?P<count>\S+))?(?:\s+(?P<rest>\S.*))?", re.DOTALL)
# A delta is a run of whitespace followed by a run of non-whitespace; whitespace that ends the
# text rides on the last delta. Consecutive matches tile the text, so "".join(deltas) == text.
_DELTA = re.compile(r"\s*\S+(?:\s+\Z)?")
_CALL = re.compile(r"/call\s+(?P<name>\S+)(?:\s+(?P<arguments>\S.*))?")  # one line, stripped

Ending = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use", "model_stream_error", "throttled"]


@dataclass(frozen=True)
class PlannedCall:
    """A tool call the model makes: its id, the tool's name, and its arguments' text as streamed."""

    id: str
    name: str
    arguments: str

    @property
    def pieces(self) -> tuple[str, ...]:
        """Its ``toolUse.input`` deltas: an empty one first (as Claude's stream has), then the arguments in pieces."""
        text = self.arguments
        return ("", *(text[at : at + ARGUMENT_PIECE] for at in range(0, len(text), ARGUMENT_PIECE)))


def call_id(messages: Sequence[tuple[str, str]], index: int) -> str:
    """The id of the request's ``index``-th call: decided by its messages and its place, as Bedrock's ``toolUseId``
    pattern allows."""
    digest = hashlib.sha256(json.dumps([list(messages), index], ensure_ascii=False).encode()).hexdigest()
    return f"tooluse_{digest[:24]}"


@dataclass(frozen=True)
class Reply:
    """What the model does for one request: the deltas it streams, then how the stream ends.

    ``ending`` is ``end_turn``, ``max_tokens``, ``stop_sequence`` or ``tool_use`` (a normal ``messageStop``),
    ``model_stream_error`` (a ``modelStreamErrorException`` frame after the deltas) or ``throttled`` (HTTP 429 before
    the stream; ``deltas`` is empty). ``reasoning``: the reasoning deltas streamed before the reply's
    (``/think``); ``signed``: whether the reasoning ends with its signature (it was not cut short); ``calls``: the tool
    calls made after the text (``/call``).
    """

    deltas: tuple[str, ...]
    ending: Ending
    reasoning: tuple[str, ...] = ()
    signed: bool = False
    calls: tuple[PlannedCall, ...] = ()

    @property
    def text(self) -> str:
        return "".join(self.deltas)

    @property
    def reasoning_text(self) -> str:
        return "".join(self.reasoning)

    @property
    def stop_reason(self) -> str | None:
        """The ``messageStop`` stop reason, or ``None`` when the reply ends in an error."""
        return self.ending if self.ending in ("end_turn", "max_tokens", "stop_sequence", "tool_use") else None


def split_deltas(text: str) -> tuple[str, ...]:
    """Split ``text`` into one delta per word, joining back to exactly ``text``.

    Each delta is the whitespace before a word plus the word, so every word after the first keeps
    its leading space (or newline, or tab, or run of them); trailing whitespace is appended to the
    last delta. Leading whitespace goes with the first word. Text without any word is one delta
    (or none when empty).
    """
    deltas = tuple(_DELTA.findall(text))
    if not deltas:
        return (text,) if text else ()
    return deltas


def _long_deltas(count: int, word: str = "w") -> tuple[str, ...]:
    return tuple(f"{word}{i}" if i == 1 else f" {word}{i}" for i in range(1, count + 1))


def _command_argument(words: Sequence[str], lowest: int) -> int:
    command = words[0]
    if len(words) != 2 or not _DIGITS.fullmatch(words[1]):
        raise InvalidRequest(f"{command} takes one whole number N, {lowest} <= N <= {MAX_LONG}")
    return _in_range(command, words[1], lowest)


def _in_range(command: str, digits: str, lowest: int) -> int:
    """``digits`` as a number from ``lowest`` to ``MAX_LONG``; read only when it is short enough to be one (Python
    refuses to read a number of more than 4,300 digits)."""
    stripped = digits.lstrip("0") or "0"
    if len(stripped) > len(str(MAX_LONG)):
        raise InvalidRequest(f"{command} N must be between {lowest} and {MAX_LONG}, got a {len(stripped)}-digit number")
    value = int(stripped)
    if not lowest <= value <= MAX_LONG:
        raise InvalidRequest(f"{command} N must be between {lowest} and {MAX_LONG}, got {value}")
    return value


def _cut(deltas: tuple[str, ...], ending: Ending, max_tokens: int | None, stop: Sequence[str] = ()) -> Reply:
    text = "".join(deltas)
    found = [index for index in (text.find(sequence) for sequence in stop) if index >= 0]
    if found:
        deltas, ending = split_deltas(text[: min(found)]), "stop_sequence"
    if max_tokens is not None and max_tokens < len(deltas):
        return Reply(deltas[:max_tokens], "max_tokens")
    return Reply(deltas, ending)


def _calls(
    message: str, tools: Sequence[str], messages: Sequence[tuple[str, str]], max_tokens: int | None, stop: Sequence[str]
) -> Reply | None:
    """The reply to a message with ``/call`` lines (``None``: it has none): its other lines as text, then the calls; or
    text saying which tools it does not have."""
    lines = message.split("\n")
    found = [(line, _CALL.fullmatch(line.strip())) for line in lines]
    calls = [match for _, match in found if match is not None]
    if not calls:
        return None
    unknown = dict.fromkeys(match["name"] for match in calls if match["name"] not in tools)
    if unknown:
        text = " ".join(f"I have no tool named {name}." for name in unknown)
        return _cut(split_deltas(text), "end_turn", max_tokens, stop)
    rest = "\n".join(line for line, match in found if match is None).strip()
    planned = tuple(
        PlannedCall(call_id(messages, index), match["name"], match["arguments"] or "")
        for index, match in enumerate(calls)
    )
    return Reply(split_deltas(f"You said: {rest}") if rest else (), "tool_use", calls=planned)


def _think(
    message: str,
    max_tokens: int | None,
    system: Sequence[str],
    messages: Sequence[tuple[str, str]],
    stop: Sequence[str],
    tools: Sequence[str] = (),
) -> Reply:
    """``/think N <rest>``: N reasoning words, signed, then the reply to ``<rest>``; ``max_tokens`` counts both."""
    match = _THINK.fullmatch(message)
    count, rest = (match["count"], match["rest"]) if match else (None, None)
    if count is None or rest is None or not _DIGITS.fullmatch(count):
        raise InvalidRequest(f"/think takes one whole number N, 1 <= N <= {MAX_LONG}, then a message")
    words = _in_range("/think", count, 1)
    if rest.split()[0] == "/think":
        raise InvalidRequest("/think takes a message that is not itself /think")
    reasoning = _long_deltas(words, "r")
    if max_tokens is not None and max_tokens <= len(reasoning):
        return Reply((), "max_tokens", reasoning[:max_tokens], signed=max_tokens == len(reasoning))
    remaining = None if max_tokens is None else max_tokens - len(reasoning)
    answer = plan_reply(rest, remaining, system=system, messages=messages, stop=stop, tools=tools)
    if answer.ending == "throttled":
        return answer
    return Reply(answer.deltas, answer.ending, reasoning, signed=True, calls=answer.calls)


def plan_reply(
    message: str,
    max_tokens: int | None = None,
    *,
    system: Sequence[str] = (),
    messages: Sequence[tuple[str, str]] = (),
    stop: Sequence[str] = (),
    tools: Sequence[str] = (),
    tool_results: Sequence[tuple[str, str]] = (),
) -> Reply:
    """The reply to the user's ``message`` (the last user message's text), without any HTTP.

    ``system``: the request's system texts; ``messages``: its (role, text) messages (``/history`` spells them, and
    they decide the calls' ids; default: ``message`` alone); ``stop``: its stop sequences; ``tools``: the names of the
    tools it declares; ``tool_results``: the (tool name, content) results its last message holds. Raises
    :class:`InvalidRequest` for a malformed command or a ``max_tokens`` below 1.
    """
    if max_tokens is not None and max_tokens < 1:
        raise InvalidRequest(f"maxTokens must be at least 1, got {max_tokens}")
    if tool_results:
        said = "\n".join(f"Tool {name} said: {content}" for name, content in tool_results)
        return _cut(split_deltas(said), "end_turn", max_tokens, stop)
    messages = messages or (("user", message),)
    words = message.split()
    command = words[0] if words else ""
    if command == "/throttle":
        if len(words) != 1:
            raise InvalidRequest("/throttle takes no argument")
        return Reply((), "throttled")
    if command == "/think":
        return _think(message, max_tokens, system, messages, stop, tools)
    if command == "/long":
        return _cut(_long_deltas(_command_argument(words, 1)), "end_turn", max_tokens, stop)
    if command == "/error-after":
        return _cut(_long_deltas(_command_argument(words, 0)), "model_stream_error", max_tokens, stop)
    if command == "/history" and len(words) == 1:
        digest = " | ".join(f"{role}: {text}" for role, text in messages)
        return _cut(split_deltas(f"{len(messages)} messages: {digest}"), "end_turn", max_tokens, stop)
    if command == "/system" and len(words) == 1:
        return _cut(split_deltas(f"System: {' | '.join(system) or 'none'}"), "end_turn", max_tokens, stop)
    calls = _calls(message, tools, messages, max_tokens, stop) if tools else None
    if calls is not None:
        return calls
    return _cut(split_deltas(f"You said: {message}"), "end_turn", max_tokens, stop)
