"""The relay's entry (:class:`RelayService`): one request in, its response out, on an injected ChatTable, Lambda
client and clock.

The routes are declared once, at import, each area on its own router: the native API's in
:mod:`chatstream.relay.native`, OpenAI's in :mod:`chatstream.relay.openai.routes`; :data:`ROUTES` composes them
(``/v1`` under its prefix) and is described by the OpenAPI document served at ``GET /openapi.json``
(:mod:`chatstream.relay.openapi`). Each request is answered by its route's handler on an
:class:`~chatstream.relay.exchange.Exchange`; the auth mode's :class:`~chatstream.relay.identity.Identity` is chosen
once, when the service is built, and names the caller before every route that is not public (the router's
``authenticate``): under ``AUTH_TYPE=JWT`` with the service's :class:`~chatstream.relay.bearer.BearerVerifier`,
one per execution environment, which holds the issuer's keys.

Failures that are nobody's input (DynamoDB throttling before a stream starts) answer
``503 unavailable`` with ``Retry-After``; anything unexpected ``500 internal_error`` — never a traceback.
"""

from __future__ import annotations

import logging
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from chatstream.errors import Throttled
from chatstream.relay import native
from chatstream.relay.bearer import BearerVerifier
from chatstream.relay.exchange import NON_STREAMED_WAIT_S, Exchange
from chatstream.relay.follow import Clock, FollowSettings
from chatstream.relay.http import Request, Response, Router, error_response
from chatstream.relay.identity import identity_for
from chatstream.relay.openai import routes as v1
from chatstream.relay.openai.errors import render_error

if TYPE_CHECKING:
    from collections.abc import Callable

    from mypy_boto3_lambda import LambdaClient

    from chatstream.config import RelayConfig
    from chatstream.relay.identity import Identity
    from chatstream.table import ChatTable

logger = logging.getLogger(__name__)

# Every route the relay serves; an error outside a handler (no route for the path, or not with this method, or no
# caller the auth mode accepts) is answered in OpenAI's shape under /v1/, else in the native one. Every route but the
# public ones names its caller before its handler runs.
ROUTES: Router[Exchange] = Router(render_error=render_error, authenticate=Exchange.authenticate)
ROUTES.include_router(native.router)
ROUTES.include_router(v1.router, prefix="/v1")


@dataclass
class RelayService:
    """Serves one request at a time; build it once per execution environment."""

    table: ChatTable
    lambda_client: LambdaClient
    config: RelayConfig
    clock: Clock = field(default_factory=Clock)
    settings: FollowSettings | None = None
    non_streamed_wait_s: float = NON_STREAMED_WAIT_S
    # AUTH_TYPE=JWT: the token verifier (built from the configuration when not given; the function gives it its SSM
    # reader of the user pool's client ids).
    verifier: BearerVerifier | None = None
    # Proxy invocations that failed (the turn ended proxy_unavailable) so far in this environment: the function counts
    # each request's for its alarm, as a turn the relay could not start is its own failure, not a model's.
    proxy_invoke_failures: int = field(default=0, init=False)
    # Turns the callers' budgets refused so far in this environment, counted for the Refusals metric as above.
    refusals: int = field(default=0, init=False)
    # A request's reads that need not hold up its answer (the caller's standing, read beside the proxy's invoke).
    background: Executor = field(
        default_factory=lambda: ThreadPoolExecutor(max_workers=2, thread_name_prefix="relay-background")
    )
    # Who owns a session, under the configuration's auth mode.
    identity: Identity = field(init=False)

    def __post_init__(self) -> None:
        if self.settings is None:
            self.settings = FollowSettings.from_config(self.config)
        if self.verifier is None and self.config.jwt is not None:
            self.verifier = BearerVerifier(self.config.jwt)
        self.identity = identity_for(self.config.auth_type, self.verifier)

    def handle(self, request: Request, remaining_ms: Callable[[], int] | None = None) -> Response:
        """Answer one request. ``remaining_ms`` is the invocation's remaining time."""
        clock = self.clock if remaining_ms is None else replace(self.clock, remaining_ms=remaining_ms)
        exchange = Exchange(self, request, clock, clock.monotonic())
        try:
            response = ROUTES.dispatch(request, exchange)
        except Throttled as err:
            logger.warning("throttled before the response", extra={"error": str(err)})
            return error_response(
                503, "unavailable", "the service is busy; try again in a second", {"Retry-After": "1"}
            )
        except Exception:
            logger.exception("unexpected failure before the response")
            failed = error_response(500, "internal_error", "the request failed unexpectedly; try again")
            return replace(failed, unexpected=True)
        return replace(response, owner=exchange.known_owner) if exchange.known_owner else response
