"""The /v1 routes through the local Function URL, driven by OpenAI's own Python SDK (``openai``, pinned)."""

from __future__ import annotations

import json
import typing
from collections import Counter
from typing import TYPE_CHECKING, Any

import httpx
import openai
import pytest
from botocore.credentials import Credentials
from hypothesis import event as note_event
from hypothesis import example, given, settings
from hypothesis import strategies as st

from chatstream.status import TurnStatus
from chatstream_client.api import ChatClient
from chatstream_client.auth import SigV4Auth
from chatstream_local.bedrock.model import plan_reply
from chatstream_local.iam import Principal, Principals

if TYPE_CHECKING:
    from collections.abc import Iterator

    from chatstream_local.stack import LocalStack

pytestmark = pytest.mark.integration

MODEL_ID = "us.amazon.nova-lite-v1:0"  # the template's default ModelId
ALIAS = "chatstream"
LONG = "/long 150"


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    """One stack for the module, with the model at 10 ms a delta so a reply lasts long enough to interrupt."""
    from chatstream_local.stack import LocalStack, StackSettings

    with pytest.MonkeyPatch.context() as patch:
        for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
            patch.setenv(name, value)
        patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        # the template's CORS, asked for as a user does (the stack refuses other origins' pages otherwise)
        overrides = {"FunctionUrlAuthType": "NONE", "CorsAllowOrigins": "*"}
        local = LocalStack(StackSettings(port=0, model_delay_ms=10, parameter_overrides=overrides)).start()
        yield local
        local.stop()


@pytest.fixture
def client(stack: LocalStack) -> Iterator[openai.OpenAI]:
    # No retries: each error must surface as the SDK's exception at once.
    with openai.OpenAI(base_url=f"{stack.url}/v1", api_key="unused", max_retries=0) as sdk:
        yield sdk


def event_types(events: list) -> list[str]:
    return [event.type for event in events]


# ------------------------------------------------------------------------------ responses


def test_a_response_not_streamed_is_the_finished_object(client: openai.OpenAI) -> None:
    response = client.responses.create(model=ALIAS, input="hello there", max_output_tokens=50, temperature=0.5)
    assert response.status == "completed"
    assert response.output_text == plan_reply("hello there").text
    assert response.model == MODEL_ID and response.max_output_tokens == 50 and response.temperature == 0.5
    assert response.usage is not None and response.usage.output_tokens == len(plan_reply("hello there").deltas)
    # AND GET /v1/responses/{id} reads the same
    assert client.responses.retrieve(response.id).output_text == response.output_text


def test_a_streamed_response_is_openais_event_sequence(client: openai.OpenAI) -> None:
    events = list(client.responses.create(model=MODEL_ID, input=LONG, stream=True))
    types = event_types(events)
    assert types[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert types[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert set(types[4:-4]) == {"response.output_text.delta"}
    assert [event.sequence_number for event in events] == list(range(len(events)))
    text = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    assert text == plan_reply(LONG).text == events[-4].text
    assert events[-1].response.status == "completed" and events[-1].response.output_text == text


def _dropped_after_deltas(client: openai.OpenAI, deltas: int) -> list[Any]:
    """The events of a background `/long 300` response's stream, which the client closes after ``deltas`` deltas."""
    stream = client.responses.create(model=ALIAS, input="/long 300", background=True, stream=True)
    seen: list[Any] = []
    for event in stream:
        seen.append(event)
        if sum(event.type == "response.output_text.delta" for event in seen) == deltas:
            break
    stream.close()
    return seen


def test_a_background_response_resumes_exactly_after_the_connection_drops(client: openai.OpenAI) -> None:
    # GIVEN a background response whose stream the client drops after a few deltas
    seen = _dropped_after_deltas(client, 3)
    response_id = seen[0].response.id
    last = seen[-1].sequence_number
    # WHEN it resumes from the last sequence number it has
    rest = list(client.responses.retrieve(response_id, stream=True, starting_after=last))
    # THEN the events go on right after it, and the text is the reply exactly
    events = seen + rest
    assert [event.sequence_number for event in events] == list(range(len(events)))
    text = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    assert text == plan_reply("/long 300").text
    assert rest[-1].type == "response.completed"
    # AND a later resume from the middle replays the stored events identically
    again = list(client.responses.retrieve(response_id, stream=True, starting_after=last))
    assert [event.model_dump() for event in again] == [event.model_dump() for event in rest]


def test_a_background_response_can_be_cancelled(client: openai.OpenAI) -> None:
    response = client.responses.create(model=ALIAS, input="/long 5000", background=True)
    assert response.status == "queued"
    cancelled = client.responses.cancel(response.id)
    assert cancelled.status == "cancelled"
    read = client.responses.retrieve(response.id)
    assert read.status == "cancelled"
    assert plan_reply("/long 5000").text.startswith(read.output_text)
    assert len(read.output_text) < len(plan_reply("/long 5000").text)
    # AND cancelling it again answers the same object
    assert client.responses.cancel(response.id).status == "cancelled"


def test_previous_response_id_continues_the_conversation(client: openai.OpenAI) -> None:
    first = client.responses.create(model=ALIAS, input="my name is Ada")
    second = client.responses.create(model=ALIAS, input="/history", previous_response_id=first.id)
    # THEN the model saw the first exchange before the new message
    assert second.output_text == (f"3 messages: user: my name is Ada | assistant: {first.output_text} | user: /history")
    assert second.previous_response_id == first.id


def test_instructions_and_input_messages_reach_the_model(client: openai.OpenAI) -> None:
    system = client.responses.create(model=ALIAS, instructions="Answer in French.", input="/system")
    assert system.output_text == "System: Answer in French."
    assert system.instructions == "Answer in French."
    history = client.responses.create(
        model=ALIAS,
        input=[
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": "one"},
            {"role": "assistant", "content": [{"type": "output_text", "text": "two"}]},
            {"role": "user", "content": [{"type": "input_text", "text": "/history"}]},
        ],
    )
    assert history.output_text == "3 messages: user: one | assistant: two | user: /history"
    # AND a response that continues it is sent that history again, but not its system prompt (as OpenAI's
    # instructions, a turn's own)
    again = client.responses.create(model=ALIAS, input="/history", previous_response_id=history.id)
    earlier = f"user: one | assistant: two | user: /history | assistant: {history.output_text}"
    assert again.output_text == f"5 messages: {earlier} | user: /history"
    assert client.responses.create(model=ALIAS, input="/system", previous_response_id=again.id).output_text == (
        "System: none"
    )


def test_max_output_tokens_makes_an_incomplete_response(client: openai.OpenAI) -> None:
    response = client.responses.create(model=ALIAS, input="/long 20", max_output_tokens=5)
    assert response.status == "incomplete"
    assert response.incomplete_details is not None and response.incomplete_details.reason == "max_output_tokens"
    assert response.output_text == plan_reply("/long 20", 5).text


def record_texts(stack: LocalStack, session_id: str) -> list[str]:
    """The texts of a turn's records, as the native stream sends them unpaced (one ``token`` event a record)."""
    with httpx.Client(base_url=stack.url, timeout=60) as http:
        lines = http.get(f"/sessions/{session_id}/turns/1/events?pace=0").text.splitlines()
    events = zip(lines, lines[1:], lines[2:], strict=False)
    return [json.loads(data[6:])["text"] for _, name, data in events if name == "event: token"]


def test_a_stream_dropped_inside_a_record_resumes_exactly(client: openai.OpenAI, stack: LocalStack) -> None:
    # GIVEN a background response whose paced stream the client drops a few words into its second record (the first
    # record is the first delta alone, the next ones ~300 ms of deltas each)
    seen = _dropped_after_deltas(client, 4)
    response_id = seen[0].response.id
    had = "".join(event.delta for event in seen if event.type == "response.output_text.delta")
    # WHEN it resumes from the last sequence number it has
    rest = list(client.responses.retrieve(response_id, stream=True, starting_after=seen[-1].sequence_number))
    # THEN the text goes on exactly after it, with no repeat and no gap
    events = seen + rest
    assert [event.sequence_number for event in events] == list(range(len(events)))
    text = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    assert text == plan_reply("/long 300").text and rest[-1].type == "response.completed"
    # AND the drop was inside a record: what the client had is not a whole number of records
    records = record_texts(stack, response_id.removeprefix("resp_").rpartition("_")[0])
    assert "".join(records) == text and len(records) < 300
    boundaries = {len("".join(records[:count])) for count in range(len(records) + 1)}
    assert len(had) not in boundaries
    # AND resuming there unpaced gives the same events
    unpaced = client.responses.retrieve(
        response_id, stream=True, starting_after=seen[-1].sequence_number, extra_query={"pace": "0"}
    )
    assert [event.model_dump() for event in unpaced] == [event.model_dump() for event in rest]


def test_reasoning_is_a_reasoning_item_before_the_message_and_chat_reasoning_content(client: openai.OpenAI) -> None:
    # GIVEN a reply the local model reasons before (/think N: N reasoning words, then the reply to the rest)
    events = list(client.responses.create(model=ALIAS, input="/think 5 hello", stream=True))
    reasoning = "".join(event.delta for event in events if event.type == "response.reasoning_text.delta")
    text = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    # THEN the reasoning streams as a reasoning item, the reply as the message after it
    assert reasoning == "r1 r2 r3 r4 r5" and text == plan_reply("hello").text
    final = events[-1].response
    assert [item.type for item in final.output] == ["reasoning", "message"] and final.output_text == text
    assert [event.sequence_number for event in events] == list(range(len(events)))
    # AND a resume from inside the reasoning is exact
    rest = list(client.responses.retrieve(final.id, stream=True, starting_after=5))
    assert [event.model_dump() for event in rest] == [event.model_dump() for event in events[6:]]
    # AND a chat completion's content is the reply alone, streamed or not, its reasoning in reasoning_content (the
    # field DeepSeek's API and vLLM use; the SDK keeps it as an extra field)
    messages: list[Any] = [{"role": "user", "content": "/think 5 hello"}]
    completion = client.chat.completions.create(model=ALIAS, messages=messages)
    message = completion.choices[0].message
    assert message.content == plan_reply("hello").text
    assert (message.model_extra or {})["reasoning_content"] == "r1 r2 r3 r4 r5"
    chunks = list(client.chat.completions.create(model=ALIAS, messages=messages, stream=True))
    deltas = [chunk.choices[0].delta for chunk in chunks if chunk.choices]
    assert "".join(delta.content or "" for delta in deltas) == plan_reply("hello").text
    assert "".join((delta.model_extra or {}).get("reasoning_content", "") for delta in deltas) == "r1 r2 r3 r4 r5"
    # AND the SDK's stream helper accumulates the final completion, the reasoning apart from the content
    with client.chat.completions.stream(model=ALIAS, messages=messages) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion().choices[0].message
    assert final.content == plan_reply("hello").text
    assert (final.model_extra or {})["reasoning_content"] == "r1 r2 r3 r4 r5"
    # AND the message passed back as it came, reasoning and all, is the next turn's history without its reasoning
    passed_back = final.model_dump()
    assert passed_back["reasoning_content"] == "r1 r2 r3 r4 r5"
    history = [*messages, passed_back, {"role": "user", "content": "/history"}]
    again = client.chat.completions.create(model=ALIAS, messages=history).choices[0].message.content
    assert again == f"3 messages: user: /think 5 hello | assistant: {plan_reply('hello').text} | user: /history"


# ------------------------------------------------------------------------------ chat completions


def test_a_chat_completion_not_streamed(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL_ID,
        messages=[
            {"role": "system", "content": "be kind"},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": [{"type": "text", "text": "/history"}]},
        ],
    )
    completion = raw.parse()
    assert completion.choices[0].message.content == "3 messages: user: hi | assistant: hello | user: /history"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.completion_tokens > 0
    # AND the session is one the native API reads (its id is in a header)
    session_id = raw.headers["x-chatstream-session-id"]
    assert completion.id == f"chatcmpl-{session_id}"
    with ChatClient(str(client.base_url).removesuffix("/v1/")) as native:
        turns = native.history(session_id)["turns"]
    assert [turn["status"] for turn in turns] == [TurnStatus.COMPLETE]
    assert turns[0]["assistant"] == completion.choices[0].message.content


def test_a_chat_completion_streamed_with_usage(client: openai.OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model=ALIAS,
            messages=[{"role": "developer", "content": "Answer in French."}, {"role": "user", "content": "/system"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert all(chunk.object == "chat.completion.chunk" for chunk in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text == "System: Answer in French."
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_stop_sequences_and_max_tokens_cut_a_chat_completion(client: openai.OpenAI) -> None:
    stopped = client.chat.completions.create(
        model=ALIAS, messages=[{"role": "user", "content": "/long 20"}], stop=[" w7", "never"]
    )
    assert stopped.choices[0].message.content == plan_reply("/long 20", stop=[" w7"]).text == "w1 w2 w3 w4 w5 w6"
    assert stopped.choices[0].finish_reason == "stop"
    cut = client.chat.completions.create(
        model=ALIAS, messages=[{"role": "user", "content": "/long 20"}], max_completion_tokens=3, top_p=0.9
    )
    assert cut.choices[0].message.content == "w1 w2 w3" and cut.choices[0].finish_reason == "length"


# ------------------------------------------------------------------------------ models and errors


def test_models_lists_the_deployments_model_and_its_alias(client: openai.OpenAI) -> None:
    assert [model.id for model in client.models.list()] == [MODEL_ID, ALIAS]
    assert client.models.retrieve(ALIAS).id == ALIAS


def error_body(err: openai.APIStatusError) -> dict:
    body = err.response.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return dict(body["error"])


def test_each_error_family_raises_the_sdks_exception(client: openai.OpenAI, stack: LocalStack) -> None:
    user = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.NotFoundError) as not_found:
        client.chat.completions.create(model="gpt-4o", messages=user)
    assert error_body(not_found.value)["code"] == "model_not_found"
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_" + "0" * 32 + "_1")
    with pytest.raises(openai.BadRequestError) as unsupported:
        client.chat.completions.create(model=ALIAS, messages=user, functions=[{"name": "f"}])
    assert error_body(unsupported.value)["param"] == "functions"
    with pytest.raises(openai.BadRequestError) as image:
        client.chat.completions.create(
            model=ALIAS,
            messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}],
        )
    assert error_body(image.value)["param"] == "messages[0].content[0].type"
    with pytest.raises(openai.BadRequestError) as unknown:
        client.responses.create(model=ALIAS, input="hi", extra_body={"max_token": 5})
    assert error_body(unknown.value)["param"] == "max_token"
    with pytest.raises(openai.BadRequestError) as store:
        client.responses.create(model=ALIAS, input="hi", store=False)
    assert error_body(store.value)["param"] == "store"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=ALIAS, messages=user, n=2)
    with pytest.raises(openai.APIStatusError) as too_large:
        client.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": "x" * 270_000}])
    assert too_large.value.status_code == 413
    finished = client.responses.create(model=ALIAS, input="hi")
    with pytest.raises(openai.ConflictError):
        client.responses.cancel(finished.id)
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": "/throttle"}])
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": "/error-after 0"}])
    # AND a response not streamed whose turn fails raises as a chat completion does, where a background one is failed
    with pytest.raises(openai.RateLimitError) as throttled:
        client.responses.create(model=ALIAS, input="/throttle")
    assert error_body(throttled.value)["type"] == "rate_limit_error"
    with pytest.raises(openai.InternalServerError):
        client.responses.create(model=ALIAS, input="/error-after 0")
    background = client.responses.create(model=ALIAS, input="/throttle", background=True)
    assert list(client.responses.retrieve(background.id, stream=True))[-1].type == "response.failed"
    failed = client.responses.retrieve(background.id)
    assert failed.status == "failed" and failed.error is not None and failed.error.code == "rate_limit_exceeded"
    # AND a streamed failure raises too
    with pytest.raises(openai.APIError, match="stream"):
        list(
            client.chat.completions.create(
                model=ALIAS, messages=[{"role": "user", "content": "/error-after 2"}], stream=True
            )
        )
    # AND an unknown /v1 path or method is answered in OpenAI's shape too, while the native routes keep theirs
    unknown_path = httpx.get(f"{stack.url}/v1/assistants", timeout=30)
    assert unknown_path.status_code == 404 and unknown_path.json()["error"]["type"] == "invalid_request_error"
    wrong_method = httpx.get(f"{stack.url}/v1/chat/completions", timeout=30)
    assert wrong_method.status_code == 405 and wrong_method.headers["allow"] == "POST"
    assert wrong_method.json()["error"]["code"] == "method_not_allowed"
    native = httpx.post(f"{stack.url}/chat", json={"message": "hi", "max_token": 1}, timeout=30)
    assert set(json.loads(native.content)["error"]) == {"code", "message"}


# ------------------------------------------------------------------------------ AWS_IAM

ALICE = Principal("alice", "AKIAALICEEXAMPLE", "alice-secret")
BOB = Principal("bob", "AKIABOBEXAMPLE", "bob-secret")


def sdk_as(url: str, principal: Principal | None) -> openai.OpenAI:
    auth = None
    if principal is not None:
        auth = SigV4Auth("us-east-1", credentials=Credentials(principal.access_key, principal.secret_key))
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, http_client=httpx.Client(auth=auth))


def test_under_aws_iam_the_sdk_signs_with_sigv4_and_responses_belong_to_their_signer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from chatstream_local.stack import LocalStack, StackSettings

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    settings = StackSettings(
        port=0, parameter_overrides={"FunctionUrlAuthType": "AWS_IAM"}, principals=Principals([ALICE, BOB])
    )
    iam = LocalStack(settings).start()
    try:
        with sdk_as(iam.url, ALICE) as alice, sdk_as(iam.url, BOB) as bob, sdk_as(iam.url, None) as anonymous:
            # WHEN alice signs (the SDK's own Authorization: Bearer header is replaced by the signature)
            response = alice.responses.create(model=ALIAS, input="hello")
            assert response.output_text == plan_reply("hello").text
            streamed = list(
                alice.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": "hi"}], stream=True)
            )
            assert (
                "".join(chunk.choices[0].delta.content or "" for chunk in streamed if chunk.choices)
                == plan_reply("hi").text
            )
            # THEN bob cannot see or continue it, and an unsigned request is refused by the Function URL
            with pytest.raises(openai.NotFoundError):
                bob.responses.retrieve(response.id)
            with pytest.raises(openai.NotFoundError):
                bob.responses.create(model=ALIAS, input="hi", previous_response_id=response.id)
            with pytest.raises(openai.PermissionDeniedError):
                anonymous.models.list()
    finally:
        iam.stop()


# ------------------------------------------------------------------------------ JWT


def test_under_jwt_the_sdk_sends_its_token_as_the_api_key_and_responses_belong_to_their_user(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a stack in the JWT mode, with its local issuer, and tokens of two users as the SDKs' api_key
    from chatstream_local.stack import LocalStack, StackSettings

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    jwt = LocalStack(StackSettings(port=0, parameter_overrides={"FunctionUrlAuthType": "JWT"})).start()
    try:
        assert jwt.issuer is not None
        issuer = jwt.issuer.issuer

        def sdk(api_key: str) -> openai.OpenAI:
            return openai.OpenAI(base_url=f"{jwt.url}/v1", api_key=api_key, max_retries=0)

        with (
            sdk(issuer.mint("alice")) as alice,
            sdk(issuer.mint("bob")) as bob,
            sdk("unused") as anonymous,
            sdk(issuer.mint("alice", lifetime_s=-120)) as expired,
        ):
            # WHEN alice asks, streamed and not, and follows a background response after dropping it
            response = alice.responses.create(model=ALIAS, input="hello")
            assert response.output_text == plan_reply("hello").text
            streamed = list(
                alice.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": "hi"}], stream=True)
            )
            assert (
                "".join(chunk.choices[0].delta.content or "" for chunk in streamed if chunk.choices)
                == plan_reply("hi").text
            )
            seen = _dropped_after_deltas(alice, 2)
            rest = list(
                alice.responses.retrieve(seen[0].response.id, stream=True, starting_after=seen[-1].sequence_number)
            )
            assert rest[-1].type == "response.completed"
            # THEN bob cannot see or continue her response
            with pytest.raises(openai.NotFoundError):
                bob.responses.retrieve(response.id)
            with pytest.raises(openai.NotFoundError):
                bob.responses.create(model=ALIAS, input="hi", previous_response_id=response.id)
            # AND a key that is no token, or an expired token, raises the SDK's AuthenticationError, saying why
            with pytest.raises(openai.AuthenticationError) as not_a_token:
                anonymous.models.list()
            assert not_a_token.value.code == "invalid_token"
            with pytest.raises(openai.AuthenticationError, match="expired"):
                expired.responses.retrieve(response.id)
            # AND alice's own resume with a new token of hers carries on (a token is checked at each request)
            with sdk(issuer.mint("alice")) as renewed:
                assert renewed.responses.retrieve(response.id).output_text == response.output_text
    finally:
        jwt.stop()


# ------------------------------------------------------------------------------ any body

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 200) | st.floats(-1, 3) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=8,
)
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system", "developer", "tool", "x"])},
    optional={
        "content": st.text(max_size=8)
        | st.lists(
            st.fixed_dictionaries({"type": st.sampled_from(["text", "input_text", "image_url"]), "text": JSON_VALUES})
        ),
        "name": JSON_VALUES,
    },
)
FIELDS = ["model", "messages", "input", "stream", "stream_options", "max_tokens", "max_completion_tokens"]
FIELDS += ["max_output_tokens", "temperature", "top_p", "stop", "instructions", "store", "n", "tools", "background"]
FIELDS += ["previous_response_id", "reasoning", "zzz"]
BODY = st.dictionaries(
    st.sampled_from(FIELDS),
    JSON_VALUES | st.lists(MESSAGE, max_size=4) | st.sampled_from([ALIAS, "gpt-4o", "/long 3", ["END"]]),
    max_size=6,
).map(lambda body: {"model": ALIAS, "stream": False, **body})


WORDS = st.text(st.sampled_from("ab /\n"), min_size=1, max_size=6).filter(str.strip)
OPTIONS = st.dictionaries(
    st.sampled_from(["temperature", "top_p", "max_tokens", "max_output_tokens", "stop", "instructions", "stream"]),
    st.floats(0, 1) | st.integers(1, 5) | WORDS | st.lists(WORDS, max_size=5) | st.booleans(),
    max_size=3,
)
NEAR_VALID = st.builds(
    lambda middle, texts, stream, options: {
        "model": ALIAS,
        "messages": [
            {"role": role, "content": text} for role, text in zip(["user", *middle, "user"], texts, strict=False)
        ],
        "stream": stream,  # streamed half the time, unless the options say otherwise
        **options,
    },
    st.lists(st.sampled_from(["user", "assistant", "system", "developer"]), max_size=3),
    st.lists(WORDS, min_size=5, max_size=5),
    st.booleans(),
    OPTIONS | st.just({}),
)
PATHS = {"messages": "/v1/chat/completions", "input": "/v1/responses"}
API = {"/v1/chat/completions": "chat", "/v1/responses": "responses"}


def sse_events(text: str) -> list[tuple[str, str]]:
    """(event name, data) of each event of an SSE body: ``message`` when the event names none; comments left out."""
    events = []
    for block in text.split("\n\n"):
        fields = [line.split(": ", 1) for line in block.split("\n") if line and not line.startswith(":")]
        named = dict(field for field in fields if len(field) == 2)
        if "data" in named:
            events.append((named.get("event", "message"), named["data"]))
    return events


def assert_a_whole_chat_completion_stream(text: str) -> None:
    """OpenAI's end of a Chat Completions stream: ``data: [DONE]``, once and last, after chunks that say how the reply
    finished; no error on the way."""
    datas = [data for _, data in sse_events(text)]
    assert datas and datas[-1] == "[DONE]" and datas.count("[DONE]") == 1, text[-300:]
    chunks = [json.loads(data) for data in datas[:-1]]
    assert all(chunk.get("object") == "chat.completion.chunk" and "error" not in chunk for chunk in chunks), text[-300:]
    finishes = [choice["finish_reason"] for chunk in chunks for choice in chunk["choices"] if choice["finish_reason"]]
    assert finishes in (["stop"], ["length"]), text[-300:]


def assert_a_whole_response_stream(text: str) -> None:
    """OpenAI's end of a Responses stream: ``response.completed`` (or ``response.incomplete`` at the token limit), once
    and last, numbered last, its response's status the event's; never ``error`` or ``response.failed``."""
    events = sse_events(text)
    names = [name for name, _ in events]
    terminal = {"response.completed": "completed", "response.incomplete": "incomplete"}
    assert names and names[-1] in terminal, names[-5:]
    assert sum(names.count(name) for name in (*terminal, "response.failed", "error")) == 1, names
    data = [json.loads(payload) for _, payload in events]
    assert [event["type"] for event in data] == names
    assert [event["sequence_number"] for event in data] == list(range(len(data)))
    assert data[-1]["response"]["status"] == terminal[names[-1]], data[-1]


HELLO = [{"role": "user", "content": "hello"}]


def test_any_body_is_answered_or_refused_in_openais_shape_never_a_5xx(stack: LocalStack) -> None:
    answers: Counter[tuple[str, str]] = Counter()

    @settings(max_examples=60, deadline=None)
    @given(body=BODY | NEAR_VALID | NEAR_VALID.map(lambda body: {"input": body.pop("messages"), **body}))
    # one body of each kind for each API, whatever the run's random examples: answered, streamed, refused
    @example(body={"model": ALIAS, "messages": HELLO, "stream": False})
    @example(body={"model": ALIAS, "messages": HELLO, "stream": True})
    @example(body={"model": ALIAS, "messages": [], "stream": False})
    @example(body={"model": ALIAS, "input": HELLO, "stream": False})
    @example(body={"model": ALIAS, "input": HELLO, "stream": True})
    @example(body={"model": ALIAS, "input": [], "stream": False})
    def check(body: dict) -> None:
        # GIVEN any body, WHEN it is sent to its route
        path = PATHS["input" if "input" in body else "messages"]
        response = httpx.post(f"{stack.url}{path}", json=body, timeout=60)
        assert response.status_code in (200, 400, 404, 409, 413), response.text
        # THEN a refusal is OpenAI's error object, a stream ends as OpenAI's does, an object is finished
        if response.status_code != 200:
            error = response.json()["error"]
            assert set(error) == {"message", "type", "param", "code"} and error["message"]
            kind = f"refused {response.status_code}"
        elif response.headers["content-type"].startswith("text/event-stream"):
            kind = "streamed"
            if path == "/v1/chat/completions":
                assert_a_whole_chat_completion_stream(response.text)
            else:
                assert_a_whole_response_stream(response.text)
        else:
            kind = "answered"
            answer = response.json()
            if path == "/v1/chat/completions":
                assert answer["object"] == "chat.completion", answer
                assert answer["choices"][0]["finish_reason"] in ("stop", "length"), answer
            else:
                assert answer["object"] == "response" and answer["status"] in ("completed", "incomplete"), answer
        note_event(f"{API[path]} {kind}")
        answers[API[path], kind] += 1

    check()
    # AND every branch ran: both APIs refused, answered and streamed bodies (the explicit examples, at least), so each
    # check above was reached
    for api in API.values():
        assert min(answers[api, "refused 400"], answers[api, "answered"], answers[api, "streamed"]) > 0, answers


# ------------------------------------------------------------------------------ browsers

# What a browser's fetch carries from openai-node (its buildHeaders and getPlatformHeaders, with organization and
# project set; x-stainless-helper-method from its stream helpers) and from the Vercel AI SDK's OpenAI providers.
BROWSER_SDK_HEADERS = [
    "authorization",
    "content-type",
    "user-agent",
    "openai-organization",
    "openai-project",
    "x-stainless-arch",
    "x-stainless-lang",
    "x-stainless-os",
    "x-stainless-package-version",
    "x-stainless-retry-count",
    "x-stainless-runtime",
    "x-stainless-runtime-version",
    "x-stainless-timeout",
    "x-stainless-helper-method",
    "idempotency-key",  # what chatstream_client.idempotency.send_keys has the SDK send
]


def listed(value: str) -> set[str]:
    return {name.strip().lower() for name in value.split(",")}


def test_a_browser_page_may_call_v1_with_the_sdks_headers_and_read_the_session_header(stack: LocalStack) -> None:
    # GIVEN the stack with the template's CORS (AuthType NONE, CorsAllowOrigins * given), and a page elsewhere
    origin = "https://app.example"
    with httpx.Client(base_url=stack.url, timeout=60) as http:
        # WHEN its browser sends the preflight of an SDK's POST
        preflight = http.options(
            "/v1/chat/completions",
            headers={
                "Origin": origin,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": ",".join(BROWSER_SDK_HEADERS),
            },
        )
        # THEN the Function URL allows the origin, the method and every header the SDKs send
        assert preflight.status_code == 200 and preflight.headers["access-control-allow-origin"] == "*"
        assert "post" in listed(preflight.headers["access-control-allow-methods"])
        assert set(BROWSER_SDK_HEADERS) <= listed(preflight.headers["access-control-allow-headers"])
        # AND the request's response lets the page's script read the session and turn headers
        response = http.post(
            "/v1/chat/completions",
            headers={"Origin": origin, "Authorization": "Bearer unused"},
            json={"model": ALIAS, "messages": [{"role": "user", "content": "hello"}]},
        )
    assert response.status_code == 200 and response.headers["access-control-allow-origin"] == "*"
    exposed = listed(response.headers["access-control-expose-headers"])
    assert {
        "x-chatstream-session-id",
        "x-chatstream-turn",
        "x-should-retry",
        "retry-after",
        "retry-after-ms",
    } <= exposed
    assert {
        f"x-ratelimit-{what}-{of}" for what in ("limit", "remaining", "reset") for of in ("requests", "tokens")
    } <= (exposed)
    assert response.headers["x-chatstream-session-id"] in response.json()["id"]


# ------------------------------------------------------------------------------ shapes, strictly


def sse_datas(response: httpx.Response) -> list[str]:
    return [line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: ")]


def test_every_object_and_event_validates_strictly_against_the_sdks_types(stack: LocalStack) -> None:
    # The SDK builds its objects without validating them; pydantic's validation proves the shapes are OpenAI's
    from openai.types.chat import ChatCompletion, ChatCompletionChunk
    from openai.types.responses import Response, ResponseStreamEvent

    union = typing.get_args(typing.get_args(ResponseStreamEvent)[0])
    event_types = {typing.get_args(kind.model_fields["type"].annotation)[0]: kind for kind in union}
    with httpx.Client(base_url=f"{stack.url}/v1", timeout=60) as http:
        for body in ({"input": "hello"}, {"input": "/long 20", "max_output_tokens": 3}):
            with http.stream("POST", "/responses", json={"model": ALIAS, "stream": True, **body}) as response:
                datas = sse_datas(response)
            assert len(datas) >= 9
            for data in datas:
                event_types[json.loads(data)["type"]].model_validate_json(data)
            response_id = json.loads(datas[0])["response"]["id"]
            Response.model_validate_json(http.get(f"/responses/{response_id}").text)
        Response.model_validate_json(http.post("/responses", json={"model": ALIAS, "input": "hi"}).text)
        messages = [{"role": "user", "content": "hello"}]
        ChatCompletion.model_validate_json(
            http.post("/chat/completions", json={"model": ALIAS, "messages": messages}).text
        )
        stream = {"model": ALIAS, "messages": messages, "stream": True, "stream_options": {"include_usage": True}}
        with http.stream("POST", "/chat/completions", json=stream) as response:
            datas = sse_datas(response)
        assert datas[-1] == "[DONE]"
        for data in datas[:-1]:
            ChatCompletionChunk.model_validate_json(data)
