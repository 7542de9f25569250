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

from webhook.policy.allocator import Verdict, fit, fit_anywhere
from webhook.policy.allocator.usage import Usage
from webhook.policy.demand import Claim, Demand, pod_demand
from webhook.policy.dra import Allocation, DraSnapshot
from webhook.policy.supply import Supply
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


def without_assumed_taints(supply: Supply) -> Supply:
    """``supply`` with no taints on the node groups that have no node yet.

    The supply gives such a group the taints the policy's ``spec.mutation.tolerations`` are
    for (``assumed_taints``): the webhook adds those tolerations to every GPU pod it admits,
    so its own reviews pass them. A pod that already waits may have been made without the
    webhook; nothing is known of the taints a node to come will carry, and an assumption is
    not held against it (docs/audit.md, "Why a GPU pod is stuck")."""
    if not any(g.taints and not g.node_names for g in supply.groups):
        return supply
    groups = tuple(g if g.node_names else replace(g, taints=()) for g in supply.groups)
    return replace(supply, groups=groups)


class FitNow:
    """The allocator's answers for pods on the existing nodes, empty and as used now."""

    def __init__(self, supply: Supply | None, dra: DraSnapshot | None) -> None:
        self.supply = without_assumed_taints(supply if supply is not None else Supply(groups=()))
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
