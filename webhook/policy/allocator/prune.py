"""Proofs that a search cannot succeed, checked before the ported search runs.

Not a part of upstream: the scheduler's ``allocateOne`` (ported in
:mod:`webhook.policy.allocator.structured`) finds out that nine devices cannot be taken from
eight by trying every combination of the eight, 256 calls, per node. :func:`cannot_allocate`
proves such cases impossible by counting, so that ``Allocator.allocate`` can skip the search
and go on exactly as it does when the search finds nothing. The search itself is left as
upstream wrote it, so that the two can still be diffed. docs/allocator.md, "Pruning".

Why an answer of True cannot change the allocator's answer:

* **Only proofs of "no allocation".** The search then returns False, and ``allocate`` goes
  on to its invalid-pool check; or it stops on the 32-device limit
  (``errAllocationResultMaxSizeExceeded``), which ``allocate`` turns into "no allocation"
  without that check: so nothing is pruned on a node with an invalid pool.
* **No error the search could raise is hidden.** The search raises an error in two places:
  a CEL compile or runtime error in ``isSelectable``, and a constraint that refuses a device
  of an ``All`` request. Before proving anything, every (device, request) pair the search
  could ever look at (every device of every complete, valid pool, for every request and
  subrequest) is evaluated through the allocator's own ``is_selectable``: if any raises, the
  search runs unpruned and meets the error, or not, exactly where upstream would. If none
  raises, the search cannot raise there either: ``is_selectable`` is a function of the device
  and the request, and its answers are remembered for the search. Claims with an ``All``
  request and constraints are never pruned.
* **The counts are upper bounds.** A device counts as usable by a request when it passes the
  class and request selectors (and per-device node selection), has room for the request's
  capacity with nothing else taken, and carries no taint the request does not tolerate: the
  checks ``allocateOne`` and ``allocateDevice`` make, minus those (in use, counters,
  constraints) that only ever refuse more once something is allocated.
* **The time budget.** The only answer that can change is ``unknown``: a search that would run
  out of time is proven impossible instead, which is the scheduler's answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING

from webhook.policy.allocator.devices import request_fits_capacity, taint_prevents_allocation
from webhook.policy.demand.model import ALL

if TYPE_CHECKING:
    from webhook.policy.allocator.structured import (
        Allocator,
        DeviceID,
        DeviceWithID,
        RequestData,
        RequestKey,
    )


@dataclass
class _Usable:
    """What one request or subrequest could take: its usable devices, and whether it is
    satisfiable at all with them."""

    devices: set[DeviceID] = field(default_factory=set)
    multiple: bool = False  # one of them allows multiple allocations
    possible: bool = True


def cannot_allocate(alloc: Allocator) -> bool:
    """True when no search can allocate ``alloc``'s claims on its node, proven by counting;
    False when that is not proven (the search decides). Called by ``Allocator.allocate``
    after validation, with its pools and request data."""
    if not alloc.claims_to_allocate or _all_with_constraints(alloc):
        return False
    if any(pool.is_invalid for pool in alloc.pools):
        # A search that stops on the 32-device limit returns "no allocation" before the
        # invalid-pool error that a search finding nothing leads to: which of the two the
        # search meets is not counted here, so the search decides.
        return False
    if not (_some_request_short(alloc) or _could_prune(alloc) or _partitionable(alloc)):
        # No rule can prove anything: the selectors are left to the search, so the usual
        # allowed pod pays for no evaluation the search would not make.
        return False
    usable = _usable_devices(alloc)
    if usable is None:
        return False  # Some selector errs: the search meets the error, or not, as upstream.
    return _proven(alloc, usable)


def _some_request_short(alloc: Allocator) -> bool:
    """Whether rule 1 may hold: some request none of whose alternatives finds as many
    usable devices as it needs. Each alternative looks only until it has found enough, so
    that a request that fits costs the evaluations the search would make first anyway."""
    wanting: dict[tuple[int, int], bool] = {}
    for key, data in alloc.request_data.items():
        request = key[:2]
        if wanting.get(request) is False:
            continue  # An earlier alternative of this request has enough.
        if data.request.allocation_mode == ALL:
            found = _Usable()
            _all_usable(found, data)
            wanting[request] = not found.possible
            continue
        count = _count_usable(alloc, key, data, data.num_devices)
        if count is None:
            return False  # A selector errs: nothing is pruned.
        wanting[request] = count < data.num_devices
    return any(wanting.values())


def _all_with_constraints(alloc: Allocator) -> bool:
    """A claim with an ``All`` request and constraints: ``allocateDevice`` raises when a
    constraint refuses one of its devices, an error the counting cannot foresee."""
    return any(
        data.request.allocation_mode == ALL and alloc.constraints[key[0]]
        for key, data in alloc.request_data.items()
    )


def _devices_in_reach(alloc: Allocator) -> int:
    """The devices of the complete, valid pools that some request could take by their
    taints: what the search can take at most, told without evaluating a selector."""
    from webhook.policy.allocator.structured import DeviceWithID

    requests = [data.request for data in alloc.request_data.values()]
    count = 0
    for pool in alloc.pools:
        if pool.is_incomplete or pool.is_invalid:
            continue
        for device_slice in pool.device_slices_targeting_node:
            for device in device_slice.devices:
                if not device.taints:
                    count += 1
                    continue
                candidate = DeviceWithID(device, device.key, device_slice, pool)
                if any(not taint_prevents_allocation(candidate, r) for r in requests):
                    count += 1
    return count


def _could_prune(alloc: Allocator) -> bool:
    """Whether rules 2 or 3 may hold: with every device in reach counted as usable, without
    evaluating a selector, do the requests of all claims need more devices than there are?
    When not, the selectors are left to the search, so that the usual allowed pod pays for
    no evaluation. (This decides only whether to count, never the answer; it may miss a
    case that counting with the selectors would prove, which the search then finds.)"""
    needed = sum(_min_count(alloc, key[0], key[1]) for key in alloc.request_data if key[2] == 0)
    return needed > _devices_in_reach(alloc)


def _partitionable(alloc: Allocator) -> bool:
    """Whether rule 4 may hold: some complete, valid pool in reach has shared counters
    (partitionable devices, such as a GPU and the MIG devices it can be cut into), and the
    claims have several requests (one request's search over a node's devices is short: the
    usual single GPU asked for pays for no evaluation)."""
    if alloc.usage or len({key[:2] for key in alloc.request_data}) < 2:
        return False
    return any(
        pool.counter_sets for pool in alloc.pools if not (pool.is_incomplete or pool.is_invalid)
    )


def _min_count(alloc: Allocator, claim_index: int, request_index: int) -> int:
    """The fewest devices a request needs: its count, or its smallest alternative's."""
    counts = [
        data.num_devices
        for (c, r, _), data in alloc.request_data.items()
        if (c, r) == (claim_index, request_index)
    ]
    return min(counts)


def _usable_in_order(
    alloc: Allocator, key: RequestKey, data: RequestData
) -> Iterator[DeviceWithID]:
    """The devices a request or subrequest could take, in the search's order, every device
    of the complete, valid pools evaluated through ``is_selectable`` (whose errors pass)."""
    from webhook.policy.allocator.structured import DeviceWithID

    request = data.request
    for pool in alloc.pools:
        if pool.is_incomplete or pool.is_invalid:
            continue  # allocateOne skips these pools.
        for device_slice in pool.device_slices_targeting_node:
            for device in device_slice.devices:
                if not alloc.is_selectable(key, data, device_slice, device):
                    continue
                candidate = DeviceWithID(device, device.key, device_slice, pool)
                if request_fits_capacity(
                    alloc, request, candidate
                ) and not taint_prevents_allocation(candidate, request):
                    yield candidate


def _count_usable(alloc: Allocator, key: RequestKey, data: RequestData, enough: int) -> int | None:
    """How many devices the request could take, counted up to ``enough``; None when a
    selector errs."""
    count = 0
    try:
        for _ in _usable_in_order(alloc, key, data):
            count += 1
            if count >= enough:
                break
    except Exception:  # a CEL error, or anything: the search meets it, or not
        return None
    return count


def _usable_devices(alloc: Allocator) -> dict[RequestKey, _Usable] | None:
    """Every request's usable devices, every (device, request) pair the search could look
    at evaluated; None when some evaluation raises."""
    out: dict[RequestKey, _Usable] = {}
    for key, data in alloc.request_data.items():
        found = out[key] = _Usable()
        if data.request.allocation_mode == ALL:
            # Validation evaluated every device of every pool for it, without an error.
            _all_usable(found, data)
            continue
        try:
            for candidate in _usable_in_order(alloc, key, data):
                found.devices.add(candidate.id)
                found.multiple = found.multiple or candidate.device.allow_multiple_allocations
        except Exception:  # a CEL error, or anything: the search meets it, or not
            return None
        found.possible = len(found.devices) >= data.num_devices
    return out


def _all_usable(found: _Usable, data: RequestData) -> None:
    """An ``All`` request takes every device validation found for it (``all_devices``),
    each in turn; it fails on none, and on the first whose taint it does not tolerate."""
    found.devices = {d.id for d in data.all_devices}
    found.multiple = any(d.device.allow_multiple_allocations for d in data.all_devices)
    found.possible = bool(data.all_devices) and not any(
        taint_prevents_allocation(d, data.request) for d in data.all_devices
    )


def _proven(alloc: Allocator, usable: dict[RequestKey, _Usable]) -> bool:
    """The rules, each sound on its own:

    1. A request none of whose alternatives has enough usable devices cannot be allocated:
       within one request the search takes each device at most once (it moves on from the
       last device taken), so a request of n devices needs n usable ones.
    2. Within one claim, a device that does not allow multiple allocations is taken at most
       once (``allocateDevice`` marks it for the claim, and both the in-use check and the
       admin-access check refuse it again): the claim's requests need as many distinct
       devices as their smallest alternatives add up to.
    3. Without admin access, no two claims share such a device either (``deviceInUse``
       counts every claim being allocated): the same sum over all claims.
    """
    needed_all, reach_all = 0, set()
    multiple_all = False
    admin = False
    for claim_index, claim in enumerate(alloc.claims_to_allocate):
        needed, reach, multiple = 0, set(), False
        for request_index in range(len(claim.requests)):
            alternatives = [
                (data, usable[key])
                for key, data in alloc.request_data.items()
                if key[:2] == (claim_index, request_index)
            ]
            possible = [(data, u) for data, u in alternatives if u.possible]
            if not possible:
                return True  # Rule 1.
            needed += min(data.num_devices for data, _ in possible)
            for data, u in alternatives:
                reach |= u.devices
                multiple = multiple or u.multiple
                admin = admin or data.admin_access()
        if not multiple and needed > len(reach):
            return True  # Rule 2.
        needed_all += needed
        reach_all |= reach
        multiple_all = multiple_all or multiple
    if admin or multiple_all:
        return False
    return needed_all > len(reach_all) or _counters_short(alloc, usable)  # Rules 3 and 4.


Counters = dict[str, dict[str, dict[str, Fraction]]]  # pool name -> counter set -> counter


def _counters_short(alloc: Allocator, usable: dict[RequestKey, _Usable]) -> bool:
    """Rule 4, under rule 3's conditions (no admin access, no device that allows multiple
    allocations, so no device is taken twice) and on an empty cluster:

    Requests of one alternative whose usable devices are the same set, and need as many
    devices as the set has, take every device of it in any allocation: those devices are
    forced. A device ``allocateDevice`` takes must fit its pool's shared counters with what
    the devices taken before consume, and what a device took is only ever given back when it
    is given back itself (upstream keeps even some of that), so in any allocation the forced
    devices and each other device taken fit the counters together. So the forced devices
    must fit them, and every other request needs as many usable devices, not forced, that
    fit them beside the forced ones. (A GPU taken whole uses up the counters of every MIG
    device it could be cut into.)
    """
    if alloc.usage or any(d.request.allocation_mode == ALL for d in alloc.request_data.values()):
        return False
    names = [pool.pool for pool in alloc.pools]
    if len(names) != len(set(names)):
        return False  # Counters are keyed by pool name upstream: two pools of one name.
    by_id = _devices_by_id(alloc)
    alternatives: dict[tuple[int, int], list[RequestKey]] = {}
    for key in alloc.request_data:
        alternatives.setdefault(key[:2], []).append(key)
    forced_sets = _forced_sets(alloc, usable, alternatives)
    forced: set[DeviceID] = set().union(*forced_sets) if forced_sets else set()
    if not forced or not forced <= set(by_id):
        return False
    available: Counters = {
        pool.pool: {name: dict(s.counters) for name, s in pool.counter_sets.items()}
        for pool in alloc.pools
    }
    consumed: Counters = {}
    for device_id in forced:
        _consume(consumed, by_id[device_id])
    if not _within(available, consumed):
        return True  # The forced devices cannot all be taken.
    for keys in alternatives.values():
        if len(keys) == 1 and frozenset(usable[keys[0]].devices) in forced_sets:
            continue  # It takes forced devices.
        if not any(
            sum(
                1
                for device_id in usable[key].devices - forced
                if _fits_beside(available, consumed, by_id[device_id])
            )
            >= alloc.request_data[key].num_devices
            for key in keys
        ):
            return True
    return False


def _devices_by_id(alloc: Allocator) -> dict[DeviceID, DeviceWithID]:
    """Every device of the complete, valid pools in reach, by its ID."""
    from webhook.policy.allocator.structured import DeviceWithID

    by_id: dict[DeviceID, DeviceWithID] = {}
    for pool in alloc.pools:
        if pool.is_incomplete or pool.is_invalid:
            continue
        for device_slice in pool.device_slices_targeting_node:
            for device in device_slice.devices:
                by_id[device.key] = DeviceWithID(device, device.key, device_slice, pool)
    return by_id


def _forced_sets(
    alloc: Allocator,
    usable: dict[RequestKey, _Usable],
    alternatives: dict[tuple[int, int], list[RequestKey]],
) -> set[frozenset[DeviceID]]:
    """The sets of usable devices that requests of one alternative, all with that same set,
    need whole (their counts add up to its size)."""
    tight: dict[frozenset[DeviceID], int] = {}
    for keys in alternatives.values():
        if len(keys) == 1:
            devices = frozenset(usable[keys[0]].devices)
            tight[devices] = tight.get(devices, 0) + alloc.request_data[keys[0]].num_devices
    return {devices for devices, needed in tight.items() if needed == len(devices)}


def _consume(consumed: Counters, device: DeviceWithID) -> None:
    counters = consumed.setdefault(device.pool.pool, {})
    for consumption in device.device.consumes_counters:
        taken = counters.setdefault(consumption.counter_set, {})
        for name, value in consumption.counters.items():
            taken[name] = taken.get(name, Fraction(0)) + value


def _within(available: Counters, consumed: Counters) -> bool:
    """``checkAvailableCounters``' test: no counter of a pool's sets overdrawn."""
    for pool_name, sets in available.items():
        taken_sets = consumed.get(pool_name, {})
        for set_name, counters in sets.items():
            taken = taken_sets.get(set_name, {})
            if any(value < taken.get(name, Fraction(0)) for name, value in counters.items()):
                return False
    return True


def _fits_beside(available: Counters, consumed: Counters, device: DeviceWithID) -> bool:
    """Whether ``device`` fits the counters beside what ``consumed`` holds."""
    if not device.device.consumes_counters:
        return True
    mine: Counters = {}
    _consume(mine, device)
    pool_name = device.pool.pool
    sets = available.get(pool_name, {})
    for set_name, counters in mine.get(pool_name, {}).items():
        held = consumed.get(pool_name, {}).get(set_name, {})
        limits = sets.get(set_name, {})
        for name, value in counters.items():
            if name in limits and limits[name] < held.get(name, Fraction(0)) + value:
                return False
    return True
