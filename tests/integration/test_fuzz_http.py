"""The HTTP API fuzzed through the local Function URL front end of a running stack (one per module).

Two fuzzers, one contract (the OpenAPI document the relay serves, ``GET /openapi.json``):

- schemathesis generates requests from the document, valid and invalid, for every operation, and checks every
  answer against it: a documented status, content type, headers and body (each SSE event's name, id and data
  too), never a 5xx; what the document calls valid is accepted, what it calls invalid refused. The same examples in
  every run of one commit, and beside them a few drawn afresh in every run from the run's seed
  (``tests.support.fuzz_seed``, printed when a test fails; ``CHATSTREAM_FUZZ_SEED`` draws them again), so new
  inputs keep being tried.
- a hand-written hypothesis strategy sends what no document describes: other paths and methods, bodies that are
  not JSON or nested without end, huge headers. The answer is an error the document lists (or the router's
  ``404 not_found``/``405 method_not_allowed``) or a valid response of the route: never a 5xx, a hang, or a
  traceback.

Both run against the stack in the ``NONE`` mode and in the ``JWT`` mode (its local issuer), there with a valid token
on every request, so what a signed-in user can send is fuzzed too; the strategy also sends malformed and huge
``Authorization`` headers, which get a documented ``401``.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from schemathesis.config import SchemathesisConfig

from chatstream.relay.openapi import DOCUMENT_PATH
from chatstream.relay.validation import MAX_BODY_BYTES
from chatstream_local.stack import LocalStack, StackSettings
from tests.support import fuzz_seed

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.integration

ROUTER_ERRORS = {(404, "not_found"), (405, "method_not_allowed")}  # a path or method no operation has
ASCII = st.characters(min_codepoint=32, max_codepoint=126)
SEGMENT = st.sampled_from(["0", "1", "-1", "99999999999999999999", "a" * 129, "%00", "..", "x y"]) | st.text(
    ASCII.filter(lambda c: c not in "/?#%"), min_size=1, max_size=20
)


@pytest.fixture(scope="module", params=["NONE", "JWT"])
def stack(request: pytest.FixtureRequest) -> Iterator[LocalStack]:
    with pytest.MonkeyPatch.context() as patch:
        for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
            patch.setenv(name, value)
        patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        settings = StackSettings(port=0, model_delay_ms=0, parameter_overrides={"FunctionUrlAuthType": request.param})
        running = LocalStack(settings).start()
        try:
            yield running
        finally:
            running.stop()


@pytest.fixture(scope="module")
def auth(stack: LocalStack) -> dict[str, str]:
    """The headers every request carries: under the JWT mode, a valid token of the stack's issuer (an hour's)."""
    if stack.issuer is None:
        return {}
    return {"Authorization": f"Bearer {stack.issuer.issuer.mint('fuzzer')}"}


@pytest.fixture(scope="module")
def session(stack: LocalStack, auth: dict[str, str]) -> dict[str, Any]:
    """A real session with one finished turn, so fuzzed paths also hit existing ids."""
    with httpx.Client(base_url=stack.url, timeout=30, headers=auth) as http:
        text = http.post("/chat", json={"message": "hello"}).text
    meta = json.loads(text.split("event: meta\ndata: ", 1)[1].split("\n", 1)[0])
    return dict(meta)


@pytest.fixture(scope="module")
def document(stack: LocalStack) -> dict[str, Any]:
    """The OpenAPI document as the running relay serves it."""
    response = httpx.get(f"{stack.url}/openapi.json", timeout=30)
    assert response.status_code == 200, response.text[:300]
    return dict(response.json())


# --------------------------------------------------------------------------------- schemathesis, from the document

EXAMPLES_PER_OPERATION = 50
FRESH_EXAMPLES_PER_OPERATION = 6  # drawn afresh in every run, beside the fixed ones: ~10 s more


def schema(*, examples: int, fixed: bool, phases: dict[str, Any]) -> Any:
    """schemathesis's view of the document: ``examples`` generated per operation, the same in every run of one commit
    (``fixed``) or drawn from the run's seed."""
    generation: dict[str, Any] = {"max-examples": examples, "mode": "all", "deterministic": fixed}
    return schemathesis.openapi.from_path(
        DOCUMENT_PATH,
        config=SchemathesisConfig.from_dict(
            {
                "request-timeout": 30,
                # A failure's curl line shows every value (schemathesis hides fields such as max_tokens as secrets)
                "output": {"sanitization": {"enabled": False}},
                # How fast examples are generated depends on the machine's load, not on the API
                "suppress-health-check": ["too_slow", "filter_too_much"],
                "max-stream-events": 100_000,  # read every stream to its end
                "generation": generation,
                **({} if fixed else {"seed": fuzz_seed()}),
                # the streams' ids are not links a document can follow: no stateful phase
                "phases": {"stateful": {"enabled": False}, **phases},
            }
        ),
    )


# The same examples in every run of one commit, so CI answers as the run before landing did (CHATSTREAM_FUZZ_RANDOM=1
# draws them from the run's seed too); what a fresh example finds is fixed, and becomes a fixed example if it must.
SCHEMA = schema(examples=EXAMPLES_PER_OPERATION, fixed=os.environ.get("CHATSTREAM_FUZZ_RANDOM") != "1", phases={})
# A few examples drawn afresh from the run's seed, generated only (the document's examples and the coverage phase
# are the same in every run: the fixed run has them)
FRESH = schema(
    examples=FRESH_EXAMPLES_PER_OPERATION,
    fixed=False,
    phases={"examples": {"enabled": False}, "coverage": {"enabled": False}},
)
REAL_SESSION: dict[str, Any] = {}  # the module's real session (the `session` fixture's), once it exists


@FRESH.hook
@SCHEMA.hook
def flatmap_case(context: schemathesis.HookContext, case: schemathesis.Case) -> st.SearchStrategy[schemathesis.Case]:
    """A valid case that names a session names the real one half the time, so fuzzing reaches existing turns too."""
    names_a_session = bool({"session_id", "response_id"} & set(case.path_parameters)) or (
        isinstance(case.body, dict)
        and (case.body.get("session_id") is not None or case.body.get("previous_response_id") is not None)
    )
    if not REAL_SESSION or not names_a_session or case.meta is None or case.meta.generation.mode.is_negative:
        return st.just(case)
    return st.booleans().map(lambda real: _name_the_real_session(case) if real else case)


def _name_the_real_session(case: schemathesis.Case) -> schemathesis.Case:
    session_id, turn = REAL_SESSION["session_id"], REAL_SESSION["turn"]
    if "session_id" in case.path_parameters:
        case.path_parameters["session_id"] = session_id
        if "turn" in case.path_parameters:
            case.path_parameters["turn"] = str(turn)
    elif "response_id" in case.path_parameters:
        case.path_parameters["response_id"] = f"resp_{session_id}_{turn}"
    elif "previous_response_id" in case.body:
        # A new response continues the conversation's latest (the relay refuses an older one: it does not branch)
        history = httpx.get(
            f"{REAL_SESSION['url']}/sessions/{session_id}", headers=REAL_SESSION["auth"], timeout=30
        ).json()
        case.body["previous_response_id"] = f"resp_{session_id}_{history['turns'][-1]['turn']}"
    else:
        case.body["session_id"] = session_id
    return case


@SCHEMA.parametrize()
def test_every_answer_conforms_to_the_document(
    case: schemathesis.Case,
    stack: LocalStack,
    auth: dict[str, str],
    session: dict[str, Any],
    document: dict[str, Any],
) -> None:
    check_answer(case, stack, auth, session, document)


@FRESH.parametrize()
def test_every_answer_to_a_fresh_example_conforms_to_the_document(
    case: schemathesis.Case,
    stack: LocalStack,
    auth: dict[str, str],
    session: dict[str, Any],
    document: dict[str, Any],
) -> None:
    check_answer(case, stack, auth, session, document)


def check_answer(
    case: schemathesis.Case, stack: LocalStack, auth: dict[str, str], session: dict[str, Any], document: dict[str, Any]
) -> None:
    # GIVEN a request schemathesis generated from the document, valid or not (under the JWT mode, with a valid token)
    REAL_SESSION.update(session, url=stack.url, auth=auth)
    if case.meta is not None and not case.meta.generation.mode.is_negative:
        declare_what_is_chosen(case)
        start_and_end_with_the_user(case)
        one_key_per_request(case)
    # WHEN it is sent THEN every check holds: no 5xx, a documented status, content type, headers and body, valid
    # data accepted and invalid refused; and a stream's events carry the data the document gives them, in order
    response = case.call_and_validate(base_url=stack.url, headers=auth)
    if response.headers.get("content-type", [""])[0].startswith("text/event-stream"):
        operation = document["paths"][case.operation.path][case.method.lower()]
        stream = operation["responses"]["200"]["content"]["text/event-stream"]["schema"]["$ref"]
        check_stream(document, stream, response.content.decode("utf-8"))


CONVERSATIONS = {"/v1/responses": ("input", "input_text"), "/v1/chat/completions": ("messages", "text")}


def declare_what_is_chosen(case: schemathesis.Case) -> None:
    """The rules about tools JSON Schema cannot state (the document states them in prose, and the relay answers 400):
    tool names are unique, a chosen tool is one declared (``required`` needs tools), and results answer exactly the
    calls before them, which a generated conversation cannot know. A valid case is made to follow them: duplicates
    go, a choice of an undeclared tool goes, calls and results become plain messages (the native ``tool_results``
    go, a message taking their place)."""
    body = case.body
    if not isinstance(body, dict):
        return
    tools = body.get("tools") if isinstance(body.get("tools"), list) else []
    unique: dict[str, Any] = {}
    for tool in tools:
        name = (tool.get("function") or {}).get("name") if "function" in tool else tool.get("name")
        unique.setdefault(name, tool)
    if tools:
        body["tools"] = list(unique.values())
    choice = body.get("tool_choice")
    chosen = choice.get("name", (choice.get("function") or {}).get("name")) if isinstance(choice, dict) else None
    if (isinstance(choice, dict) and chosen not in unique) or (choice == "required" and not unique):
        del body["tool_choice"]
    if body.pop("tool_results", None) is not None and body.get("message") is None:
        body["message"] = "hello"
    for message in body.get("messages") or []:
        message.pop("tool_calls", None)
        if message.get("role") == "tool":
            message.pop("tool_call_id", None)
            message.update(role="user", content="a tool said")
        if message.get("content") in (None, ""):
            message["content"] = "hello"
    if isinstance(body.get("input"), list):
        body["input"] = [
            item for item in body["input"] if item.get("type") not in ("function_call", "function_call_output")
        ] or [{"role": "user", "content": "hello"}]


def one_key_per_request(case: schemathesis.Case) -> None:
    """A valid case's ``Idempotency-Key`` names its request (method, path and body): the fuzz draws the same few keys
    for many requests, and one key with another request is rightly ``422``, a state of the relay's that no schema can
    state. The same request drawn again keeps its key, and joins the turn the first one started."""
    if case.headers and "Idempotency-Key" in case.headers:
        request = json.dumps([case.method, case.operation.path, case.body], sort_keys=True, default=str)
        case.headers["Idempotency-Key"] = '"' + hashlib.sha256(request.encode()).hexdigest() + '"'


def start_and_end_with_the_user(case: schemathesis.Case) -> None:
    """The one rule of a valid request JSON Schema cannot state (the document states it in prose, and the relay
        answers 400): a conversation starts and ends with the user's message (reasoning items passed back are not
    messages). A valid case is made to follow it."""
    field, user_part = CONVERSATIONS.get(case.operation.path, ("", ""))
    messages = case.body.get(field) if isinstance(case.body, dict) else None
    if not isinstance(messages, list):
        return
    conversation = [
        message
        for message in messages
        if message.get("type") not in ("reasoning", "item_reference")
        and message.get("role") not in ("system", "developer")
    ]
    if not conversation:
        messages.append({"role": "user", "content": "hello"})
    for message in conversation[:1] + conversation[-1:]:
        message["role"] = "user"
        for part in message["content"] if isinstance(message["content"], list) else []:
            part["type"] = user_part


def check_stream(document: dict[str, Any], stream_ref: str, text: str) -> None:
    """Each event is one the stream's schema describes, with the data its ``contentSchema`` (or ``const``) gives; a
    native stream also ends as HTTP_API.md says."""
    if stream_ref.endswith(("/ChatStreamEvent", "/TurnStreamEvent")):
        _check_sse(text)
    registry: Registry[Any] = Registry().with_resource("urn:openapi", Resource(document, DRAFT202012))
    options = stream_events(document, stream_ref)
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.split("\n") if line and not line.startswith(":"))
        if "data" not in fields:
            continue  # the `retry:` prelude
        event = fields.get("event", "message")
        problems = []
        for name, data in options:
            if name != event:
                continue
            if "const" in data:
                problems.append([] if fields["data"] == data["const"] else [f"not {data['const']!r}"])
                continue
            try:
                value = json.loads(fields["data"])
            except ValueError:
                problems.append(["not JSON"])
                continue
            validator = Draft202012Validator({"$ref": "urn:openapi" + data["contentSchema"]["$ref"]}, registry=registry)
            problems.append([error.message for error in validator.iter_errors(value)])
        assert problems and [] in problems, (fields, problems)


def stream_events(document: dict[str, Any], stream_ref: str) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data schema) of each event a stream's schema describes (a ``oneOf`` of events, or of streams)."""
    found: list[tuple[str, dict[str, Any]]] = []
    for option in document["components"]["schemas"][stream_ref.rsplit("/", 1)[1]]["oneOf"]:
        if "$ref" in option:
            found.extend(stream_events(document, option["$ref"]))
        else:
            found.append((option["properties"]["event"]["const"], option["properties"]["data"]))
    return found


# ------------------------------------------------------------------- hypothesis, what no document describes


def documented_errors(document: dict[str, Any]) -> set[tuple[int, str]]:
    """Every (status, code) an operation of the document lists."""
    errors = set()
    for item in document["paths"].values():
        for operation in item.values():
            for status, answer in operation["responses"].items():
                while "$ref" in answer:
                    answer = document["components"]["responses"][answer["$ref"].rsplit("/", 1)[1]]
                if int(status) >= 400:
                    code = answer["content"]["application/json"]["schema"]["properties"]["error"]["properties"]["code"]
                    errors.update((int(status), name) for name in code.get("enum", []))
    return errors


def _sized_message(total: int) -> bytes:
    """A valid chat body of exactly ``total`` bytes (message capped at 32,000 characters by the API)."""
    frame = b'{"message":"","pad":""}'
    message = min(total - len(frame), 100)
    return b'{"message":"' + b"m" * message + b'","pad":"' + b"p" * (total - len(frame) - message) + b'"}'


BODIES = st.one_of(
    st.just(b""),
    st.binary(max_size=200),  # invalid UTF-8 among them
    st.sampled_from(
        [
            b"\xff\xfe\xfd",
            b"[" * 50_000 + b"]" * 50_000,  # deep nesting
            b'{"message":' * 5000 + b'"x"' + b"}" * 5000,
            b'{"message":"hi","max_tokens":1e999999}',
            b'{"message":"hi","max_tokens":123456789012345678901234567890}',
            b'{"message":"hi","temperature":NaN}',
            b'{"message":"\\ud800"}',
            b'{"message":"\\u0000"}',
            b'{"message":"hi","session_id":"\\u202e\\ufeff"}',
            b'{"message":["hi"]}',
            b'{"message":null}',
            b'"just a string"',
            b"null",
            b"[]",
            json.dumps({"message": "x" * 32_001}).encode(),
            _sized_message(MAX_BODY_BYTES - 1),
            _sized_message(MAX_BODY_BYTES),
            _sized_message(MAX_BODY_BYTES + 1),
            b"x" * (MAX_BODY_BYTES + 1),
        ]
    ),
    st.dictionaries(
        st.sampled_from(["message", "session_id", "max_tokens", "temperature", "extra"]),
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30) | st.lists(st.integers()),
        max_size=4,
    ).map(lambda body: json.dumps(body).encode()),
)


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, str, dict[str, str], bytes]:
    method = draw(st.sampled_from(["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]))
    s, t = draw(SEGMENT), draw(SEGMENT)
    path = draw(
        st.sampled_from(
            [
                "/chat",
                "/health",
                f"/sessions/{s}",
                f"/sessions/{s}/turns/{t}/events",
                f"/sessions/{s}/turns/{t}/cancel",
                f"/{s}",
                f"/chat/{s}",
                f"/sessions/{{real}}/turns/{t}/events",
                "/sessions/{real}/turns/1/events",
                "/sessions/{real}/turns/1/cancel",
                "/sessions/{real}",
                f"/sessions/{{real}}/turns/1/events?after={s}",
                "/v1/responses",
                "/v1/chat/completions",
                f"/v1/responses/{s}",
                f"/v1/responses/{s}/cancel",
                f"/v1/{s}",
                "/v1/responses/resp_{real}_1?stream=true",
                f"/v1/responses/resp_{{real}}_1?stream=true&starting_after={s}",
            ]
        )
    )
    headers: dict[str, str] = {}
    if draw(st.booleans()):
        garbage = st.text(ASCII, max_size=40).map(lambda value: value.strip() or "x")  # h11 refuses padded values
        headers["Last-Event-ID"] = draw(garbage | st.sampled_from(["-1", "1e9", "99" * 20, "1.5", "0x10"]))
    if draw(st.booleans()):
        headers["Content-Type"] = draw(st.sampled_from(["application/json", "text/plain", "application/octet-stream"]))
    if draw(st.integers(0, 9)) == 0:
        headers["X-Huge"] = "h" * draw(st.sampled_from([8_000, 16_000]))
    if draw(st.integers(0, 4)) == 0:  # in place of the JWT mode's valid token: refused 401, ignored under NONE
        headers["Authorization"] = draw(
            st.sampled_from(["Bearer", "Bearer a.b.c", "Basic YTpi", "Bearer " + "a" * 16_000, "bearer ..."])
            | st.text(ASCII, max_size=60).map(lambda value: value.strip() or "x")
        )
    body = draw(BODIES) if method in ("POST", "PUT", "PATCH") else b""
    return method, path, headers, body


def _check_sse(text: str) -> None:
    events = [block for block in text.split("\n\n") if block.strip()]
    kinds = [line.split(": ", 1)[1] for block in events for line in block.split("\n") if line.startswith("event: ")]
    assert kinds, text[:300]
    assert kinds[-1] in ("done", "error", "reconnect"), text[-300:]
    assert kinds.count("done") + kinds.count("error") <= 1, text[-300:]
    for block in events:
        for line in block.split("\n"):
            if line.startswith("data: "):
                json.loads(line[6:])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request=requests())
def test_any_request_gets_a_documented_error_or_a_valid_answer(
    stack: LocalStack,
    auth: dict[str, str],
    session: dict[str, Any],
    document: dict[str, Any],
    request: tuple[str, str, dict[str, str], bytes],
) -> None:
    # GIVEN any request (under the JWT mode with a valid token, unless it sends an Authorization header of its own)
    method, path, headers, body = request
    path = path.replace("{real}", session["session_id"])
    headers = {**auth, **headers}

    # WHEN it is sent to the Function URL (a hang fails the client's timeout)
    with httpx.Client(base_url=stack.url, timeout=httpx.Timeout(30.0)) as http:
        response = http.request(method, path, headers=headers, content=body)

    # THEN never a 5xx nor a traceback; a JSON error from the table, or a valid answer of the route
    text = response.text
    assert response.status_code < 500, (method, path, response.status_code, text[:300])
    assert "Traceback" not in text
    if method == "HEAD":  # GET's answer without its body (a 405 names its Allow)
        assert text == "", (path, text[:300])
        assert response.status_code != 405 or response.headers.get("allow")
        return
    content_type = response.headers.get("content-type", "")
    if response.status_code >= 400:
        error = response.json()["error"]
        allowed = documented_errors(document) | ROUTER_ERRORS
        assert (response.status_code, error["code"]) in allowed, (method, path, response.status_code, error)
        assert isinstance(error["message"], str) and error["message"]
        if response.status_code == 405:
            assert response.headers.get("allow")
    elif content_type.startswith("text/event-stream") and path.startswith("/v1/"):
        check_stream(document, "#/components/schemas/ResponseStreamEvent", text)
    elif content_type.startswith("text/event-stream"):
        _check_sse(text)
    elif response.request.url.path == "/":  # the client resolved a dot segment ("/sessions/..") to the page
        assert content_type.startswith("text/html"), content_type
    else:
        assert content_type.startswith("application/json"), content_type
        assert isinstance(response.json(), dict)
