"""The relay's endpoints against moto's DynamoDB and a recording Lambda client: every row of HTTP_API.md."""

from __future__ import annotations

import base64
import copy
import json
import threading
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError, ResponseStreamingError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatstream.errors import Throttled, TurnFinished
from chatstream.generation import turn_to_generate
from chatstream.proxy_event import GenerateRequest
from chatstream.records import SESSION_ID_PATTERN, ErrorInfo, RecordType
from chatstream.relay.follow import StreamOutcome
from chatstream.relay.http import Request
from chatstream.relay.service import RelayService
from chatstream.status import StopReason, TurnStatus
from tests.builders import turn_records
from tests.support import load_event
from tests.unit.relay.relay_support import (
    FAST,
    PROXY_FUNCTION,
    RELAY_POLLING,
    FakeClock,
    Stream,
    calls_at,
    read_stream,
    relay_config,
    write_turn,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from chatstream.relay.http import Response
    from chatstream.table import ChatTable

ALICE = {"accountId": "123456789012", "callerId": "AIDAALICE", "userArn": "arn:aws:iam::123456789012:user/alice"}
BOB = {"accountId": "123456789012", "callerId": "AIDABOB", "userArn": "arn:aws:iam::123456789012:user/bob"}


class AnswerBody:
    """An invoke's ``Payload`` (botocore's ``StreamingBody``; empty for an asynchronous invoke): how much was read."""

    def __init__(self, failure: Exception | None = None) -> None:
        self.read_to_end = False
        self.failure = failure

    def read(self) -> bytes:
        if self.failure is not None:
            raise self.failure
        self.read_to_end = True
        return b""


class RecordingLambda:
    """Stands in for the boto3 Lambda client: records invokes, answers 202 or raises ``failure``."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.answers: list[AnswerBody] = []
        self.failure: Exception | None = None
        self.read_failure: Exception | None = None
        self.status = 202
        self.accepted_anyway: Callable[[dict[str, Any]], None] | None = None  # Lambda queued it before failing

    def invoke(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        if self.accepted_anyway is not None:
            self.accepted_anyway(json.loads(kwargs["Payload"]))
        if self.failure is not None:
            raise self.failure
        self.answers.append(AnswerBody(self.read_failure))
        return {"StatusCode": self.status, "Payload": self.answers[-1]}

    def payloads(self) -> list[dict[str, Any]]:
        return [json.loads(call["Payload"]) for call in self.calls]


@pytest.fixture
def proxy() -> RecordingLambda:
    return RecordingLambda()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def service(chat_table: ChatTable, proxy: RecordingLambda, clock: FakeClock, table_name: str) -> RelayService:
    return RelayService(chat_table, proxy, relay_config(table_name), clock=clock.as_clock(), settings=FAST)  # type: ignore[arg-type]


def event(
    method: str,
    path: str,
    *,
    body: str | bytes | None = None,
    headers: dict[str, str] | None = None,
    query: dict[str, str] | None = None,
    caller: dict[str, str] | None = ALICE,
    base64_body: bool = False,
) -> dict[str, Any]:
    """A payload-format-2.0 event, made from the health sample so its shape is the real one."""
    raw = copy.deepcopy(load_event("relay-health.json"))
    raw["rawPath"] = path
    raw["requestContext"]["http"].update(method=method, path=path)
    raw["headers"].update(headers or {})
    if query:
        raw["queryStringParameters"] = query
        raw["rawQueryString"] = "&".join(f"{k}={v}" for k, v in query.items())
    if caller is None:
        raw["requestContext"].pop("authorizer", None)
    else:
        raw["requestContext"]["authorizer"] = {"iam": dict(caller)}
    if body is not None:
        data = body.encode() if isinstance(body, str) else body
        raw["body"] = base64.b64encode(data).decode() if base64_body else data.decode()
        raw["isBase64Encoded"] = base64_body
    return raw


def request(*args: Any, **kwargs: Any) -> Request:
    """The :func:`event` as the relay's handler parses it."""
    return Request.from_event(event(*args, **kwargs))


def chat(
    service: RelayService, message: str = "hello", caller: dict[str, str] | None = ALICE, **fields: Any
) -> Response:
    return service.handle(request("POST", "/chat", body=json.dumps({"message": message, **fields}), caller=caller))


def json_body(response: Response) -> Any:
    assert response.headers["Content-Type"] == "application/json"
    return json.loads("".join(response.body))


def assert_error(response: Response, status: int, code: str) -> str:
    assert response.status_code == status
    payload = json_body(response)
    assert set(payload) == {"error"} and payload["error"]["code"] == code
    message: str = payload["error"]["message"]
    assert message
    return message


def meta_of(response: Response) -> dict[str, Any]:
    """Take the stream's first chunk: it must already hold retry and meta."""
    first = next(iter(response.body))
    stream = read_stream([first])
    assert stream.retry == 1000 and stream.kinds == ["meta"]
    meta: dict[str, Any] = stream.events[0].json()
    return meta


def rest_of(response: Response, clock: FakeClock | None = None) -> Stream:
    return read_stream(response.body, clock)


# ---------------------------------------------------------------------------------- POST /chat


def test_chat_streams_meta_at_once_then_the_turn(
    service: RelayService, proxy: RecordingLambda, chat_table: ChatTable
) -> None:
    # WHEN a client starts a new chat
    response = chat(service, "hello", max_tokens=64, temperature=0.5)
    # THEN the answer is an SSE stream whose first chunk is retry + meta, before the model produced anything
    assert response.status_code == 200
    assert response.headers == {
        "Content-Type": "text/event-stream; charset=utf-8",
        "Cache-Control": "no-store",  # a conversation: no cache in front of the URL may keep it
        "X-Content-Type-Options": "nosniff",
    }
    meta = meta_of(response)
    session_id = meta["session_id"]
    assert len(session_id) == 32 and int(session_id, 16) >= 0
    assert meta == {"session_id": session_id, "turn": 1, "events_url": f"/sessions/{session_id}/turns/1/events"}
    # AND the proxy was invoked asynchronously with the turn's key only: no conversation text in the event
    assert [(c["FunctionName"], c["InvocationType"]) for c in proxy.calls] == [(PROXY_FUNCTION, "Event")]
    assert proxy.payloads() == [{"session_id": session_id, "turn": 1}]
    # AND the message and its options are on the turn item, where the proxy reads them
    turn = chat_table.get_turn(session_id, 1)
    assert turn is not None and (turn.user, turn.max_tokens, turn.temperature) == ("hello", 64, 0.5)
    # WHEN the turn's records reach the table
    write_turn(chat_table, session_id, 1, ["You", " said:", " hello"])
    # THEN the stream carries them with their ids and ends with done
    stream = rest_of(response)
    assert stream.kinds == ["token", "token", "token", "done"]
    assert stream.ids == [1, 2, 3, 4]
    assert stream.text == "You said: hello"
    assert response.stream is not None and response.stream.stats.outcome is StreamOutcome.DONE


def test_a_second_turn_continues_the_session(service: RelayService, chat_table: ChatTable) -> None:
    # GIVEN a session whose first turn ended
    session_id = meta_of(chat(service, "one"))["session_id"]
    write_turn(chat_table, session_id, 1, ["first"])
    # WHEN the client sends again on the session
    response = chat(service, "two", session_id=session_id)
    # THEN it is turn 2 of the same session
    assert meta_of(response) == {
        "session_id": session_id,
        "turn": 2,
        "events_url": f"/sessions/{session_id}/turns/2/events",
    }


def test_a_new_turn_while_one_is_generating_is_409_turn_in_progress(service: RelayService) -> None:
    # GIVEN a session whose turn is still generating
    session_id = meta_of(chat(service, "one"))["session_id"]
    # WHEN the client sends again
    response = chat(service, "two", session_id=session_id)
    # THEN 409 turn_in_progress
    message = assert_error(response, 409, "turn_in_progress")
    assert "still generating" in message


def test_a_turn_beyond_the_sessions_limit_is_409_turn_limit_and_invokes_nothing(
    chat_table: ChatTable, proxy: RecordingLambda, clock: FakeClock, table_name: str
) -> None:
    # GIVEN a relay that allows two turns a session, and a session that has taken both
    config = relay_config(table_name, MAX_TURNS_PER_SESSION="2")
    service = RelayService(chat_table, proxy, config, clock=clock.as_clock(), settings=FAST)  # type: ignore[arg-type]
    session_id = meta_of(chat(service, "one"))["session_id"]
    write_turn(chat_table, session_id, 1, ["first"])
    assert meta_of(chat(service, "two", session_id=session_id))["turn"] == 2
    write_turn(chat_table, session_id, 2, ["second"])
    invoked = len(proxy.calls)

    # WHEN the client sends a third message on it
    response = chat(service, "three", session_id=session_id)

    # THEN 409 turn_limit (not turn_in_progress, which a client may wait out), saying what to do, and no generation
    message = assert_error(response, 409, "turn_limit")
    assert "limit of 2 turns" in message and "new session" in message
    assert len(proxy.calls) == invoked
    # AND a new session still starts
    assert meta_of(chat(service, "three"))["turn"] == 1


def test_concurrent_posts_on_one_session_give_one_stream_and_409s(
    service: RelayService, chat_table: ChatTable, proxy: RecordingLambda
) -> None:
    # GIVEN a session whose first turn ended
    session_id = meta_of(chat(service, "one"))["session_id"]
    write_turn(chat_table, session_id, 1, ["first"])
    # WHEN four requests race to start the next turn
    statuses: list[int] = []

    def post() -> None:
        statuses.append(chat(service, "race", session_id=session_id).status_code)

    threads = [threading.Thread(target=post) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # THEN exactly one got a stream and the proxy was asked for exactly one more turn
    assert sorted(statuses) == [200, 409, 409, 409]
    assert [p["turn"] for p in proxy.payloads()] == [1, 2]


@pytest.mark.parametrize("session_id", ["0" * 32, "../../etc/passwd", "x" * 200, "a b"])
def test_chat_on_an_unknown_session_is_404_session_not_found(service: RelayService, session_id: str) -> None:
    # WHEN a client names a session that does not exist (or cannot exist)
    response = chat(service, "hi", session_id=session_id)
    # THEN 404 session_not_found, whose message says to omit the field to start a new session
    assert "omit session_id to start a new one" in assert_error(response, 404, "session_not_found")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/sessions/{sid}"),
        ("GET", "/sessions/{sid}/turns/1/events"),
        ("POST", "/sessions/{sid}/turns/1/cancel"),
        ("GET", "/sessions/nope"),
    ],
)
def test_a_path_naming_an_unknown_session_gives_no_advice_about_a_body_field(
    service: RelayService, method: str, path: str
) -> None:
    # WHEN a path names a session that does not exist (or cannot exist)
    response = service.handle(request(method, path.format(sid="0" * 32)))
    # THEN 404 session_not_found names it, and does not send the client to a session_id field it has not got
    message = assert_error(response, 404, "session_not_found")
    assert message.startswith("no session '") and "session_id" not in message


def test_a_failed_proxy_invoke_ends_the_turn_in_error_and_frees_the_session(
    service: RelayService, proxy: RecordingLambda, chat_table: ChatTable
) -> None:
    # GIVEN Lambda refuses to invoke the proxy
    proxy.failure = ClientError({"Error": {"Code": "TooManyRequestsException", "Message": "Rate"}}, "Invoke")
    # WHEN a client starts a chat
    response = chat(service, "hello")
    # THEN it still gets meta, then one retryable error, and the stream ends
    session_id = meta_of(response)["session_id"]
    stream = rest_of(response)
    assert stream.kinds == ["error"] and stream.ids == [1]
    error = stream.events[0].json()
    assert error["code"] == "proxy_unavailable" and error["retryable"] is True
    assert "TooManyRequestsException" in error["message"]
    # AND the turn ended as error in the table, so the next message starts turn 2
    turn = chat_table.get_turn(session_id, 1)
    assert turn is not None and turn.status is TurnStatus.ERROR
    proxy.failure = None
    assert meta_of(chat(service, "again", session_id=session_id))["turn"] == 2


def test_an_invoke_that_failed_but_reached_the_proxy_is_followed_not_ended(
    service: RelayService, proxy: RecordingLambda, chat_table: ChatTable
) -> None:
    # GIVEN an invoke that timed out after Lambda had queued it, and the proxy claimed the turn meanwhile
    proxy.failure = ReadTimeoutError(endpoint_url="https://lambda.us-east-1.amazonaws.com")
    proxy.accepted_anyway = lambda event: chat_table.turns.claim(event["session_id"], event["turn"], "proxy-request")
    # WHEN a client starts a chat
    response = chat(service, "hello")
    session_id = meta_of(response)["session_id"]
    # THEN the turn is not ended in error: the proxy generates it, and the stream follows its records
    turn = chat_table.get_turn(session_id, 1)
    assert turn is not None and turn.status is TurnStatus.IN_PROGRESS
    write_turn(chat_table, session_id, 1, ["You", " said:", " hello"])
    stream = rest_of(response)
    assert stream.kinds == ["token", "token", "token", "done"] and stream.text == "You said: hello"


def test_a_proxy_invocation_after_the_relay_ended_the_turn_generates_nothing(
    service: RelayService, proxy: RecordingLambda, chat_table: ChatTable
) -> None:
    # GIVEN a turn the relay ended because its invoke failed
    proxy.failure = ReadTimeoutError(endpoint_url="https://lambda.us-east-1.amazonaws.com")
    session_id = meta_of(chat(service, "hello"))["session_id"]
    # WHEN Lambda delivers the invocation after all, and the proxy tries to claim the turn
    # THEN the turn has ended: the proxy must not generate
    with pytest.raises(TurnFinished):
        chat_table.turns.claim(session_id, 1, "proxy-request")


def test_a_resume_of_a_turn_whose_invoke_failed_replays_the_error(
    service: RelayService, proxy: RecordingLambda
) -> None:
    # GIVEN a turn whose proxy could not be reached (no endpoint)
    proxy.failure = EndpointConnectionError(endpoint_url="https://lambda.us-east-1.amazonaws.com")
    session_id = meta_of(chat(service, "hello"))["session_id"]
    # WHEN a client attaches to the turn
    response = service.handle(request("GET", f"/sessions/{session_id}/turns/1/events"))
    # THEN it gets the same error from the table
    stream = rest_of(response)
    assert stream.kinds == ["error"] and stream.events[0].json()["code"] == "proxy_unavailable"


def test_an_invoke_lambda_does_not_accept_is_a_failure(service: RelayService, proxy: RecordingLambda) -> None:
    # GIVEN Lambda answers the async invoke with a status other than 202
    proxy.status = 200
    # WHEN a client starts a chat THEN the stream ends with proxy_unavailable
    response = chat(service, "hello")
    meta_of(response)
    assert rest_of(response).events[0].json()["code"] == "proxy_unavailable"


# ------------------------------------------------------------------------------ error rows


@pytest.mark.parametrize(
    ("body", "base64_body", "status", "code"),
    [
        ("{not json", False, 400, "invalid_json"),
        ("[1, 2]", False, 400, "invalid_json"),
        (b"\xff\xfe", True, 400, "invalid_json"),
        ('{"message": ""}', False, 400, "invalid_request"),
        ('{"message": "hi", "max_tokens": 100000}', False, 400, "invalid_request"),
        ('{"message": "hi", "temperature": 2}', False, 400, "invalid_request"),
        ('{"message": "' + "a" * 270_000 + '"}', False, 413, "payload_too_large"),
        ('{"message": "' + "a" * 270_000 + '"}', True, 413, "payload_too_large"),
    ],
)
def test_bad_chat_bodies_are_answered_before_any_turn_starts(
    service: RelayService,
    proxy: RecordingLambda,
    body: str | bytes,
    base64_body: bool,
    status: int,
    code: str,
) -> None:
    # WHEN a chat body breaks a rule
    response = service.handle(request("POST", "/chat", body=body, base64_body=base64_body))
    # THEN the error row's status and code, and no generation was started
    assert_error(response, status, code)
    assert proxy.calls == []


def test_a_base64_chat_body_is_decoded(service: RelayService) -> None:
    # WHEN curl sends the body as application/octet-stream (the Function URL base64-encodes it)
    response = service.handle(request("POST", "/chat", body='{"message": "hi"}', base64_body=True))
    # THEN it is an ordinary chat
    assert meta_of(response)["turn"] == 1


@pytest.mark.parametrize("path", ["//", "/nope", "/chat/", "//chat", "/sessions", "/sessions/a/turns", "/health/x"])
def test_unknown_routes_are_404_not_found(service: RelayService, path: str) -> None:
    # WHEN a path matches no route THEN 404 not_found
    assert_error(service.handle(request("GET", path)), 404, "not_found")


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("GET", "/chat", "POST"),
        ("PUT", "/chat", "POST"),
        ("POST", "/", "GET, HEAD"),
        ("POST", "/health", "GET, HEAD"),
        ("DELETE", "/sessions/abc", "GET, HEAD"),
        ("POST", "/sessions/abc/turns/1/events", "GET, HEAD"),
        ("GET", "/sessions/abc/turns/1/cancel", "POST"),
    ],
)
def test_a_known_route_with_another_method_is_405_with_allow(
    service: RelayService, method: str, path: str, allow: str
) -> None:
    # WHEN a route is called with a method it does not serve
    response = service.handle(request(method, path))
    # THEN 405 method_not_allowed with the Allow header
    assert_error(response, 405, "method_not_allowed")
    assert response.headers["Allow"] == allow


def test_head_answers_what_get_would_without_the_body(service: RelayService, chat_table: ChatTable) -> None:
    # GIVEN a finished turn
    session_id = finished_session(service, chat_table, ["a", "b"])
    for path, status in [
        ("/health", 200),
        (f"/sessions/{session_id}", 200),
        (f"/sessions/{session_id}/turns/1/events", 200),
        (f"/sessions/{session_id}/turns/9/events", 404),
        ("/sessions/nosuch", 404),
        ("/nope", 404),
    ]:
        # WHEN the path is asked for with HEAD, and with GET
        head = service.handle(request("HEAD", path))
        got = service.handle(request("GET", path))
        # THEN GET's status and headers, and no body; a stream is not started (nothing is followed)
        assert (head.status_code, dict(head.headers)) == (status, dict(got.headers)), path
        assert list(head.body) == [] and head.stream is None, path
        assert list(got.body), path
    # AND a path GET does not serve is 405 to HEAD too, with its Allow
    refused = service.handle(request("HEAD", "/chat"))
    assert (refused.status_code, refused.headers["Allow"], list(refused.body)) == (405, "POST", [])


def test_an_error_quotes_at_most_a_few_hundred_characters_of_the_request(service: RelayService) -> None:
    # GIVEN requests whose wrong part is huge: a 60,000-character field name, a 20,000-character path
    long_field = chat(service, "hi", **{"x" * 60_000: 1})
    long_path = service.handle(request("GET", "/" + "p" * 20_000))
    # THEN each error still says what is wrong, in at most 500 characters
    for response, status, code, says in (
        (long_field, 400, "invalid_request", "unknown field"),
        (long_path, 404, "not_found", "no route"),
    ):
        message = assert_error(response, status, code)
        assert says in message and len(message) <= 500


def test_an_integer_too_long_to_convert_is_out_of_range_not_invalid_json(service: RelayService) -> None:
    # WHEN max_tokens is a valid JSON integer of 5,000 digits THEN the field is named, as for any out-of-range value
    response = service.handle(request("POST", "/chat", body='{"message": "hi", "max_tokens": ' + "9" * 5000 + "}"))
    message = assert_error(response, 400, "invalid_request")
    assert message.startswith("max_tokens must be between 1 and") and "sys.set_int_max_str_digits" not in message
    assert len(message) <= 500


def test_health(service: RelayService) -> None:
    # WHEN GET /health THEN 200 {"status": "ok"}
    response = service.handle(request("GET", "/health"))
    assert response.status_code == 200 and json_body(response) == {"status": "ok"}


# --------------------------------------------------------------------------- GET …/events


def finished_session(service: RelayService, chat_table: ChatTable, words: list[str]) -> str:
    session_id: str = meta_of(chat(service, "hello"))["session_id"]
    write_turn(chat_table, session_id, 1, words)
    return session_id


def test_events_replays_a_finished_turn(service: RelayService, chat_table: ChatTable) -> None:
    # GIVEN a finished turn
    session_id = finished_session(service, chat_table, ["a", "b"])
    # WHEN a client attaches without a position
    response = service.handle(request("GET", f"/sessions/{session_id}/turns/1/events"))
    # THEN it gets retry, the whole turn, and the end
    assert response.status_code == 200 and response.headers["Content-Type"].startswith("text/event-stream")
    stream = rest_of(response)
    assert stream.retry == 1000
    assert stream.kinds == ["token", "token", "done"] and stream.text == "ab"


def test_a_client_attaching_to_a_turn_that_waits_for_its_generation_does_not_end_it(
    chat_table: ChatTable, proxy: RecordingLambda, clock: FakeClock, table_name: str
) -> None:
    config = relay_config(table_name)
    service = RelayService(chat_table, proxy, config, clock=clock.as_clock(), settings=RELAY_POLLING)  # type: ignore[arg-type]
    # GIVEN a turn whose generation waits in Lambda's queue (nothing claims it), which a request started and left
    session_id = chat_table.create_session(ALICE["userArn"])
    assert chat_table.turns.start_next(session_id, ALICE["userArn"], "hello") == 1
    # WHEN another client attaches to its events past the start timeout
    stream = rest_of(service.handle(request("GET", f"/sessions/{session_id}/turns/1/events")), clock)
    # THEN its stream ends with reconnect (it resumes and waits on), and the turn still waits for its generation
    assert stream.kinds == ["reconnect"] and clock.t >= FAST.start_timeout_s
    turn = chat_table.get_turn(session_id, 1)
    assert turn is not None and turn.status is TurnStatus.IN_PROGRESS and turn.generator is None


@pytest.mark.parametrize(
    ("headers", "query"),
    [
        ({"last-event-id": "2"}, None),
        ({"last-event-id": " 2 "}, None),
        (None, {"after": "2"}),
        ({"last-event-id": "2"}, {"after": "0"}),
        ({"last-event-id": ""}, {"after": "2"}),
    ],
)
def test_events_resume_after_the_last_event_id(
    service: RelayService, chat_table: ChatTable, headers: dict[str, str] | None, query: dict[str, str] | None
) -> None:
    # GIVEN a finished turn of four tokens
    session_id = finished_session(service, chat_table, ["a", "b", "c", "d"])
    # WHEN a client resumes after event 2 (the Last-Event-ID header wins over ?after=)
    response = service.handle(request("GET", f"/sessions/{session_id}/turns/1/events", headers=headers, query=query))
    # THEN exactly the events after 2
    stream = rest_of(response)
    assert stream.ids == [3, 4, 5] and stream.text == "cd"


@pytest.mark.parametrize(
    ("query", "texts", "ids"),
    [
        ({"after": "1.3"}, [" c", " d e"], ["1", "2"]),  # pacing off: the rest of record 1, then record 2
        ({"after": "1.1", "pace": "1"}, [" b", " c", " d", " e"], ["1.3", "1", "2.2", "2"]),
        ({"pace": "0"}, ["a b c", " d e"], ["1", "2"]),
    ],
)
def test_events_resume_mid_record_and_pace_as_asked(
    chat_table: ChatTable,
    proxy: RecordingLambda,
    clock: FakeClock,
    table_name: str,
    query: dict[str, str],
    texts: list[str],
    ids: list[str],
) -> None:
    # GIVEN a relay whose setting turns pacing off (PACE_TEXT=false), and a finished turn of two records
    config = relay_config(table_name, PACE_TEXT="false")
    settings = replace(FAST, pace=config.pace_text)
    service = RelayService(chat_table, proxy, config, clock=clock.as_clock(), settings=settings)  # type: ignore[arg-type]
    session_id = finished_session(service, chat_table, ["a b c", " d e"])
    # WHEN a client follows it with ?after= inside record 1 and/or ?pace=
    stream = rest_of(service.handle(request("GET", f"/sessions/{session_id}/turns/1/events", query=query)))
    # THEN it gets exactly the text after that position, in pieces or whole records as asked
    assert [event.json()["text"] for event in stream.of("token")] == texts
    assert [event.id for event in stream.of("token")] == ids


def test_events_follow_a_live_turn(service: RelayService, chat_table: ChatTable, clock: FakeClock) -> None:
    # GIVEN a turn generating, whose records arrive over time
    session_id = meta_of(chat(service, "hello"))["session_id"]
    for index, record in enumerate(turn_records(session_id, 1, ["x", "y"])):
        clock.at(1.0 + index, lambda record=record: chat_table.put_records([record]))
    # WHEN a client attaches
    stream = rest_of(service.handle(request("GET", f"/sessions/{session_id}/turns/1/events")), clock)
    # THEN it follows until the end
    assert stream.kinds == ["token", "token", "done"] and stream.text == "xy"


@pytest.mark.parametrize(
    ("headers", "query", "named"),
    [
        ({"last-event-id": "-1"}, None, "Last-Event-ID"),
        ({"last-event-id": "abc"}, None, "Last-Event-ID"),
        (None, {"after": "1.x"}, "after"),
        ({"last-event-id": "2.3.4"}, None, "Last-Event-ID"),
        (None, {"pace": "no"}, "pace"),
        (None, {"after": ""}, "after"),
        (None, {"after": " 2"}, "after"),
        (None, {"after": "2\n"}, "after"),
        (None, {"pace": " 0"}, "pace"),
    ],
)
def test_events_with_a_bad_position_are_400_invalid_request(
    service: RelayService, headers: dict[str, str] | None, query: dict[str, str] | None, named: str
) -> None:
    # WHEN the position is not a non-negative integer THEN 400 invalid_request naming it
    response = service.handle(request("GET", "/sessions/abc/turns/1/events", headers=headers, query=query))
    assert assert_error(response, 400, "invalid_request").startswith(named)


@pytest.mark.parametrize("turn", ["2", "0", "abc", "-1", "1000000", "9" * 5000])
def test_events_of_an_unknown_turn_are_404_turn_not_found(
    service: RelayService, chat_table: ChatTable, turn: str
) -> None:
    # GIVEN a session with one turn
    session_id = finished_session(service, chat_table, ["a"])
    # WHEN a client asks for another turn THEN 404 turn_not_found
    assert_error(service.handle(request("GET", f"/sessions/{session_id}/turns/{turn}/events")), 404, "turn_not_found")


def test_events_of_an_unknown_session_are_404_session_not_found(service: RelayService) -> None:
    # WHEN a client asks for a session that does not exist THEN 404 session_not_found
    response = service.handle(request("GET", f"/sessions/{'f' * 32}/turns/1/events"))
    assert_error(response, 404, "session_not_found")


# --------------------------------------------------------------------------- POST …/cancel


def test_cancel_of_a_generating_turn_is_202_and_sets_the_flag(service: RelayService, chat_table: ChatTable) -> None:
    # GIVEN a turn a proxy invocation claimed and generates
    session_id = meta_of(chat(service, "hello"))["session_id"]
    chat_table.turns.claim(session_id, 1, "proxy-request")
    # WHEN the client cancels it
    response = service.handle(request("POST", f"/sessions/{session_id}/turns/1/cancel"))
    # THEN 202 cancelling, and the flag the proxy checks is set; the turn is the generation's to end
    assert response.status_code == 202
    assert json_body(response) == {"session_id": session_id, "turn": 1, "status": "cancelling"}
    assert chat_table.cancel_requested(session_id, 1)
    turn = chat_table.get_turn(session_id, 1)
    assert turn is not None and turn.status is TurnStatus.IN_PROGRESS and turn.generator == "proxy-request"
    assert chat_table.query_records(session_id, 1) == []


def test_cancel_before_a_proxy_claimed_the_turn_ends_it_cancelled_at_once(
    service: RelayService, chat_table: ChatTable
) -> None:
    # GIVEN a turn whose proxy invocation waits in Lambda's queue (throttled): no generation has claimed it
    response = chat(service, "hello")
    session_id = meta_of(response)["session_id"]
    # WHEN the client cancels it
    cancel = service.handle(request("POST", f"/sessions/{session_id}/turns/1/cancel"))
    # THEN 202 cancelling, as for any cancel
    assert cancel.status_code == 202
    assert json_body(cancel) == {"session_id": session_id, "turn": 1, "status": "cancelling"}
    # AND the turn ended cancelled now, with nothing generated, as a turn the proxy cancelled reads
    turn = chat_table.get_turn(session_id, 1)
    assert turn is not None and (turn.status, turn.stop_reason) == (TurnStatus.CANCELLED, StopReason.CANCELLED)
    assert (turn.assistant, turn.usage, turn.generator) == ("", {"input_tokens": 0, "output_tokens": 0}, "relay")
    records = chat_table.query_records(session_id, 1)
    assert [(r.seq, r.type) for r in records] == [(0, RecordType.START), (1, RecordType.STOP)]
    # AND the stream that started it ends with done cancelled at once, no timeout
    stream = rest_of(response)
    assert stream.kinds == ["done"] and stream.events[0].json()["stop_reason"] == "cancelled"
    # AND the session takes its next message at once
    assert meta_of(chat(service, "again", session_id=session_id))["turn"] == 2
    # AND a cancel sent again is 409 turn_finished
    assert_error(service.handle(request("POST", f"/sessions/{session_id}/turns/1/cancel")), 409, "turn_finished")
    # WHEN the proxy invocation runs at last, and tries to claim the turn THEN it has ended: nothing is generated
    with pytest.raises(TurnFinished):
        turn_to_generate(chat_table, GenerateRequest(session_id, 1), "late-proxy-request")


def test_cancel_of_a_finished_turn_is_409_turn_finished(service: RelayService, chat_table: ChatTable) -> None:
    # GIVEN a finished turn WHEN the client cancels it THEN 409 turn_finished
    session_id = finished_session(service, chat_table, ["a"])
    response = service.handle(request("POST", f"/sessions/{session_id}/turns/1/cancel"))
    assert_error(response, 409, "turn_finished")


def test_cancel_of_an_unknown_turn_is_404_turn_not_found(service: RelayService, chat_table: ChatTable) -> None:
    # GIVEN a session with one turn WHEN the client cancels turn 2 THEN 404 turn_not_found
    session_id = finished_session(service, chat_table, ["a"])
    assert_error(service.handle(request("POST", f"/sessions/{session_id}/turns/2/cancel")), 404, "turn_not_found")


# ---------------------------------------------------------------------------- GET /sessions


def test_history_lists_every_turn(service: RelayService, chat_table: ChatTable) -> None:
    # GIVEN a session with a complete turn, a failed turn, and a turn generating with partial text
    session_id = finished_session(service, chat_table, ["Hi", " there"])
    meta_of(chat(service, "two", session_id=session_id))
    write_turn(chat_table, session_id, 2, ["par"], error=ErrorInfo("throttled", "slow down", True))
    meta_of(chat(service, "three", session_id=session_id))
    chat_table.put_records(turn_records(session_id, 3, ["so", " far"])[:3])
    # WHEN the client reads the history
    response = service.handle(request("GET", f"/sessions/{session_id}"))
    # THEN every turn with its status, texts, stop reason and usage
    assert response.status_code == 200
    assert json_body(response) == {
        "session_id": session_id,
        "turns": [
            {
                "turn": 1,
                "status": TurnStatus.COMPLETE,
                "user": "hello",
                "assistant": "Hi there",
                "stop_reason": StopReason.END_TURN,
                "usage": {"input_tokens": 1, "output_tokens": 2},
            },
            {
                "turn": 2,
                "status": TurnStatus.ERROR,
                "user": "two",
                "assistant": "par",
                "stop_reason": None,
                "usage": None,
                "error": {"code": "throttled", "message": "slow down", "retryable": True},
            },
            {
                "turn": 3,
                "status": TurnStatus.IN_PROGRESS,
                "user": "three",
                "assistant": "so far",
                "stop_reason": None,
                "usage": None,
            },
        ],
    }


def test_history_keeps_reasoning_apart_from_the_reply(service: RelayService, chat_table: ChatTable) -> None:
    # GIVEN a finished turn that reasoned, and a generating one that is reasoning now
    session_id = finished_session(service, chat_table, ["Hi"])
    write_turn(chat_table, session_id, 1, ["Hi"], reasoning=["Hmm", " yes"])
    meta_of(chat(service, "two", session_id=session_id))
    chat_table.put_records(turn_records(session_id, 2, ["So"], reasoning=["Well"])[:3])
    # WHEN the client reads the history
    turns = json_body(service.handle(request("GET", f"/sessions/{session_id}")))["turns"]
    # THEN each turn's reply is the answer alone, its reasoning beside it
    assert [(t["assistant"], t["reasoning"]) for t in turns] == [("Hi", "Hmm yes"), ("So", "Well")]


def test_history_of_an_unknown_session_is_404(service: RelayService) -> None:
    # WHEN the session does not exist THEN 404 session_not_found
    assert_error(service.handle(request("GET", "/sessions/nope")), 404, "session_not_found")
    # AND a session id with a trailing newline is no session id (a "$" anchor took it)
    assert SESSION_ID_PATTERN.match("a" * 32) and not SESSION_ID_PATTERN.match("a" * 32 + "\n")


def test_path_parameters_are_percent_decoded_then_validated_as_strictly(
    service: RelayService, chat_table: ChatTable
) -> None:
    # GIVEN a finished turn
    session_id = finished_session(service, chat_table, ["Hi"])

    def status(path: str) -> tuple[int, str | None]:
        response = service.handle(request("GET", path))
        body = json_body(response) if response.headers["Content-Type"] == "application/json" else {}
        return response.status_code, body.get("error", {}).get("code")

    # WHEN a session id or turn is percent-encoded THEN it names the same one
    assert status(f"/sessions/{session_id[:4]}%{ord(session_id[4]):02x}{session_id[5:]}") == (200, None)
    assert status(f"/sessions/{session_id}/turns/%31/events")[0] == 200
    # AND what decodes to no valid id is refused as before, a slash or a stray % included
    assert status(f"/sessions/{session_id}%0A") == (404, "session_not_found")
    assert status(f"/sessions/{session_id}/turns/%201/events") == (404, "turn_not_found")
    assert status(f"/sessions/{session_id}%2Fturns%2F1%2Fevents") == (404, "not_found")
    assert status(f"/sessions/{session_id}%") == (404, "not_found")


@pytest.mark.parametrize("path", ["/sessions/{sid}", "/sessions/nope", "/v1/responses/resp_{sid}_1", "/v1/models"])
def test_no_json_answer_may_be_cached_or_sniffed(service: RelayService, chat_table: ChatTable, path: str) -> None:
    # GIVEN a session WHEN a client reads its history, an unknown one, a /v1 response or the model list
    session_id = finished_session(service, chat_table, ["Hi"])
    response = service.handle(request("GET", path.format(sid=session_id)))
    # THEN, found or not, the answer tells every cache not to keep it and browsers not to sniff its type
    assert response.headers["Cache-Control"] == "no-store"
    assert response.headers["X-Content-Type-Options"] == "nosniff"


# ---------------------------------------------------------------------------------- identity


def test_another_iam_caller_gets_404_for_every_session_endpoint(service: RelayService, chat_table: ChatTable) -> None:
    # GIVEN Alice's session with a finished turn
    session_id = finished_session(service, chat_table, ["a"])
    # WHEN Bob uses its id anywhere
    answers = [
        chat(service, "mine now", caller=BOB, session_id=session_id),
        service.handle(request("GET", f"/sessions/{session_id}", caller=BOB)),
        service.handle(request("GET", f"/sessions/{session_id}/turns/1/events", caller=BOB)),
        service.handle(request("POST", f"/sessions/{session_id}/turns/1/cancel", caller=BOB)),
    ]
    # THEN it does not exist for him
    for response in answers:
        assert_error(response, 404, "session_not_found")


def test_an_iam_caller_without_user_arn_is_identified_by_account_and_caller_id(service: RelayService) -> None:
    # GIVEN a caller identity without userArn
    carol = {"accountId": "210987654321", "callerId": "AROACAROL:session"}
    session_id = meta_of(chat(service, "hi", caller=carol))["session_id"]
    # WHEN the same caller reads the history, and another caller of that account does
    same = service.handle(request("GET", f"/sessions/{session_id}", caller=carol))
    other = service.handle(request("GET", f"/sessions/{session_id}", caller={**carol, "callerId": "AROAOTHER:x"}))
    # THEN the first is the owner and the second is not
    assert same.status_code == 200
    assert_error(other, 404, "session_not_found")


def test_each_cognito_identity_owns_its_sessions_though_all_sign_as_one_role_session(service: RelayService) -> None:
    # GIVEN two identities of a Cognito identity pool: Lambda sees the pool's role session for both
    role_session = "arn:aws:sts::123456789012:assumed-role/ChatUsers/CognitoIdentityCredentials"
    pool = {"amr": ["authenticated"], "identityPoolId": "us-east-1:pool"}
    dana = {"accountId": "123456789012", "callerId": "AROACHAT:CognitoIdentityCredentials", "userArn": role_session}
    erin = {**dana, "cognitoIdentity": {**pool, "identityId": "us-east-1:erin"}}
    dana["cognitoIdentity"] = {**pool, "identityId": "us-east-1:dana"}  # type: ignore[assignment]
    session_id = meta_of(chat(service, "hi", caller=dana))["session_id"]
    # WHEN each reads Dana's session THEN only Dana's identity owns it
    assert service.handle(request("GET", f"/sessions/{session_id}", caller=dana)).status_code == 200
    assert_error(service.handle(request("GET", f"/sessions/{session_id}", caller=erin)), 404, "session_not_found")


def test_a_request_without_iam_identity_under_iam_auth_is_403(service: RelayService) -> None:
    # WHEN the event carries no authorizer although the URL uses AWS_IAM THEN 403 forbidden
    assert_error(chat(service, "hi", caller=None), 403, "forbidden")


def test_with_auth_none_the_session_id_is_the_capability(
    chat_table: ChatTable, proxy: RecordingLambda, clock: FakeClock, table_name: str
) -> None:
    # GIVEN a relay whose URL has no auth
    service = RelayService(
        chat_table,
        proxy,
        relay_config(table_name, AUTH_TYPE="NONE"),
        clock=clock.as_clock(),
        settings=FAST,  # type: ignore[arg-type]
    )
    # WHEN one anonymous client starts a chat and another uses its session id
    session_id = meta_of(chat(service, "hi", caller=None))["session_id"]
    response = service.handle(request("GET", f"/sessions/{session_id}", caller=BOB))
    # THEN the id alone gives access
    assert response.status_code == 200 and json_body(response)["turns"][0]["user"] == "hi"


# ------------------------------------------------------------------------ never a 5xx for input


def test_dynamodb_throttling_before_the_stream_is_503_with_retry_after(
    service: RelayService, chat_table: ChatTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN DynamoDB throttles
    def throttled(owner: str, message: str, **options: object) -> str:
        raise Throttled("DynamoDB ThrottlingException")

    monkeypatch.setattr(chat_table.turns, "start_first", throttled)
    # WHEN a client starts a chat THEN 503 unavailable with Retry-After, not a traceback
    response = chat(service, "hi")
    assert_error(response, 503, "unavailable")
    assert response.headers["Retry-After"] == "1"


def test_an_unexpected_failure_is_a_json_500_without_a_traceback(
    service: RelayService, chat_table: ChatTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a table call that fails in an unforeseen way
    def broken(owner: str, message: str, **options: object) -> str:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(chat_table.turns, "start_first", broken)
    # WHEN a client starts a chat THEN a JSON 500 that does not leak the exception
    message = assert_error(chat(service, "hi"), 500, "internal_error")
    assert "secret" not in message


@pytest.mark.parametrize(
    "raw",
    [
        None,
        [],
        "GET /health",
        {},
        {"requestContext": 5},
        {"requestContext": {"http": "POST"}, "rawPath": ["/chat"]},
        {"rawPath": "/chat", "requestContext": {"http": {"method": "POST"}}, "body": 42},
        {"rawPath": "/chat", "requestContext": {"http": {"method": "POST"}}, "body": "e30=", "isBase64Encoded": "yes"},
        {"rawPath": "/chat", "requestContext": {"http": {"method": "POST"}}, "body": "%%%", "isBase64Encoded": True},
        {"rawPath": "/sessions/x/turns/1/events", "requestContext": {"http": {"method": "GET"}}, "headers": [1]},
    ],
)
def test_malformed_events_get_a_4xx_answer(service: RelayService, raw: object) -> None:
    # WHEN the event itself is malformed THEN the answer is still a JSON client error
    response = service.handle(Request.from_event(raw))
    assert 400 <= response.status_code < 500
    assert "error" in json_body(response)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    fields=st.dictionaries(
        st.sampled_from(["message", "session_id", "max_tokens", "temperature", "other"]), _json, max_size=4
    )
)
def test_no_chat_body_produces_a_server_error(service: RelayService, fields: dict[str, Any]) -> None:
    # WHEN any JSON object is posted THEN the answer is a stream or a client error, never a 5xx
    response = service.handle(request("POST", "/chat", body=json.dumps(fields)))
    assert response.status_code in (200, 400, 404)


def test_a_new_turns_first_read_waits_the_shortest_poll_interval_and_a_resumed_one_reads_at_once(
    service: RelayService, chat_table: ChatTable, clock: FakeClock
) -> None:
    queried_at = calls_at(chat_table, "query_records", clock)
    # GIVEN a chat the relay has just started (it has only just invoked the proxy: nothing can be there yet)
    response = chat(service, "hello")
    session_id = meta_of(response)["session_id"]
    started = clock.t
    clock.at(started + 0.3, lambda: write_turn(chat_table, session_id, 1, ["Hi"]))
    # WHEN its stream is read
    assert rest_of(response, clock).text == "Hi"
    # THEN the first read of the table comes after the shortest poll interval, not at once
    assert queried_at[0] - started == pytest.approx(FAST.poll_min_s)
    # AND a client resuming the turn is answered from a read made at once
    queried_at.clear()
    resumed_at = clock.t
    resumed = service.handle(request("GET", f"/sessions/{session_id}/turns/1/events", caller=ALICE))
    assert rest_of(resumed, clock).text == "Hi"
    assert queried_at[0] == resumed_at


def test_the_invokes_answer_is_read_to_its_end_so_its_connection_is_reused(
    service: RelayService, proxy: RecordingLambda
) -> None:
    # WHEN a client starts a chat
    meta_of(chat(service, "hello"))
    # THEN the relay read the invoke's (empty) answer: botocore reuses a connection only once its answer was read
    assert [answer.read_to_end for answer in proxy.answers] == [True]


def test_an_answer_that_cannot_be_read_after_the_202_does_not_fail_the_turn(
    service: RelayService, proxy: RecordingLambda, chat_table: ChatTable
) -> None:
    # GIVEN Lambda accepted the invoke, but reading its (empty) answer fails
    proxy.read_failure = ResponseStreamingError(error="connection reset")
    # WHEN a client starts a chat
    session_id = meta_of(chat(service, "hello"))["session_id"]
    # THEN the turn goes on: the proxy is generating it
    turn = chat_table.get_turn(session_id, 1)
    assert turn is not None and turn.status is TurnStatus.IN_PROGRESS
