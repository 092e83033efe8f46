"""Hardening, end to end on the local stack: no message text in INFO logs, every input bounded, and
under AWS_IAM auth a session is invisible (404) to every caller but its owner."""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from chatstream_client.api import ChatClient
from chatstream_local.iam import iam_identity
from chatstream_local.stack import LocalStack, StackSettings

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

pytestmark = pytest.mark.integration

MAX_TURNS = 2


@pytest.fixture(scope="module")
def logged() -> Iterator[tuple[LocalStack, list[tuple[str, str]]]]:
    """A stack at the template's log level (INFO) whose every function log line is kept."""
    lines: list[tuple[str, str]] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        settings = StackSettings(
            port=0,
            model_delay_ms=0,
            verbose=True,
            function_overrides={"RelayFunction": {"MAX_TURNS_PER_SESSION": str(MAX_TURNS)}},
        )
        stack = LocalStack(settings, log=lambda component, line: lines.append((component, line))).start()
        try:
            yield stack, lines
        finally:
            stack.stop()


def _post(stack: LocalStack, body: bytes | dict[str, Any], headers: Mapping[str, str] | None = None) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(f"{stack.url}/chat", content=content, headers=dict(headers or {}), timeout=30)


def test_message_text_is_never_logged_at_info(logged: tuple[LocalStack, list[tuple[str, str]]]) -> None:
    stack, lines = logged
    # GIVEN a message with a unique marker, and one the model fails on (a warning is logged for it)
    marker = f"secret-{uuid.uuid4().hex}"
    with ChatClient(stack.url) as client:
        first = client.chat(f"hello {marker}")
        failing = client.chat("/error-after 2", session_id=first.session_id)
    assert first.done is not None and marker in first.text
    assert failing.error is not None
    assert first.clean and failing.clean, first.incidents + failing.incidents

    # WHEN every function has run (relay, proxy and consumer all wrote log lines)
    components = {component.split("#")[0] for component, _ in lines}
    assert {"RelayFunction", "ProxyFunction", "ConsumerFunction"} <= components, components

    # THEN the marker appears in no log line at INFO or above (DEBUG is off at the default level)
    leaking = [(component, line) for component, line in lines if marker in line]
    assert leaking == []


def test_every_input_is_bounded(logged: tuple[LocalStack, list[tuple[str, str]]]) -> None:
    stack, _ = logged
    # GIVEN a body over 256 KiB, a message over 32,000 characters, an oversized Last-Event-ID
    # WHEN each is sent, THEN each gets its documented error
    too_big = _post(stack, b'{"message":"' + b"x" * (256 * 1024) + b'"}')
    assert (too_big.status_code, too_big.json()["error"]["code"]) == (413, "payload_too_large")
    too_long = _post(stack, {"message": "x" * 32_001})
    assert (too_long.status_code, too_long.json()["error"]["code"]) == (400, "invalid_request")
    assert "message" in too_long.json()["error"]["message"]
    with ChatClient(stack.url) as client:
        turn = client.chat("bounded")
    events = httpx.get(f"{stack.url}{turn.events_url}", headers={"Last-Event-ID": "9" * 5000}, timeout=30)
    assert (events.status_code, events.json()["error"]["code"]) == (400, "invalid_request")

    # AND a session takes at most MAX_TURNS turns
    with ChatClient(stack.url) as client:
        for _ in range(MAX_TURNS - 1):
            assert client.chat("again", session_id=turn.session_id).done is not None
    over = _post(stack, {"message": "one too many", "session_id": turn.session_id})
    assert (over.status_code, over.json()["error"]["code"]) == (409, "turn_limit")
    assert "limit" in over.json()["error"]["message"]


# ------------------------------------------------------------------------------------ identity


def _caller_from_header(headers: Mapping[str, str]) -> dict[str, Any]:
    """Stands in for SigV4: the test header names the IAM user calling."""
    return iam_identity(f"arn:aws:iam::123456789012:user/{headers.get('x-test-caller', 'alice')}")


@pytest.fixture(scope="module")
def iam_stack() -> Iterator[LocalStack]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        resolver: Callable[[Mapping[str, str]], dict[str, Any]] = _caller_from_header
        settings = StackSettings(
            port=0,
            model_delay_ms=0,
            parameter_overrides={"FunctionUrlAuthType": "AWS_IAM"},
            identity_resolver=resolver,
        )
        stack = LocalStack(settings).start()
        try:
            yield stack
        finally:
            stack.stop()


def test_under_aws_iam_another_caller_gets_404_for_a_session(iam_stack: LocalStack) -> None:
    # GIVEN alice's session with a finished turn
    alice, bob = {"x-test-caller": "alice"}, {"x-test-caller": "bob"}
    with httpx.Client(base_url=iam_stack.url, timeout=30) as http:
        text = http.post("/chat", json={"message": "mine"}, headers=alice).text
        meta = json.loads(text.split("event: meta\ndata: ", 1)[1].split("\n", 1)[0])
        session, events = meta["session_id"], meta["events_url"]
        assert http.get(f"/sessions/{session}", headers=alice).status_code == 200

        # WHEN bob reads, follows, cancels or continues it
        attempts = {
            "history": http.get(f"/sessions/{session}", headers=bob),
            "events": http.get(events, headers=bob),
            "cancel": http.post(f"/sessions/{session}/turns/1/cancel", headers=bob),
            "chat": http.post("/chat", json={"message": "yours?", "session_id": session}, headers=bob),
        }

    # THEN every attempt is a 404, exactly as for a session that does not exist
    for what, response in attempts.items():
        assert response.status_code == 404, (what, response.text)
        assert response.json()["error"]["code"] in ("session_not_found", "turn_not_found"), (what, response.text)
        assert "mine" not in response.text
