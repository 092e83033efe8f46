"""The proxy's core: one Bedrock ConverseStream reply → ordered, coalesced token records.

Two threads per generation. The caller's thread reads the Bedrock stream and appends each
delta to a buffer; it never waits on Kinesis. A writer thread turns the buffer into records:
``start`` then the first delta as soon as that delta is here (time to first token; ``start`` alone
after ``start_defer_ms`` if the model is slow), later deltas every flush interval or flush size,
whichever comes first, then exactly one ``stop`` or ``error``. Only one
record is in flight at a time, so records reach the shard strictly in ``seq`` order and a slow
Kinesis makes records larger instead of reordering them. Between flushes, at most every
``cancel_check_interval_ms``, the writer reads the turn's cancel flag; when it is set the
Bedrock stream is closed and the turn ends with ``stop_reason: "cancelled"``.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError, ConnectTimeoutError, ReadTimeoutError

from chatstream.records import ErrorInfo, TokenRecord, Usage, validate_session_id
from chatstream.table import STATUS_CANCELLED, STATUS_COMPLETE, STOP_REASON_CANCELLED

if TYPE_CHECKING:
    from mypy_boto3_bedrock_runtime import BedrockRuntimeClient

    from chatstream.kinesis import TokenStreamWriter
    from chatstream.table import ChatTable

logger = logging.getLogger(__name__)

MAX_MESSAGE_CHARS = 32_000
DEADLINE_MARGIN_MS = 5_000
MAX_RECORD_CHARS = 200_000

# Bedrock error codes (as ClientError codes, or lower-camel event-stream exception types) →
# (our error code, retryable).
_BEDROCK_ERRORS: dict[str, tuple[str, bool]] = {
    "throttlingexception": ("throttled", True),
    "servicequotaexceededexception": ("throttled", True),
    "modelstreamerrorexception": ("model_stream_error", True),
    "modeltimeoutexception": ("timeout", True),
    "modelnotreadyexception": ("model_unavailable", True),
    "serviceunavailableexception": ("model_unavailable", True),
    "internalserverexception": ("model_unavailable", True),
    "validationexception": ("invalid_request", False),
    "accessdeniedexception": ("access_denied", False),
    "resourcenotfoundexception": ("model_not_found", False),
    "modelerrorexception": ("model_error", False),
}


class InvalidEvent(ValueError):
    """The proxy's invocation event is not a valid generation request."""


@dataclass(frozen=True)
class GenerateRequest:
    """What the relay asks the proxy to generate (the async invocation's payload)."""

    session_id: str
    turn: int
    message: str
    max_tokens: int | None = None
    temperature: float | None = None

    @classmethod
    def from_event(cls, event: object) -> GenerateRequest:
        if not isinstance(event, Mapping):
            raise InvalidEvent("the event must be a JSON object")
        session_id = event.get("session_id")
        turn = event.get("turn")
        message = event.get("message")
        max_tokens = event.get("max_tokens")
        temperature = event.get("temperature")
        try:
            validate_session_id(session_id)
        except ValueError as err:
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


@dataclass
class GenerationResult:
    """What happened, for logs and metrics."""

    terminal: TokenRecord
    deltas: int = 0
    records_written: int = 0
    put_calls: int = 0
    throttle_retries: int = 0
    ttft_ms: int | None = None
    terminal_via_table: bool = False


def classify_bedrock_error(err: BaseException) -> ErrorInfo:
    """Translate a Bedrock/botocore failure into the error carried by the turn's error record."""
    if isinstance(err, ClientError):
        code = str(err.response.get("Error", {}).get("Code", ""))
        message = str(err.response.get("Error", {}).get("Message", "")) or str(err)
        ours, retryable = _BEDROCK_ERRORS.get(code.lower(), ("model_error", False))
        return ErrorInfo(ours, f"{code}: {message}" if code else message, retryable)
    if isinstance(err, ReadTimeoutError | ConnectTimeoutError):
        return ErrorInfo("timeout", f"the model did not answer in time ({type(err).__name__})", True)
    if isinstance(err, BotoCoreError):
        return ErrorInfo("model_unavailable", f"could not reach the model ({type(err).__name__})", True)
    return ErrorInfo("internal_error", f"unexpected failure ({type(err).__name__})", False)


def build_messages(table: ChatTable, request: GenerateRequest) -> list[dict[str, Any]]:
    """The Converse ``messages``: earlier turns that produced text, then the new user message."""
    messages: list[dict[str, Any]] = []
    earlier = table.list_turns(request.session_id) if request.turn > 1 else []  # turn 1 has no history
    for turn in earlier:
        if turn.turn >= request.turn:
            break
        if turn.status in (STATUS_COMPLETE, STATUS_CANCELLED) and turn.assistant:
            messages.append({"role": "user", "content": [{"text": turn.user}]})
            messages.append({"role": "assistant", "content": [{"text": turn.assistant}]})
    messages.append({"role": "user", "content": [{"text": request.message}]})
    return messages


@dataclass
class _Outcome:
    deltas: int = 0
    stop_reason: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    failure: ErrorInfo | None = None


@dataclass
class Generation:
    """One turn's generation. Construct with collaborators, call :meth:`run` once."""

    request: GenerateRequest
    bedrock: BedrockRuntimeClient
    writer: TokenStreamWriter
    table: ChatTable
    model_id: str
    system_prompt: str = ""
    flush_interval_ms: int = 300
    flush_max_chars: int = 1024
    cancel_check_interval_ms: int = 500
    start_defer_ms: int = 1000
    remaining_ms: Callable[[], int] | None = None
    table_attempts: int = 5
    sleep: Callable[[float], None] = time.sleep
    now_ms: Callable[[], int] = field(default=lambda: int(time.time() * 1000))
    monotonic: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        self._cond = threading.Condition()
        self._buffer: collections.deque[str] = collections.deque()  # deltas not yet written
        self._buffered_chars = 0
        self._first_flushed = False
        self._last_flush = 0.0
        self._last_cancel_check = 0.0
        self._done = False
        self._terminal: Callable[[int], TokenRecord] | None = None
        self._cancelled = threading.Event()
        self._write_failed: BaseException | None = None
        self._stream: Any = None
        self._next_seq = 0
        self._written_text: list[str] = []
        self._result_terminal: TokenRecord | None = None
        self._records_written = 0
        self._first_delta_at: float | None = None
        self._started_at = 0.0

    # ------------------------------------------------------------------------------ reader

    def run(self) -> GenerationResult:
        self._started_at = self.monotonic()
        writer = threading.Thread(target=self._write_loop, name="chatstream-writer", daemon=True)
        writer.start()
        outcome = self._read_stream()
        terminal = self._terminal_factory(outcome)
        with self._cond:
            self._terminal = terminal
            self._done = True
            self._cond.notify_all()
        writer.join()
        via_table = False
        if self._result_terminal is None:
            # The writer gave up (Kinesis refused a record): whatever the model said, the reply on
            # the stream is incomplete, so the turn ends in error.
            error = ErrorInfo("write_failed", "the reply could not be written to the token stream", True)
            req = self.request
            via_table = self._end_through_table(
                lambda seq: TokenRecord.failure(req.session_id, req.turn, seq, error, self.now_ms())
            )
        assert self._result_terminal is not None
        ttft = None if self._first_delta_at is None else int((self._first_delta_at - self._started_at) * 1000)
        return GenerationResult(
            terminal=self._result_terminal,
            deltas=outcome.deltas,
            records_written=self._records_written,
            put_calls=self.writer.put_calls,
            throttle_retries=self.writer.throttle_retries,
            ttft_ms=ttft,
            terminal_via_table=via_table,
        )

    def _read_stream(self) -> _Outcome:
        """Read Bedrock's events into the buffer until the reply, a failure, a cancel or the deadline."""
        outcome = _Outcome()
        try:
            response = self.bedrock.converse_stream(**self._converse_params())
            self._stream = response["stream"]
            if self._cancelled.is_set():
                self._stream.close()
            for event in self._stream:
                self._on_event(event, outcome)
                if self._cancelled.is_set() or self._write_failed is not None:
                    break
                if self.remaining_ms is not None and self.remaining_ms() < DEADLINE_MARGIN_MS:
                    outcome.failure = ErrorInfo("timeout", "the generation reached the proxy's time limit", True)
                    break
        except Exception as err:  # every failure must end the turn with a terminal record
            if not self._cancelled.is_set() and self._write_failed is None:
                outcome.failure = classify_bedrock_error(err)
                logger.warning("generation failed: %s", outcome.failure.code, exc_info=not isinstance(err, ClientError))
        finally:
            if self._stream is not None:
                self._stream.close()
        return outcome

    def _on_event(self, event: Mapping[str, Any], outcome: _Outcome) -> None:
        if "contentBlockDelta" in event:
            text = event["contentBlockDelta"].get("delta", {}).get("text")
            if text:
                outcome.deltas += 1
                self._append(text)
        elif "messageStop" in event:
            outcome.stop_reason = event["messageStop"].get("stopReason", "end_turn")
        elif "metadata" in event:
            outcome.usage = _usage(event["metadata"])

    def _terminal_factory(self, outcome: _Outcome) -> Callable[[int], TokenRecord]:
        """The turn's terminal record, given the seq it gets once everything before it is written."""
        req = self.request
        failure = outcome.failure
        if failure is not None:
            return lambda seq: TokenRecord.failure(req.session_id, req.turn, seq, failure, self.now_ms())
        usage = Usage(
            outcome.usage.get("input_tokens", 0),
            outcome.usage.get("output_tokens", outcome.deltas),
            outcome.usage.get("latency_ms"),
        )
        reason = STOP_REASON_CANCELLED if self._cancelled.is_set() else (outcome.stop_reason or "end_turn")
        return lambda seq: TokenRecord.stop(req.session_id, req.turn, seq, reason, usage, self.now_ms())

    def _converse_params(self) -> dict[str, Any]:
        params: dict[str, Any] = {"modelId": self.model_id, "messages": build_messages(self.table, self.request)}
        if self.system_prompt:
            params["system"] = [{"text": self.system_prompt}]
        inference: dict[str, Any] = {}
        if self.request.max_tokens is not None:
            inference["maxTokens"] = self.request.max_tokens
        if self.request.temperature is not None:
            inference["temperature"] = self.request.temperature
        if inference:
            params["inferenceConfig"] = inference
        return params

    def _append(self, text: str) -> None:
        with self._cond:
            was_empty = not self._buffer
            self._buffer.append(text)
            self._buffered_chars += len(text)
            # Wake the writer only when it has something new to decide: a first delta to write or a flush
            # deadline to set (the buffer was empty), or a full record. Otherwise it sleeps until the deadline
            # it already has; waking it for every delta cost a thread switch per token at full model speed.
            if was_empty or self._buffered_chars >= self.flush_max_chars:
                self._cond.notify_all()

    # ------------------------------------------------------------------------------ writer

    def _write_loop(self) -> None:
        try:
            opening: TokenRecord | None = self._open_turn()
            self._last_cancel_check = self.monotonic()  # the first check comes after the first delta, not before
            while True:
                action, text = self._next_action()
                if opening is not None:
                    self._write(opening)  # alone, and first: see _open_turn
                    opening = None
                if action == "delta":
                    record = TokenRecord.delta(
                        self.request.session_id, self.request.turn, self._next_seq, text, self.now_ms()
                    )
                    self._write(record)
                    self._written_text.append(text)
                    if self._first_delta_at is None:
                        self._first_delta_at = self.monotonic()
                    continue
                if action == "cancel-check":
                    self._check_cancel()
                else:
                    assert self._terminal is not None
                    record = self._terminal(self._next_seq)
                    self._write(record)
                    self._result_terminal = record
                    return
        except Exception as err:  # any failure to write ends the turn through the table, never silently
            logger.error("token stream write failed at seq %d: %s", self._next_seq, err)
            self._write_failed = err
            if self._stream is not None:
                self._stream.close()

    def _open_turn(self) -> TokenRecord | None:
        """Write the start record, or hold it (returned) until the first delta is here.

        The start waits for the first delta (or the end) at most ``start_defer_ms``, then is written just
        before it: back to back, they usually reach the consumer in one batch, so the first token is one
        consumer cycle earlier; a slow model still gets its start record promptly. They are two calls, not
        one ``PutRecords`` with both: entries of one call fail independently, and a proxy that died after
        the delta's entry was stored but before the start's retry would leave a turn whose records are not
        a clean prefix (seq 1 without seq 0; ``make chaos`` found one such turn in 200).
        """
        with self._cond:
            self._cond.wait_for(lambda: bool(self._buffer) or self._done, timeout=self.start_defer_ms / 1000)
            first_delta_here = bool(self._buffer)
        start = TokenRecord.start(self.request.session_id, self.request.turn, self.now_ms())
        if first_delta_here:
            return start
        self._write(start)
        return None

    def _next_action(self) -> tuple[str, str]:
        """Block until there is something to do: a delta to flush, a cancel check, or the end."""
        interval = self.flush_interval_ms / 1000
        check_every = self.cancel_check_interval_ms / 1000
        with self._cond:
            while True:
                now = self.monotonic()
                if self._buffer and (
                    not self._first_flushed
                    or self._done
                    or self._buffered_chars >= self.flush_max_chars
                    or now - self._last_flush >= interval
                ):
                    text = self._take_buffered()
                    self._first_flushed = True
                    self._last_flush = now
                    return "delta", text
                if self._done:
                    return "end", ""
                if now - self._last_cancel_check >= check_every:
                    return "cancel-check", ""
                waits = [self._last_cancel_check + check_every - now]
                if self._buffer:
                    waits.append(self._last_flush + interval - now)
                self._cond.wait(timeout=max(0.001, min(waits)))

    def _take_buffered(self) -> str:
        """Whole deltas up to ``flush_max_chars`` (at least one), never over a Kinesis record's size."""
        parts: list[str] = []
        size = 0
        while self._buffer and (not parts or size + len(self._buffer[0]) <= self.flush_max_chars):
            delta = self._buffer.popleft()
            if len(delta) > MAX_RECORD_CHARS:  # 4 bytes a character at most: stays under 1 MiB
                delta, rest = delta[:MAX_RECORD_CHARS], delta[MAX_RECORD_CHARS:]
                self._buffer.appendleft(rest)
            parts.append(delta)
            size += len(delta)
        self._buffered_chars -= size
        return "".join(parts)

    def _check_cancel(self) -> None:
        self._last_cancel_check = self.monotonic()
        if self._cancelled.is_set():
            return
        if self.table.cancel_requested(self.request.session_id, self.request.turn):
            logger.info("cancel requested")
            self._cancelled.set()
            if self._stream is not None:
                self._stream.close()

    def _write(self, record: TokenRecord) -> None:
        """One record, after every earlier one was stored: the stream always holds a prefix of the turn."""
        self.writer.put(record)
        self._next_seq = record.seq + 1
        self._records_written += 1

    def _end_through_table(self, terminal: Callable[[int], TokenRecord]) -> bool:
        """Kinesis refused the reply: write the error record straight into the read model."""
        record = terminal(self._next_seq)
        self._result_terminal = record
        for attempt in range(self.table_attempts):
            try:
                self.table.complete_turn(record, "".join(self._written_text))
                self.table.put_records([record])
                return True
            except Exception:  # retried below; the relay's timeouts are the last resort
                logger.exception("could not end the turn through the table (attempt %d)", attempt + 1)
                self.sleep(min(5.0, 0.2 * 2**attempt))
        return False


def _usage(metadata: Mapping[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    usage = metadata.get("usage") or {}
    if "inputTokens" in usage:
        out["input_tokens"] = int(usage["inputTokens"])
    if "outputTokens" in usage:
        out["output_tokens"] = int(usage["outputTokens"])
    latency = (metadata.get("metrics") or {}).get("latencyMs")
    if latency is not None:
        out["latency_ms"] = int(latency)
    return out
