"""The /v1 endpoints against moto's DynamoDB and a recording Lambda client (no proxy runs: tests write the turns)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest
from botocore.exceptions import EndpointConnectionError
from openai import omit
from openai._models import construct_type_unchecked
from openai.lib.streaming.responses import ResponseStreamState
from openai.types.responses import ResponseStreamEvent

from chatstream.errors import Throttled
from chatstream.records import ErrorInfo, assistant_text
from chatstream.relay.http import Request
from chatstream.relay.service import RelayService
from chatstream.status import StopReason, TurnStatus
from chatstream.turn_options import HistoryMessage
from tests.builders import turn_records
from tests.support import load_event
from tests.unit.relay.relay_support import FAST, RELAY_POLLING, FakeClock, relay_config, write_turn

if TYPE_CHECKING:
    from chatstream.records import TokenRecord
    from chatstream.relay.http import Response
    from chatstream.table import ChatTable

ALICE = {"accountId": "123456789012", "callerId": "AIDAALICE", "userArn": "arn:aws:iam::123456789012:user/alice"}
BOB = {"accountId": "123456789012", "callerId": "AIDABOB", "userArn": "arn:aws:iam::123456789012:user/bob"}
MODEL = "us.amazon.nova-lite-v1:0"
USER_NEXT = {"role": "user", "content": "next"}
BODY_HI = {"model": MODEL, "input": "hi"}


class RecordingLambda:
    def __init__(self) -> None:
        self.failure: Exception | None = None
        self.invocations = 0

    def invoke(self, **kwargs: Any) -> dict[str, Any]:
        self.invocations += 1
        if self.failure is not None:
            raise self.failure
        return {"StatusCode": 202}


@pytest.fixture
def proxy() -> RecordingLambda:
    return RecordingLambda()


@pytest.fixture
def service(chat_table: ChatTable, proxy: RecordingLambda, table_name: str) -> RelayService:
    config = relay_config(table_name, MODEL_ID=MODEL)
    return RelayService(chat_table, proxy, config, clock=FakeClock().as_clock(), settings=FAST)  # type: ignore[arg-type]


def call(
    service: RelayService, method: str, path: str, body: Any = None, caller: dict[str, str] | None = ALICE
) -> Response:
    raw = copy.deepcopy(load_event("relay-health.json"))
    path, _, query = path.partition("?")
    raw["rawPath"] = path
    raw["requestContext"]["http"].update(method=method, path=path)
    if query:
        raw["queryStringParameters"] = dict(pair.split("=") for pair in query.split("&"))
    if caller is None:
        raw["requestContext"].pop("authorizer", None)
    else:
        raw["requestContext"]["authorizer"] = {"iam": dict(caller)}
    if body is not None:
        raw["body"], raw["isBase64Encoded"] = json.dumps(body), False
    return service.handle(Request.from_event(raw))


def body_of(response: Response) -> Any:
    return json.loads("".join(response.body))


def openai_error(response: Response, status: int) -> dict[str, Any]:
    assert response.status_code == status
    error: dict[str, Any] = body_of(response)["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    return error


def background(service: RelayService, caller: dict[str, str] = ALICE) -> dict[str, Any]:
    response = call(
        service, "POST", "/v1/responses", {"model": "chatstream", "input": "hi", "background": True}, caller
    )
    assert response.status_code == 200
    created: dict[str, Any] = body_of(response)
    assert created["status"] == "queued" and created["model"] == MODEL
    assert response.headers["X-Chatstream-Session-Id"] in created["id"]
    return created


def background_turn(
    service: RelayService, words: list[str], **records: Any
) -> tuple[dict[str, Any], list[TokenRecord]]:
    """A background response (turn 1 of its session), and the token records its reply of ``words`` will have (not
    stored: each test stores what it needs)."""
    created = background(service)
    session_id = created["id"].split("_")[1]
    return created, turn_records(session_id, 1, words, **records)


def test_a_percent_encoded_model_id_is_the_model(service: RelayService) -> None:
    # WHEN the model is read by its id percent-encoded, as a URL library may write it (a Function URL passes it so)
    response = call(service, "GET", "/v1/models/us.amazon.nova-lite-v1%3A0")
    # THEN it is the model, as by the id itself
    assert response.status_code == 200
    assert json.loads("".join(response.body))["id"] == MODEL


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/responses", {"model": "chatstream", "input": "hi", "stream": True}),
        ("/v1/responses", {"model": "chatstream", "input": "hi", "background": True}),
        ("/v1/chat/completions", {"model": "chatstream", "messages": [{"role": "user", "content": "hi"}]}),
        (
            "/v1/chat/completions",
            {"model": "chatstream", "messages": [{"role": "user", "content": "hi"}], "stream": True},
        ),
    ],
)
def test_a_malformed_pace_is_refused_before_a_turn_starts(
    service: RelayService, proxy: RecordingLambda, path: str, body: dict[str, Any]
) -> None:
    # WHEN a request that would start a turn carries a pace that is neither 0 nor 1, streamed or not
    response = call(service, "POST", f"{path}?pace=-1.5", body)

    # THEN it is a 400 in OpenAI's shape that names the value, and no generation was started
    assert "pace" in openai_error(response, 400)["message"]
    assert proxy.invocations == 0


def test_a_response_belongs_to_the_principal_that_signed_its_creation(service: RelayService) -> None:
    created = background(service)
    # WHEN another principal reads, cancels or continues it THEN it does not exist for them
    assert openai_error(call(service, "GET", f"/v1/responses/{created['id']}", caller=BOB), 404)["code"] == "not_found"
    assert openai_error(call(service, "POST", f"/v1/responses/{created['id']}/cancel", caller=BOB), 404)
    follow_up = {"model": "chatstream", "input": "hi", "previous_response_id": created["id"]}
    error = openai_error(call(service, "POST", "/v1/responses", follow_up, caller=BOB), 404)
    assert error["param"] == "previous_response_id"
    # AND its owner continuing it while it generates is a conflict, and a request without a caller is forbidden
    assert openai_error(call(service, "POST", "/v1/responses", follow_up), 409)["code"] == "turn_in_progress"
    assert (
        openai_error(call(service, "GET", f"/v1/responses/{created['id']}", caller=None), 403)["type"]
        == "permission_error"
    )
    # AND the owner reads it, in progress
    assert body_of(call(service, "GET", f"/v1/responses/{created['id']}"))["status"] == "in_progress"


def test_a_conflict_a_retry_cannot_clear_tells_the_sdk_not_to_retry_and_speaks_of_responses(
    chat_table: ChatTable, proxy: RecordingLambda, table_name: str
) -> None:
    # GIVEN a relay whose conversations may take 2 responses, and a conversation of 2, the second still generating
    config = relay_config(table_name, MODEL_ID=MODEL, MAX_TURNS_PER_SESSION="2")
    service = RelayService(chat_table, proxy, config, clock=FakeClock().as_clock(), settings=FAST)  # type: ignore[arg-type]
    first = background(service)
    session_id = first["id"].split("_")[1]
    write_turn(chat_table, session_id, 1, ["Hello"])
    second = body_of(
        call(service, "POST", "/v1/responses", {**BODY_HI, "background": True, "previous_response_id": first["id"]})
    )
    follow_up = {**BODY_HI, "previous_response_id": second["id"]}

    # WHEN it is continued while its response generates
    busy = call(service, "POST", "/v1/responses", follow_up)
    # THEN 409 turn_in_progress in the Responses API's words, which the SDK may retry: the response may end meanwhile
    error = openai_error(busy, 409)
    assert (error["code"], error["param"]) == ("turn_in_progress", "previous_response_id")
    assert second["id"] in error["message"] and "session" not in error["message"]
    assert "x-should-retry" not in busy.headers

    # WHEN it ends, and is continued past the limit
    write_turn(chat_table, session_id, 2, ["Hi"])
    full = call(service, "POST", "/v1/responses", follow_up)
    # THEN 409 turn_limit, saying to start a new conversation, and the SDK is told not to retry: it never clears
    error = openai_error(full, 409)
    assert (error["code"], error["param"]) == ("turn_limit", "previous_response_id")
    assert "start a new conversation" in error["message"] and "session" not in error["message"]
    assert full.headers["x-should-retry"] == "false"

    # AND cancelling a response that ended is 409 response_finished, not retried either: it stays ended
    finished = call(service, "POST", f"/v1/responses/{second['id']}/cancel")
    assert openai_error(finished, 409)["code"] == "response_finished"
    assert finished.headers["x-should-retry"] == "false"
    assert proxy.invocations == 2


def background_on_a_clock(
    chat_table: ChatTable, proxy: RecordingLambda, table_name: str
) -> tuple[FakeClock, RelayService, dict[str, Any], str]:
    """A service on a fake clock, and a background response it started: the clock, the service, the response
    object and its session id."""
    clock = FakeClock()
    service = RelayService(chat_table, proxy, relay_config(table_name, MODEL_ID=MODEL), clock=clock.as_clock())  # type: ignore[arg-type]
    created = background(service)
    return clock, service, created, created["id"].split("_")[1]


def test_cancel_of_a_background_response_no_generation_claimed_answers_cancelled_at_once(
    chat_table: ChatTable, proxy: RecordingLambda, table_name: str
) -> None:
    # GIVEN a background response whose proxy invocation waits in Lambda's queue: no generation has claimed its turn
    clock, service, created, session_id = background_on_a_clock(chat_table, proxy, table_name)
    # WHEN the client cancels it
    answer = call(service, "POST", f"/v1/responses/{created['id']}/cancel")
    # THEN the answer is the response cancelled, at once: nothing was waited for
    assert answer.status_code == 200
    cancelled = body_of(answer)
    assert (cancelled["id"], cancelled["status"]) == (created["id"], "cancelled")
    assert clock.sleeps == []
    # AND it stays so: the turn ended, a proxy invocation that runs later finds it ended (and generates nothing)
    assert body_of(call(service, "GET", f"/v1/responses/{created['id']}"))["status"] == "cancelled"
    turn = chat_table.get_turn(session_id, 1)
    assert turn is not None and turn.generator == "relay" and not turn.cancel_requested
    # AND cancelling it again answers the same object
    assert body_of(call(service, "POST", f"/v1/responses/{created['id']}/cancel"))["status"] == "cancelled"


def test_streaming_a_queued_background_response_past_the_start_timeout_leaves_it_queued(
    chat_table: ChatTable, proxy: RecordingLambda, table_name: str
) -> None:
    # GIVEN a background response whose proxy invocation waits in Lambda's queue (no generation claims it)
    clock, service, created, session_id = background_on_a_clock(chat_table, proxy, table_name)
    # WHEN a client streams it (client.responses.retrieve(id, stream=True)) for longer than the start timeout
    events = stream_events(call(service, "GET", f"/v1/responses/{created['id']}?stream=true"))
    # THEN the stream ends as one that had nothing new to send does, past the start timeout, and the response is
    # still queued for its generation: only its creator's own stream ends an unstarted turn
    assert clock.t >= 30.0 and not any(event["type"] == "response.failed" for event in events), events
    turn = chat_table.get_turn(session_id, 1)
    assert turn is not None and turn.status is TurnStatus.IN_PROGRESS and turn.generator is None
    assert body_of(call(service, "GET", f"/v1/responses/{created['id']}"))["status"] in ("queued", "in_progress")


def test_a_background_response_created_streaming_is_not_ended_by_its_own_streams_start_timeout(
    chat_table: ChatTable, proxy: RecordingLambda, table_name: str
) -> None:
    # GIVEN a service on a fake clock, and a proxy whose invocations wait in Lambda's queue (nothing claims a turn)
    clock = FakeClock()
    service = RelayService(chat_table, proxy, relay_config(table_name, MODEL_ID=MODEL), clock=clock.as_clock())  # type: ignore[arg-type]
    # WHEN a background response is created streaming (openai-python's background_streaming.py), and its stream runs
    # past the start timeout
    body = {"model": MODEL, "input": "hi", "background": True, "stream": True}
    events = stream_events(call(service, "POST", "/v1/responses", body))
    # THEN it is not failed: it still waits for its generation
    assert clock.t >= 30.0 and not any(event["type"] == "response.failed" for event in events), events
    session_id = events[0]["response"]["id"].split("_")[1]
    turn = chat_table.get_turn(session_id, 1)
    assert turn is not None and turn.status is TurnStatus.IN_PROGRESS and turn.generator is None


def test_cancel_of_a_background_response_a_generation_claimed_sets_the_flag_and_waits(
    chat_table: ChatTable, proxy: RecordingLambda, table_name: str
) -> None:
    # GIVEN a background response a proxy invocation claimed, which ends its turn cancelled 2 s after the flag is set
    clock, service, created, session_id = background_on_a_clock(chat_table, proxy, table_name)
    chat_table.turns.claim(session_id, 1, "proxy-request")
    clock.at(2.0, lambda: write_turn(chat_table, session_id, 1, ["Hel", "lo"], stop_reason=StopReason.CANCELLED))
    # WHEN the client cancels it
    answer = body_of(call(service, "POST", f"/v1/responses/{created['id']}/cancel"))
    # THEN the generation's flag was set, and the answer came once it ended: cancelled, with what it had generated
    assert chat_table.cancel_requested(session_id, 1)
    assert answer["status"] == "cancelled" and 2.0 <= clock.t < 3.0
    assert answer["output"][0]["content"][0]["text"] == "Hello"


@pytest.mark.parametrize(
    ("method", "path", "named"),
    [
        ("POST", "/v1/responses/input_tokens", "counting a request's input tokens"),
        ("POST", "/v1/responses/compact", "compacting a conversation"),
        ("GET", "/v1/responses/resp_abc_1/input_items", "listing a response's input items"),
        ("DELETE", "/v1/responses/resp_abc_1", "deleting responses is not supported"),
        ("POST", "/v1/embeddings", None),
    ],
)
def test_an_openai_endpoint_chatstream_does_not_serve_is_a_404_that_says_so(
    service: RelayService, proxy: RecordingLambda, method: str, path: str, named: str | None
) -> None:
    # WHEN a client calls an OpenAI endpoint the relay has no route for (the first two paths would read as a
    # response id, which only GET serves)
    error = openai_error(call(service, method, path, {"model": "chatstream", "input": "hi"}), 404)
    # THEN a 404 names it and lists what /v1 serves, and no turn starts
    assert error["code"] == "not_found" and path in error["message"] and "POST /v1/chat/completions" in error["message"]
    assert named is None or named in error["message"]
    assert proxy.invocations == 0


def test_an_openai_error_quotes_at_most_a_few_hundred_characters_of_the_request(service: RelayService) -> None:
    # WHEN a Responses request has a 60,000-character unknown field
    error = openai_error(
        call(service, "POST", "/v1/responses", {"model": "chatstream", "input": "hi", "y" * 60_000: 1}), 400
    )
    # THEN its message and param name it, cut to a few hundred characters
    assert error["code"] == "unknown_parameter" and error["param"].startswith("yyy")
    assert len(error["message"]) <= 500 and len(error["param"]) <= 200


def test_a_finished_response_read_before_its_last_records_are_stored_has_the_whole_reply(
    service: RelayService, chat_table: ChatTable
) -> None:
    # GIVEN a turn whose item the consumer has ended, but whose last token items are not written yet
    created, records = background_turn(service, ["You", " said:", " hi"])
    chat_table.turns.end_from_stream(records[-1], assistant_text(records))
    chat_table.put_records(records[:2])
    # WHEN it is read THEN its text is the whole reply
    read = body_of(call(service, "GET", f"/v1/responses/{created['id']}"))
    assert read["status"] == "completed"
    assert read["output"][0]["content"][0]["text"] == "You said: hi"


def test_a_generation_that_cannot_be_started_is_a_503_for_a_chat_completion(
    service: RelayService, proxy: RecordingLambda
) -> None:
    proxy.failure = EndpointConnectionError(endpoint_url="https://lambda")
    messages = [{"role": "user", "content": "hi"}]
    response = call(service, "POST", "/v1/chat/completions", {"model": MODEL, "messages": messages})
    assert openai_error(response, 503)["code"] == "proxy_unavailable"


def test_a_throttled_table_is_a_503_with_retry_after(
    service: RelayService, chat_table: ChatTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    def throttled(*args: Any, **kwargs: Any) -> str:
        raise Throttled("DynamoDB ThrottlingException")

    monkeypatch.setattr(chat_table.turns, "start_first", throttled)
    response = call(service, "POST", "/v1/responses", {"model": MODEL, "input": "hi"})
    assert openai_error(response, 503)["code"] == "unavailable" and response.headers["Retry-After"] == "1"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/responses", {"model": MODEL, "input": "hi"}),
        ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}),
    ],
)
@pytest.mark.parametrize(
    ("failure", "status"), [(Throttled("DynamoDB ThrottlingException"), 503), (KeyError("x"), 500)]
)
def test_a_failure_after_the_generation_started_tells_the_sdk_not_to_ask_again(
    service: RelayService,
    chat_table: ChatTable,
    proxy: RecordingLambda,
    monkeypatch: pytest.MonkeyPatch,
    path: str,
    body: dict[str, Any],
    failure: Exception,
    status: int,
) -> None:
    # GIVEN a table that fails every read of a turn once the turn is started and its generation invoked
    def failing(*args: Any, **kwargs: Any) -> None:
        raise failure

    monkeypatch.setattr(chat_table, "get_turn", failing)
    # WHEN an SDK asks for an answer
    response = call(service, "POST", path, body)
    # THEN the generation runs (once), and the error names its turn and says not to retry: asking again would start
    # a second generation beside it
    assert proxy.invocations == 1
    error = openai_error(response, status)
    assert response.headers["x-should-retry"] == "false" and "Retry-After" not in response.headers
    session_id = response.headers["X-Chatstream-Session-Id"]
    assert f"follow it at /sessions/{session_id}/turns/1/events" in error["message"]


def test_an_item_reference_is_the_earlier_output_it_names_and_only_its_owners(
    service: RelayService, chat_table: ChatTable
) -> None:
    # GIVEN Alice's finished response that reasoned, then replied
    created = background(service)
    session_id = created["id"].split("_", 1)[1].rsplit("_", 1)[0]
    write_turn(chat_table, session_id, 1, ["Hello", " there"], reasoning=["Hmm."])
    reply, reasoning = f"msg_{session_id}_1_1", f"rs_{session_id}_1_0"

    def ask(references: list[str], caller: dict[str, str] = ALICE) -> Response:
        items = [{"type": "item_reference", "id": reference} for reference in references]
        body = {"model": MODEL, "background": True, "input": [{"role": "user", "content": "hi"}, *items, USER_NEXT]}
        return call(service, "POST", "/v1/responses", body, caller)

    # WHEN she sends the conversation on with references to its output, as the Vercel AI SDK does
    response = ask([reasoning, reply])

    # THEN the reply is the new turn's history, and the reasoning is left out
    new_session = response.headers["X-Chatstream-Session-Id"]
    turn = chat_table.get_turn(new_session, 1)
    assert turn is not None and turn.user == "next"
    assert turn.options.history == (HistoryMessage("user", "hi"), HistoryMessage("assistant", "Hello there"))
    # AND Bob cannot reference her items, nor anyone an item that cannot exist: 404 naming the input
    for references, caller in (([reply], BOB), ([f"msg_{session_id}_9_1"], ALICE), (["msg_nope"], ALICE)):
        error = openai_error(ask(references, caller), 404)
        assert (error["code"], error["param"]) == ("not_found", "input[1].id")
    # AND a small body cannot grow a turn past what a body may hold, nor read without end: too many references,
    # or more text than a body once they are resolved, is a 400 naming the input, and starts no turn
    long_session = background(service)["id"].split("_", 1)[1].rsplit("_", 1)[0]
    write_turn(chat_table, long_session, 1, ["x" * 16_000])
    for references, says in (([reply] * 101, "the limit is 100"), ([f"msg_{long_session}_1_0"] * 5, "characters")):
        error = openai_error(ask(references), 400)
        assert error["param"] == "input" and says in error["message"]
    # AND the instructions count with the messages, as the turn stores them too (48,004 characters of messages fit)
    items = [{"role": "user", "content": "hi"}, *[{"type": "item_reference", "id": f"msg_{long_session}_1_0"}] * 3]
    body = {"model": MODEL, "background": True, "instructions": "x" * 32_000, "input": [*items, USER_NEXT]}
    error = openai_error(call(service, "POST", "/v1/responses", body), 400)
    assert error["param"] == "input" and "characters" in error["message"]


def test_the_stream_starts_with_created_at_once(service: RelayService) -> None:
    response = call(service, "POST", "/v1/responses", {"model": MODEL, "input": "hi", "stream": True})
    assert response.headers["Content-Type"].startswith("text/event-stream")
    first = next(iter(response.body))
    assert first.startswith("event: response.created\n")
    assert json.loads(first.split("data: ", 1)[1])["sequence_number"] == 0


def stream_events(response: Response) -> list[dict[str, Any]]:
    assert response.status_code == 200
    return [json.loads(chunk.split("data: ", 1)[1]) for chunk in response.body if "data: " in chunk]


def test_deltas_are_word_pieces_and_a_resume_after_any_number_is_exactly_the_rest(
    service: RelayService, chat_table: ChatTable
) -> None:
    # GIVEN a finished response with reasoning and a reply, records of several words each
    created, records = background_turn(
        service, ["You said:", " hi and", " more  words "], reasoning=["Let me think.", " Done"]
    )
    chat_table.turns.end_from_stream(records[-1], assistant_text(records))
    chat_table.put_records(records)
    url = f"/v1/responses/{created['id']}?stream=true"
    # WHEN its events are streamed whole (paced)
    whole = stream_events(call(service, "GET", url))
    # THEN every delta is one word with the spaces before it, numbered in order
    assert [event["sequence_number"] for event in whole] == list(range(len(whole)))
    deltas = [(event["type"], event["delta"]) for event in whole if event["type"].endswith(".delta")]
    reasoning, text = "response.reasoning_text.delta", "response.output_text.delta"
    assert deltas == [
        (reasoning, "Let"),
        (reasoning, " me"),
        (reasoning, " think."),
        (reasoning, " Done"),
        (text, "You"),
        (text, " said:"),
        (text, " hi"),
        (text, " and"),
        (text, " more"),
        (text, "  words "),
    ]
    assert whole[-1]["type"] == "response.completed"
    # AND the same stream unpaced is numbered the same
    assert stream_events(call(service, "GET", url + "&pace=0")) == whole
    # AND a resume after any number, paced or not, is exactly the rest (inside a record's pieces too)
    for after in range(len(whole) + 1):
        for pace in ("1", "0"):
            resumed = stream_events(call(service, "GET", f"{url}&starting_after={after}&pace={pace}"))
            assert resumed == whole[after + 1 :], (after, pace)


def test_a_resume_while_the_turn_goes_on_is_exact(service: RelayService, chat_table: ChatTable) -> None:
    # GIVEN a response whose first records are stored, and a client that had part of the first record
    created, records = background_turn(service, ["One two three", " four five"])
    chat_table.put_records(records[:2])
    first = call(service, "GET", f"/v1/responses/{created['id']}?stream=true")
    had = []
    for chunk in first.body:
        had.append(json.loads(chunk.split("data: ", 1)[1]))
        if had[-1].get("delta") == " two":
            break
    # WHEN the rest of the turn is stored and the client resumes after its last event
    chat_table.turns.end_from_stream(records[-1], assistant_text(records))
    chat_table.put_records(records[2:])
    after = had[-1]["sequence_number"]
    rest = stream_events(call(service, "GET", f"/v1/responses/{created['id']}?stream=true&starting_after={after}"))
    # THEN it gets the rest of the text once, numbered on from there
    assert [event["sequence_number"] for event in rest] == list(range(after + 1, after + 1 + len(rest)))
    text = "".join(event["delta"] for event in had + rest if event["type"] == "response.output_text.delta")
    assert text == "One two three four five"
    assert rest[-1]["response"]["output"][0]["content"][0]["text"] == text


def test_a_resume_after_any_number_the_stream_sent_its_error_event_included_is_exactly_the_rest(
    chat_table: ChatTable, proxy: RecordingLambda, table_name: str
) -> None:
    config = relay_config(table_name, MODEL_ID=MODEL)
    service = RelayService(chat_table, proxy, config, clock=FakeClock().as_clock(), settings=RELAY_POLLING)  # type: ignore[arg-type]
    # GIVEN a response whose first records are stored, then whose model falls silent: its stream ends with an error
    # event (the relay's idle reconnect), after the events it could send
    created, records = background_turn(service, ["One two", " three", " four five"])
    chat_table.put_records(records[:3])
    url = f"/v1/responses/{created['id']}?stream=true"
    interrupted = stream_events(call(service, "GET", url))
    error = interrupted[-1]
    assert error["type"] == "error" and error["code"] == "stream_interrupted"
    # AND the SDK's own stream helper takes the interrupted stream, its error included
    state: ResponseStreamState[object] = ResponseStreamState(input_tools=omit, text_format=omit)
    for event in interrupted:
        state.handle_event(construct_type_unchecked(type_=ResponseStreamEvent, value=event))

    # WHEN the turn ends, and the client resumes after any number it received, the error's (its last) included
    chat_table.turns.end_from_stream(records[-1], assistant_text(records))
    chat_table.put_records(records[3:])
    whole = stream_events(call(service, "GET", url))

    # THEN what the client had, then each resume, is exactly the whole stream, after the error's number too: it is
    # the last event's before it, so resuming after it skips no event (and its message says to resume there)
    for index, received in enumerate(interrupted):
        had = [event for event in interrupted[: index + 1] if event["type"] != "error"]
        resumed = stream_events(call(service, "GET", f"{url}&starting_after={received['sequence_number']}"))
        assert had + resumed == whole, received["type"]
    assert error["sequence_number"] == interrupted[-2]["sequence_number"]
    assert f"starting_after={error['sequence_number']}" in error["message"]
    text = [event["delta"] for event in whole if event["type"] == "response.output_text.delta"]
    assert "".join(text) == "One two three four five"


def streamed_completion(
    service: RelayService, chat_table: ChatTable, words: list[str], error: ErrorInfo | None = None
) -> list[str]:
    """The ``data:`` of a streamed chat completion whose turn is stored as ``words`` (then ``error``, if given)."""
    response = call(
        service,
        "POST",
        "/v1/chat/completions",
        {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "hi"}]},
    )
    records = turn_records(response.headers["X-Chatstream-Session-Id"], 1, words, error=error)
    chat_table.turns.end_from_stream(records[-1], assistant_text(records))
    chat_table.put_records(records)
    return [chunk.removeprefix("data: ").strip() for chunk in response.body if chunk.startswith("data: ")]


def test_a_chat_completion_stream_sends_a_chunk_per_word(service: RelayService, chat_table: ChatTable) -> None:
    # GIVEN a streamed chat completion whose turn is stored in records of several words
    # WHEN it is read THEN each word is its own chunk
    chunks = streamed_completion(service, chat_table, ["You said:", " hi there"])
    contents = [json.loads(data)["choices"][0]["delta"].get("content") for data in chunks[1:-2]]
    assert contents == ["You", " said:", " hi", " there"] and chunks[-1] == "[DONE]"


CompletionIn = Callable[[str, FakeClock], "Response"]


@pytest.fixture
def completion_in(
    chat_table: ChatTable, proxy: RecordingLambda, table_name: str, monkeypatch: pytest.MonkeyPatch
) -> CompletionIn:
    """Ask for a chat completion, not streamed, whose turn is in session ``session_id``, on a relay whose time is
    ``clock`` (each test its own session: the table is shared)."""

    def ask(session_id: str, clock: FakeClock) -> Response:
        monkeypatch.setattr("chatstream.table.sessions.new_session_id", lambda: session_id)
        config = relay_config(table_name, MODEL_ID=MODEL)
        service = RelayService(chat_table, proxy, config, clock=clock.as_clock(), settings=RELAY_POLLING)  # type: ignore[arg-type]
        return call(
            service, "POST", "/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
        )

    return ask


def test_a_chat_completion_waits_out_a_model_silent_longer_than_the_idle_reconnect(
    chat_table: ChatTable, completion_in: CompletionIn
) -> None:
    # GIVEN a turn that starts at once, then stays silent for 90 s (a stream would get its idle reconnect at 60 s)
    session_id = "5e1f2a3b4c5d6e7f8091a2b3c4d5e6f7"
    records = turn_records(session_id, 1, ["You said:", " hi"])
    clock = FakeClock()
    clock.at(1.0, lambda: chat_table.put_records(records[:1]))
    clock.at(
        90.0,
        lambda: (
            chat_table.turns.end_from_stream(records[-1], assistant_text(records)),
            chat_table.put_records(records[1:]),
        ),
    )

    # WHEN a chat completion that is not streamed asks for it
    response = completion_in(session_id, clock)

    # THEN it answers the whole reply once the turn ends: nobody could have followed a reconnect
    assert response.status_code == 200, body_of(response)
    assert body_of(response)["choices"][0]["message"]["content"] == "You said: hi"
    assert clock.t >= 90.0


def test_a_chat_completion_whose_generation_never_began_is_a_503_and_its_turn_is_ended(
    chat_table: ChatTable, completion_in: CompletionIn
) -> None:
    # GIVEN a turn whose proxy invocation waits in Lambda's queue past the start timeout (nothing claims it)
    session_id = "8e1f2a3b4c5d6e7f8091a2b3c4d5e6f7"
    clock = FakeClock()
    # WHEN a chat completion that is not streamed asks for it
    response = completion_in(session_id, clock)
    # THEN the answer is a 503 timeout (the SDK may ask again: a new turn), and the turn ended, never to generate
    assert openai_error(response, 503)["code"] == "timeout"
    assert clock.t >= FAST.start_timeout_s
    turn = chat_table.get_turn(session_id, 1)
    assert turn is not None and turn.status is TurnStatus.ERROR and turn.generator == "relay"


def test_a_chat_completion_the_relay_has_no_time_left_for_names_its_turn_and_asks_not_to_be_retried(
    chat_table: ChatTable, proxy: RecordingLambda, completion_in: CompletionIn
) -> None:
    # GIVEN a turn that started, and a relay whose invocation ends in 100 s, before the turn does
    session_id = "6e1f2a3b4c5d6e7f8091a2b3c4d5e6f7"
    records = turn_records(session_id, 1, ["You said:", " hi"])
    clock = FakeClock(deadline_s=100.0)
    clock.at(1.0, lambda: chat_table.put_records(records[:2]))

    # WHEN a chat completion that is not streamed asks for it
    response = completion_in(session_id, clock)

    # THEN 503 still_generating, which says where to follow the turn, names it in the headers, and tells OpenAI's
    # SDKs not to retry (a retry would start a second generation)
    error = openai_error(response, 503)
    assert error["code"] == "still_generating" and f"/sessions/{session_id}/turns/1/events" in error["message"]
    assert response.headers["x-should-retry"] == "false"
    assert (response.headers["X-Chatstream-Session-Id"], response.headers["X-Chatstream-Turn"]) == (session_id, "1")
    assert proxy.invocations == 1


UNSTREAMED = [
    ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}),
    ("/v1/responses", {"model": MODEL, "input": "hi"}),
]


@pytest.mark.parametrize(("path", "body"), UNSTREAMED)
def test_an_answer_not_streamed_comes_before_the_sdks_time_the_request_out(
    chat_table: ChatTable,
    proxy: RecordingLambda,
    table_name: str,
    monkeypatch: pytest.MonkeyPatch,
    path: str,
    body: dict[str, Any],
) -> None:
    # GIVEN a turn that starts, then generates for longer than OpenAI's SDKs wait for an answer (600 s: then they
    # send the request again, twice, each a new generation), on a relay with all of its 900 s ahead
    session_id = f"8e1f2a3b4c5d6e7f8091a2b3c4d5e6{len(path):02x}"
    monkeypatch.setattr("chatstream.table.sessions.new_session_id", lambda: session_id)
    records = turn_records(session_id, 1, ["You said:", " hi"])
    clock = FakeClock(deadline_s=900.0)
    clock.at(1.0, lambda: chat_table.put_records(records[:2]))
    settings = replace(FAST, poll_max_s=5.0)  # fewer idle polls over the long wait: the same answer, sooner
    config = relay_config(table_name, MODEL_ID=MODEL)
    service = RelayService(chat_table, proxy, config, clock=clock.as_clock(), settings=settings)  # type: ignore[arg-type]

    # WHEN an SDK asks for the answer without a stream
    response = call(service, "POST", path, body)

    # THEN it is answered before the SDK's 600 s are up: 503 still_generating, naming the turn (headers, events URL,
    # response id) and telling the SDK not to send it again; only one generation was started
    assert clock.t < 600.0
    error = openai_error(response, 503)
    assert error["code"] == "still_generating" and response.headers["x-should-retry"] == "false"
    assert (response.headers["X-Chatstream-Session-Id"], response.headers["X-Chatstream-Turn"]) == (session_id, "1")
    assert f"/sessions/{session_id}/turns/1/events" in error["message"]
    assert f"GET /v1/responses/resp_{session_id}_1" in error["message"]
    assert proxy.invocations == 1


def test_the_wait_of_an_answer_not_streamed_is_the_services_to_choose(
    chat_table: ChatTable, proxy: RecordingLambda, table_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a relay whose answers not streamed wait 30 s, and a turn that starts and goes on
    session_id = "9e1f2a3b4c5d6e7f8091a2b3c4d5e6f7"
    monkeypatch.setattr("chatstream.table.sessions.new_session_id", lambda: session_id)
    records = turn_records(session_id, 1, ["You said:", " hi"])
    clock = FakeClock()
    clock.at(1.0, lambda: chat_table.put_records(records[:2]))
    config = relay_config(table_name, MODEL_ID=MODEL)
    service = RelayService(
        chat_table,
        proxy,  # type: ignore[arg-type]
        config,
        clock=clock.as_clock(),
        settings=FAST,
        non_streamed_wait_s=30.0,
    )

    # WHEN a response is asked for without a stream
    response = call(service, "POST", "/v1/responses", {"model": MODEL, "input": "hi"})

    # THEN it says still_generating after those 30 s (and a poll), not later
    assert openai_error(response, 503)["code"] == "still_generating"
    assert 30.0 <= clock.t < 31.0


def test_a_chat_completion_whose_turn_failed_names_the_turn(chat_table: ChatTable, completion_in: CompletionIn) -> None:
    # GIVEN a turn the model failed with throttling
    session_id = "7e1f2a3b4c5d6e7f8091a2b3c4d5e6f7"
    error = ErrorInfo("throttled", "slow down", True)
    records = turn_records(session_id, 1, ["You"], error=error)
    clock = FakeClock()
    clock.at(
        1.0,
        lambda: (
            chat_table.turns.end_from_stream(records[-1], assistant_text(records)),
            chat_table.put_records(records),
        ),
    )

    # WHEN a chat completion that is not streamed asks for it
    response = completion_in(session_id, clock)

    # THEN the failure's status and code, with the turn's headers (its history keeps what it produced)
    assert openai_error(response, 429)["code"] == "throttled"
    assert response.headers["X-Chatstream-Session-Id"] == session_id
    assert "x-should-retry" not in response.headers


@pytest.mark.parametrize(
    ("code", "status", "kind", "response_code"),
    [
        ("throttled", 429, "rate_limit_error", "rate_limit_exceeded"),
        ("invalid_request", 400, "invalid_request_error", "invalid_prompt"),
        ("model_unavailable", 503, "server_error", "server_error"),
        ("model_error", 500, "server_error", "server_error"),
    ],
)
def test_a_response_not_streamed_whose_turn_failed_is_the_error_a_chat_completion_is(
    chat_table: ChatTable,
    proxy: RecordingLambda,
    table_name: str,
    monkeypatch: pytest.MonkeyPatch,
    code: str,
    status: int,
    kind: str,
    response_code: str,
) -> None:
    failure = ErrorInfo(code, "it went wrong", code in ("throttled", "model_unavailable"))

    def ask(path: str, body: dict[str, Any], session_id: str) -> Response:
        """``body`` asked at ``path`` without a stream, whose turn (in session ``session_id``) fails after a word."""
        monkeypatch.setattr("chatstream.table.sessions.new_session_id", lambda: session_id)
        records = turn_records(session_id, 1, ["You"], error=failure)
        clock = FakeClock()
        clock.at(
            1.0,
            lambda: (
                chat_table.turns.end_from_stream(records[-1], assistant_text(records)),
                chat_table.put_records(records),
            ),
        )
        config = relay_config(table_name, MODEL_ID=MODEL)
        service = RelayService(chat_table, proxy, config, clock=clock.as_clock(), settings=FAST)  # type: ignore[arg-type]
        return call(service, "POST", path, body)

    # GIVEN a turn that fails with `code`
    # WHEN a response is asked for without a stream or background (and a chat completion, for the same failure)
    suffix = f"{len(code):02x}"
    response_session, chat_session = (
        f"ae1f2a3b4c5d6e7f8091a2b3c4d5e6{suffix}",
        f"be1f2a3b4c5d6e7f8091a2b3c4d5e6{suffix}",
    )
    response = ask("/v1/responses", {"model": MODEL, "input": "hi"}, response_session)
    completion = ask(
        "/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}, chat_session
    )

    # THEN it is the error a chat completion answers: the status the SDK raises for it (and retries a 429, as it does
    # for a chat completion), OpenAI's error object with the type of that status, and the turn's headers
    error = openai_error(response, status)
    assert (
        error
        == openai_error(completion, status)
        == {
            "message": "it went wrong",
            "type": kind,
            "param": None,
            "code": code,
        }
    )
    assert (response.headers["X-Chatstream-Session-Id"], response.headers["X-Chatstream-Turn"]) == (
        response_session,
        "1",
    )
    assert "x-should-retry" not in response.headers
    # AND reading the response (as a background one is read) is still its object, failed, whose error has
    # OpenAI's ResponseError code and the same type
    read = call(
        RelayService(chat_table, proxy, relay_config(table_name, MODEL_ID=MODEL), clock=FakeClock().as_clock()),  # type: ignore[arg-type]
        "GET",
        f"/v1/responses/resp_{response_session}_1",
    )
    assert read.status_code == 200
    assert body_of(read)["status"] == "failed"
    assert body_of(read)["error"] == {"code": response_code, "message": "it went wrong", "type": kind, "param": None}


def test_a_continuation_not_streamed_whose_turn_failed_is_not_retried(
    chat_table: ChatTable, proxy: RecordingLambda, table_name: str
) -> None:
    # GIVEN a finished response, and a relay on which its continuation's turn is throttled by the model
    clock = FakeClock()
    config = relay_config(table_name, MODEL_ID=MODEL)
    service = RelayService(chat_table, proxy, config, clock=clock.as_clock(), settings=FAST)  # type: ignore[arg-type]
    created = background(service)
    session_id = created["id"].split("_")[1]
    write_turn(chat_table, session_id, 1, ["Hello"])
    records = turn_records(session_id, 2, ["You"], error=ErrorInfo("throttled", "slow down", True))
    clock.at(
        1.0,
        lambda: (
            chat_table.turns.end_from_stream(records[-1], assistant_text(records)),
            chat_table.put_records(records),
        ),
    )

    # WHEN the continuation is asked for without a stream
    body = {"model": MODEL, "input": "hi", "previous_response_id": created["id"]}
    response = call(service, "POST", "/v1/responses", body)

    # THEN it is the 429, and the SDK is told not to send it again: its previous_response_id is no longer the latest
    # response of the conversation, so a retry could only be refused
    assert openai_error(response, 429)["code"] == "throttled"
    assert response.headers["x-should-retry"] == "false"
    assert openai_error(call(service, "POST", "/v1/responses", body), 400)["param"] == "previous_response_id"


def test_a_streamed_chat_completion_that_fails_ends_with_the_error_typed_as_without_a_stream(
    service: RelayService, chat_table: ChatTable
) -> None:
    # GIVEN a streamed chat completion whose turn the model throttled after a word
    # WHEN it is read THEN it ends with the error, of the type a non-streamed answer has (429: rate_limit_error)
    data = streamed_completion(service, chat_table, ["You"], ErrorInfo("throttled", "slow — down", True))
    assert data[-1] == ('{"error":{"message":"slow — down","type":"rate_limit_error","param":null,"code":"throttled"}}')


@pytest.mark.parametrize("stream", ["true", "false"])
@pytest.mark.parametrize("value", ["abc", "-1", "3.2", " 2", "2 ", ""])
def test_a_malformed_starting_after_is_a_400_with_or_without_a_stream(
    service: RelayService, stream: str, value: str
) -> None:
    created = background(service)
    response = call(service, "GET", f"/v1/responses/{created['id']}?stream={stream}&starting_after={value}")
    error = openai_error(response, 400)
    assert error["param"] == "starting_after"
    assert error["message"] == (
        f"starting_after must be a sequence number the stream sent (a non-negative integer), got {value!r}"
    )
