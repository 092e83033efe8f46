"""The ``/v1`` routes (OpenAI's Models, Responses and Chat Completions APIs), declared on their own :data:`router`,
which the relay serves under ``/v1``.

Each handler here hands the request to its endpoint in :mod:`chatstream.relay.openai.endpoints`, imported by the
first ``/v1`` request rather than at init: with the modules it imports (the request parsers, the response and chunk
builders) it cost ~8 ms of the relay's cold start (bench/README.md, "Where init goes"), which every native request
paid for nothing. The handler references are checked all the same: by mypy (each names its endpoint), and by
``tests/unit/relay/test_routes.py``, which sends a request to every route.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from chatstream.relay.http import Router

if TYPE_CHECKING:
    from collections.abc import Mapping

    from chatstream.relay.exchange import Exchange
    from chatstream.relay.http import Response

router: Router[Exchange] = Router()


@router.get("/models")
def list_models(exchange: Exchange, params: Mapping[str, str]) -> Response:
    from chatstream.relay.openai import endpoints

    return endpoints.list_models(exchange, params)


@router.get("/models/{model}")
def get_model(exchange: Exchange, params: Mapping[str, str]) -> Response:
    from chatstream.relay.openai import endpoints

    return endpoints.get_model(exchange, params)


@router.post("/responses")
def create_response(exchange: Exchange, params: Mapping[str, str]) -> Response:
    from chatstream.relay.openai import endpoints

    return endpoints.create_response(exchange, params)


@router.get("/responses/{response_id}")
def get_response(exchange: Exchange, params: Mapping[str, str]) -> Response:
    from chatstream.relay.openai import endpoints

    return endpoints.get_response(exchange, params)


@router.post("/responses/{response_id}/cancel")
def cancel_response(exchange: Exchange, params: Mapping[str, str]) -> Response:
    from chatstream.relay.openai import endpoints

    return endpoints.cancel_response(exchange, params)


@router.post("/chat/completions")
def create_chat_completion(exchange: Exchange, params: Mapping[str, str]) -> Response:
    from chatstream.relay.openai import endpoints

    return endpoints.create_chat_completion(exchange, params)
