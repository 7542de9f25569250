"""The pod-template kinds (Deployments, Jobs, ...) and the owner references that tie pods to
them."""

from __future__ import annotations

import zlib
from typing import Any

# kind -> (group, version, resource) of the kinds that hold a pod template, which the
# validating endpoint judges and the audit lists.
TEMPLATE_KINDS: dict[str, tuple[str, str, str]] = {
    "Deployment": ("apps", "v1", "deployments"),
    "ReplicaSet": ("apps", "v1", "replicasets"),
    "StatefulSet": ("apps", "v1", "statefulsets"),
    "DaemonSet": ("apps", "v1", "daemonsets"),
    "Job": ("batch", "v1", "jobs"),
    "CronJob": ("batch", "v1", "cronjobs"),
    "ReplicationController": ("", "v1", "replicationcontrollers"),
    "PodTemplate": ("", "v1", "podtemplates"),
}
#: kind -> apiVersion, for every kind of TEMPLATE_KINDS.
API_VERSIONS: dict[str, str] = {
    kind: f"{group}/{version}" if group else version
    for kind, (group, version, _) in TEMPLATE_KINDS.items()
}


def uid(*parts: str) -> str:
    """A stable uid for an object (so owner references can point at it)."""
    n = zlib.crc32("/".join(parts).encode())
    return f"00000000-0000-4000-8000-{n:012d}"


def owner(kind: str, name: str, namespace: str = "ml") -> dict[str, Any]:
    """A controller ownerReference to ``kind``/``name``."""
    return {
        "apiVersion": API_VERSIONS.get(kind, "v1"),
        "kind": kind,
        "name": name,
        "uid": uid(namespace, kind, name),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def workload(
    kind: str,
    name: str = "train",
    namespace: str = "ml",
    *,
    spec: dict[str, Any] | None = None,
    gpu: dict[str, Any] | None = None,
    owned_by: tuple[str, str] | None = None,
    created: str = "2025-04-02T06:10:00Z",
    annotations: dict[str, str] | None = None,
    **pod_spec: Any,
) -> dict[str, Any]:
    """An object of ``kind`` (a key of TEMPLATE_KINDS) whose pod template runs ``spec``.

    Without ``spec``, the template has one container ``main`` with ``gpu`` (``{resource:
    quantity}``) in its limits, and ``pod_spec``'s fields. A Deployment, ReplicaSet,
    StatefulSet, DaemonSet and ReplicationController get one replica and a selector.
    """
    if spec is None:
        limits = {"cpu": "1", **(gpu or {})}
        spec = {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/infer:1",
                    "resources": {"limits": limits},
                }
            ],
            **pod_spec,
        }
    template: dict[str, Any] = {"metadata": {"labels": {"app": name}}, "spec": spec}
    if annotations:
        template["metadata"]["annotations"] = annotations
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid(namespace, kind, name),
        "creationTimestamp": created,
    }
    if owned_by:
        meta["ownerReferences"] = [owner(owned_by[0], owned_by[1], namespace)]
    obj: dict[str, Any] = {"apiVersion": API_VERSIONS[kind], "kind": kind, "metadata": meta}
    if kind == "PodTemplate":
        obj["template"] = template
    elif kind == "CronJob":
        obj["spec"] = {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": template}}}
    elif kind == "Job":
        obj["spec"] = {"template": template}
    else:
        obj["spec"] = {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": template,
        }
    return obj
