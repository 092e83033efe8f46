"""Errors on ``/v1`` routes, in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``.

The status codes are those OpenAI's SDKs map to their exception classes (``BadRequestError`` 400,
``AuthenticationError`` 401, ``PermissionDeniedError`` 403, ``NotFoundError`` 404, ``ConflictError`` 409,
``RateLimitError`` 429, ``InternalServerError`` 5xx; 413 is an ``APIStatusError``). :func:`openai_api` wraps a
``/v1`` handler so every error it raises, the relay's own :class:`~chatstream.relay.http.HttpError` included,
is answered in that shape.
"""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

from chatstream.errors import Throttled
from chatstream.relay.http import HttpError, Response, RouteError, clipped, json_response
from chatstream.relay.ratelimit import INSUFFICIENT_QUOTA

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from chatstream.relay.http import Request

logger = logging.getLogger(__name__)

V1_PREFIX = "/v1/"

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
}

# A failed turn's error code → the status a non-streamed answer carries it with (else 500), and so its type.
_FAILED_STATUS = {
    "throttled": 429,
    "invalid_request": 400,
    "context_length_exceeded": 400,
    "proxy_unavailable": 503,
    "model_unavailable": 503,
    "timeout": 503,  # the model or the service did not answer in time (a generation that never began included)
}


def failed_status(code: str) -> int:
    """The status of a turn that failed with ``code``, answered without a stream."""
    return _FAILED_STATUS.get(code, 500)


def error_type(status: int) -> str:
    """OpenAI's error ``type`` for a status (a stream's error takes its failure's status: the same type either way)."""
    return _TYPES.get(status, "server_error")


class OpenAIError(HttpError):
    """An :class:`HttpError` that also names the request field at fault (OpenAI's ``param``)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
        *,
        unexpected: bool = False,
    ) -> None:
        super().__init__(status, code, message, headers, unexpected=unexpected)
        self.param = param


def invalid(message: str, param: str | None, code: str = "invalid_request") -> OpenAIError:
    return OpenAIError(400, code, message, param)


def unsupported(param: str, what: str = "") -> OpenAIError:
    detail = f" ({what})" if what else ""
    return OpenAIError(400, "unsupported_parameter", f"{param}{detail} is not supported by chatstream", param)


def error_response(err: HttpError) -> Response:
    body = {
        "error": {
            "message": clipped(err.message),
            # OpenAI's own type for a spent quota; any other error's by its status
            "type": INSUFFICIENT_QUOTA if err.code == INSUFFICIENT_QUOTA else error_type(err.status),
            "param": clipped(err.param, 200) if isinstance(err, OpenAIError) and err.param is not None else None,
            "code": err.code,
        }
    }
    return replace(json_response(err.status, body, err.headers), unexpected=err.unexpected)


SERVED = (
    "GET /v1/models, POST /v1/responses, GET /v1/responses/{id}, POST /v1/responses/{id}/cancel and "
    "POST /v1/chat/completions"
)

# OpenAI endpoints chatstream does not serve (HTTP_API.md, "/v1"), named in the answer: the first two and the last
# would otherwise read as a response id ("405: use GET"; client.responses.delete(id) is the last).
_NOT_SERVED = (
    ("POST", re.compile(r"/v1/responses/input_tokens/?"), "counting a request's input tokens"),
    ("POST", re.compile(r"/v1/responses/compact/?"), "compacting a conversation"),
    ("GET", re.compile(r"/v1/responses/[^/]+/input_items/?"), "listing a response's input items"),
    ("DELETE", re.compile(r"/v1/responses/[^/]+/?"), "deleting responses is not supported"),
)


def render_error(request: Request, err: HttpError) -> Response:
    """The relay's answer to an error: OpenAI's shape under ``/v1/`` (an unknown path or method too), else native.
    Under ``/v1/`` a path no route serves, or an OpenAI endpoint chatstream does not serve, is a ``404`` that says
    so and lists what it serves."""
    if not request.path.startswith(V1_PREFIX):
        return err.response()
    if isinstance(err, RouteError):
        for method, path, what in _NOT_SERVED:
            if request.method == method and path.fullmatch(request.path):
                message = (
                    f"chatstream does not serve {method} {clipped(request.path, 100)} ({what}); it serves {SERVED}"
                )
                return error_response(OpenAIError(404, "not_found", message))
        if err.status == 404:
            return error_response(
                OpenAIError(404, "not_found", f"no route for {clipped(request.path, 100)}; /v1 has {SERVED}")
            )
    return error_response(err)


_C = TypeVar("_C")


def openai_api(handler: Callable[[_C, Mapping[str, str]], Response]) -> Callable[[_C, Mapping[str, str]], Response]:
    """``handler``, with every error before its response answered in OpenAI's shape."""

    @functools.wraps(handler)
    def wrapped(context: _C, params: Mapping[str, str]) -> Response:
        try:
            return handler(context, params)
        except HttpError as err:
            return error_response(err)
        except Throttled as err:
            logger.warning("throttled before the response", extra={"error": str(err)})
            busy = OpenAIError(
                503, "unavailable", "the service is busy; try again in a second", None, {"Retry-After": "1"}
            )
            return error_response(busy)
        except Exception:
            logger.exception("unexpected failure before the response")
            failure = OpenAIError(500, "internal_error", "the request failed unexpectedly; try again", unexpected=True)
            return error_response(failure)

    return wrapped
