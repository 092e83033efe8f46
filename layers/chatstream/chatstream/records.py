"""The token record: one JSON object per Kinesis record, the contract on the stream.

Fields (ARCHITECTURE.md): ``v`` (schema version), ``session_id``, ``turn`` (from 1),
``seq`` (from 0, contiguous within a turn), ``type`` (start, delta, reasoning, tool_use, stop, error), ``text``
(delta, reasoning, tool_use), ``call`` and ``end`` (tool_use), ``stop_reason`` (a
:class:`~chatstream.status.StopReason`) and ``usage`` (stop), ``error`` (error) and ``ts`` (producer time, epoch
milliseconds). Readers order and de-duplicate by ``(session_id, turn, seq)``; :func:`assistant_text` is the reply a
turn's records spell, :func:`reasoning_text` the reasoning the model showed before (or between) its words, and
:func:`tool_calls` the tools it called.

Schema versions: ``v`` is the lowest version a reader must know to read the record. Version 1 has start, delta,
stop and error; version 2 adds ``reasoning`` (the model's reasoning text, never part of the reply); version 3 adds
``tool_use`` (the arguments of one tool call, never part of the reply either). A record that version 1 can carry is
written as ``v: 1``, so a turn without reasoning or tool calls is byte for byte what it was; only reasoning records
are ``v: 2`` and only tool_use records ``v: 3``. A reader that does not know a record's version rejects it
(``unsupported schema version``: the consumer sends it to its DLQ, from where a redrive after the upgrade writes it),
and so never takes reasoning or a tool's arguments for the reply, which a field added to version 1 would have let it do.

A ``tool_use`` record holds argument text of one call (``call``: its ``index`` among the message's tool calls, from 0,
its ``id``, Bedrock's ``toolUseId``, and the tool's ``name``, on every record of the call, so a reader that starts
inside a call knows it); ``end: true`` on the call's last record says its arguments are complete (that record's text
may be empty: the end came after its last text was written).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from chatstream.errors import InvalidRecord
from chatstream.status import StopReason, TurnStatus
from chatstream.tools import ToolCall

if TYPE_CHECKING:
    from collections.abc import Iterable

SCHEMA_VERSION = 3  # the newest version this module reads and writes
SCHEMA_VERSIONS = frozenset({1, 2, 3})
MAX_TURN = 999_999
MAX_SEQ = 99_999_999
MAX_CALL_INDEX = 9_999  # tool calls in one message, counted from 0
SESSION_ID_PATTERN = re.compile(r"\A[A-Za-z0-9_-]{1,128}\Z")  # \Z: "$" would also take a trailing newline


class RecordType(StrEnum):
    START = "start"
    DELTA = "delta"
    REASONING = "reasoning"  # schema version 2
    TOOL_USE = "tool_use"  # schema version 3
    STOP = "stop"
    ERROR = "error"


# The lowest schema version that can carry each record type (what ``v`` says on the wire).
_VERSIONS = {RecordType.REASONING: 2, RecordType.TOOL_USE: 3}


@dataclass(frozen=True)
class Usage:
    input_tokens: int
    output_tokens: int
    latency_ms: int | None = None

    def to_dict(self) -> dict[str, int]:
        out = {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens}
        if self.latency_ms is not None:
            out["latency_ms"] = self.latency_ms
        return out

    @classmethod
    def from_dict(cls, raw: object) -> Usage:
        if not isinstance(raw, dict):
            raise InvalidRecord("usage must be an object")
        latency = raw.get("latency_ms")
        return cls(
            input_tokens=_non_negative_int(raw.get("input_tokens"), "usage.input_tokens"),
            output_tokens=_non_negative_int(raw.get("output_tokens"), "usage.output_tokens"),
            latency_ms=None if latency is None else _non_negative_int(latency, "usage.latency_ms"),
        )


@dataclass(frozen=True)
class ErrorInfo:
    code: str
    message: str
    retryable: bool

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "retryable": self.retryable}

    @classmethod
    def from_dict(cls, raw: object) -> ErrorInfo:
        if not isinstance(raw, dict):
            raise InvalidRecord("error must be an object")
        retryable = raw.get("retryable")
        if not isinstance(retryable, bool):
            raise InvalidRecord("error.retryable must be a boolean")
        return cls(
            code=_non_empty_str(raw.get("code"), "error.code"),
            message=_str(raw.get("message"), "error.message"),
            retryable=retryable,
        )


@dataclass(frozen=True)
class ToolCallRef:
    """The tool call a ``tool_use`` record belongs to: its ``index`` among the message's tool calls (from 0, in the
    order the model made them: never Bedrock's content block index, which counts text and reasoning blocks too), its
    ``id`` (Bedrock's ``toolUseId``) and the tool's ``name``."""

    index: int
    id: str
    name: str

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "id": self.id, "name": self.name}

    @classmethod
    def from_dict(cls, raw: object) -> ToolCallRef:
        if not isinstance(raw, dict):
            raise InvalidRecord("call must be an object")
        return cls(
            index=_non_negative_int(raw.get("index"), "call.index"),
            id=_non_empty_str(raw.get("id"), "call.id"),
            name=_non_empty_str(raw.get("name"), "call.name"),
        )


@dataclass(frozen=True)
class TokenRecord:
    session_id: str
    turn: int
    seq: int
    type: RecordType
    ts: int
    text: str | None = None
    stop_reason: StopReason | None = None
    usage: Usage | None = None
    error: ErrorInfo | None = None
    call: ToolCallRef | None = None  # tool_use: the call its text belongs to
    end: bool = False  # tool_use: the call's last record (its arguments are complete)

    def __post_init__(self) -> None:
        _validate(self)

    @property
    def is_terminal(self) -> bool:
        return self.type in (RecordType.STOP, RecordType.ERROR)

    @property
    def turn_status(self) -> TurnStatus:
        """The status the turn has once this (terminal) record ended it."""
        if self.type is RecordType.ERROR:
            return TurnStatus.ERROR
        if self.type is RecordType.STOP:
            return TurnStatus.CANCELLED if self.stop_reason is StopReason.CANCELLED else TurnStatus.COMPLETE
        raise ValueError(f"a {self.type.value} record does not end a turn")

    @property
    def version(self) -> int:
        """The lowest schema version that can carry this record (what ``v`` says on the wire)."""
        return _VERSIONS.get(self.type, 1)

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.session_id, self.turn, self.seq)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "v": self.version,
            "session_id": self.session_id,
            "turn": self.turn,
            "seq": self.seq,
            "type": self.type.value,
            "ts": self.ts,
        }
        if self.text is not None:
            out["text"] = self.text
        if self.call is not None:
            out["call"] = self.call.to_dict()
        if self.end:
            out["end"] = True
        if self.stop_reason is not None:
            out["stop_reason"] = self.stop_reason
        if self.usage is not None:
            out["usage"] = self.usage.to_dict()
        if self.error is not None:
            out["error"] = self.error.to_dict()
        return out

    def encode(self) -> bytes:
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":")).encode("utf-8")

    @classmethod
    def decode(cls, data: bytes | str) -> TokenRecord:
        """Parse and validate one record; anything off raises :class:`InvalidRecord`."""
        try:
            raw = json.loads(data)
        except (UnicodeDecodeError, ValueError) as err:
            raise InvalidRecord(f"not JSON: {err}") from err
        return cls.from_dict(raw)

    @classmethod
    def from_dict(cls, raw: object) -> TokenRecord:
        if not isinstance(raw, dict):
            raise InvalidRecord("a token record must be a JSON object")
        version = raw.get("v")
        if isinstance(version, bool) or not isinstance(version, int) or version not in SCHEMA_VERSIONS:
            raise InvalidRecord(f"unsupported schema version {version!r}")
        try:
            kind = RecordType(str(raw.get("type")))
        except ValueError as err:
            raise InvalidRecord(f"unknown record type {raw.get('type')!r}") from err
        needed = _VERSIONS.get(kind, 1)
        if version < needed:
            raise InvalidRecord(f"a {kind.value} record needs schema version {needed}, got {version!r}")
        usage = raw.get("usage")
        error = raw.get("error")
        text = raw.get("text")
        stop_reason = raw.get("stop_reason")
        call = raw.get("call")
        end = "end" in raw
        if end and raw["end"] is not True:
            raise InvalidRecord("end must be true when present")
        return cls(
            session_id=_str(raw.get("session_id"), "session_id"),
            turn=_non_negative_int(raw.get("turn"), "turn"),
            seq=_non_negative_int(raw.get("seq"), "seq"),
            type=kind,
            ts=_non_negative_int(raw.get("ts"), "ts"),
            text=None if text is None else _str(text, "text"),
            stop_reason=None if stop_reason is None else StopReason(_str(stop_reason, "stop_reason")),
            usage=None if usage is None else Usage.from_dict(usage),
            error=None if error is None else ErrorInfo.from_dict(error),
            call=None if call is None else ToolCallRef.from_dict(call),
            end=end,
        )

    # Constructors for the six kinds, so producers never assemble invalid combinations.
    @classmethod
    def start(cls, session_id: str, turn: int, ts: int) -> TokenRecord:
        return cls(session_id, turn, 0, RecordType.START, ts)

    @classmethod
    def delta(cls, session_id: str, turn: int, seq: int, text: str, ts: int) -> TokenRecord:
        return cls(session_id, turn, seq, RecordType.DELTA, ts, text=text)

    @classmethod
    def reasoning(cls, session_id: str, turn: int, seq: int, text: str, ts: int) -> TokenRecord:
        return cls(session_id, turn, seq, RecordType.REASONING, ts, text=text)

    @classmethod
    def tool_use(
        cls, session_id: str, turn: int, seq: int, call: ToolCallRef, text: str, ts: int, *, end: bool = False
    ) -> TokenRecord:
        """Argument text of the tool call ``call``; ``end``: the call's last record."""
        return cls(session_id, turn, seq, RecordType.TOOL_USE, ts, text=text, call=call, end=end)

    @classmethod
    def stop(cls, session_id: str, turn: int, seq: int, stop_reason: StopReason, usage: Usage, ts: int) -> TokenRecord:
        return cls(session_id, turn, seq, RecordType.STOP, ts, stop_reason=stop_reason, usage=usage)

    @classmethod
    def failure(cls, session_id: str, turn: int, seq: int, error: ErrorInfo, ts: int) -> TokenRecord:
        return cls(session_id, turn, seq, RecordType.ERROR, ts, error=error)


def assistant_text(records: Iterable[TokenRecord]) -> str:
    """The reply a turn's records spell: the texts of its delta records, in ``seq`` order (no reasoning)."""
    return _joined(records, RecordType.DELTA)


def reasoning_text(records: Iterable[TokenRecord]) -> str:
    """The reasoning a turn's records spell: the texts of its reasoning records, in ``seq`` order."""
    return _joined(records, RecordType.REASONING)


def tool_calls(records: Iterable[TokenRecord]) -> list[ToolCall]:
    """The tool calls a turn's records spell, by their index: each call's id and name, and its arguments, the texts of
    its ``tool_use`` records in ``seq`` order; complete once its ``end`` record is among them."""
    parts = sorted((record for record in records if record.type is RecordType.TOOL_USE), key=lambda record: record.seq)
    calls: dict[int, tuple[ToolCallRef, list[str], list[bool]]] = {}
    for record in parts:
        assert record.call is not None
        ref, texts, ended = calls.setdefault(record.call.index, (record.call, [], [False]))
        texts.append(record.text or "")
        ended[0] = ended[0] or record.end
    return [
        ToolCall(ref.id, ref.name, "".join(texts), complete=ended[0])
        for _index, (ref, texts, ended) in sorted(calls.items())
    ]


def _joined(records: Iterable[TokenRecord], kind: RecordType) -> str:
    parts = sorted((record for record in records if record.type is kind), key=lambda record: record.seq)
    return "".join(record.text or "" for record in parts)


def validate_session_id(value: object) -> str:
    if not isinstance(value, str) or not SESSION_ID_PATTERN.match(value):
        raise InvalidRecord("session_id must be 1-128 characters of A-Z, a-z, 0-9, '_' or '-'")
    return value


def _validate(record: TokenRecord) -> None:
    validate_session_id(record.session_id)
    if not 1 <= record.turn <= MAX_TURN:
        raise InvalidRecord(f"turn must be between 1 and {MAX_TURN}")
    if not 0 <= record.seq <= MAX_SEQ:
        raise InvalidRecord(f"seq must be between 0 and {MAX_SEQ}")
    if not isinstance(record.type, RecordType):
        raise InvalidRecord("type must be a RecordType")
    if record.stop_reason is not None and not isinstance(record.stop_reason, StopReason):
        raise InvalidRecord("stop_reason must be a StopReason")
    if record.type is RecordType.START and record.seq != 0:
        raise InvalidRecord("a start record has seq 0")
    if record.type is not RecordType.START and record.seq == 0:
        raise InvalidRecord("seq 0 is the start record")
    expected = {
        RecordType.START: set(),
        RecordType.DELTA: {"text"},
        RecordType.REASONING: {"text"},
        RecordType.TOOL_USE: {"text", "call"},
        RecordType.STOP: {"stop_reason", "usage"},
        RecordType.ERROR: {"error"},
    }[record.type]
    present = {name for name in ("text", "stop_reason", "usage", "error", "call") if getattr(record, name) is not None}
    if present != expected:
        raise InvalidRecord(
            f"a {record.type.value} record carries {sorted(expected) or 'no payload'}, got {sorted(present)}"
        )
    if record.type in (RecordType.DELTA, RecordType.REASONING) and not record.text:
        raise InvalidRecord(f"a {record.type.value} record carries non-empty text")
    if not isinstance(record.end, bool) or (record.end and record.type is not RecordType.TOOL_USE):
        raise InvalidRecord("only a tool_use record ends a call (end)")
    if record.type is RecordType.TOOL_USE:
        _validate_tool_use(record)


def _validate_tool_use(record: TokenRecord) -> None:
    call = record.call
    if not isinstance(call, ToolCallRef):
        raise InvalidRecord("call must be a ToolCallRef")
    if isinstance(call.index, bool) or not isinstance(call.index, int) or not 0 <= call.index <= MAX_CALL_INDEX:
        raise InvalidRecord(f"call.index must be between 0 and {MAX_CALL_INDEX}")
    if not (isinstance(call.id, str) and call.id and isinstance(call.name, str) and call.name):
        raise InvalidRecord("call.id and call.name must be non-empty strings")
    if not isinstance(record.text, str) or (not record.text and not record.end):
        raise InvalidRecord("a tool_use record carries argument text (empty only on the call's end)")


def _str(value: object, name: str) -> str:
    if not isinstance(value, str):
        raise InvalidRecord(f"{name} must be a string")
    return value


def _non_empty_str(value: object, name: str) -> str:
    text = _str(value, name)
    if not text:
        raise InvalidRecord(f"{name} must not be empty")
    return text


def _non_negative_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidRecord(f"{name} must be a non-negative integer")
    return value
