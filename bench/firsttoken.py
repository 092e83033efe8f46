"""The first token's path, counted the way AWS bills it: CPU per function and the AWS calls made before it.

On Lambda a function's CPU is proportional to its memory, so the CPU each function spends between a chat's
request and its first token is latency as well as cost. For each pipeline variant, ``chats`` chats are sent one
after another, each a reply of two model deltas with ``model_delay_ms`` between them, so nothing of the second token
overlaps the first token's path, even where the first token takes a second (a polling consumer). For each chat:

- **CPU to the first token**, per function (relay, proxy, consumer): the CPU of every execution
  environment of the function (``bench.procstat``: each process's CPU clock, in nanoseconds) from just before the
  request to the moment the client reads the first ``token`` event; and the same to the chat's end (after the
  pipeline has settled), for the whole chat. The figures are means over the chats.
- **AWS calls before the first token**, per function: the calls moto served that started before the first token
  reached the client (moto's call timeline; moto and the benchmark share the machine's clock), plus the two that
  moto does not serve: the relay's asynchronous ``Invoke`` of the proxy and the proxy's ``ConverseStream``. The
  relay's ``Query`` polls are counted apart: only the last of them, the one that found the token, is on the path.
  ``sequential`` is the length of that chain: every call on it waits for the one before it (the relay's turn write,
  its invoke, the proxy's claim, ConverseStream, its put of the start and the first delta, its write of the
  delta through to the table, the relay's poll that finds it). The consumer writes the same item again ~70 ms after
  the put (``bench.run.FAN_OUT_LATENCY_MS``, Kinesis's push latency), after the first token: not on the path.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
import urllib.request
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bench import procstat
from chatstream_client.api import ChatClient
from chatstream_local.moto.callcount import CONTROL_PREFIX

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

ROLES = ("relay", "proxy", "consumer")
POLL = "relay.Query"
# Calls on the path that moto does not serve (the local Lambda and the local model do), one each per chat.
NOT_IN_MOTO = {"relay": ("Invoke",), "proxy": ("ConverseStream",)}


@dataclass(frozen=True)
class ChatPath:
    """One chat's first token: when, what each function's processes spent on it, and the calls made before it."""

    ttft_ms: float
    cpu_ms_to_first_token: dict[str, float | None]  # role -> CPU ms (None: not measured)
    cpu_ms_whole_chat: dict[str, float | None]
    calls_before_first_token: dict[str, int]  # "<role>.<operation>" -> calls


@dataclass(frozen=True)
class FirstTokenPath:
    """A variant's first-token path (results.json's ``first_token_path`` entries): CPU as means over its chats (see
    the module docstring), time to first token and calls as medians."""

    variant: str
    chats: int
    model_delay_ms: int
    ttft_ms_p50: float | None
    cpu_ms_to_first_token: dict[str, float | None]  # role -> mean CPU ms per chat; "product": their sum
    cpu_ms_whole_chat: dict[str, float | None]
    calls_before_first_token: dict[str, float]  # "<role>.<operation>" -> median calls per chat
    relay_polls_before_first_token: float
    sequential_calls_before_first_token: float

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> FirstTokenPath:
        return cls(**raw)

    @classmethod
    def of(cls, variant: str, model_delay_ms: int, paths: list[ChatPath]) -> FirstTokenPath:
        def mean(values: list[float | None]) -> float | None:
            known = [v for v in values if v is not None]
            return round(statistics.fmean(known), 1) if known and len(known) == len(values) else None

        cpu_first = {role: mean([p.cpu_ms_to_first_token.get(role) for p in paths]) for role in ROLES}
        cpu_whole = {role: mean([p.cpu_ms_whole_chat.get(role) for p in paths]) for role in ROLES}
        for cpu in (cpu_first, cpu_whole):
            parts = [cpu[role] for role in ROLES]
            cpu["product"] = None if None in parts else round(sum(p for p in parts if p is not None), 1)
        names = sorted({name for p in paths for name in p.calls_before_first_token})
        calls = {
            name: float(statistics.median([p.calls_before_first_token.get(name, 0) for p in paths])) for name in names
        }
        polls = calls.pop(POLL, 0.0)
        return cls(
            variant=variant,
            chats=len(paths),
            model_delay_ms=model_delay_ms,
            ttft_ms_p50=round(statistics.median([p.ttft_ms for p in paths]), 1) if paths else None,
            cpu_ms_to_first_token=cpu_first,
            cpu_ms_whole_chat=cpu_whole,
            calls_before_first_token=calls,
            relay_polls_before_first_token=polls,
            sequential_calls_before_first_token=sum(calls.values()) + (1 if polls else 0),
        )


def _timeline(moto_url: str) -> list[tuple[float, float, str, str, int]]:
    with urllib.request.urlopen(f"{moto_url}{CONTROL_PREFIX}timeline", timeout=10) as response:  # noqa: S310 - local
        return [(float(a), float(b), str(c), str(d), int(e)) for a, b, c, d, e in json.loads(response.read())]


def _by_role(spent: Mapping[str, float | None], functions: Mapping[str, str]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for role in ROLES:
        seconds = spent.get(functions[role])
        out[role] = None if seconds is None else round(seconds * 1000, 1)
    return out


def one_chat(url: str, moto_url: str, functions: Mapping[str, str], settle: Callable[[], None]) -> ChatPath:
    """One chat of two model deltas, measured to its first token and to its end."""
    settle()
    at_first: dict[str, Any] = {}
    lock = threading.Lock()

    def on_token(text: str) -> None:
        with lock:
            if not at_first:
                at_first["epoch"] = time.time()
                at_first["monotonic"] = time.monotonic()
                at_first["cpu"] = procstat.snapshot()

    with ChatClient(url, timeout=120) as client:  # made before the clock starts, as the load runner's clients are
        before = procstat.snapshot()
        sent_at = time.monotonic()
        result = client.chat("/long 2", on_token=on_token)
    if result.error is not None or result.done is None or not at_first:
        raise RuntimeError(f"first-token chat failed: {result.error or 'no token'}")
    settle()  # the consumer's last writes are in the whole chat's CPU
    after = procstat.snapshot()
    calls: dict[str, int] = {}
    for started, _seconds, label, operation, _items in _timeline(moto_url):
        if label in ROLES and started < at_first["epoch"]:
            calls[f"{label}.{operation}"] = calls.get(f"{label}.{operation}", 0) + 1
    for role, operations in NOT_IN_MOTO.items():
        for operation in operations:
            calls[f"{role}.{operation}"] = 1
    return ChatPath(
        ttft_ms=round((at_first["monotonic"] - sent_at) * 1000, 1),
        cpu_ms_to_first_token=_by_role(procstat.delta(at_first["cpu"], before), functions),
        cpu_ms_whole_chat=_by_role(procstat.delta(after, before), functions),
        calls_before_first_token=calls,
    )


def measure(
    variant: str,
    url: str,
    moto_url: str,
    functions: Mapping[str, str],
    *,
    settle: Callable[[], None],
    reset_calls: Callable[[], None],
    set_model_delay: Callable[[int], None],
    chats: int = 12,
    model_delay_ms: int = 1500,
) -> FirstTokenPath:
    """``chats`` chats one after another, each measured by :func:`one_chat`; their medians."""
    set_model_delay(model_delay_ms)
    paths = []
    for _ in range(chats):
        settle()
        reset_calls()
        paths.append(one_chat(url, moto_url, functions, settle))
    return FirstTokenPath.of(variant, model_delay_ms, paths)
