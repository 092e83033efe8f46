"""The relay end to end through the local stack: Function URL → relay → proxy → Kinesis → consumer → table."""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx
import pytest

from chatstream.status import StopReason, TurnStatus
from chatstream_client.api import ApiError, ChatClient, ids_in_order
from chatstream_local.bedrock.model import plan_reply
from chatstream_local.event_sources.kinesis import ReadMode
from chatstream_local.stack import ENHANCED_FAN_OUT_ENV, StackSettings

if TYPE_CHECKING:
    from collections.abc import Callable

    from chatstream_local.stack import LocalStack
    from chatstream_local.template import Template

pytestmark = pytest.mark.integration


def test_chat_streams_the_exact_reply_with_history(start_stack: Callable[..., LocalStack], template: Template) -> None:
    # GIVEN the local stack, reading the stream as template.yaml's default EnhancedFanOut deploys it
    stack = start_stack()
    assert stack.esm is not None
    default_mode = ReadMode.ENHANCED_FAN_OUT if template.parameter("EnhancedFanOut") == "true" else ReadMode.POLLING
    assert stack.esm.read_mode is default_mode
    with ChatClient(stack.url) as client:
        # WHEN a user chats twice in one session
        first = client.chat("hello world")
        second = client.chat("/long 300", first.session_id)
        # THEN each stream carries the exact reply, ids in order completing records 1, 2, …, and ends with done
        assert first.text == "You said: hello world" and first.done is not None
        assert first.done["stop_reason"] == StopReason.END_TURN
        assert second.text == plan_reply("/long 300").text
        assert ids_in_order(second.ids)
        # AND no event came twice and no stream had to be resumed
        assert first.clean and second.clean, first.incidents + second.incidents + [str(second.repeated_ids)]
        assert (second.session_id, second.turn) == (first.session_id, 2)
        # AND history has both turns, complete, with the assembled text
        history = client.history(first.session_id)
        assert [(t["turn"], t["status"], t["assistant"]) for t in history["turns"]] == [
            (1, TurnStatus.COMPLETE, "You said: hello world"),
            (2, TurnStatus.COMPLETE, plan_reply("/long 300").text),
        ]


def test_model_errors_reach_the_client(start_stack: Callable[..., LocalStack]) -> None:
    stack = start_stack()
    with ChatClient(stack.url) as client:
        failed = client.chat("/error-after 3")
        assert failed.text == "w1 w2 w3"
        assert failed.error is not None and failed.error["code"] == "model_stream_error"
        throttled = client.chat("/throttle")
        assert throttled.text == "" and throttled.error is not None and throttled.error["retryable"] is True
        assert failed.clean and throttled.clean, failed.incidents + throttled.incidents


def test_errors_before_the_stream_are_json(start_stack: Callable[..., LocalStack]) -> None:
    stack = start_stack()
    response = httpx.post(f"{stack.url}/chat", content=b"{not json")
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_json"
    with ChatClient(stack.url) as client, pytest.raises(ApiError) as raised:
        client.history("0" * 32)
    assert raised.value.status == 404 and raised.value.code == "session_not_found"


def test_a_user_chooses_the_other_read_mode_and_chats_stream_exactly(
    start_stack: Callable[..., LocalStack], template: Template
) -> None:
    # GIVEN CHATSTREAM_ENHANCED_FAN_OUT set to what template.yaml does not default to
    other = "false" if template.parameter("EnhancedFanOut") == "true" else "true"
    settings = StackSettings.from_env({ENHANCED_FAN_OUT_ENV: other})
    assert settings.parameter_overrides == {"FunctionUrlAuthType": "NONE", "EnhancedFanOut": other}
    # WHEN the stack starts with it
    stack = start_stack(parameter_overrides=settings.parameter_overrides)
    # THEN its mapping reads the stream that way, and a reply streams exactly, ending with done
    assert stack.esm is not None
    assert stack.esm.read_mode is (ReadMode.ENHANCED_FAN_OUT if other == "true" else ReadMode.POLLING)
    with ChatClient(stack.url) as client:
        reply = client.chat("/long 40")
    assert reply.text == plan_reply("/long 40").text and reply.done is not None
    assert ids_in_order(reply.ids)
