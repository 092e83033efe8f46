"""``Idempotency-Key`` for OpenAI's SDKs on chatstream's ``/v1`` (docs/HTTP_API.md, "Retries"), so their own retries
(``max_retries``, 2 by default) never start a second generation.

The relay records a request's key with the turn it starts; the same request sent again with the key joins that turn
(the same response id, the same completion, the same stream) instead of starting another. Two ways to send one:

- :func:`send_keys`, once, on an SDK client: OpenAI's SDKs (Stainless-generated) already make a key for every
  non-GET request and send it again with each of their retries, but only to an API that names a header for it; this
  names ``Idempotency-Key``::

      from openai import OpenAI
      from chatstream_client.idempotency import send_keys

      client = send_keys(OpenAI(base_url=f"{url}/v1", api_key="unused"))
      client.responses.create(model="chatstream", input="hello")  # retried safely, with the same key

- :func:`key_header`, per call, the SDKs' public way (any language): ``extra_headers=key_header()``; the SDK sends
  the same headers with each retry of the call. Keep the key to send the call again yourself later (within 24 hours)
  and get the same turn: ``extra_headers=key_header(key)``.
"""

from __future__ import annotations

import uuid
from typing import TypeVar

HEADER = "Idempotency-Key"
_Client = TypeVar("_Client")


def new_key() -> str:
    """A new key: 128 random bits, hex."""
    return uuid.uuid4().hex


def key_header(key: str | None = None) -> dict[str, str]:
    """``{"Idempotency-Key": "\\"<key>\\""}`` (an sf-string, as the IETF draft defines the header) for
    ``extra_headers``: ``key``, or a new one."""
    text = key or new_key()
    return {HEADER: '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'}


def send_keys(client: _Client) -> _Client:
    """``client`` (``openai.OpenAI`` or ``openai.AsyncOpenAI``), sending its own idempotency key, one per call and
    the same in each retry of it, as ``Idempotency-Key``. ``TypeError`` for a client that has no such setting (then
    pass ``extra_headers=key_header()`` per call)."""
    if not hasattr(client, "_idempotency_header"):
        raise TypeError(
            f"{type(client).__name__} has no idempotency header to name: pass extra_headers=key_header() on each call"
        )
    client._idempotency_header = HEADER  # the Stainless SDKs' setting (None for OpenAI)
    return client
