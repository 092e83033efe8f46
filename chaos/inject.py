"""The chaos run's faults that act on the stack itself (the AWS faults are :mod:`chaos.faults`): execution
environments killed mid-invocation, poison records put on the token stream, and a core kept busy."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from typing import TYPE_CHECKING

from chaos.plan import poison_payload
from chatstream_local.process import die_with_parent

if TYPE_CHECKING:
    import random
    from collections.abc import Iterable

    from chatstream_local.lambda_.invocation import KilledInvocation
    from chatstream_local.stack import LocalStack

PROXY = "ProxyFunction"
CONSUMER = "ConsumerFunction"


class EnvironmentKiller:
    """Kills busy execution environments of the proxy and the consumer, up to a budget each, at random moments
    (0.2 to 1.5 s apart) until stopped or the budgets are spent.

    ``kills`` counts the kills by function; ``killed_proxies`` holds every proxy invocation killed (its request id
    and event), from which :func:`killed_generation` tells the generations the run itself ended.
    """

    def __init__(self, stack: LocalStack, budget: dict[str, int], rng: random.Random) -> None:
        self.stack = stack
        self.budget = dict(budget)
        self.kills = dict.fromkeys(budget, 0)
        self.killed_proxies: list[KilledInvocation] = []
        self.rng = rng
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-killer", daemon=True)

    def __enter__(self) -> EnvironmentKiller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        local_lambda = self.stack.local_lambda
        assert local_lambda is not None, "the stack is started before the killer"
        while not self._stop.wait(self.rng.uniform(0.2, 1.5)):
            wanted = [name for name, left in self.budget.items() if self.kills[name] < left]
            if not wanted:
                return
            name = self.rng.choice(wanted)
            killed = local_lambda.kill_busy_environment(self.stack.name(name))
            if killed is None:
                continue
            self.kills[name] += 1
            if name == PROXY:
                self.killed_proxies.append(killed)


def killed_generation(turn: tuple[str, int], generator: str | None, killed: Iterable[KilledInvocation]) -> bool:
    """Whether the run's kills ended ``turn``'s generation. Whichever delivery of its event claims the turn generates
    it (the first to claim, not always the first delivered), and the claim is its request id (``generator``): so it
    is the killed invocation that had claimed the turn, or, when none claimed it, any killed invocation of the turn
    (killed before it could claim). A killed delivery that found the turn claimed by another request id ended nothing;
    a duplicate delivery of the same event shares its request id, so its kill counts as the claimant's (the reaper
    ends the turn on its record: it cannot tell them apart either)."""
    killed_ids = {inv.request_id for inv in killed if generation_of(inv.payload) == turn}
    return generator in killed_ids if generator is not None else bool(killed_ids)


def generation_of(payload: bytes) -> tuple[str, int]:
    """The (session, turn) a proxy invocation's event generates."""
    event = json.loads(payload)
    return str(event["session_id"]), int(event["turn"])


class CpuStress:
    """One core kept busy for as long as it runs: a child process spinning (``make chaos ARGS=--cpu-stress``)."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def __enter__(self) -> CpuStress:
        # Started from the run's main thread, so it dies with the run even when the run is killed.
        self._process = subprocess.Popen(  # noqa: S603 - a fixed argv
            [sys.executable, "-c", "while True: pass"], preexec_fn=die_with_parent
        )
        return self

    def __exit__(self, *exc: object) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait(timeout=10)


def put_poison(stack: LocalStack, session_id: str, n: int) -> bytes:
    """Put the run's ``n``-th poison record on the token stream with ``session_id``'s partition key."""
    payload = poison_payload(session_id, n)
    stack.client("kinesis").put_record(StreamName=stack.name("TokenStream"), Data=payload, PartitionKey=session_id)
    return payload
