"""Pools of DRA devices: the ResourceSlices' GPUs, named by the extended resources their
DeviceClasses serve, so that the naming view lists them beside the device plugin's
(docs/dra.md, "Extended resources").
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.policy.dra import Device, DeviceClass, DraSnapshot
from webhook.policy.errors import Diagnostic, warning
from webhook.policy.inventory.model import Offer, Pool, PoolOrigin
from webhook.policy.nodes import node_selector_matches
from webhook.policy.products import (
    product_value,
    sanitise_model,
)
from webhook.policy.resources import ResourceForm, parse_resource

# --- pools of DRA devices ------------------------------------------------------------------

ALL_NODES = "(every node)"


def dra_product(device: Device) -> tuple[str | None, str | None]:
    """(GPU model as GFD spells it, MIG profile) of a device the NVIDIA DRA driver publishes
    (docs/dra.md, "Device attributes"): ``productName``, and ``profile`` for ``type: mig``."""
    name = device.attribute("productName")
    model = sanitise_model(name) if isinstance(name, str) and name else None
    profile = device.attribute("profile") if device.attribute("type") == "mig" else None
    return model, profile if isinstance(profile, str) else None


def _where(device: Device, nodes: Mapping[str, Mapping[str, str]]) -> list[str]:
    """The nodes that can use ``device``: its node, every node, or those its selector picks."""
    if device.node is not None:
        return [device.node]
    if device.all_nodes:
        return [ALL_NODES]
    return [
        n for n, labels in nodes.items() if node_selector_matches(device.node_selector, n, labels)
    ]


def _served_forms(dra: DraSnapshot, device_class: DeviceClass) -> list[ResourceForm]:
    """The GPU resource names (``nvidia.com/gpu``, ``nvidia.com/mig-...``) ``device_class``
    serves: its ``extendedResourceName`` when it is one and no newer class took it over."""
    forms = []
    for name in device_class.resource_names:
        form = parse_resource(name)
        if form is not None and dra.class_for_resource(name) is device_class:
            forms.append(form)
    return forms


@dataclass(frozen=True, slots=True)
class _ClusterNodes:
    """What the DRA pools need of the Nodes: labels (for ResourceSlice nodeSelectors) and
    ``status.allocatable`` (where a device plugin already serves a name)."""

    labels: Mapping[str, Mapping[str, str]]
    allocatable: Mapping[str, Mapping[str, Any]]


def dra_pools(
    dra: DraSnapshot, nodes: Iterable[Mapping[str, Any]]
) -> tuple[list[Pool], list[Diagnostic]]:
    """Pools of the devices DeviceClasses select, where a class serves a GPU resource name.

    One pool per (class, GPU model, MIG profile); its offer counts the devices, and the most
    of them one node has: the scheduler allocates a request's devices on one node (or from
    devices every node reaches). On a node whose ``status.allocatable`` has the name, the
    scheduler serves it from the device plugin alone (docs/dra.md, "KEP-5004"): its devices
    do not count for that name, and the node is reported, with what DRA could not evaluate.
    """
    labels: dict[str, Mapping[str, str]] = {}
    allocatable: dict[str, Mapping[str, Any]] = {}
    for node in nodes:
        meta = node.get("metadata") or {}
        name = str(meta.get("name", "?"))
        labels[name] = meta.get("labels") or {}
        allocatable[name] = (node.get("status") or {}).get("allocatable") or {}
    cluster = _ClusterNodes(labels, allocatable)
    pools: list[Pool] = []
    problems = list(dra.problems)
    for device_class in sorted(dra.classes.values(), key=lambda c: c.name):
        forms = _served_forms(dra, device_class)
        if not forms:
            continue
        devices, _ = dra.class_devices(device_class.name)
        groups: dict[tuple[str | None, str | None], list[Device]] = defaultdict(list)
        for device in devices:
            groups[dra_product(device)].append(device)
        for kind, members in sorted(groups.items(), key=lambda kv: str(kv[0])):
            pool, found = _dra_pool(device_class, forms, kind, members, cluster)
            problems += found
            if pool is not None:
                pools.append(pool)
    return pools, problems


def _dra_pool(
    device_class: DeviceClass,
    forms: list[ResourceForm],
    kind: tuple[str | None, str | None],
    devices: list[Device],
    cluster: _ClusterNodes,
) -> tuple[Pool | None, list[Diagnostic]]:
    """The pool of ``devices`` (all of ``kind``: GPU model, MIG profile) of ``device_class``,
    None when a device plugin serves each of its names on all of its nodes; and those nodes."""
    model, profile = kind
    per_node: dict[str, int] = defaultdict(int)
    for device in devices:
        for node in _where(device, cluster.labels):
            per_node[node] += 1
    # Devices every node reaches add to what each node has.
    everywhere = per_node.pop(ALL_NODES, 0)
    memory = devices[0].capacity_of("memory")
    memory_mib = None if memory is None else int(memory.value // 2**20)
    product = None
    if model is not None:
        product = product_value(model, ResourceForm(profile, False), replicas=1, renamed=False)
    offers = []
    problems: list[Diagnostic] = []
    served: set[str] = set()
    for form in forms:
        counts = {}
        for node, count in per_node.items():
            raw = cluster.allocatable.get(node, {}).get(form.name)
            if raw is None:
                counts[node] = count
                continue
            problems.append(
                warning(
                    f"node {node}",
                    f"{form.name} comes from its device plugin (allocatable {raw}) and from DRA "
                    f"(DeviceClass {device_class.name}, {count} devices): the scheduler serves "
                    "it from the device plugin alone there; give each name one source: stop "
                    "the device plugin on the node, or drop extendedResourceName from the class",
                )
            )
        total = sum(counts.values()) + everywhere
        if not total:
            continue
        served.update(counts)
        offers.append(
            Offer(
                form=form,
                profile=profile,
                product=product,
                replicas=1,
                strategy="none",
                fail_requests_greater_than_one=False,
                devices=total,
                slots=total,
                memory_mib=memory_mib,
                selector=None,
                most_on_a_node=max(counts.values(), default=0) + everywhere,
            )
        )
    if not offers:
        return None, problems
    node_names = tuple(sorted(served)) + ((ALL_NODES,) if everywhere else ())
    slice_pools = sorted({d.pool for d in devices})
    origin = slice_pools[0]
    if len(slice_pools) > 1:
        origin += f" and {len(slice_pools) - 1} more"
    parts = [device_class.name, model or "unknown product"]
    if profile:
        parts.append(profile)
    pool = Pool(
        name="/".join(parts),
        config_key=None,
        mig_strategy="none",
        nodes=node_names,
        offers=tuple(offers),
        node_count=len(served) or (1 if everywhere else 0),
        origin=PoolOrigin("resourceslice", origin),
        device_class=device_class.name,
    )
    return pool, problems
