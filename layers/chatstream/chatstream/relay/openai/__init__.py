"""OpenAI's HTTP API under ``/v1`` (HTTP_API.md): Responses, Chat Completions and Models, on the relay's turns.

``endpoints`` (the handlers, registered in the relay's one route table), ``requests`` (the bodies, validated),
``responses`` and ``chat`` (the objects and events), ``turn_events`` (a turn's native stream, read back), ``errors``
(OpenAI's error shape).
"""
