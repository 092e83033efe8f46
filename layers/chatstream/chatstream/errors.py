"""Domain exceptions. Adapters translate service errors into these; callers decide what to do."""

from __future__ import annotations


class ChatstreamError(Exception):
    """Base class of every chatstream error."""


class ConfigError(ChatstreamError):
    """A required environment variable is missing or malformed (raised at cold start)."""


class InvalidRecord(ChatstreamError, ValueError):
    """Bytes that are not a valid token record (undecodable, or a field out of the schema)."""


class Throttled(ChatstreamError):
    """A service throttled us, or a retryable service error persisted: try again later."""


class SessionNotFound(ChatstreamError):
    """No such session, or it belongs to another caller (both look the same from outside)."""


class TurnNotFound(ChatstreamError):
    """No such turn in the session."""


class TurnInProgress(ChatstreamError):
    """The session's previous turn is still generating."""


class TurnFinished(ChatstreamError):
    """The turn already ended (cancel of a finished turn)."""
