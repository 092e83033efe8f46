"""The relay end to end through the local stack: Function URL → relay → proxy → Kinesis → consumer → table."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

import botocore.session
import httpx
import pytest
from httpx_sse import EventSource

from chaos.checks import is_dropped_duplicate
from chatstream.status import StopReason, TurnStatus
from chatstream_client.api import ApiError, ChatClient, ids_in_order
from chatstream_local.bedrock.model import plan_reply
from chatstream_local.event_sources.kinesis import ReadMode
from chatstream_local.stack import ENHANCED_FAN_OUT_ENV, FAN_OUT_LATENCY_ENV, StackError, StackSettings
from tests.fixtures.local_handlers.specs import wait_until
from tests.layer_operations import FUNCTION_OPERATIONS

if TYPE_CHECKING:
    from collections.abc import Callable

    from chatstream_local.stack import LocalStack
    from chatstream_local.template import Template

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack(start_module_stack: Callable[..., LocalStack]) -> LocalStack:
    """The local stack as `make local` starts it, for the tests that need nothing else of it."""
    return start_module_stack()


def stored_items(stack: LocalStack) -> int:
    """How many items the stack's ChatTable holds."""
    return int(stack.client("dynamodb").scan(TableName=stack.name("ChatTable"), Select="COUNT")["Count"])


def test_chat_streams_the_exact_reply_with_history(stack: LocalStack, template: Template) -> None:
    # GIVEN the local stack, reading the stream as template.yaml's default EnhancedFanOut deploys it
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


def test_the_functions_run_on_the_layers_botocore_models(stack: LocalStack) -> None:
    # GIVEN the local stack
    assert stack.local_lambda is not None
    for logical_id in ("RelayFunction", "ProxyFunction", "ConsumerFunction", "TurnReaperFunction"):
        # THEN each function's botocore reads the models the layer ships before its own: a client of each service the
        # functions call has the operations they call and no other (so a test calling any other one fails)
        data_path = stack.local_lambda.spec(stack.name(logical_id)).environment["AWS_DATA_PATH"]
        session = botocore.session.get_session()
        session.set_config_variable("data_path", data_path)
        for service, operations in FUNCTION_OPERATIONS.items():
            client = session.create_client(service, region_name="us-east-1")
            assert set(client.meta.service_model.operation_names) == operations, (logical_id, service)


def sse_events(response: httpx.Response) -> list[tuple[str, str, dict]]:
    """Every event of an SSE response as (event, id, data); the ``retry:`` line alone is no event."""
    return [(event.event, event.id, json.loads(event.data)) for event in EventSource(response).iter_sse() if event.data]


def joined(events: list[tuple[str, str, dict]], kind: str) -> str:
    return "".join(data["text"] for event, _, data in events if event == kind)


def test_reasoning_streams_before_the_reply_and_resumes_from_inside_it(stack: LocalStack) -> None:
    # GIVEN the local stack
    with httpx.Client(base_url=stack.url, timeout=60) as http:
        # WHEN a user asks the model to reason in three words, over a plain SSE client
        with http.stream("POST", "/chat", json={"message": "/think 3 hello"}) as response:
            assert response.status_code == 200
            events = sse_events(response)
        kinds = [event for event, _, _ in events]
        # THEN the reasoning comes first, as reasoning events, exactly three words; then exactly the reply
        assert kinds[0] == "meta" and kinds[-1] == "done"
        body = kinds[1:-1]
        assert body == sorted(body, key=lambda kind: kind == "token") and body[0] == "reasoning"
        assert joined(events, "reasoning") == "r1 r2 r3"
        assert joined(events, "token") == "You said: hello"
        # THEN done's usage is the model's count, its reasoning included
        assert events[-1][2]["usage"]["output_tokens"] == 3 + 3
        # WHEN a client resumes from the id of each reasoning event (a word-sized piece inside a record, or a whole one)
        events_url = events[0][2]["events_url"]
        for index, (kind, event_id, _) in enumerate(events):
            if kind != "reasoning":
                continue
            with http.stream("GET", events_url, headers={"Last-Event-ID": event_id}) as response:
                resumed = sse_events(response)
            # THEN it gets exactly what came after that event: the rest of the reasoning, then the reply
            assert joined(events[: index + 1], "reasoning") + joined(resumed, "reasoning") == "r1 r2 r3"
            assert joined(resumed, "token") == "You said: hello" and resumed[-1][0] == "done"
        # AND the history keeps the reasoning apart from the reply
        turn = http.get(f"/sessions/{events[0][2]['session_id']}").json()["turns"][0]
        assert (turn["assistant"], turn["reasoning"]) == ("You said: hello", "r1 r2 r3")


def test_model_errors_reach_the_client(stack: LocalStack) -> None:
    with ChatClient(stack.url) as client:
        failed = client.chat("/error-after 3")
        assert failed.text == "w1 w2 w3"
        assert failed.error is not None and failed.error["code"] == "model_stream_error"
        throttled = client.chat("/throttle")
        assert throttled.text == "" and throttled.error is not None and throttled.error["retryable"] is True
        assert failed.clean and throttled.clean, failed.incidents + throttled.incidents


def test_errors_before_the_stream_are_json(stack: LocalStack) -> None:
    response = httpx.post(f"{stack.url}/chat", content=b"{not json")
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_json"
    with ChatClient(stack.url) as client, pytest.raises(ApiError) as raised:
        client.history("0" * 32)
    assert raised.value.status == 404 and raised.value.code == "session_not_found"


def test_no_page_of_another_origin_or_host_name_can_drive_or_read_the_stack(
    stack: LocalStack,
) -> None:
    # GIVEN the local stack as `make local` starts it (AuthType NONE, no CorsAllowOrigins given)
    port = stack.url.rsplit(":", 1)[1]
    chat, plain = b'{"message": "drive-by"}', {"Content-Type": "text/plain"}
    relay = stack.name("RelayFunction")
    items_before = stored_items(stack)  # the module's other tests share the stack: their sessions are there
    with httpx.Client(base_url=stack.url, timeout=60) as http:
        # WHEN a page elsewhere posts a chat (text/plain: a "simple" request, sent without a preflight) or asks first
        from_page = http.post("/chat", content=chat, headers={**plain, "Origin": "https://evil.example"})
        preflight = http.options(
            "/chat", headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"}
        )
        # AND a page reaches the port under its own name (DNS rebinding): the Function URL and the Lambda API on it
        rebound = http.post("/chat", content=chat, headers={**plain, "Host": f"rebind.attacker.example:{port}"})
        rebound_api = http.get(f"/2015-03-31/functions/{relay}", headers={"Host": f"rebind.attacker.example:{port}"})
        # AND a page posts an invocation to the Lambda API (a text/plain body is one too)
        invoked = http.post(
            f"/2015-03-31/functions/{relay}/invocations",
            content=b"{}",
            headers={"Content-Type": "text/plain", "Origin": "https://evil.example"},
        )
        # THEN each is refused with a reason, and no answer carries a CORS header that would hand it to the page
        assert from_page.status_code == 403 and "CorsAllowOrigins" in from_page.json()["Message"]
        assert rebound.status_code == 403 and "is not this local endpoint's address" in rebound.json()["Message"]
        for refused in (preflight, rebound_api, invoked):
            assert refused.status_code == 403, refused.text
        for refused in (from_page, preflight, rebound, rebound_api, invoked):
            assert not [name for name in refused.headers if name.lower().startswith("access-control-")]
        # AND the relay never ran: the table holds no new session
        assert stored_items(stack) == items_before
        # AND the relay's own page (same origin), localhost and tools without an Origin are answered as before
        own = http.post("/chat", content=chat, headers={**plain, "Origin": stack.url})
        by_name = http.get("/health", headers={"Host": f"localhost:{port}"})
        assert own.status_code == 200 and "event: done" in own.text
        assert by_name.json() == {"status": "ok"}
        assert http.get(f"/2015-03-31/functions/{relay}").json()["Configuration"]["FunctionName"] == relay


def test_with_cors_allow_origins_given_only_the_origins_it_names_reach_the_stack(
    start_stack: Callable[..., LocalStack],
) -> None:
    # GIVEN the local stack started for a page of https://app.example
    stack = start_stack(parameter_overrides={"FunctionUrlAuthType": "NONE", "CorsAllowOrigins": "https://app.example"})
    chat, plain = b'{"message": "hi"}', {"Content-Type": "text/plain"}
    with httpx.Client(base_url=stack.url, timeout=60) as http:
        # WHEN that page posts a chat, and a page of another origin does (a simple request: no preflight)
        allowed = http.post("/chat", content=chat, headers={**plain, "Origin": "https://app.example"})
        items = stored_items(stack)
        other = http.post("/chat", content=chat, headers={**plain, "Origin": "https://other.example"})
    # THEN the first is answered with the template's CORS, and the second refused before the relay runs
    assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == "https://app.example"
    assert other.status_code == 403 and "CorsAllowOrigins" in other.json()["Message"]
    assert stored_items(stack) == items


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


@pytest.mark.parametrize(("raw", "ms"), [("70", 70), ("", 0), ("70.5", None), ("-1", None), ("99999", None)])
def test_the_fan_out_latency_is_read_from_its_variable_or_refused_in_one_line(raw: str, ms: int | None) -> None:
    # GIVEN CHATSTREAM_LOCAL_FANOUT_LATENCY_MS WHEN the stack's settings are read THEN milliseconds, or a clear error
    if ms is None:
        with pytest.raises(StackError, match=f"{FAN_OUT_LATENCY_ENV} must be milliseconds"):
            StackSettings.from_env({FAN_OUT_LATENCY_ENV: raw})
    else:
        assert StackSettings.from_env({FAN_OUT_LATENCY_ENV: raw}).fan_out_latency_ms == ms


def test_a_proxy_event_delivered_twice_is_generated_once(start_stack: Callable[..., LocalStack]) -> None:
    # GIVEN the local stack delivering every asynchronous invocation twice, as Lambda may, the second up to 1 s later;
    # 5 ms a delta, so a reply of 300 takes 1.5 s and its second delivery comes while it generates
    lines: list[tuple[str, str]] = []
    stack = start_stack(
        log=lambda component, line: lines.append((component, line)), duplicate_events=1.0, model_delay_ms=5
    )
    assert stack.invoke_endpoint is not None
    with ChatClient(stack.url) as client:
        # WHEN a user chats twice: a long reply the duplicate overlaps, a short one it comes after
        first = client.chat("/long 300")
        second = client.chat("hello", first.session_id)
        history = client.history(first.session_id)
    assert stack.invoke_endpoint.wait_idle(timeout=30)

    # THEN the proxy got each event twice, and each stream and turn holds its reply once
    assert stack.invoke_endpoint.duplicates == {stack.name("ProxyFunction"): 2}
    assert (first.text, second.text) == (plan_reply("/long 300").text, "You said: hello")
    assert first.clean and second.clean, first.incidents + second.incidents
    assert [(t["status"], t["assistant"]) for t in history["turns"]] == [
        (TurnStatus.COMPLETE, plan_reply("/long 300").text),
        (TurnStatus.COMPLETE, "You said: hello"),
    ]
    # AND the proxy said it dropped each second delivery (its log reaches the stack's a moment after it returns)
    wait_until(
        lambda: sum(1 for component, line in lines if is_dropped_duplicate(line) and "ProxyFunction" in component) == 2,
        timeout_s=5,
        what="the proxy's two duplicate drops in its log",
    )


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (
            {"ModelRequestFields": "{thinking: on}"},
            "ProxyFunction would fail every cold start: environment variable MODEL_REQUEST_FIELDS",
        ),
        ({"TtlDays": "1.5"}, "would fail every cold start: environment variable TTL_DAYS must be an integer"),
    ],
)
def test_a_parameter_the_template_accepts_and_a_function_refuses_stops_the_stack_in_one_line(
    start_stack: Callable[..., LocalStack], overrides: dict[str, str], says: str
) -> None:
    # GIVEN a parameter CloudFormation would deploy (it matches the template's pattern, or is a Number) WHEN the stack
    # starts with it THEN it stops at once, naming the function and the variable, instead of failing every chat
    with pytest.raises(StackError, match=re.escape(says)):
        start_stack(parameter_overrides=overrides)
