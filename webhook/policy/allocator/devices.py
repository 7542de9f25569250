"""One candidate device: taints, shared counters, consumable capacity, constraints.

Ported from ``allocator_incubating.go`` (k8s.io/dynamic-resource-allocation v0.36.2,
``structured/internal/incubating``): ``allocateDevice``, ``taintPreventsAllocation``,
``taintTolerated``, ``checkAvailableCounters``, ``deallocateCountersForDevice`` and the
``CmpRequestOverCapacity`` method, with ``ToleratesTaint`` of
``resourceclaim/devicetoleration.go``. As upstream, counters a device took are not given back
when a later check (a taint, a constraint, capacity) refuses it, nor when a device that allows
multiple allocations is deallocated: the scheduler's answers include those effects.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import TYPE_CHECKING

from webhook.policy.allocator.capacity import (
    CapacityError,
    cmp_request_over_capacity,
    get_consumed_capacity_from_request,
)
from webhook.policy.demand.model import DeviceToleration, Request
from webhook.policy.dra import DeviceTaint

if TYPE_CHECKING:
    from webhook.policy.allocator.structured import Allocator, DeviceIndices, DeviceWithID

_PREVENTING = ("NoSchedule", "NoExecute")


def request_fits_capacity(alloc: Allocator, request: Request, device: DeviceWithID) -> bool:
    """The ``CmpRequestOverCapacity`` method: room for the request's capacity on the device,
    on top of what this allocation already takes of it. A request naming a capacity the
    device lacks skips the device (the error is only logged upstream)."""
    taking = alloc.allocating_capacity.get(device.id)
    if request.capacity is None and not taking and not device.device.has_capacity_policy:
        # The request takes every capacity whole, and nothing takes any yet: it fits, as
        # CmpRequestOverCapacity finds at greater cost.
        return True
    try:
        return cmp_request_over_capacity(
            {},  # allocatedState.AggregatedCapacity: empty on an empty cluster
            request.capacity,
            device.device.capacity,
            taking or {},
        )
    except CapacityError:
        return False


def tolerates_taint(toleration: DeviceToleration, taint: DeviceTaint) -> bool:
    """``ToleratesTaint`` (resourceclaim/devicetoleration.go)."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator in ("", "Equal"):
        return toleration.value == taint.value
    return toleration.operator == "Exists"


def taint_prevents_allocation(device: DeviceWithID, request: Request) -> bool:
    """``taintPreventsAllocation``: a NoSchedule or NoExecute taint no toleration covers
    (other effects, None included, do not prevent allocation)."""
    return any(
        taint.effect in _PREVENTING
        and not any(tolerates_taint(t, taint) for t in request.tolerations)
        for taint in device.device.taints
    )


def allocate_device(
    alloc: Allocator, r: DeviceIndices, device: DeviceWithID, must: bool
) -> Callable[[], None] | None:
    """``allocateDevice``: check availability and constraints for one selectable candidate
    and mark it allocated; the rollback function, or None when it cannot be used. With
    ``must`` (allocationMode All), a constraint that refuses it is an error."""
    from webhook.policy.allocator.structured import AllocationError

    claim = alloc.claims_to_allocate[r.claim_index]
    data = alloc.request_data[(r.claim_index, r.request_index, r.sub_request_index)]
    request = data.request
    admin = data.admin_access()
    allow_multiple = device.device.allow_multiple_allocations
    if not allow_multiple and admin and alloc.allocating_device_for_claim(device.id, r.claim_index):
        return None
    if not admin and alloc.device_in_use(device.id):
        return None
    # Skip the counter check for a device that allows multiple allocations once some of its
    # capacity is in use.
    skip_counter_check = allow_multiple and alloc.device_capacity_in_use(device.id)
    if (
        not skip_counter_check
        and device.device.consumes_counters
        and not check_available_counters(alloc, device)
    ):
        return None
    if data.parent_request is None:
        base_request_name, sub_request_name = request.name, ""
    else:
        base_request_name, sub_request_name = data.parent_request.name, request.name
    # Might be tainted, in which case the taint has to be tolerated.
    if taint_prevents_allocation(device, request):
        return None
    constraints = alloc.constraints[r.claim_index]
    for i, constraint in enumerate(constraints):
        if not constraint.add(base_request_name, sub_request_name, device.device):
            if must:
                raise AllocationError(
                    f"{claim.label}, request {request.name}: cannot add device "
                    f"{'/'.join(device.id)} because a claim constraint would not be satisfied"
                )
            for earlier in constraints[:i]:
                earlier.remove(base_request_name, sub_request_name, device.device)
            return None
    claims = alloc.allocating_devices.setdefault(device.id, set())
    if not allow_multiple:
        claims.add(r.claim_index)
    consumed: dict[str, Fraction] = {}
    if not request_fits_capacity(alloc, request, device):
        return None
    if allow_multiple:
        consumed = get_consumed_capacity_from_request(request.capacity, device.device.capacity)
        taking = alloc.allocating_capacity.setdefault(device.id, {})
        for name, value in consumed.items():
            taking[name] = taking.get(name, Fraction(0)) + value
    results = alloc.result[r.claim_index]
    previous = len(results)
    results.append((device, data))

    def deallocate() -> None:
        for constraint in constraints:
            constraint.remove(base_request_name, sub_request_name, device.device)
        alloc.allocating_devices[device.id].discard(r.claim_index)
        if allow_multiple:
            if consumed:
                taking = alloc.allocating_capacity[device.id]
                for name, value in consumed.items():
                    taking[name] -= value
                # ConsumedCapacityCollection.Remove drops a device once nothing is taken.
                if all(v == 0 for v in taking.values()):
                    del alloc.allocating_capacity[device.id]
        elif device.device.consumes_counters:
            deallocate_counters_for_device(alloc, device)
        del results[previous:]

    return deallocate


def check_available_counters(alloc: Allocator, device: DeviceWithID) -> bool:
    """``checkAvailableCounters``: take the device's counters; False (and give them back)
    when some counter set of its pool would be overdrawn. Pools are keyed by pool name."""
    pool = device.pool
    pool_name = pool.pool
    available = alloc.available_counters.get(pool_name)
    if available is None:
        available = {
            name: dict(counter_set.counters) for name, counter_set in pool.counter_sets.items()
        }
        if alloc.usage:
            _subtract_allocated(alloc, device, available)
        alloc.available_counters[pool_name] = available
    consumed = alloc.consumed_counters.setdefault(pool_name, {})
    for consumption in device.device.consumes_counters:
        counters = consumed.setdefault(consumption.counter_set, {})
        for name, value in consumption.counters.items():
            counters[name] = counters.get(name, Fraction(0)) + value
    for set_name, counters_available in available.items():
        taken = consumed.get(set_name, {})
        for name, value in counters_available.items():
            if value < taken.get(name, Fraction(0)):
                deallocate_counters_for_device(alloc, device)
                return False
    return True


def deallocate_counters_for_device(alloc: Allocator, device: DeviceWithID) -> None:
    """``deallocateCountersForDevice``: give back the counters the device consumes."""
    consumed = alloc.consumed_counters.get(device.pool.pool, {})
    for consumption in device.device.consumes_counters:
        counters = consumed.setdefault(consumption.counter_set, {})
        for name, value in consumption.counters.items():
            counters[name] = counters.get(name, Fraction(0)) - value


def _subtract_allocated(
    alloc: Allocator, device: DeviceWithID, available: dict[str, dict[str, Fraction]]
) -> None:
    """The counters that devices of allocated claims consume are not available (upstream's
    loop over the pool's slices in ``checkAvailableCounters``); a counter may go negative,
    which means none is left."""
    pool = device.pool
    for found_slice in (*pool.device_slices_targeting_node, *pool.device_slices_not_targeting_node):
        for other in found_slice.devices:
            if not alloc.usage.allocated((found_slice.driver, found_slice.pool, other.name)):
                continue
            for consumption in other.consumes_counters:
                counters = available.get(consumption.counter_set)
                if counters is None:
                    continue
                for name, value in consumption.counters.items():
                    if name in counters:  # API validation makes sure it exists
                        counters[name] = counters[name] - value
