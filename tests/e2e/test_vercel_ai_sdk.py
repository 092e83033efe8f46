"""The Vercel AI SDK (``ai`` with ``@ai-sdk/openai``, TypeScript) streams a reply from the local stack's ``/v1``.

``tests/e2e/js/`` is a small Node project: ``package.json`` and ``package-lock.json`` pin the SDK; ``tools.mjs`` runs
an agent's multi-step tool loop (``streamText`` with two tools that ``execute``, ``stopWhen: stepCountIs(4)``), and
``stream.mjs`` does what an application does: ``createOpenAI({baseURL: <stack>/v1, apiKey})`` (``'unused'``, or under
the JWT mode the user's access token, from ``CHATSTREAM_API_KEY``) then ``streamText`` with the Chat Completions
provider or the Responses one (or ``@ai-sdk/openai-compatible``'s Chat Completions provider, which reads a stream's
``reasoning_content``). The test installs it with ``npm ci`` from the lockfile (once: ``node_modules`` stays in that
folder, ignored by git, and is installed again when the lockfile changes) and runs it with the machine's Node. It
skips only when ``node`` or ``npm`` is not installed (and then fails under ``CI=true``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from typing import TYPE_CHECKING, Any

import pytest

from chatstream_local.bedrock.model import plan_reply
from chatstream_local.stack import LocalStack, StackSettings
from chatstream_local.template import Template
from tests.support import REPO_ROOT, require_or_skip

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.e2e
JS_DIR = REPO_ROOT / "tests/e2e/js"
ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def node() -> str:
    """The machine's ``node``, with the project's packages installed from its lockfile."""
    node, npm = shutil.which("node"), shutil.which("npm")
    require_or_skip(
        node is not None and npm is not None,
        "node and npm are not installed: the Vercel AI SDK test needs Node.js 18 or newer with npm",
    )
    assert node is not None and npm is not None
    installed = JS_DIR / "node_modules" / ".package-lock.json"  # npm's record of what node_modules holds
    if not installed.exists() or installed.stat().st_mtime < (JS_DIR / "package-lock.json").stat().st_mtime:
        subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=JS_DIR, check=True, timeout=600)
    return node


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    with pytest.MonkeyPatch.context() as patch:
        for name, value in ENV.items():
            patch.setenv(name, value)
        local = LocalStack(StackSettings(port=0, model_delay_ms=5))
        try:
            yield local.start()
        finally:
            local.stop()


def run_stream(
    node: str, stack: LocalStack, api: str, model: str, message: str, api_key: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **({"CHATSTREAM_API_KEY": api_key} if api_key is not None else {})}
    return subprocess.run(
        [node, "stream.mjs", stack.url, api, model, message],
        cwd=JS_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def stream(
    node: str, stack: LocalStack, api: str, model: str, message: str, api_key: str | None = None
) -> dict[str, Any]:
    """What ``stream.mjs`` printed: the streamed text and the number of text deltas, the streamed reasoning and the
    number of reasoning parts, the finish reason and the usage."""
    done = run_stream(node, stack, api, model, message, api_key)
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(json.loads(done.stdout))


@pytest.mark.parametrize(
    ("api", "message"),
    [
        ("chat", "hello from TypeScript: héllo wörld 👋"),
        ("responses", "/long 60"),
        ("chat", "/long 60"),
        ("chat", "/think 5 hello"),  # reasoning_content chunks first: not text, and no error
        ("compatible", "/long 60"),
    ],
)
def test_the_vercel_ai_sdk_streams_the_reply_exactly(node: str, stack: LocalStack, api: str, message: str) -> None:
    # GIVEN the deployment's model, by its id
    model = Template.load().raw["Parameters"]["ModelId"]["Default"]
    # WHEN an application streams a reply with the Vercel AI SDK's OpenAI provider pointed at the stack's /v1
    result = stream(node, stack, api, model, message)
    # THEN the text it streamed is the local model's reply, exactly, and the stream finished as a whole reply
    reply = plan_reply(message)
    assert result["text"] == reply.text
    assert result["finishReason"] == "stop"
    assert result["deltas"] >= 1 and result["usage"]["outputTokens"] > 0


@pytest.mark.parametrize("api", ["compatible", "responses"])
def test_the_reasoning_arrives_as_reasoning_apart_from_the_reply(node: str, stack: LocalStack, api: str) -> None:
    # WHEN an application streams a reply the model reasons before
    message = "/think 5 hello"
    result = stream(node, stack, api, "chatstream", message)
    # THEN the reply is the text, exactly, and the reasoning arrived as one reasoning part of its own
    reply = plan_reply(message)
    assert reply.reasoning_text == "r1 r2 r3 r4 r5"
    assert result["text"] == reply.text and result["finishReason"] == "stop"
    assert result["reasoningParts"] == 1
    if api == "compatible":  # reasoning_content chunks, read as reasoning deltas
        assert result["reasoning"] == reply.reasoning_text
    else:  # @ai-sdk/openai reads a reasoning item's summary only, never its reasoning_text: the part arrives empty
        assert result["reasoning"] == ""


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("first", ["hello", "/think 2 hello"])
def test_a_conversation_kept_as_messages_goes_on(node: str, stack: LocalStack, api: str, first: str) -> None:
    # WHEN an application appends the first reply's response messages and asks again (useChat, generateText)
    done = subprocess.run(
        [node, "conversation.mjs", stack.url, api, "chatstream", first, "/history"],
        cwd=JS_DIR,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    # THEN the model was sent the conversation: the first message, its reply (never its reasoning), the second
    assert result["first"] == plan_reply(first).text == "You said: hello"
    assert result["second"] == f"3 messages: user: {first} | assistant: You said: hello | user: /history"
    if api == "responses":  # the Responses provider sends the earlier output by reference, which the relay resolves
        assert any(item.get("type") == "item_reference" for item in result["sent"])


def test_the_alias_and_an_unknown_model(node: str, stack: LocalStack) -> None:
    # WHEN the SDK names the model by its alias THEN it streams; an unknown model fails with OpenAI's error message
    assert stream(node, stack, "responses", "chatstream", "hi")["text"] == plan_reply("hi").text
    done = subprocess.run(
        [node, "stream.mjs", stack.url, "chat", "gpt-4o", "hi"], cwd=JS_DIR, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert "The model 'gpt-4o' does not exist" in done.stderr


@pytest.fixture(scope="module")
def jwt_stack() -> Iterator[LocalStack]:
    """A stack in the JWT mode, with its local issuer."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in ENV.items():
            patch.setenv(name, value)
        settings = StackSettings(port=0, model_delay_ms=5, parameter_overrides={"FunctionUrlAuthType": "JWT"})
        local = LocalStack(settings)
        try:
            yield local.start()
        finally:
            local.stop()


@pytest.mark.parametrize("api", ["chat", "responses", "compatible"])
def test_under_jwt_the_sdk_streams_with_the_users_token_as_its_api_key(
    node: str, jwt_stack: LocalStack, api: str
) -> None:
    assert jwt_stack.issuer is not None
    # WHEN an application streams with a signed-in user's access token as the provider's API key
    token = jwt_stack.issuer.issuer.mint("alice")
    result = stream(node, jwt_stack, api, "chatstream", "/long 40", api_key=token)
    # THEN the reply streams exactly, as without auth
    assert result["text"] == plan_reply("/long 40").text and result["finishReason"] == "stop"
    # AND without a token (the SDK's key is no token) the SDK reports the relay's refusal
    refused = run_stream(node, jwt_stack, api, "chatstream", "hi")
    assert refused.returncode != 0
    assert "the Authorization header is not Bearer and a JWT" in refused.stderr


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_a_multi_step_tool_loop_runs_both_tools_and_reaches_the_answer(node: str, stack: LocalStack, api: str) -> None:
    # GIVEN a message the local model answers with text and two parallel calls (get_weather, get_time)
    message = 'Checking both.\n/call get_weather {"city": "Paris"}\n/call get_time {}'
    calls = plan_reply(message, tools=["get_weather", "get_time"]).calls
    # WHEN an agent streams it with streamText, two tools that execute, and stopWhen: stepCountIs(4)
    done = subprocess.run(
        [node, "tools.mjs", stack.url, api, "chatstream", message],
        cwd=JS_DIR,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    # THEN the first step is the text and both calls, with the model's ids and inputs, streamed whole
    first, second = result["steps"]
    assert first["finishReason"] == "tool-calls" and first["text"] == "You said: Checking both."
    assert first["toolCalls"] == [
        {"id": calls[0].id, "name": "get_weather", "input": {"city": "Paris"}},
        {"id": calls[1].id, "name": "get_time", "input": {}},
    ]
    assert result["streamedInputs"] == {calls[0].id: '{"city": "Paris"}', calls[1].id: "{}"}
    # AND the SDK ran both tools and sent their results back, and the second step is the model's answer to them
    assert result["executed"] == [
        {"name": "get_weather", "input": {"city": "Paris"}},
        {"name": "get_time", "input": {}},
    ]
    assert second == {
        "finishReason": "stop",
        "text": "Tool get_weather said: sunny in Paris\nTool get_time said: noon",
        "toolCalls": [],
    }
    assert result["text"] == second["text"] and result["errors"] == []
