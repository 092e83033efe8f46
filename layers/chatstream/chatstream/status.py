"""A turn's status and the reason its reply stopped: the two vocabularies every component shares.

Both are ``StrEnum`` s, so a member is the very string that goes on the wire (token records, ChatTable
items, HTTP responses) and compares equal to it.

**Stop reasons Bedrock adds later.** :class:`StopReason` lists the values of Bedrock's ``StopReason``
shape (``MessageStopEvent.stopReason``) plus our ``cancelled``. Bedrock has added values before
(``model_context_window_exceeded`` among them), and a token record carrying one must still decode:
records are replayed from the stream long after they were written, by code that may be older than the
model. So ``StopReason(value)`` never refuses a string: an undocumented reason becomes a member-like
value named ``UNDOCUMENTED`` that carries the string verbatim (``str(reason)``, ``reason.value``), is
an instance of :class:`StopReason`, and re-encodes exactly as it came; :attr:`StopReason.documented`
tells the two apart. Anything that is not a string is still refused (``ValueError``).
"""

from __future__ import annotations

from enum import StrEnum


class TurnStatus(StrEnum):
    """The ``status`` of a turn item (and of a turn in ``GET /sessions/{id}``)."""

    IN_PROGRESS = "in_progress"
    COMPLETE = "complete"
    CANCELLED = "cancelled"
    ERROR = "error"

    @property
    def finished(self) -> bool:
        return self is not TurnStatus.IN_PROGRESS


class StopReason(StrEnum):
    """Why a reply stopped: Bedrock's ``stopReason``, or ``cancelled`` when the client cancelled the turn."""

    END_TURN = "end_turn"
    TOOL_USE = "tool_use"
    MAX_TOKENS = "max_tokens"
    STOP_SEQUENCE = "stop_sequence"
    GUARDRAIL_INTERVENED = "guardrail_intervened"
    CONTENT_FILTERED = "content_filtered"
    MALFORMED_MODEL_OUTPUT = "malformed_model_output"
    MALFORMED_TOOL_USE = "malformed_tool_use"
    MODEL_CONTEXT_WINDOW_EXCEEDED = "model_context_window_exceeded"
    CANCELLED = "cancelled"  # ours: the turn's cancel flag stopped the generation

    @classmethod
    def _missing_(cls, value: object) -> StopReason | None:
        """A string Bedrock may add later: carried verbatim (see the module docstring)."""
        if not isinstance(value, str):
            return None
        reason = str.__new__(cls, value)
        reason._name_ = "UNDOCUMENTED"
        reason._value_ = value
        return reason

    @property
    def documented(self) -> bool:
        """False for a reason this code does not know (carried as it came)."""
        return self._name_ in type(self).__members__
