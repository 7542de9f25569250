"""Helpers shared by the kube tests."""

from __future__ import annotations

from collections.abc import Callable

from tests.support import waiting
from webhook.kube import ClusterSource, WatchTimings

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

#: The ``make_source`` fixture: ``make_source(**ClusterSource kwargs)``, started.
MakeSource = Callable[..., ClusterSource]


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    """Poll ``predicate`` often: watcher counters move within milliseconds."""
    return waiting.wait_until(predicate, timeout, poll=0.002)
