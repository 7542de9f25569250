"""A per-node view of the GPU nodes, and the scheduler's node filters a GPU pod goes through.

The inventory (``webhook.policy.inventory``) sums nodes into pools: enough to judge a
request, not to say which node is full or which taint keeps a pod off. This module keeps,
per node that advertises a GPU resource, its labels, taints, cordon and allocatable GPU
resources, and answers the scheduler's questions the way kube-scheduler's filter plugins do
(NodeResourcesFit, NodeAffinity, TaintToleration, NodeUnschedulable): does the pod's
nodeSelector / required node affinity match, which NoSchedule / NoExecute taints does it
not tolerate. Nodes are plain dicts, full or trimmed (``webhook.kube.trim.trim_node``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.policy.nodeselect import term_matches
from webhook.policy.quantity import QuantityError, parse_gpu_quantity
from webhook.policy.workloads import dig

__all__ = [
    "UNSCHEDULABLE_TAINT",
    "NodeView",
    "Taint",
    "affinity_matches",
    "is_gpu_resource",
    "node_views",
    "selector_matches",
    "untolerated",
]

_GPU_NAMES = ("nvidia.com/gpu", "nvidia.com/mig")
#: The taint a cordoned node behaves as having (the NodeUnschedulable filter's own check).
UNSCHEDULABLE_TAINT = ("node.kubernetes.io/unschedulable", "", "NoSchedule")
_intern = sys.intern
_REQUIRED = ("nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")


def is_gpu_resource(name: str) -> bool:
    """True for the names the device plugin gives GPUs: ``nvidia.com/gpu*``, ``nvidia.com/mig-*``.

    Other ``nvidia.com/`` resources (NICs, vGPU, RDMA) are not ours to judge.
    """
    return name.startswith(_GPU_NAMES)


@dataclass(frozen=True, slots=True)
class Taint:
    """A node taint the scheduler filters on (effect NoSchedule or NoExecute)."""

    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        value = f"={self.value}" if self.value else ""
        return f"{self.key}{value}:{self.effect}"


@dataclass(frozen=True, slots=True)
class NodeView:
    """One node that advertises at least one GPU resource."""

    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    gpus: Mapping[str, int]
    unschedulable: bool = False


def _count(raw: Any) -> int:
    try:
        return parse_gpu_quantity(raw)
    except QuantityError:
        return 0


def node_views(nodes: Iterable[Mapping[str, Any]]) -> tuple[NodeView, ...]:
    """The nodes that advertise a GPU resource in ``status.allocatable``, sorted by name."""
    out = []
    for node in nodes:
        meta = node.get("metadata") or {}
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        gpus = {
            _intern(k): n
            for k, v in allocatable.items()
            if isinstance(k, str) and is_gpu_resource(k) and (n := _count(v)) > 0
        }
        if not gpus:
            continue
        spec = node.get("spec") or {}
        taints = tuple(
            Taint(str(t.get("key", "")), str(t.get("value") or ""), str(t["effect"]))
            for t in spec.get("taints") or ()
            if isinstance(t, Mapping) and t.get("effect") in ("NoSchedule", "NoExecute")
        )
        labels = meta.get("labels") or {}
        out.append(
            NodeView(
                name=_intern(str(meta.get("name", ""))),
                labels={str(k): str(v) for k, v in labels.items()},
                taints=taints,
                gpus=gpus,
                unschedulable=bool(spec.get("unschedulable")),
            )
        )
    return tuple(sorted(out, key=lambda n: n.name))


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """True when every ``nodeSelector`` entry is one of the node's labels."""
    return all(labels.get(str(k)) == str(v) for k, v in (selector or {}).items())


def required_terms(affinity: Any) -> list[Any] | None:
    """The required node affinity's ``nodeSelectorTerms``, or None when there is none.

    A required node affinity without a list of terms gives [] (it admits no node, as in
    the scheduler), not None as ``webhook.policy.engine.intent.required_terms`` does.
    """
    required = dig(affinity, _REQUIRED)
    if not isinstance(required, Mapping):
        return None
    terms = required.get("nodeSelectorTerms")
    return terms if isinstance(terms, list) else []


def affinity_matches(affinity: Any, node: NodeView) -> bool:
    """True when the pod's required node affinity admits ``node`` (terms are ORed)."""
    terms = required_terms(affinity)
    if terms is None:
        return True
    return any(term_matches(term, node.name, node.labels) for term in terms)


def _tolerates(toleration: Mapping[str, Any], taint: Taint) -> bool:
    effect = toleration.get("effect")
    if effect and effect != taint.effect:
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if not key:
        return operator == "Exists"  # an empty key with Exists tolerates everything
    if key != taint.key:
        return False
    if operator == "Exists":
        return True
    return operator == "Equal" and str(toleration.get("value") or "") == taint.value


def untolerated(node: NodeView, tolerations: Iterable[Any]) -> tuple[Taint, ...]:
    """The node's NoSchedule / NoExecute taints (and its cordon) that no toleration covers."""
    tols = [t for t in tolerations if isinstance(t, Mapping)]
    taints = node.taints
    if node.unschedulable:
        taints = (*taints, Taint(*UNSCHEDULABLE_TAINT))
    return tuple(t for t in taints if not any(_tolerates(tol, t) for tol in tols))
