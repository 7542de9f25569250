"""Waiting for state that has no event to wait on (counters, a server's answers)."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0, poll: float = 0.01) -> bool:
    """Call ``predicate`` every ``poll`` seconds until it holds (True) or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(poll)
    return True
