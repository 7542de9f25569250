"""Why claims do not fit a node group, in terms a user can act on.

The scheduler says only "cannot allocate all claims". To name the request or constraint at
fault and what the group has, the allocator is run again on parts of the demand: each
request alone, each claim without then with its constraints, each claim alone. The first
part that fails is the one named (:class:`~webhook.policy.allocator.result.Explanation`),
with the number of devices of the group that pass the request's class and selectors (and
reach the node), how many of those are tainted, and when none passes the selectors, the
selector that the class's devices do not pass. The engine words the refusal from it
(webhook/policy/engine/refusal.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from webhook.policy.allocator.devices import taint_prevents_allocation
from webhook.policy.allocator.pools import Node
from webhook.policy.allocator.reach import Probe, group_allocator
from webhook.policy.allocator.result import (
    CLAIMS,
    CONSTRAINT,
    LATE,
    REQUEST,
    TOGETHER,
    Explanation,
    Fit,
    Shortfall,
)
from webhook.policy.allocator.structured import (
    AllocationError,
    Allocator,
    BudgetExceeded,
    DeviceWithID,
)
from webhook.policy.demand.model import ALL, Claim, Constraint, DeviceRequest, Request
from webhook.policy.supply import NodeGroup, Supply

# How many devices of a class a group has, and what they are (products).
_Class = tuple[int, tuple[str, ...]]
# The attributes NVIDIA's driver names the product and the MIG profile by
# (docs/dra-claims.md, "devices"): words for the message, never a reason.
_PRODUCT = "productName"
_PROFILE = "profile"


@dataclass(frozen=True, slots=True)
class _Where:
    """The node group the claims are explained on, whether searches are pruned, and the probe
    that counts the devices a request could be given there."""

    group: NodeGroup
    supply: Supply
    node: Node
    prune: bool
    deadline: float | None
    probe: Probe

    def allocator(self) -> Allocator:
        return group_allocator(self.group, self.supply, self.deadline, prune=self.prune)


def _allocates(claims: Sequence[Claim], where: _Where) -> bool:
    """Whether ``claims`` can be allocated; BudgetExceeded passes (nothing was learnt)."""
    try:
        return where.allocator().allocate(where.node, claims)
    except AllocationError:
        return False


def _products(devices: Sequence[DeviceWithID]) -> tuple[str, ...]:
    """What the devices are, for the message: ``2 x NVIDIA H100 80GB HBM3 2g.20gb`` (the
    product and the MIG profile NVIDIA's driver publishes), by how many of each."""
    counted = Counter(
        " ".join(str(v) for v in (d.device.attribute(_PRODUCT), d.device.attribute(_PROFILE)) if v)
        for d in devices
    )
    if len(counted) == 1:
        return tuple(p for p in counted if p)
    return tuple(f"{n} x {p}" for p, n in sorted(counted.items()) if p)


def _shortfall(name: str, request: Request, probe: Probe) -> Shortfall:
    """How many devices of the group ``request`` could be given, and how many of those carry
    a taint it does not tolerate (what every failing group is compared by)."""
    devices = probe.selectable(request)
    tainted = sum(1 for found in devices if taint_prevents_allocation(found, request))
    return Shortfall(name, request, len(devices), tainted, devices=tuple(devices))


def _described(
    request: Request, group: NodeGroup, supply: Supply, devices: Callable[[], Sequence[Any]]
) -> _Class:
    """How many ``devices()`` the group has for ``request`` and what they are; remembered per
    supply, group and request (its name aside), since the reviews of one claim ask again."""
    known: dict[tuple[Any, ...], _Class] = supply.__dict__.setdefault("_described", {})
    # What selects a device: its class, the selectors, the capacity it must have room for.
    capacity = tuple(sorted((request.capacity or {}).items()))
    key = (group.key, request.device_class, request.selectors, capacity)
    found = known.get(key)
    if found is None:
        listed = devices()
        found = known[key] = (len(listed), _products(listed))
    return found


def _detailed(shortfall: Shortfall, probe: Probe, group: NodeGroup, supply: Supply) -> Shortfall:
    """``shortfall`` with what the devices are, and when none passes the request's selectors,
    how many of its class the group has and which selector none of them passes: the words
    for the group the message names, worked out for it alone."""
    request = shortfall.request
    if shortfall.usable or not request.selectors:
        _, products = _described(request, group, supply, lambda: shortfall.devices)
        return replace(shortfall, products=products)
    # The devices of its class: its capacity request and tolerations kept, no selectors.
    of_class, products = _described(
        replace(request, selectors=()),
        group,
        supply,
        lambda: probe.selectable(replace(request, selectors=())),
    )
    selector = None
    if of_class:
        # Each selector alone: the first that none of the class's devices passes names the
        # fault; when each passes some, it is the selectors together (the first is named).
        # A lone selector is the one: no device passes the request (usable is 0).
        alone = request.selectors if len(request.selectors) > 1 else ()
        selector = next(
            (s for s in alone if not probe.selectable(replace(request, selectors=(s,)))),
            request.selectors[0],
        )
    return replace(shortfall, of_class=of_class, selector=selector, products=products)


def detailed(found: Fit, group: NodeGroup, supply: Supply) -> Fit:
    """The failing ``found`` of ``group`` with the words of its request at fault worked out
    (:func:`_detailed`): for the closest group of a verdict, the one the message names."""
    why = found.explanation
    if why is None or why.kind != REQUEST:
        return found
    probe = why.probe if isinstance(why.probe, Probe) else Probe(group, supply)
    why = replace(why, shortfalls=tuple(_detailed(s, probe, group, supply) for s in why.shortfalls))
    return replace(found, explanation=why, detail=why.text)


def _constraint_text(constraint: Constraint) -> str:
    kind = "matchAttribute" if constraint.match_attribute else "distinctAttribute"
    attribute = constraint.match_attribute or constraint.distinct_attribute
    scope = f" of requests {', '.join(constraint.requests)}" if constraint.requests else ""
    return f"{kind} {attribute}{scope}"


def _request_fault(claim: Claim, request: DeviceRequest, where: _Where) -> Explanation:
    key = where.group.key
    probe = where.probe
    if request.exactly is not None:
        found: tuple[Shortfall, ...] = (_shortfall(request.name, request.exactly, probe),)
    else:
        found = tuple(
            _shortfall(f"{request.name}/{sub.name}", sub, probe) for sub in request.first_available
        )
    return Explanation(
        REQUEST, key, claim.label, request.name, request.asked_by, found, probe=probe
    )


def _failing_request(claims: Sequence[Claim], where: _Where) -> Explanation | None:
    """The first request that cannot be allocated even alone; None if none."""
    for claim in claims:
        for request in claim.requests:
            exact = request.exactly
            if exact is not None and exact.allocation_mode != ALL:
                # Fewer usable devices than asked for: said without searching.
                found = _request_fault(claim, request, where)
                if exact.count > found.shortfalls[0].available:
                    return found
            if _allocates((Claim(claim.label, (request,), ()),), where):
                continue
            return _request_fault(claim, request, where)
    return None


def _failing_constraint(claims: Sequence[Claim], where: _Where) -> Explanation | None:
    """The first constraint without which a claim would be allocated; None if none."""
    for claim in claims:
        if not claim.constraints:
            continue
        if _allocates((claim,), where):
            continue  # Alone, with its constraints, it fits: they are not at fault.
        if not _allocates((replace(claim, constraints=()),), where):
            continue
        for constraint in claim.constraints:
            if not _allocates((replace(claim, constraints=(constraint,)),), where):
                text = _constraint_text(constraint)
                attribute = constraint.match_attribute or constraint.distinct_attribute or ""
                return Explanation(
                    CONSTRAINT, where.group.key, claim.label, constraint=text, attribute=attribute
                )
        return Explanation(CONSTRAINT, where.group.key, claim.label)
    return None


def explain_claims(
    claims: Sequence[Claim],
    group: NodeGroup,
    supply: Supply,
    node: Node,
    *,
    prune: bool = True,
    deadline: float | None = None,
) -> Explanation:
    """Which part of ``claims`` keeps them from being allocated on ``group``, and what the
    group has. ``prune`` as for the allocation: the parts are searched the same way. Past
    ``deadline`` (a ``time.monotonic()``), the searches of parts stop and the explanation says
    only that the claims cannot be allocated together."""
    where = _Where(group, supply, node, prune, deadline, Probe(group, supply, deadline))
    try:
        return _explained(claims, where)
    except BudgetExceeded:
        return Explanation(LATE, group.key, ", ".join(c.label for c in claims))


def _explained(claims: Sequence[Claim], where: _Where) -> Explanation:
    group = where.group
    found = _failing_request(claims, where) or _failing_constraint(claims, where)
    if found is not None:
        return found
    # Partitionable devices: a whole GPU and its partitions consume one counter set.
    shared = any(d.consumes_counters for s in group.slices for d in s.devices)
    for claim in claims:
        if not _allocates((claim,), where):
            return Explanation(TOGETHER, group.key, claim.label, counters=shared)
    labels = tuple(c.label for c in claims)
    asked_by = ", ".join(r.asked_by for c in claims for r in c.requests if r.asked_by)
    return Explanation(
        CLAIMS, group.key, ", ".join(labels), asked_by=asked_by, counters=shared, claims=labels
    )


__all__ = ["detailed", "explain_claims"]
