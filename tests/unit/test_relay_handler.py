"""RelayFunction's handler (functions/relay/app.py) on the sample events in events/, under moto.

DynamoDB is moto's; the handler's own Lambda client is stubbed with botocore's Stubber (moto would
need Docker to run the proxy), so the invoke's parameters are checked against the real API model.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

import pytest
from botocore.exceptions import ClientError
from botocore.stub import ANY, Stubber

from chatstream.config import RelayConfig
from chatstream.errors import ConfigError
from chatstream.relay.ratelimit import REFUSED
from chatstream.status import TurnStatus
from chatstream.table.budgets import LimitKind
from streaming_runtime import StreamingResponse
from streaming_runtime.marshalling import is_function_url_event
from tests.builders import turn_records
from tests.support import EVENTS, FakeContext, load_event, load_function
from tests.unit.relay.relay_support import PROXY_FUNCTION, read_stream, write_turn

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import ModuleType

    from chatstream.table import ChatTable
    from chatstream_local.template import Template

SAMPLE_SESSION = "3f9c2a7e5b1d4c8e9f0a1b2c3d4e5f60"
SAMPLE_CALLER = "arn:aws:iam::123456789012:user/alice"  # the userArn of every relay-*.json event


@pytest.fixture
def app(monkeypatch: pytest.MonkeyPatch, template: Template, table_name: str) -> ModuleType:
    for name, value in template.function_settings("RelayFunction")["Environment"]["Variables"].items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("CHAT_TABLE_NAME", table_name)
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    return load_function("relay")


@pytest.fixture
def proxy(app: ModuleType) -> Iterator[Stubber]:
    with Stubber(app.LAMBDA) as stubber:
        yield stubber


@pytest.fixture
def sample_session(chat_table: ChatTable, monkeypatch: pytest.MonkeyPatch) -> str:
    """The samples' session, owned by the samples' caller, with turn 1 started."""
    monkeypatch.setattr("chatstream.table.sessions.new_session_id", lambda: SAMPLE_SESSION)
    chat_table.create_session(SAMPLE_CALLER)
    assert chat_table.turns.start_next(SAMPLE_SESSION, SAMPLE_CALLER, "hello") == 1
    return SAMPLE_SESSION


def run(app: ModuleType, name: str, context: FakeContext | None = None) -> StreamingResponse:
    response = app.handler(load_event(name), context or FakeContext("RelayFunction"))
    assert isinstance(response, StreamingResponse)
    return response


def body_json(response: StreamingResponse) -> Any:
    assert response.headers["Content-Type"] == "application/json"
    return json.loads("".join(str(chunk) for chunk in response.body))


def emf_metrics(output: str) -> dict[str, Any]:
    """Metric values in the EMF lines Powertools printed."""
    values: dict[str, Any] = {}
    for line in output.splitlines():
        if line.startswith("{") and '"_aws"' in line:
            document = json.loads(line)
            for definition in document["_aws"]["CloudWatchMetrics"][0]["Metrics"]:
                values[definition["Name"]] = document[definition["Name"]]
    return values


def test_every_relay_sample_is_a_function_url_event() -> None:
    # GIVEN the relay's sample events
    names = sorted(path.name for path in EVENTS.glob("relay-*.json"))
    assert len(names) >= 7
    for name in names:
        event = load_event(name)
        # THEN each is a payload-format-2.0 Function URL request with an IAM caller
        assert is_function_url_event(event) and event["version"] == "2.0"
        assert event["rawPath"] == event["requestContext"]["http"]["path"]
        assert event["requestContext"]["authorizer"]["iam"]["userArn"] == SAMPLE_CALLER


def test_health(app: ModuleType) -> None:
    # WHEN the health sample is handled THEN 200 {"status": "ok"}
    response = run(app, "relay-health.json")
    assert response.status_code == 200 and body_json(response) == {"status": "ok"}


def answered(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str, int]]:
    """(method, path, status) of each "request answered" log line."""
    return [
        (record.method, record.path, record.status)  # type: ignore[attr-defined]
        for record in caplog.records
        if record.getMessage() == "request answered"
    ]


@pytest.mark.parametrize(
    ("name", "method", "path", "status"),
    [
        ("relay-health.json", "GET", "/health", 200),
        ("relay-chat-bad-json.json", "POST", "/chat", 400),
        ("relay-history.json", "GET", f"/sessions/{SAMPLE_SESSION}", 404),
    ],
)
def test_each_request_is_logged_once_with_its_method_path_and_status(
    app: ModuleType, caplog: pytest.LogCaptureFixture, name: str, method: str, path: str, status: int
) -> None:
    # WHEN a sample is handled THEN one "request answered" line says what was asked and what was answered
    run(app, name)
    assert answered(caplog) == [(method, path, status)]


def test_an_event_without_a_path_is_logged_as_the_relay_read_it(
    app: ModuleType, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN a hand-made event with no path and a lower-case method
    event = load_event("relay-health.json")
    del event["rawPath"], event["requestContext"]["http"]["path"]
    event["requestContext"]["http"]["method"] = "get"
    # WHEN it is handled THEN the log line shows the request as the relay routed it: GET of no path, 404
    response = app.handler(event, FakeContext("RelayFunction"))
    assert response.status_code == 404 and answered(caplog) == [("GET", "", 404)]


def test_chat_sample_streams_a_turn_and_flushes_its_metrics(
    app: ModuleType, proxy: Stubber, chat_table: ChatTable, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN Lambda accepts the proxy's async invocation
    proxy.add_response(
        "invoke", {"StatusCode": 202}, {"FunctionName": PROXY_FUNCTION, "InvocationType": "Event", "Payload": ANY}
    )
    # WHEN the chat sample is handled
    response = run(app, "relay-chat.json")
    # THEN the prelude is an SSE stream and its first chunk carries meta
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "text/event-stream; charset=utf-8"
    body = iter(response.body)
    meta = read_stream([next(body)]).events[0].json()
    assert meta["turn"] == 1
    proxy.assert_no_pending_responses()
    # WHEN the turn's records arrive THEN the rest of the stream is the reply
    write_turn(chat_table, meta["session_id"], 1, ["You", " said:", " hello"])
    stream = read_stream(body)
    assert stream.text == "You said: hello" and stream.kinds[-1] == "done"
    # AND the stream's metrics were flushed when it ended
    metrics = emf_metrics(capsys.readouterr().out)
    assert metrics["StreamsOpened"] == [1.0]
    assert metrics["EventsSent"] == [5.0]  # meta, three tokens, done
    assert "ClientTimeToFirstToken" in metrics


def test_base64_chat_sample_starts_a_turn_with_its_options(
    app: ModuleType, proxy: Stubber, chat_table: ChatTable
) -> None:
    # GIVEN Lambda accepts the invocation
    proxy.add_response(
        "invoke", {"StatusCode": 202}, {"FunctionName": PROXY_FUNCTION, "InvocationType": "Event", "Payload": ANY}
    )
    sent: list[dict[str, Any]] = []
    app.LAMBDA.meta.events.register(
        "provide-client-params.lambda.Invoke", lambda params, **_: sent.append(json.loads(params["Payload"]))
    )
    # WHEN the base64-encoded chat sample is handled
    response = run(app, "relay-chat-base64.json")
    # THEN the stream starts and the proxy was asked for the new turn, by its key alone
    assert response.status_code == 200
    meta = read_stream([next(iter(response.body))])
    assert meta.kinds == ["meta"]
    session_id = meta.events[0].json()["session_id"]
    assert sent == [{"session_id": session_id, "turn": 1}]
    # AND the turn item holds the sample's message and max_tokens, for the proxy to read
    turn = chat_table.get_turn(session_id, 1)
    assert turn is not None and (turn.user, turn.max_tokens) == ("hello", 64)


def test_bad_json_sample_is_400_invalid_json(app: ModuleType, proxy: Stubber) -> None:
    # WHEN the bad-JSON sample is handled THEN 400 invalid_json, and the proxy is not invoked
    response = run(app, "relay-chat-bad-json.json")
    assert response.status_code == 400
    assert body_json(response)["error"]["code"] == "invalid_json"
    proxy.assert_no_pending_responses()


@pytest.mark.parametrize("name", ["relay-events.json", "relay-events-after.json"])
def test_events_samples_resume_after_event_2(
    app: ModuleType, chat_table: ChatTable, sample_session: str, name: str
) -> None:
    # GIVEN the samples' turn finished with four tokens
    write_turn(chat_table, sample_session, 1, ["a", "b", "c", "d"])
    # WHEN the resume sample (after event 2) is handled
    stream = read_stream(run(app, name).body)
    # THEN exactly the events after 2
    assert stream.ids == [3, 4, 5] and stream.text == "cd"


def test_events_near_the_deadline_end_with_reconnect(
    app: ModuleType, chat_table: ChatTable, sample_session: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN the samples' turn still generating, and an invocation with 5 s left (less than the margin)
    chat_table.put_records(turn_records(sample_session, 1, ["a", "b", "c", "d"])[:4])
    # WHEN the resume sample is handled
    stream = read_stream(run(app, "relay-events.json", FakeContext("RelayFunction", remaining_ms=5_000)).body)
    # THEN the stream tells the client where to resume, and counts a reconnect
    assert stream.kinds == ["token", "reconnect"]
    assert stream.events[-1].json() == {
        "events_url": f"/sessions/{sample_session}/turns/1/events",
        "last_event_id": 3,
    }
    assert emf_metrics(capsys.readouterr().out)["Reconnects"] == [1.0]


def test_cancel_sample_is_202(app: ModuleType, chat_table: ChatTable, sample_session: str) -> None:
    # GIVEN the samples' turn generating (a proxy claimed it) WHEN the cancel sample is handled THEN 202 and the flag
    # is set
    chat_table.turns.claim(sample_session, 1, "proxy-request")
    response = run(app, "relay-cancel.json")
    assert response.status_code == 202
    assert body_json(response) == {"session_id": sample_session, "turn": 1, "status": "cancelling"}
    assert chat_table.cancel_requested(sample_session, 1)


@pytest.mark.parametrize("sample", ["relay-history.json", "relay-v1-chat-completions.json"])
def test_a_500_the_relay_answers_itself_is_counted_for_its_alarm(
    app: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], sample: str
) -> None:
    # GIVEN a relay whose table is gone (deleted, or not the one its role may read)
    monkeypatch.setattr(app.SERVICE.table, "table_name", "no-such-table")
    # WHEN a request fails on it, on the native API or /v1
    response = run(app, sample)
    # THEN the client gets 500 internal_error, and InternalErrors (RelayInternalErrorsAlarm's metric) counts it: the
    # invocation itself succeeded, so Lambda's Errors metric does not
    assert response.status_code == 500 and body_json(response)["error"]["code"] == "internal_error"
    assert emf_metrics(capsys.readouterr().out)["InternalErrors"] == [1.0]


def test_a_500_after_a_v1_turn_started_is_counted_for_its_alarm(
    app: ModuleType, proxy: Stubber, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a chat completion whose turn started (the proxy invoked), then the relay failing to read it
    proxy.add_response(
        "invoke", {"StatusCode": 202}, {"FunctionName": PROXY_FUNCTION, "InvocationType": "Event", "Payload": ANY}
    )

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(app.SERVICE.table, "get_turn", broken)
    # WHEN the request is answered
    response = run(app, "relay-v1-chat-completions.json")
    # THEN it is a 500 internal_error the SDKs do not retry, and counted as the relay's own failure
    assert response.status_code == 500 and body_json(response)["error"]["code"] == "internal_error"
    assert emf_metrics(capsys.readouterr().out)["InternalErrors"] == [1.0]


def test_a_stream_the_relay_could_not_read_on_is_counted_for_its_alarm(
    app: ModuleType,
    sample_session: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # GIVEN a turn being followed, and the relay's reads of its records failing (a deleted table, a lost permission)
    def refused(*args: Any, **kwargs: Any) -> None:
        raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "not authorized"}}, "Query")

    monkeypatch.setattr(app.SERVICE.table, "query_records", refused)
    # WHEN a client resumes the turn
    stream = read_stream(run(app, "relay-events.json").body)
    # THEN its stream ends in relay_error (retryable), and the relay's own failure is counted (InternalErrors,
    # RelayInternalErrorsAlarm's metric) and logged at ERROR with its code: the invocation itself succeeds
    assert stream.kinds == ["error"] and stream.events[-1].json()["code"] == "relay_error"
    assert emf_metrics(capsys.readouterr().out)["InternalErrors"] == [1.0]
    (logged,) = [r for r in caplog.records if r.getMessage() == "reading the turn failed"]
    assert logged.levelno == logging.ERROR
    assert (logged.error_code, logged.session_id) == ("AccessDeniedException", sample_session)  # type: ignore[attr-defined]


@pytest.mark.parametrize("sample", ["relay-chat.json", "relay-v1-chat-completions.json"])
def test_a_turn_the_relay_could_not_start_is_counted_for_its_alarm(
    app: ModuleType, proxy: Stubber, capsys: pytest.CaptureFixture[str], sample: str
) -> None:
    # GIVEN Lambda refusing the relay's invocation of the proxy (a permission lost, the proxy deleted)
    proxy.add_client_error("invoke", "AccessDeniedException", "not authorized", 403)
    # WHEN a chat starts, on the native API (a stream) or /v1 (not streamed)
    response = run(app, sample)
    "".join(str(chunk) for chunk in response.body)  # the stream runs to its end, as the runtime sends it
    # THEN the turn ended proxy_unavailable, and InternalErrors counts it: every chat would fail so, each invocation
    # succeeding
    assert emf_metrics(capsys.readouterr().out)["InternalErrors"] == [1.0]


def test_history_sample(app: ModuleType, chat_table: ChatTable, sample_session: str) -> None:
    # GIVEN the samples' turn finished WHEN the history sample is handled THEN the turn is listed
    write_turn(chat_table, sample_session, 1, ["Hi"])
    history = body_json(run(app, "relay-history.json"))
    assert history["session_id"] == sample_session
    assert [(t["turn"], t["status"], t["user"], t["assistant"]) for t in history["turns"]] == [
        (1, TurnStatus.COMPLETE, "hello", "Hi")
    ]


def test_a_missing_proxy_function_name_fails_the_cold_start(
    monkeypatch: pytest.MonkeyPatch, template: Template, table_name: str
) -> None:
    # GIVEN the environment without PROXY_FUNCTION_NAME
    for name, value in template.function_settings("RelayFunction")["Environment"]["Variables"].items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("CHAT_TABLE_NAME", table_name)
    monkeypatch.delenv("PROXY_FUNCTION_NAME")
    # WHEN the function loads THEN the cold start fails naming the variable
    with pytest.raises(ConfigError, match="PROXY_FUNCTION_NAME"):
        load_function("relay")


def test_the_idle_bound_comes_from_the_template_and_a_bad_one_fails_the_cold_start(
    monkeypatch: pytest.MonkeyPatch, template: Template, table_name: str
) -> None:
    # GIVEN the relay's environment as the template sets it
    variables = dict(template.function_settings("RelayFunction")["Environment"]["Variables"])
    variables["CHAT_TABLE_NAME"] = table_name
    # WHEN the configuration is read THEN the idle bound is the template's 60 s
    assert RelayConfig.from_env(variables).idle_reconnect_s == 60
    # AND a value out of range fails the cold start, naming the variable
    with pytest.raises(ConfigError, match="IDLE_RECONNECT_S"):
        RelayConfig.from_env({**variables, "IDLE_RECONNECT_S": "0"})


def test_a_poll_max_below_the_poll_min_polls_at_the_min_and_says_so(
    template: Template, table_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN PollMinMs=1000 beside the default PollMaxMs=500: each within its range, so CloudFormation deploys it
    variables = dict(template.function_settings("RelayFunction")["Environment"]["Variables"])
    variables.update(CHAT_TABLE_NAME=table_name, POLL_MIN_MS="1000", POLL_MAX_MS="500")
    # WHEN the relay reads its configuration THEN it starts (every request would otherwise be a 502), polling every
    # 1000 ms, and logs why
    config = RelayConfig.from_env(variables)
    assert (config.poll_min_ms, config.poll_max_ms) == (1000, 1000)
    assert "POLL_MAX_MS (500) is below POLL_MIN_MS (1000)" in caplog.text


@pytest.mark.parametrize(("value", "paced"), [(None, True), ("true", True), ("FALSE", False), (" false ", False)])
def test_text_is_paced_unless_pace_text_says_false(
    template: Template, table_name: str, value: str | None, paced: bool
) -> None:
    # GIVEN the relay's environment as the template sets it (no PACE_TEXT), or with PACE_TEXT set
    variables = dict(template.function_settings("RelayFunction")["Environment"]["Variables"])
    variables["CHAT_TABLE_NAME"] = table_name
    if value is not None:
        variables["PACE_TEXT"] = value
    # WHEN the configuration is read THEN text is paced unless the variable says false
    assert RelayConfig.from_env(variables).pace_text is paced


def test_a_pace_text_that_is_not_a_boolean_fails_the_cold_start(template: Template, table_name: str) -> None:
    variables = dict(template.function_settings("RelayFunction")["Environment"]["Variables"])
    variables["CHAT_TABLE_NAME"] = table_name
    with pytest.raises(ConfigError, match="PACE_TEXT must be true or false"):
        RelayConfig.from_env({**variables, "PACE_TEXT": "0"})


def test_a_refused_turn_is_logged_with_its_owner_and_counted(
    app: ModuleType,
    proxy: Stubber,
    chat_table: ChatTable,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # GIVEN the samples' caller, whose own budget is one token a day (an operator's override, as make limits sets)
    chat_table.budgets.set_overrides(SAMPLE_CALLER, {LimitKind.TOKENS: 1})
    # WHEN it sends the chat sample
    response = run(app, "relay-chat.json")
    # THEN it is refused (no proxy invoked), logged with its owner for CallerRefusalsRule, and counted (Refusals)
    assert response.status_code == 429 and body_json(response)["error"]["code"] == "insufficient_quota"
    proxy.assert_no_pending_responses()
    refused = [record for record in caplog.records if record.getMessage() == REFUSED]
    assert [(r.owner, r.limits) for r in refused] == [(SAMPLE_CALLER, [LimitKind.TOKENS])]  # type: ignore[attr-defined]
    assert emf_metrics(capsys.readouterr().out)["Refusals"] == [1.0]
