"""A per-node view of the GPU nodes, and the scheduler's node filters a pod goes through.

The inventory (``webhook.policy.inventory``) sums nodes into pools: enough to judge a
request, not to say which node is full or which taint keeps a pod off. This module keeps,
per node that advertises a GPU resource, its labels, taints, cordon and allocatable GPU
resources, and answers the scheduler's questions the way kube-scheduler's filter plugins do
(NodeResourcesFit, NodeAffinity, TaintToleration, NodeUnschedulable): does the pod's
nodeSelector / required node affinity match, which NoSchedule / NoExecute taints does it
not tolerate. Nodes are plain dicts, full or trimmed (``webhook.kube.trim.trim_node``).

The audit asks these questions about GPU pods that wait; :class:`GpuNodes` asks them about pods
that ask for no GPU: can this pod be placed on a GPU node at all (docs/isolation.md, "Which
pods can reach a GPU node")?
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.policy.quantity import QuantityError, parse_gpu_quantity
from webhook.policy.records import MAPPING
from webhook.policy.workloads import dig

__all__ = [
    "UNSCHEDULABLE_TAINT",
    "GpuNodes",
    "NodeView",
    "Taint",
    "affinity_matches",
    "is_gpu_resource",
    "node_selector_matches",
    "node_views",
    "selector_matches",
    "untolerated",
    "untolerated_taints",
]

_GPU_NAMES = ("nvidia.com/gpu", "nvidia.com/mig")
#: The label the GPU Operator's node feature rules put on every node with an NVIDIA GPU.
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
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


def node_views(
    nodes: Iterable[Mapping[str, Any]], *, labelled: bool = False
) -> tuple[NodeView, ...]:
    """The nodes that advertise a GPU resource in ``status.allocatable``, sorted by name.

    ``labelled``: also the nodes labelled ``nvidia.com/gpu.present=true`` (by the GPU Operator's
    node feature rules) that advertise nothing yet, such as a node whose device plugin has not
    started: its GPUs are there all the same.
    """
    out = []
    for node in nodes:
        meta = node.get("metadata") or {}
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        gpus = {
            _intern(k): n
            for k, v in allocatable.items()
            if isinstance(k, str) and is_gpu_resource(k) and (n := _count(v)) > 0
        }
        labels = meta.get("labels") or {}
        if not gpus and not (labelled and labels.get(GPU_PRESENT_LABEL) == "true"):
            continue
        spec = node.get("spec") or {}
        taints = tuple(
            Taint(str(t.get("key", "")), str(t.get("value") or ""), str(t["effect"]))
            for t in spec.get("taints") or ()
            if isinstance(t, MAPPING) and t.get("effect") in ("NoSchedule", "NoExecute")
        )
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


def expression_matches(expr: Mapping[str, Any], value: str | None) -> bool:
    """One ``matchExpressions``/``matchFields`` entry against the value it names (None: absent)."""
    operator = expr.get("operator")
    values = [str(v) for v in expr.get("values") or ()]
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            mine, theirs = int(value), int(values[0])
        except ValueError:
            return False
        return mine > theirs if operator == "Gt" else mine < theirs
    return False


def term_matches(term: Any, name: str, labels: Mapping[str, str]) -> bool:
    """True when the node ``name`` with ``labels`` passes every requirement of ``term``."""
    if not isinstance(term, MAPPING):
        return False
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False  # an empty term matches no node (core/v1 NodeSelectorTerm)
    for expr in expressions:
        if not isinstance(expr, MAPPING):
            return False
        if not expression_matches(expr, labels.get(str(expr.get("key")))):
            return False
    for expr in fields:
        # metadata.name is the only field a node selector term may name.
        if not isinstance(expr, MAPPING) or expr.get("key") != "metadata.name":
            return False
        if not expression_matches(expr, name):
            return False
    return True


def node_selector_matches(
    selector: Mapping[str, Any] | None, name: str, labels: Mapping[str, str]
) -> bool:
    """True when a ``NodeSelector`` (its terms ORed) admits the node; no selector admits none."""
    terms = (selector or {}).get("nodeSelectorTerms") or ()
    return any(term_matches(term, name, labels) for term in terms)


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """True when every ``nodeSelector`` entry is one of the node's labels."""
    if not selector:  # most pods select nothing: no generator for them
        return True
    return all(labels.get(str(k)) == str(v) for k, v in selector.items())


def required_terms(affinity: Any) -> list[Any] | None:
    """The required node affinity's ``nodeSelectorTerms``, or None when there is none.

    A required node affinity without a list of terms gives [] (it admits no node, as in
    the scheduler), not None as ``webhook.policy.engine.intent.required_terms`` does.
    """
    required = dig(affinity, _REQUIRED)
    if required is None or not isinstance(required, MAPPING):
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
    taints = node.taints
    if node.unschedulable:
        taints = (*taints, Taint(*UNSCHEDULABLE_TAINT))
    return untolerated_taints(taints, tolerations)


def untolerated_taints(taints: tuple[Taint, ...], tolerations: Iterable[Any]) -> tuple[Taint, ...]:
    """The ``taints`` that no toleration covers (entries that are no object tolerate nothing)."""
    if not taints:
        return ()
    tols = tolerations if isinstance(tolerations, (list, tuple)) else list(tolerations)
    # Plain loops, not generator expressions: the allocator asks this of every node group on
    # every review, and each generator is one more frame and code object a review after a
    # pause touches (docs/performance.md, "Eighth round").
    out = []
    for taint in taints:
        for tol in tols:
            if isinstance(tol, MAPPING) and _tolerates(tol, taint):
                break
        else:
            out.append(taint)
    return tuple(out)


def _blocking(node: NodeView, tolerations: Iterable[Any], effects: Iterable[str]) -> bool:
    tols = [t for t in tolerations if isinstance(t, MAPPING)]
    wanted = set(effects)
    return any(
        t.effect in wanted and not any(_tolerates(tol, t) for tol in tols) for t in node.taints
    )


_SCHEDULED = ("NoSchedule", "NoExecute")
# A pod created with spec.nodeName skips the scheduler (and its NoSchedule filter); the kubelet
# still refuses it on a node with a NoExecute taint it does not tolerate.
_BOUND = ("NoExecute",)


@dataclass(frozen=True)
class GpuNodes:
    """Where the GPU nodes are, for one question: can this pod be placed on one of them?

    ``nodes`` are the GPU nodes when Node objects are known (a node dump, the live cluster).
    Without them (the inventory comes from the policy alone), ``assumed`` are the taints the
    GPU nodes are taken to carry: the ones the policy's tolerations are for. A cordon is not
    counted: it is lifted again, and the question is where a pod may ever run.
    """

    nodes: tuple[NodeView, ...] | None
    assumed: tuple[Taint, ...] = ()
    # One node per distinct set of taints: a pod that selects no node by name, label or
    # affinity reaches a GPU node when it tolerates one of these sets.
    _classes: tuple[NodeView, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        first: dict[frozenset[Taint], NodeView] = {}
        for node in self.nodes or ():
            first.setdefault(frozenset(node.taints), node)
        object.__setattr__(self, "_classes", tuple(first.values()))

    @property
    def known(self) -> bool:
        """True when the GPU nodes themselves are known, not assumed from the policy."""
        return self.nodes is not None

    def taint_sets(self) -> tuple[tuple[Taint, ...], ...]:
        """The distinct sets of NoSchedule / NoExecute taints of the GPU nodes (one per kind)."""
        if self.nodes is None:
            return (self.assumed,)
        return tuple(n.taints for n in self._classes)

    def reachable(self, spec: Mapping[str, Any]) -> str | None:
        """A GPU node this pod spec can be placed on, in words, or None when there is none."""
        tolerations = spec.get("tolerations") or ()
        if not isinstance(tolerations, list):
            tolerations = ()
        if self.nodes is None:
            view = NodeView("", {}, self.assumed, {})
            if _blocking(view, tolerations, _SCHEDULED):
                return None
            return _described("GPU nodes", self.assumed)
        node_name = spec.get("nodeName")
        selector = spec.get("nodeSelector")
        affinity = spec.get("affinity")
        if node_name:
            for node in self.nodes:
                if node.name == node_name and not _blocking(node, tolerations, _BOUND):
                    return f"node {node.name} (spec.nodeName)"
            return None
        narrowed = bool(selector) or required_terms(affinity) is not None
        for node in self.nodes if narrowed else self._classes:
            if narrowed and not (
                selector_matches(selector if isinstance(selector, MAPPING) else None, node.labels)
                and affinity_matches(affinity, node)
            ):
                continue
            if not _blocking(node, tolerations, _SCHEDULED):
                return _described(f"GPU node {node.name}", node.taints)
        return None


def _described(what: str, taints: tuple[Taint, ...]) -> str:
    if not taints:
        return f"{what} (no taints)"
    return f"{what} (tolerates {', '.join(str(t) for t in taints)})"
