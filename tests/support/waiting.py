"""Waiting for state that has no event to wait on (counters, a server's answers)."""

from __future__ import annotations

import time
from collections.abc import Callable

#: The default deadline: generous, since a deadline only says when to give up. What comes within
#: a second on an idle machine can take several on two cores shared with a run's four control
#: planes and other work (a server's start took over 30 s there).
TIMEOUT = 30.0


def wait_until(predicate: Callable[[], bool], timeout: float = TIMEOUT, poll: float = 0.01) -> bool:
    """Call ``predicate`` every ``poll`` seconds until it holds (True) or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(poll)
    return True
