"""Bytes on the wire: events in, Function URL preludes, body chunks and buffered results out."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from awslambdaric.lambda_runtime_exception import FaultException

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence

HTTP_INTEGRATION_RESPONSE = "application/vnd.awslambda.http-integration-response"
PRELUDE_DELIMITER = b"\x00" * 8
OCTET_STREAM = "application/octet-stream"
#: A header name is a token (RFC 9110 section 5.1), as Node's http module checks it (``_http_common.js``).
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
#: What a header value cannot hold, as Node's http module checks it: anything but HTAB, SP, visible ASCII and
#: obs-text (RFC 9110 section 5.5), so no CR, LF or NUL, and no character beyond U+00FF (a header is octets).
_NOT_IN_HEADER_VALUE = re.compile(r"[^\t\x20-\x7e\x80-\xff]")


def decode_event(body: bytes, content_type: str | None) -> object:
    """The handler's event: JSON unless the Runtime API says otherwise (then the raw bytes, as awslambdaric)."""
    if content_type is not None and content_type.split(";")[0].strip() != "application/json":
        return body
    try:
        return json.loads(body)
    except ValueError as err:
        raise FaultException(FaultException.UNMARSHAL_ERROR, f"Unable to unmarshal input: {err}", None) from err


def is_function_url_event(event: object) -> bool:
    """A Function URL (payload format 2.0) request: it has ``requestContext.http``."""
    if not isinstance(event, dict):
        return False
    request_context = event.get("requestContext")
    return isinstance(request_context, dict) and isinstance(request_context.get("http"), dict)


def http_prelude(status_code: int, headers: Mapping[str, str], cookies: Sequence[str]) -> bytes:
    """The JSON prelude and the 8 NUL bytes that precede the body of an HTTP integration response."""
    if isinstance(status_code, bool) or not isinstance(status_code, int) or not 100 <= status_code <= 599:
        raise _marshal_error(f"invalid statusCode {status_code!r}")
    prelude = {"statusCode": status_code, "headers": _checked_headers(headers), "cookies": _checked_cookies(cookies)}
    return json.dumps(prelude, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + PRELUDE_DELIMITER


def _checked_headers(headers: object) -> dict[str, str]:
    """The headers as they are, when each name is a token and each value a string fit for a header line.

    Only strings, as the Function URL response format has them: a number or a list is the handler's mistake, not
    something to guess a spelling for (``str(True)`` is ``"True"``). An error names the header and the character at
    fault, never the value: a header can carry a secret.
    """
    if not isinstance(headers, Mapping):
        raise _marshal_error(f"headers must be a mapping, not {type(headers).__name__}")
    for name, value in headers.items():
        if not isinstance(name, str) or not _HEADER_NAME.fullmatch(name):
            raise _marshal_error(f"invalid header name {name!r}")
        _check_field(f"header {name!r}", value)
    return dict(headers)


def _checked_cookies(cookies: object) -> list[str]:
    if not isinstance(cookies, list | tuple):
        raise _marshal_error(f"cookies must be a list of strings, not {type(cookies).__name__}")
    for index, cookie in enumerate(cookies):
        _check_field(f"cookie {index}", cookie)
    return list(cookies)


def _check_field(what: str, value: object) -> None:
    if not isinstance(value, str):
        raise _marshal_error(f"{what} must be a string, not {type(value).__name__}")
    bad = _NOT_IN_HEADER_VALUE.search(value)
    if bad is not None:
        raise _marshal_error(
            f"{what} has {bad.group()!r} at {bad.start()}: a header value cannot hold CR, LF, NUL,"
            " other control characters or characters beyond U+00FF"
        )


def _marshal_error(reason: str) -> FaultException:
    return FaultException(FaultException.MARSHAL_ERROR, f"Unable to marshal response: {reason}", None)


def encode_chunk(part: object) -> bytes:
    """One body item as bytes: ``str`` as UTF-8, bytes-like as is; anything else is the handler's mistake."""
    if isinstance(part, str):
        return part.encode("utf-8")
    if isinstance(part, bytes | bytearray | memoryview):
        return bytes(part)
    raise TypeError(f"a streamed response body item must be str or bytes, not {type(part).__name__}")


def encode_chunks(parts: Iterable[object]) -> Iterator[bytes]:
    """The body items as non-empty byte strings (an empty chunk would end chunked transfer coding)."""
    for part in parts:
        data = encode_chunk(part)
        if data:
            yield data


def http_result_from_dict(result: Mapping[str, object]) -> tuple[int, dict[str, str], list[str], bytes]:
    """A Function URL style ``{"statusCode", "headers", "cookies", "body", "isBase64Encoded"}`` result."""
    status = result.get("statusCode")
    headers = result.get("headers") or {}
    cookies = result.get("cookies") or []
    body = result.get("body")
    if not isinstance(status, int) or not isinstance(headers, dict) or not isinstance(cookies, list):
        raise FaultException(
            FaultException.MARSHAL_ERROR,
            "Unable to marshal response: statusCode must be an integer, headers an object, cookies a list",
            None,
        )
    if body is None:
        data = b""
    elif isinstance(body, str) and result.get("isBase64Encoded"):
        import base64
        import binascii

        try:
            data = base64.b64decode(body, validate=True)
        except binascii.Error as err:
            raise FaultException(
                FaultException.MARSHAL_ERROR, f"Unable to marshal response: body is not base64: {err}", None
            ) from err
    elif isinstance(body, str):
        data = body.encode("utf-8")
    else:
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
    return status, headers, cookies, data  # http_prelude checks the headers and cookies


def buffered_result(result: object) -> tuple[bytes, str]:
    """A plain return value as one response body, marshalled exactly as the managed runtime does."""
    from awslambdaric.lambda_runtime_marshaller import LambdaMarshaller

    body, content_type = LambdaMarshaller().marshal_response(result)
    return (body if isinstance(body, bytes) else body.encode("utf-8")), content_type
