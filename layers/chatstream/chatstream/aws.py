"""The functions' botocore clients, built at cold start.

AWS calls are most of each function's CPU (70-85% of what the relay, the proxy and the consumer spend on a chat,
measured locally), and botocore repeats on every call work whose answer never changes. Two of those are done once:

- the ``User-Agent`` header (~8% of a DynamoDB call's CPU): botocore assembles it from its parts twice per call
  (when it serializes the request, and again just before sending, to add the features the call used), sanitizing
  every part character by character. Its parts are fixed per client but for the call's feature ids, so each client
  keeps the header it built per set of features: the same header, built once.
- parameter validation (~3%): every request is built by an adapter (``chatstream.table``, ``kinesis``, ``dlq``)
  from typed values, and the service validates what it receives anyway: a wrong request fails as the service's
  ``ClientError`` (``ValidationException``) rather than botocore's ``ParamValidationError``, an error either way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from botocore.config import Config
from botocore.context import get_context

from chatstream.config import AWS_RETRIES

if TYPE_CHECKING:
    from collections.abc import Callable

    from botocore.session import Session

# Every function's client settings: standard retries (chatstream.config) and no client-side parameter validation.
CLIENT_CONFIG = AWS_RETRIES.merge(Config(parameter_validation=False))


def create_client(session: Session, service_name: str, config: Config | None = None) -> Any:
    """A client of ``session`` (one per execution environment) with :data:`CLIENT_CONFIG` (``config`` merged over
    it) and its ``User-Agent`` header built once per set of features."""
    client = session.create_client(
        service_name, config=CLIENT_CONFIG if config is None else CLIENT_CONFIG.merge(config)
    )
    creator = getattr(client, "_user_agent_creator", None)
    if creator is not None:
        # Both places botocore builds the header call this object's to_string: an attribute of the instance
        # answers for the method.
        creator.to_string = _memoized_user_agent(creator.to_string)
    return client


def _memoized_user_agent(build: Callable[[], str]) -> Callable[[], str]:
    headers: dict[frozenset[str], str] = {}

    def to_string() -> str:
        context = get_context()
        features = frozenset(context.features) if context is not None else frozenset()
        header = headers.get(features)
        if header is None:
            header = headers[features] = build()
        return header

    return to_string
