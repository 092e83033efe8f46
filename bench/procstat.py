"""CPU time of the local execution environments, read from ``/proc`` (Linux).

Every execution environment the local Lambda starts is a child process of the benchmark whose environment holds
``AWS_LAMBDA_FUNCTION_NAME``, so CPU can be attributed to each function without hooks in the product code.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

PROC = Path("/proc")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


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


def _cpu_seconds(pid: int) -> float | None:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime


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


def cpu_by_label(parent: int | None = None) -> dict[str, float]:
    """CPU seconds so far of the parent's children, by function name (``moto`` for the emulator, ``other``)."""
    parent = os.getpid() if parent is None else parent
    totals: dict[str, float] = {}
    for pid in _children(parent):
        seconds = _cpu_seconds(pid)
        if seconds is None:
            continue
        label = _function_name(pid) or _role(_command_line(pid))
        totals[label] = totals.get(label, 0.0) + seconds
    own = _cpu_seconds(parent)
    if own is not None:
        totals["bench-process"] = own
    return totals


def delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    """CPU seconds spent between two snapshots (a process that exited in between is lost, not negative)."""
    return {label: max(0.0, value - before.get(label, 0.0)) for label, value in after.items()}
