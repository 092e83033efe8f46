"""OpenAI's words for how a turn stands and why its reply stopped, and how the core's
(:class:`~chatstream.status.TurnStatus`, :class:`~chatstream.status.StopReason`) read in them.

Each is a ``StrEnum``, so a member is the very string OpenAI's clients read on the wire.

- A response's ``status`` (:class:`ResponseStatus`): a turn in progress is ``in_progress``; a complete one
  ``completed``, or ``incomplete`` when its reply was cut short (``max_tokens``, or the model's context window) or
  filtered; a cancelled one ``cancelled``; a failed one ``failed``. ``queued`` is a background response's as it is
  created.
- An output item's ``status`` (:class:`ItemStatus`): ``in_progress`` while open, ``completed``, or ``incomplete`` when
  the response it ended with did not complete.
- A response's ``incomplete_details.reason`` (:class:`IncompleteReason`): ``max_output_tokens`` for a reply cut short,
  ``content_filter`` for one filtered.
- A chat completion's ``finish_reason`` (:class:`FinishReason`): ``length`` for a reply cut short, ``content_filter``
  for one filtered, ``tool_calls`` for one that stopped to call tools (``tool_use``), else ``stop`` (``end_turn``,
  ``stop_sequence``, ``cancelled``, and any reason Bedrock adds later).
"""

from __future__ import annotations

from enum import StrEnum

from chatstream.status import StopReason, TurnStatus


class ResponseStatus(StrEnum):
    """A response's ``status`` (the Responses API's)."""

    QUEUED = "queued"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    INCOMPLETE = "incomplete"
    CANCELLED = "cancelled"
    FAILED = "failed"


class ItemStatus(StrEnum):
    """An output item's ``status`` (a message's or a reasoning item's)."""

    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    INCOMPLETE = "incomplete"


class IncompleteReason(StrEnum):
    """Why a response is ``incomplete`` (its ``incomplete_details.reason``)."""

    MAX_OUTPUT_TOKENS = "max_output_tokens"
    CONTENT_FILTER = "content_filter"


class FinishReason(StrEnum):
    """Why a chat completion's choice stopped (its ``finish_reason``)."""

    STOP = "stop"
    LENGTH = "length"
    CONTENT_FILTER = "content_filter"
    TOOL_CALLS = "tool_calls"


# Filtered: the model's content filter, or a guardrail.
FILTERED = frozenset({StopReason.CONTENT_FILTERED, StopReason.GUARDRAIL_INTERVENED})
# Cut short by a token limit: the turn's max_tokens, or the model's context window (Claude's
# model_context_window_exceeded); OpenAI reads both as max_output_tokens (a chat completion's length).
CUT_SHORT = frozenset({StopReason.MAX_TOKENS, StopReason.MODEL_CONTEXT_WINDOW_EXCEEDED})


def response_status(status: TurnStatus, stop_reason: StopReason | None) -> ResponseStatus:
    """The status of the response of a turn with this ``status`` and ``stop_reason``."""
    if status is TurnStatus.IN_PROGRESS:
        return ResponseStatus.IN_PROGRESS
    if status is TurnStatus.CANCELLED:
        return ResponseStatus.CANCELLED
    if status is TurnStatus.ERROR:
        return ResponseStatus.FAILED
    if stop_reason in CUT_SHORT or stop_reason in FILTERED:
        return ResponseStatus.INCOMPLETE
    return ResponseStatus.COMPLETED


def incomplete_reason(stop_reason: StopReason | None) -> IncompleteReason:
    """Why the response of a turn that stopped for ``stop_reason`` is ``incomplete``."""
    return IncompleteReason.CONTENT_FILTER if stop_reason in FILTERED else IncompleteReason.MAX_OUTPUT_TOKENS


def finish_reason(stop_reason: StopReason | None) -> FinishReason:
    """A chat completion's ``finish_reason`` for a reply that stopped for ``stop_reason`` (``None``: ``end_turn``)."""
    if stop_reason in CUT_SHORT:
        return FinishReason.LENGTH
    if stop_reason in FILTERED:
        return FinishReason.CONTENT_FILTER
    if stop_reason is StopReason.TOOL_USE:
        return FinishReason.TOOL_CALLS
    return FinishReason.STOP
