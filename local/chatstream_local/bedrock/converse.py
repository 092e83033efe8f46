"""A ``ConverseStream`` request as Bedrock validates it: :func:`parse_request` and :class:`ConverseRequest`.

A request without messages, one whose roles do not alternate user/assistant starting and ending with the user,
or one with a blank text block is a ``ValidationException`` (:class:`InvalidRequest`), with Bedrock's wording
where the model's tests need it. Blank is what Bedrock could call blank (its API reference defines no whitespace):
:func:`is_blank_to_bedrock`, by the strictest of the definitions it may use. Usage: ``inputTokens`` =
whitespace-separated words in the text of every message and system block (a tool call's input and a tool result's
content count as text).

Tools, as Bedrock checks them: ``toolConfig.tools`` is one or more ``toolSpec``s with unique names of 1 to 64
letters, digits, ``_`` or ``-`` and an ``inputSchema.json`` that is a JSON schema of type object; ``toolChoice`` is
one of ``auto``, ``any`` or ``tool`` (which names a declared tool). Messages may hold ``toolUse`` blocks (the
assistant's: ``toolUseId``, ``name``, an object ``input``) and ``toolResult`` blocks (the user's: ``toolUseId``,
``content`` of ``text`` or ``json`` blocks, ``status``); every ``toolUse`` must be answered by a ``toolResult`` in the
next message, every ``toolResult`` must answer a ``toolUse`` of the message before, and a request whose messages
hold either needs a ``toolConfig``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

MAX_STOP_SEQUENCES = 4  # Bedrock's limit for most models
TOOL_NAME = re.compile(r"\A[a-zA-Z0-9_-]{1,64}\Z")  # ToolSpecification.name
TOOL_USE_ID = re.compile(r"\A[a-zA-Z0-9_.:-]{1,64}\Z")  # ToolUseId
TOOL_CONFIG_REQUIRED = "The toolConfig field must be defined when using toolUse and toolResult content blocks."
# Whitespace beyond Python's own (str.isspace): ECMA-262's U+FEFF, and U+180E, which Java 8's
# Character.isWhitespace counts (a space separator before Unicode 6.3).
_ALSO_WHITESPACE = frozenset("\ufeff\u180e")


class InvalidRequest(ValueError):
    """The request is one Bedrock would reject with a ``ValidationException``."""


@dataclass(frozen=True)
class ConverseRequest:
    """The parts of a ``ConverseStream`` request the local model uses."""

    model_id: str
    user_text: str
    input_tokens: int
    max_tokens: int | None
    system: tuple[str, ...] = ()  # the text of each system block
    messages: tuple[tuple[str, str], ...] = ()  # (role, text) of every message, the last user one included
    stop_sequences: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()  # the names of the declared tools
    tool_results: tuple[tuple[str, str], ...] = ()  # the last message's results: (the tool's name, the content's text)


@dataclass(frozen=True)
class _Blocks:
    """One message's content: its texts, the calls it makes (id, name, input) and the results it holds (id, text)."""

    texts: list[str]
    uses: list[tuple[str, str, dict[str, Any]]]
    results: list[tuple[str, str]]


def is_blank_to_bedrock(text: str) -> bool:
    """Whether Bedrock could call ``text`` blank: empty, or only characters that Python, ECMA-262 or Java call
    whitespace."""
    return all(char.isspace() or char in _ALSO_WHITESPACE for char in text)


def _texts(blocks: Any, where: str) -> list[str]:
    if not isinstance(blocks, list):
        raise InvalidRequest(f"{where} must be a list of content blocks")
    texts = []
    for index, block in enumerate(blocks):
        if not isinstance(block, dict):
            raise InvalidRequest(f"{where}.{index} must be a content block object")
        text = block.get("text")
        if text is None:
            continue
        if not isinstance(text, str) or is_blank_to_bedrock(text):
            raise InvalidRequest(
                f"The text field in the ContentBlock object at {where}.{index} is blank. "
                "Add text to the text field, and try again."
            )
        texts.append(text)
    return texts


def _blocks(blocks: Any, where: str) -> _Blocks:
    """A message's content: text blocks as :func:`_texts` checks them, and its tool blocks."""
    texts = _texts(blocks, where)
    uses: list[tuple[str, str, dict[str, Any]]] = []
    results: list[tuple[str, str]] = []
    for index, block in enumerate(blocks):
        at = f"{where}.{index}"
        if "toolUse" in block:
            use = block["toolUse"]
            if not isinstance(use, dict) or not _tool_use_id(use.get("toolUseId")):
                raise InvalidRequest(f"{at}.toolUse.toolUseId must be 1 to 64 of a-z, A-Z, 0-9, '_', '.', ':' or '-'")
            if not isinstance(use.get("name"), str) or not TOOL_NAME.match(use["name"]):
                raise InvalidRequest(f"{at}.toolUse.name must be 1 to 64 of a-z, A-Z, 0-9, '_' or '-'")
            if not isinstance(use.get("input"), dict):
                raise InvalidRequest(f"{at}.toolUse.input must be a JSON object")
            uses.append((use["toolUseId"], use["name"], use["input"]))
        elif "toolResult" in block:
            results.append(_tool_result(block["toolResult"], f"{at}.toolResult"))
    return _Blocks(texts, uses, results)


def _tool_use_id(value: object) -> bool:
    return isinstance(value, str) and TOOL_USE_ID.match(value) is not None


def _tool_result(result: Any, at: str) -> tuple[str, str]:
    if not isinstance(result, dict) or not _tool_use_id(result.get("toolUseId")):
        raise InvalidRequest(f"{at}.toolUseId must be 1 to 64 of a-z, A-Z, 0-9, '_', '.', ':' or '-'")
    content = result.get("content")
    if not isinstance(content, list):
        raise InvalidRequest(f"{at}.content must be a list of tool result content blocks")
    if result.get("status", "success") not in ("success", "error"):
        raise InvalidRequest(f"{at}.status must be success or error")
    texts = []
    for index, part in enumerate(content):
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif isinstance(part, dict) and "json" in part:
            texts.append(json.dumps(part["json"], separators=(",", ":")))
        else:
            raise InvalidRequest(f"{at}.content.{index} must be a text or json block")
    return result["toolUseId"], "".join(texts)


def _tool_config(body: dict[str, Any]) -> tuple[str, ...] | None:
    """The declared tools' names; ``None`` without a ``toolConfig``."""
    config = body.get("toolConfig")
    if config is None:
        return None
    tools = config.get("tools") if isinstance(config, dict) else None
    if not isinstance(tools, list) or not tools:
        raise InvalidRequest("toolConfig.tools must hold at least one tool")
    names: list[str] = []
    for index, tool in enumerate(tools):
        spec = tool.get("toolSpec") if isinstance(tool, dict) else None
        at = f"toolConfig.tools.{index}.toolSpec"
        if not isinstance(spec, dict):
            raise InvalidRequest(f"{at} must be a tool specification")
        name = spec.get("name")
        if not isinstance(name, str) or not TOOL_NAME.match(name):
            raise InvalidRequest(f"{at}.name must be 1 to 64 of a-z, A-Z, 0-9, '_' or '-'")
        if name in names:
            raise InvalidRequest(f"{at}.name: tool names must be unique, {name!r} is declared twice")
        schema = spec.get("inputSchema")
        if not isinstance(schema, dict) or not isinstance(schema.get("json"), dict):
            raise InvalidRequest(f"{at}.inputSchema.json must be a JSON schema object")
        if schema["json"].get("type") != "object":
            raise InvalidRequest(f"{at}.inputSchema.json: the top level schema type must be object")
        description = spec.get("description")
        if description is not None and (not isinstance(description, str) or not description):
            raise InvalidRequest(f"{at}.description must not be empty")
        names.append(name)
    _tool_choice(config.get("toolChoice"), names)
    return tuple(names)


def _tool_choice(choice: Any, names: list[str]) -> None:
    if choice is None:
        return
    if not isinstance(choice, dict) or len(choice) != 1 or next(iter(choice)) not in ("auto", "any", "tool"):
        raise InvalidRequest("toolConfig.toolChoice must be one of auto, any or tool")
    if "tool" in choice:
        name = choice["tool"].get("name") if isinstance(choice["tool"], dict) else None
        if name not in names:
            raise InvalidRequest(f"toolConfig.toolChoice.tool.name {name!r} is not a tool in toolConfig.tools")


def _check_pairing(contents: list[_Blocks]) -> None:
    """Every toolUse answered in the next message, every toolResult answering the message before."""
    for index, blocks in enumerate(contents):
        asked = {use[0] for use in contents[index - 1].uses} if index else set()
        answered = [result[0] for result in blocks.results]
        extra = [tool_id for tool_id in answered if tool_id not in asked]
        if extra:
            raise InvalidRequest(
                f"messages.{index}.content: the toolResult blocks {extra} answer no toolUse block of the previous turn"
            )
        missing = sorted(asked - set(answered))
        if missing:
            raise InvalidRequest(
                f"Expected toolResult blocks at messages.{index}.content for the following Ids: {missing}"
            )


def _max_tokens(body: dict[str, Any]) -> int | None:
    config = body.get("inferenceConfig") or {}
    if not isinstance(config, dict):
        raise InvalidRequest("inferenceConfig must be an object")
    value = config.get("maxTokens")
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidRequest(f"inferenceConfig.maxTokens must be a whole number of at least 1, got {value!r}")
    return value


def _stop_sequences(body: dict[str, Any]) -> tuple[str, ...]:
    value = (body.get("inferenceConfig") or {}).get("stopSequences")
    if value is None:
        return ()
    valid = isinstance(value, list) and all(isinstance(sequence, str) and sequence for sequence in value)
    if not valid or len(value) > MAX_STOP_SEQUENCES:
        raise InvalidRequest(
            f"inferenceConfig.stopSequences must be a list of at most {MAX_STOP_SEQUENCES} non-empty strings"
        )
    return tuple(value)


def parse_request(model_id: str, raw_body: bytes) -> ConverseRequest:
    """Validate a ``ConverseStream`` JSON body as Bedrock would; raise :class:`InvalidRequest` if not."""
    if not model_id:
        raise InvalidRequest("modelId must not be empty")
    try:
        body = json.loads(raw_body or b"{}")
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InvalidRequest(f"The request body is not valid JSON: {err}") from err
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("messages must contain at least one message")
    system = _texts(body.get("system", []), "system")
    input_words = sum(len(text.split()) for text in system)
    seen: list[tuple[str, str]] = []
    contents: list[_Blocks] = []
    user_text = ""
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InvalidRequest(f"messages.{index} must be a message object")
        expected = "user" if index % 2 == 0 else "assistant"
        if message.get("role") != expected:
            raise InvalidRequest(
                "A conversation must start with a user message and alternate between user and "
                f"assistant roles: messages.{index} should have role {expected!r}"
            )
        blocks = _blocks(message.get("content"), f"messages.{index}.content")
        if blocks.uses if expected == "user" else blocks.results:
            kind = "toolUse" if expected == "user" else "toolResult"
            raise InvalidRequest(f"messages.{index}.content: a {expected} message cannot hold {kind} blocks")
        contents.append(blocks)
        words = [*blocks.texts, *(json.dumps(use[2]) for use in blocks.uses), *(text for _, text in blocks.results)]
        input_words += sum(len(text.split()) for text in words)
        user_text = "".join(blocks.texts)
        seen.append((expected, user_text))
    if len(messages) % 2 == 0:
        raise InvalidRequest("A conversation must end with a user message. Try again with a user message last.")
    last = contents[-1]
    if not user_text and not last.results:
        raise InvalidRequest(f"messages.{len(messages) - 1} has no text content block")
    tools = _tool_config(body)
    if tools is None and any(blocks.uses or blocks.results for blocks in contents):
        raise InvalidRequest(TOOL_CONFIG_REQUIRED)
    _check_pairing(contents)
    names = {use[0]: use[1] for use in contents[-2].uses} if len(contents) > 1 else {}
    return ConverseRequest(
        model_id,
        user_text,
        input_words,
        _max_tokens(body),
        tuple(system),
        tuple(seen),
        _stop_sequences(body),
        tools=tools or (),
        tool_results=tuple((names[tool_id], text) for tool_id, text in last.results),
    )
