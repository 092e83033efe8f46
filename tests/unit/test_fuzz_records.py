"""Property-based tests of what crosses a trust boundary on the producer side.

- ``TokenRecord.decode`` reads whatever is on the stream: it raises ``InvalidRecord`` or nothing, and a record
  that decodes round-trips.
- ``GenerateRequest.from_event`` reads the proxy's invocation event: ``InvalidEvent`` or nothing, and a request
  that parses is what the event said.

The inputs mix valid objects, valid objects with one field broken, and anything at all, and each property
counts its branches: it fails if the valid branch stops being reached on a real share of the examples.
- ``Generation`` turns whatever ConverseStream events arrive (text and ``reasoningContent`` deltas, malformed ones
  among them) into records: always ending with exactly one terminal record, after every delta, with contiguous
  ``seq`` from 0, each delta in a record of its own kind (a reply's, or a reasoning one: schema version 2).
"""

from __future__ import annotations

import contextlib
import json
import string
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import hypothesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatstream.errors import InvalidEvent, InvalidRecord
from chatstream.generation import Generation, GenerationSettings
from chatstream.proxy_event import GenerateRequest
from chatstream.records import (
    MAX_CALL_INDEX,
    MAX_SEQ,
    MAX_TURN,
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
from chatstream.table import Turn

JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=30)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20,
)
NEAR_RECORDS = st.fixed_dictionaries(
    {},
    optional={
        "v": st.sampled_from([1, 2, True, "1", 1.0]) | JSON_SCALARS,
        "session_id": st.sampled_from(["s1", "", "a" * 200]) | JSON_SCALARS,
        "turn": st.integers(-2, 2**70) | JSON_SCALARS,
        "seq": st.integers(-2, 2**70) | JSON_SCALARS,
        "type": st.sampled_from([t.value for t in RecordType]) | JSON_SCALARS,
        "text": JSON_VALUES,
        "stop_reason": JSON_VALUES,
        "usage": JSON_VALUES | st.fixed_dictionaries({"input_tokens": JSON_SCALARS, "output_tokens": JSON_SCALARS}),
        "error": JSON_VALUES
        | st.fixed_dictionaries({"code": JSON_SCALARS, "message": JSON_SCALARS, "retryable": JSON_SCALARS}),
        "ts": st.integers(-1, 2**64) | JSON_SCALARS,
    },
)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_decoding_arbitrary_bytes_raises_only_invalid_record(data: bytes) -> None:
    # GIVEN any bytes on the stream, WHEN decoded, THEN a record or InvalidRecord, nothing else
    with contextlib.suppress(InvalidRecord):
        TokenRecord.decode(data)


# A record field or an event field: replaced by any JSON value, or left out.
RECORD_FIELDS = ("v", "session_id", "turn", "seq", "type", "text", "stop_reason", "usage", "error", "ts")
EVENT_FIELDS = ("session_id", "turn")
SESSION_IDS = st.text(string.ascii_letters + string.digits + "_-", min_size=1, max_size=128)
TIMESTAMPS = st.integers(0, 2**63)
STOP_REASONS = st.sampled_from(list(StopReason)) | st.text(max_size=30).map(StopReason)
USAGES = st.builds(Usage, st.integers(0, 10**9), st.integers(0, 10**9), st.none() | st.integers(0, 10**9))
ERRORS = st.builds(ErrorInfo, st.text(min_size=1, max_size=30), st.text(max_size=60), st.booleans())


def valid_records() -> st.SearchStrategy[TokenRecord]:
    """Every kind of record a producer can build, through the constructors producers use."""
    turns, seqs = st.integers(1, MAX_TURN), st.integers(1, MAX_SEQ)
    return st.one_of(
        st.builds(TokenRecord.start, SESSION_IDS, turns, TIMESTAMPS),
        st.builds(TokenRecord.delta, SESSION_IDS, turns, seqs, st.text(min_size=1, max_size=60), TIMESTAMPS),
        st.builds(TokenRecord.reasoning, SESSION_IDS, turns, seqs, st.text(min_size=1, max_size=60), TIMESTAMPS),
        st.builds(TokenRecord.stop, SESSION_IDS, turns, seqs, STOP_REASONS, USAGES, TIMESTAMPS),
        st.builds(TokenRecord.failure, SESSION_IDS, turns, seqs, ERRORS, TIMESTAMPS),
    )


def tool_use_records() -> st.SearchStrategy[TokenRecord]:
    """Every tool_use record a producer can build (schema version 3): a call's argument text, or its end."""
    calls = st.builds(
        ToolCallRef, st.integers(0, MAX_CALL_INDEX), st.text(min_size=1, max_size=64), st.text(min_size=1, max_size=64)
    )
    turns, seqs = st.integers(1, MAX_TURN), st.integers(1, MAX_SEQ)
    return st.one_of(
        st.builds(TokenRecord.tool_use, SESSION_IDS, turns, seqs, calls, st.text(min_size=1, max_size=60), TIMESTAMPS),
        st.builds(
            TokenRecord.tool_use, SESSION_IDS, turns, seqs, calls, st.text(max_size=60), TIMESTAMPS, end=st.just(True)
        ),
    )


def valid_events() -> st.SearchStrategy[dict[str, Any]]:
    """Every invocation event the relay can build."""
    return st.builds(GenerateRequest, SESSION_IDS, st.integers(1, 2**40)).map(GenerateRequest.to_event)


@st.composite
def mutated(draw: st.DrawFn, objects: st.SearchStrategy[dict[str, Any]], fields: tuple[str, ...]) -> dict[str, Any]:
    """A valid object with one field replaced by any JSON value, or left out (which may leave it valid)."""
    raw = dict(draw(objects))
    name = draw(st.sampled_from(fields))
    if name in raw and draw(st.booleans()):
        del raw[name]
    else:
        raw[name] = draw(JSON_VALUES)
    return raw


RECORD_OBJECTS = st.one_of(
    valid_records().map(TokenRecord.to_dict),
    mutated(valid_records().map(TokenRecord.to_dict), RECORD_FIELDS),
    NEAR_RECORDS,
)
EVENTS = st.one_of(
    valid_events(),
    mutated(valid_events(), EVENT_FIELDS),
    JSON_VALUES,
    st.fixed_dictionaries(
        {},
        optional={
            "session_id": JSON_SCALARS | st.sampled_from(["abc", "x" * 129, "a b"]),
            "turn": JSON_SCALARS | st.integers(-1, 2**64),
            "message": JSON_SCALARS | st.text(max_size=40),  # what an older relay sent; ignored
        },
    ),
)


def assert_both_branches_ran(outcomes: Counter[str], accepted: str, refused: str) -> None:
    """A property with a valid and an invalid branch proves something only if both ran, the valid one often."""
    total = sum(outcomes.values())
    assert outcomes[refused] > 0, outcomes
    assert outcomes[accepted] >= total / 10, f"the valid branch ran {outcomes[accepted]} times in {total}"


@settings(max_examples=200, deadline=None)
@given(valid_records())
def test_every_record_a_producer_builds_is_the_record_a_consumer_reads(record: TokenRecord) -> None:
    assert TokenRecord.decode(record.encode()) == record


@settings(max_examples=200, deadline=None)
@given(tool_use_records())
def test_every_tool_use_record_a_producer_builds_is_the_record_a_consumer_reads(record: TokenRecord) -> None:
    assert TokenRecord.decode(record.encode()) == record
    assert json.loads(record.encode())["v"] == 3


def test_almost_valid_tool_use_records_raise_only_invalid_record_and_valid_ones_round_trip() -> None:
    outcomes: Counter[str] = Counter()

    @settings(max_examples=300, deadline=None)
    @given(
        st.one_of(
            tool_use_records().map(TokenRecord.to_dict),
            mutated(tool_use_records().map(TokenRecord.to_dict), (*RECORD_FIELDS, "call", "end")),
        )
    )
    def check(raw: dict[str, Any]) -> None:
        # GIVEN a tool_use record, valid or with one field wrong or missing (which may leave it valid)
        try:
            record = TokenRecord.decode(json.dumps(raw, allow_nan=True).encode())
        except InvalidRecord:
            outcomes["refused"] += 1
            return
        outcomes["decoded"] += 1
        # THEN what decodes re-encodes to itself, and its call is what the object said
        assert TokenRecord.decode(record.encode()).encode() == record.encode()
        if record.type is RecordType.TOOL_USE:
            assert record.call is not None and record.call.to_dict() == raw["call"]
            assert record.end is (raw.get("end") is True)

    check()
    assert_both_branches_ran(outcomes, "decoded", "refused")


def test_almost_valid_records_raise_only_invalid_record_and_valid_ones_round_trip() -> None:
    outcomes: Counter[str] = Counter()

    @settings(max_examples=400, deadline=None)
    @given(RECORD_OBJECTS)
    def check(raw: dict[str, Any]) -> None:
        # GIVEN a JSON object shaped like a token record: valid, with one field wrong or missing, or anything
        data = json.dumps(raw, allow_nan=True).encode()
        # WHEN decoded
        try:
            record = TokenRecord.decode(data)
        except InvalidRecord:
            outcomes["refused"] += 1
            hypothesis.event("refused")
            return
        outcomes["decoded"] += 1
        hypothesis.event("decoded")
        # THEN a record that decodes is one the consumer can store and re-read unchanged, byte for byte
        assert TokenRecord.decode(record.encode()) == record
        assert TokenRecord.decode(record.encode()).encode() == record.encode()
        assert (record.session_id, record.turn, record.seq, record.type, record.ts) == (
            raw["session_id"],
            raw["turn"],
            raw["seq"],
            raw["type"],
            raw["ts"],
        )

    check()
    # AND both branches ran: the round trip above was checked on a real share of the examples
    assert_both_branches_ran(outcomes, "decoded", "refused")


def test_the_proxy_event_parser_raises_only_invalid_event_and_reads_what_was_sent() -> None:
    outcomes: Counter[str] = Counter()

    @settings(max_examples=300, deadline=None)
    @given(EVENTS)
    def check(raw: Any) -> None:
        # GIVEN any invocation event: one the relay builds, one with a field wrong or missing, or anything
        # WHEN parsed
        try:
            request = GenerateRequest.from_event(raw)
        except InvalidEvent:
            outcomes["refused"] += 1
            hypothesis.event("refused")
            return
        outcomes["parsed"] += 1
        hypothesis.event("parsed")
        # THEN the request is exactly what the event said, and builds the same event back
        assert request.turn >= 1
        assert (request.session_id, request.turn) == (raw["session_id"], raw["turn"])
        assert GenerateRequest.from_event(request.to_event()) == request

    check()
    assert_both_branches_ran(outcomes, "parsed", "refused")


# ------------------------------------------------------------------------------- the generation


@dataclass
class _Writer:
    records: list[TokenRecord] = field(default_factory=list)
    put_calls: int = 0
    throttle_retries: int = 0

    def put(self, *records: TokenRecord) -> None:
        self.put_calls += 1
        self.records.extend(records)


class _Table:
    def list_turns(self, session_id: str) -> list[Any]:
        return []

    def put_records(self, records: Any, **kwargs: Any) -> None:  # the proxy's write-through of its first records
        pass

    def cancel_requested(self, session_id: str, turn: int) -> bool:
        return False


class _Stream:
    def __init__(self, events: list[Any], fail_after: bool) -> None:
        self.events = events
        self.fail_after = fail_after

    def __iter__(self) -> Any:
        yield from self.events
        if self.fail_after:
            raise RuntimeError("the connection dropped mid-stream")

    def close(self) -> None:
        pass


@dataclass
class _Bedrock:
    events: list[Any]
    fail_after: bool

    def converse_stream(self, **params: Any) -> dict[str, Any]:
        return {"stream": _Stream(self.events, self.fail_after)}


def _delta(delta: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({"contentBlockDelta": st.fixed_dictionaries({"delta": delta})})


# A reasoningContent delta as Bedrock sends one (its text, then its signature; or redacted content), or malformed.
REASONING_CONTENT = st.one_of(
    st.fixed_dictionaries({"text": st.text(max_size=20)}),
    st.fixed_dictionaries({"signature": st.text(min_size=1, max_size=20)}),
    st.fixed_dictionaries({"redactedContent": st.binary(min_size=1, max_size=8)}),
    st.dictionaries(st.sampled_from(["text", "signature", "redactedContent"]), JSON_VALUES, max_size=2),
    JSON_VALUES,
)
CONVERSE_EVENTS = st.one_of(
    st.fixed_dictionaries({"messageStart": st.fixed_dictionaries({"role": st.just("assistant")})}),
    _delta(st.fixed_dictionaries({"text": st.text(max_size=20)})),
    _delta(st.fixed_dictionaries({"reasoningContent": REASONING_CONTENT})),
    st.fixed_dictionaries({"contentBlockDelta": JSON_VALUES}),
    st.fixed_dictionaries({"messageStop": st.fixed_dictionaries({}, optional={"stopReason": JSON_SCALARS})}),
    st.fixed_dictionaries({"metadata": JSON_VALUES}),
    st.fixed_dictionaries(
        {"metadata": st.fixed_dictionaries({"usage": st.fixed_dictionaries({"inputTokens": JSON_SCALARS})})}
    ),
    st.dictionaries(st.text(max_size=10), JSON_VALUES, max_size=2),
)


def _generation(events: list[Any], fail: bool, writer: _Writer) -> Generation:
    """A generation of turn 1 of session s1 reading ``events`` from the model (failing at their end, ``fail``) and
    writing its records to ``writer``."""
    return Generation(
        turn=Turn("s1", 1, "hello", TurnStatus.IN_PROGRESS),
        bedrock=_Bedrock(events, fail),  # type: ignore[arg-type]
        writer=writer,  # type: ignore[arg-type]
        table=_Table(),  # type: ignore[arg-type]
        settings=GenerationSettings(model_id="local", flush_interval_ms=0),
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(CONVERSE_EVENTS, max_size=12), st.booleans())
def test_a_generation_always_ends_with_one_terminal_record_after_every_delta(events: list[Any], fail: bool) -> None:
    # GIVEN a model stream of arbitrary events (malformed ones included), maybe failing at its end
    writer = _Writer()
    generation = _generation(events, fail, writer)

    # WHEN the generation runs
    result = generation.run()

    # THEN the records are start, deltas, and exactly one terminal record, last, with contiguous seq
    records = writer.records
    assert [record.seq for record in records] == list(range(len(records)))
    assert records[0].type is RecordType.START
    assert [record.is_terminal for record in records].count(True) == 1 and records[-1].is_terminal
    assert result.terminal == records[-1]
    # AND every record is one the consumer can read back
    assert [TokenRecord.decode(record.encode()) for record in records] == records
    # AND no delta was lost or changed kind: the reply's and the reasoning's records spell the model's text and
    # reasoning deltas, in the order the model sent them (all of them when the turn stopped, a start otherwise)
    sent = sent_deltas(events)
    written = [
        (record.type, char)
        for record in records
        if record.type in (RecordType.DELTA, RecordType.REASONING) and record.text is not None
        for char in record.text
    ]
    assert written == sent[: len(written)]
    assert assistant_text(records) == "".join(char for kind, char in written if kind is RecordType.DELTA)
    assert reasoning_text(records) == "".join(char for kind, char in written if kind is RecordType.REASONING)
    if records[-1].type is RecordType.STOP:
        assert written == sent


def sent_deltas(events: list[Any]) -> list[tuple[RecordType, str]]:
    """(kind, character) of every text and reasoning delta of the model's events, in order, up to a malformed one."""
    sent = []
    for event in events:
        block = event.get("contentBlockDelta")
        delta = block.get("delta") if isinstance(block, dict) else None
        if not isinstance(delta, dict):
            continue
        text = delta.get("text")
        if text and not isinstance(text, str):
            break  # a malformed delta ends the turn in error: nothing after it is expected
        sent += [(RecordType.DELTA, char) for char in text or ""]
        reasoning = delta.get("reasoningContent")
        thought = reasoning.get("text") if isinstance(reasoning, dict) else None
        sent += [(RecordType.REASONING, char) for char in (thought if isinstance(thought, str) else "")]
    return sent


# ------------------------------------------------------------------------------- the generation, with tool calls

ARGUMENTS = st.sampled_from(["", "{}", '{"a": 1}', '{"city": "Paris"}', '{"s": "' + "x" * 300 + '"}', "[1]", '{"a":'])


@st.composite
def tool_use_streams(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[tuple[str, str, str]], bool]:
    """A model stream with text and tool calls (their arguments cut anywhere, some not JSON objects), maybe with any
    other events mixed in; the calls it makes (id, name, arguments) and whether it is only that."""
    events: list[dict[str, Any]] = [{"messageStart": {"role": "assistant"}}]
    calls: list[tuple[str, str, str]] = []
    block = 0
    if draw(st.booleans()):
        words = draw(st.text(min_size=1, max_size=20))
        events += [{"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": words}}}]
        events += [{"contentBlockStop": {"contentBlockIndex": 0}}]
        block = 1
    for number in range(draw(st.integers(0, 4))):
        tool_id, name, arguments = (
            f"tooluse_{number}",
            draw(st.sampled_from(["get_weather", "top_song"])),
            draw(ARGUMENTS),
        )
        cuts = sorted(draw(st.lists(st.integers(0, len(arguments)), max_size=4)))
        pieces = [arguments[a:b] for a, b in zip([0, *cuts], [*cuts, len(arguments)], strict=True)]
        events.append(
            {
                "contentBlockStart": {
                    "contentBlockIndex": block,
                    "start": {"toolUse": {"toolUseId": tool_id, "name": name}},
                }
            }
        )
        events += [
            {"contentBlockDelta": {"contentBlockIndex": block, "delta": {"toolUse": {"input": p}}}} for p in pieces
        ]
        events.append({"contentBlockStop": {"contentBlockIndex": block}})
        calls.append((tool_id, name, arguments))
        block += 1
    events.append({"messageStop": {"stopReason": "tool_use" if calls else "end_turn"}})
    clean = draw(st.booleans())
    if not clean:
        for junk in draw(st.lists(CONVERSE_EVENTS, min_size=1, max_size=3)):
            events.insert(draw(st.integers(0, len(events))), junk)
    return events, calls, clean


def _json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tool_use_streams(), st.booleans())
def test_a_generation_with_tool_calls_ends_with_one_terminal_record_and_exact_calls(
    stream: tuple[list[dict[str, Any]], list[tuple[str, str, str]], bool], fail: bool
) -> None:
    events, calls, clean = stream
    # GIVEN a model stream with tool calls (maybe malformed, maybe mixed with anything), maybe failing at its end
    writer = _Writer()
    generation = _generation(events, fail, writer)
    # WHEN the generation runs
    result = generation.run()
    # THEN start, then records with contiguous seq, then exactly one terminal record, last; each one readable
    records = writer.records
    assert [record.seq for record in records] == list(range(len(records)))
    assert records[0].type is RecordType.START and result.terminal == records[-1]
    assert [record.is_terminal for record in records].count(True) == 1 and records[-1].is_terminal
    assert [TokenRecord.decode(record.encode()) for record in records] == records
    # THEN the calls are numbered from 0 in order, each record of one call only, and no call ends twice
    indexes = [record.call.index for record in records if record.call is not None]
    assert indexes == sorted(indexes) and set(indexes) == set(range(len(set(indexes))))
    assert all(sum(1 for r in records if r.end and r.call == c.call) <= 1 for c in records if c.call is not None)
    # THEN a clean stream's calls are exactly the model's, "{}" for none, or the turn ended naming the bad one
    written = tool_calls(records)
    if clean and not fail:
        if all(not arguments or _json_object(arguments) for _, _, arguments in calls):
            assert records[-1].type is RecordType.STOP
            assert [(c.id, c.name, c.arguments, c.complete) for c in written] == [
                (tool_id, name, arguments or "{}", True) for tool_id, name, arguments in calls
            ]
        else:
            assert records[-1].error is not None and records[-1].error.code == "malformed_tool_use"
            assert not written[-1].complete
    # THEN every complete call's arguments are a JSON object
    assert all(_json_object(call.arguments) for call in written if call.complete)
