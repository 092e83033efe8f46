"""What a chaos run does, decided before it starts: its settings, the chats it sends, the poison it puts.

Everything here is pure and seeded: the same settings give the same chats (message, whether and when the
client drops its connection) and the same poison payloads. What is decided while the run goes (which
environment is killed, which request is faulted) is in :mod:`chaos.inject` and :mod:`chaos.faults`.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from chaos.faults import FaultRates
from chatstream.tools import ToolCall
from chatstream_local.bedrock.model import plan_reply

if TYPE_CHECKING:
    from collections.abc import Callable


@dataclass(frozen=True)
class ChaosSettings:
    chats: int = 200
    concurrency: int = 20
    seed: int = 0
    rates: FaultRates = field(default_factory=FaultRates.chaos)
    model_delay_ms: int = 2
    drop_rate: float = 0.25  # chats whose connection drops mid-stream and resumes
    # chats whose POST /chat is cut before its first byte (a phone in a tunnel), then sent again with its
    # Idempotency-Key: the relay must join the turn the first send started, never start a second
    cut_rate: float = 0.15
    model_error_rate: float = 0.1  # chats that end in a mid-stream model error
    tool_rate: float = 0.4  # of the chats of plain text, those that declare tools and get tool calls
    poison_records: int = 5
    proxy_kills: int = 4
    consumer_kills: int = 8
    duplicate_events: float = 0.1  # proxy events delivered twice, as Lambda may: the proxy must drop each second one
    stale_turn_s: int = 30  # the relay's STALE_TURN_S: a killed generation's stream ends after this
    retry_budget_s: float = 180.0  # a client resumes after the relay's own retryable errors this long without progress
    settle_timeout_s: float = 60.0
    run_timeout_s: float = 1200.0
    cpu_stress: bool = False  # one core kept busy for the whole run (a child process spinning)


@dataclass(frozen=True)
class ChatPlan:
    index: int
    message: str
    drop_after: int | None  # close the connection after this many token events, then resume
    tools: tuple[str, ...] = ()  # the tools the chat declares (each with an open object schema)
    cut_post: bool = False  # its first POST /chat is cut before its first byte, then sent again with its key

    @property
    def idempotency_key(self) -> str:
        """The key every send of this chat's POST /chat carries (one stack per run: unique in it)."""
        return f"chaos-chat-{self.index}"

    @property
    def expected_text(self) -> str:
        """The reply the local model sends for this chat's message."""
        return plan_reply(self.message, tools=self.tools).text

    @property
    def expected_calls(self) -> tuple[ToolCall, ...]:
        """The tool calls the local model makes for this chat's message (``/call`` lines, with tools declared), as a
        turn's records spell them: the model's ids, names and arguments, ``{}`` for none."""
        return tuple(
            ToolCall(call.id, call.name, call.arguments or "{}")
            for call in plan_reply(self.message, tools=self.tools).calls
        )

    @property
    def model_fails(self) -> bool:
        return self.message.startswith("/error-after")


TOOLS = ("get_weather", "search", "get_time")  # what a tool chat declares
# The length of a call's arguments' text: none ({}), short, a few records, many records (the local model streams 8
# characters a delta; a record holds what came in one flush interval)
ARGUMENT_LENGTHS = (0, 30, 600, 4000)


def plan_chats(settings: ChaosSettings) -> list[ChatPlan]:
    """The run's chats, from ``settings.seed``: mixed lengths, some model errors, some dropped connections, and
    tool chats (``tool_rate`` of the plain text chats, drawn apart so the other chats stay what the seed made them):
    one to three parallel calls, arguments from none to several thousand characters.

    The first four are one of each kind (an ordinary message, a model error, a long reply that drops, tool calls
    with long arguments that drop), so a short run still exercises every path; the first's POST is cut before its
    first byte, and so is about ``cut_rate`` of the others' (drawn apart, so the messages and drops of a seed stay what
    they were).
    """
    rng = random.Random(settings.seed)
    tool_rng = random.Random(f"{settings.seed}:tools")
    cuts = random.Random(f"{settings.seed}:cuts")
    plans = []
    for index in range(settings.chats):
        roll = rng.random() if index > 2 else (0.99, 0.0, 0.5)[index]
        roll = 0.99 if index == 3 else roll
        tools: tuple[str, ...] = ()
        if roll < settings.model_error_rate:
            message = f"/error-after {rng.randint(0, 60)}"
        elif roll < 0.55:
            message = f"/long {rng.choice([1, 5, 40, 120, 300, 600])}"
        else:
            message = f"chaos chat {index}: héllo 🙂 wörld {'tokens ' * rng.randint(0, 30)}".strip()
            if index == 3 or (index > 3 and tool_rng.random() < settings.tool_rate):
                message, tools = _tool_message(index, tool_rng, long=index == 3), TOOLS
        drop_after = rng.randint(0, 6) if rng.random() < settings.drop_rate or index in (2, 3) else None
        cut_post = cuts.random() < settings.cut_rate or index == 0
        plans.append(ChatPlan(index, message, drop_after, tools, cut_post=cut_post))
    return plans


def _tool_message(index: int, rng: random.Random, *, long: bool) -> str:
    """A message the local model answers with its first line as text, then a call for each ``/call`` line."""
    lines = [f"chaos tools {index}: héllo 🙂"]
    for call in range(1 if long else rng.randint(1, 3)):
        length = ARGUMENT_LENGTHS[-1] if long else rng.choice(ARGUMENT_LENGTHS)
        name = TOOLS[(index + call) % len(TOOLS)]
        if length == 0:
            lines.append(f"/call {name}")
            continue
        words = " ".join(f"wörd{n}" for n in range(length // 6 + 1))[:length]
        lines.append(f"/call {name} {json.dumps({'q': words, 'n': call}, ensure_ascii=False)}")
    return "\n".join(lines)


def _wrong_types(session_id: str, n: int) -> bytes:
    return json.dumps({"v": 1, "session_id": session_id, "turn": 1, "seq": "x", "type": "delta", "n": n}).encode()


def _wrong_version(session_id: str, n: int) -> bytes:
    return json.dumps({"v": 2, "session_id": session_id, "turn": 1, "seq": 0, "type": "start", "n": n}).encode()


POISON_SHAPES: tuple[Callable[[str, int], bytes], ...] = (
    lambda session_id, n: f"not json at all #{n}".encode(),
    _wrong_types,
    _wrong_version,
    lambda session_id, n: b"\xff\xfe\x00 invalid utf-8 #" + str(n).encode(),
    lambda session_id, n: json.dumps([session_id, n]).encode(),  # JSON, not an object
)


def poison_payload(session_id: str, n: int) -> bytes:
    """The ``n``-th poison record of a run: not a token record, in one of five shapes, unique by ``n``."""
    return POISON_SHAPES[n % len(POISON_SHAPES)](session_id, n)
