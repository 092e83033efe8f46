"""The proxy's invocation event: what the relay asks ProxyFunction to generate (events/proxy-generate.json).

The relay builds it with :meth:`GenerateRequest.to_event`; the proxy (and the reaper, from a failed
invocation's destination record) parses it with :meth:`GenerateRequest.from_event`. The limit on a user
message, :data:`MAX_MESSAGE_CHARS`, lives here because both sides enforce it: the relay answers ``400``
above it, and the proxy refuses an event above it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from chatstream.errors import InvalidEvent, InvalidRecord
from chatstream.records import validate_session_id

MAX_MESSAGE_CHARS = 32_000


@dataclass(frozen=True)
class GenerateRequest:
    """One turn to generate: the asynchronous invocation's payload."""

    session_id: str
    turn: int
    message: str
    max_tokens: int | None = None
    temperature: float | None = None

    def to_event(self) -> dict[str, Any]:
        """The invocation payload (optional fields only when set)."""
        event: dict[str, Any] = {"session_id": self.session_id, "turn": self.turn, "message": self.message}
        if self.max_tokens is not None:
            event["max_tokens"] = self.max_tokens
        if self.temperature is not None:
            event["temperature"] = self.temperature
        return event

    @classmethod
    def from_event(cls, event: object) -> GenerateRequest:
        """Parse and validate a payload; anything off raises :class:`~chatstream.errors.InvalidEvent`."""
        if not isinstance(event, Mapping):
            raise InvalidEvent("the event must be a JSON object")
        session_id = event.get("session_id")
        turn = event.get("turn")
        message = event.get("message")
        max_tokens = event.get("max_tokens")
        temperature = event.get("temperature")
        try:
            validate_session_id(session_id)
        except InvalidRecord as err:
            raise InvalidEvent(str(err)) from err
        if isinstance(turn, bool) or not isinstance(turn, int) or turn < 1:
            raise InvalidEvent("turn must be a positive integer")
        if not isinstance(message, str) or not message.strip() or len(message) > MAX_MESSAGE_CHARS:
            raise InvalidEvent(f"message must be a non-empty string of at most {MAX_MESSAGE_CHARS} characters")
        if max_tokens is not None and (
            isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
        ):
            raise InvalidEvent("max_tokens must be a positive integer")
        if temperature is not None and (
            isinstance(temperature, bool) or not isinstance(temperature, int | float) or not 0 <= temperature <= 1
        ):
            raise InvalidEvent("temperature must be a number from 0 to 1")
        return cls(
            session_id=str(session_id),
            turn=turn,
            message=message,
            max_tokens=max_tokens,
            temperature=None if temperature is None else float(temperature),
        )
