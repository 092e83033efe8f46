"""The ``Idempotency-Key`` request header (the IETF httpapi working group's draft, as Stripe uses it) on the requests
that start a turn: ``POST /chat``, ``POST /v1/responses``, ``POST /v1/chat/completions``.

A request with a key starts its turn and records the key in the same transaction
(:mod:`chatstream.table.idempotency`); the same request sent again with the key (the same owner, method, path and
body: :func:`fingerprint`) starts nothing and joins that turn: its answer is the first one's (the stream from its
start, or from ``Last-Event-ID``; the same completion; the same response id). The same key with another request is
``422 idempotency_key_reused``, as the draft says. Where a stream makes the relay differ from the draft: a request
sent again while its turn still generates joins it (the draft suggests ``409``), since a client that lost its
connection before the first byte wants the reply, not a conflict.

The header's value is a Structured Field string (RFC 8941), ``"…"``, as the draft defines it; a bare value of the
same characters (``Idempotency-Key: 7c3f…``, as Stripe's clients and OpenAI's SDKs write it) is taken as the same
key. At most :data:`MAX_KEY_CHARS` characters; anything else (a list, parameters, characters outside printable
ASCII, an empty key) is ``400 invalid_request``.
"""

from __future__ import annotations

import hashlib
import json
import re

from chatstream.relay.http import HttpError, clipped

HEADER = "Idempotency-Key"
MAX_KEY_CHARS = 255
# RFC 8941 3.3.3: sf-string = DQUOTE *( unescaped / escaped ) DQUOTE; unescaped: printable ASCII but " and \
_SF_STRING = re.compile(r'"((?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])*)"')
_BARE = re.compile(r"[\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]+")  # the same, without space, comma or semicolon
_ESCAPE = re.compile(r'\\(["\\])')


def parse_key(value: str | None) -> str | None:
    """The key an ``Idempotency-Key`` header carries, or None when there is none; ``400 invalid_request`` when it is
    not one."""
    if value is None:
        return None
    text = value.strip(" \t")  # HTTP's optional whitespace around a field value
    quoted = _SF_STRING.fullmatch(text)
    if quoted is not None:
        key = _ESCAPE.sub(r"\1", quoted[1])
    elif _BARE.fullmatch(text):
        key = text
    else:
        raise HttpError(
            400,
            "invalid_request",
            f"{HEADER} must be one string of printable ASCII characters, quoted as the draft has it "
            f'("8e03978e-40d5-43e8-bc93-6894a57f9324"), got {clipped(text, 80)!r}',
        )
    if not key or len(key) > MAX_KEY_CHARS:
        raise HttpError(400, "invalid_request", f"{HEADER} must be 1 to {MAX_KEY_CHARS} characters, got {len(key)}")
    return key


def fingerprint(method: str, path: str, body: bytes | None) -> str:
    """What makes two requests the same request: the method, the path and the body, as JSON without its whitespace
    and key order (a client that writes the same body again may order its fields otherwise); a body that is not JSON
    as its bytes. SHA-256, hex."""
    raw = body or b""
    try:
        canonical = json.dumps(json.loads(raw), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    except (ValueError, UnicodeDecodeError):
        canonical = raw
    return hashlib.sha256(b"%s %s\n%s" % (method.encode(), path.encode(), canonical)).hexdigest()


def reused(key: str) -> HttpError:
    """``422``: the key names a turn another request started."""
    return HttpError(
        422,
        "idempotency_key_reused",
        f"{HEADER} {clipped(key, 80)!r} was sent with another request (another path or body) within 24 hours; a new "
        "request needs a new key",
    )
