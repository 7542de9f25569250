"""Why claims do not fit a node group, in terms a user can act on.

The scheduler says only "cannot allocate all claims". To name the request or constraint at
fault and what the group has, the allocator is run again on parts of the demand: each
request alone, each claim without then with its constraints, each claim alone. The first
part that fails is the one named, with the number of devices of the group that pass the
request's class and selectors (and reach the node), and how many of those are tainted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from webhook.policy.allocator.devices import taint_prevents_allocation
from webhook.policy.allocator.pools import Node
from webhook.policy.allocator.structured import (
    AllocationError,
    Allocator,
    BudgetExceeded,
)
from webhook.policy.demand.model import ALL, Claim, Constraint, Request
from webhook.policy.supply import NodeGroup, Supply


def _allocates(claims: Sequence[Claim], group: NodeGroup, supply: Supply, node: Node) -> bool:
    allocator = Allocator(supply.classes, group.slices, (*supply.slices, *group.slices))
    try:
        return allocator.allocate(node, claims)
    except (AllocationError, BudgetExceeded):
        return False


def _usable(request: Request, group: NodeGroup, supply: Supply, node: Node) -> tuple[int, int]:
    """How many devices pass the request's class and selectors and reach the node, and how
    many of those carry a taint the request does not tolerate."""
    allocator = Allocator(supply.classes, group.slices, (*supply.slices, *group.slices))
    probe = Claim("probe", (), ())
    try:
        allocator.allocate(node, (probe,))
        allocator.claims_to_allocate = (probe,)
        data = allocator.validate_device_request(
            replace(request, allocation_mode=ALL), None, (0, 0, 0)
        )
    except (AllocationError, BudgetExceeded):
        return 0, 0
    tainted = 0
    for found in data.all_devices:
        if taint_prevents_allocation(found, request):
            tainted += 1
    return len(data.all_devices), tainted


def _asked(request: Request) -> str:
    amount = "all devices" if request.allocation_mode == ALL else f"{request.count} device(s)"
    selectors = " matching its selectors" if request.selectors else ""
    return f"{amount} of class {request.device_class}{selectors}"


def _request_detail(
    claim: Claim, name: str, request: Request, *, group: NodeGroup, supply: Supply, node: Node
) -> str:
    usable, tainted = _usable(request, group, supply, node)
    taints = f", {tainted} of them with a taint it does not tolerate" if tainted else ""
    return (
        f"{claim.label}: request {name} asks for {_asked(request)}; "
        f"node group {group.key} has {usable} such device(s){taints}"
    )


def _constraint_text(constraint: Constraint) -> str:
    kind = "matchAttribute" if constraint.match_attribute else "distinctAttribute"
    attribute = constraint.match_attribute or constraint.distinct_attribute
    scope = f" of requests {', '.join(constraint.requests)}" if constraint.requests else ""
    return f"{kind} {attribute}{scope}"


def _failing_request(
    claims: Sequence[Claim], group: NodeGroup, supply: Supply, node: Node
) -> str | None:
    """The first request that cannot be allocated even alone, described; None if none."""
    for claim in claims:
        for request in claim.requests:
            exact = request.exactly
            if exact is not None and exact.allocation_mode != ALL:
                # Fewer usable devices than asked for: said without searching.
                usable, tainted = _usable(exact, group, supply, node)
                if exact.count > usable - tainted:
                    return _request_detail(
                        claim, request.name, exact, group=group, supply=supply, node=node
                    )
            if _allocates((Claim(claim.label, (request,), ()),), group, supply, node):
                continue
            if exact is not None:
                return _request_detail(
                    claim, request.name, exact, group=group, supply=supply, node=node
                )
            parts = [
                _request_detail(
                    claim, f"{request.name}/{sub.name}", sub, group=group, supply=supply, node=node
                )
                for sub in request.first_available
            ]
            return "no alternative of firstAvailable fits: " + "; ".join(parts)
    return None


def _failing_constraint(
    claims: Sequence[Claim], group: NodeGroup, supply: Supply, node: Node
) -> str | None:
    """The first constraint without which a claim would be allocated, described."""
    for claim in claims:
        if not claim.constraints:
            continue
        if not _allocates((replace(claim, constraints=()),), group, supply, node):
            continue
        for constraint in claim.constraints:
            if not _allocates((replace(claim, constraints=(constraint,)),), group, supply, node):
                return (
                    f"{claim.label}: no devices of node group {group.key} meet its constraint "
                    f"{_constraint_text(constraint)}"
                )
        return f"{claim.label}: no devices of node group {group.key} meet its constraints together"
    return None


def explain_claims(claims: Sequence[Claim], group: NodeGroup, supply: Supply, node: Node) -> str:
    """Which part of ``claims`` keeps them from being allocated on ``group``, and what the
    group has."""
    found = _failing_request(claims, group, supply, node) or _failing_constraint(
        claims, group, supply, node
    )
    if found is not None:
        return found
    # Partitionable devices: a whole GPU and its partitions consume one counter set.
    shared = any(d.consumes_counters for s in group.slices for d in s.devices)
    counters = (
        " (its devices share counter sets: partitions and the whole device they are cut "
        "from cannot all be taken together)"
        if shared
        else ""
    )
    for claim in claims:
        if not _allocates((claim,), group, supply, node):
            return (
                f"{claim.label}: its requests together need more devices than node group "
                f"{group.key} has{counters}"
            )
    labels = ", ".join(c.label for c in claims)
    return (
        f"the claims {labels} together need more devices than node group {group.key} has{counters}"
    )


__all__ = ["explain_claims"]
