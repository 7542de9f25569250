"""Helpers shared by the kube tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support import waiting
from webhook.audit import Collector
from webhook.kube import ClusterSource, WatchTimings
from webhook.kube.lister import Sink, connect_audit, read_for_audit

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


def wait_until(predicate: Callable[[], bool], timeout: float = waiting.TIMEOUT) -> bool:
    """Poll ``predicate`` often: watcher counters move within milliseconds (the timeout is
    generous: the API server may share a loaded machine)."""
    return waiting.wait_until(predicate, timeout, poll=0.002)


def read_cluster(kubeconfig: Path, sink: Sink, **kwargs: Any) -> list[dict[str, Any]]:
    """``read_for_audit`` through a client for ``kubeconfig``, closed afterwards."""
    with connect_audit(str(kubeconfig)) as api:
        return read_for_audit(api, sink, **kwargs)


class Pages:
    """A sink that keeps the (kind, size) of every page besides collecting it."""

    def __init__(self) -> None:
        self.collector = Collector()
        self.sizes: list[tuple[str | None, int]] = []

    def add_all(self, objects: Any, kind: str | None = None) -> None:
        page = list(objects)
        self.sizes.append((kind, len(page)))
        self.collector.add_all(page, kind=kind)
