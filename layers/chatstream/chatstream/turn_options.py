"""A turn's options beyond ``max_tokens`` and ``temperature``, as the turn item stores them.

The relay validates them (``chatstream.relay.openai``) and writes them into the turn item; the proxy reads them
from there and passes them to ``ConverseStream`` (``chatstream.generation``). No queue and no invocation event
carries them: they can hold conversation text.

- ``system``: the client's system prompt (OpenAI's ``instructions``, or its ``system``/``developer`` messages),
  sent after the deployment's own ``SYSTEM_PROMPT``;
- ``top_p``: nucleus sampling, ``inferenceConfig.topP``;
- ``stop``: stop sequences, ``inferenceConfig.stopSequences`` (at most :data:`MAX_STOP_SEQUENCES`);
- ``history``: earlier messages the client sent with the turn (Chat Completions' messages before the last),
  alternating ``user``/``assistant`` and starting with ``user``; they follow the session's own earlier turns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from chatstream.text import is_blank

MAX_STOP_SEQUENCES = 4

Role = Literal["user", "assistant"]


@dataclass(frozen=True)
class HistoryMessage:
    role: Role
    text: str


@dataclass(frozen=True)
class TurnOptions:
    system: str | None = None
    top_p: float | None = None
    stop: tuple[str, ...] = ()
    history: tuple[HistoryMessage, ...] = ()

    def __post_init__(self) -> None:
        if self.top_p is not None and not 0 <= self.top_p <= 1:
            raise ValueError(f"top_p must be between 0 and 1, got {self.top_p}")
        if len(self.stop) > MAX_STOP_SEQUENCES or any(not sequence for sequence in self.stop):
            raise ValueError(f"stop holds 1 to {MAX_STOP_SEQUENCES} non-empty sequences")
        for index, message in enumerate(self.history):
            expected = "user" if index % 2 == 0 else "assistant"
            if message.role != expected or is_blank(message.text):
                raise ValueError(f"history[{index}] must be a non-empty {expected} message (roles alternate)")
        if len(self.history) % 2:
            raise ValueError("history must end with an assistant message (the turn's message is the next user one)")

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
            item["history"] = [{"role": message.role, "text": message.text} for message in self.history]
        return item

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> TurnOptions:
        top_p = item.get("top_p")
        history = item.get("history") or []
        return cls(
            system=None if item.get("system") is None else str(item["system"]),
            top_p=None if top_p is None else float(top_p),
            stop=tuple(str(sequence) for sequence in item.get("stop") or ()),
            history=tuple(
                HistoryMessage("user" if entry["role"] == "user" else "assistant", str(entry["text"]))
                for entry in history
            ),
        )
