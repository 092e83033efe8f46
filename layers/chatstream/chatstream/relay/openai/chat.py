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

``finish_reason`` (:func:`~chatstream.relay.openai.status.finish_reason`): ``stop`` (``end_turn``, ``stop_sequence``,
``cancelled``), ``length`` (``max_tokens``, the model's context window), ``content_filter`` (``content_filtered``,
``guardrail_intervened``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chatstream.relay import sse
from chatstream.relay.openai.errors import error_type, failed_status
from chatstream.relay.openai.status import FinishReason, finish_reason
from chatstream.relay.openai.turn_events import Done, Failed, KeepAlive, Reconnect, Token, TurnEvent

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping

    from chatstream.status import StopReason


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
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None, "annotations": []}
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


def error_data(code: str, message: str) -> str:
    error = {"message": message, "type": error_type(failed_status(code)), "param": None, "code": code}
    return sse.message(sse.json_line({"error": error}))


@dataclass
class ChunkStream:
    session_id: str
    model: str
    created: int
    include_usage: bool

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
