"""The proxy's invocation event: which turn ProxyFunction generates (events/proxy-generate.json).

The relay builds it with :meth:`GenerateRequest.to_event`; the proxy (and the reaper, from a failed
invocation's destination record) parses it with :meth:`GenerateRequest.from_event`. The event names the
turn and nothing else: the user's message and the turn's options (``max_tokens``, ``temperature``) are
on the turn item in ChatTable, where the relay wrote them, and the proxy reads them there. So the
asynchronous invocation, and the copy of it that Lambda sends to ProxyFailureQueue when the invocation
fails (kept up to 14 days), hold no conversation text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from chatstream.errors import InvalidEvent, InvalidRecord
from chatstream.records import validate_session_id


@dataclass(frozen=True)
class GenerateRequest:
    """One turn to generate: the asynchronous invocation's payload."""

    session_id: str
    turn: int

    def to_event(self) -> dict[str, Any]:
        """The invocation payload."""
        return {"session_id": self.session_id, "turn": self.turn}

    @classmethod
    def from_event(cls, event: object) -> GenerateRequest:
        """Parse and validate a payload; anything off raises :class:`~chatstream.errors.InvalidEvent`.

        Other keys are ignored: a relay of an earlier version, still running while a deployment rolls out,
        sends ``message``, ``max_tokens`` and ``temperature`` too, and the turn item holds the same values.
        """
        if not isinstance(event, Mapping):
            raise InvalidEvent("the event must be a JSON object")
        session_id = event.get("session_id")
        turn = event.get("turn")
        try:
            validate_session_id(session_id)
        except InvalidRecord as err:
            raise InvalidEvent(str(err)) from err
        if isinstance(turn, bool) or not isinstance(turn, int) or turn < 1:
            raise InvalidEvent("turn must be a positive integer")
        return cls(session_id=str(session_id), turn=turn)
