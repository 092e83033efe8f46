"""The chaos run's own faults that need no stack: the CPU stress, and which generation a killed proxy ran."""

from __future__ import annotations

import json
import os

from chaos.inject import CpuStress, generation_of


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
