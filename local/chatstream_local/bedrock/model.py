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
=====================  ======================================================================

A command word (``/long``, ``/error-after``, ``/throttle``, ``/think``) with a missing, extra or out-of-range
argument is a ``ValidationException`` (``/think`` needs N and a message that is not itself ``/think``).
``inferenceConfig.maxTokens`` cuts the reply after that many deltas, reasoning deltas included, as a reasoning
model's budget counts its thinking (``stopReason: max_tokens``); ``inferenceConfig.stopSequences`` cut the reply's
text before the first occurrence of any of them (``stopReason: stop_sequence``), before ``maxTokens`` applies.
Tests, the chaos run and the benchmark compute the reply they expect with :func:`plan_reply`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from chatstream_local.bedrock.converse import InvalidRequest

if TYPE_CHECKING:
    from collections.abc import Sequence

MAX_LONG = 100_000

_DIGITS = re.compile(r"[0-9]+")
_THINK = re.compile(r"\s*/think(?:\s+(?P<count>\S+))?(?:\s+(?P<rest>\S.*))?", re.DOTALL)
# A delta is a run of whitespace followed by a run of non-whitespace; whitespace that ends the
# text rides on the last delta. Consecutive matches tile the text, so "".join(deltas) == text.
_DELTA = re.compile(r"\s*\S+(?:\s+\Z)?")

Ending = Literal["end_turn", "max_tokens", "stop_sequence", "model_stream_error", "throttled"]


@dataclass(frozen=True)
class Reply:
    """What the model does for one request: the deltas it streams, then how the stream ends.

    ``ending`` is ``end_turn`` or ``max_tokens`` (a normal ``messageStop``), ``model_stream_error``
    (a ``modelStreamErrorException`` frame after the deltas) or ``throttled`` (HTTP 429 before
    the stream; ``deltas`` is empty). ``reasoning``: the reasoning deltas streamed before the reply's
    (``/think``); ``signed``: whether the reasoning ends with its signature (it was not cut short).
    """

    deltas: tuple[str, ...]
    ending: Ending
    reasoning: tuple[str, ...] = ()
    signed: bool = False

    @property
    def text(self) -> str:
        return "".join(self.deltas)

    @property
    def reasoning_text(self) -> str:
        return "".join(self.reasoning)

    @property
    def stop_reason(self) -> str | None:
        """The ``messageStop`` stop reason, or ``None`` when the reply ends in an error."""
        return self.ending if self.ending in ("end_turn", "max_tokens", "stop_sequence") else None


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


def _think(
    message: str,
    max_tokens: int | None,
    system: Sequence[str],
    messages: Sequence[tuple[str, str]],
    stop: Sequence[str],
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
    answer = plan_reply(rest, remaining, system=system, messages=messages, stop=stop)
    if answer.ending == "throttled":
        return answer
    return Reply(answer.deltas, answer.ending, reasoning, signed=True)


def plan_reply(
    message: str,
    max_tokens: int | None = None,
    *,
    system: Sequence[str] = (),
    messages: Sequence[tuple[str, str]] = (),
    stop: Sequence[str] = (),
) -> Reply:
    """The reply to the user's ``message`` (the last user message's text), without any HTTP.

    ``system``: the request's system texts; ``messages``: its (role, text) messages (``/history`` spells them;
    default: ``message`` alone); ``stop``: its stop sequences. Raises :class:`InvalidRequest` for a malformed
    command or a ``max_tokens`` below 1.
    """
    if max_tokens is not None and max_tokens < 1:
        raise InvalidRequest(f"maxTokens must be at least 1, got {max_tokens}")
    words = message.split()
    command = words[0] if words else ""
    if command == "/throttle":
        if len(words) != 1:
            raise InvalidRequest("/throttle takes no argument")
        return Reply((), "throttled")
    if command == "/think":
        return _think(message, max_tokens, system, messages, stop)
    if command == "/long":
        return _cut(_long_deltas(_command_argument(words, 1)), "end_turn", max_tokens, stop)
    if command == "/error-after":
        return _cut(_long_deltas(_command_argument(words, 0)), "model_stream_error", max_tokens, stop)
    if command == "/history" and len(words) == 1:
        seen = messages or (("user", message),)
        digest = " | ".join(f"{role}: {text}" for role, text in seen)
        return _cut(split_deltas(f"{len(seen)} messages: {digest}"), "end_turn", max_tokens, stop)
    if command == "/system" and len(words) == 1:
        return _cut(split_deltas(f"System: {' | '.join(system) or 'none'}"), "end_turn", max_tokens, stop)
    return _cut(split_deltas(f"You said: {message}"), "end_turn", max_tokens, stop)
