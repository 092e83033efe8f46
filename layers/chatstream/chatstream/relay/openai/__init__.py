"""OpenAI's HTTP API under ``/v1`` (HTTP_API.md): Responses, Chat Completions and Models, on the relay's turns.

``routes`` (the ``/v1`` router, light, imported at init), ``endpoints`` (the handlers, imported by the first ``/v1``
request), ``requests`` (the bodies, validated), ``responses`` and ``chat`` (the objects and events), ``turn_events``
(a turn's native stream, read back), ``errors`` (OpenAI's error shape).
"""
