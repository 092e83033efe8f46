"""Domain exceptions, all of them but two that carry a table part's own record and live beside it
(:class:`~chatstream.table.budgets.LimitExceeded`, :class:`~chatstream.table.idempotency.KeyInUse`). Adapters translate
service errors into these; callers decide what to do.

The relay's :class:`~chatstream.relay.http.HttpError` is not one of them: it is an HTTP answer (status,
code, message) that the relay's endpoints raise to stop early, made from these where they apply.
"""

from __future__ import annotations


class ChatstreamError(Exception):
    """Base class of every chatstream error."""


class ConfigError(ChatstreamError):
    """A required environment variable is missing or malformed (raised at cold start)."""


class InvalidRecord(ChatstreamError, ValueError):
    """Bytes that are not a valid token record (undecodable, or a field out of the schema)."""


class InvalidEvent(ChatstreamError, ValueError):
    """The proxy's invocation event (or a failed invocation's destination record) is not a generation request."""


class InvalidDeadLetter(ChatstreamError, ValueError):
    """A DLQ message that is neither a poison-record message nor an on-failure record, or one missing a field."""


class Throttled(ChatstreamError):
    """A service throttled us, or a retryable service error persisted: try again later."""


class DeadLetterError(ChatstreamError):
    """The DLQ did not take a message (throttled, unavailable): retry the record later."""


class RecordNotMaterialized(ChatstreamError):
    """A record of the batch that was not materialized and must be redelivered (a batch item failure)."""


class SessionNotFound(ChatstreamError):
    """No such session, or it belongs to another caller (both look the same from outside)."""


class TurnNotFound(ChatstreamError):
    """No such turn in the session."""


class TurnInProgress(ChatstreamError):
    """The session's previous turn is still generating."""


class TurnLimitReached(ChatstreamError):
    """The session has taken as many turns as a session may (``MaxTurnsPerSession``); a new session can go on."""


class TurnFinished(ChatstreamError):
    """The turn already ended (cancel of a finished turn; a generation event for a turn that ended). ``claimed_by``:
    who had claimed its generation, when known (a proxy invocation's request id, or ``relay``)."""

    def __init__(self, message: str, claimed_by: str | None = None) -> None:
        super().__init__(message)
        self.claimed_by = claimed_by


class TurnClaimed(ChatstreamError):
    """Another invocation already claimed the turn's generation: this one is a duplicate delivery of its event."""

    def __init__(self, message: str, claimed_by: str) -> None:
        super().__init__(message)
        self.claimed_by = claimed_by
