"""CPU time of the local execution environments, read from ``/proc`` (Linux).

Every execution environment the local Lambda starts is a child process of the benchmark whose environment holds
``AWS_LAMBDA_FUNCTION_NAME``, so CPU can be attributed to each function without hooks in the product code.

A :func:`snapshot` holds each process's CPU seconds so far, keyed by pid and start time (a reused pid is another
process). The CPU is read from the process's CPU-time clock (``clock_gettime`` on the clock ``clock_getcpuclockid``
names, which Linux lets any process read): nanoseconds, its exited threads included. ``/proc/<pid>/stat`` counts the
same time in clock ticks (10 ms), more than a function spends on one request; it is the fallback when the clock
cannot be read. :func:`delta` gives what each label spent between two snapshots, or ``None`` when that cannot be known:
a process of the label exited in between, taking the CPU it spent since the first snapshot with it. A label no
process had is absent: its CPU was not measured, which is not the same as none.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_CPUCLOCK_SCHED = 2  # linux/posix-timers.h: a process's CPU clock id is (~pid << 3) | CPUCLOCK_SCHED


def _cpu_clock_s(pid: int) -> float | None:
    """The process's CPU seconds in nanoseconds' precision (all its threads, exited ones too); None if unreadable."""
    try:
        return time.clock_gettime_ns(((~pid) << 3) | _CPUCLOCK_SCHED) / 1e9
    except OSError:
        return None


def _children(parent: int) -> list[int]:
    pids = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[1]) == parent:
                pids.append(int(entry.name))
    return pids


def _stat_fields(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat`` from its third field (``state``) on; None once the process is gone."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()


def _function_name(pid: int) -> str | None:
    try:
        environ = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    for entry in environ.split(b"\0"):
        if entry.startswith(b"AWS_LAMBDA_FUNCTION_NAME="):
            return entry.split(b"=", 1)[1].decode()
    return None


def _command_line(pid: int) -> str:
    try:
        return (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def _role(command_line: str) -> str:
    for marker, role in (
        ("moto.server", "moto"),
        ("multiprocessing", "clients"),
    ):
        if marker in command_line:
            return role
    return "other"


ProcessKey = tuple[int, int]  # pid, start time in clock ticks after boot


@dataclass(frozen=True)
class ProcessCpu:
    label: str  # the function's name, ``moto``, ``clients``, ``other``, or ``bench-process`` (the parent)
    cpu_s: float


Snapshot = dict[ProcessKey, ProcessCpu]


def snapshot(parent: int | None = None) -> Snapshot:
    """CPU seconds so far of the parent and its children, each labelled by function name (``moto`` for the
    emulator, ``clients`` for the load generator, ``other``)."""
    parent = os.getpid() if parent is None else parent
    out: Snapshot = {}
    for pid in [*_children(parent), parent]:
        fields = _stat_fields(pid)
        if fields is None:
            continue
        label = "bench-process" if pid == parent else _function_name(pid) or _role(_command_line(pid))
        cpu_s = _cpu_clock_s(pid)
        if cpu_s is None:
            cpu_s = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime
        out[(pid, int(fields[19]))] = ProcessCpu(label, cpu_s)
    return out


def delta(after: Snapshot, before: Snapshot) -> dict[str, float | None]:
    """CPU seconds each label spent between two snapshots: a process in both counts its difference, one that
    started in between all of its time; a label with a process that exited in between is ``None`` (not measured)."""
    spent: dict[str, float | None] = {}
    for key, process in after.items():
        earlier = before.get(key)
        used = process.cpu_s - (earlier.cpu_s if earlier is not None else 0.0)
        total = spent.get(process.label, 0.0)
        spent[process.label] = None if total is None else total + used
    for key, process in before.items():
        if key not in after:
            spent[process.label] = None
    return spent
