"""What :class:`~webhook.kube.source.ClusterSource` publishes: an immutable snapshot of the
cluster (:class:`ClusterState`) and the source's health for ``/readyz`` and ``/metrics``
(:class:`Health`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ClusterState:
    """One immutable view of the cluster, as the engine sees it.

    ``nodes`` and ``gpu_pods`` are tuples sorted by name (pods by ``namespace/name``) of
    the plain dicts made by :func:`~webhook.kube.trim.trim_node` and
    :func:`~webhook.kube.trim.trim_pod`. Those dicts are shared between successive
    snapshots (an unchanged node is the same object): treat them as read-only.
    """

    #: Trimmed Node objects (``metadata.name``/``labels``, ``spec.taints``,
    #: ``status.allocatable``/``capacity``), sorted by name.
    nodes: tuple[dict[str, Any], ...]
    #: Pods that ask for ``nvidia.com/*`` and are not Succeeded/Failed, trimmed.
    gpu_pods: tuple[dict[str, Any], ...]
    #: The device-plugin ConfigMap's ``data`` (read-only); None when not configured or
    #: not found.
    configmap: Mapping[str, str] | None
    #: ``(namespace, name)`` of the watched ConfigMap, None when none is watched.
    configmap_ref: tuple[str, str] | None
    #: ``{"nodes": rv, "pods": rv, "configmap": rv}`` as of the data in this snapshot.
    resource_versions: Mapping[str, str]
    #: True once every watched kind has been listed.
    synced: bool
    #: ``time.monotonic()`` when the data was last known current (all watches open).
    last_sync_monotonic: float
    #: API errors and watch restarts so far (all kinds), when the snapshot was built.
    errors: int
    watch_restarts: int
    #: False while the last attempt of some watcher failed to reach the API server.
    api_reachable: bool
    #: Increases by one per published snapshot.
    generation: int
    #: ``time.monotonic()`` when this snapshot was built.
    built_monotonic: float
    #: Trimmed Karpenter NodePools (:func:`~webhook.kube.trim.trim_nodepool`), sorted by
    #: name; empty where the cluster has no Karpenter (the CRD is not installed).
    nodepools: tuple[dict[str, Any], ...] = ()
    #: DeviceClasses, ResourceSlices, ResourceClaimTemplates and (when watched)
    #: ResourceClaims, trimmed, sorted by key; empty where DRA is not available.
    device_classes: tuple[dict[str, Any], ...] = ()
    resource_slices: tuple[dict[str, Any], ...] = ()
    resource_claims: tuple[dict[str, Any], ...] = ()
    resource_claim_templates: tuple[dict[str, Any], ...] = ()
    #: Whether DRA is watched, and why not: ``DRA available``, ``DRA is not available: ...``
    #: or ``DRA turned off``.
    dra: str = "DRA turned off"
    #: True when the DRA kinds above are watched (DRA available).
    dra_available: bool = False

    def node_list(self) -> dict[str, Any]:
        """The nodes as a ``kind: List`` document, the shape of ``kubectl get nodes -o yaml``."""
        return {"apiVersion": "v1", "kind": "List", "items": list(self.nodes)}

    def configmap_document(self) -> dict[str, Any] | None:
        """The ConfigMap as a document (what ``kubectl get cm -o yaml`` shows), or None."""
        if self.configmap is None or self.configmap_ref is None:
            return None
        namespace, name = self.configmap_ref
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"namespace": namespace, "name": name},
            "data": dict(self.configmap),
        }


@dataclass(frozen=True)
class Health:
    """What ``/readyz`` and ``/metrics`` need to know about the source."""

    #: Every kind has been listed at least once (a snapshot exists).
    synced: bool
    #: No watcher's last attempt failed to reach the API server.
    api_reachable: bool
    #: Seconds since the data was last known current; None before the first sync.
    sync_age_seconds: float | None
    #: Seconds since the current snapshot was built; None before the first one.
    snapshot_age_seconds: float | None
    watch_restarts: int
    relists: int
    errors: int
    snapshots: int
    callback_errors: int
    last_error: str | None
    #: None until discovery answered; then ``DRA available`` or why DRA is not watched.
    dra: str | None = None
    #: True when the DRA kinds are watched.
    dra_available: bool = False
