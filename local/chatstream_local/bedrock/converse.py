"""A ``ConverseStream`` request as Bedrock validates it: :func:`parse_request` and :class:`ConverseRequest`.

A request without messages, one whose roles do not alternate user/assistant starting and ending with the user,
or one with a blank text block is a ``ValidationException`` (:class:`InvalidRequest`), with Bedrock's wording
where the model's tests need it. Usage: ``inputTokens`` = whitespace-separated words in the text of every message
and system block.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

MAX_STOP_SEQUENCES = 4  # Bedrock's limit for most models


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
        if not isinstance(text, str) or not text.strip():
            raise InvalidRequest(
                f"The text field in the ContentBlock object at {where}.{index} is blank. "
                "Add text to the text field, and try again."
            )
        texts.append(text)
    return texts


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
        texts = _texts(message.get("content"), f"messages.{index}.content")
        input_words += sum(len(text.split()) for text in texts)
        user_text = "".join(texts)
        seen.append((expected, user_text))
    if len(messages) % 2 == 0:
        raise InvalidRequest("A conversation must end with a user message. Try again with a user message last.")
    if not user_text:
        raise InvalidRequest(f"messages.{len(messages) - 1} has no text content block")
    return ConverseRequest(
        model_id, user_text, input_words, _max_tokens(body), tuple(system), tuple(seen), _stop_sequences(body)
    )
