"""The chaos run's own faults that need no stack: the CPU stress, and which generation a killed proxy ran."""

from __future__ import annotations

import json
import os

from chaos.inject import CpuStress, generation_of, killed_turns
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


def test_only_killed_first_deliveries_are_generations_the_run_ended() -> None:
    # GIVEN three killed proxy invocations: turn 1's first delivery, turn 2's second delivery (its first generated),
    # and turn 3's first and second deliveries both
    def event(turn: int) -> bytes:
        return json.dumps({"session_id": "s-1", "turn": turn}).encode()

    killed = [
        KilledInvocation("r-1", event(1)),
        KilledInvocation("r-2b", event(2)),
        KilledInvocation("r-3", event(3)),
        KilledInvocation("r-3b", event(3)),
    ]

    # WHEN the second deliveries are known by request id
    ended = killed_turns(killed, {"r-2b", "r-3b", "r-other"})

    # THEN turns 1 and 3 lost their generation to the run, and turn 2 did not
    assert ended == {("s-1", 1), ("s-1", 3)}
