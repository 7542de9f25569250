"""Does a pending pod fit now? The allocator's answer with the cluster's current usage.

The webhook asks the allocator (``webhook.policy.allocator``, docs/allocator.md) whether a
demand fits an empty cluster. The audit asks it twice: on the empty cluster (could it ever
run on these nodes: the webhook's answer), then with what is in use now
(:class:`~webhook.policy.allocator.usage.Usage`): the extended resources the bound,
unfinished pods request on each node (NodeResourcesFit's ``requested``), and the devices in
the ``status.allocation`` of ResourceClaims (the structured allocator's ``allocatedState``).
A pod that fits nowhere now waits for the holders; one that fits on a node now waits for
something else (docs/audit.md, "Why a GPU pod is Pending").
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from webhook.policy.allocator import Fit, Verdict, fit, fit_anywhere
from webhook.policy.allocator.usage import EMPTY, Usage
from webhook.policy.demand import Claim, Demand, pod_demand
from webhook.policy.dra import Allocation, DraSnapshot
from webhook.policy.nodes import NodeView
from webhook.policy.supply import NodeGroup, Supply
from webhook.policy.supply.assemble import OFFLINE_FIT_BUDGET_S

__all__ = ["FitNow", "allocated_devices"]

DeviceKey = tuple[str, str, str]


def allocated_devices(
    allocations: Iterable[Allocation], supply: Supply, *, skip: Collection[tuple[str, str]] = ()
) -> tuple[frozenset[DeviceKey], frozenset[DeviceKey]]:
    """The devices of the claims' allocations, but those of the claims in ``skip``
    (namespace, name): (wholly allocated, allocated shared). A device that allows multiple
    allocations is shared: other claims may still get it (``AllocatedSharedDeviceIDs``)."""
    multiple = {
        (s.driver, s.pool, d.name)
        for s in supply.slices
        for d in s.devices
        if d.allow_multiple_allocations
    }
    whole: set[DeviceKey] = set()
    shared: set[DeviceKey] = set()
    for allocation in allocations:
        if (allocation.namespace, allocation.name) in skip:
            continue
        for _request, driver, pool, device in allocation.devices:
            key = (driver, pool, device)
            (shared if key in multiple else whole).add(key)
    return frozenset(whole), frozenset(shared)


class FitNow:
    """The allocator's answers for pods on the existing nodes, empty and as used now."""

    def __init__(self, supply: Supply | None, dra: DraSnapshot | None) -> None:
        self.supply = supply if supply is not None else Supply(groups=())
        self.groups: dict[str, NodeGroup] = {
            g.node_names[0]: g for g in self.supply.groups if len(g.node_names) == 1
        }
        self.devices, self.shared = allocated_devices(
            dra.allocations if dra is not None else (), self.supply
        )

    def usage(self, held: Mapping[tuple[str, str], int]) -> Usage:
        """What is in use: ``held`` (node, resource) -> what bound pods request, and every
        allocated claim's devices."""
        requested: dict[str, dict[str, int]] = {}
        for (node, resource), n in held.items():
            requested.setdefault(node, {})[resource] = n
        return Usage(requested, self.devices, self.shared)

    def group(self, node: NodeView) -> NodeGroup:
        """The supply's group of ``node``; one made from its view when the supply lacks it."""
        found = self.groups.get(node.name)
        if found is not None:
            return found
        return NodeGroup(
            key=f"node {node.name}",
            node_names=(node.name,),
            labels=node.labels,
            taints=node.taints,
            allocatable=node.gpus,
        )

    def dra_nodes(self) -> list[NodeView]:
        """The existing nodes that reach ResourceSlices, as the early checks read nodes."""
        return [
            NodeView(g.node_names[0], g.labels, g.taints, g.allocatable)
            for g in self.groups.values()
            if g.slices and g.bounds is None
        ]

    def judged(self, demand: Demand, node: NodeView, usage: Usage = EMPTY) -> Fit:
        """The allocator's answer for ``demand`` on ``node``."""
        return fit(
            demand, self.group(node), self.supply, budget_s=OFFLINE_FIT_BUDGET_S, usage=usage
        )

    def fitting(
        self, demand: Demand, nodes: Sequence[NodeView], usage: Usage = EMPTY
    ) -> list[NodeView]:
        """The ``nodes`` ``demand`` fits on, the cluster empty or as ``usage`` says; a search
        that runs out of time counts as a fit (nothing proven against it)."""
        return [n for n in nodes if self.judged(demand, n, usage).outcome != "does-not-fit"]

    def ever(self, claims: Sequence[Claim]) -> Verdict:
        """The webhook's question: can ``claims`` be allocated together on some node group,
        existing or able to appear, on an empty cluster? (Could they ever be.)"""
        demand = Demand(label="claims", claims=tuple(claims))
        return fit_anywhere(demand, self.supply, budget_s=OFFLINE_FIT_BUDGET_S)

    def fits_somewhere(self, claims: Sequence[Claim], usage: Usage) -> bool:
        """Can ``claims`` be allocated together on some existing node, with ``usage``?"""
        demand = Demand(label="claims", claims=tuple(claims))
        return any(
            fit(demand, g, self.supply, budget_s=OFFLINE_FIT_BUDGET_S, usage=usage).outcome
            != "does-not-fit"
            for g in self.supply.groups
            if g.node_names
        )


def gpu_demand(spec: Mapping[str, Any], requests: Mapping[str, int]) -> Demand:
    """The pod's demand of extended resources: its GPU ``requests`` and placement, without
    claims (those are the claim diagnosis's)."""
    demand = pod_demand(spec, "pod", {}, "")
    resources = {k: v for k, v in demand.resources.items() if k in requests}
    return replace(demand, resources=resources, claims=(), missing=())
