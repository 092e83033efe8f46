"""Budgets per caller and Idempotency-Key through the local Function URL, driven by OpenAI's own Python SDK
(``openai``, pinned): its ``RateLimitError`` and the headers it reads, its own retries (which wait what
``retry-after-ms`` says), and a request it sends again with its key answered with the same response."""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING, Any

import httpx
import openai
import pytest

from chatstream_client.api import ChatClient
from chatstream_client.idempotency import key_header, send_keys
from chatstream_local.bedrock.model import plan_reply

if TYPE_CHECKING:
    from collections.abc import Iterator

    from chatstream_local.stack import LocalStack

pytestmark = pytest.mark.integration

ALIAS = "chatstream"
HELLO = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    """One stack for the module, as deployed with `--parameter-overrides CallerTurnsAtOnce=1 …`: under NONE every
    caller is one owner, so one turn at once for all of this module's requests."""
    from chatstream_local.stack import LocalStack, StackSettings

    with pytest.MonkeyPatch.context() as patch:
        for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
            patch.setenv(name, value)
        patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        overrides = {
            "FunctionUrlAuthType": "NONE",
            "CallerTurnsAtOnce": "1",
            "CallerRequestsPerMinute": "1000",
            "CallerTokensPerDay": "1000000000",
        }
        local = LocalStack(StackSettings(port=0, model_delay_ms=10, parameter_overrides=overrides)).start()
        yield local
        local.stop()


class Blocker:
    """A long turn running (it holds the one turn at once), cancelled when the test says."""

    def __init__(self, stack: LocalStack) -> None:
        self.http = httpx.Client(base_url=stack.url, timeout=60)
        with self.http.stream("POST", "/chat", json={"message": "/long 3000"}) as response:
            assert response.status_code == 200
            line = next(line for line in response.iter_lines() if line.startswith("data: "))
        meta: dict[str, Any] = json.loads(line.removeprefix("data: "))
        self.session_id, self.turn = meta["session_id"], meta["turn"]

    def cancel(self) -> None:
        self.http.post(f"/sessions/{self.session_id}/turns/{self.turn}/cancel").raise_for_status()
        with ChatClient(str(self.http.base_url).rstrip("/")) as chat:
            chat.follow(f"/sessions/{self.session_id}/turns/{self.turn}/events")  # to its end: the turn is over

    def close(self) -> None:
        self.http.close()


@pytest.fixture
def blocker(stack: LocalStack) -> Iterator[Blocker]:
    running = Blocker(stack)
    yield running
    with contextlib.suppress(httpx.HTTPStatusError):  # 409 turn_finished: it ended in the test
        running.cancel()
    running.close()


def test_a_turn_over_the_callers_limit_is_openais_rate_limit_error_with_its_headers(
    stack: LocalStack, blocker: Blocker
) -> None:
    # GIVEN the caller's one turn at once running WHEN the SDK asks for a completion, without retries
    sdk = openai.OpenAI(base_url=f"{stack.url}/v1", api_key="unused", max_retries=0)
    with sdk as client, pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(model=ALIAS, messages=HELLO)
    # THEN it raises OpenAI's RateLimitError, whose code, message and headers say which limit and when to try again
    error = refused.value
    assert error.status_code == 429 and error.code == "rate_limit_exceeded"
    assert "at once (the limit is 1)" in error.message
    headers = error.response.headers
    assert (headers["retry-after"], headers["retry-after-ms"]) == ("5", "5000")
    assert headers["x-ratelimit-limit-requests"] == "1000" and int(headers["x-ratelimit-remaining-requests"]) < 1000
    assert headers["x-ratelimit-limit-tokens"] == "1000000000" and headers["x-ratelimit-reset-tokens"].endswith("s")


def test_the_sdks_own_retry_waits_what_retry_after_ms_says_and_then_gets_its_turn(
    stack: LocalStack, blocker: Blocker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the caller's one turn at once running, and an SDK with its default two retries, whose waits are recorded
    # (the running turn is cancelled during the first, as a reply that ends)
    waits: list[float] = []

    def waited(seconds: float) -> None:
        waits.append(seconds)
        blocker.cancel()

    monkeypatch.setattr("openai._base_client.time.sleep", waited)
    with openai.OpenAI(base_url=f"{stack.url}/v1", api_key="unused") as client:
        # WHEN it asks for a completion
        completion = client.chat.completions.create(model=ALIAS, messages=HELLO)
    # THEN it waited what retry-after-ms said (5000 ms, where retry-after says 5 s), once, then got its reply
    assert waits == [5.0]
    assert completion.choices[0].message.content == plan_reply("hello").text


class LosesFirstAnswer(httpx.BaseTransport):
    """A connection that loses the first answer after the relay made it (the SDK sees a failed connection)."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.keys: list[str | None] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.keys.append(request.headers.get("idempotency-key"))
        response = self.inner.handle_request(request)
        if len(self.keys) == 1:
            response.read()
            response.close()
            raise httpx.ReadError("the connection broke before the answer", request=request)
        return response


@pytest.mark.parametrize("how", ["send_keys", "extra_headers"])
def test_a_request_the_sdk_sends_again_with_its_key_is_the_same_response(stack: LocalStack, how: str) -> None:
    # GIVEN an SDK (its default retries) that sends keys, on a connection that loses the first answer
    transport = LosesFirstAnswer()
    client = openai.OpenAI(base_url=f"{stack.url}/v1", api_key="unused", http_client=httpx.Client(transport=transport))
    options: dict[str, Any] = {"extra_headers": key_header()} if how == "extra_headers" else {}
    if how == "send_keys":
        send_keys(client)
    with client:
        # WHEN it creates a response: the relay starts it, the answer is lost, and the SDK sends the request again
        response = client.responses.create(model=ALIAS, input="hello again", **options)
        # THEN the second send carried the same key and got the first's response: one turn, the same id
        assert len(transport.keys) == 2 and transport.keys[0] == transport.keys[1] and transport.keys[0]
        assert response.output_text == plan_reply("hello again").text
        session_id = response.id.split("_")[1]
        history = httpx.get(f"{stack.url}/sessions/{session_id}", timeout=30).json()
        assert [turn["user"] for turn in history["turns"]] == ["hello again"]
        # AND the same call with its key later is the same response again, without a new turn
        if how == "extra_headers":
            again = client.responses.create(model=ALIAS, input="hello again", **options)
            assert again.id == response.id
