"""Helpers shared by the kube tests."""

from __future__ import annotations

import time
from collections.abc import Callable

from webhook.kube import WatchTimings

#: Millisecond backoffs and debounce so recoveries do not slow the suite down.
FAST = WatchTimings(
    backoff_initial=0.01,
    backoff_max=0.1,
    backoff_reset_after=1.0,
    watch_timeout=30,
    connect_timeout=2,
    list_read_timeout=5,
    page_size=50,
    debounce=0.01,
    debounce_max=0.1,
)


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    """Poll ``predicate`` for state that has no event to wait on (watcher counters)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True
