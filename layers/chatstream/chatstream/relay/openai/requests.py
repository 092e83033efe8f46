"""The bodies of ``POST /v1/responses`` and ``POST /v1/chat/completions``, validated (HTTP_API.md, "/v1").

The body's size and JSON are checked as the native ``POST /chat``'s are (``413``, ``400 invalid_json``). Then every
field: a field OpenAI's API accepts but chatstream does not support (tools, images, audio, ``n`` > 1, logprobs…) is
a ``400 unsupported_parameter`` naming it (its neutral value, such as ``n: 1``, is accepted); any other unknown
field is a ``400 unknown_parameter``; a field of the wrong type or out of range is a ``400 invalid_request``. The
error's ``param`` names the field.

Messages become a turn: the ``system``/``developer`` messages (and ``instructions``) its system prompt, the last
message (which must be the user's) its message, and the ones before it its history, where consecutive messages of
one role are joined by a blank line and the first must be the user's (Bedrock's rule: roles alternate, starting
with the user).

Tool calls (HTTP_API.md, "Tool calls on /v1"): function ``tools``, ``tool_choice`` and ``parallel_tool_calls`` are
checked by :mod:`chatstream.relay.tool_requests`. A conversation may hold the calls a reply made (an assistant
message's ``tool_calls``; ``function_call`` items) and their results (``role: tool`` messages; ``function_call_output``
items): results are the user's side of the conversation (Converse ``toolResult`` blocks in the next user message), and
must answer exactly the calls of the assistant message right before them. A conversation may end with results instead
of a user message: the turn's ``tool_results``, its message then empty. A Responses request that continues a response
(``previous_response_id``) may begin its input with the results of that response's calls; the endpoint checks them
against its calls (:func:`leading_results`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from chatstream.relay.openai.errors import OpenAIError, invalid, unsupported
from chatstream.relay.tool_requests import (
    ToolStyle,
    call_id,
    check_answers,
    parse_parallel,
    parse_tool_choice,
    parse_tools,
    result_text,
    tool_call,
)
from chatstream.relay.validation import MAX_MESSAGE_CHARS, parse_json_object
from chatstream.text import is_blank
from chatstream.tools import ToolCall, ToolChoice, ToolResult, ToolSpec
from chatstream.turn_options import MAX_STOP_SEQUENCES, HistoryMessage, TurnOptions

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    # An ``item_reference``'s id and param → what the item it names said; None: one the model is not sent.
    ItemResolver = Callable[[str, str], "Said | None"]

# item_reference input items: each costs two reads, and its reply joins the turn's stored history, which must stay
# as small as a body's (a turn item is at most 400 KB): the turn's texts, instructions and system messages too, at
# most 65,536 characters once resolved, at most 256 KiB of UTF-8 (the body's limit).
MAX_ITEM_REFERENCES = 100
MAX_RESOLVED_CHARS = 64 * 1024

# Fields OpenAI's API accepts that chatstream does not support, with the value that means "not used" (or a
# predicate of accepted values; None: no value is accepted).
_NEUTRAL = object()


def _hint(value: object) -> bool:
    """A field that only tells OpenAI about the caller (``user``, ``safety_identifier``) or its cache
    (``prompt_cache_key``): nothing to do here, so any string is accepted and not used. Apps set ``user`` on every
    request; refusing it would refuse them."""
    return isinstance(value, str) or value is None


_RESPONSES_FIELDS = frozenset(
    {
        "model",
        "input",
        "instructions",
        "previous_response_id",
        "stream",
        "background",
        "max_output_tokens",
        "temperature",
        "top_p",
        "store",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
    }
)
_RESPONSES_UNSUPPORTED: dict[str, Any] = {
    "truncation": lambda value: value == "disabled",
    "text": lambda value: value in ({"format": {"type": "text"}}, {}),
    "metadata": lambda value: value in ({}, None),
    "include": lambda value: value in ([], None),
    "reasoning": None,
    "top_logprobs": lambda value: value in (0, None),
    "user": _hint,
    "service_tier": lambda value: value in ("auto", "default", None),
    "prompt": None,
    "conversation": None,
    "max_tool_calls": None,
    "safety_identifier": _hint,
    "prompt_cache_key": _hint,
    "prompt_cache_retention": _hint,
    "stream_options": None,
    "context_management": None,
}

_CHAT_FIELDS = frozenset(
    {"model", "messages", "stream", "stream_options", "max_tokens", "max_completion_tokens", "temperature", "top_p"}
    | {"stop", "tools", "tool_choice", "parallel_tool_calls"}
)
_CHAT_UNSUPPORTED: dict[str, Any] = {
    "n": lambda value: value in (1, None),
    "presence_penalty": lambda value: value in (0, None),
    "frequency_penalty": lambda value: value in (0, None),
    "logprobs": lambda value: value in (False, None),
    "top_logprobs": lambda value: value in (0, None),
    "response_format": lambda value: value in ({"type": "text"}, None),
    "functions": None,
    "function_call": None,
    "seed": None,
    "logit_bias": None,
    "user": _hint,
    "audio": None,
    "modalities": lambda value: value in (["text"], None),
    "prediction": None,
    "reasoning_effort": None,
    "service_tier": lambda value: value in ("auto", "default", None),
    "metadata": None,
    "store": lambda value: value in (False, None),
    "web_search_options": None,
    "verbosity": None,
    "safety_identifier": _hint,
    "prompt_cache_key": _hint,
    "prompt_cache_retention": _hint,
}


@dataclass(frozen=True)
class Said:
    """One message of a conversation as the turn keeps it: its role (``system`` and ``developer`` go to the system
    prompt), its text, and the tool calls it made (an assistant's) or the results it carries (the user's side: a
    ``role: tool`` message, a ``function_call_output`` item)."""

    role: str
    text: str
    calls: tuple[ToolCall, ...] = ()
    results: tuple[ToolResult, ...] = ()
    param: str = ""  # where the request has it
    results_param: str = ""  # where its first result is

    @property
    def size(self) -> int:
        """Its characters: text, arguments and results."""
        return (
            len(self.text)
            + sum(len(call.arguments) for call in self.calls)
            + sum(len(result.content) for result in self.results)
        )


@dataclass(frozen=True)
class TurnRequest:
    """What a ``/v1`` request asks of a turn."""

    model: str
    message: str
    options: TurnOptions
    max_tokens: int | None
    temperature: float | None
    stream: bool


@dataclass(frozen=True)
class ResponsesRequest(TurnRequest):
    previous_response_id: str | None = None
    background: bool = False


@dataclass(frozen=True)
class ChatCompletionRequest(TurnRequest):
    include_usage: bool = False


def parse_responses_request(
    body: bytes | None, *, max_tokens_limit: int, valid_base64: bool, resolve_item: ItemResolver | None = None
) -> ResponsesRequest:
    fields = parse_json_object(body, valid_base64=valid_base64, example='{"model": "chatstream", "input": "hello"}')
    _check_fields(fields, _RESPONSES_FIELDS, _RESPONSES_UNSUPPORTED)
    if fields.get("store") not in (None, True):
        raise unsupported("store", "only true: every response is stored")
    system: list[str] = []
    instructions = fields.get("instructions")
    if instructions is not None:
        system.append(_text(instructions, "instructions"))
    raw_input = fields.get("input", _MISSING)
    if raw_input is _MISSING:
        raise invalid("input is required: a string, or a list of messages", "input")
    previous = fields.get("previous_response_id")
    if previous is not None and (not isinstance(previous, str) or not previous):
        raise invalid("previous_response_id must be a response id such as resp_…", "previous_response_id")
    if isinstance(raw_input, str):
        messages = [Said("user", _text(raw_input, "input"), param="input")]
    elif isinstance(raw_input, list) and raw_input:
        references = sum(1 for item in raw_input if isinstance(item, dict) and item.get("type") == "item_reference")
        if references > MAX_ITEM_REFERENCES:
            raise invalid(f"input has {references} item references; the limit is {MAX_ITEM_REFERENCES}", "input")
        items = (_input_item(item, f"input[{index}]", resolve_item) for index, item in enumerate(raw_input))
        messages = _split_system((message for message in items if message is not None), system)
        size = sum(message.size for message in messages) + sum(len(text) for text in system)
        if references and size > MAX_RESOLVED_CHARS:
            raise invalid(
                f"input is {size} characters once its item references are resolved; the limit is "
                f"{MAX_RESOLVED_CHARS} (send fewer earlier turns, or continue with previous_response_id)",
                "input",
            )
    else:
        raise invalid("input must be a string or a non-empty list of messages", "input")
    messages = _joined(messages)
    _check_pairs(messages, "input", continued=previous is not None)
    message, history, results = _turn_of(messages, "input")
    tools = parse_tools(fields.get("tools"), ToolStyle.RESPONSES)
    return ResponsesRequest(
        model=_model(fields),
        message=message,
        options=_options(
            system,
            history,
            fields.get("top_p"),
            None,
            tools=tools,
            tool_choice=parse_tool_choice(fields.get("tool_choice"), tools, ToolStyle.RESPONSES),
            tool_results=results,
            parallel=parse_parallel(fields.get("parallel_tool_calls")),
        ),
        max_tokens=_max_tokens(fields, ("max_output_tokens",), max_tokens_limit),
        temperature=_unit_number(fields.get("temperature"), "temperature"),
        stream=_boolean(fields.get("stream"), "stream"),
        previous_response_id=previous,
        background=_boolean(fields.get("background"), "background"),
    )


def parse_chat_completion_request(
    body: bytes | None, *, max_tokens_limit: int, valid_base64: bool
) -> ChatCompletionRequest:
    example = '{"model": "chatstream", "messages": [{"role": "user", "content": "hello"}]}'
    fields = parse_json_object(body, valid_base64=valid_base64, example=example)
    _check_fields(fields, _CHAT_FIELDS, _CHAT_UNSUPPORTED)
    raw = fields.get("messages")
    if not isinstance(raw, list) or not raw:
        raise invalid("messages is required: a non-empty list of messages", "messages")
    system: list[str] = []
    messages = _joined(
        _split_system((_chat_message(item, f"messages[{index}]") for index, item in enumerate(raw)), system)
    )
    _check_pairs(messages, "messages", continued=False)
    message, history, results = _turn_of(messages, "messages")
    tools = parse_tools(fields.get("tools"), ToolStyle.CHAT)
    stream = _boolean(fields.get("stream"), "stream")
    include_usage = False
    stream_options = fields.get("stream_options")
    if stream_options is not None:
        if not stream:
            raise invalid("stream_options is only allowed with stream: true", "stream_options")
        if not isinstance(stream_options, dict):
            raise invalid("stream_options must be an object", "stream_options")
        for key in stream_options:
            if key not in ("include_usage", "include_obfuscation"):
                raise unsupported(f"stream_options.{key}")
        include_usage = _boolean(stream_options.get("include_usage"), "stream_options.include_usage")
    if "max_tokens" in fields and "max_completion_tokens" in fields:
        raise invalid("give max_tokens or max_completion_tokens, not both", "max_tokens")
    return ChatCompletionRequest(
        model=_model(fields),
        message=message,
        options=_options(
            system,
            history,
            fields.get("top_p"),
            _stop(fields.get("stop")),
            tools=tools,
            tool_choice=parse_tool_choice(fields.get("tool_choice"), tools, ToolStyle.CHAT),
            tool_results=results,
            parallel=parse_parallel(fields.get("parallel_tool_calls")),
        ),
        max_tokens=_max_tokens(fields, ("max_tokens", "max_completion_tokens"), max_tokens_limit),
        temperature=_unit_number(fields.get("temperature"), "temperature"),
        stream=stream,
        include_usage=include_usage,
    )


_MISSING = object()


def _check_fields(fields: Mapping[str, Any], known: frozenset[str], unsupported_fields: Mapping[str, Any]) -> None:
    for name in sorted(fields):
        if name in known:
            continue
        if name in unsupported_fields:
            accepts = unsupported_fields[name]
            if fields[name] is not None and (accepts is None or not accepts(fields[name])):
                if accepts is _hint:  # a hint is supported, not used: a value that is no string is a mistake in it
                    raise invalid(f"{name} must be a string", name)
                raise unsupported(name)  # null is "not given", as OpenAI reads it (openai-python sends seed=None so)
            continue
        raise OpenAIError(400, "unknown_parameter", f"unknown parameter {name!r}", name)


def _model(fields: Mapping[str, Any]) -> str:
    model = fields.get("model")
    if model is None or model == "":
        raise invalid("model is required: the deployment's model id (GET /v1/models lists it)", "model")
    if not isinstance(model, str):
        raise invalid("model must be a string: the deployment's model id (GET /v1/models lists it)", "model")
    return model


def _text(value: object, param: str) -> str:
    if not isinstance(value, str):
        raise invalid(f"{param} must be a string", param)
    if is_blank(value):
        raise invalid(f"{param} must not be empty or only whitespace", param)
    if len(value) > MAX_MESSAGE_CHARS:
        raise invalid(f"{param} is {len(value)} characters; the limit is {MAX_MESSAGE_CHARS}", param)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise invalid(f"{param} contains invalid Unicode (a lone surrogate escape)", param) from None
    return value


# A Responses text part in a message of the other side (OpenAI refuses it too): what to send instead.
_MISPLACED_TEXT = {
    "input_text": "an assistant message's content must be output_text parts (as a response's output has them), "
    "not input_text",
    "output_text": "a user, system or developer message's content must be input_text parts, not output_text",
}


def _parts(content: object, param: str, part_types: tuple[str, ...]) -> str:
    """A message's text: a string, or a list of text parts (joined); any other part is unsupported."""
    if isinstance(content, str):
        return _text(content, param)
    if not isinstance(content, list) or not content:
        raise invalid(f"{param} must be a string or a non-empty list of text parts", param)
    texts = []
    for index, part in enumerate(content):
        where = f"{param}[{index}]"
        if not isinstance(part, dict):
            raise invalid(f"{where} must be a content part object", where)
        kind = part.get("type")
        if not isinstance(kind, str):
            raise invalid(f"{where}.type must be a string", f"{where}.type")
        if kind in _MISPLACED_TEXT and kind not in part_types:
            raise invalid(_MISPLACED_TEXT[kind], f"{where}.type")
        if kind not in part_types:
            raise unsupported(f"{where}.type", f"{kind!r} parts; only text is")
        for key in part:
            if key not in ("type", "text", "annotations", "logprobs"):  # logprobs: as a response's output has them
                raise unsupported(f"{where}.{key}")
        texts.append(_text(part.get("text"), f"{where}.text"))
    return "".join(texts)


def _input_item(item: object, param: str, resolve_item: ItemResolver | None) -> Said | None:
    """What an input item said; ``None`` for a response's ``reasoning`` item, which the model is never sent back
    (a conversation passed back whole, ``input=[…, *response.output, …]``, has them). An ``item_reference`` (what
    the Vercel AI SDK sends for an earlier output) is the item it names, found by ``resolve_item``; a
    ``function_call`` item is an assistant's call, a ``function_call_output`` item its result."""
    if not isinstance(item, dict):
        raise invalid(f"{param} must be a message object", param)
    if item.get("type") == "reasoning":
        return None
    if item.get("type") == "function_call":
        _only_keys(item, ("type", "call_id", "name", "arguments", "id", "status", "parsed_arguments"), param)
        call = tool_call(
            item.get("call_id"),
            item.get("name"),
            item.get("arguments"),
            param,
            id_param=f"{param}.call_id",
            name_param=f"{param}.name",
        )
        return Said("assistant", "", calls=(call,), param=param)
    if item.get("type") == "function_call_output":
        _only_keys(item, ("type", "call_id", "output", "id", "status"), param)
        output = result_text(item.get("output"), f"{param}.output", ("input_text",))
        result = ToolResult(call_id(item.get("call_id"), f"{param}.call_id"), output)
        return Said("user", "", results=(result,), param=param, results_param=param)
    if item.get("type") == "item_reference" and resolve_item is not None:
        for key in item:
            if key not in ("type", "id"):
                raise unsupported(f"{param}.{key}")
        item_id = item.get("id")
        if not isinstance(item_id, str) or not item_id:
            raise invalid(f"{param}.id must be the id of an earlier response's output item", f"{param}.id")
        said = resolve_item(item_id, f"{param}.id")
        return None if said is None else replace(said, param=param)
    if item.get("type", "message") != "message":
        raise unsupported(f"{param}.type", f"{item.get('type')!r} items; only messages and function calls are")
    _only_keys(item, ("type", "role", "content", "id", "status"), param)
    role = item.get("role")
    if role not in ("user", "assistant", "system", "developer"):
        raise invalid(f"{param}.role must be user, assistant, system or developer", f"{param}.role")
    part_types = ("output_text",) if role == "assistant" else ("input_text",)
    return Said(str(role), _parts(item.get("content"), f"{param}.content", part_types), param=param)


def _only_keys(item: Mapping[str, Any], keys: Sequence[str], param: str) -> None:
    for key in item:
        if key not in keys:
            raise unsupported(f"{param}.{key}")


# Fields of an assistant message as a chat completion returns it, accepted when null or empty: ``parsed`` is the SDKs'
# own (openai-python's ParsedChatCompletionMessage from .parse() and .stream()'s get_final_completion(), openai-node's
# finalChatCompletion()), null without a response_format.
_EMPTY_MESSAGE_FIELDS = frozenset({"refusal", "annotations", "function_call", "audio", "parsed"})


def _chat_message(item: object, param: str) -> Said:
    if not isinstance(item, dict):
        raise invalid(f"{param} must be a message object", param)
    role = item.get("role")
    if role == "function":
        raise unsupported(f"{param}.role", "'function' messages (the deprecated function calling; use tools)")
    if role == "tool":
        return _tool_message(item, param)
    if role not in ("user", "assistant", "system", "developer"):
        raise invalid(f"{param}.role must be system, developer, user, assistant or tool", f"{param}.role")
    raw_calls = item.get("tool_calls")
    calls = _assistant_calls(raw_calls, f"{param}.tool_calls") if role == "assistant" and raw_calls else ()
    for key, value in item.items():
        if key in ("role", "content") or (key == "tool_calls" and (calls or value in (None, []))):
            continue
        if key in _EMPTY_MESSAGE_FIELDS and value in (None, [], ""):
            continue  # a completion's own message passed back (messages.push(choice.message)) has them empty
        if key == "reasoning_content":
            # A completion's reasoning, passed back with its message (what a client of DeepSeek's API keeps): dropped,
            # as the model is never sent reasoning back (on any role: the message schema is one for all roles)
            if value is not None and not isinstance(value, str):
                raise invalid(f"{param}.reasoning_content must be a string", f"{param}.reasoning_content")
            continue
        raise unsupported(f"{param}.{key}")
    content = item.get("content")
    if calls and (content is None or content == ""):
        return Said("assistant", "", calls=calls, param=param)  # a reply that only called tools has no text
    return Said(str(role), _parts(content, f"{param}.content", ("text",)), calls=calls, param=param)


def _tool_message(item: Mapping[str, Any], param: str) -> Said:
    """A ``role: tool`` message: the result of one call (``tool_call_id``), on the user's side of the conversation."""
    _only_keys(item, ("role", "content", "tool_call_id"), param)
    result = ToolResult(
        call_id(item.get("tool_call_id"), f"{param}.tool_call_id"),
        result_text(item.get("content"), f"{param}.content", ("text",)),
    )
    return Said("user", "", results=(result,), param=param, results_param=param)


def _assistant_calls(value: object, param: str) -> tuple[ToolCall, ...]:
    """An assistant message's ``tool_calls``, as a completion gives them: ``[{"id", "type": "function", "function":
    {"name", "arguments"}}]``."""
    if not isinstance(value, list):
        raise invalid(f"{param} must be a list of tool calls", param)
    calls = []
    for index, entry in enumerate(value):
        where = f"{param}[{index}]"
        if not isinstance(entry, dict):
            raise invalid(f"{where} must be a tool call object", where)
        _only_keys(entry, ("id", "type", "function", "index"), where)  # index: as a stream's accumulated calls have it
        if entry.get("type", "function") != "function":
            raise unsupported(f"{where}.type", f"{entry.get('type')!r} tool calls")
        function = entry.get("function")
        if not isinstance(function, dict):
            raise invalid(f"{where}.function must be an object with the call's name and arguments", f"{where}.function")
        # parsed_arguments: the SDKs' own (openai-python's stream helper and .parse() fill it), ignored
        _only_keys(function, ("name", "arguments", "parsed_arguments"), f"{where}.function")
        calls.append(
            tool_call(
                entry.get("id"),
                function.get("name"),
                function.get("arguments"),
                f"{where}.function",
                id_param=f"{where}.id",
                name_param=f"{where}.function.name",
            )
        )
    return tuple(calls)


def _check_pairs(messages: Sequence[Said], param: str, *, continued: bool) -> None:
    """In the joined conversation, each user message's results answer exactly the calls of the assistant message
    right before it (Bedrock's rule: a ``toolUse`` answered in the next user message, a ``toolResult`` answering a
    ``toolUse`` of the message before). Results that open a ``continued`` conversation answer the previous response's
    calls, which the endpoint checks (:func:`leading_results`)."""
    before: Said | None = None
    for message in messages:
        answered = [result.tool_call_id for result in message.results]
        if len(set(answered)) != len(answered):
            repeated = next(call for call in answered if answered.count(call) > 1)
            raise invalid(f"{param} answers tool call {repeated!r} twice", message.results_param)
        if message.role == "user":
            asked = before.calls if before is not None else ()
            if message.results and not asked and not (continued and before is None):
                where = message.results_param
                raise invalid(
                    f"{where} is a tool result, which must follow an assistant message with tool calls", where
                )
            if asked:
                check_answers(asked, message.results, param, before.param if before is not None else "")
        before = message
    if before is not None and before.calls:
        check_answers(before.calls, (), param, before.param)


def leading_results(request: TurnRequest) -> tuple[ToolResult, ...]:
    """The results a continued conversation's input begins with (the first history message's, or the turn's own
    when the input holds nothing else): the answers to the previous response's calls."""
    history = request.options.history
    return history[0].tool_results if history else request.options.tool_results


def _joined(messages: Iterable[Said]) -> list[Said]:
    """The conversation with consecutive messages of one role joined: their texts (by a blank line), calls and
    results (a reply's text and its ``function_call`` items are one assistant message, results and the user's text
    after them one user message)."""
    merged: list[Said] = []
    for message in messages:
        last = merged[-1] if merged else None
        if last is not None and last.role == message.role:
            text = "\n\n".join(text for text in (last.text, message.text) if text)
            merged[-1] = replace(
                last,
                text=text,
                calls=last.calls + message.calls,
                results=last.results + message.results,
                results_param=last.results_param or message.results_param,
            )
        else:
            merged.append(message)
    return merged


def _turn_of(merged: list[Said], param: str) -> tuple[str, tuple[HistoryMessage, ...], tuple[ToolResult, ...]]:
    """The turn's message (the last, a user's: its text, ``""`` for results alone), its history and its results,
    from the joined conversation."""
    if not merged or merged[-1].role != "user":
        raise invalid(f"the last message of {param} must be the user's (or tool results)", param)
    if merged[0].role != "user":
        raise invalid(f"the first message of {param} (after system ones) must be the user's", param)
    history = tuple(
        HistoryMessage("user" if said.role == "user" else "assistant", said.text, said.calls, said.results)
        for said in merged[:-1]
    )
    return merged[-1].text, history, merged[-1].results


def _split_system(said: Iterable[Said], system: list[str]) -> list[Said]:
    """The conversation's messages, in order; the ``system``/``developer`` ones' texts go to ``system``."""
    messages: list[Said] = []
    for message in said:
        if message.role in ("system", "developer"):
            system.append(message.text)
        else:
            messages.append(message)
    return messages


def _options(
    system: list[str],
    history: tuple[HistoryMessage, ...],
    top_p: object,
    stop: tuple[str, ...] | None,
    *,
    tools: tuple[ToolSpec, ...] = (),
    tool_choice: ToolChoice | None = None,
    tool_results: tuple[ToolResult, ...] = (),
    parallel: bool = True,
) -> TurnOptions:
    return TurnOptions(
        system="\n\n".join(system) if system else None,
        top_p=_unit_number(top_p, "top_p"),
        stop=stop or (),
        history=history,
        tools=tools,
        tool_choice=tool_choice,
        tool_results=tool_results,
        parallel_tool_calls=parallel,
    )


def _stop(value: object) -> tuple[str, ...] | None:
    if value is None:
        return None
    sequences = [value] if isinstance(value, str) else value
    if (
        not isinstance(sequences, list)
        or not 1 <= len(sequences) <= MAX_STOP_SEQUENCES
        or not all(isinstance(sequence, str) and sequence for sequence in sequences)
    ):
        raise invalid(f"stop must be a string or a list of 1 to {MAX_STOP_SEQUENCES} non-empty strings", "stop")
    return tuple(sequences)


def _max_tokens(fields: Mapping[str, Any], names: tuple[str, ...], limit: int) -> int | None:
    for name in names:
        value = fields.get(name)
        if value is None:
            continue
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # JSON has one number type: 5.0 and 5 are the same number
        if isinstance(value, bool) or not isinstance(value, int):
            raise invalid(f"{name} must be an integer", name)
        if not 1 <= value <= limit:
            raise invalid(f"{name} must be between 1 and {limit}, got {value}", name)
        return value
    return None


def _unit_number(value: object, param: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise invalid(f"{param} must be a number", param)
    if not math.isfinite(value) or not 0 <= value <= 1:
        raise invalid(f"{param} must be between 0 and 1 (Bedrock's range), got {value}", param)
    return float(value)


def _boolean(value: object, param: str) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise invalid(f"{param} must be a boolean", param)
    return value
