"""Tool use: the vocabulary that turn options, token records, the turn item and the proxy share.

- :class:`ToolSpec`: a tool the client declares (its name, description and the JSON schema of its parameters),
  sent to the model as ConverseStream's ``toolConfig.tools[].toolSpec``;
- :class:`ToolChoice`: which tools the model may or must call (``auto``, ``any``: at least one, OpenAI's
  ``required``, ``tool``: the one named, or ``none``), ConverseStream's ``toolConfig.toolChoice``;
- :class:`ToolCall`: a call the model made, as a turn's ``tool_use`` records spell it
  (:func:`chatstream.records.tool_calls`): Bedrock's ``toolUseId``, the tool's name, the arguments' JSON text;
- :class:`ToolResult`: what the client's tool answered to one call, sent with the next turn and given to the model
  as a ``toolResult`` block next to the call's ``toolUse``.

Each has ``to_item``/``from_item`` (the turn item's plain values: a schema or arguments are stored as JSON text, so
DynamoDB never sees a float or an empty map key) and ``to_converse`` (the ConverseStream shape).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

# Bedrock's ToolSpecification.name (and OpenAI's function name): 1 to 64 letters, digits, '_' or '-'.
TOOL_NAME_PATTERN = re.compile(r"\A[a-zA-Z0-9_-]{1,64}\Z")  # \Z: "$" would also take a trailing newline
MAX_TOOLS = 128  # OpenAI's maximum for a request's functions; Bedrock documents none


def is_tool_name(value: object) -> bool:
    return isinstance(value, str) and TOOL_NAME_PATTERN.match(value) is not None


def _json_text(value: object, what: str) -> str:
    """``value`` as compact JSON text; ValueError naming ``what`` when it is not JSON (NaN and infinities are not)."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{what} is not JSON: {err}") from err


@dataclass(frozen=True)
class ToolSpec:
    """A tool the client declared. ``parameters``: a JSON schema whose top level is an object (Bedrock's rule)."""

    name: str
    parameters: dict[str, Any]
    description: str | None = None

    def __post_init__(self) -> None:
        if not is_tool_name(self.name):
            raise ValueError(f"tool name {self.name!r} must be 1 to 64 letters, digits, '_' or '-'")
        if not isinstance(self.parameters, dict) or self.parameters.get("type") != "object":
            raise ValueError(f"tool {self.name}: parameters must be a JSON schema of type object")
        _json_text(self.parameters, f"tool {self.name}'s parameters")
        if self.description is not None and not self.description:
            raise ValueError(f"tool {self.name}: a description, when given, is not empty")

    def to_item(self) -> dict[str, Any]:
        item: dict[str, Any] = {"name": self.name, "parameters": _json_text(self.parameters, "parameters")}
        if self.description is not None:
            item["description"] = self.description
        return item

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> ToolSpec:
        description = item.get("description")
        parameters = json.loads(str(item["parameters"]))
        return cls(str(item["name"]), parameters, None if description is None else str(description))

    def to_converse(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"name": self.name, "inputSchema": {"json": self.parameters}}
        if self.description is not None:
            spec["description"] = self.description
        return {"toolSpec": spec}


class ToolChoiceMode(StrEnum):
    AUTO = "auto"  # the model decides (Bedrock's default)
    ANY = "any"  # at least one call (OpenAI's "required")
    TOOL = "tool"  # a call to the one tool named
    NONE = "none"  # no call (Bedrock has no such choice: see chatstream.generation.tool_config)


@dataclass(frozen=True)
class ToolChoice:
    mode: ToolChoiceMode
    name: str | None = None  # the tool, for ToolChoiceMode.TOOL only

    def __post_init__(self) -> None:
        if not isinstance(self.mode, ToolChoiceMode):
            raise ValueError("tool_choice mode must be a ToolChoiceMode")
        if (self.mode is ToolChoiceMode.TOOL) != (self.name is not None):
            raise ValueError("tool_choice names a tool exactly when its mode is 'tool'")
        if self.name is not None and not is_tool_name(self.name):
            raise ValueError(f"tool_choice names {self.name!r}, which is no tool name")

    def to_item(self) -> dict[str, Any]:
        return {"mode": self.mode.value} if self.name is None else {"mode": self.mode.value, "name": self.name}

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> ToolChoice:
        name = item.get("name")
        return cls(ToolChoiceMode(str(item["mode"])), None if name is None else str(name))

    def to_converse(self) -> dict[str, Any] | None:
        """ConverseStream's ``toolChoice``; ``None`` for ``none``, which it cannot say."""
        if self.mode is ToolChoiceMode.NONE:
            return None
        if self.mode is ToolChoiceMode.TOOL:
            return {"tool": {"name": self.name}}
        return {self.mode.value: {}}


@dataclass(frozen=True)
class ToolCall:
    """A call the model made: ``id`` (Bedrock's ``toolUseId``), the tool's ``name``, and ``arguments``, the JSON text
    of an object once the call is ``complete`` (its end was written). An incomplete call (its turn was cancelled or
    failed inside its arguments) keeps the arguments it had, which are then no JSON."""

    id: str
    name: str
    arguments: str
    complete: bool = True

    def input(self) -> dict[str, Any] | None:
        """The arguments as an object; ``None`` for an incomplete call, or arguments that are no JSON object."""
        if not self.complete:
            return None
        try:
            value = json.loads(self.arguments)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    def to_item(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments, "complete": self.complete}

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> ToolCall:
        return cls(str(item["id"]), str(item["name"]), str(item["arguments"]), bool(item.get("complete", True)))

    def to_converse(self) -> dict[str, Any] | None:
        """The ``toolUse`` block replaying this call to the model; ``None`` when it has no object to replay."""
        value = self.input()
        if value is None:
            return None
        return {"toolUse": {"toolUseId": self.id, "name": self.name, "input": value}}


@dataclass(frozen=True)
class ToolResult:
    """What the client's tool answered to the call ``tool_call_id`` (a ``ToolCall.id``): OpenAI's ``role: tool``
    message (``tool_call_id``, ``content``) and the Responses API's ``function_call_output`` (``call_id``,
    ``output``) both map onto it."""

    tool_call_id: str
    content: str

    def __post_init__(self) -> None:
        if not isinstance(self.tool_call_id, str) or not self.tool_call_id:
            raise ValueError("a tool result names the call it answers (tool_call_id)")
        if not isinstance(self.content, str):
            raise ValueError("a tool result's content is text")

    def to_item(self) -> dict[str, Any]:
        return {"tool_call_id": self.tool_call_id, "content": self.content}

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> ToolResult:
        return cls(str(item["tool_call_id"]), str(item["content"]))

    def to_converse(self) -> dict[str, Any]:
        """The ``toolResult`` block; an empty answer has no content block (Bedrock refuses blank text)."""
        content = [{"text": self.content}] if self.content.strip() else []
        return {"toolResult": {"toolUseId": self.tool_call_id, "content": content}}
