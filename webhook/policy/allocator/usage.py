"""What the cluster uses now: the allocator's optional "in use" input.

The webhook judges an empty cluster; the audit asks whether a pending pod fits now, with what
bound pods and allocated claims hold. kube-scheduler has the same two inputs:

- NodeResourcesFit compares a pod's requests with the node's allocatable minus what the pods
  on it request (``pkg/scheduler/framework/plugins/noderesources/fit.go``, ``fitsRequest``:
  ``nodeInfo.Requested``): :attr:`Usage.requested`;
- the DynamicResources plugin hands the structured allocator the devices of every allocated
  claim (``structured.NewAllocator``'s ``allocatedState``, ``AllocatedState`` of
  ``structured/internal/allocatedstate.go``, k8s.io/dynamic-resource-allocation v0.36.2): a
  device in ``AllocatedDevices`` is in use (``deviceInUse``), and the counters it consumes
  are not available to other devices of its pool (``checkAvailableCounters``, through
  ``IsDeviceAllocated``): :attr:`Usage.devices` and :attr:`Usage.shared`.

docs/allocator.md, "Current usage".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

DeviceID = tuple[str, str, str]  # driver, pool, device


@dataclass(frozen=True)
class Usage:
    """What is in use: ``requested`` the extended resources bound pods hold, per node name
    (``nvidia.com/gpu`` -> 3); ``devices`` the devices of allocated claims
    (``AllocatedDevices``); ``shared`` the allocated devices that allow multiple allocations
    (``AllocatedSharedDeviceIDs``): still allocatable to others, but their counters are
    consumed. The default is an empty cluster."""

    requested: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    devices: frozenset[DeviceID] = frozenset()
    shared: frozenset[DeviceID] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.requested or self.devices or self.shared)

    def held(self, node: str, resource: str) -> int:
        """How much of ``resource`` the pods bound to ``node`` request."""
        return (self.requested.get(node) or {}).get(resource, 0)

    def allocated(self, device: DeviceID) -> bool:
        """``IsDeviceAllocated``: the device is allocated, wholly or shared."""
        return device in self.devices or device in self.shared


#: Nothing in use: the webhook's question.
EMPTY = Usage()
