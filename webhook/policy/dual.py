"""Nodes that publish the same GPUs twice, and GPUs already given twice (docs/migrate.md).

A node whose device plugin advertises NVIDIA GPUs in ``status.allocatable`` while NVIDIA's DRA
driver publishes the same GPUs in a ResourceSlice of its own (``spec.nodeName``) has two ledgers
for one set of GPUs: the scheduler counts device-plugin pods against allocatable and claims
against the slice, and neither sees the other (KEP-5004 says a node must not have both;
nothing enforces it). :func:`dual_published` finds such nodes in a :class:`Supply`;
:func:`double_allocations` adds up what each ledger has already given on them.

Pure: the audit, ``gpu-policy migrate check`` and the webhook's guard all call these.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.policy.demand import pod_requests
from webhook.policy.dra import Allocation, Device, ResourceSlice
from webhook.policy.supply import NodeGroup, Supply

#: The driver NVIDIA's DRA driver publishes GPUs under (docs/dra.md, "NVIDIA's DRA driver").
GPU_DRIVER = "gpu.nvidia.com"
#: The domain of the device plugin's resource names (docs/device-plugin.md).
PLUGIN_DOMAIN = "nvidia.com/"


@dataclass(frozen=True)
class DualNode:
    """One node that serves GPUs through both stacks.

    ``plugin`` are the NVIDIA names its allocatable advertises (``nvidia.com/gpu`` -> 2);
    ``gpus`` how many whole GPUs its slices publish (MIG devices counted on their parent,
    once), ``devices`` how many devices in all, ``slices`` the names of those slices.
    """

    node: str
    plugin: Mapping[str, int]
    gpus: int
    devices: int
    slices: tuple[str, ...]

    def describe(self) -> str:
        """``node gpu-1: nvidia.com/gpu: 2 in allocatable and 2 GPUs in ResourceSlice gpu-1-x``"""
        names = ", ".join(f"{k}: {v}" for k, v in sorted(self.plugin.items()))
        word = "ResourceSlice" if len(self.slices) == 1 else "ResourceSlices"
        return (
            f"node {self.node}: {names} in allocatable and {_count(self.gpus, 'GPU')} "
            f"({_count(self.devices, 'device')}) in {word} {', '.join(self.slices)}"
        )


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _attribute(device: Device, name: str) -> str | None:
    found = device.attribute(name)
    return found if isinstance(found, str) else None


def whole_gpus(devices: Iterable[Device]) -> int:
    """How many physical GPUs the driver's devices stand for: one per ``type: gpu`` device,
    one per distinct ``parentUUID`` of the ``type: mig`` ones (docs/dra.md, "Devices")."""
    gpus = 0
    parents: set[str] = set()
    for device in devices:
        kind = _attribute(device, "type")
        if kind == "mig":
            parents.add(_attribute(device, "parentUUID") or device.name)
        elif kind in ("gpu", None):
            gpus += 1
    return gpus + len(parents)


def plugin_gpus(allocatable: Mapping[str, int]) -> dict[str, int]:
    """The NVIDIA device-plugin names a node advertises, with a count above zero."""
    return {k: v for k, v in allocatable.items() if k.startswith(PLUGIN_DOMAIN) and v > 0}


def _local_slices(group: NodeGroup) -> list[ResourceSlice]:
    return [
        s
        for s in group.slices
        if s.driver == GPU_DRIVER and s.node_name == group.node and s.devices
    ]


def dual_published(supply: Supply) -> tuple[DualNode, ...]:
    """Every existing node of ``supply`` whose allocatable has NVIDIA GPU names and whose own
    ResourceSlices (``nodeName``: the node) of NVIDIA's driver have devices, by node name."""
    out = []
    for group in supply.groups:
        if not group.node_names:
            continue  # nodes that can only appear publish nothing yet
        plugin = plugin_gpus(group.allocatable)
        local = _local_slices(group)
        if not plugin or not local:
            continue
        devices = [d for s in local for d in s.devices]
        out.append(
            DualNode(
                node=group.node,
                plugin=plugin,
                gpus=whole_gpus(devices),
                devices=len(devices),
                slices=tuple(sorted(s.name for s in local)),
            )
        )
    return tuple(sorted(out, key=lambda d: d.node))


@dataclass(frozen=True)
class DoubleAllocation:
    """GPUs a dual-published node has given through both ledgers, more than it has.

    ``plugin_pods`` are the bound pods holding device-plugin GPUs (``namespace/name``) and
    ``plugin_gpus`` the GPUs they hold (shared slots turned into GPUs: slots x GPUs / slots
    advertised, rounded up); ``claims`` the allocated ResourceClaims with devices of the
    node's pools and ``claim_gpus`` the GPUs those devices are.
    """

    node: str
    gpus: int
    plugin_pods: tuple[str, ...]
    plugin_gpus: int
    claims: tuple[str, ...]
    claim_gpus: int

    @property
    def given(self) -> int:
        """GPUs given in all, by both ledgers."""
        return self.plugin_gpus + self.claim_gpus

    def describe(self) -> str:
        """One sentence: who holds what, against how many GPUs."""
        return (
            f"node {self.node} has {_count(self.gpus, 'GPU')} and has given {self.given}: "
            f"{self.plugin_gpus} to device-plugin pods ({', '.join(self.plugin_pods)}) and "
            f"{self.claim_gpus} to allocated claims ({', '.join(self.claims)})"
        )


def _pod_gpu_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """What a pod holds of NVIDIA device-plugin names, added up as the scheduler adds a pod's
    requests (``webhook.policy.demand.pod_requests``)."""
    asked = pod_requests(pod.get("spec") or {})
    return {k: math.ceil(v) for k, v in asked.items() if k.startswith(PLUGIN_DOMAIN) and v > 0}


def _holds_resources(pod: Mapping[str, Any]) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return bool((pod.get("spec") or {}).get("nodeName")) and phase not in ("Succeeded", "Failed")


def _plugin_holders(
    nodes: Mapping[str, DualNode], pods: Iterable[Mapping[str, Any]]
) -> tuple[dict[str, list[str]], dict[str, dict[str, int]]]:
    """Per dual node: the bound pods holding device-plugin GPUs, and the slots they hold."""
    held: dict[str, list[str]] = {}
    slots: dict[str, dict[str, int]] = {}
    for pod in pods:
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        asks = _pod_gpu_requests(pod) if node in nodes and _holds_resources(pod) else {}
        if not asks:
            continue
        meta = pod.get("metadata") or {}
        held.setdefault(node, []).append(f"{meta.get('namespace', '')}/{meta.get('name', '')}")
        mine = slots.setdefault(node, {})
        for name, n in asks.items():
            mine[name] = mine.get(name, 0) + n
    return held, slots


def _claim_holders(
    nodes: Mapping[str, DualNode],
    allocations: Iterable[Allocation],
    slices: Iterable[ResourceSlice],
) -> tuple[dict[str, list[str]], dict[str, list[Device]]]:
    """Per dual node: the allocated claims with devices of its slices, and those devices."""
    devices: dict[tuple[str, str, str], tuple[str, Device]] = {}
    for published in slices:
        where = published.node_name
        if where is not None and where in nodes:
            for device in published.devices:
                devices[(published.driver, published.pool, device.name)] = (where, device)
    claimed: dict[str, list[str]] = {}
    given: dict[str, list[Device]] = {}
    for allocation in allocations:
        for _request, driver, pool, name in allocation.devices:
            found = devices.get((driver, pool, name))
            if found is None:
                continue
            node, device = found
            label = f"{allocation.namespace}/{allocation.name}"
            if label not in claimed.setdefault(node, []):
                claimed[node].append(label)
            given.setdefault(node, []).append(device)
    return claimed, given


def double_allocations(
    dual: Iterable[DualNode],
    pods: Iterable[Mapping[str, Any]],
    allocations: Iterable[Allocation],
    slices: Iterable[ResourceSlice],
) -> tuple[DoubleAllocation, ...]:
    """The dual-published nodes whose device-plugin pods and allocated claims together hold
    more GPUs than the node has. ``pods`` are the cluster's pods (those bound and not finished
    count), ``allocations`` its claims' allocations, ``slices`` its ResourceSlices (which say
    which node each pool's devices are on)."""
    nodes = {d.node: d for d in dual}
    if not nodes:
        return ()
    held, slots = _plugin_holders(nodes, pods)
    claimed, given = _claim_holders(nodes, allocations, slices)
    out = []
    for name, dual_node in sorted(nodes.items()):
        # Shared slots count as the GPUs they are on: slots x GPUs / slots advertised.
        plugin = sum(
            math.ceil(n * dual_node.gpus / dual_node.plugin[r]) if dual_node.plugin.get(r) else n
            for r, n in slots.get(name, {}).items()
        )
        by_claims = whole_gpus(given.get(name, ()))
        if plugin and by_claims and plugin + by_claims > dual_node.gpus:
            out.append(
                DoubleAllocation(
                    node=name,
                    gpus=dual_node.gpus,
                    plugin_pods=tuple(sorted(held.get(name, ()))),
                    plugin_gpus=plugin,
                    claims=tuple(sorted(claimed.get(name, ()))),
                    claim_gpus=by_claims,
                )
            )
    return tuple(out)
