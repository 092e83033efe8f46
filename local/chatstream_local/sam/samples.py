"""The chat data a sample event refers to, written to ChatTable before ``make invoke`` runs it.

A sample event names a session and a turn (``events/relay-history.json`` reads session ``3f9c…``,
``events/proxy-generate.json`` generates its turn 1); on an empty table each would only answer 404. So before an
invocation the turns an event refers to are put in the state the function expects to find them in, the way the
rest of the pipeline would have left them:

- a Function URL event (the relay): the turn **finished** — the message ``hello`` and the local model's reply,
  ``You said: hello``, as token records (seq 0 ``start``, 1-3 the three words, 4 ``stop``), so history, replay
  (``Last-Event-ID: 2``) and cancel (``409 turn_finished``) answer as for a real conversation;
- the proxy's payload, a Kinesis batch (the consumer) or a failed invocation's record (the reaper): the turn **in
  progress**, as the relay leaves it when it invokes the proxy.

Every seed starts from an empty session (its items deleted first), so an invocation is repeatable. Turns before
the referenced one are seeded finished (up to turn 20). The session belongs to the caller the relay would see (the
event's ``authorizer.iam`` under ``AWS_IAM``, else ``anonymous``). Events that refer to no session (``POST /chat``, a
health check) seed nothing.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chatstream.errors import InvalidRecord
from chatstream.records import TokenRecord, Usage, assistant_text, validate_session_id
from chatstream.relay.http import HttpError, Request
from chatstream.relay.identity import ANONYMOUS_OWNER, identity_for
from chatstream.status import StopReason

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from chatstream.table import ChatTable

SAMPLE_MESSAGE = "hello"
SAMPLE_REPLY = ("You", " said:", " hello")  # the local model's reply to SAMPLE_MESSAGE, one delta per word
MAX_SEEDED_TURN = 20  # an event naming a later turn seeds nothing (the function answers as for an unknown turn)
_SESSION_PATH = re.compile(r"^/sessions/(?P<session>[^/]+)(?:/turns/(?P<turn>\d+)(?:/.*)?)?/?$")


@dataclass(frozen=True)
class SeededTurn:
    """A turn an event refers to, and the state it was put in."""

    session_id: str
    turn: int
    finished: bool
    owner: str

    def describe(self) -> str:
        state = f"finished ({SAMPLE_MESSAGE!r} → {''.join(SAMPLE_REPLY)!r})" if self.finished else "in progress"
        return f"session {self.session_id} turn {self.turn}: {state}, owner {self.owner}"


def referenced_turns(event: Any, auth_type: str) -> list[SeededTurn]:
    """The turns ``event`` refers to, each with the state its function expects and its owner."""
    return [turn for turn in _referenced(event, auth_type) if 1 <= turn.turn <= MAX_SEEDED_TURN]


def _referenced(event: Any, auth_type: str) -> list[SeededTurn]:
    if not isinstance(event, dict):
        return []
    if "rawPath" in event and isinstance(event.get("requestContext"), dict):
        return _function_url_turns(event, auth_type)
    records = event.get("Records")
    if isinstance(records, list):
        refs = {ref for record in records if isinstance(record, dict) for ref in _record_refs(record)}
        return [SeededTurn(session, turn, False, ANONYMOUS_OWNER) for session, turn in sorted(refs)]
    ref = _payload_ref(event)
    return [SeededTurn(ref[0], ref[1], False, ANONYMOUS_OWNER)] if ref else []


def seed(table: ChatTable, turns: list[SeededTurn]) -> None:
    """Put each turn (and the turns before it) in its state, in a session emptied first."""
    for wanted in turns:
        table.delete_session(wanted.session_id)
        table.turns.start_first(wanted.owner, SAMPLE_MESSAGE, session_id=wanted.session_id)
        for turn in range(1, wanted.turn + 1):
            if turn > 1:
                table.turns.start_next(wanted.session_id, wanted.owner, SAMPLE_MESSAGE)
            if turn < wanted.turn or wanted.finished:
                _finish(table, wanted.session_id, turn)


def _finish(table: ChatTable, session_id: str, turn: int) -> None:
    now = int(time.time() * 1000)
    records = [TokenRecord.start(session_id, turn, now)]
    for seq, text in enumerate(SAMPLE_REPLY, start=1):
        records.append(TokenRecord.delta(session_id, turn, seq, text, now))
    usage = Usage(input_tokens=len(SAMPLE_MESSAGE.split()), output_tokens=len(SAMPLE_REPLY))
    records.append(TokenRecord.stop(session_id, turn, len(records), StopReason.END_TURN, usage, now))
    table.put_records(records)
    table.turns.end_from_stream(records[-1], assistant_text(records))


def _function_url_turns(event: Mapping[str, Any], auth_type: str) -> list[SeededTurn]:
    match = _SESSION_PATH.match(str(event.get("rawPath", "")))
    if match is None or not _valid_session(match["session"]):
        return []
    try:
        owner = identity_for(auth_type).owner(Request.from_event(event))
    except HttpError:  # the relay would answer 403; the session is seeded all the same
        owner = ANONYMOUS_OWNER
    turn = int(match["turn"]) if match["turn"] else 1
    return [SeededTurn(match["session"], turn, True, owner)]


def _record_refs(record: Mapping[str, Any]) -> Iterator[tuple[str, int]]:
    """A Kinesis record's token record, or an SQS message holding a failed invocation's destination record."""
    kinesis = record.get("kinesis")
    if isinstance(kinesis, dict):
        try:
            ref = _payload_ref(json.loads(base64.b64decode(str(kinesis.get("data", "")))))
        except (binascii.Error, ValueError):
            ref = None  # a poison record: the consumer's to report
    else:
        try:
            body = json.loads(str(record.get("body", "")))
        except ValueError:
            body = None
        ref = _payload_ref(body.get("requestPayload")) if isinstance(body, dict) else None
    if ref is not None:
        yield ref


def _payload_ref(payload: Any) -> tuple[str, int] | None:
    if not isinstance(payload, dict):
        return None
    session, turn = payload.get("session_id"), payload.get("turn")
    if not _valid_session(session) or isinstance(turn, bool) or not isinstance(turn, int) or turn < 1:
        return None
    return str(session), turn


def _valid_session(value: object) -> bool:
    try:
        validate_session_id(value)
    except InvalidRecord:
        return False
    return True
