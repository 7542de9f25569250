"""The processes tests and benchmarks start: stopping them, their workers, their CPU time.

Linux only for :func:`children` and :func:`cpu_seconds` (they read /proc).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterable

_TICK = os.sysconf("SC_CLK_TCK")


def terminate(proc: subprocess.Popen[bytes], timeout: float = 15) -> None:
    """SIGTERM (gunicorn finishes requests in flight), wait, and SIGKILL if it hangs."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def terminate_all(procs: Iterable[subprocess.Popen[bytes]], timeout: float = 30) -> None:
    """:func:`terminate` several at once: SIGTERM to each, then wait for all within one
    ``timeout``, SIGKILL for those still running. A gunicorn's graceful stop takes seconds;
    stopping replicas one after the other added those up after every test that had three."""
    running = [p for p in procs if p.poll() is None]
    for proc in running:
        proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for proc in running:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _stat(pid: int) -> list[str]:
    # The fields after the command name, which may hold spaces and parentheses.
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def children(master: int) -> list[int]:
    """The pids whose parent is ``master`` (the gunicorn workers)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if int(_stat(int(entry))[1]) == master:
                    out.append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    return out


def cpu_seconds(pids: list[int]) -> dict[int, float]:
    """utime + stime of each pid, in seconds (0 for a process that is gone)."""
    out = {}
    for pid in pids:
        try:
            fields = _stat(pid)
            out[pid] = (int(fields[11]) + int(fields[12])) / _TICK
        except (OSError, IndexError, ValueError):
            out[pid] = 0.0
    return out
