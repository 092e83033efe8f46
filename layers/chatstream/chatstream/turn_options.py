"""A turn's options beyond ``max_tokens`` and ``temperature``, as the turn item stores them.

The relay validates them (``chatstream.relay.openai``) and writes them into the turn item; the proxy reads them
from there and passes them to ``ConverseStream`` (``chatstream.generation``). No queue and no invocation event
carries them: they can hold conversation text.

- ``system``: the client's system prompt (OpenAI's ``instructions``, or its ``system``/``developer`` messages),
  sent after the deployment's own ``SYSTEM_PROMPT``;
- ``top_p``: nucleus sampling, ``inferenceConfig.topP``;
- ``stop``: stop sequences, ``inferenceConfig.stopSequences`` (at most :data:`MAX_STOP_SEQUENCES`);
- ``history``: earlier messages the client sent with the turn (Chat Completions' messages before the last),
  alternating ``user``/``assistant`` and starting with ``user``; they follow the session's own earlier turns. An
  assistant message may hold the tool calls it made (its text then may be empty), the user message after it the
  results of those calls (:class:`~chatstream.tools.ToolResult`; its text then may be empty too);
- ``tools``: the tools the model may call (:class:`~chatstream.tools.ToolSpec`, at most
  :data:`~chatstream.tools.MAX_TOOLS`, names unique), ``toolConfig.tools``;
- ``tool_choice``: which of them it may or must call (:class:`~chatstream.tools.ToolChoice`; only with ``tools``, and
  a ``tool`` choice names one of them), ``toolConfig.toolChoice`` (``none``: ``chatstream.generation.tool_config``);
- ``parallel_tool_calls``: ``False`` asks the model to call at most one tool in its reply (OpenAI's
  ``parallel_tool_calls: false``). Bedrock has no such switch, so it is a system text
  (``chatstream.generation.ONE_TOOL_INSTRUCTION``), a request the model may not honour; every call it makes is kept;
- ``tool_results``: what the client's tools answered to the calls of the turn before (its ``tool_calls``), the turn's
  input with or instead of a message: the ``toolResult`` blocks of the turn's user message. Chat Completions'
  ``role: tool`` messages, the Responses API's ``function_call_output`` items and the native API's results all map
  onto it (``tool_call_id``: the call's id, ``content``: the answer's text).

Tool definitions and results live in the turn item like every other option (their size counts against the item's
400 KB with the turn's message), never in a queue message or the proxy's invocation event.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from chatstream.text import is_blank
from chatstream.tools import MAX_TOOLS, ToolCall, ToolChoice, ToolChoiceMode, ToolResult, ToolSpec

MAX_STOP_SEQUENCES = 4

Role = Literal["user", "assistant"]


@dataclass(frozen=True)
class HistoryMessage:
    role: Role
    text: str
    tool_calls: tuple[ToolCall, ...] = ()  # an assistant message's
    tool_results: tuple[ToolResult, ...] = ()  # a user message's: the answers to the assistant message before it

    @property
    def empty(self) -> bool:
        return is_blank(self.text) and not self.tool_calls and not self.tool_results

    def to_item(self) -> dict[str, Any]:
        item: dict[str, Any] = {"role": self.role, "text": self.text}
        if self.tool_calls:
            item["tool_calls"] = [call.to_item() for call in self.tool_calls]
        if self.tool_results:
            item["tool_results"] = [result.to_item() for result in self.tool_results]
        return item

    @classmethod
    def from_item(cls, entry: dict[str, Any]) -> HistoryMessage:
        return cls(
            "user" if entry["role"] == "user" else "assistant",
            str(entry["text"]),
            tuple(ToolCall.from_item(call) for call in entry.get("tool_calls") or ()),
            tuple(ToolResult.from_item(result) for result in entry.get("tool_results") or ()),
        )


@dataclass(frozen=True)
class TurnOptions:
    system: str | None = None
    top_p: float | None = None
    stop: tuple[str, ...] = ()
    history: tuple[HistoryMessage, ...] = ()
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: ToolChoice | None = None
    tool_results: tuple[ToolResult, ...] = ()
    parallel_tool_calls: bool = True

    def __post_init__(self) -> None:
        if self.top_p is not None and not 0 <= self.top_p <= 1:
            raise ValueError(f"top_p must be between 0 and 1, got {self.top_p}")
        if len(self.stop) > MAX_STOP_SEQUENCES or any(not sequence for sequence in self.stop):
            raise ValueError(f"stop holds 1 to {MAX_STOP_SEQUENCES} non-empty sequences")
        for index, message in enumerate(self.history):
            expected = "user" if index % 2 == 0 else "assistant"
            if message.role != expected or message.empty:
                raise ValueError(f"history[{index}] must be a non-empty {expected} message (roles alternate)")
            if message.tool_calls if message.role == "user" else message.tool_results:
                raise ValueError(f"history[{index}]: tool calls are an assistant's, tool results a user's")
        if len(self.history) % 2:
            raise ValueError("history must end with an assistant message (the turn's message is the next user one)")
        self._check_tools()

    def _check_tools(self) -> None:
        names = [tool.name for tool in self.tools]
        if len(names) > MAX_TOOLS:
            raise ValueError(f"at most {MAX_TOOLS} tools, got {len(names)}")
        if len(set(names)) != len(names):
            raise ValueError("tool names must be unique")
        choice = self.tool_choice
        if choice is not None and not names:
            raise ValueError("tool_choice needs tools")
        if choice is not None and choice.mode is ToolChoiceMode.TOOL and choice.name not in names:
            raise ValueError(f"tool_choice names {choice.name!r}, which is not among the tools")
        answered = [result.tool_call_id for result in self.tool_results]
        if len(set(answered)) != len(answered):
            raise ValueError("tool_results answer each call once")

    def to_item(self) -> dict[str, Any]:
        """The turn item's attributes for these options (none for an option not set), as plain values: the table
        makes its numbers DynamoDB's."""
        item: dict[str, Any] = {}
        if self.system is not None:
            item["system"] = self.system
        if self.top_p is not None:
            item["top_p"] = self.top_p
        if self.stop:
            item["stop"] = list(self.stop)
        if self.history:
            item["history"] = [message.to_item() for message in self.history]
        if self.tools:
            item["tools"] = [tool.to_item() for tool in self.tools]
        if self.tool_choice is not None:
            item["tool_choice"] = self.tool_choice.to_item()
        if self.tool_results:
            item["tool_results"] = [result.to_item() for result in self.tool_results]
        if not self.parallel_tool_calls:
            item["parallel_tool_calls"] = False
        return item

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> TurnOptions:
        top_p = item.get("top_p")
        choice = item.get("tool_choice")
        return cls(
            system=None if item.get("system") is None else str(item["system"]),
            top_p=None if top_p is None else float(top_p),
            stop=tuple(str(sequence) for sequence in item.get("stop") or ()),
            history=tuple(HistoryMessage.from_item(entry) for entry in item.get("history") or ()),
            tools=tuple(ToolSpec.from_item(tool) for tool in item.get("tools") or ()),
            tool_choice=None if choice is None else ToolChoice.from_item(choice),
            tool_results=tuple(ToolResult.from_item(result) for result in item.get("tool_results") or ()),
            parallel_tool_calls=item.get("parallel_tool_calls", True) is not False,
        )
