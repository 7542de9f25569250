"""Cluster inventory from the API server, handed to the engine as immutable snapshots.

:class:`ClusterSource` runs one :class:`~webhook.kube.watcher.ResourceWatcher` per kind
(Nodes, GPU Pods, the device-plugin ConfigMap, Karpenter NodePools where the cluster serves
them, and where it serves
``resource.k8s.io/v1`` the DRA kinds: DeviceClasses, ResourceSlices, ResourceClaimTemplates,
optionally ResourceClaims) and one publisher thread. Whether DRA is served is asked once, by API
discovery (``webhook.kube.discovery``), on a thread of its own that retries like a watcher;
the first snapshot waits for that answer, so that a DRA cluster is never judged without it.
Watchers only update their own dict and raise a flag; the publisher coalesces bursts (5,000
ADDED events on start, a rolling relabel of a node pool) into one :class:`ClusterState` and
swaps it in.
A request reads one ``ClusterState`` from start to end: nothing in it changes under it.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from kubernetes import client

from webhook.contract import DRA_MODES
from webhook.kube.cluster_state import ClusterState, Health
from webhook.kube.discovery import DraSupport, discover_dra, dra_list_calls
from webhook.kube.trim import configmap_data, dra_trimmer, trim_node, trim_nodepool, trim_pod
from webhook.kube.watch_spec import KindSpec, WatchTimings, key_by_name, key_by_namespace_name
from webhook.kube.watcher import ResourceWatcher
from webhook.policy.dra import API_GROUP

__all__ = ["DRA_KINDS", "ClusterSource", "ClusterState", "Health"]

log = logging.getLogger(__name__)

#: Karpenter's NodePools (docs/autoscaling.md): group, version, plural.
NODEPOOLS = ("karpenter.sh", "v1", "nodepools")

#: The field selector for pods that can hold a device: completed pods are left out by the
#: API server itself (a pod that completes arrives as DELETED).
POD_FIELD_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed"

#: The DRA kinds watched (ResourceClaims only with ``watch_claims``; ResourceClaimTemplates,
#: which pods' spec.resourceClaims name, always), and their kind names.
DRA_KINDS = {
    "deviceclasses": "DeviceClass",
    "resourceslices": "ResourceSlice",
    "resourceclaims": "ResourceClaim",
    "resourceclaimtemplates": "ResourceClaimTemplate",
}


#: The API classes of ``kubernetes.client`` a ClusterSource calls (with discovery's, for DRA).
WATCH_APIS = ("CoreV1Api", "CustomObjectsApi", "ApisApi", "ResourceV1Api")


def import_watch_apis() -> None:
    """Import the API classes a watch calls, and the model classes each of them names.

    ``import kubernetes`` does not: kubernetes 37 imports an API's module, and with it a
    pydantic model class for every object that API takes or returns (about 300 modules for
    these four), the first time ``client.<Name>Api`` is looked up. gunicorn's master calls this
    before it forks the workers (``webhook.server.cluster.import_watch_modules``).
    """
    for name in WATCH_APIS:
        getattr(client, name)


class ClusterSource:
    """Watches Nodes, GPU Pods and the device-plugin ConfigMap; publishes ClusterStates.

    ``api_client`` is a ``kubernetes.client.ApiClient`` (see :func:`webhook.kube.load_client`).
    ``configmap`` is ``(namespace, name)`` of the device-plugin ConfigMap, or None to not
    watch one; it is watched with ``fieldSelector=metadata.name=<name>`` so that RBAC can
    grant just that ConfigMap. ``watch_pods=False`` leaves pods out (``gpu_pods`` stays
    empty); ``watch_nodepools=False`` leaves Karpenter's NodePools out (an optional kind:
    a cluster without the CRD has none). ``on_snapshot`` runs on the publisher thread after
    each new snapshot; it should only swap a reference. The first snapshot is published once
    every kind has been listed.

    ``dra`` is ``auto`` (watch DeviceClasses and ResourceSlices where discovery finds
    ``resource.k8s.io/v1`` and they may be listed) or ``off``; ``watch_claims`` adds
    ResourceClaims (the audit reads their allocations).

    Call :meth:`start`, then read :attr:`current` (or wait with :meth:`wait_synced`);
    :meth:`stop` ends the threads. Also a context manager.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        configmap: tuple[str, str] | None,
        on_snapshot: Callable[[ClusterState], None] | None = None,
        watch_pods: bool = True,
        watch_nodepools: bool = True,
        timings: WatchTimings | None = None,
        dra: str = "auto",
        watch_claims: bool = False,
    ) -> None:
        if dra not in DRA_MODES:
            raise ValueError(f"dra must be one of {', '.join(DRA_MODES)}, not {dra!r}")
        self.timings = timings or WatchTimings()
        self._api_client = api_client
        self._dra_kinds = tuple(k for k in DRA_KINDS if watch_claims or k != "resourceclaims")
        #: What discovery found; None until it answered (``dra="off"``: never asked).
        self.dra: DraSupport | None = (
            DraSupport(False, "turned off by configuration") if dra == "off" else None
        )
        self._dra_thread: threading.Thread | None = None
        self.configmap = configmap
        self._on_snapshot = on_snapshot
        self._cond = threading.Condition()
        self._dirty = False
        self._first_change = 0.0
        self._last_change = 0.0
        self._stopping = False
        self._current: ClusterState | None = None
        self._published_reachable: bool | None = None
        self._publisher: threading.Thread | None = None
        self.snapshots = 0
        self.callback_errors = 0
        self._dra_error: str | None = None

        core = client.CoreV1Api(api_client)
        specs = [KindSpec("nodes", core.list_node, key_by_name, trim_node)]
        if watch_pods:
            pods = functools.partial(
                core.list_pod_for_all_namespaces, field_selector=POD_FIELD_SELECTOR
            )
            specs.append(KindSpec("pods", pods, key_by_namespace_name, trim_pod))
        if configmap is not None:
            namespace, name = configmap
            cms = functools.partial(
                core.list_namespaced_config_map, namespace, field_selector=f"metadata.name={name}"
            )
            specs.append(KindSpec("configmap", cms, key_by_name, configmap_data))
        if watch_nodepools:
            custom = client.CustomObjectsApi(api_client)
            nodepools = functools.partial(custom.list_cluster_custom_object, *NODEPOOLS)
            specs.append(
                KindSpec("nodepools", nodepools, key_by_name, trim_nodepool, optional=True)
            )
        self.watchers: dict[str, ResourceWatcher] = {
            spec.name: ResourceWatcher(spec, self.timings, self._changed, self._status_changed)
            for spec in specs
        }

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> ClusterSource:
        """Start the watcher threads and the publisher thread (all daemons)."""
        self._publisher = threading.Thread(
            target=self._publish_loop, name="kube-snapshots", daemon=True
        )
        self._publisher.start()
        for watcher in self.watchers.values():
            watcher.start()
        if self.dra is None:
            self._dra_thread = threading.Thread(
                target=self._discover_loop, name="kube-dra-discovery", daemon=True
            )
            self._dra_thread.start()
        return self

    def _discover_loop(self) -> None:
        """Ask discovery until it answers; then start the DRA watchers if DRA is available."""
        failures = 0
        while True:
            with self._cond:
                if self._stopping:
                    return
            try:
                found = discover_dra(self._api_client, kinds=self._dra_kinds)
            except Exception as exc:  # unreachable or 5xx: retried like a list
                failures += 1
                self._dra_error = f"discovering {API_GROUP}: {exc}"
                delay = self.timings.backoff(failures)
                log.warning("%s (failure %d); retrying in %.2fs", self._dra_error, failures, delay)
                with self._cond:
                    self._cond.wait_for(lambda: self._stopping, timeout=delay)
                continue
            self._dra_error = None
            self._enable_dra(found)
            return

    def _enable_dra(self, found: DraSupport) -> None:
        calls = dra_list_calls(self._api_client)
        with self._cond:
            if self._stopping:
                return
            if found.available:
                added = {
                    kind: ResourceWatcher(
                        KindSpec(kind, calls[kind], _dra_key(kind), dra_trimmer(DRA_KINDS[kind])),
                        self.timings,
                        self._changed,
                        self._status_changed,
                    )
                    for kind in self._dra_kinds
                }
                # A new dict, swapped in whole: readers iterate the old one undisturbed.
                self.watchers = {**self.watchers, **added}
                for watcher in added.values():
                    watcher.start()
            # Set last: ``synced`` needs it, and the new watchers are in place by now.
            self.dra = found
        if found.available:
            log.info("DRA available: watching %s", ", ".join(self._dra_kinds))
        else:
            log.warning("%s; judging device-plugin resources only", found.describe())
        self._changed()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop every thread; the last snapshot stays readable."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        for watcher in self.watchers.values():
            watcher.stop()
        deadline = time.monotonic() + timeout
        for watcher in self.watchers.values():
            watcher.join(max(0.0, deadline - time.monotonic()))
        if self._dra_thread is not None:
            self._dra_thread.join(max(0.0, deadline - time.monotonic()))
        if self._publisher is not None:
            self._publisher.join(max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> ClusterSource:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ reading

    @property
    def current(self) -> ClusterState | None:
        """The latest snapshot, or None before the first sync. One atomic read."""
        return self._current

    def wait_synced(self, timeout: float) -> bool:
        """Wait until the first snapshot is published; True if it was."""
        return self.wait_for(lambda s: s.synced, timeout)

    def wait_for(self, predicate: Callable[[ClusterState], bool], timeout: float) -> bool:
        """Wait until a published snapshot satisfies ``predicate``; True if one did."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                state = self._current
                if state is not None and predicate(state):
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)

    @property
    def watch_restarts(self) -> int:
        """Watch streams that ended and were reopened, all kinds (a counter)."""
        return sum(w.restarts for w in self.watchers.values())

    @property
    def api_errors(self) -> int:
        """Failed API requests and broken streams, all kinds (a counter)."""
        return sum(w.errors for w in self.watchers.values())

    @property
    def relists(self) -> int:
        """Lists made again after a 410 Gone, all kinds (a counter)."""
        return sum(w.relists for w in self.watchers.values())

    @property
    def api_reachable(self) -> bool:
        """False while some watcher's last attempt failed to reach the API server."""
        return all(w.reachable is not False for w in self.watchers.values())

    @property
    def synced(self) -> bool:
        """True once discovery answered and every watched kind has been listed."""
        return self.dra is not None and all(w.synced for w in self.watchers.values())

    def snapshot_age(self) -> float | None:
        """Seconds since the data was last known current (None before the first sync)."""
        last = self._last_sync()
        return None if last is None else max(0.0, time.monotonic() - last)

    def _last_sync(self) -> float | None:
        times = [w.last_ok_effective for w in self.watchers.values()]
        return None if any(t is None for t in times) else min(t for t in times if t is not None)

    def health(self) -> Health:
        """The source's condition now, for readiness and metrics."""
        state = self._current
        now = time.monotonic()
        errors = [w.last_error for w in self.watchers.values() if w.last_error]
        if self._dra_error:
            errors.append(self._dra_error)
        dra = self.dra
        return Health(
            synced=self.synced,
            api_reachable=self.api_reachable,
            sync_age_seconds=self.snapshot_age(),
            snapshot_age_seconds=None if state is None else now - state.built_monotonic,
            watch_restarts=self.watch_restarts,
            relists=self.relists,
            errors=self.api_errors,
            snapshots=self.snapshots,
            callback_errors=self.callback_errors,
            last_error=errors[-1] if errors else None,
            dra=None if dra is None else dra.describe(),
            dra_available=dra is not None and dra.available,
        )

    # ------------------------------------------------------------------ publishing

    def _changed(self) -> None:
        # Called by watcher threads: only note the change; the publisher does the work.
        now = time.monotonic()
        with self._cond:
            if not self._dirty:
                self._dirty = True
                self._first_change = now
            self._last_change = now
            self._cond.notify_all()

    def _status_changed(self) -> None:
        # Reachability is part of the snapshot: publish when it flips, not on every call.
        if self._current is not None and self.api_reachable != self._published_reachable:
            self._changed()

    def _publish_loop(self) -> None:
        t = self.timings
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._dirty or self._stopping)
                if self._stopping:
                    return
                # The first snapshot goes out at once: readiness waits for it.
                if self._current is not None:
                    while not self._stopping:
                        now = time.monotonic()
                        deadline = min(
                            self._last_change + t.debounce, self._first_change + t.debounce_max
                        )
                        if now >= deadline:
                            break
                        self._cond.wait(deadline - now)
                self._dirty = False
            if not self.synced:
                continue  # the last kind to list will set the flag again
            state = self._build()
            with self._cond:
                self._current = state
                self._published_reachable = state.api_reachable
                self.snapshots += 1
                self._cond.notify_all()
            # A flip while this snapshot was built (before _current was set) went unseen
            # by _status_changed: publish again.
            self._status_changed()
            log.debug(
                "snapshot %d: %d nodes, %d GPU pods, configmap %s, %d ResourceSlices",
                state.generation,
                len(state.nodes),
                len(state.gpu_pods),
                "absent" if state.configmap is None else f"{len(state.configmap)} keys",
                len(state.resource_slices),
            )
            if self._on_snapshot is not None:
                try:
                    self._on_snapshot(state)
                except Exception:
                    # A failing consumer must not stop the inventory from updating.
                    self.callback_errors += 1
                    log.exception("on_snapshot callback failed for snapshot %d", state.generation)

    def _build(self) -> ClusterState:
        views = {name: w.view()[1] for name, w in self.watchers.items()}
        configmap: Mapping[str, str] | None = None
        if views.get("configmap"):
            configmap = MappingProxyType(views["configmap"][0])
        previous = self._current
        rvs = {name: w.data_resource_version or "" for name, w in self.watchers.items()}
        now = time.monotonic()
        last = self._last_sync()
        return ClusterState(
            nodes=views["nodes"],
            gpu_pods=views.get("pods", ()),
            configmap=configmap,
            configmap_ref=self.configmap,
            resource_versions=MappingProxyType(rvs),
            synced=True,
            last_sync_monotonic=now if last is None else last,
            errors=self.api_errors,
            watch_restarts=self.watch_restarts,
            api_reachable=self.api_reachable,
            generation=1 if previous is None else previous.generation + 1,
            built_monotonic=now,
            nodepools=views.get("nodepools", ()),
            device_classes=views.get("deviceclasses", ()),
            resource_slices=views.get("resourceslices", ()),
            resource_claims=views.get("resourceclaims", ()),
            resource_claim_templates=views.get("resourceclaimtemplates", ()),
            dra="DRA not asked yet" if self.dra is None else self.dra.describe(),
            dra_available=self.dra is not None and self.dra.available,
        )


# The namespaced DRA kinds; DeviceClasses and ResourceSlices are cluster-scoped.
_NAMESPACED = ("resourceclaims", "resourceclaimtemplates")


def _dra_key(kind: str) -> Callable[[dict[str, Any]], str]:
    # ResourceClaims are namespaced; classes and slices are cluster-scoped.
    return key_by_namespace_name if kind in _NAMESPACED else key_by_name
