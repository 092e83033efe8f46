"""Chat Completions' objects and chunks, built from a turn.

Each request is a new session (its turn 1); its id, ``chatcmpl-<session_id>``, and the ``X-Chatstream-Session-Id``
header name it for the native API. A stream is ``chat.completion.chunk`` objects as ``data:`` lines (no ``event:``
field): the assistant role first, one chunk per piece of the text (the follower paces it,
:mod:`chatstream.relay.pace`), a last chunk with ``finish_reason``, with ``stream_options.include_usage`` every
chunk's ``usage: null`` and a final chunk with no choices and the usage, then ``data: [DONE]``. A turn that fails
(or a stream that cannot go on) ends with ``data: {"error": {…}}`` and no ``[DONE]``, which OpenAI's SDKs raise as
an ``APIError``.

Reasoning text (``event: reasoning`` in the native stream) is carried as the de-facto standard of OpenAI-compatible
servers carries it, apart from the reply: ``delta.reasoning_content`` in a stream's chunks (never in ``content``), and
``message.reasoning_content`` in a completion not streamed (DeepSeek's API, vLLM, SGLang; the Vercel AI SDK's
``@ai-sdk/openai-compatible`` reads ``delta.reasoning_content``, and openai-python keeps the field, its models allowing
extra fields). So a stream sends something while the model reasons: a proxy (CloudFront's 30 s, an ALB's or nginx's
60 s) or undici's 300 s ``bodyTimeout`` would cut one that stays silent until the reply. A completion without
reasoning has no such field, as OpenAI's own.

Tool calls (``tool_call`` events in the native stream) are ``delta.tool_calls`` as OpenAI streams them: a call's
first chunk has its ``index`` (the call's place among the message's calls, from 0, whatever text came before),
``id``, ``type: "function"`` and ``function.name`` with the first piece of ``function.arguments``; its later chunks
``index`` and the next piece of ``function.arguments`` alone. A completion not streamed has them as
``message.tool_calls`` (complete calls only), its ``content`` then ``null`` unless the model also wrote text.

``finish_reason`` (:func:`~chatstream.relay.openai.status.finish_reason`): ``stop`` (``end_turn``, ``stop_sequence``,
``cancelled``), ``length`` (``max_tokens``, the model's context window), ``content_filter`` (``content_filtered``,
``guardrail_intervened``), ``tool_calls`` (``tool_use``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from chatstream.relay import sse
from chatstream.relay.openai.errors import error_type, failed_status
from chatstream.relay.openai.status import FinishReason, finish_reason
from chatstream.relay.openai.turn_events import Done, Failed, KeepAlive, Reconnect, Token, ToolDelta, TurnEvent

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping, Sequence

    from chatstream.status import StopReason
    from chatstream.tools import ToolCall


def completion_id(session_id: str) -> str:
    return f"chatcmpl-{session_id}"


def usage_object(usage: Mapping[str, int] | None) -> dict[str, int]:
    prompt, completion = (int((usage or {}).get(key, 0)) for key in ("input_tokens", "output_tokens"))
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def completion_object(
    session_id: str,
    model: str,
    created: int,
    text: str,
    stop_reason: StopReason | None,
    usage: Mapping[str, int] | None,
    reasoning: str | None = None,
    tool_calls: Sequence[ToolCall] = (),
) -> dict[str, Any]:
    calls = [call_object(call) for call in tool_calls if call.complete]
    content = None if calls and not text else text
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None, "annotations": []}
    if calls:
        message["tool_calls"] = calls
    if reasoning:
        message["reasoning_content"] = reasoning
    return {
        "id": completion_id(session_id),
        "object": "chat.completion",
        "created": created,
        "model": model,
        "system_fingerprint": None,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason(stop_reason),
            }
        ],
        "usage": usage_object(usage),
    }


def call_object(call: ToolCall) -> dict[str, Any]:
    """A complete tool call as a completion's ``message.tool_calls`` has it."""
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


def error_data(code: str, message: str) -> str:
    error = {"message": message, "type": error_type(failed_status(code)), "param": None, "code": code}
    return sse.message(sse.json_line({"error": error}))


@dataclass
class ChunkStream:
    session_id: str
    model: str
    created: int
    include_usage: bool
    _calls: set[int] = field(default_factory=set)  # the indexes of the calls whose first chunk went out

    def first(self) -> str:
        return self._chunk({"role": "assistant", "content": ""})

    def chunks(self, turn_events: Iterable[TurnEvent]) -> Iterator[str]:
        for event in turn_events:
            if isinstance(event, KeepAlive):
                yield sse.comment("keep-alive")
            elif isinstance(event, Token):
                # The model's reasoning is not the reply's content: a chunk of its own field (no content key, as
                # vLLM sends it; openai-python's stream helper accumulates each field of the delta apart).
                yield self._chunk({"content" if event.kind == "token" else "reasoning_content": event.text})
            elif isinstance(event, ToolDelta):
                chunk = self._tool_chunk(event)
                if chunk is not None:
                    yield chunk
            elif isinstance(event, Done):
                yield self._chunk({}, finish_reason(event.stop_reason))
                if self.include_usage:
                    usage = {"input_tokens": event.input_tokens, "output_tokens": event.output_tokens}
                    yield self._data({**self._base(), "choices": [], "usage": usage_object(usage)})
                yield sse.message("[DONE]")
                return
            elif isinstance(event, Failed):
                yield error_data(event.code, event.message)
                return
            elif isinstance(event, Reconnect):
                url = f"/sessions/{self.session_id}/turns/1/events"
                message = f"this stream ended before the reply ({event.why}); it goes on at {url}"
                message += f" (Last-Event-ID {event.last_event_id})"
                yield error_data("stream_interrupted", message)
                return

    def _tool_chunk(self, event: ToolDelta) -> str | None:
        """A call's first chunk names it (``id``, ``type``, ``function.name``); later ones carry arguments only, and an
        end without text carries nothing (``None``: no chunk)."""
        call = event.call
        if call.index in self._calls:
            if not event.arguments:
                return None
            return self._chunk({"tool_calls": [{"index": call.index, "function": {"arguments": event.arguments}}]})
        self._calls.add(call.index)
        first = {
            "index": call.index,
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": event.arguments},
        }
        return self._chunk({"tool_calls": [first]})

    def _base(self) -> dict[str, Any]:
        return {
            "id": completion_id(self.session_id),
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": None,
        }

    def _chunk(self, delta: dict[str, Any], finish: FinishReason | None = None) -> str:
        chunk = {**self._base(), "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
        if self.include_usage:
            chunk["usage"] = None
        return self._data(chunk)

    @staticmethod
    def _data(payload: dict[str, Any]) -> str:
        return sse.message(sse.json_line(payload))
