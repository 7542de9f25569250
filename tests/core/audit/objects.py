"""Builders for the audit's tests: pods with status and owners, workloads, GPU nodes."""

from __future__ import annotations

import zlib
from datetime import UTC, datetime
from typing import Any

from tests.support.objects import gpu_node

NOW = datetime(2025, 7, 14, 8, 18, 53, tzinfo=UTC)
API = {
    "ReplicaSet": "apps/v1",
    "Deployment": "apps/v1",
    "StatefulSet": "apps/v1",
    "DaemonSet": "apps/v1",
    "Job": "batch/v1",
    "CronJob": "batch/v1",
}


def uid(*parts: str) -> str:
    """A stable uid for an object (so owner references can point at it)."""
    n = zlib.crc32("/".join(parts).encode())
    return f"00000000-0000-4000-8000-{n:012d}"


def owner(kind: str, name: str, namespace: str = "ml") -> dict[str, Any]:
    """A controller ownerReference to ``kind``/``name``."""
    return {
        "apiVersion": API.get(kind, "v1"),
        "kind": kind,
        "name": name,
        "uid": uid(namespace, kind, name),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def apod(
    name: str,
    namespace: str = "ml",
    *,
    gpu: dict[str, Any] | None = None,
    node: str | None = None,
    phase: str | None = None,
    owned_by: tuple[str, str] | None = None,
    created: str = "2025-06-15T02:37:12Z",
    scheduler: str | None = None,
    reason: str | None = None,
    message: str | None = None,
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A Pod as the API returns it: the GPU container, a sidecar, status and owner.

    ``gpu`` goes into the first container's requests and limits; ``node`` binds it (phase
    Running unless given); unbound pods are Pending with ``scheduler`` as the PodScheduled
    message.
    """
    limits = {"cpu": "1", "memory": "2Gi", **(gpu or {})}
    containers = [
        {
            "name": "main",
            "image": "registry.example/infer:1",
            "resources": {"limits": limits, "requests": dict(limits)},
        },
        {"name": "proxy", "image": "envoy:1", "resources": {"requests": {"cpu": "100m"}}},
    ]
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid(namespace, "Pod", name),
        "creationTimestamp": created,
    }
    if owned_by:
        meta["ownerReferences"] = [owner(owned_by[0], owned_by[1], namespace)]
    if annotations:
        meta["annotations"] = annotations
    body: dict[str, Any] = {"containers": containers, **spec}
    status: dict[str, Any] = {}
    if node:
        body["nodeName"] = node
        status["phase"] = phase or "Running"
        status["conditions"] = [{"type": "PodScheduled", "status": "True"}]
    else:
        status["phase"] = phase or "Pending"
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": scheduler or "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
            }
        ]
    if reason:
        status["reason"] = reason
    if message:
        status["message"] = message
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body, "status": status}


def workload(
    kind: str,
    name: str,
    namespace: str = "ml",
    *,
    gpu: dict[str, Any] | None = None,
    owned_by: tuple[str, str] | None = None,
    created: str = "2025-04-02T06:10:00Z",
    annotations: dict[str, str] | None = None,
    **pod_spec: Any,
) -> dict[str, Any]:
    """A Deployment, ReplicaSet, StatefulSet, DaemonSet, Job or CronJob with a GPU template."""
    limits = {"cpu": "1", **(gpu or {})}
    template: dict[str, Any] = {
        "metadata": {"labels": {"app": name}},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/infer:1",
                    "resources": {"limits": limits},
                }
            ],
            **pod_spec,
        },
    }
    if annotations:
        template["metadata"]["annotations"] = annotations
    spec: dict[str, Any] = {"template": template}
    if kind == "CronJob":
        spec = {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": template}}}
    elif kind != "Job":
        spec["replicas"] = 1
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid(namespace, kind, name),
        "creationTimestamp": created,
    }
    if owned_by:
        meta["ownerReferences"] = [owner(owned_by[0], owned_by[1], namespace)]
    return {"apiVersion": API[kind], "kind": kind, "metadata": meta, "spec": spec}


def node(name: str, kind: str = "l20", **kwargs: Any) -> dict[str, Any]:
    """A GPU node as GFD labels it, without taints unless given (see tests.support.objects)."""
    kwargs.setdefault("taints", [])
    kwargs.setdefault("heavy", False)
    kwargs.setdefault("gpus", 1)
    return gpu_node(name, kind, **kwargs)
