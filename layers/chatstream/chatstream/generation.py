"""The proxy's core: one Bedrock ConverseStream reply → ordered, coalesced token records.

Three parts: :class:`GenerationSettings` (what the deployer chose), the coalescer
(``chatstream.coalescer``: which deltas become one record, and when) and :class:`Generation`, the loop.
A generation starts from the turn item (:func:`turn_to_generate`): the invocation event names the turn,
and the user's message and the turn's options are read from ChatTable, in the write that claims the turn for
this invocation (Lambda may deliver an asynchronous event twice; only the first delivery generates).

Two threads per generation. The caller's thread reads the Bedrock stream and appends each delta to the
coalescer; it never waits on Kinesis, but for the first delta: it reads on only once that delta's record is written
(or after ``FIRST_WRITE_WAIT_S``, once), since the two threads share one interpreter lock, and parsing a burst of later
events while the first token's calls wait for it made those calls twice as slow (a fast model sends its first events
together; see :meth:`Generation._read_stream`). A writer thread takes the coalescer's steps: ``start`` and the
first delta in one call as soon as that delta is here (time to first token; ``start`` alone after
``start_defer_ms`` if the model is slow), later deltas every flush interval or flush size, whichever
comes first, then exactly one ``stop`` or ``error``. Only one call is in flight at a time, so records
reach the shard in ``seq`` order (but for a refused ``start`` put again after the first delta: see
:meth:`Generation._open_turn`) and a slow Kinesis makes records larger instead of reordering them.
Between flushes, at most every ``cancel_check_interval_ms``, the writer reads the turn's cancel
flag; when it is set the Bedrock stream is closed and the turn ends with ``stop_reason: "cancelled"``.
A turn whose flag was set before the claim (the claim returns it) is not generated at all: its ``start`` and a
``cancelled`` ``stop`` are written and the model is not called.

Reasoning (``contentBlockDelta.delta.reasoningContent``): its ``text`` deltas become ``reasoning`` records,
coalesced like the reply's deltas but never in the same record. Its ``signature`` and ``redactedContent``
deltas are counted and dropped: they matter only to a request that sends the reasoning block back to the
model, which :func:`build_messages` never does (see its docstring), and redacted reasoning is never text.

Tool use: the turn's tools and tool choice go to the model as ``toolConfig`` (:func:`tool_config`, which also says
how ``none`` is sent). A ``contentBlockStart`` with ``start.toolUse`` opens a call, numbered from 0 among the message's
calls in the order they start (Bedrock's ``contentBlockIndex`` counts every block, text and reasoning too, so it only
tells which call a later event belongs to); its ``contentBlockDelta``s' ``delta.toolUse.input`` (partial JSON text)
become ``tool_use`` records, coalesced like the reply's text but never in a record with anything else; its
``contentBlockStop`` ends the call, and the call's end is written at once. A call that ends with no arguments gets
``{}``; one whose arguments are not a JSON object, a delta for no open call, a start without its id or name, or
Bedrock's stop reason ``malformed_tool_use``, end the turn with the error ``malformed_tool_use`` (never a crash). The
earlier turns' calls and the results the client sent for them go back to the model as ``toolUse`` and ``toolResult``
blocks (:func:`build_messages`).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError, ConnectTimeoutError, ReadTimeoutError
from urllib3.exceptions import HTTPError as TransportError
from urllib3.exceptions import ReadTimeoutError as StreamReadTimeout

from chatstream.backoff import Backoff
from chatstream.coalescer import Coalescer, Step, WriterAction
from chatstream.config import CANCEL_CHECK_INTERVAL_MS_DEFAULT, FLUSH_INTERVAL_MS_DEFAULT, FLUSH_MAX_CHARS_DEFAULT
from chatstream.errors import Throttled, TurnNotFound
from chatstream.records import (
    MAX_CALL_INDEX,
    ErrorInfo,
    RecordType,
    TokenRecord,
    ToolCallRef,
    Usage,
    assistant_text,
    reasoning_text,
    tool_calls,
)
from chatstream.status import StopReason, TurnStatus
from chatstream.text import is_blank
from chatstream.tools import ToolCall, ToolChoiceMode, ToolResult, ToolSpec

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from mypy_boto3_bedrock_runtime import BedrockRuntimeClient

    from chatstream.config import ProxyConfig
    from chatstream.kinesis import TokenStreamWriter
    from chatstream.proxy_event import GenerateRequest
    from chatstream.table import ChatTable, Turn
    from chatstream.turn_options import HistoryMessage, TurnOptions

logger = logging.getLogger(__name__)

DEADLINE_MARGIN_MS = 5_000
FIRST_WRITE_WAIT_S = 0.5  # the reader waits for the first delta's write at most this long, once

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

# Errors of the deployment's own setup (the model's access, the role's permission, the model id), not of a request:
# every turn fails alike until an operator fixes it (the proxy's metric ModelAccessErrors, ProxyModelAccessAlarm).
SETUP_ERRORS = frozenset({"access_denied", "model_not_found"})
# A ValidationException about the model itself, not the request: an id Bedrock does not know in this region ("The
# provided model identifier is invalid"), or a model that must be called through an inference profile ("… with
# on-demand throughput isn't supported. Retry your request with the ID or ARN of an inference profile …").
_MODEL_ID_REFUSED = re.compile(r"model identifier|on-demand throughput|inference profile", re.IGNORECASE)
# A ValidationException about the prompt's length: the session's history (sent whole each turn) outgrew the model's
# context window ("Input is too long for requested model.", "prompt is too long: 210000 tokens > 200000 maximum",
# "… maximum context length …"). Every later turn of the session fails alike: the error says to start a new one.
_CONTEXT_EXCEEDED = re.compile(
    r"input is too long|prompt is too long|too many input tokens|context (?:window|length)", re.IGNORECASE
)
CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"  # OpenAI's code for it, so /v1 clients know it too
# Errors the request itself caused (what it asked of the model, the length of its conversation), not the service:
# the proxy's ServiceFailures metric, and so ProxyGenerationErrorRateAlarm, leaves them out.
REQUEST_ERRORS = frozenset({"invalid_request", CONTEXT_LENGTH_EXCEEDED})

# Turns whose text goes back to the model as history.
_REPLAYED_STATUSES = frozenset({TurnStatus.COMPLETE, TurnStatus.CANCELLED})

MALFORMED_TOOL_USE = "malformed_tool_use"  # the error of a turn whose tool call the model got wrong
# The system text of a request that may call no tool but must still declare tools (tool_config).
NO_TOOL_INSTRUCTION = "Do not call any tool in this reply: answer in text."
# The system text of a request whose client asked for at most one call (OpenAI's parallel_tool_calls: false), which
# ConverseStream has no switch for (tool_config).
ONE_TOOL_INSTRUCTION = "Call at most one tool in this reply."


@dataclass(frozen=True)
class GenerationSettings:
    """How a generation runs: the model, and how deltas become records (ProxyConfig's choices)."""

    model_id: str
    system_prompt: str = ""
    model_request_fields: Mapping[str, Any] | None = None  # the model's own fields (Claude's ``thinking``, for one)
    # maxTokens of a turn that asks for none: without one, Bedrock allows the model's own maximum (64K output tokens
    # for some), past the deployment's cap (MaxTokensLimit) and the proxy's 15 minutes. None: send none.
    default_max_tokens: int | None = None
    flush_interval_ms: int = FLUSH_INTERVAL_MS_DEFAULT
    flush_max_chars: int = FLUSH_MAX_CHARS_DEFAULT
    cancel_check_interval_ms: int = CANCEL_CHECK_INTERVAL_MS_DEFAULT
    start_defer_ms: int = 1000
    table_attempts: int = 5  # ending a turn through the table when Kinesis refuses the reply
    table_backoff: Backoff = field(default_factory=lambda: Backoff(base_s=0.2, cap_s=5.0))

    @classmethod
    def from_config(cls, config: ProxyConfig) -> GenerationSettings:
        return cls(
            model_id=config.model_id,
            system_prompt=config.system_prompt,
            model_request_fields=config.model_request_fields,
            default_max_tokens=config.max_tokens_limit,
            flush_interval_ms=config.flush_interval_ms,
            flush_max_chars=config.flush_max_chars,
            cancel_check_interval_ms=config.cancel_check_interval_ms,
        )

    def coalescer(self) -> Coalescer:
        return Coalescer(
            flush_interval_s=self.flush_interval_ms / 1000,
            flush_max_chars=self.flush_max_chars,
            cancel_check_s=self.cancel_check_interval_ms / 1000,
        )


@dataclass
class GenerationResult:
    """What happened, for logs and metrics."""

    terminal: TokenRecord
    deltas: int = 0  # text, reasoning and tool call argument deltas
    reasoning_deltas: int = 0
    tool_calls: int = 0
    redacted_reasoning: int = 0  # redactedContent deltas (dropped)
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
        if ours == "invalid_request" and _MODEL_ID_REFUSED.search(message):
            ours = "model_not_found"
        elif ours == "invalid_request" and _CONTEXT_EXCEEDED.search(message):
            return ErrorInfo(
                CONTEXT_LENGTH_EXCEEDED,
                f"{code}: {message} (this session's history is too long for the model: start a new session)",
                False,
            )
        if ours in SETUP_ERRORS:
            # Bedrock's words name the account and the proxy's role ("User: arn:aws:sts::<account>:assumed-role/…
            # is not authorized"): for the operators' logs, not for every client (with auth NONE, anyone).
            logger.error("the model refused this deployment", extra={"error_code": code, "error_message": message})
            return ErrorInfo(
                ours, f"{code}: the model is not available to this deployment (see the proxy's logs)", retryable
            )
        return ErrorInfo(ours, f"{code}: {message}" if code else message, retryable)
    # Once the stream has begun, botocore reads it through urllib3 and lets urllib3's own errors through unwrapped:
    # the model silent past the read timeout, or the connection lost mid-stream.
    if isinstance(err, ReadTimeoutError | ConnectTimeoutError | StreamReadTimeout):
        return ErrorInfo("timeout", f"the model did not answer in time ({type(err).__name__})", True)
    if isinstance(err, BotoCoreError | TransportError):
        return ErrorInfo("model_unavailable", f"could not reach the model ({type(err).__name__})", True)
    return ErrorInfo("internal_error", f"unexpected failure ({type(err).__name__})", False)


def turn_to_generate(table: ChatTable, request: GenerateRequest, generator: str) -> Turn:
    """The turn item the event names, claimed for this invocation (``generator``: its request id).

    :class:`~chatstream.errors.TurnNotFound` when there is none: the event names a session or turn that
    does not exist (or no longer does: expired by TTL), so there is no message to answer.
    :class:`~chatstream.errors.TurnClaimed` and :class:`~chatstream.errors.TurnFinished` when the event is a
    duplicate (Lambda may deliver an asynchronous event more than once): another invocation generates the turn, or
    it already ended; this one must generate nothing (:meth:`~chatstream.table.turns.Turns.claim`).
    """
    try:
        return table.turns.claim(request.session_id, request.turn, generator)
    except TurnNotFound as err:
        raise TurnNotFound(
            f"session {request.session_id} has no turn {request.turn} in ChatTable, so there is no message to "
            "generate a reply to (the relay writes the turn before it invokes the proxy)"
        ) from err


def build_messages(table: ChatTable, current: Turn) -> list[dict[str, Any]]:
    """The Converse ``messages``: earlier turns that produced text or tool calls, then the turn's user message; each
    turn preceded by the history the client sent with it (``TurnOptions.history``), kept even when that turn produced
    nothing.

    A turn's user message holds the tool results it carried (``toolResult`` blocks, first, as Bedrock wants them), then
    its text; its reply holds its text, then its complete tool calls (``toolUse`` blocks). Bedrock refuses a
    ``toolUse`` not answered in the next user message and a ``toolResult`` answering nothing in the message before
    (:func:`_paired` keeps only the blocks that pair up, so one turn that went wrong never fails every later one);
    the turn's own results are sent as they came, and a result that answers no call is Bedrock's to refuse.

    An earlier turn's reasoning is not sent back, only its reply. Bedrock requires a signed reasoning block
    (``reasoningContent.reasoningText`` with its ``signature``, or ``redactedContent``) to come back unchanged
    only within one tool-use cycle (the assistant message that asked for a tool, answered by the next user
    message); the proxy keeps no signatures, so a reasoning model's tool use works without extended thinking only
    (ARCHITECTURE.md, "Reasoning"), and Claude's extended thinking ignores the thinking blocks of earlier turns
    anyway (Bedrock's "Extended thinking" guide). Leaving them out keeps the prompt, and its input tokens, the same as
    without reasoning.
    """
    exchanges: list[_Exchange] = []
    earlier = table.list_turns(current.session_id) if current.turn > 1 else []  # turn 1 has no history
    for turn in earlier:
        if turn.turn >= current.turn:
            break
        # The history a client sent with a turn (a response's input items) stays, whatever became of the turn: it
        # alternates and ends with the assistant. The turn's own message goes only with its reply: a failed turn, or
        # one that ended without text or a call, leaves both out. So does a reply of whitespace alone (a stop sequence
        # or a max_tokens right after a model's opening newline): Bedrock refuses a blank text block, on every later
        # turn.
        exchanges += _sent_history(turn)
        reply = _assistant_content(turn.assistant or "", turn.tool_calls)
        if turn.status in _REPLAYED_STATUSES and reply:
            exchanges.append(_Exchange(_user_content(turn.user, turn.options.tool_results), reply))
    exchanges += _sent_history(current)
    last = _user_content(current.user, current.options.tool_results)
    messages: list[dict[str, Any]] = []
    for exchange in _paired(exchanges, last):
        messages.append({"role": "user", "content": exchange.user})
        messages.append({"role": "assistant", "content": exchange.assistant})
    messages.append({"role": "user", "content": last})
    return messages


@dataclass(frozen=True)
class _Exchange:
    """A user message and the assistant's answer, as Converse content blocks."""

    user: list[dict[str, Any]]
    assistant: list[dict[str, Any]]


def _user_content(text: str, results: Sequence[ToolResult]) -> list[dict[str, Any]]:
    blocks = [result.to_converse() for result in results]
    return blocks + ([{"text": text}] if not is_blank(text) else [])


def _assistant_content(text: str, calls: Sequence[ToolCall]) -> list[dict[str, Any]]:
    blocks = [{"text": text}] if not is_blank(text) else []
    return blocks + [block for block in (call.to_converse() for call in calls) if block is not None]


def _sent_history(turn: Turn) -> list[_Exchange]:
    history = turn.options.history
    return [
        _Exchange(_history_content(user), _history_content(reply))
        for user, reply in zip(history[::2], history[1::2], strict=True)
    ]


def _history_content(message: HistoryMessage) -> list[dict[str, Any]]:
    if message.role == "user":
        return _user_content(message.text, message.tool_results)
    return _assistant_content(message.text, message.tool_calls)


def _ids(blocks: Sequence[Mapping[str, Any]], kind: str) -> set[str]:
    return {str(block[kind]["toolUseId"]) for block in blocks if kind in block}


def _paired(exchanges: list[_Exchange], last: list[dict[str, Any]]) -> list[_Exchange]:
    """The exchanges with only the tool blocks Bedrock accepts: a ``toolUse`` answered by a ``toolResult`` in the next
    user message (``last`` after the final exchange), a ``toolResult`` answering a ``toolUse`` of the assistant message
    before it; an exchange left without a user message or a reply goes (and the blocks that paired with it next)."""
    while True:
        users = [exchange.user for exchange in exchanges] + [last]
        kept = []
        for index, exchange in enumerate(exchanges):
            asked = _ids(exchanges[index - 1].assistant, "toolUse") if index else set()
            answered = _ids(users[index + 1], "toolResult")
            user = [b for b in exchange.user if "toolResult" not in b or b["toolResult"]["toolUseId"] in asked]
            reply = [b for b in exchange.assistant if "toolUse" not in b or b["toolUse"]["toolUseId"] in answered]
            if user and reply:
                kept.append(_Exchange(user, reply))
        if kept == exchanges:
            return kept
        exchanges = kept


def tool_config(options: TurnOptions, messages: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any] | None, str]:
    """ConverseStream's ``toolConfig`` for a turn (``None``: none is sent), and a system text it needs (or "").

    The tools are the turn's own (``TurnOptions.tools``: a client declares them with each turn that may use them); the
    choice ``any`` or ``tool`` is sent as ``toolChoice``, ``auto`` (Bedrock's default) not at all. Bedrock has no
    ``none``, and refuses messages that hold ``toolUse`` or ``toolResult`` blocks without a ``toolConfig`` ("toolConfig
    field must be defined when using toolUse and toolResult content blocks"). So ``none``, and a turn that declares
    no tools, is sent as:

    - no ``toolConfig`` when the messages hold no tool blocks: the model is shown no tool and cannot call one (as
      LiteLLM drops ``none``, and as agent libraries withhold the tools);
    - when they do, a ``toolConfig`` with the turn's tools (or, when it declares none, each tool the messages' calls
      name, with an open object schema: LiteLLM adds a placeholder tool in that case), no ``toolChoice``, and the
      system text :data:`NO_TOOL_INSTRUCTION`. A model may still call a tool then: its call is kept as it came (the
      turn ends ``tool_use``), never dropped.

    ``parallel_tool_calls: false`` (``TurnOptions.parallel_tool_calls``) has no ConverseStream field either (Claude's
    ``disable_parallel_tool_use`` is a field of Anthropic's own API, which LiteLLM sends through
    ``additionalModelRequestFields`` for Claude only; chatstream serves any model): a turn that may call its tools asks
    the model in the system text :data:`ONE_TOOL_INSTRUCTION`. A model that calls several all the same has every call
    kept.
    """
    choice = options.tool_choice
    if options.tools and (choice is None or choice.mode is not ToolChoiceMode.NONE):
        config: dict[str, Any] = {"tools": [tool.to_converse() for tool in options.tools]}
        sent = None if choice is None or choice.mode is ToolChoiceMode.AUTO else choice.to_converse()
        if sent is not None:
            config["toolChoice"] = sent
        return config, "" if options.parallel_tool_calls else ONE_TOOL_INSTRUCTION
    blocks = [block for message in messages for block in message["content"]]
    if not any("toolUse" in block or "toolResult" in block for block in blocks):
        return None, ""
    tools = list(options.tools) or [
        ToolSpec(name, {"type": "object"})
        for name in dict.fromkeys(str(block["toolUse"]["name"]) for block in blocks if "toolUse" in block)
    ]
    if not tools:
        return None, ""  # results answering no call: Bedrock's to refuse
    return {"tools": [tool.to_converse() for tool in tools]}, NO_TOOL_INSTRUCTION


def stop_reason_of(message_stop: Mapping[str, Any]) -> StopReason:
    """The stop reason of a ``messageStop`` event; a missing or empty one reads as ``end_turn``."""
    reason = message_stop.get("stopReason")
    return StopReason(reason) if isinstance(reason, str) and reason else StopReason.END_TURN


@dataclass
class _OpenCall:
    """A tool call the model started and has not ended: its record reference and its arguments so far."""

    ref: ToolCallRef
    arguments: list[str] = field(default_factory=list)


@dataclass
class _Outcome:
    deltas: int = 0
    reasoning_deltas: int = 0
    redacted_reasoning: int = 0
    tool_calls: int = 0
    open_calls: dict[int, _OpenCall] = field(default_factory=dict)  # by Bedrock's contentBlockIndex
    stop_reason: StopReason | None = None
    usage: dict[str, int] = field(default_factory=dict)
    failure: ErrorInfo | None = None


def _malformed(message: str) -> ErrorInfo:
    return ErrorInfo(MALFORMED_TOOL_USE, message, False)


def _json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


@dataclass
class Generation:
    """One turn's generation (``turn``: its item, from :func:`turn_to_generate`). Construct with collaborators,
    call :meth:`run` once."""

    turn: Turn
    bedrock: BedrockRuntimeClient
    writer: TokenStreamWriter
    table: ChatTable
    settings: GenerationSettings
    remaining_ms: Callable[[], int] | None = None
    sleep: Callable[[float], None] = time.sleep
    now_ms: Callable[[], int] = field(default=lambda: int(time.time() * 1000))
    monotonic: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        self._cond = threading.Condition()  # guards the coalescer and the terminal factory
        self._coalescer = self.settings.coalescer()
        self._terminal: Callable[[int], TokenRecord] | None = None
        self._cancelled = threading.Event()
        self._write_failed: BaseException | None = None
        self._stream: Any = None
        self._next_seq = 0
        self._written_deltas: list[TokenRecord] = []
        self._result_terminal: TokenRecord | None = None
        self._records_written = 0
        self._first_delta_at: float | None = None
        self._started_at = 0.0
        self._first_written = threading.Event()  # set once the first delta's record is written (or the writer ended)

    def run(self) -> GenerationResult:
        self._started_at = self.monotonic()
        if self.turn.cancel_requested:
            return self._cancelled_before_start()
        writer = threading.Thread(target=self._write_loop, name="chatstream-writer", daemon=True)
        writer.start()
        outcome = self._read_stream()
        terminal = self._terminal_factory(outcome)
        with self._cond:
            self._terminal = terminal
            self._coalescer.end()
            self._cond.notify_all()
        writer.join()
        via_table = False
        if self._result_terminal is None:
            # The writer gave up (Kinesis refused a record): whatever the model said, the reply on
            # the stream is incomplete, so the turn ends in error.
            error = ErrorInfo("write_failed", "the reply could not be written to the token stream", True)
            req = self.turn
            via_table = self._end_through_table(
                lambda seq: TokenRecord.failure(req.session_id, req.turn, seq, error, self.now_ms())
            )
        assert self._result_terminal is not None
        ttft = None if self._first_delta_at is None else int((self._first_delta_at - self._started_at) * 1000)
        return GenerationResult(
            terminal=self._result_terminal,
            deltas=outcome.deltas,
            reasoning_deltas=outcome.reasoning_deltas,
            redacted_reasoning=outcome.redacted_reasoning,
            tool_calls=outcome.tool_calls,
            records_written=self._records_written,
            put_calls=self.writer.put_calls,
            throttle_retries=self.writer.throttle_retries,
            ttft_ms=ttft,
            terminal_via_table=via_table,
        )

    def _cancelled_before_start(self) -> GenerationResult:
        """The turn was cancelled before this generation claimed it: the model is not called (it would be paid for
        the whole history's input tokens, for a reply nobody wants), the turn ends ``cancelled`` with no text."""
        logger.info("cancel requested before the generation started; the model is not called")
        req = self.turn
        now = self.now_ms()
        start = TokenRecord.start(req.session_id, req.turn, now)
        stop = TokenRecord.stop(req.session_id, req.turn, 1, StopReason.CANCELLED, Usage(0, 0), now)
        via_table = False
        try:
            self._write(start, stop)
            self._result_terminal = stop
        except Exception as err:  # Kinesis refused them: the turn still ends, through the table
            logger.error("token stream write failed at seq %d: %s", self._next_seq, err)
            via_table = self._end_through_table(lambda _seq: stop, opening=start)
        return GenerationResult(
            terminal=stop,
            records_written=self._records_written,
            put_calls=self.writer.put_calls,
            throttle_retries=self.writer.throttle_retries,
            terminal_via_table=via_table,
        )

    # ------------------------------------------------------------------------------ reader

    def _read_stream(self) -> _Outcome:
        """Read Bedrock's events into the coalescer until the reply, a failure, a cancel or the deadline.

        After the first delta it waits for that delta's write (to Kinesis, then through to the table) before reading
        on, once, at most ``FIRST_WRITE_WAIT_S`` (a slower first write then overlaps the reading, as every later one
        does): the writer's calls need the interpreter lock too, and a model that sends many events at once would
        otherwise have them parsed between every step of the first token's calls (measured locally at full model
        speed: the first ``PutRecords`` 12–22 ms with the parsing beside it, 6–10 ms without). Later events wait in
        the connection's buffers meanwhile; none is lost.
        """
        outcome = _Outcome()
        try:
            response = self.bedrock.converse_stream(**self._converse_params())
            self._stream = response["stream"]
            if self._cancelled.is_set():
                self._stream.close()
            waited = False  # the wait for the first delta's write comes once, whatever it ends with
            for event in self._stream:
                self._on_event(event, outcome)
                if outcome.deltas and not waited:
                    self._first_written.wait(FIRST_WRITE_WAIT_S)
                    waited = True
                if outcome.failure is not None or self._cancelled.is_set() or self._write_failed is not None:
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
            block = event["contentBlockDelta"]
            delta = block.get("delta", {})
            text = delta.get("text")
            if text:
                outcome.deltas += 1
                self._append(text, RecordType.DELTA)
            reasoning = delta.get("reasoningContent")
            if isinstance(reasoning, Mapping):
                self._on_reasoning(reasoning, outcome)
            tool = delta.get("toolUse")
            if isinstance(tool, Mapping):
                self._on_tool_input(block.get("contentBlockIndex"), tool, outcome)
        elif "contentBlockStart" in event:
            self._on_block_start(event["contentBlockStart"], outcome)
        elif "contentBlockStop" in event:
            stop = event["contentBlockStop"]
            self._end_call(stop.get("contentBlockIndex") if isinstance(stop, Mapping) else None, outcome)
        elif "messageStop" in event:
            outcome.stop_reason = stop_reason_of(event["messageStop"])
            for block in list(outcome.open_calls):  # a call the model did not stop ends with its message
                self._end_call(block, outcome)
            if outcome.stop_reason is StopReason.MALFORMED_TOOL_USE and outcome.failure is None:
                outcome.failure = _malformed("the model's tool call was malformed (stop reason malformed_tool_use)")
        elif "metadata" in event:
            outcome.usage = _usage(event["metadata"])

    def _on_block_start(self, event: object, outcome: _Outcome) -> None:
        """A content block starts: a tool call (``start.toolUse``) is opened; any other block is not ours to track."""
        start = event.get("start") if isinstance(event, Mapping) else None
        tool = start.get("toolUse") if isinstance(start, Mapping) else None
        if not isinstance(tool, Mapping):
            return
        assert isinstance(event, Mapping)
        block, tool_id, name = event.get("contentBlockIndex"), tool.get("toolUseId"), tool.get("name")
        if not (isinstance(tool_id, str) and tool_id and isinstance(name, str) and name):
            outcome.failure = _malformed("the model started a tool call without its id and name")
        elif not isinstance(block, int) or isinstance(block, bool) or block in outcome.open_calls:
            outcome.failure = _malformed("the model started a tool call in no new content block")
        elif outcome.tool_calls > MAX_CALL_INDEX:
            outcome.failure = _malformed(f"the model made more than {MAX_CALL_INDEX + 1} tool calls in one reply")
        else:
            outcome.open_calls[block] = _OpenCall(ToolCallRef(outcome.tool_calls, tool_id, name))
            outcome.tool_calls += 1

    def _on_tool_input(self, block: object, tool: Mapping[str, Any], outcome: _Outcome) -> None:
        """A ``delta.toolUse.input``: more argument text of the call its content block holds."""
        call = outcome.open_calls.get(block) if isinstance(block, int) else None
        text = tool.get("input")
        if call is None or not isinstance(text, str):
            outcome.failure = _malformed("the model sent tool call arguments outside any tool call")
            return
        if text:
            outcome.deltas += 1
            call.arguments.append(text)
            self._append(text, RecordType.TOOL_USE, call.ref)

    def _end_call(self, block: object, outcome: _Outcome) -> None:
        """A content block stopped: if it held a tool call, the call ends (its end written at once), with ``{}`` for no
        arguments; arguments that are not a JSON object end the turn instead."""
        call = outcome.open_calls.pop(block, None) if isinstance(block, int) else None
        if call is None or outcome.failure is not None:
            return
        arguments = "".join(call.arguments)
        if not arguments:
            self._append("{}", RecordType.TOOL_USE, call.ref)
        elif not _json_object(arguments):
            ref = call.ref
            outcome.failure = _malformed(
                f"the model's arguments for tool call {ref.index} ({ref.name}) are not a JSON object"
            )
            return
        with self._cond:
            self._coalescer.end_call(call.ref)
            self._cond.notify_all()

    def _on_reasoning(self, reasoning: Mapping[str, Any], outcome: _Outcome) -> None:
        """A ``reasoningContent`` delta: its text is kept; a signature or redacted content is only counted."""
        text = reasoning.get("text")
        if isinstance(text, str) and text:
            outcome.deltas += 1
            outcome.reasoning_deltas += 1
            self._append(text, RecordType.REASONING)
        if reasoning.get("redactedContent") is not None:
            outcome.redacted_reasoning += 1

    def _terminal_factory(self, outcome: _Outcome) -> Callable[[int], TokenRecord]:
        """The turn's terminal record, given the seq it gets once everything before it is written."""
        req = self.turn
        failure = outcome.failure
        if failure is not None:
            return lambda seq: TokenRecord.failure(req.session_id, req.turn, seq, failure, self.now_ms())
        usage = Usage(
            outcome.usage.get("input_tokens", 0),
            outcome.usage.get("output_tokens", outcome.deltas),
            outcome.usage.get("latency_ms"),
        )
        reason = StopReason.CANCELLED if self._cancelled.is_set() else (outcome.stop_reason or StopReason.END_TURN)
        return lambda seq: TokenRecord.stop(req.session_id, req.turn, seq, reason, usage, self.now_ms())

    def _converse_params(self) -> dict[str, Any]:
        settings = self.settings
        messages = build_messages(self.table, self.turn)
        params: dict[str, Any] = {"modelId": settings.model_id, "messages": messages}
        options = self.turn.options
        tools, instruction = tool_config(options, messages)
        if tools is not None:
            params["toolConfig"] = tools
        system = [text for text in (settings.system_prompt, options.system, instruction) if text]
        if system:
            params["system"] = [{"text": text} for text in system]
        inference: dict[str, Any] = {}
        max_tokens = self.turn.max_tokens if self.turn.max_tokens is not None else settings.default_max_tokens
        if max_tokens is not None:
            inference["maxTokens"] = max_tokens
        if self.turn.temperature is not None:
            inference["temperature"] = self.turn.temperature
        if options.top_p is not None:
            inference["topP"] = options.top_p
        if options.stop:
            inference["stopSequences"] = list(options.stop)
        if inference:
            params["inferenceConfig"] = inference
        if settings.model_request_fields:
            params["additionalModelRequestFields"] = dict(settings.model_request_fields)
        return params

    def _append(self, text: str, kind: RecordType, call: ToolCallRef | None = None) -> None:
        with self._cond:
            if self._coalescer.append(text, kind, call):
                self._cond.notify_all()

    # ------------------------------------------------------------------------------ writer

    def _write_loop(self) -> None:
        try:
            self._write_records()
        finally:
            self._first_written.set()  # a reader waiting for the first write never waits for a writer that ended

    def _write_records(self) -> None:
        try:
            opening: TokenRecord | None = self._open_turn()
            with self._cond:  # the first check comes a cancel interval after the first delta, not before
                self._coalescer.cancel_checked(self.monotonic())
            while True:
                step = self._next_step()
                if opening is not None and step.action is WriterAction.WRITE_DELTA:
                    self._write_delta(step, opening=opening)  # one call: see _open_turn
                    opening = None
                    continue
                if opening is not None:
                    self._write(opening)
                    opening = None
                if step.action is WriterAction.WRITE_DELTA:
                    self._write_delta(step)
                elif step.action is WriterAction.CHECK_CANCEL:
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

        The start waits for the first delta (or the end) at most ``start_defer_ms``. With the first delta it
        goes in one ``PutRecords`` call, so both reach the consumer in one batch and one table write: one
        call, one consumer invocation and one table write fewer before the first token than writing them one
        after the other. Entries of one call are stored or refused one by one, so if Kinesis refuses the start
        and stores the delta, the start is put again and lands after it; a proxy that died before that would
        leave a turn without its start. Readers allow for both: ``start`` carries nothing once a later record is
        there (ARCHITECTURE.md, "Coalescing"). A slow model gets its start record alone, promptly.
        """
        with self._cond:
            self._cond.wait_for(
                lambda: self._coalescer.pending or self._coalescer.ended, timeout=self.settings.start_defer_ms / 1000
            )
            first_delta_here = self._coalescer.pending
        start = TokenRecord.start(self.turn.session_id, self.turn.turn, self.now_ms())
        if first_delta_here:
            return start
        self._write(start)
        return None

    def _next_step(self) -> Step:
        """Block until the coalescer has something to do: a delta record to write, a cancel check, or the end."""
        with self._cond:
            while True:
                step = self._coalescer.next_step(self.monotonic())
                if step.action is not None:
                    return step
                self._cond.wait(timeout=step.wait_s)

    def _write_delta(self, step: Step, opening: TokenRecord | None = None) -> None:
        """A delta, reasoning or tool_use record; after ``opening`` (the held start record) in one call if given."""
        seq = self._next_seq if opening is None else opening.seq + 1
        session_id, turn, now = self.turn.session_id, self.turn.turn, self.now_ms()
        if step.kind is RecordType.TOOL_USE:
            assert step.call is not None
            record = TokenRecord.tool_use(session_id, turn, seq, step.call, step.text, now, end=step.end)
        else:
            make = TokenRecord.reasoning if step.kind is RecordType.REASONING else TokenRecord.delta
            record = make(session_id, turn, seq, step.text, now)
        self._write(*((record,) if opening is None else (opening, record)))
        self._written_deltas.append(record)
        if self._first_delta_at is None:
            self._first_delta_at = self.monotonic()
            self._write_through(record)
            self._first_written.set()

    def _write_through(self, record: TokenRecord) -> None:
        """The first delta record, stored in the token log, also written straight into the read model.

        The relay reads the table, where the consumer writes what the stream pushes to it (on AWS ~70 ms after the
        put, through enhanced fan-out, then a consumer invocation). For the first token that hop is most of the
        wait, so the proxy writes the turn's first delta itself, once the stream has it (the log stays the record
        of what happened). The consumer writes the same item again, unchanged (token items are written
        idempotently), and the ``start`` it carried (readers take a ``start`` not there yet as seen once seq 1 is:
        ARCHITECTURE.md, "Coalescing"; one item, one write unit per turn). One attempt: a failed write only leaves
        the first token to the consumer, as before.
        """
        try:
            self.table.put_records([record], attempts=1)
        except (ClientError, BotoCoreError, Throttled) as err:
            logger.debug("first delta not written through (the consumer writes it): %s", type(err).__name__)
        except Exception:  # a shortcut must never end the writer that the reply depends on
            logger.warning("first delta not written through (the consumer writes it)", exc_info=True)

    def _check_cancel(self) -> None:
        with self._cond:
            self._coalescer.cancel_checked(self.monotonic())
        if self._cancelled.is_set():
            return
        if self.table.cancel_requested(self.turn.session_id, self.turn.turn):
            logger.info("cancel requested")
            self._cancelled.set()
            if self._stream is not None:
                self._stream.close()

    def _write(self, *records: TokenRecord) -> None:
        """Records in one call, after every earlier call's were stored."""
        self.writer.put(*records)
        self._next_seq = records[-1].seq + 1
        self._records_written += len(records)

    def _end_through_table(self, terminal: Callable[[int], TokenRecord], opening: TokenRecord | None = None) -> bool:
        """Kinesis refused the reply: write the terminal record (after ``opening``, the start record, if given)
        straight into the read model."""
        record = terminal(self._next_seq)
        self._result_terminal = record
        for attempt in range(self.settings.table_attempts):
            try:
                written = self._written_deltas
                self.table.turns.end_from_stream(
                    record,
                    assistant_text(written),
                    reasoning=reasoning_text(written),
                    tool_calls=tool_calls(written),
                )
                self.table.put_records([record] if opening is None else [opening, record])
                return True
            except Exception:  # retried below; the relay's timeouts are the last resort
                logger.exception("could not end the turn through the table (attempt %d)", attempt + 1)
                self.sleep(self.settings.table_backoff.delay(attempt))
        return False


def _usage(metadata: Mapping[str, Any]) -> dict[str, int]:
    """The counts of a ``metadata`` event; one that is missing or negative is left out (a record carries none)."""
    usage, metrics = metadata.get("usage"), metadata.get("metrics")
    usage = usage if isinstance(usage, Mapping) else {}
    metrics = metrics if isinstance(metrics, Mapping) else {}
    counts = {
        "input_tokens": usage.get("inputTokens"),
        "output_tokens": usage.get("outputTokens"),
        "latency_ms": metrics.get("latencyMs"),
    }
    return {name: int(value) for name, value in counts.items() if value is not None and int(value) >= 0}
