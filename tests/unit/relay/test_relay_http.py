"""Reading Function URL events and routing them."""

from __future__ import annotations

import base64
import json

from chatstream.relay.http import Request, Route, Router, json_response
from tests.support import load_event


def test_a_sample_event_reads_as_its_request() -> None:
    # WHEN the resume sample is read
    request = Request.from_event(load_event("relay-events.json"))
    # THEN method, path, headers (any case), caller and request id are there
    assert (request.method, request.path) == ("GET", "/sessions/3f9c2a7e5b1d4c8e9f0a1b2c3d4e5f60/turns/1/events")
    assert request.header("Last-Event-ID") == "2"
    assert request.iam["userArn"] == "arn:aws:iam::123456789012:user/alice"
    assert request.request_id == "c6af9ac6-7b61-11e6-9a41-93e8deadbeef"
    assert request.body is None


def test_query_parameters_and_text_bodies() -> None:
    # WHEN events carry a query string and a text body
    after = Request.from_event(load_event("relay-events-after.json"))
    chat = Request.from_event(load_event("relay-chat.json"))
    # THEN both are read
    assert after.query == {"after": "2"}
    assert chat.body == b'{"message": "hello"}'


def test_base64_bodies_are_decoded_and_bad_base64_is_flagged() -> None:
    # GIVEN the base64 sample, and the same event with a body that is not base64
    event = load_event("relay-chat-base64.json")
    broken = {**event, "body": "not base64!"}
    # WHEN they are read
    good, bad = Request.from_event(event), Request.from_event(broken)
    # THEN the first decodes to the JSON the client sent and the second says it could not be decoded
    assert json.loads(good.body or b"") == {"message": "hello", "max_tokens": 64}
    assert base64.b64encode(good.body or b"").decode() == event["body"]
    assert (bad.body, bad.body_is_valid_base64) == (None, False)


def test_fields_of_the_wrong_shape_read_as_absent() -> None:
    # GIVEN hand-made events whose fields have the wrong types, down to the event itself
    event = load_event("relay-events.json")
    wrong = {
        **event,
        "rawPath": 7,
        "headers": "last-event-id: 2",
        "queryStringParameters": ["after=2"],
        "body": {"message": "hi"},
        "isBase64Encoded": "true",
        "requestContext": {"http": ["GET"], "authorizer": {"iam": "alice"}, "requestId": 5},
    }
    # WHEN they are read THEN nothing raises and every such field is absent
    request = Request.from_event(wrong)
    assert (request.method, request.path, request.headers, request.query) == ("GET", "", {}, {})
    assert (request.body, request.body_is_valid_base64, request.iam, request.request_id) == (None, True, {}, "")
    assert Request.from_event(["not", "an", "event"]) == Request(method="GET", path="")
    # AND a path missing from rawPath is read from requestContext.http.path
    fallback = {**event, "rawPath": None}
    assert Request.from_event(fallback).path == event["requestContext"]["http"]["path"]


def test_header_names_are_matched_whatever_their_case() -> None:
    # GIVEN a hand-made event with a mixed-case header name
    event = load_event("relay-events.json")
    event["headers"] = {"Last-Event-Id": "7"}
    # WHEN it is read THEN the header is found
    assert Request.from_event(event).header("last-event-id") == "7"


def test_route_templates_match_whole_segments() -> None:
    # GIVEN a router with one templated route
    router: Router[None] = Router(
        (Route("GET", "/sessions/{id}/turns/{turn}", lambda _, params: json_response(200, params)),)
    )

    def answer(path: str) -> tuple[int, object]:
        response = router.dispatch(Request(method="GET", path=path), None)
        return response.status_code, json.loads("".join(response.body))

    # WHEN paths are dispatched THEN only exact segment matches reach the handler, with their values
    assert answer("/sessions/abc/turns/3") == (200, {"id": "abc", "turn": "3"})
    assert answer("/sessions//turns/3")[0] == 404
    assert answer("/sessions/abc/turns/3/")[0] == 404
    assert answer("/sessions/abc/turns")[0] == 404


def test_path_parameters_are_percent_decoded_and_still_one_segment() -> None:
    # GIVEN a router with a templated route (a Function URL's rawPath is not percent-decoded)
    router: Router[None] = Router((Route("GET", "/v1/models/{model}", lambda _, params: json_response(200, params)),))

    def answer(path: str) -> tuple[int, object]:
        response = router.dispatch(Request(method="GET", path=path), None)
        return response.status_code, json.loads("".join(response.body))

    # WHEN a parameter is percent-encoded THEN the handler gets it decoded, UTF-8 included
    assert answer("/v1/models/us.amazon.nova-lite-v1%3A0") == (200, {"model": "us.amazon.nova-lite-v1:0"})
    assert answer("/v1/models/caf%C3%A9%20x") == (200, {"model": "café x"})
    assert answer("/v1/models/%25") == (200, {"model": "%"})
    # AND an encoded slash does not put a slash in a parameter, nor is invalid encoding passed on: no route matches
    for path in ("/v1/models/a%2Fb", "/v1/models/%2f", "/v1/models/%zz", "/v1/models/50%", "/v1/models/%ff"):
        status, body = answer(path)
        assert (status, body["error"]["code"]) == (404, "not_found"), path  # type: ignore[index]
