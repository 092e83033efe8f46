"""HTTP_API.md through the local Function URL: resume, followers, cancel, disconnects, timeouts, gaps."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from typing import TYPE_CHECKING

import httpx
import pytest
from httpx_sse import EventSource

from chatstream.status import StopReason, TurnStatus
from chatstream.table import ChatTable
from chatstream_client.api import ChatClient, TurnResult, ids_in_order
from chatstream_local.bedrock.model import plan_reply
from chatstream_local.lambda_.invocation import FunctionError
from tests.builders import turn_records
from tests.fixtures.local_handlers.specs import wait_until

if TYPE_CHECKING:
    from collections.abc import Callable

    from chatstream_local.lambda_.function_spec import FunctionSpec
    from chatstream_local.stack import LocalStack

pytestmark = pytest.mark.integration
LONG = "/long 150"


@pytest.fixture(scope="module")
def slow_stack_log() -> list[tuple[str, str]]:
    """Every line the slow stack's components and functions logged: (component, line)."""
    return []


@pytest.fixture(scope="module")
def slow_stack(slow_stack_log: list[tuple[str, str]]) -> object:
    """One stack for the module, with the model at 10 ms a delta so turns last long enough to interact with."""
    from chatstream_local.stack import LocalStack, StackSettings

    stack = LocalStack(
        StackSettings(port=0, model_delay_ms=10, verbose=True),
        log=lambda component, line: slow_stack_log.append((component, line)),
    )
    stack.start()
    yield stack
    stack.stop()


def change_function(
    monkeypatch: pytest.MonkeyPatch, logical_id: str, change: Callable[[FunctionSpec], FunctionSpec]
) -> None:
    """Stacks started from here on run the function ``logical_id`` with its spec (as the template makes it) changed."""
    from chatstream_local.lambda_.template_functions import TemplateFunctions

    specs = TemplateFunctions.specs
    monkeypatch.setattr(
        TemplateFunctions,
        "specs",
        lambda functions, *args, **kwargs: [
            change(spec) if spec.name == functions.template.physical_name(logical_id) else spec
            for spec in specs(functions, *args, **kwargs)
        ],
    )


def stream_ended(log: list[tuple[str, str]], session_id: str) -> dict | None:
    """The relay's "stream ended" record of a chat stream of ``session_id``, once it is logged."""
    for component, line in list(log):
        if component.startswith("RelayFunction") and line.startswith("{") and '"stream ended"' in line:
            record = json.loads(line)
            if record.get("session_id") == session_id and record.get("kind") == "chat":
                return dict(record)
    return None


def read_events(
    response: httpx.Response, stop_after_tokens: int | None = None, *, inside_a_record: bool = False
) -> list[tuple[str, str, dict]]:
    """The stream's events, up to ``stop_after_tokens`` token events (and then, with ``inside_a_record``, up to
    the first piece whose id is ``<seq>.<offset>``)."""
    events = []
    tokens = 0
    for event in EventSource(response).iter_sse():
        if event.event == "message" and not event.data:
            continue  # a `retry:` field alone
        events.append((event.event, event.id, json.loads(event.data) if event.data else {}))
        tokens += event.event == "token"
        if stop_after_tokens is not None and tokens >= stop_after_tokens and (not inside_a_record or "." in event.id):
            break
    return events


def start_turn_and_read(
    url: str, message: str, tokens: int, *, inside_a_record: bool = False
) -> tuple[dict, list[tuple[str, str, dict]]]:
    """POST /chat, read ``tokens`` token events (then up to a piece inside a record), then drop the connection."""
    with httpx.stream("POST", f"{url}/chat", json={"message": message}, timeout=30) as response:
        assert response.status_code == 200
        events = read_events(response, stop_after_tokens=tokens, inside_a_record=inside_a_record)
    meta = next(data for name, _, data in events if name == "meta")
    return meta, events


def text_and_ids(events: list[tuple[str, str, dict]]) -> tuple[str, list[str]]:
    tokens = [(event_id, data["text"]) for name, event_id, data in events if name == "token"]
    return "".join(text for _, text in tokens), [event_id for event_id, _ in tokens]


def test_disconnect_is_not_cancel_and_resume_has_no_duplicate_or_gap(slow_stack: LocalStack) -> None:
    # GIVEN a client that drops the connection after 3 tokens, inside a record (after a piece <seq>.<offset>)
    meta, events = start_turn_and_read(slow_stack.url, LONG, tokens=3, inside_a_record=True)
    seen_text, seen_ids = text_and_ids(events)
    last = seen_ids[-1]
    assert "." in last
    # WHEN it resumes with Last-Event-ID, and another with ?after=
    with httpx.stream(
        "GET", f"{slow_stack.url}{meta['events_url']}", headers={"Last-Event-ID": last}, timeout=30
    ) as response:
        resumed = read_events(response)
    with httpx.stream("GET", f"{slow_stack.url}{meta['events_url']}?after={last}", timeout=30) as response:
        after = read_events(response)
    # THEN the generation went on, and each resume continues exactly after the last id: the rest of its record,
    # then the later ones, no piece twice and none missing
    for rest in (resumed, after):
        text, ids = text_and_ids(rest)
        assert seen_text + text == plan_reply(LONG).text
        assert ids_in_order(seen_ids + ids)
        assert rest[-1][0] == "done" and rest[-1][2]["stop_reason"] == StopReason.END_TURN


def test_every_piece_id_of_a_finished_turn_resumes_exactly(slow_stack: LocalStack) -> None:
    # GIVEN a finished turn, read whole with pacing (word-sized pieces) and with ?pace=0 (one event a record)
    with ChatClient(slow_stack.url) as client:
        first = client.chat("/long 40")
    assert first.done is not None and ids_in_order(first.ids)
    with httpx.stream("GET", f"{slow_stack.url}{first.events_url}?pace=0", timeout=30) as response:
        whole_text, whole_ids = text_and_ids(read_events(response))
    assert whole_text == first.text and all("." not in i for i in whole_ids) and len(whole_ids) < len(first.ids)
    pieces = [i for i in first.ids if "." in i]
    assert pieces
    for index, piece in enumerate(first.ids):
        if "." not in piece and index % 5:
            continue
        # WHEN a client resumes from a piece's id (and from some records' ids), paced and not
        for query in ("", "&pace=0"):
            with httpx.stream("GET", f"{slow_stack.url}{first.events_url}?after={piece}{query}", timeout=30) as r:
                text, ids = text_and_ids(read_events(r))
            # THEN it gets exactly the text after it, and ids that carry on from it
            assert text == "".join(first.chunks[index + 1 :]), (piece, query)
            assert ids_in_order(first.ids[: index + 1] + ids), (piece, query)


def test_a_client_that_disconnects_leaves_the_relay_following_to_the_end_of_the_turn(
    slow_stack: LocalStack, slow_stack_log: list[tuple[str, str]]
) -> None:
    # GIVEN a client that reads three tokens of a reply of several seconds and disconnects
    meta, _ = start_turn_and_read(slow_stack.url, "/long 500", tokens=3)
    # WHEN the turn goes on to its end
    with ChatClient(slow_stack.url) as client:
        whole = client.follow(meta["events_url"])
    assert whole.done is not None
    # THEN the first client's relay invocation was never told it left (as on Lambda, where a client's disconnect
    # does not interrupt a streamed response): it followed the turn to its end and sent every token
    wait_until(lambda: stream_ended(slow_stack_log, meta["session_id"]) is not None, what="the relay's stream to end")
    ended = stream_ended(slow_stack_log, meta["session_id"])
    assert ended is not None
    assert (ended["outcome"], ended["tokens"]) == ("done", len(whole.ids))
    assert len(whole.ids) > 3


def test_a_stream_with_nothing_new_to_send_ends_with_reconnect(start_stack: Callable[..., LocalStack]) -> None:
    # GIVEN a turn that started and produced one token, then nothing more, and a relay whose idle bound is 1 s
    stack = start_stack(function_overrides={"RelayFunction": {"IDLE_RECONNECT_S": "1"}})
    table = ChatTable(stack.client("dynamodb"), stack.name("ChatTable"))
    session_id = table.create_session("anonymous")
    table.turns.start_next(session_id, "anonymous", "hello")
    table.put_records(turn_records(session_id, 1, ["one", "two"])[:2])
    # WHEN a client follows it
    with httpx.stream("GET", f"{stack.url}/sessions/{session_id}/turns/1/events", timeout=30) as response:
        events = read_events(response)
    # THEN after the token the stream ends with a reconnect naming where to resume, as it would for a client that
    # is gone; one that is still there follows it
    assert [name for name, _, _ in events] == ["token", "reconnect"]
    assert events[-1][2] == {"events_url": f"/sessions/{session_id}/turns/1/events", "last_event_id": 1}


def test_two_followers_see_the_same_turn(slow_stack: LocalStack) -> None:
    # GIVEN a turn in progress
    meta, _ = start_turn_and_read(slow_stack.url, LONG, tokens=1)
    results: list[TurnResult] = []

    def follow() -> None:
        with ChatClient(slow_stack.url) as client:
            results.append(client.follow(meta["events_url"]))

    # WHEN two clients follow it from the start at the same time
    threads = [threading.Thread(target=follow) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    # THEN both get the whole, exact reply, each event once, on streams that ended only with done
    assert [r.text for r in results] == [plan_reply(LONG).text] * 2
    assert all(r.done is not None for r in results)
    assert all(r.clean for r in results), [(r.repeated_ids, r.incidents) for r in results]


def test_cancel_ends_the_stream_and_keeps_the_partial_text(slow_stack: LocalStack) -> None:
    with ChatClient(slow_stack.url) as client:
        cancelled: dict[str, object] = {}

        def on_token(_: str) -> None:
            if not cancelled and current:
                cancelled.update(client.cancel(current[0].session_id, current[0].turn))

        current: list[TurnResult] = []
        # WHEN a client cancels after its first token
        result = client.chat("/long 3000", on_token=on_token, on_meta=current.append)
        # THEN the cancel is accepted, the stream ends 'cancelled' early, and history keeps exactly that text
        assert cancelled["status"] == "cancelling"
        assert result.done is not None and result.done["stop_reason"] == StopReason.CANCELLED
        assert len(result.ids) > 0 and plan_reply("/long 3000").text.startswith(result.text)
        assert result.text != plan_reply("/long 3000").text
        assert result.clean, (result.repeated_ids, result.incidents)
        turn = client.history(result.session_id)["turns"][0]
        assert turn["status"] == TurnStatus.CANCELLED and turn["assistant"] == result.text
        # AND cancelling again is 409 turn_finished
        response = httpx.post(f"{slow_stack.url}/sessions/{result.session_id}/turns/1/cancel")
        assert response.status_code == 409 and response.json()["error"]["code"] == "turn_finished"


def test_a_second_turn_while_one_generates_is_409(slow_stack: LocalStack) -> None:
    meta, _ = start_turn_and_read(slow_stack.url, LONG, tokens=1)
    response = httpx.post(f"{slow_stack.url}/chat", json={"message": "again", "session_id": meta["session_id"]})
    assert response.status_code == 409 and response.json()["error"]["code"] == "turn_in_progress"


def test_a_finished_turn_replays_and_ends(slow_stack: LocalStack) -> None:
    with ChatClient(slow_stack.url) as client:
        first = client.chat("hello again")
        replay = client.follow(first.events_url)
        assert (replay.text, replay.ids, replay.done) == (first.text, first.ids, first.done)
        assert first.clean and replay.clean, first.incidents + replay.incidents


def test_a_proxy_that_fails_outside_its_handler_is_reaped(start_stack: Callable[..., LocalStack]) -> None:
    # GIVEN a proxy that fails its cold start (no model configured): no terminal record will ever come
    lines: list[tuple[str, str]] = []
    overrides = {"ProxyFunction": {"MODEL_ID": ""}, "RelayFunction": {"GAP_TIMEOUT_S": "1"}}
    stack = start_stack(function_overrides=overrides, log=lambda component, line: lines.append((component, line)))
    with ChatClient(stack.url) as client:
        result = client.chat("hello")
        # THEN the async failure goes to ProxyFailureQueue, the reaper ends the turn, and the stream ends in error
        assert result.error is not None and result.error["code"] == "generation_failed" and result.error["retryable"]
        assert client.history(result.session_id)["turns"][0]["status"] == "error"
        # AND the session is free for the next turn at once
        again = client.chat("again", result.session_id)
    assert again.turn == 2 and again.error is not None
    assert result.clean and again.clean, result.incidents + again.incidents
    # AND the stack logged each failed invocation, at its default level, in one line with the function's own error
    failures = [line for component, line in lines if component == "stack" and "asynchronous invocation" in line]
    assert len(failures) == 2, lines
    assert all(line.startswith("ProxyFunction: asynchronous invocation failed: ") for line in failures)
    assert all("MODEL_ID" in line and line.endswith("; sent to ProxyFailureQueue") for line in failures)


def test_the_stack_logs_each_function_error_its_function_url_answers(start_stack: Callable[..., LocalStack]) -> None:
    # GIVEN a running stack and its log at the default level
    lines: list[tuple[str, str]] = []
    stack = start_stack(log=lambda component, line: lines.append((component, line)))
    assert stack.function_url is not None

    # WHEN its Function URL answers a relay error with a 502 (the relay's own error, as the runtime reported it)
    error = FunctionError.synthetic("Sandbox.Timedout", "RequestId: r-1 Error: Task timed out after\n900.00 seconds")
    stack.function_url.record("r-1", error, "before_response")

    # THEN the stack's log has one line with the function and its error
    assert (
        "url",
        "RelayFunction request r-1: 502 before the first byte: Sandbox.Timedout: "
        "RequestId: r-1 Error: Task timed out after 900.00 seconds",
    ) in lines


def test_a_gap_that_does_not_fill_ends_in_error(start_stack: Callable[..., LocalStack]) -> None:
    # GIVEN a turn whose record 2 never arrives while record 3 did
    stack = start_stack(function_overrides={"RelayFunction": {"GAP_TIMEOUT_S": "1"}})
    table = ChatTable(stack.client("dynamodb"), stack.name("ChatTable"))
    session_id = table.create_session("anonymous")
    table.turns.start_next(session_id, "anonymous", "hello")
    table.put_records([record for record in turn_records(session_id, 1, ["one", "two", "three"]) if record.seq != 2])
    # WHEN a client follows it
    with httpx.stream("GET", f"{stack.url}/sessions/{session_id}/turns/1/events", timeout=30) as response:
        events = read_events(response)
    # THEN it gets what is contiguous, never past the gap, then a gap error
    assert [(name, data.get("text")) for name, _, data in events] == [("token", "one"), ("error", None)]
    assert events[-1][2]["code"] == "gap"


# ------------------------------------------------------------------------------ reserved concurrency


def test_a_chat_past_the_relays_reserved_concurrency_is_a_429_and_the_one_streaming_goes_on(
    start_stack: Callable[..., LocalStack],
) -> None:
    # GIVEN a stack deployed with RelayReservedConcurrency=1, one chat streaming a slow reply through the relay
    overrides = {"FunctionUrlAuthType": "NONE", "RelayReservedConcurrency": "1"}
    stack = start_stack(model_delay_ms=40, parameter_overrides=overrides)
    with (
        httpx.Client(base_url=stack.url, timeout=30) as http,
        http.stream("POST", "/chat", json={"message": "/long 30"}) as first,
    ):
        lines = first.iter_lines()
        assert next(line for line in lines if line.startswith("event: token"))

        # WHEN a second chat comes while it streams
        second = http.post("/chat", json={"message": "hello"})

        # THEN the Function URL throttles it (429, as Lambda does), the relay never ran for it
        assert second.status_code == 429
        # AND the first chat streams on to its end
        assert "event: done" in list(lines)
    assert stack.local_lambda is not None
    assert stack.local_lambda.stats()[stack.name("RelayFunction")].throttles >= 1


def test_a_generation_past_the_proxys_reserved_concurrency_waits_and_runs(
    start_stack: Callable[..., LocalStack],
) -> None:
    # GIVEN a stack deployed with ProxyReservedConcurrency=1 and a slow model
    overrides = {"FunctionUrlAuthType": "NONE", "ProxyReservedConcurrency": "1"}
    stack = start_stack(model_delay_ms=25, parameter_overrides=overrides)

    # WHEN two chats start at once (replies of 3 s each: they still overlap when a busy machine starts one relay seconds
    # after the other)
    results: list[TurnResult] = []

    def chat(message: str) -> None:
        with ChatClient(stack.url) as client:
            results.append(client.chat(message))

    threads = [threading.Thread(target=chat, args=(f"/long {n}",)) for n in (120, 121)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    # THEN Lambda throttled one generation's event, which ran once the other was done: both replies are whole
    assert sorted(len(result.text.split()) for result in results) == [120, 121]
    assert all(result.done is not None and result.clean for result in results), [r.incidents for r in results]
    assert stack.local_lambda is not None
    assert stack.local_lambda.stats()[stack.name("ProxyFunction")].throttles >= 1


def test_a_generation_still_queued_at_the_start_timeout_ends_its_turn_and_never_runs_the_model(
    start_stack: Callable[..., LocalStack], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a stack with ProxyReservedConcurrency=1, the relay's start timeout 2 s (START_TIMEOUT_S; 30 s by default),
    # and the one generation busy with a long reply (8 s: still busy at the timeout when a busy machine takes seconds to
    # start the second chat's relay)
    change_function(
        monkeypatch,
        "RelayFunction",
        lambda spec: replace(spec, environment={**spec.environment, "START_TIMEOUT_S": "2"}),
    )
    lines: list[tuple[str, str]] = []
    overrides = {"FunctionUrlAuthType": "NONE", "ProxyReservedConcurrency": "1"}
    stack = start_stack(
        model_delay_ms=20, verbose=True, parameter_overrides=overrides, log=lambda c, line: lines.append((c, line))
    )
    with (
        ChatClient(stack.url) as client,
        httpx.stream("POST", f"{stack.url}/chat", json={"message": "/long 400"}) as busy,
    ):
        busy_events = EventSource(busy).iter_sse()
        assert next(e for e in busy_events if e.event == "token")

        # WHEN a second chat starts while the generation is busy
        queued = client.chat("hello")

        # THEN after the start timeout its stream ends with the turn's own error, retryable: send again
        assert queued.done is None and queued.error is not None
        assert (queued.error["code"], queued.error["retryable"]) == ("timeout", True)
        # AND the turn ended with it: the session takes the next message at once
        assert client.history(queued.session_id)["turns"][0]["status"] == "error"
        again = httpx.post(f"{stack.url}/chat", json={"message": "again", "session_id": queued.session_id})
        assert again.status_code == 200
        # AND once the busy generation is done, the queued invocation runs, finds the turn ended, calls no model
        assert any(e.event == "done" for e in busy_events)

        def not_generated() -> bool:
            return any(
                c.startswith("ProxyFunction") and "not generated" in line and queued.session_id in line
                for c, line in list(lines)
            )

        wait_until(not_generated, timeout_s=30, what="the queued invocation to run and generate nothing")
        turn = client.history(queued.session_id)["turns"][0]
        assert (turn["status"], turn["assistant"], turn["error"]["code"]) == ("error", "", "timeout")
    assert stack.local_lambda is not None
    assert stack.local_lambda.stats()[stack.name("ProxyFunction")].throttles >= 1


def test_a_second_delivery_that_fails_does_not_reap_the_turn_the_first_generates(
    start_stack: Callable[..., LocalStack], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a stack with ProxyReservedConcurrency=1 and the proxy's events kept 1.5 s (the template's is 300 s),
    # so a second event of a generating turn is throttled until it is too old and fails as EventAgeExceeded
    change_function(monkeypatch, "ProxyFunction", lambda spec: replace(spec, max_event_age_s=1.5))
    lines: list[tuple[str, str]] = []
    overrides = {"FunctionUrlAuthType": "NONE", "ProxyReservedConcurrency": "1"}
    stack = start_stack(
        model_delay_ms=20, verbose=True, parameter_overrides=overrides, log=lambda c, line: lines.append((c, line))
    )
    assert stack.invoke_endpoint is not None
    with httpx.stream("POST", f"{stack.url}/chat", json={"message": "/long 300"}, timeout=30) as response:
        sse = ((e.event, e.id, json.loads(e.data)) for e in EventSource(response).iter_sse() if e.data)  # one reader
        events = [next(sse)]
        while events[-1][0] != "token":
            events.append(next(sse))
        session_id = next(data for name, _, data in events if name == "meta")["session_id"]

        # WHEN, while the turn generates, a second event for it comes (a duplicate delivery, or the relay's retried
        # Invoke), and fails: throttled until too old, its record goes to ProxyFailureQueue and reaches the reaper
        event = json.dumps({"session_id": session_id, "turn": 1}).encode()
        stack.invoke_endpoint.submit_event(stack.name("ProxyFunction"), event)

        def reaper_logged() -> bool:
            return any(
                c.startswith("TurnReaperFunction") and '"failed generation"' in line and session_id in line
                for c, line in list(lines)
            )

        wait_until(reaper_logged, timeout_s=15, what="the reaper to read the failed delivery's record")

        # THEN the reaper left the turn to the delivery generating it: the session is still busy
        again = httpx.post(f"{stack.url}/chat", json={"message": "again", "session_id": session_id}, timeout=30)
        assert again.status_code == 409 and again.json()["error"]["code"] == "turn_in_progress"

        # AND the turn streams on to its end, the whole reply, and ends complete
        events += list(sse)
    assert [name for name, _, _ in events if name in ("done", "error")] == ["done"]
    assert len(text_and_ids(events)[0].split()) == 300
    with ChatClient(stack.url) as client:
        assert client.history(session_id)["turns"][0]["status"] == "complete"
    assert any("EventAgeExceeded (it never ran); sent to ProxyFailureQueue" in line for _, line in lines)
