"""The chaos run's faults that act on the stack itself (the AWS faults are :mod:`chaos.faults`): execution
environments killed mid-invocation, and poison records put on the token stream."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from chaos.plan import poison_payload

if TYPE_CHECKING:
    import random

    from chatstream_local.stack import LocalStack

PROXY = "ProxyFunction"
CONSUMER = "ConsumerFunction"


class EnvironmentKiller:
    """Kills busy execution environments of the proxy and the consumer, up to a budget each, at random moments
    (0.2 to 1.5 s apart) until stopped or the budgets are spent."""

    def __init__(self, stack: LocalStack, budget: dict[str, int], rng: random.Random) -> None:
        self.stack = stack
        self.budget = dict(budget)
        self.kills = dict.fromkeys(budget, 0)
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
            if local_lambda.kill_busy_environment(self.stack.name(name)):
                self.kills[name] += 1


def put_poison(stack: LocalStack, session_id: str, n: int) -> bytes:
    """Put the run's ``n``-th poison record on the token stream with ``session_id``'s partition key."""
    payload = poison_payload(session_id, n)
    stack.client("kinesis").put_record(StreamName=stack.name("TokenStream"), Data=payload, PartitionKey=session_id)
    return payload
