"""The structured allocator: a port of kube-scheduler v1.36.2's device allocation.

Ported from k8s.io/dynamic-resource-allocation v0.36.2 (vendored by kube-scheduler v1.36.2),
``structured/internal/incubating/allocator_incubating.go``: the implementation
``structured/allocator.go`` ``NewAllocator`` picks when the default feature gates of v1.36
are on (DRAAdminAccess, DRAPrioritizedList, DRAPartitionableDevices, DRADeviceTaints,
DRAConsumableCapacity, DRADeviceBindingConditions + DRAResourceClaimDeviceStatus, without
DRAListTypeAttributes): the "stable" one lacks consumable capacity, "experimental" is chosen
only for list attributes. Functions keep upstream's names in snake_case and order of steps
(docs/allocator.md); branches for features that are off by default are left out. The device
taint, counter and capacity checks are in :mod:`webhook.policy.allocator.devices`.

By default what is judged is an empty cluster: nothing allocated (``allocatedState`` empty),
so the allocator's view of devices in use is only what this allocation takes. ``usage``
(:class:`webhook.policy.allocator.usage.Usage`) stands for ``allocatedState``: the devices of
allocated claims, for the audit's question "does it fit now".
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from webhook.policy.allocator import devices as dev
from webhook.policy.allocator.constraints import (
    Constraint,
    DistinctAttributeConstraint,
    MatchAttributeConstraint,
)
from webhook.policy.allocator.pools import Node, NodeSelectionError, Pool, gather_pools
from webhook.policy.allocator.pools import node_matches as pool_node_matches
from webhook.policy.allocator.prune import cannot_allocate
from webhook.policy.allocator.usage import EMPTY, Usage
from webhook.policy.demand.model import ALL, EXACT_COUNT, Claim, DeviceRequest, Request
from webhook.policy.dra import Device, DeviceClass, ResourceSlice
from webhook.policy.selectors import CelCompileError, CelRuntimeError, compile_selector

#: resourceapi.AllocationResultsMaxSize: at most this many devices in one claim.
ALLOCATION_RESULTS_MAX_SIZE = 32

DeviceID = tuple[str, str, str]


class AllocationError(Exception):
    """A fatal problem: the scheduler's ``Allocate`` returns an error, and the pod is not
    scheduled anywhere (a CEL runtime error, an unknown class). ``on_node`` marks the errors
    wrapping ``ErrFailedAllocationOnNode``, which fail only the node."""

    def __init__(self, message: str, *, on_node: bool = False) -> None:
        super().__init__(message)
        self.on_node = on_node


class BudgetExceeded(Exception):
    """The search ran past its deadline (the ``ctx.Err()`` check of ``allocateOne``)."""


class _Stop(Exception):
    """``errAllocationResultMaxSizeExceeded``: more devices than a claim may hold."""


@dataclass(frozen=True, slots=True)
class DeviceWithID:
    """``deviceWithID``: a device with its slice and pool."""

    device: Device
    id: DeviceID
    slice: ResourceSlice
    pool: Pool


@dataclass
class RequestData:
    """``requestData``: one request or subrequest, its class and how many devices."""

    request: Request
    parent_request: DeviceRequest | None
    class_: DeviceClass | None = None
    num_devices: int = 0
    selected_sub_request_index: int = 0
    all_devices: list[DeviceWithID] = field(default_factory=list)

    @property
    def is_sub_request(self) -> bool:
        """True for a subrequest of ``firstAvailable``."""
        return self.parent_request is not None

    def admin_access(self) -> bool:
        """``requestAccessor.adminAccess``: never for subrequests."""
        return not self.is_sub_request and bool(self.request.admin_access)


RequestKey = tuple[int, int, int]  # requestIndices: claim, request, subrequest


@dataclass(frozen=True, slots=True)
class DeviceIndices:
    """``deviceIndices``: one required device of a request or subrequest of a claim."""

    claim_index: int = 0
    request_index: int = 0
    sub_request_index: int = 0
    device_index: int = 0


Location = tuple[int, int, int]  # deviceLocation: pool, slice, device


class Allocator:
    """``Allocator`` + ``allocator``: allocates the claims of one pod on one node.

    ``slices`` are the slices for the node (``slicesOnNode[node]`` + ``slicesShared``),
    ``all_slices`` every slice (to tell an incomplete pool), ``deadline`` a
    ``time.monotonic()`` after which the search stops with BudgetExceeded. ``prune``: skip
    a search proven impossible by counting (:mod:`webhook.policy.allocator.prune`; False
    runs the plain port, for tests and benchmarks). ``usage``: what allocated claims hold
    (``allocatedState``); empty by default.
    """

    def __init__(
        self,
        classes: Mapping[str, DeviceClass],
        slices: Sequence[ResourceSlice],
        all_slices: Sequence[ResourceSlice],
        deadline: float | None = None,
        *,
        prune: bool = True,
        usage: Usage = EMPTY,
    ) -> None:
        self.classes = classes
        self.usage = usage
        self.slices = slices
        self.all_slices = all_slices
        self.deadline = deadline
        self.prune = prune
        self.num_allocate_one_invocations = 0

    def allocate(self, node: Node, claims: Sequence[Claim]) -> bool:
        """``Allocate``: True when every claim can be allocated on ``node``. Raises
        AllocationError for a fatal problem, BudgetExceeded past the deadline."""
        self.node = node
        self.claims_to_allocate = claims
        self.device_matches_request: dict[tuple[DeviceID, RequestKey], bool] = {}
        self.constraints: list[list[Constraint]] = [[] for _ in claims]
        self.consumed_counters: dict[str, dict[str, dict[str, Fraction]]] = {}
        self.available_counters: dict[str, dict[str, dict[str, Fraction]]] = {}
        self.request_data: dict[RequestKey, RequestData] = {}
        self.result: list[list[tuple[DeviceWithID, RequestData]]] = [[] for _ in claims]
        self.allocating_devices: dict[DeviceID, set[int]] = {}
        self.allocating_capacity: dict[DeviceID, dict[str, Fraction]] = {}
        # First determine all eligible pools.
        try:
            self.pools = gather_pools(self.slices, node, self.all_slices)
        except NodeSelectionError as err:
            raise AllocationError(f"gather pool information: {err}") from None
        for claim_index, claim in enumerate(claims):
            min_devices_per_claim = 0
            for request_index, request in enumerate(claim.requests):
                if request.first_available:
                    min_devices_per_request: int | None = None
                    for i, sub_request in enumerate(request.first_available):
                        key = (claim_index, request_index, i)
                        data = self.validate_device_request(sub_request, request, key)
                        self.request_data[key] = data
                        if min_devices_per_request is None or data.num_devices < (
                            min_devices_per_request
                        ):
                            min_devices_per_request = data.num_devices
                    min_devices_per_claim += min_devices_per_request or 0
                elif request.exactly is not None:
                    key = (claim_index, request_index, 0)
                    data = self.validate_device_request(request.exactly, None, key)
                    self.request_data[key] = data
                    min_devices_per_claim += data.num_devices
                else:
                    raise AllocationError(
                        f"{claim.label}, request {request.name}: neither exactly nor "
                        "firstAvailable (unsupported request type?)"
                    )
            if min_devices_per_claim > ALLOCATION_RESULTS_MAX_SIZE:
                raise AllocationError(
                    f"{claim.label}: number of requested devices {min_devices_per_claim} "
                    f"exceeds the claim limit of {ALLOCATION_RESULTS_MAX_SIZE}"
                )
            # Constraints are assumed to be monotonic: once one returns false, adding more
            # devices will not make it return true, so the search stops early.
            constraints: list[Constraint] = []
            for i, constraint in enumerate(claim.constraints):
                names = frozenset(constraint.requests)
                if constraint.match_attribute is not None:
                    constraints.append(MatchAttributeConstraint(names, constraint.match_attribute))
                elif constraint.distinct_attribute is not None:
                    constraints.append(
                        DistinctAttributeConstraint(names, constraint.distinct_attribute)
                    )
                else:
                    raise AllocationError(
                        f"{claim.label}, constraint #{i}: empty constraint "
                        "(unsupported constraint type?)"
                    )
            self.constraints[claim_index] = constraints
        # Not upstream: a search that cannot succeed, proven by counting, is skipped; what
        # follows is as if it had found nothing (prune.py says why no answer changes).
        if self.prune and cannot_allocate(self):
            done = False
        else:
            try:
                done = self.allocate_one(DeviceIndices(), False, (0, 0, 0))
            except _Stop:
                return False
        if not done:
            for pool in self.pools:
                if pool.is_invalid:
                    # Not fatal: other nodes may proceed (ErrFailedAllocationOnNode).
                    raise AllocationError(
                        "invalid resource pools were encountered", on_node=True
                    ) from None
            return False
        return True

    def validate_device_request(
        self, request: Request, parent: DeviceRequest | None, key: RequestKey
    ) -> RequestData:
        """``validateDeviceRequest``: the request's class, and how many devices it needs."""
        claim = self.claims_to_allocate[key[0]]
        name = request.name
        data = RequestData(request, parent)
        for i, selector in enumerate(request.selectors):
            if not selector:
                raise AllocationError(
                    f"{claim.label}, request {name}, selector #{i}: CEL expression empty "
                    "(unsupported selector type?)"
                )
        if not request.device_class:
            raise AllocationError(
                f"{claim.label}, request {name}: missing device class name "
                "(unsupported request type?)"
            )
        found = self.classes.get(request.device_class)
        if found is None:
            raise AllocationError(
                f"{claim.label}, request {name}: could not retrieve device class "
                f'{request.device_class}: deviceclass.resource.k8s.io "{request.device_class}" '
                "not found"
            )
        data.class_ = found
        if request.allocation_mode == EXACT_COUNT:
            data.num_devices = request.count
        elif request.allocation_mode == ALL:
            for pool in self.pools:
                if pool.is_incomplete:
                    raise AllocationError(
                        f"{claim.label}, request {name}: asks for all devices, but resource "
                        f"pool {pool.pool_id} is currently being updated"
                    )
                if pool.is_invalid:
                    raise AllocationError(
                        f"{claim.label}, request {name}: asks for all devices, but resource "
                        f"pool {pool.pool_id} is currently invalid"
                    )
                for found_slice in pool.device_slices_targeting_node:
                    for device in found_slice.devices:
                        if not self.is_selectable(key, data, found_slice, device):
                            continue
                        candidate = DeviceWithID(device, device.key, found_slice, pool)
                        if not dev.request_fits_capacity(self, data.request, candidate):
                            continue
                        data.all_devices.append(candidate)
            data.num_devices = len(data.all_devices)
        else:
            raise AllocationError(
                f"{claim.label}, request {name}: unsupported count mode {request.allocation_mode}"
            )
        return data

    def allocate_one(self, r: DeviceIndices, allocate_sub_request: bool, start: Location) -> bool:
        """``allocateOne``: try every eligible device for one required device, recursively;
        True when everything got allocated. ``start`` skips devices already tried for this
        request, so that combinations, not permutations, are searched."""
        self.num_allocate_one_invocations += 1
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise BudgetExceeded
        if r.claim_index >= len(self.claims_to_allocate):
            return True  # Done: the first solution is taken.
        claim = self.claims_to_allocate[r.claim_index]
        if r.request_index >= len(claim.requests):
            # Done with the claim, continue with the next one.
            try:
                return self.allocate_one(DeviceIndices(r.claim_index + 1), False, (0, 0, 0))
            except _Stop:
                # Not fatal: another subrequest of an earlier claim may need fewer devices.
                return False
        key = (r.claim_index, r.request_index, r.sub_request_index)
        data = self.request_data[key]
        # Subrequests: one of them is allocated, the first that works.
        if not allocate_sub_request and data.parent_request is not None:
            all_exceeded = True
            sub_request_index = 0
            while (r.claim_index, r.request_index, sub_request_index) in self.request_data:
                attempt = DeviceIndices(r.claim_index, r.request_index, sub_request_index, 0)
                try:
                    success = self.allocate_one(attempt, True, (0, 0, 0))
                except _Stop:
                    sub_request_index += 1
                    continue
                all_exceeded = False
                if success:
                    data.selected_sub_request_index = sub_request_index
                    return True
                sub_request_index += 1
            if all_exceeded:
                raise _Stop
            return False

        request = data.request
        do_all_devices = request.allocation_mode == ALL
        if do_all_devices and not data.all_devices:
            return False  # At least one device is required for 'All'.
        if r.device_index >= data.num_devices:
            # Done with the request, continue with the next one.
            return self.allocate_one(
                DeviceIndices(r.claim_index, r.request_index + 1), False, (0, 0, 0)
            )
        devices_after = len(self.result[r.claim_index]) + data.num_devices - r.device_index
        if devices_after > ALLOCATION_RESULTS_MAX_SIZE:
            raise _Stop
        following = DeviceIndices(
            r.claim_index, r.request_index, r.sub_request_index, r.device_index + 1
        )
        if do_all_devices:
            # The devices are known; the order does not matter, so only the next is tried.
            chosen = data.all_devices[r.device_index]
            deallocate = dev.allocate_device(self, r, chosen, True)
            if deallocate is None:
                return False
            try:
                done = self.allocate_one(following, allocate_sub_request, (0, 0, 0))
            except BaseException:
                deallocate()
                raise
            if not done:
                deallocate()
            return done

        admin = data.admin_access()
        for pool_index in range(start[0], len(self.pools)):
            pool = self.pools[pool_index]
            # Incomplete or invalid pools are skipped, others may have devices.
            if pool.is_incomplete or pool.is_invalid:
                continue
            slice_start = start[1] if pool_index == start[0] else 0
            for slice_index in range(slice_start, len(pool.device_slices_targeting_node)):
                found_slice = pool.device_slices_targeting_node[slice_index]
                device_start = start[2] if (pool_index, slice_index) == (start[0], start[1]) else 0
                for device_index in range(device_start, len(found_slice.devices)):
                    device = found_slice.devices[device_index]
                    device_id = (pool.driver, pool.pool, device.name)
                    # Checking for "in use" is cheap and thus gets done first.
                    if admin and self.allocating_device_for_claim(device_id, r.claim_index):
                        continue
                    if not admin and self.device_in_use(device_id):
                        continue
                    if not self.is_selectable(key, data, found_slice, device):
                        continue
                    candidate = DeviceWithID(device, device_id, found_slice, pool)
                    if not dev.request_fits_capacity(self, request, candidate):
                        continue
                    deallocate = dev.allocate_device(self, r, candidate, False)
                    if deallocate is None:
                        continue  # In use or a constraint violated.
                    location = (pool_index, slice_index, device_index + 1)
                    try:
                        done = self.allocate_one(following, allocate_sub_request, location)
                    except BaseException:
                        deallocate()
                        raise
                    if done:
                        return True
                    deallocate()
        # No solution from here.
        return False

    def is_selectable(
        self, key: RequestKey, data: RequestData, found_slice: ResourceSlice, device: Device
    ) -> bool:
        """``isSelectable``: does the device pass the class's and the request's selectors,
        and (per-device node selection) reach the node? Cached per device and request."""
        match_key = ((found_slice.driver, found_slice.pool, device.name), key)
        known = self.device_matches_request.get(match_key)
        if known is not None:
            return known
        matches = True
        if data.class_ is not None:
            matches = self.selectors_match(key, device, data.class_, data.class_.selectors)
        if matches:
            matches = self.selectors_match(key, device, None, data.request.selectors)
        if matches and found_slice.per_device_node_selection:
            matches = pool_node_matches(
                self.node, device.node, device.all_nodes, device.node_selector
            )
        self.device_matches_request[match_key] = matches
        return matches

    def selectors_match(
        self,
        key: RequestKey,
        device: Device,
        device_class: DeviceClass | None,
        selectors: Sequence[str],
    ) -> bool:
        """``selectorsMatch``: every selector matches; a compile or runtime error is fatal."""
        where = (
            f"class {device_class.name}"
            if device_class is not None
            else self.claims_to_allocate[key[0]].label
        )
        for i, expression in enumerate(selectors):
            try:
                compiled = compile_selector(expression)
            except CelCompileError as err:
                raise AllocationError(f"{where}: selector #{i}: CEL compile error: {err}") from None
            try:
                if not compiled.matches(device):
                    return False
            except CelRuntimeError as err:
                raise AllocationError(f"{where}: selector #{i}: CEL runtime error: {err}") from None
        return True

    def device_in_use(self, device_id: DeviceID) -> bool:
        """``deviceInUse``: allocated to a claim (``allocatedState.AllocatedDevices``), or
        taken by this allocation."""
        return device_id in self.usage.devices or bool(self.allocating_devices.get(device_id))

    def device_capacity_in_use(self, device_id: DeviceID) -> bool:
        """``deviceCapacityInUse``: an allocated shared device counts (its counters are
        consumed already), as one this allocation takes some capacity of."""
        return device_id in self.usage.shared or device_id in self.allocating_capacity

    def allocating_device_for_claim(self, device_id: DeviceID, claim_index: int) -> bool:
        """``allocatingDeviceForClaim``."""
        return claim_index in self.allocating_devices.get(device_id, ())
