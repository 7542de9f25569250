"""Which devices a request could be given on a node group: the allocator's own checks, no search.

A device is usable by a request when it is in a pool that reaches the node, passes the
request's class's and its own selectors and the per-device node selection, and has room for
its capacity request: what ``validateDeviceRequest`` collects for an ``All`` request
(docs/allocator.md, "Pruning"). The explanation of a refusal counts them
(:mod:`webhook.policy.allocator.explain`); the audit names who holds them
(:func:`usable_devices`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from webhook.policy.allocator.pools import Node
from webhook.policy.allocator.structured import AllocationError, Allocator, DeviceWithID
from webhook.policy.allocator.usage import EMPTY, Usage
from webhook.policy.demand.model import ALL, Claim, Request
from webhook.policy.dra import Device, ResourceSlice
from webhook.policy.supply import NodeGroup, Supply


def known_slices(group: NodeGroup, supply: Supply) -> tuple[ResourceSlice, ...]:
    """Every slice known: the cluster's and the group's own (those of nodes to appear), each
    once (a group of existing nodes has its slices in the cluster's already)."""
    known: dict[str, ResourceSlice] = supply.__dict__.setdefault("_slices_by_name", {})
    if not known and supply.slices:
        known.update((s.name, s) for s in supply.slices)
    extra = tuple(s for s in group.slices if s.name not in known)
    return (*supply.slices, *extra) if extra else supply.slices


def group_allocator(
    group: NodeGroup,
    supply: Supply,
    deadline: float | None = None,
    *,
    prune: bool = True,
    usage: Usage = EMPTY,
) -> Allocator:
    """An allocator for a node of ``group``: its slices, and every slice known."""
    return Allocator(
        supply.classes,
        group.slices,
        known_slices(group, supply),
        deadline,
        prune=prune,
        usage=usage,
    )


class Probe:
    """An allocator prepared once for a node of a group, asked which devices requests could
    be given (see the module docstring): each request gets its own key in the allocator's
    cache of selector answers, so several are asked of one preparation."""

    def __init__(self, group: NodeGroup, supply: Supply, deadline: float | None = None) -> None:
        self.allocator = group_allocator(group, supply, deadline)
        self.node = Node(group.node, group.labels)
        self._ready: bool | None = None
        self._asked = 0

    def selectable(self, request: Request) -> list[DeviceWithID]:
        """The devices of the node usable by ``request``; none when the allocator fails on it
        (an unknown class, a CEL error, a pool being updated)."""
        allocator = self.allocator
        if self._ready is None:
            probe = Claim("probe", (), ())
            try:
                allocator.allocate(self.node, (probe,))
                allocator.claims_to_allocate = (probe,)
                self._ready = True
            except AllocationError:
                self._ready = False
        if not self._ready:
            return []
        self._asked += 1
        try:
            data = allocator.validate_device_request(
                replace(request, allocation_mode=ALL), None, (0, 0, self._asked)
            )
        except AllocationError:
            return []
        return data.all_devices


def _requests(claims: Iterable[Claim]) -> Iterable[Request]:
    for claim in claims:
        for request in claim.requests:
            if request.exactly is not None:
                yield request.exactly
            yield from request.first_available


def usable_devices(claims: Sequence[Claim], supply: Supply) -> tuple[Device, ...]:
    """Every device some request of ``claims`` could be given on some node group, free or
    not, and the devices that consume a counter set of one of them (a MIG partition of a
    usable whole GPU): allocated, such a device keeps the usable one from being allocated
    though no claim holds that one itself."""
    usable: dict[tuple[str, str, str], Device] = {}
    requests = tuple(_requests(claims))
    for group in supply.groups:
        probe = Probe(group, supply)
        for request in requests:
            usable.update((d.id, d.device) for d in probe.selectable(request))
    sets = {(d.driver, d.pool, c.counter_set) for d in usable.values() for c in d.consumes_counters}
    if sets:
        for found in supply.slices:
            for device in found.devices:
                if device.key not in usable and any(
                    (device.driver, device.pool, c.counter_set) in sets
                    for c in device.consumes_counters
                ):
                    usable[device.key] = device
    return tuple(usable.values())


__all__ = ["Probe", "group_allocator", "known_slices", "usable_devices"]
