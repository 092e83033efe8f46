"""Helpers for the relay's unit tests: a fake clock, an SSE reader, turn writers, configuration."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from chatstream.config import RelayConfig
from chatstream.records import assistant_text, reasoning_text
from chatstream.relay.follow import Clock, FollowSettings
from chatstream.status import StopReason
from tests.builders import turn_records

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from chatstream.records import ErrorInfo, TokenRecord
    from chatstream.table import ChatTable

PROXY_FUNCTION = "chatstream-local-ProxyFunction"

# Fast, round numbers: a test reads them as seconds of fake time.
FAST = FollowSettings(
    poll_min_s=0.01,
    poll_max_s=0.08,
    start_timeout_s=30,
    gap_timeout_s=10,
    keepalive_s=10,
    reconnect_margin_s=10,
    idle_reconnect_s=60,
    stale_turn_s=960,
    pace=True,
    status_check_s=1,
)


# The relay's tests share a table per module, and their callers start many turns: no budget per caller unless a test
# sets one (tests/unit/relay/test_relay_budgets.py), as the local stack runs.
NO_BUDGETS = {"CALLER_REQUESTS_PER_MINUTE": "0", "CALLER_TOKENS_PER_DAY": "0", "CALLER_TURNS_AT_ONCE": "0"}


def relay_config(table_name: str, **overrides: str) -> RelayConfig:
    env = {"CHAT_TABLE_NAME": table_name, "PROXY_FUNCTION_NAME": PROXY_FUNCTION, "AUTH_TYPE": "AWS_IAM", **NO_BUDGETS}
    env.update(overrides)
    return RelayConfig.from_env(env)


# FAST, polling as the deployed relay does (its configuration's 20 ms to 500 ms), for a test that follows a turn
# through a long stretch of fake time (a silence, the idle bound, a gap or start timeout): each poll is a real Query of
# the moto table, and FAST's 80 ms between polls made a minute of fake time hundreds of Queries, seconds of CPU, for
# the same stream.
_DEPLOYED = FollowSettings.from_config(relay_config("ChatTable"))
RELAY_POLLING = replace(FAST, poll_min_s=_DEPLOYED.poll_min_s, poll_max_s=_DEPLOYED.poll_max_s)


@dataclass
class FakeClock:
    """Fake time: ``sleep`` advances it and runs the actions that fall due (e.g. a record appearing).

    ``deadline_s`` is when the invocation's time runs out. A follower that never ends fails the test
    once fake time passes ``limit_s`` instead of hanging.
    """

    t: float = 0.0
    deadline_s: float = 900.0
    limit_s: float = 5_000.0
    wall_base_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    actions: list[tuple[float, Callable[[], None]]] = field(default_factory=list)
    sleeps: list[float] = field(default_factory=list)

    def at(self, when_s: float, action: Callable[[], None]) -> None:
        self.actions.append((when_s, action))
        self.actions.sort(key=lambda item: item[0])

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.sleeps.append(seconds)
        self.t += seconds
        assert self.t < self.limit_s, "the follower never ended"
        while self.actions and self.actions[0][0] <= self.t:
            _, action = self.actions.pop(0)
            action()

    def monotonic(self) -> float:
        return self.t

    def now_ms(self) -> int:
        return self.wall_base_ms + int(self.t * 1000)

    def remaining_ms(self) -> int:
        return int((self.deadline_s - self.t) * 1000)

    def as_clock(self) -> Clock:
        return Clock(sleep=self.sleep, monotonic=self.monotonic, now_ms=self.now_ms, remaining_ms=self.remaining_ms)


@dataclass(frozen=True)
class Event:
    event: str  # "message" when the block has no event field
    data: str
    id: str | None  # the block's own id field, if it had one
    at: float | None = None  # fake time when the chunk holding it was produced

    def json(self) -> Any:
        return json.loads(self.data)


@dataclass
class Stream:
    """An SSE body read the way a browser's EventSource reads it (WHATWG event stream rules)."""

    events: list[Event]
    comments: list[str]
    retry: int | None
    raw: str

    def of(self, kind: str) -> list[Event]:
        return [event for event in self.events if event.event == kind]

    @property
    def kinds(self) -> list[str]:
        return [event.event for event in self.events]

    @property
    def text(self) -> str:
        return "".join(event.json()["text"] for event in self.of("token"))

    @property
    def reasoning(self) -> str:
        return "".join(event.json()["text"] for event in self.of("reasoning"))

    @property
    def ids(self) -> list[int]:
        return [int(event.id) for event in self.events if event.id is not None]


def calls_at(owner: Any, name: str, clock: FakeClock) -> list[float]:
    """Wrap ``owner``'s method ``name`` so that each call is noted at the fake clock's time, and still made; the
    list those times go to."""
    at: list[float] = []
    method = getattr(owner, name)

    def noted(*args: Any, **kwargs: Any) -> Any:
        at.append(clock.t)
        return method(*args, **kwargs)

    setattr(owner, name, noted)
    return at


def read_stream(chunks: Iterable[str | bytes], clock: FakeClock | None = None) -> Stream:
    """Consume a body, then parse it line by line (CRLF, CR or LF end a line)."""
    raw_parts: list[str] = []
    times: list[tuple[int, float]] = []  # (offset where the chunk ends, fake time it was produced)
    offset = 0
    for chunk in chunks:
        text = chunk.decode("utf-8") if isinstance(chunk, bytes) else chunk
        raw_parts.append(text)
        offset += len(text)
        times.append((offset, clock.t if clock else 0.0))
    raw = "".join(raw_parts)
    events: list[Event] = []
    comments: list[str] = []
    retry: int | None = None
    name, data, event_id = "", [], None
    position = 0
    for line in raw.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        position += len(line) + 1
        if not line:
            if data:
                produced = next((when for end, when in times if end >= position - 1), None)
                events.append(Event(name or "message", "\n".join(data), event_id, produced))
            name, data, event_id = "", [], None
            continue
        if line.startswith(":"):
            comments.append(line[1:].strip())
            continue
        field_name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field_name == "event":
            name = value
        elif field_name == "data":
            data.append(value)
        elif field_name == "id":
            event_id = value
        elif field_name == "retry":
            retry = int(value)
    assert raw.endswith("\n\n") or not raw, "the stream must end at the end of an event block"
    return Stream(events, comments, retry, raw)


def write_turn(
    table: ChatTable,
    session_id: str,
    turn: int,
    words: list[str],
    *,
    stop_reason: StopReason = StopReason.END_TURN,
    error: ErrorInfo | None = None,
    reasoning: list[str] | None = None,
) -> list[TokenRecord]:
    """Write a whole turn as the consumer does (turn item first, then the token items); ``reasoning``: words of
    reasoning before the reply."""
    records = turn_records(session_id, turn, words, stop_reason=stop_reason, error=error, reasoning=reasoning or ())
    table.turns.end_from_stream(records[-1], assistant_text(records), reasoning=reasoning_text(records))
    table.put_records(records)
    return records
