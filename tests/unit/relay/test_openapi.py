"""The OpenAPI document (``chatstream/relay/openapi.json``): valid OpenAPI 3.1, the relay's routes exactly, served
at ``GET /openapi.json``, and the SSE events the relay renders are the events it describes."""

from __future__ import annotations

import copy
import json
import re
from typing import TYPE_CHECKING, Any

import pytest
from jsonschema import Draft202012Validator
from openapi_spec_validator import OpenAPIV31SpecValidator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from chatstream.records import ErrorInfo, TokenRecord, ToolCallRef, Usage
from chatstream.relay.follow import error_event, render, render_text
from chatstream.relay.http import HttpError, Request
from chatstream.relay.idempotency import parse_key
from chatstream.relay.openai.endpoints import MODEL_ALIAS
from chatstream.relay.openapi import DOCUMENT, DOCUMENT_PATH
from chatstream.relay.pace import TextEvent
from chatstream.relay.service import ROUTES, RelayService
from chatstream.status import StopReason
from chatstream.text import is_blank
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


def test_the_public_operations_are_the_public_routes_and_every_other_takes_a_bearer_token(
    document: dict[str, Any],
) -> None:
    # GIVEN the document's security: bearerAuth or none for every operation, unless the operation says otherwise
    scheme = document["components"]["securitySchemes"]["bearerAuth"]
    assert (scheme["type"], scheme["scheme"], scheme["bearerFormat"]) == ("http", "bearer", "JWT")
    assert document["security"] == [{"bearerAuth": []}, {}]
    operations = {
        (method.upper(), path): operation
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if method in METHODS
    }
    # THEN the operations that need no token (security: []) are the routes the relay answers without a caller
    public = {key for key, operation in operations.items() if operation.get("security") == []}
    assert public == {(route.method, route.template) for route in ROUTES.routes if route.public}
    # AND every other one says how it refuses a request without an accepted token
    for key, operation in operations.items():
        if key not in public:
            assert "security" not in operation, key
            assert {"400", "401", "403", "503"} <= operation["responses"].keys(), key


def test_every_operation_names_an_id_and_its_error_codes(document: dict[str, Any]) -> None:
    # GIVEN every operation THEN it has an operationId, and each error answer lists the codes it can carry (a 500
    # may carry a failed generation's own code)
    for path, item in document["paths"].items():
        for method, operation in item.items():
            assert operation.get("operationId"), (method, path)
            for status, answer in operation["responses"].items():
                answer = resolve(document, answer)
                if int(status) >= 400:
                    code = answer["content"]["application/json"]["schema"]["properties"]["error"]["properties"]["code"]
                    assert code.get("enum") or (status == "500" and code == {"type": "string"}), (method, path, status)


def template_defaults() -> tuple[int, str]:
    parameters = Template.load().raw["Parameters"]
    return int(parameters["MaxTokensLimit"]["Default"]), str(parameters["ModelId"]["Default"])


def get_document(shared_table: SharedTable, **config: str) -> Response:
    """GET /openapi.json, as a real-shaped Function URL event, from a relay configured with ``config``."""
    service = RelayService(
        shared_table.table,
        None,  # type: ignore[arg-type]
        relay_config(shared_table.name, **config),
        clock=FakeClock().as_clock(),
        settings=FAST,
    )
    raw = copy.deepcopy(load_event("relay-health.json"))
    raw["rawPath"] = "/openapi.json"
    raw["requestContext"]["http"]["path"] = "/openapi.json"
    return service.handle(Request.from_event(raw))


def test_the_document_holds_the_templates_defaults() -> None:
    max_tokens_limit, model_id = template_defaults()
    assert DOCUMENT.defaults() == (max_tokens_limit, (model_id, MODEL_ALIAS))


def test_a_relay_with_the_templates_defaults_serves_the_file_byte_for_byte(shared_table: SharedTable) -> None:
    # GIVEN a relay configured as the template's defaults WHEN asked for GET /openapi.json
    max_tokens_limit, model_id = template_defaults()
    response = get_document(shared_table, MAX_TOKENS_LIMIT=str(max_tokens_limit), MODEL_ID=model_id)
    # THEN it answers the file, byte for byte, as JSON, with every API answer's headers
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "application/json"
    assert response.headers["Cache-Control"] == "no-store" and response.headers["X-Content-Type-Options"] == "nosniff"
    assert "".join(response.body) == DOCUMENT_PATH.read_text(encoding="utf-8")


def test_a_relay_serves_its_own_deployment_values_in_the_document(
    shared_table: SharedTable, document: dict[str, Any]
) -> None:
    # GIVEN a relay with its own MaxTokensLimit and model
    response = get_document(shared_table, MAX_TOKENS_LIMIT="100", MODEL_ID="anthropic.claude-x")
    served = json.loads("".join(response.body))
    # THEN every schema marked with a deployment value holds the relay's, and nothing else differs from the file
    schemas = served["components"]["schemas"]
    assert schemas["ChatRequest"]["properties"]["max_tokens"]["maximum"] == 100
    assert schemas["ChatCompletionRequest"]["properties"]["max_completion_tokens"]["maximum"] == 100
    assert schemas["ModelId"]["enum"] == ["anthropic.claude-x", MODEL_ALIAS]
    assert served != document
    for name in ("ChatRequest", "ResponsesRequest", "ChatCompletionRequest"):
        for field in schemas[name]["properties"].values():
            if field.get("x-deployment") == "MaxTokensLimit":
                field["maximum"] = DOCUMENT.defaults()[0]
    schemas["ModelId"]["enum"] = list(DOCUMENT.defaults()[1])
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
        render_text(TextEvent("token", 2, "said", start=4, last=False)),
        render_text(TextEvent("reasoning", 1, "Let me think", start=0, last=True)),
        render(TokenRecord.tool_use(SESSION, 1, 3, ToolCallRef(0, "tooluse_a", "get_weather"), '{"city"', 3)),
        render(TokenRecord.tool_use(SESSION, 1, 4, ToolCallRef(1, "tooluse_b", "get_time"), "", 4, end=True)),
        render(TokenRecord.stop(SESSION, 1, 2, StopReason.END_TURN, Usage(3, 4, latency_ms=9), 2)),
        render(TokenRecord.failure(SESSION, 1, 2, ErrorInfo("model_error", "the model failed", False), 2)),
        error_event("timeout", "the generation did not start", retryable=True),
    ],
    ids=["token", "paced token", "reasoning", "tool call", "tool call end", "done", "error record", "error"],
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


def patterns(node: Any) -> list[str]:
    """Every ``pattern`` of a schema under ``node``."""
    if isinstance(node, dict):
        found = [node["pattern"]] if isinstance(node.get("pattern"), str) else []
        return found + [pattern for value in node.values() for pattern in patterns(value)]
    return [pattern for value in node for pattern in patterns(value)] if isinstance(node, list) else []


def test_the_documents_patterns_and_the_relays_checks_agree_on_whitespace(document: dict[str, Any]) -> None:
    # GIVEN the document's "not only whitespace" patterns (JSON Schema's regular expressions are ECMA-262's): one
    # pattern, wherever a text must not be blank
    not_blank = {pattern for pattern in patterns(document) if pattern.startswith("[^")}
    assert len(not_blank) == 1, not_blank
    pattern = re.compile(not_blank.pop())
    # THEN for every code point, the pattern finds it exactly when the relay does not call it blank
    disagree = [
        hex(code)
        for code in range(0x110000)
        if not 0xD800 <= code <= 0xDFFF and bool(pattern.search(chr(code))) == is_blank(chr(code))
    ]
    assert disagree == []
    # AND blank is what any of ECMA-262, Python and Java calls whitespace: U+FEFF is ECMA-262's only, U+001C to
    # U+001F and U+0085 Python's only, U+180E Java 8's (a space separator before Unicode 6.3)
    assert is_blank(" \t\u3000\ufeff\x1c\x1d\x1e\x1f\x85\u180e")
    assert not is_blank("\x00") and not is_blank("\u200b") and not is_blank("\x1bx")


@pytest.mark.parametrize(
    "value",
    [
        '"8e03978e-40d5-43e8-bc93-6894a57f9324"',
        "stainless-python-retry-8e03978e",
        '"a\\"b\\\\c"',
        '"with space"',
        '""',
        '"a", "b"',
        '"a";p=1',
        "a b",
        '"unterminated',
        '"bad\\escape"',
        '"é"',
        "k" * 255,
        "k" * 256,
        '"' + "k" * 255 + '"',
        '"' + "k" * 254 + '\\""',
        '"' + "k" * 256 + '"',
    ],
)
def test_the_documents_idempotency_key_is_the_relays(document: dict[str, Any], value: str) -> None:
    # GIVEN the document's pattern for the header WHEN a value is checked by it and by the relay THEN they agree
    pattern = document["components"]["parameters"]["IdempotencyKey"]["schema"]["pattern"]
    try:
        parse_key(value)
        accepted = True
    except HttpError:
        accepted = False
    assert bool(re.fullmatch(pattern, value)) == accepted
