"""The chaos run's client against a scripted relay (httpx's mock transport): it drops and resumes as planned,
retries what a user's client retries (429/502/503, no answer, the relay's own retryable errors) and counts it,
and gives up on the rest."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import httpx
import pytest

from chaos.client import StreamSeen, run_chat
from chaos.plan import ChatPlan
from chatstream.backoff import Backoff

if TYPE_CHECKING:
    from collections.abc import Callable

PLAN = ChatPlan(index=0, message="/long 3", drop_after=None)
EVENTS = "/sessions/s1/turns/1/events"
NO_WAIT = Backoff(uniform=lambda low, high: 0.0)
Event = tuple[str, "str | None", dict[str, object]]  # an SSE event: name, id, data


def sse(*events: Event) -> httpx.Response:
    """A stream of SSE events (name, id, data), as the relay sends them."""
    text = ""
    for name, event_id, data in events:
        text += (f"id: {event_id}\n" if event_id else "") + f"event: {name}\ndata: {json.dumps(data)}\n\n"
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, text=text)


META: Event = ("meta", None, {"session_id": "s1", "turn": 1, "events_url": EVENTS})
DONE: Event = ("done", "4", {"stop_reason": "end_turn"})
BAD_GATEWAY = httpx.Response(502, json={"Message": "Internal Server Error"})


def token(seq: int) -> Event:
    return ("token", str(seq), {"text": f" w{seq}"})


def scripted(answers: list[httpx.Response | Exception]) -> tuple[httpx.Client, list[httpx.Request]]:
    """A client whose requests get ``answers`` in order (an exception is raised instead of answering)."""
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        reply = answers.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply

    return httpx.Client(transport=httpx.MockTransport(answer), base_url="http://relay"), seen


def chat(
    answers: list[httpx.Response | Exception], plan: ChatPlan = PLAN, budget_s: float = 60.0
) -> tuple[Callable[[], StreamSeen], list[httpx.Request]]:
    http, requests = scripted(answers)
    return (lambda: run_chat(http, plan, time.monotonic() + 60, budget_s, NO_WAIT)), requests


def test_a_chat_answered_502_and_503_is_sent_again_and_counted() -> None:
    # GIVEN a relay that answers POST /chat with 502, then 503, then the stream
    run, requests = chat([BAD_GATEWAY, httpx.Response(503), sse(META, token(1), token(2), token(3), DONE)])

    seen = run()

    # THEN the client sent the chat three times, counted two retries, and saw the whole reply
    assert [request.method for request in requests] == ["POST", "POST", "POST"]
    assert (seen.http_retries, seen.text, seen.done, seen.failure) == (2, " w1 w2 w3", DONE[2], "")


def test_a_cut_post_is_sent_again_with_its_key_as_is_one_whose_stream_broke_before_meta() -> None:
    # GIVEN a plan whose first POST is cut before its first byte, and a relay whose next answer breaks before meta
    plan = ChatPlan(index=7, message="/long 3", drop_after=None, cut_post=True)
    run, requests = chat(
        [httpx.ReadTimeout("cut"), httpx.RemoteProtocolError("broke"), sse(META, token(1), DONE)], plan
    )

    seen = run()

    # THEN every send carried the chat's one key, the cut and the retry are counted, and the reply came whole
    assert [request.headers["idempotency-key"] for request in requests] == ['"chaos-chat-7"'] * 3
    assert [request.content for request in requests] == [requests[0].content] * 3
    assert (seen.cut_posts, seen.http_retries, seen.text, seen.failure) == (1, 1, " w1", "")


def test_a_chat_refused_for_a_reason_a_client_does_not_retry_fails_at_once() -> None:
    run, requests = chat([httpx.Response(400, json={"error": {"code": "invalid_request"}})])

    seen = run()

    assert len(requests) == 1
    assert seen.http_retries == 0
    assert seen.failure.startswith("POST /chat 400: ")


def test_a_resume_answered_502_or_not_at_all_is_sent_again() -> None:
    # GIVEN a stream that ends without its terminal event, then a resume that gets 502, then one with no answer
    run, requests = chat(
        [
            sse(META, token(1)),
            BAD_GATEWAY,
            httpx.ConnectError("refused"),
            sse(token(2), token(3), DONE),
        ]
    )

    seen = run()

    # THEN the client resumed from its last id until it got the end
    assert [request.headers.get("last-event-id") for request in requests] == [None, "1", "1", "1"]
    assert (seen.http_retries, seen.resumes, seen.text, seen.done) == (2, 3, " w1 w2 w3", DONE[2])


def test_the_relays_own_retryable_error_is_resumed_and_the_turns_error_is_not() -> None:
    # GIVEN a relay error without an id (the relay's own), then the turn's own error record (with its id)
    relay_timeout: Event = ("error", None, {"code": "timeout", "message": "lagging", "retryable": True})
    turn_error: Event = ("error", "3", {"code": "model_stream_error", "message": "broke", "retryable": True})
    run, requests = chat([sse(META, token(1), relay_timeout), sse(token(2), turn_error)])

    seen = run()

    # THEN the first is resumed (a relay retry), the second ends the chat
    assert len(requests) == 2
    assert (seen.relay_retries, seen.error, seen.failure) == (1, turn_error[2], "")


def test_a_client_out_of_patience_gives_up_and_says_why() -> None:
    # GIVEN a relay that answers 502 to every resume, and a client with no patience left
    run, requests = chat([sse(META, token(1)), BAD_GATEWAY, BAD_GATEWAY], budget_s=0.0)

    seen = run()

    assert len(requests) == 2
    assert seen.http_retries == 0
    assert seen.failure == 'GET events 502: {"Message":"Internal Server Error"}'


@pytest.mark.parametrize(("drop_after", "drops"), [(0, 1), (1, 1), (5, 0)])
def test_a_drop_counts_only_when_it_happened(drop_after: int, drops: int) -> None:
    # GIVEN a chat planned to drop after `drop_after` tokens, whose first stream has three, the second a piece
    plan = ChatPlan(index=0, message="/long 3", drop_after=drop_after)
    first = sse(META, token(1), ("token", "2.3", {"text": " w2"}), ("token", "2", {"text": " w3"}))
    rest: list[Event] = [("token", "2", {"text": " w3"}), ("token", "3", {"text": " w4"}), DONE]
    run, _ = chat([first, sse(*rest)], plan)

    seen = run()

    # THEN the drop counts when the client dropped, not because the plan said it would
    assert seen.drops == drops
    assert seen.done == DONE[2]


def test_a_drop_waits_for_a_piece_inside_a_record_and_resumes_from_its_id() -> None:
    # GIVEN a chat planned to drop after one token, whose first stream paces record 2 (" w1 w2") in two pieces
    plan = ChatPlan(index=0, message="/long 3", drop_after=1)
    first = sse(
        META, ("token", "1", {"text": " w0"}), ("token", "2.3", {"text": " w1"}), ("token", "2", {"text": " w2"})
    )
    run, requests = chat([first, sse(("token", "2", {"text": " w2"}), token(3), DONE)], plan)

    seen = run()

    # THEN it dropped at the first piece inside a record (not after the whole record 1), resumed from the piece's
    # id, counted as a resume inside a record, and saw each piece once
    assert [request.headers.get("last-event-id") for request in requests] == [None, "2.3"]
    assert (seen.drops, seen.resumes, seen.mid_record_resumes) == (1, 1, 1)
    assert (seen.text, seen.last_id) == (" w0 w1 w2 w3", "3")


def tool_call(event_id: str, arguments: str, *, end: bool = False, index: int = 0) -> Event:
    data: dict[str, object] = {"index": index, "id": f"tooluse_{index}", "name": "get_weather", "arguments": arguments}
    return ("tool_call", event_id, {**data, **({"end": True} if end else {})})


def test_a_tool_chat_drops_inside_a_calls_arguments_and_assembles_the_call_once() -> None:
    # GIVEN a tool chat planned to drop after one event, whose call's arguments come in three records
    plan = ChatPlan(index=0, message="/call get_weather {}", drop_after=1, tools=("get_weather",))
    first = sse(META, ("token", "1", {"text": "Sure"}), tool_call("2", '{"city"'), tool_call("3", ': "Oslo"'))
    rest = sse(tool_call("3", ': "Oslo"'), tool_call("4", "}", end=True), tool_call("5", "{}", end=True, index=1), DONE)
    run, requests = chat([first, rest], plan)

    seen = run()

    # THEN it declared the tools, dropped at the first piece of arguments (not at the text), resumed from its id as a
    # resume inside a call, and assembled each call once, complete
    assert json.loads(requests[0].content)["tools"] == [{"name": "get_weather", "parameters": {"type": "object"}}]
    assert [request.headers.get("last-event-id") for request in requests] == [None, "2"]
    assert (seen.drops, seen.resumes, seen.mid_call_resumes, seen.mid_record_resumes) == (1, 1, 1, 0)
    assert [(call.id, call.arguments, call.complete) for call in seen.tool_calls] == [
        ("tooluse_0", '{"city": "Oslo"}', True),
        ("tooluse_1", "{}", True),
    ]
    assert seen.event_ids == ["1", "2", "3", "4", "5"] and seen.last_id == "5"
