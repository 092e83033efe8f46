"""RelayFunction: the HTTP API (HTTP_API.md) on a Function URL in RESPONSE_STREAM mode.

Runs on the streaming runtime layer (``AWS_LAMBDA_EXEC_WRAPPER=/opt/bin/chatstream-streaming``) and
returns a ``StreamingResponse`` whose body items reach the client as they are produced. The logic
lives in ``chatstream.relay``; this module builds the clients once per execution environment, logs
and measures. A stream's metrics are flushed when its body ends (the handler returns before that):
``StreamsOpened``, ``EventsSent``, ``ClientTimeToFirstToken`` (request to first token event, new
turns only), ``Reconnects`` and ``StreamErrors``; a request's ``Refusals`` (turns the caller's budget refused) and
``InternalErrors`` when it has them. Each request's log lines name its caller (``owner``) when its
route asked who it is; never a token.

Under ``AUTH_TYPE=JWT`` one :class:`~chatstream.relay.bearer.BearerVerifier` serves the execution environment: it
fetches the issuer's keys when the first token arrives (never at init) and keeps them. With the template's user pool
(``JWT_CLIENT_IDS_PARAMETER``) it reads the accepted client ids from SSM once, when first needed, with an SSM client
built then (an environment that never needs one builds none).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, cast

from chatstream.cold_start import collector_paused

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from aws_lambda_powertools.utilities.typing import LambdaContext
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_lambda import LambdaClient
    from mypy_boto3_ssm import SSMClient

    from chatstream.config import JwtSettings
    from chatstream.relay.http import StreamInfo

# Init: every import and client below is built with the garbage collector paused (chatstream/cold_start.py says why).
with collector_paused():
    import botocore.session
    from aws_lambda_powertools import Metrics
    from aws_lambda_powertools.logging import correlation_paths
    from aws_lambda_powertools.metrics import MetricUnit
    from botocore.config import Config

    from chatstream.aws import create_client
    from chatstream.config import RelayConfig
    from chatstream.logs import function_logger
    from chatstream.relay.bearer import BearerVerifier, ParameterClientIds
    from chatstream.relay.follow import StreamOutcome
    from chatstream.relay.http import Request, StreamKind
    from chatstream.relay.service import RelayService
    from chatstream.table import ChatTable
    from chatstream.tracing import traced_handler
    from streaming_runtime import StreamingResponse

    logger = function_logger()  # chatstream's own modules log through it too (chatstream/logs.py)
    metrics = Metrics()
    # X-Ray subsegments for its AWS calls only with TraceAwsCalls=true (chatstream/tracing.py)
    handler_traced = traced_handler(capture_response=False)

    CONFIG = RelayConfig.from_env(os.environ)
    _session = botocore.session.get_session()
    DYNAMODB = cast("DynamoDBClient", create_client(_session, "dynamodb"))
    # The proxy is invoked asynchronously: Lambda answers at once, so a short read timeout is plenty.
    LAMBDA = cast("LambdaClient", create_client(_session, "lambda", Config(connect_timeout=5, read_timeout=10)))

    def _bearer_verifier(settings: JwtSettings | None) -> BearerVerifier | None:
        """AUTH_TYPE=JWT's verifier for this environment (the module docstring); ``None`` under the other modes."""
        if settings is None:
            return None
        client_ids = None
        if settings.client_ids_parameter:
            client_ids = ParameterClientIds(
                lambda: cast("SSMClient", create_client(_session, "ssm")), settings.client_ids_parameter
            )
        return BearerVerifier(settings, client_ids=client_ids)

    SERVICE = RelayService(
        table=ChatTable(DYNAMODB, CONFIG.table.table_name, ttl_days=CONFIG.table.ttl_days),
        lambda_client=LAMBDA,
        config=CONFIG,
        verifier=_bearer_verifier(CONFIG.jwt),
    )


@logger.inject_lambda_context(correlation_id_path=correlation_paths.LAMBDA_FUNCTION_URL, clear_state=True)
@handler_traced
def handler(event: dict[str, Any], context: LambdaContext) -> StreamingResponse:
    request = Request.from_event(event)
    failed_invokes, refusals = SERVICE.proxy_invoke_failures, SERVICE.refusals
    response = SERVICE.handle(request, remaining_ms=context.get_remaining_time_in_millis)
    if response.owner:
        logger.append_keys(owner=response.owner)
    logger.info(
        "request answered", extra={"method": request.method, "path": request.path, "status": response.status_code}
    )
    # The relay's own failures: a 500 it answered itself, a turn it could not start (invoking the proxy failed). Its
    # invocation succeeds either way, so Lambda's Errors metric does not see them (RelayInternalErrorsAlarm does).
    internal_errors = int(response.unexpected) + SERVICE.proxy_invoke_failures - failed_invokes
    if internal_errors:
        metrics.add_metric(name="InternalErrors", unit=MetricUnit.Count, value=internal_errors)
    refused = SERVICE.refusals - refusals
    if refused:  # turns the caller's budget refused (the 429 was logged with its owner: CallerRefusalsRule)
        metrics.add_metric(name="Refusals", unit=MetricUnit.Count, value=refused)
    body: Iterable[str] = response.body
    if response.stream is not None:
        logger.append_keys(session_id=response.stream.session_id, turn=response.stream.turn)
        body = _measured(response.body, response.stream)
    elif internal_errors or refused:
        metrics.flush_metrics()
    return StreamingResponse(status_code=response.status_code, headers=dict(response.headers), body=body)


def _measured(body: Iterable[str], stream: StreamInfo) -> Iterator[str]:
    """The stream's body; when it ends, its metrics are flushed (a client's disconnect does not end it on Lambda)."""
    metrics.add_metric(name="StreamsOpened", unit=MetricUnit.Count, value=1)
    try:
        yield from body
    finally:
        stats = stream.stats
        metrics.add_metric(name="EventsSent", unit=MetricUnit.Count, value=stats.events_sent)
        if stream.kind is StreamKind.CHAT and stats.first_token_at is not None:
            ttft_ms = (stats.first_token_at - stream.started_at) * 1000
            metrics.add_metric(name="ClientTimeToFirstToken", unit=MetricUnit.Milliseconds, value=ttft_ms)
        if stats.outcome is StreamOutcome.RECONNECT:
            metrics.add_metric(name="Reconnects", unit=MetricUnit.Count, value=1)
        if stats.outcome is StreamOutcome.ERROR:
            metrics.add_metric(name="StreamErrors", unit=MetricUnit.Count, value=1)
        if stats.error_code == "relay_error":  # the relay could not read its own table: its failure, not the model's
            metrics.add_metric(name="InternalErrors", unit=MetricUnit.Count, value=1)
        logger.info(
            "stream ended",
            extra={
                "kind": stream.kind,
                "outcome": stats.outcome,
                "error_code": stats.error_code,
                "events": stats.events_sent,
                "tokens": stats.tokens_sent,
            },
        )
        metrics.flush_metrics()
