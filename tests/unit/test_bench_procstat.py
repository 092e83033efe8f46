"""The benchmark's CPU accounting from /proc: what each function spent between two snapshots, and "not
measured" (None) when that cannot be known, never 0."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import pytest

from bench import procstat
from bench.procstat import ProcessCpu

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.skipif(not procstat.PROC.is_dir(), reason="reads /proc (Linux)")

# Spends CPU on each line read until its own CPU clock has advanced by 0.05 s, then answers "ok".
BURNER = """
import sys, time
for _ in sys.stdin:
    start = time.process_time()
    while time.process_time() - start < 0.05:
        pass
    print("ok", flush=True)
"""


def test_delta_counts_each_process_from_snapshot_to_snapshot() -> None:
    # GIVEN a process in both snapshots, one that started in between, and a label whose process exited
    before = {(10, 1): ProcessCpu("relay", 1.0), (11, 1): ProcessCpu("moto", 2.0), (12, 1): ProcessCpu("proxy", 3.0)}
    after = {(10, 1): ProcessCpu("relay", 1.5), (11, 1): ProcessCpu("moto", 2.25), (13, 9): ProcessCpu("relay", 0.25)}

    # WHEN the delta is taken
    spent = procstat.delta(after, before)

    # THEN the relay spent its difference plus the newcomer's whole time; the exited proxy is not measured
    assert spent == {"relay": 0.75, "moto": 0.25, "proxy": None}


def test_a_reused_pid_is_another_process() -> None:
    # GIVEN pid 10 exited and a new process got the same pid (another start time)
    before = {(10, 1): ProcessCpu("relay", 5.0)}
    after = {(10, 7): ProcessCpu("relay", 0.5)}

    # THEN the old one's CPU since the first snapshot is unknown: the label is not measured
    assert procstat.delta(after, before) == {"relay": None}


@pytest.fixture
def burner() -> Iterator[subprocess.Popen[str]]:
    env = {**os.environ, "AWS_LAMBDA_FUNCTION_NAME": "bench-test-burner"}
    process = subprocess.Popen(
        [sys.executable, "-c", BURNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    yield process
    process.kill()
    process.wait(timeout=10)


def burn(process: subprocess.Popen[str]) -> None:
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write("go\n")
    process.stdin.flush()
    assert process.stdout.readline().strip() == "ok"


def test_a_child_environment_is_measured_by_its_function_name_until_it_exits(
    burner: subprocess.Popen[str],
) -> None:
    # GIVEN a child process whose environment names a function, snapshotted before it spends CPU
    burn(burner)  # it has started and is labelled
    before = procstat.snapshot()
    assert "bench-test-burner" in {p.label for p in before.values()}

    # WHEN it spends CPU
    burn(burner)
    spent = procstat.delta(procstat.snapshot(), before)

    # THEN its function is charged for it, and the benchmark's own process is measured too
    assert (spent["bench-test-burner"] or 0.0) > 0.0
    assert spent["bench-process"] is not None

    # WHEN it exits before the next snapshot THEN its function is "not measured", not 0
    burner.kill()
    burner.wait(timeout=10)
    assert procstat.delta(procstat.snapshot(), before)["bench-test-burner"] is None


def test_a_process_cpu_is_read_from_its_cpu_clock_in_nanoseconds() -> None:
    # GIVEN this process's own CPU clock, read before and after the benchmark's reading of it
    before = time.process_time()
    read = procstat.snapshot()[(os.getpid(), _start_time(os.getpid()))].cpu_s
    after = time.process_time()

    # THEN the benchmark read the same clock (not /proc's 10 ms ticks): it lies between the two readings
    assert before <= read <= after


def _start_time(pid: int) -> int:
    stat = procstat.PROC.joinpath(str(pid), "stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[19])
