"""The OpenAPI document (``chatstream/relay/openapi.json``): valid OpenAPI 3.1, the relay's routes exactly, served
at ``GET /openapi.json``, and the SSE events the relay renders are the events it describes."""

from __future__ import annotations

import copy
import json
from typing import TYPE_CHECKING, Any

import pytest
from jsonschema import Draft202012Validator
from openapi_spec_validator import OpenAPIV31SpecValidator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from chatstream.records import ErrorInfo, TokenRecord, Usage
from chatstream.relay.follow import error_event, render
from chatstream.relay.http import Request
from chatstream.relay.openapi import DOCUMENT, DOCUMENT_PATH
from chatstream.relay.service import ROUTES, RelayService
from chatstream.status import StopReason
from chatstream_local.template import Template
from tests.support import load_event
from tests.unit.relay.relay_support import FAST, FakeClock, relay_config

if TYPE_CHECKING:
    from chatstream.relay.http import Response
    from tests.unit.relay.conftest import SharedTable

METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}
SESSION = "s" * 32


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return dict(json.loads(DOCUMENT_PATH.read_text(encoding="utf-8")))


def test_the_document_is_valid_openapi_3_1(document: dict[str, Any]) -> None:
    # GIVEN the document WHEN validated against the OpenAPI 3.1 specification THEN it has no error
    assert document["openapi"].startswith("3.1.")
    errors = [
        f"{'/'.join(map(str, error.path))}: {error.message}"
        for error in OpenAPIV31SpecValidator(document).iter_errors()
    ]
    assert errors == []


def test_the_document_and_the_route_table_name_the_same_operations(document: dict[str, Any]) -> None:
    # GIVEN every operation the document describes, and every route the relay serves
    documented = {
        (method.upper(), path) for path, item in document["paths"].items() for method in item if method in METHODS
    }
    served = {(route.method, route.template) for route in ROUTES.routes}
    # THEN neither has one the other lacks
    assert sorted(served - documented) == [], "routes the document does not describe"
    assert sorted(documented - served) == [], "operations the relay does not serve"


def test_every_operation_names_an_id_and_its_error_codes(document: dict[str, Any]) -> None:
    # GIVEN every operation THEN it has an operationId, and each error answer lists the codes it can carry
    for path, item in document["paths"].items():
        for method, operation in item.items():
            assert operation.get("operationId"), (method, path)
            for status, answer in operation["responses"].items():
                answer = resolve(document, answer)
                if int(status) >= 400:
                    schema = answer["content"]["application/json"]["schema"]
                    assert schema["properties"]["error"]["properties"]["code"]["enum"], (method, path, status)


@pytest.fixture
def service(shared_table: SharedTable) -> RelayService:
    config = relay_config(shared_table.name)
    return RelayService(shared_table.table, None, config, clock=FakeClock().as_clock(), settings=FAST)  # type: ignore[arg-type]


def get_document(service: RelayService) -> Response:
    """GET /openapi.json as a real-shaped Function URL event."""
    raw = copy.deepcopy(load_event("relay-health.json"))
    raw["rawPath"] = "/openapi.json"
    raw["requestContext"]["http"]["path"] = "/openapi.json"
    return service.handle(Request.from_event(raw))


def test_the_relay_serves_the_document_as_it_is_in_the_repository(service: RelayService) -> None:
    # GIVEN a relay with the template's default MaxTokensLimit WHEN asked for GET /openapi.json
    response = get_document(service)
    # THEN it answers the file, byte for byte, as JSON
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "application/json"
    assert "".join(response.body) == DOCUMENT_PATH.read_text(encoding="utf-8")


def test_the_document_names_the_templates_default_max_tokens_limit(document: dict[str, Any]) -> None:
    default = Template.load().raw["Parameters"]["MaxTokensLimit"]["Default"]
    assert document["components"]["schemas"]["ChatRequest"]["properties"]["max_tokens"]["maximum"] == default


def test_a_relay_with_its_own_max_tokens_limit_serves_it_in_the_document(
    shared_table: SharedTable, document: dict[str, Any]
) -> None:
    # GIVEN a relay configured with MAX_TOKENS_LIMIT=100
    config = relay_config(shared_table.name, MAX_TOKENS_LIMIT="100")
    service = RelayService(shared_table.table, None, config, clock=FakeClock().as_clock(), settings=FAST)  # type: ignore[arg-type]
    # WHEN asked for its document
    served = json.loads("".join(get_document(service).body))
    # THEN that is the largest max_tokens it names, and the rest is the file's
    assert served["components"]["schemas"]["ChatRequest"]["properties"]["max_tokens"]["maximum"] == 100
    served["components"]["schemas"]["ChatRequest"]["properties"]["max_tokens"]["maximum"] = DOCUMENT.max_tokens_limit
    assert served == document


def validator(document: dict[str, Any], schema: dict[str, Any]) -> Draft202012Validator:
    """A JSON Schema 2020-12 validator of ``schema``, whose ``$ref`` s point into the document."""
    registry: Registry[Any] = Registry().with_resource("urn:openapi", Resource(document, DRAFT202012))
    return Draft202012Validator({"$ref": "urn:openapi" + schema["$ref"]}, registry=registry)


def event_data_schema(document: dict[str, Any], stream: str, event: str) -> dict[str, Any]:
    """The ``contentSchema`` of ``event``'s data in a stream's schema (a ``oneOf`` of events, or of streams)."""
    for option in resolve(document, {"$ref": f"#/components/schemas/{stream}"})["oneOf"]:
        if "$ref" in option:
            found = event_data_schema(document, option["$ref"].rsplit("/", 1)[1], event)
            if found:
                return found
        elif option["properties"]["event"]["const"] == event:
            return dict(option["properties"]["data"]["contentSchema"])
    return {}


def parse(text: str) -> list[dict[str, str]]:
    """SSE blocks as the event objects the document describes: ``event``, ``data``, ``id``."""
    events = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.split("\n") if line)
        if "data" in fields:
            events.append(fields)
    return events


@pytest.mark.parametrize(
    "rendered",
    [
        render(TokenRecord.delta(SESSION, 1, 1, "You said: hi", 1)),
        render(TokenRecord.stop(SESSION, 1, 2, StopReason.END_TURN, Usage(3, 4, latency_ms=9), 2)),
        render(TokenRecord.failure(SESSION, 1, 2, ErrorInfo("model_error", "the model failed", False), 2)),
        error_event("timeout", "the generation did not start", retryable=True),
    ],
    ids=["token", "done", "error record", "error"],
)
def test_the_events_the_relay_renders_are_events_the_document_describes(
    document: dict[str, Any], rendered: str
) -> None:
    # GIVEN an event as the relay renders it
    (event,) = parse(rendered)
    # THEN it is an event of both streams, and its data has the shape the document gives that event
    for stream in ("ChatStreamEvent", "TurnStreamEvent"):
        stream_schema = {"$ref": f"#/components/schemas/{stream}"}
        assert [error.message for error in validator(document, stream_schema).iter_errors(event)] == [], stream
        data = event_data_schema(document, stream, event["event"])
        assert data, (stream, event["event"])
        errors = validator(document, data).iter_errors(json.loads(event["data"]))
        assert [error.message for error in errors] == [], (stream, event)


def test_an_event_the_document_does_not_describe_is_refused(document: dict[str, Any]) -> None:
    # GIVEN an event name no stream has THEN the document's stream schema refuses it (the check above can fail)
    turn_stream = validator(document, {"$ref": "#/components/schemas/TurnStreamEvent"})
    assert list(turn_stream.iter_errors({"event": "meta", "data": "{}"}))
    assert list(turn_stream.iter_errors({"event": "token", "data": "{}"}))  # a token without its id
    # AND data of the wrong shape is refused by the event's data schema
    token_data = validator(document, event_data_schema(document, "TurnStreamEvent", "token"))
    assert list(token_data.iter_errors({"text": 1}))


def resolve(document: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """``node``, or what its local ``$ref`` (``#/components/…``) points at."""
    while "$ref" in node:
        target: Any = document
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node = target
    return node
