"""Extended resources that DRA DeviceClasses serve, read from the devices the classes select.

Since KEP-5004 a pod's ``nvidia.com/gpu: 1`` may be served by a DeviceClass whose
``extendedResourceName`` names it: on a node whose ``status.allocatable`` lacks the name, the
scheduler allocates the class's devices instead (docs/dra.md, "Extended resources"). Whether a
pod fits is the allocator's answer (engine/fit.py); what this module gives the naming view is
what the devices are (their product and MIG profile, how many), so that the engine can tell a
product annotation the devices cannot meet, and its messages can say what the cluster offers
through DRA. Nothing here pretends that devices are nodes: a name served by DRA is never
rewritten, and no node label is written for it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from webhook.policy.dra import Device, DraSnapshot, dra_product
from webhook.policy.errors import Diagnostic, warning
from webhook.policy.inventory import Inventory, describe_pair
from webhook.policy.nodes import node_selector_matches
from webhook.policy.products import model_key, product_value
from webhook.policy.resources import ResourceForm, parse_resource
from webhook.policy.supply.model import NodeGroup

# The DraSnapshot.memo entry of a served name.
_MEMO = "served"


@dataclass(frozen=True)
class Served:
    """The extended resource ``resource`` as DeviceClass ``device_class`` serves it.

    ``kinds`` counts the devices the class selects by (GPU model, MIG profile), in the order
    of their names; ``products`` gives the product each kind is named by in messages.
    """

    resource: str
    device_class: str
    kinds: tuple[tuple[tuple[str | None, str | None], int], ...]

    def model_keys(self, profile: str | None) -> frozenset[str]:
        """The models (as product annotations are compared: ``products.model_key``) of the
        devices of MIG ``profile`` (None: whole GPUs)."""
        return frozenset(
            model_key(model) for (model, kind), _ in self.kinds if model and kind == profile
        )

    def has_profile(self, profile: str | None) -> bool:
        """True when some device the class selects is of MIG ``profile`` (None: a whole GPU)."""
        return any(kind == profile for (_, kind), _ in self.kinds)

    def describe(self) -> str:
        """``NVIDIA-A100-SXM4-40GB (8 devices) through DRA DeviceClass gpu.nvidia.com``."""
        parts = []
        for (model, profile), count in self.kinds:
            what = "unknown product"
            if model is not None:
                what = product_value(model, ResourceForm(profile, False), replicas=1, renamed=False)
            parts.append(f"{what} ({count} device{'' if count == 1 else 's'})")
        listed = ", ".join(parts) if parts else "no device yet"
        return f"{listed} through DRA DeviceClass {self.device_class}"


def served(inventory: Inventory, resource: str) -> Served | None:
    """How DRA serves the GPU resource name ``resource`` (``nvidia.com/gpu``), None where no
    DeviceClass serves it or it is no NVIDIA GPU name."""
    dra = inventory.dra
    if dra is None or parse_resource(resource) is None:
        return None
    key = (_MEMO, resource)
    if key in dra.memo:
        found: Served | None = dra.memo[key]
        return found
    found = _served(dra, resource)
    dra.memo[key] = found
    return found


def _served(dra: DraSnapshot, resource: str) -> Served | None:
    device_class = dra.class_for_resource(resource)
    if device_class is None:
        return None
    devices, _ = dra.class_devices(device_class.name)
    kinds = Counter(dra_product(d) for d in devices)
    ordered = tuple(sorted(kinds.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))))
    return Served(resource, device_class.name, ordered)


def served_names(inventory: Inventory) -> tuple[str, ...]:
    """The GPU resource names DeviceClasses serve (``extendedResourceName``), sorted."""
    dra = inventory.dra
    if dra is None:
        return ()
    return tuple(sorted(n for n in dra.extended if served(inventory, n) is not None))


def offered(inventory: Inventory, names: Iterable[str] | None = None) -> str:
    """``nvidia.com/gpu: Tesla-T4 (2 slots), NVIDIA-H100-80GB-HBM3 (6 devices) through DRA
    DeviceClass gpu.nvidia.com``: what the cluster offers under each GPU name, from the device
    plugin's pools and from DRA."""
    every = set(inventory.names) | set(served_names(inventory))
    parts = []
    for name in sorted(every if names is None else names):
        offers = [describe_pair(p, o) for p, o in inventory.advertising(name)]
        through = served(inventory, name)
        if through is not None:
            offers.append(through.describe())
        parts.append(f"{name}: {', '.join(offers)}" if offers else name)
    return "; ".join(parts) if parts else "no GPU resources"


def _reaches(device: Device, group: NodeGroup) -> bool:
    """Whether a node of ``group`` can use ``device``: its node, every node, or a node its
    selector picks."""
    if device.node is not None:
        return device.node in group.node_names
    if device.all_nodes:
        return True
    return any(
        node_selector_matches(device.node_selector, n, group.labels) for n in group.node_names
    )


def two_sources(groups: Sequence[NodeGroup], dra: DraSnapshot) -> list[Diagnostic]:
    """The nodes whose ``status.allocatable`` has a name a DeviceClass also serves with devices
    the node reaches: there the scheduler serves the name from the device plugin alone
    (docs/dra.md, "KEP-5004"), and the class's devices wait for claims."""
    problems: list[Diagnostic] = []
    for resource in sorted(dra.extended):
        device_class = dra.class_for_resource(resource)
        if device_class is None or parse_resource(resource) is None:
            continue
        devices, _ = dra.class_devices(device_class.name)
        for group in groups:
            raw = group.allocatable.get(resource)
            # Groups of Node objects only (no bounds): a pool's nodes are not known one by one.
            if raw is None or group.bounds is not None:
                continue
            count = sum(1 for d in devices if _reaches(d, group))
            if not count:
                continue
            problems.append(
                warning(
                    f"node {group.node}",
                    f"{resource} comes from its device plugin (allocatable {raw}) and from DRA "
                    f"(DeviceClass {device_class.name}, {count} devices): the scheduler serves "
                    "it from the device plugin alone there; give each name one source: stop "
                    "the device plugin on the node, or drop extendedResourceName from the class",
                )
            )
    return problems
