"""Cut API objects down to what the policy engine reads.

A real Node object is 5-20 KB of JSON (managedFields, images, conditions); the engine reads
its name, labels, taints and advertised resources. Keeping only those makes a 5,000-node
inventory small, and makes most Node updates (heartbeat conditions, image lists) compare
equal to the stored copy, so they cost no new snapshot.

Trimmed objects keep the Kubernetes shape (``metadata.name``, ``status.allocatable``...) so
that the engine can read a watched node and a node from a ``kubectl get nodes -o yaml`` dump
with the same code. Strings are interned: thousands of nodes repeat the same label keys,
label values and resource names.

Pure functions on plain dicts: no ``kubernetes`` import needed here.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "GPU_RESOURCE_PREFIX",
    "TERMINAL_PHASES",
    "configmap_data",
    "dra_trimmer",
    "trim_node",
    "trim_nodepool",
    "trim_pod",
]

#: Extended resources the engine cares about on pods.
GPU_RESOURCE_PREFIX = "nvidia.com/"
#: Pods in these phases hold no devices any more.
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})

_intern = sys.intern


def _str_map(value: Any) -> dict[str, str]:
    """A ``{str: str}`` copy with interned keys and values; anything else becomes ``{}``."""
    if not isinstance(value, Mapping):
        return {}
    return {_intern(str(k)): _intern(v) if isinstance(v, str) else str(v) for k, v in value.items()}


def trim_node(node: Mapping[str, Any]) -> dict[str, Any]:
    """Return the parts of a Node the engine reads, in the Node's own shape.

    Kept: ``metadata.name``, ``metadata.labels``, ``spec.taints`` (key, value, effect;
    ``timeAdded`` is dropped because it changes without changing scheduling),
    ``spec.unschedulable`` when set, ``status.allocatable`` and ``status.capacity``.
    """
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    out_spec: dict[str, Any] = {}
    taints = []
    for taint in spec.get("taints") or ():
        kept = {
            _intern(k): _intern(str(taint[k])) for k in ("key", "value", "effect") if k in taint
        }
        taints.append(kept)
    if taints:
        out_spec["taints"] = taints
    if spec.get("unschedulable"):
        out_spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": _intern(str(meta.get("name", ""))),
            "labels": _str_map(meta.get("labels")),
        },
        "spec": out_spec,
        "status": {
            "allocatable": _str_map(status.get("allocatable")),
            "capacity": _str_map(status.get("capacity")),
        },
    }


def _gpu_requests(container: Mapping[str, Any]) -> dict[str, str]:
    resources = container.get("resources") or {}
    # Defaulting copies limits into missing requests for Pods, so requests is the truth;
    # limits is read only for objects that skipped defaulting.
    for field in ("requests", "limits"):
        found = {
            _intern(k): _intern(str(v))
            for k, v in (resources.get(field) or {}).items()
            if k.startswith(GPU_RESOURCE_PREFIX)
        }
        if found:
            return found
    return {}


def trim_pod(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    """Return a GPU pod's placement and ``nvidia.com/*`` requests, or None.

    None for pods without any ``nvidia.com/*`` request and for pods in a terminal phase
    (Succeeded, Failed), which hold no device. The result holds ``namespace``, ``name``,
    ``nodeName`` (None while Pending), ``phase``, and ``containers`` (and
    ``initContainers`` when one of them asks for a GPU): lists of ``{"name", "requests"}``
    with only the ``nvidia.com/*`` requests, quantities as the API wrote them.
    """
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    if phase in TERMINAL_PHASES:
        return None
    spec = pod.get("spec") or {}
    out: dict[str, Any] = {}
    for field in ("containers", "initContainers"):
        kept = []
        for container in spec.get(field) or ():
            requests = _gpu_requests(container)
            if requests:
                kept.append({"name": str(container.get("name", "")), "requests": requests})
        if kept:
            out[field] = kept
    if not out:
        return None
    meta = pod.get("metadata") or {}
    node_name = spec.get("nodeName")
    return {
        "namespace": _intern(str(meta.get("namespace", ""))),
        "name": str(meta.get("name", "")),
        "nodeName": _intern(node_name) if isinstance(node_name, str) and node_name else None,
        "phase": _intern(str(phase)),
        **out,
    }


def configmap_data(configmap: Mapping[str, Any]) -> dict[str, str]:
    """A ConfigMap's ``data`` (the device-plugin config files, one per key)."""
    data = configmap.get("data") or {}
    return {str(k): str(v) for k, v in data.items()}


# What of a DRA object's metadata the model reads (webhook/policy/dra/): the name, the
# namespace of a claim, and a class's creationTimestamp (the newest class serves a shared
# extended resource name). managedFields, annotations and the rest are dropped.
_DRA_METADATA = ("name", "namespace", "creationTimestamp", "uid")


def _interned(value: Any) -> Any:
    """A copy with every string interned: 4,000 published GPUs repeat the same attribute
    names, product names and driver versions."""
    if isinstance(value, str):
        return _intern(value)
    if isinstance(value, Mapping):
        return {_intern(str(k)): _interned(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_interned(v) for v in value]
    return value


def dra_trimmer(kind: str) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """The trim function for one DRA kind (``DeviceClass``, ``ResourceSlice``,
    ``ResourceClaim``): list items carry no ``kind``, so the watcher says it."""

    def trim(obj: Mapping[str, Any]) -> dict[str, Any]:
        """Keep ``metadata`` (name, namespace, creationTimestamp, uid), ``spec`` and
        ``status`` whole: selectors, devices and allocations are what the model reads, and
        they change only when the objects really do."""
        meta = obj.get("metadata") or {}
        out: dict[str, Any] = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": kind,
            "metadata": {k: meta[k] for k in _DRA_METADATA if k in meta},
            "spec": _interned(obj.get("spec") or {}),
        }
        if obj.get("status"):
            out["status"] = _interned(obj["status"])
        return out

    return trim


def trim_nodepool(nodepool: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a Karpenter NodePool that say which nodes it can launch, in its shape.

    Kept: ``metadata.name``, ``spec.template.metadata.labels`` and
    ``spec.template.spec.requirements`` (key, operator, values): what
    :func:`webhook.policy.autoscaling.karpenter_pools` reads. Status (resources in use, node
    counts) changes with every launch and is dropped, so it costs no new snapshot.
    """
    meta = nodepool.get("metadata") or {}
    template = (nodepool.get("spec") or {}).get("template") or {}
    requirements = [
        {
            "key": str(r.get("key", "")),
            "operator": str(r.get("operator", "")),
            "values": [str(v) for v in r.get("values") or ()],
        }
        for r in (template.get("spec") or {}).get("requirements") or ()
        if isinstance(r, Mapping)
    ]
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": str(meta.get("name", ""))},
        "spec": {
            "template": {
                "metadata": {"labels": _str_map((template.get("metadata") or {}).get("labels"))},
                "spec": {"requirements": requirements},
            }
        },
    }
