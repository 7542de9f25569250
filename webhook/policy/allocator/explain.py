"""Why claims do not fit a node group, in terms a user can act on.

The scheduler says only "cannot allocate all claims". To name the request or constraint at
fault and what the group has, the allocator is run again on parts of the demand: each
request alone, each claim without then with its constraints, each claim alone. The first
part that fails is the one named, with the number of devices of the group that pass the
request's class and selectors (and reach the node), and how many of those are tainted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from webhook.policy.allocator.devices import taint_prevents_allocation
from webhook.policy.allocator.pools import Node
from webhook.policy.allocator.structured import (
    AllocationError,
    Allocator,
    BudgetExceeded,
)
from webhook.policy.demand.model import ALL, Claim, Constraint, DeviceRequest, Request
from webhook.policy.supply import NodeGroup, Supply


@dataclass(frozen=True, slots=True)
class _Where:
    """The node group the claims are explained on, and whether searches are pruned."""

    group: NodeGroup
    supply: Supply
    node: Node
    prune: bool
    deadline: float | None

    def allocator(self) -> Allocator:
        slices = self.group.slices
        return Allocator(
            self.supply.classes,
            slices,
            (*self.supply.slices, *slices),
            self.deadline,
            prune=self.prune,
        )


def _allocates(claims: Sequence[Claim], where: _Where) -> bool:
    """Whether ``claims`` can be allocated; BudgetExceeded passes (nothing was learnt)."""
    try:
        return where.allocator().allocate(where.node, claims)
    except AllocationError:
        return False


def _usable(request: Request, where: _Where) -> tuple[int, int]:
    """How many devices pass the request's class and selectors and reach the node, and how
    many of those carry a taint the request does not tolerate."""
    allocator = where.allocator()
    probe = Claim("probe", (), ())
    try:
        allocator.allocate(where.node, (probe,))
        allocator.claims_to_allocate = (probe,)
        data = allocator.validate_device_request(
            replace(request, allocation_mode=ALL), None, (0, 0, 0)
        )
    except AllocationError:
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
    claim: Claim,
    name: str,
    request: Request,
    where: _Where,
    counted: tuple[int, int] | None = None,
) -> str:
    usable, tainted = counted or _usable(request, where)
    taints = f", {tainted} of them with a taint it does not tolerate" if tainted else ""
    return (
        f"{claim.label}: request {name} asks for {_asked(request)}; "
        f"node group {where.group.key} has {usable} such device(s){taints}"
    )


def _constraint_text(constraint: Constraint) -> str:
    kind = "matchAttribute" if constraint.match_attribute else "distinctAttribute"
    attribute = constraint.match_attribute or constraint.distinct_attribute
    scope = f" of requests {', '.join(constraint.requests)}" if constraint.requests else ""
    return f"{kind} {attribute}{scope}"


def _named(request: DeviceRequest) -> str:
    """The request's name, and for one the scheduler named itself, the container that asked."""
    return f"{request.name} ({request.asked_by})" if request.asked_by else request.name


def _failing_request(claims: Sequence[Claim], where: _Where) -> str | None:
    """The first request that cannot be allocated even alone, described; None if none."""
    for claim in claims:
        for request in claim.requests:
            exact = request.exactly
            if exact is not None and exact.allocation_mode != ALL:
                # Fewer usable devices than asked for: said without searching.
                counted = _usable(exact, where)
                if exact.count > counted[0] - counted[1]:
                    return _request_detail(claim, _named(request), exact, where, counted)
            if _allocates((Claim(claim.label, (request,), ()),), where):
                continue
            if exact is not None:
                return _request_detail(claim, _named(request), exact, where)
            parts = [
                _request_detail(claim, f"{request.name}/{sub.name}", sub, where)
                for sub in request.first_available
            ]
            return "no alternative of firstAvailable fits: " + "; ".join(parts)
    return None


def _failing_constraint(claims: Sequence[Claim], where: _Where) -> str | None:
    """The first constraint without which a claim would be allocated, described."""
    for claim in claims:
        if not claim.constraints:
            continue
        if _allocates((claim,), where):
            continue  # Alone, with its constraints, it fits: they are not at fault.
        if not _allocates((replace(claim, constraints=()),), where):
            continue
        for constraint in claim.constraints:
            if not _allocates((replace(claim, constraints=(constraint,)),), where):
                return (
                    f"{claim.label}: no devices of node group {where.group.key} meet its "
                    f"constraint {_constraint_text(constraint)}"
                )
        return (
            f"{claim.label}: no devices of node group {where.group.key} meet its constraints "
            "together"
        )
    return None


def explain_claims(
    claims: Sequence[Claim],
    group: NodeGroup,
    supply: Supply,
    node: Node,
    *,
    prune: bool = True,
    deadline: float | None = None,
) -> str:
    """Which part of ``claims`` keeps them from being allocated on ``group``, and what the
    group has. ``prune`` as for the allocation: the parts are searched the same way. Past
    ``deadline`` (a ``time.monotonic()``), the searches of parts stop and the detail says
    only that the claims cannot be allocated together."""
    where = _Where(group, supply, node, prune, deadline)
    try:
        return _explained(claims, where)
    except BudgetExceeded:
        labels = ", ".join(c.label for c in claims)
        return (
            f"{labels}: cannot be allocated on node group {group.key}; which request or "
            "constraint is at fault was not found in time"
        )


def _explained(claims: Sequence[Claim], where: _Where) -> str:
    group = where.group
    found = _failing_request(claims, where) or _failing_constraint(claims, where)
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
        if not _allocates((claim,), where):
            return (
                f"{claim.label}: its requests together need more devices than node group "
                f"{group.key} has{counters}"
            )
    labels = ", ".join(c.label for c in claims)
    return (
        f"the claims {labels} together need more devices than node group {group.key} has{counters}"
    )


__all__ = ["explain_claims"]
