"""Stopping the servers that benchmarks and tests start: one way, used everywhere."""

from __future__ import annotations

import signal
import subprocess


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
