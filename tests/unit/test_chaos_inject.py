"""The chaos run's own faults that need no stack: the CPU stress, and which generation a killed proxy ran."""

from __future__ import annotations

import json
import os

from chaos.inject import CpuStress, generation_of, killed_generation
from chatstream_local.lambda_.invocation import KilledInvocation


def _state(pid: int) -> str | None:
    """The process's state letter (R running, Z zombie…), None once it is gone and reaped."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def test_the_cpu_stress_is_a_process_that_runs_until_the_block_ends() -> None:
    # WHEN a block runs under the CPU stress
    with CpuStress() as stress:
        pid = stress.pid
        assert pid is not None and pid != os.getpid()
        # THEN a child process spins during the block
        assert _state(pid) not in (None, "Z")

    # AND it is gone (killed and reaped) when the block ends
    assert _state(pid) is None


def test_a_killed_proxy_invocation_names_its_generation() -> None:
    payload = json.dumps({"session_id": "s-1", "turn": 3, "message": "hi"}).encode()

    assert generation_of(payload) == ("s-1", 3)


def test_a_generation_the_run_ended_is_one_whose_claiming_invocation_it_killed() -> None:
    def killed(request_id: str, turn: int) -> KilledInvocation:
        return KilledInvocation(request_id, json.dumps({"session_id": "s-1", "turn": turn}).encode())

    kills = [killed("r-1", 1), killed("r-2b", 2), killed("r-3", 3), killed("r-5", 5)]
    # the killed invocation had claimed the turn: the run ended its generation
    assert killed_generation(("s-1", 1), "r-1", kills)
    # a delivery killed after another claimed the turn (the first delivered or the second) ended nothing
    assert not killed_generation(("s-1", 2), "r-2a", kills)
    # a killed delivery that never claimed, with no other claim: it was killed before it could claim
    assert killed_generation(("s-1", 3), None, kills)
    # no kill of the turn at all, claimed or not (the relay's own claim when it could not invoke the proxy)
    assert not killed_generation(("s-1", 4), None, kills)
    assert not killed_generation(("s-1", 4), "relay", kills)
