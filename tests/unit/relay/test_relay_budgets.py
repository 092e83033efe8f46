"""Budgets per caller and Idempotency-Key, as the relay answers them (native and /v1), against moto's DynamoDB and a
recording Lambda client (no proxy runs: tests claim and write the turns)."""

from __future__ import annotations

import copy
import json
import logging
import uuid
from typing import TYPE_CHECKING, Any

import pytest
from botocore.exceptions import ClientError

from chatstream.relay.http import Request
from chatstream.relay.service import RelayService
from chatstream.table.budgets import LimitKind
from tests.builders import turn_records
from tests.support import load_event
from tests.unit.relay.relay_support import FAST, FakeClock, read_stream, relay_config, write_turn

if TYPE_CHECKING:
    from chatstream.relay.http import Response
    from chatstream.table import ChatTable

MODEL = "us.amazon.nova-lite-v1:0"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}


class RecordingLambda:
    def __init__(self) -> None:
        self.invocations = 0

    def invoke(self, **kwargs: Any) -> dict[str, Any]:
        self.invocations += 1
        return {"StatusCode": 202}


@pytest.fixture
def proxy() -> RecordingLambda:
    return RecordingLambda()


@pytest.fixture
def caller() -> dict[str, str]:
    """A caller of its own (the module's tests share one table): an IAM user no other test is."""
    name = uuid.uuid4().hex[:12]
    return {"accountId": "123456789012", "callerId": f"AIDA{name}", "userArn": f"arn:aws:iam::123456789012:user/{name}"}


def service_with(chat_table: ChatTable, proxy: RecordingLambda, table_name: str, **limits: str) -> RelayService:
    config = relay_config(table_name, MODEL_ID=MODEL, **limits)
    return RelayService(chat_table, proxy, config, clock=FakeClock().as_clock(), settings=FAST)  # type: ignore[arg-type]


@pytest.fixture
def service(chat_table: ChatTable, proxy: RecordingLambda, table_name: str) -> RelayService:
    return service_with(chat_table, proxy, table_name)


def call(
    service: RelayService,
    path: str,
    body: Any,
    caller: dict[str, str],
    headers: dict[str, str] | None = None,
) -> Response:
    raw = copy.deepcopy(load_event("relay-health.json"))
    raw["rawPath"] = path
    raw["requestContext"]["http"].update(method="POST", path=path)
    raw["requestContext"]["authorizer"] = {"iam": dict(caller)}
    raw["headers"] = {**raw.get("headers", {}), **{name.lower(): value for name, value in (headers or {}).items()}}
    raw["body"], raw["isBase64Encoded"] = json.dumps(body), False
    return service.handle(Request.from_event(raw))


def keyed(key: str) -> dict[str, str]:
    return {"Idempotency-Key": f'"{key}"'}


def error_of(response: Response) -> dict[str, Any]:
    body: dict[str, Any] = json.loads("".join(response.body))
    return body["error"]


def meta_of(response: Response) -> dict[str, Any]:
    """The stream's ``meta``, from its first chunk only: the rest is not followed (the turn goes on generating)."""
    assert response.status_code == 200, "".join(response.body)
    meta: dict[str, Any] = read_stream([next(iter(response.body))]).of("meta")[0].json()
    return meta


def sessions(table: ChatTable, caller: dict[str, str]) -> int:
    items = table.client.scan(
        TableName=table.table_name, ProjectionExpression="sk, #o", ExpressionAttributeNames={"#o": "owner"}
    )["Items"]
    return sum(
        1 for item in items if item["sk"]["S"] == "SESSION" and item.get("owner", {}).get("S") == caller["userArn"]
    )


# ------------------------------------------------------------------------------------------ refusals


def test_a_turn_over_the_callers_turns_at_once_is_refused_with_when_to_try_again(
    chat_table: ChatTable,
    proxy: RecordingLambda,
    table_name: str,
    caller: dict[str, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # GIVEN a relay whose callers may have one turn generating, and a caller with one
    service = service_with(chat_table, proxy, table_name, CALLER_TURNS_AT_ONCE="1", CALLER_REQUESTS_PER_MINUTE="10")
    assert meta_of(call(service, "/chat", {"message": "one"}, caller))["turn"] == 1
    # WHEN the caller starts another
    with caplog.at_level(logging.INFO, logger="chatstream.relay.exchange"):
        response = call(service, "/chat", {"message": "two"}, caller)
    # THEN it is refused in the API's shape, says why and when, and started nothing: no session, no invocation
    assert response.status_code == 429
    error = error_of(response)
    assert error["code"] == "rate_limit_exceeded" and "at once (the limit is 1)" in error["message"]
    assert "try again in 5 s" in error["message"]
    assert (response.headers["Retry-After"], response.headers["retry-after-ms"]) == ("5", "5000")
    assert "x-should-retry" not in response.headers
    assert sessions(chat_table, caller) == 1 and proxy.invocations == 1
    # AND it carries the caller's limits, and is logged with its owner and counted
    assert response.headers["x-ratelimit-limit-requests"] == "10"
    assert response.headers["x-ratelimit-remaining-requests"] == "9"
    refused = [record for record in caplog.records if record.getMessage() == "turn refused"]
    assert [(r.owner, r.limits) for r in refused] == [(caller["userArn"], [LimitKind.TURNS])]  # type: ignore[attr-defined]
    assert service.refusals == 1


def test_a_spent_day_is_insufficient_quota_and_tells_openai_s_sdks_not_to_retry(
    chat_table: ChatTable, proxy: RecordingLambda, table_name: str, caller: dict[str, str]
) -> None:
    # GIVEN a caller whose budget is 1,000 tokens a day, 900 of which a turn used (800 in, 100 out)
    service = service_with(chat_table, proxy, table_name, CALLER_TOKENS_PER_DAY="1000")
    first = call(service, "/v1/chat/completions", {**CHAT, "max_tokens": 500, "stream": True}, caller)
    session_id = first.headers["X-Chatstream-Session-Id"]
    assert (
        first.headers["x-ratelimit-limit-tokens"] == "1000" and first.headers["x-ratelimit-remaining-tokens"] == "500"
    )
    records = turn_records(session_id, 1, ["w"] * 100, input_tokens=800)
    chat_table.put_records(records)
    chat_table.turns.end_from_stream(records[-1], "w" * 100)
    # WHEN it asks for another turn of 500
    response = call(service, "/v1/chat/completions", {**CHAT, "max_tokens": 500}, caller)
    # THEN OpenAI's quota error: not worth retrying before the day's reset, which Retry-After names
    assert response.status_code == 429
    error = error_of(response)
    assert (error["code"], error["type"]) == ("insufficient_quota", "insufficient_quota")
    assert "the day's tokens are spent" in error["message"] and "after 00:00 UTC" in error["message"]
    assert response.headers["x-should-retry"] == "false" and int(response.headers["Retry-After"]) > 5
    assert response.headers["x-ratelimit-remaining-tokens"] == "100"


def test_a_turn_larger_than_the_whole_budget_says_to_ask_for_fewer_tokens(
    chat_table: ChatTable, proxy: RecordingLambda, table_name: str, caller: dict[str, str]
) -> None:
    service = service_with(chat_table, proxy, table_name, CALLER_TOKENS_PER_DAY="1000")
    response = call(service, "/chat", {"message": "hi"}, caller)  # max_tokens: MaxTokensLimit's 4096
    error = error_of(response)
    assert response.status_code == 429 and error["code"] == "insufficient_quota"
    assert "more than the whole budget of 1,000 tokens a day: ask for fewer (max_tokens)" in error["message"]
    assert proxy.invocations == 0


def test_a_table_throttled_during_the_check_is_a_retryable_503_that_started_nothing(
    service: RelayService, chat_table: ChatTable, caller: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def throttled(**kwargs: Any) -> Any:
        reasons = [{"Code": "None"}] * (len(kwargs["TransactItems"]) - 1) + [{"Code": "ThrottlingError"}]
        error = {"Code": "TransactionCanceledException", "Message": "throttled"}
        raise ClientError({"Error": error, "CancellationReasons": reasons}, "TransactWriteItems")

    monkeypatch.setattr(chat_table.client, "transact_write_items", throttled)
    for path, body in (("/chat", {"message": "hi"}), ("/v1/chat/completions", CHAT)):
        response = call(service, path, body, caller, keyed(f"throttled-{path}"))
        assert response.status_code == 503 and response.headers["Retry-After"] == "1"
        assert error_of(response)["code"] == "unavailable"
    monkeypatch.undo()
    assert sessions(chat_table, caller) == 0


def test_a_start_applied_whose_answer_was_lost_is_a_503_and_its_retry_joins_it(
    service: RelayService, chat_table: ChatTable, caller: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN DynamoDB applying a start's transaction, then failing its answer as throttled (botocore's retries spent)
    real = chat_table.client.transact_write_items
    lost: list[bool] = []

    def applied_then_throttled(**kwargs: Any) -> Any:
        answer = real(**kwargs)
        if not lost:
            lost.append(True)
            error = {"Code": "ThrottlingException", "Message": "Rate of requests exceeds the allowed throughput"}
            raise ClientError({"Error": error}, "TransactWriteItems")
        return answer

    monkeypatch.setattr(chat_table.client, "transact_write_items", applied_then_throttled)
    # WHEN a chat is sent with a key THEN it is a retryable 503
    first = call(service, "/chat", {"message": "hi"}, caller, keyed("k-lost"))
    assert first.status_code == 503 and first.headers["Retry-After"] == "1"
    # AND sent again, it joins the turn that was started after all: one session, never admitted twice
    assert meta_of(call(service, "/chat", {"message": "hi"}, caller, keyed("k-lost")))["turn"] == 1
    assert sessions(chat_table, caller) == 1


# ------------------------------------------------------------------------------------- idempotency


def test_a_chat_sent_again_with_its_key_joins_its_turn_from_the_start_or_its_last_event(
    service: RelayService, chat_table: ChatTable, proxy: RecordingLambda, caller: dict[str, str]
) -> None:
    # GIVEN a turn started with a key, claimed by its generation, and its reply stored
    first = meta_of(call(service, "/chat", {"message": "hi"}, caller, keyed("k1")))
    chat_table.turns.claim(first["session_id"], 1, "request-1")
    write_turn(chat_table, first["session_id"], 1, ["Hello", " there"])
    # WHEN the same request is sent again with the key (its first answer was lost)
    again = call(service, "/chat", {"message": "hi"}, caller, keyed("k1"))
    # THEN it streams the same turn, whole, and nothing else was started or invoked
    stream = read_stream(again.body)
    assert stream.of("meta")[0].json() == first and stream.text == "Hello there" and stream.kinds[-1] == "done"
    assert sessions(chat_table, caller) == 1 and proxy.invocations == 1
    # AND with a Last-Event-ID, from after that event
    resumed = read_stream(call(service, "/chat", {"message": "hi"}, caller, {**keyed("k1"), "Last-Event-ID": "1"}).body)
    assert resumed.text == " there"


def test_a_joined_turn_no_generation_claimed_is_invoked_again(
    service: RelayService, proxy: RecordingLambda, caller: dict[str, str]
) -> None:
    # GIVEN a turn its first request started and never saw claimed (that request may have died before its invoke)
    call(service, "/chat", {"message": "hi"}, caller, keyed("k2"))
    # WHEN the request is sent again THEN the proxy is invoked again (a claimed turn's second invocation would
    # generate nothing)
    call(service, "/chat", {"message": "hi"}, caller, keyed("k2"))
    assert proxy.invocations == 2


def test_a_key_sent_with_another_request_is_422(service: RelayService, caller: dict[str, str]) -> None:
    call(service, "/chat", {"message": "hi"}, caller, keyed("k3"))
    # the same body written otherwise (its fields in another order, spaces) is the same request
    assert call(service, "/chat", {"message": "hi"}, caller, {"Idempotency-Key": "k3"}).status_code == 200
    for path, body in (("/chat", {"message": "hello"}), ("/v1/chat/completions", CHAT)):
        response = call(service, path, body, caller, keyed("k3"))
        assert response.status_code == 422 and error_of(response)["code"] == "idempotency_key_reused"


@pytest.mark.parametrize(
    "value",
    ['"' + "k" * 256 + '"', "k" * 256, '"a", "b"', '""', '"é"', '"a";p=1', "a b", '"unterminated', '"bad\\escape"'],
    ids=["256 quoted", "256 bare", "a list", "empty", "not ASCII", "parameters", "a space", "unterminated", "escape"],
)
def test_a_malformed_key_is_400_and_starts_nothing(
    service: RelayService, chat_table: ChatTable, proxy: RecordingLambda, caller: dict[str, str], value: str
) -> None:
    for path, body in (("/chat", {"message": "hi"}), ("/v1/chat/completions", CHAT)):
        response = call(service, path, body, caller, {"Idempotency-Key": value})
        assert response.status_code == 400 and error_of(response)["code"] == "invalid_request", value
        assert "Idempotency-Key" in error_of(response)["message"]
    assert proxy.invocations == 0 and sessions(chat_table, caller) == 0


def test_a_key_of_255_characters_quoted_with_escapes_is_the_key(service: RelayService, caller: dict[str, str]) -> None:
    key = 'a"b\\c' + "k" * 250
    quoted = '"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'
    first = meta_of(call(service, "/chat", {"message": "hi"}, caller, {"Idempotency-Key": quoted}))
    assert meta_of(call(service, "/chat", {"message": "hi"}, caller, {"Idempotency-Key": quoted})) == first


def test_a_continuation_sent_again_while_its_turn_generates_joins_it(
    service: RelayService, chat_table: ChatTable, caller: dict[str, str]
) -> None:
    session_id = meta_of(call(service, "/chat", {"message": "one"}, caller))["session_id"]
    write_turn(chat_table, session_id, 1, ["ok"])
    body = {"message": "two", "session_id": session_id}
    second = meta_of(call(service, "/chat", body, caller, keyed("k4")))
    # WHEN it is sent again while turn 2 generates (the session refuses a turn before any write): it joins turn 2
    assert meta_of(call(service, "/chat", body, caller, keyed("k4"))) == second and second["turn"] == 2
    # AND without its key, it is a turn in progress, as before
    assert call(service, "/chat", body, caller).status_code == 409


def test_a_chat_completion_sent_again_with_its_key_is_the_same_completion(
    service: RelayService, chat_table: ChatTable, caller: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN completions whose turns end as soon as the relay follows them
    real = service.table.turns.start_first

    def started(*args: Any, **kwargs: Any) -> str:
        session_id = real(*args, **kwargs)
        chat_table.turns.claim(session_id, 1, "request-1")
        write_turn(chat_table, session_id, 1, ["Hi", "!"])
        return session_id

    monkeypatch.setattr(service.table.turns, "start_first", started)
    first = call(service, "/v1/chat/completions", CHAT, caller, keyed("k5"))
    again = call(service, "/v1/chat/completions", CHAT, caller, keyed("k5"))
    assert first.status_code == again.status_code == 200
    assert "".join(first.body) == "".join(again.body) and sessions(chat_table, caller) == 1


def test_a_background_response_sent_again_is_the_same_response_and_so_is_a_continuation(
    service: RelayService, chat_table: ChatTable, caller: dict[str, str]
) -> None:
    body = {"model": MODEL, "input": "hi", "background": True}
    first = json.loads("".join(call(service, "/v1/responses", body, caller, keyed("k6")).body))
    again = json.loads("".join(call(service, "/v1/responses", body, caller, keyed("k6")).body))
    assert again["id"] == first["id"] and sessions(chat_table, caller) == 1
    # A continuation sent again after its turn began (its previous response no longer the latest) joins it too
    session_id = first["id"].split("_")[1]
    write_turn(chat_table, session_id, 1, ["ok"])
    follow_up = {**body, "previous_response_id": first["id"]}
    second = json.loads("".join(call(service, "/v1/responses", follow_up, caller, keyed("k7")).body))
    write_turn(chat_table, session_id, 2, ["fine"])
    again = json.loads("".join(call(service, "/v1/responses", follow_up, caller, keyed("k7")).body))
    assert again["id"] == second["id"] == f"resp_{session_id}_2" and again["status"] == "completed"
