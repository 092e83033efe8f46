"""A turn's options: stored in the turn item by the relay, read back by the proxy, sent to ConverseStream."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from chatstream.config import ProxyConfig
from chatstream.errors import ConfigError
from chatstream.generation import Generation, GenerationSettings
from chatstream.turn_options import HistoryMessage, TurnOptions
from tests.unit.relay.relay_support import write_turn

if TYPE_CHECKING:
    from chatstream.table import ChatTable

OPTIONS = TurnOptions(
    system="Answer in French.",
    top_p=0.9,
    stop=("END", "\n\n"),
    history=(HistoryMessage("user", "hi"), HistoryMessage("assistant", "hello")),
)


def converse_params(
    table: ChatTable, session_id: str, turn: int, system_prompt: str = "", environ: dict[str, str] | None = None
) -> dict[str, Any]:
    item = table.get_turn(session_id, turn)
    assert item is not None
    config = ProxyConfig.from_env(
        {"CHAT_TABLE_NAME": "t", "TOKEN_STREAM_NAME": "s", "MODEL_ID": "model-x", "SYSTEM_PROMPT": system_prompt}
        | (environ or {})
    )
    generation = Generation(item, None, None, table, GenerationSettings.from_config(config))  # type: ignore[arg-type]
    return generation._converse_params()


def test_the_options_go_through_the_turn_item_to_converse_stream(chat_table: ChatTable) -> None:
    # GIVEN a turn started with every option
    session_id = chat_table.turns.start_first("me", "/history", max_tokens=9, temperature=0.2, options=OPTIONS)
    # WHEN the proxy reads it back THEN the turn item holds them, exactly
    turn = chat_table.get_turn(session_id, 1)
    assert turn is not None and turn.options == OPTIONS
    # AND the ConverseStream request carries them: the deployment's system prompt first, the history before the
    # turn's message
    params = converse_params(chat_table, session_id, 1, system_prompt="You are chatstream.")
    assert params["system"] == [{"text": "You are chatstream."}, {"text": "Answer in French."}]
    assert params["inferenceConfig"] == {
        "maxTokens": 9,
        "temperature": 0.2,
        "topP": 0.9,
        "stopSequences": ["END", "\n\n"],
    }
    assert params["messages"] == [
        {"role": "user", "content": [{"text": "hi"}]},
        {"role": "assistant", "content": [{"text": "hello"}]},
        {"role": "user", "content": [{"text": "/history"}]},
    ]


def test_a_turn_without_options_sends_none_but_the_deployments_cap(chat_table: ChatTable) -> None:
    session_id = chat_table.turns.start_first("me", "hello")
    turn = chat_table.get_turn(session_id, 1)
    assert turn is not None and turn.options == TurnOptions()
    params = converse_params(chat_table, session_id, 1)
    # no system prompt, no sampling options: only maxTokens, the deployment's MaxTokensLimit (4096 by default), so
    # Bedrock does not allow the model's own maximum
    assert "system" not in params and params["inferenceConfig"] == {"maxTokens": 4096}
    assert params["messages"] == [{"role": "user", "content": [{"text": "hello"}]}]


def test_the_deployments_model_request_fields_go_to_converse_stream(chat_table: ChatTable) -> None:
    # GIVEN a deployment that turns on Claude's extended thinking (the ModelRequestFields parameter)
    thinking = {"thinking": {"type": "enabled", "budget_tokens": 2048}}
    session_id = chat_table.turns.start_first("me", "hello")
    # WHEN the proxy builds the request THEN they are its additionalModelRequestFields, as given
    params = converse_params(chat_table, session_id, 1, environ={"MODEL_REQUEST_FIELDS": json.dumps(thinking)})
    assert params["additionalModelRequestFields"] == thinking
    # AND blank, there are none
    assert "additionalModelRequestFields" not in converse_params(chat_table, session_id, 1, environ={})


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ("{", "MODEL_REQUEST_FIELDS must be a JSON object, and is not JSON"),
        ("[1]", "got an array"),
        ("7", "got a number"),
        ("null", "got null"),
    ],
)
def test_model_request_fields_that_are_not_a_json_object_fail_the_cold_start(value: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        ProxyConfig.from_env(
            {"CHAT_TABLE_NAME": "t", "TOKEN_STREAM_NAME": "s", "MODEL_ID": "m", "MODEL_REQUEST_FIELDS": value}
        )


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"top_p": 1.5}, "top_p"),
        ({"stop": ("a", "b", "c", "d", "e")}, "stop"),
        ({"stop": ("",)}, "stop"),
        ({"history": (HistoryMessage("assistant", "x"), HistoryMessage("user", "y"))}, "history"),
        ({"history": (HistoryMessage("user", "x"),)}, "history"),
        ({"history": (HistoryMessage("user", " "), HistoryMessage("assistant", "y"))}, "history"),
    ],
)
def test_options_bedrock_would_refuse_cannot_be_made(options: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        TurnOptions(**options)


def test_a_later_turn_replays_the_history_an_earlier_turn_was_sent_with(chat_table: ChatTable) -> None:
    # GIVEN turn 1 sent with a history, and answered
    session_id = chat_table.turns.start_first("me", "three", options=TurnOptions(history=OPTIONS.history))
    write_turn(chat_table, session_id, 1, ["four"])
    # WHEN turn 2 follows it
    turn = chat_table.turns.start_next(session_id, "me", "/history")
    # THEN the model is sent turn 1's history, turn 1, then turn 2
    texts = [
        (message["role"], message["content"][0]["text"])
        for message in converse_params(chat_table, session_id, turn)["messages"]
    ]
    assert texts == [
        ("user", "hi"),
        ("assistant", "hello"),
        ("user", "three"),
        ("assistant", "four"),
        ("user", "/history"),
    ]


def test_history_text_is_blank_as_the_api_says_so() -> None:
    # GIVEN history whose text the API accepts as not blank (a control character that no definition of whitespace
    # counts) THEN the options can be made; text that any of them calls whitespace cannot (Bedrock would refuse it)
    assert TurnOptions(history=(HistoryMessage("user", "\x1b"), HistoryMessage("assistant", "\x00"))).history
    for blank in ("\u3000\ufeff", "\x1d", "\x85"):
        with pytest.raises(ValueError, match="history"):
            TurnOptions(history=(HistoryMessage("user", blank), HistoryMessage("assistant", "y")))
