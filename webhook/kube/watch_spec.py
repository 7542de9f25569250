"""What a watcher watches and how it paces itself: the kind, its key, its timings.

:class:`KindSpec` names one kind's collection, how its objects are keyed and trimmed, and
whether the API server may not serve it; :class:`WatchTimings` holds the backoff, timeouts,
page size and debouncing that ``webhook/kube/watcher.py`` (the list-then-watch loop) and
``webhook/kube/source.py`` (the snapshots) follow.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from webhook.kube.raw import Collection

__all__ = ["KindSpec", "WatchTimings", "key_by_name", "key_by_namespace_name"]


@dataclass(frozen=True)
class WatchTimings:
    """Timings of the watchers and of the snapshot debouncer, in seconds.

    The defaults suit a real cluster; tests shrink them so that recoveries take
    milliseconds.
    """

    #: First retry delay after a failure; doubles (``backoff_factor``) per failure.
    backoff_initial: float = 0.2
    #: Ceiling of the retry delay.
    backoff_max: float = 30.0
    backoff_factor: float = 2.0
    #: Each delay is drawn from ``[d * (1 - jitter), d]`` so replicas do not retry in step.
    backoff_jitter: float = 0.5
    #: A watch stream that stayed up this long counts as healthy: the backoff starts over.
    backoff_reset_after: float = 10.0
    #: Server-side watch timeout; each watch draws from ``[t, 2t)`` like client-go, so
    #: that many webhooks do not reconnect at the same moment.
    watch_timeout: float = 300.0
    #: TCP connect timeout of every request.
    connect_timeout: float = 10.0
    #: Read timeout of a list request (a single read, not the whole body).
    list_read_timeout: float = 60.0
    #: Extra read timeout beyond the watch timeout, to detect a dead connection.
    watch_read_margin: float = 30.0
    #: Items per list page (``limit``); 0 lists everything in one response.
    page_size: int = 500
    #: Changes within this quiet time are coalesced into one snapshot...
    debounce: float = 0.05
    #: ...but a snapshot is never delayed more than this after the first change.
    debounce_max: float = 0.5
    #: How often an optional kind the API server does not serve is looked for again.
    absent_recheck: float = 60.0

    def backoff(self, failures: int, rnd: Callable[[], float] = random.random) -> float:
        """The delay before retry number ``failures`` (1 for the first retry)."""
        if failures <= 0:
            return 0.0
        base = min(self.backoff_max, self.backoff_initial * self.backoff_factor ** (failures - 1))
        return base * (1.0 - self.backoff_jitter * rnd())


@dataclass(frozen=True)
class KindSpec:
    """What to watch and how to keep it.

    ``collection`` is what to list and watch, with its fixed query, e.g.
    ``Collection(api, "/api/v1/namespaces/gpu-operator/configmaps",
    (("fieldSelector", "metadata.name=device-plugin-config"),))``. ``trim`` returns the value to
    keep for an object, or None to not keep it (a pod without GPU requests). ``optional``:
    the API server may not serve the kind (a CRD that is not installed); see the module
    docstring.
    """

    name: str
    collection: Collection
    key: Callable[[dict[str, Any]], str]
    trim: Callable[[dict[str, Any]], Any]
    optional: bool = False


def key_by_name(obj: dict[str, Any]) -> str:
    """The key of a cluster-scoped object: its name."""
    return str((obj.get("metadata") or {}).get("name", ""))


def key_by_namespace_name(obj: dict[str, Any]) -> str:
    """The key of a namespaced object: ``namespace/name``."""
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"
