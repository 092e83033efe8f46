"""Tools in a request body, validated into the tool vocabulary (:mod:`chatstream.tools`): what the native
``POST /chat`` and ``/v1``'s two APIs share (HTTP_API.md, "Tool calls").

The three APIs spell a function tool three ways (:class:`ToolStyle`): Chat Completions nests it
(``{"type": "function", "function": {"name", "description", "parameters", "strict"}}``), the Responses API flattens
it (``{"type": "function", "name", …}``), and the native API drops the type (``{"name", "description",
"parameters"}``). Each is checked the same way, and a mistake is a ``400`` whose message and ``param`` name the field:

- a name of 1 to 64 letters, digits, ``_`` or ``-`` (Bedrock's ``ToolSpecification.name``, and OpenAI's), unique;
- ``parameters`` a JSON schema whose top level is ``{"type": "object", …}`` (Bedrock's ``inputSchema`` rule);
  absent, a function without parameters (``{"type": "object", "properties": {}}``, as OpenAI reads it);
- at most :data:`~chatstream.tools.MAX_TOOLS` tools;
- ``strict`` (OpenAI's structured outputs) a boolean or null: accepted, and not enforced (Bedrock has no such
  mode): the arguments are the model's, checked only to be a JSON object;
- ``tool_choice``: ``auto``, ``none``, ``required`` (Bedrock's ``any``) or the one tool named, which must be among
  the tools; ``auto`` and ``none`` without tools mean nothing and are accepted, as OpenAI accepts them.

A tool call passed back in a conversation (an assistant message's ``tool_calls``, a ``function_call`` item) needs an
id Bedrock takes as a ``toolUseId`` (1 to 64 letters, digits, ``_`` or ``-``: the model's own ids are such) and
arguments that are the JSON text of an object (``""`` reads as ``{}``). Results (:func:`check_answers`) must answer
exactly the calls of the assistant message before them: a result naming no such call, or a call left without a
result, is a ``400`` that says which.

Tool definitions and results live in the turn item with the turn's other options, never in a queue message or the
proxy's event: the body's 256 KiB bound their size, as it bounds the message's.
"""

from __future__ import annotations

import json
import re
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from chatstream.relay.openai.errors import OpenAIError, invalid
from chatstream.tools import MAX_TOOLS, ToolCall, ToolChoice, ToolChoiceMode, ToolResult, ToolSpec, is_tool_name

if TYPE_CHECKING:
    from collections.abc import Sequence

# Bedrock's ToolUseBlock.toolUseId: a call passed back must have an id Bedrock takes.
CALL_ID_PATTERN = re.compile(r"\A[a-zA-Z0-9_-]{1,64}\Z")
NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}
_MISSING = object()


class ToolStyle(StrEnum):
    """How an API spells a function tool (the module's docstring)."""

    NATIVE = "native"
    CHAT = "chat"  # Chat Completions
    RESPONSES = "responses"


# The fields of a function (Chat Completions: of the tool's ``function``).
_FUNCTION_FIELDS = {
    ToolStyle.NATIVE: ("name", "description", "parameters"),
    ToolStyle.CHAT: ("name", "description", "parameters", "strict"),
    ToolStyle.RESPONSES: ("type", "name", "description", "parameters", "strict"),
}


def unsupported(param: str, what: str | None = None) -> OpenAIError:
    return OpenAIError(400, "unsupported_parameter", f"{what or param} is not supported", param)


def parse_tools(value: object, style: ToolStyle, param: str = "tools") -> tuple[ToolSpec, ...]:
    """The function tools a request declares (``None``: none)."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise invalid(f"{param} must be a list of function tools", param)
    if len(value) > MAX_TOOLS:
        raise invalid(f"{param} holds {len(value)} tools; the limit is {MAX_TOOLS}", param)
    tools = tuple(_tool(item, style, f"{param}[{index}]") for index, item in enumerate(value))
    seen: set[str] = set()
    for index, tool in enumerate(tools):
        if tool.name in seen:
            where = f"{param}[{index}]" + (".function.name" if style is ToolStyle.CHAT else ".name")
            raise invalid(f"{param} declares {tool.name!r} twice; tool names are unique", where)
        seen.add(tool.name)
    return tools


def _tool(item: object, style: ToolStyle, param: str) -> ToolSpec:
    if not isinstance(item, dict):
        raise invalid(f"{param} must be a function tool object", param)
    spec: dict[str, Any] = item
    if style is not ToolStyle.NATIVE:
        kind = item.get("type")
        if kind != "function":
            raise unsupported(f"{param}.type", f"{kind!r} tools" if isinstance(kind, str) else None)
        if style is ToolStyle.CHAT:
            _only(item, ("type", "function"), param, style)
            spec = item.get("function")  # type: ignore[assignment]
            param = f"{param}.function"
            if not isinstance(spec, dict):
                raise invalid(f"{param} must be an object with the function's name and parameters", param)
    _only(spec, _FUNCTION_FIELDS[style], param, style)
    name = spec.get("name")
    if not is_tool_name(name):
        shown = f"got {name!r}" if isinstance(name, str) else "got none" if name is None else "not a string"
        raise invalid(f"{param}.name must be 1 to 64 letters, digits, '_' or '-', {_clip(shown)}", f"{param}.name")
    description = spec.get("description")
    if description is not None and not isinstance(description, str):
        raise invalid(f"{param}.description must be a string", f"{param}.description")
    strict = spec.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise invalid(f"{param}.strict must be a boolean", f"{param}.strict")
    parameters = spec.get("parameters")
    if parameters is None:
        parameters = NO_PARAMETERS
    elif not isinstance(parameters, dict) or parameters.get("type") != "object":
        raise invalid(
            f'{param}.parameters must be a JSON schema of type object ({{"type": "object", "properties": …}}): '
            "Bedrock takes a tool's input only as an object",
            f"{param}.parameters",
        )
    try:
        return ToolSpec(str(name), parameters, description or None)
    except ValueError as err:  # a schema that is no JSON (a number too large for a float reads as infinity)
        raise invalid(f"{param}.parameters: {err}", f"{param}.parameters") from None


def _only(fields: dict[str, Any], allowed: Sequence[str], param: str, style: ToolStyle) -> None:
    for key in fields:
        if key not in allowed:
            if style is ToolStyle.NATIVE:
                raise invalid(f"unknown field {param}.{key}; a tool has name, description and parameters", param)
            raise unsupported(f"{param}.{key}")


def parse_tool_choice(
    value: object, tools: Sequence[ToolSpec], style: ToolStyle, param: str = "tool_choice"
) -> ToolChoice | None:
    """Which of ``tools`` the model may or must call (``None``: not given, or ``auto``/``none`` without tools)."""
    if value is None:
        return None
    names = [tool.name for tool in tools]
    if isinstance(value, str):
        modes = {"auto": ToolChoiceMode.AUTO, "none": ToolChoiceMode.NONE, "required": ToolChoiceMode.ANY}
        if value not in modes:
            shown = _clip(repr(value))
            raise invalid(f"{param} must be auto, none, required or a function to call, got {shown}", param)
        if not names:
            if value == "required":
                raise invalid(f"{param} 'required' needs tools to call", param)
            return None
        return ToolChoice(modes[value])
    if not isinstance(value, dict):
        raise invalid(f"{param} must be auto, none, required or a function to call", param)
    name = _chosen_name(value, style, param)
    if name not in names:
        declared = ", ".join(names) or "no tools"
        raise invalid(f"{param} names {_clip(repr(name))}, which is not among the tools ({declared})", param)
    return ToolChoice(ToolChoiceMode.TOOL, str(name))


def _chosen_name(value: dict[str, Any], style: ToolStyle, param: str) -> object:
    if style is ToolStyle.NATIVE:
        if set(value) != {"name"}:
            raise invalid(f'{param} names a tool as {{"name": "…"}}', param)
        return value["name"]
    if value.get("type") != "function":
        raise unsupported(param, f"a tool_choice of type {value.get('type')!r}")
    if style is ToolStyle.CHAT:
        function = value.get("function")
        if set(value) != {"type", "function"} or not isinstance(function, dict) or set(function) != {"name"}:
            raise invalid(f'{param} names a function as {{"type": "function", "function": {{"name": "…"}}}}', param)
        return function["name"]
    if set(value) != {"type", "name"}:
        raise invalid(f'{param} names a function as {{"type": "function", "name": "…"}}', param)
    return value["name"]


def parse_parallel(value: object, param: str = "parallel_tool_calls") -> bool:
    """``parallel_tool_calls``: ``False`` asks for at most one call (``TurnOptions.parallel_tool_calls``)."""
    if value is None:
        return True
    if not isinstance(value, bool):
        raise invalid(f"{param} must be a boolean", param)
    return value


def call_id(value: object, param: str) -> str:
    """A tool call's id as a conversation passes it back: one Bedrock takes as a ``toolUseId``."""
    if not isinstance(value, str) or not CALL_ID_PATTERN.match(value):
        shown = f", got {_clip(repr(value))}" if isinstance(value, str) else ""
        raise invalid(f"{param} must be a tool call's id: 1 to 64 letters, digits, '_' or '-'{shown}", param)
    return value


def tool_call(call: object, name: object, arguments: object, param: str, *, id_param: str, name_param: str) -> ToolCall:
    """A call a conversation passes back (an assistant message's, a ``function_call`` item)."""
    if not is_tool_name(name):
        raise invalid(f"{name_param} must be a tool's name: 1 to 64 letters, digits, '_' or '-'", name_param)
    return ToolCall(call_id(call, id_param), str(name), arguments_text(arguments, f"{param}.arguments"))


def arguments_text(value: object, param: str) -> str:
    """A call's arguments: the JSON text of an object (``""``: none, ``{}``)."""
    if value is None or value == "":
        return "{}"
    if not isinstance(value, str):
        raise invalid(f"{param} must be a string: the JSON text of the call's arguments", param)
    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise invalid(f"{param} must be the JSON text of an object (the call's arguments)", param)
    return value


def result_text(value: object, param: str, part_types: Sequence[str]) -> str:
    """A tool result's content: a string, or a list of text parts (joined). Blank is allowed: a tool may answer
    nothing."""
    if isinstance(value, list):
        texts = []
        for index, part in enumerate(value):
            where = f"{param}[{index}]"
            if not isinstance(part, dict) or part.get("type") not in part_types:
                raise unsupported(f"{where}", f"{where}: only text parts ({', '.join(part_types)}) are")
            for key in part:
                if key not in ("type", "text"):
                    raise unsupported(f"{where}.{key}")
            texts.append(_string(part.get("text"), f"{where}.text"))
        return "".join(texts)
    return _string(value, param)


def _string(value: object, param: str) -> str:
    if not isinstance(value, str):
        raise invalid(f"{param} must be a string", param)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise invalid(f"{param} contains invalid Unicode (a lone surrogate escape)", param) from None
    return value


def check_answers(calls: Sequence[ToolCall], results: Sequence[ToolResult], param: str, before: str) -> None:
    """``results`` must answer exactly the complete ``calls`` of the reply ``before`` names (``param``: the results'
    field): a result that answers no such call, or a call without a result, is a ``400`` naming it."""
    pending = {call.id: call for call in calls if call.complete}
    answered: set[str] = set()
    for result in results:
        if result.tool_call_id in answered:
            raise invalid(f"{param} answers tool call {result.tool_call_id!r} twice", param)
        if result.tool_call_id not in pending:
            asked = ", ".join(f"{call.id} ({call.name})" for call in pending.values()) or "none"
            raise invalid(
                f"{param} has a result for {_clip(repr(result.tool_call_id))}, which names no tool call of {before} "
                f"(its calls: {asked})",
                param,
            )
        answered.add(result.tool_call_id)
    missing = [call for call in pending.values() if call.id not in answered]
    if missing:
        named = ", ".join(f"{call.id} ({call.name})" for call in missing)
        raise invalid(f"{param} has no result for tool call {named} of {before}; send one for each call", param)


def _clip(text: str) -> str:
    return text if len(text) <= 80 else text[:80] + "…"
