"""The relay's route table: the native router and the ``/v1`` router composed, each route reachable, and each
``/v1`` route reaching the endpoint it names (its handler imports the endpoints at the first ``/v1`` request, so
only a request shows a handler handing on to the wrong one)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from chatstream.relay import native
from chatstream.relay.http import Request, Response, json_response
from chatstream.relay.openai import endpoints
from chatstream.relay.openai import routes as v1
from chatstream.relay.service import ROUTES, RelayService
from tests.unit.relay.relay_support import FAST, FakeClock, relay_config

if TYPE_CHECKING:
    from collections.abc import Mapping

    from chatstream.relay.exchange import Exchange

CALLER = {"userArn": "arn:aws:iam::123456789012:user/alice"}  # AWS_IAM: every route but the public ones needs one
# Each /v1 route → the endpoint of chatstream.relay.openai.endpoints that answers it.
V1_ENDPOINTS = {
    ("GET", "/v1/models"): "list_models",
    ("GET", "/v1/models/{model}"): "get_model",
    ("POST", "/v1/responses"): "create_response",
    ("GET", "/v1/responses/{response_id}"): "get_response",
    ("POST", "/v1/responses/{response_id}/cancel"): "cancel_response",
    ("POST", "/v1/chat/completions"): "create_chat_completion",
}


def _filled(template: str) -> str:
    """A path the template matches: each ``{name}`` replaced by ``p-name``."""
    return "/".join(
        f"p-{part[1:-1]}" if part.startswith("{") and part.endswith("}") else part for part in template.split("/")
    )


def test_the_route_table_is_the_native_routes_then_the_v1_routes_under_v1() -> None:
    # GIVEN the two routers and the table the relay dispatches with
    composed = [(route.method, route.template, route.handler) for route in ROUTES.routes]
    # THEN the table is the native routes as declared, then the /v1 routes under their prefix, nothing else
    assert composed == [(r.method, r.template, r.handler) for r in native.router.routes] + [
        (r.method, "/v1" + r.template, r.handler) for r in v1.router.routes
    ]
    assert {(method, template) for method, template, _ in composed if template.startswith("/v1/")} == set(V1_ENDPOINTS)


def test_every_route_is_the_first_to_match_its_own_paths() -> None:
    # GIVEN every route, and a path its template matches
    for route in ROUTES.routes:
        path = _filled(route.template)
        # WHEN the table looks for the route of that method and path
        first = next(r for r in ROUTES.routes if r.method == route.method and r.match(path) is not None)
        # THEN it finds this route (none declared earlier hides it), and its handler is a module's function
        assert first is route, route.template
        assert route.handler.__qualname__ == route.handler.__name__, route.template


@pytest.fixture
def service() -> RelayService:
    return RelayService(None, None, relay_config("t"), clock=FakeClock().as_clock(), settings=FAST)  # type: ignore[arg-type]


def test_every_v1_route_reaches_the_endpoint_it_names(monkeypatch: pytest.MonkeyPatch, service: RelayService) -> None:
    # GIVEN each /v1 endpoint replaced by one that answers with its own name and the parameters it got
    def answering_as(name: str) -> object:
        def endpoint(exchange: Exchange, params: Mapping[str, str]) -> Response:
            return json_response(200, {"endpoint": name, "params": dict(params)})

        return endpoint

    for name in V1_ENDPOINTS.values():
        monkeypatch.setattr(endpoints, name, answering_as(name))
    for (method, template), name in V1_ENDPOINTS.items():
        # WHEN a request for the route arrives
        response = service.handle(Request(method=method, path=_filled(template), iam=CALLER))
        # THEN the endpoint of that name answers it, with the path's parameters
        answer = json.loads("".join(response.body))
        params = {part[1:-1]: f"p-{part[1:-1]}" for part in template.split("/") if part.startswith("{")}
        assert (response.status_code, answer) == (200, {"endpoint": name, "params": params}), template
