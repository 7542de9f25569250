"""The ``resource.k8s.io/v1`` objects as immutable values (docs/dra.md).

A ``DeviceClass`` (its CEL selectors, the extended resource it serves, its opaque config), a
``ResourceSlice`` with its pool and shared counter sets, each ``Device`` of it (driver, pool,
where it can be used, its attributes, capacities, taints and counter consumption), and the
``Allocation`` the scheduler recorded on a ResourceClaim. Reading them from the API's mappings
is ``webhook.policy.dra.parse``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from typing import Any, TypeVar

import semver

from webhook.policy.products import sanitise_model

API_GROUP = "resource.k8s.io"
API_VERSION = "resource.k8s.io/v1"
# KEP-5004: every DeviceClass serves this extended resource name, besides its own
# spec.extendedResourceName (docs/dra.md, "Extended resources").
IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"

Attribute = int | bool | str | semver.Version
_V = TypeVar("_V")


@dataclass(frozen=True, slots=True)
class Capacity:
    """One capacity of a device: its value, and how much a request may consume of it.

    ``default`` and ``valid_range``/``valid_values`` come from ``requestPolicy`` (consumable
    capacity, for devices with ``allowMultipleAllocations``); None where the driver set none.
    """

    value: Fraction
    default: Fraction | None = None
    valid_values: tuple[Fraction, ...] = ()
    valid_range: tuple[Fraction | None, Fraction | None, Fraction | None] | None = None


@dataclass(frozen=True, slots=True)
class DeviceTaint:
    """A taint of one device (``spec.devices[].taints``): ``NoSchedule`` and ``NoExecute``
    keep it from being allocated to a request that does not tolerate it."""

    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class CounterConsumption:
    """How much a device consumes of one of its pool's shared counter sets
    (``consumesCounters``: partitionable devices, e.g. a MIG slice of a GPU's memory)."""

    counter_set: str
    counters: Mapping[str, Fraction]


@dataclass(frozen=True, slots=True)
class CounterSet:
    """One shared counter set of a ResourceSlice (``sharedCounters``): what the devices of
    the pool that consume it may use up together."""

    name: str
    counters: Mapping[str, Fraction]


@dataclass(frozen=True)
class Device:
    """One device of one ResourceSlice, where it may be used and what it is.

    ``node`` is its node, when it has one; ``all_nodes`` means every node reaches it (network
    devices); ``node_selector`` is the NodeSelector of the nodes that reach it otherwise.
    ``attributes`` and ``capacity`` keep the names as published (``productName`` or
    ``gpu.nvidia.com/productName``); ``qualified()`` resolves the implicit domain.
    """

    driver: str
    pool: str
    name: str
    slice: str
    node: str | None
    all_nodes: bool
    node_selector: Mapping[str, Any] | None
    attributes: Mapping[str, Attribute]
    capacity: Mapping[str, Capacity]
    allow_multiple_allocations: bool = False
    # What the structured allocator reads besides (docs/allocator.md): the device's taints,
    # the shared counters it consumes (partitionable devices), its binding conditions.
    taints: tuple[DeviceTaint, ...] = ()
    consumes_counters: tuple[CounterConsumption, ...] = ()
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()
    binds_to_node: bool = False

    @cached_property
    def has_capacity_policy(self) -> bool:
        """True when some capacity has a ``requestPolicy`` (consumable capacity)."""
        return any(
            c.default is not None or c.valid_values or c.valid_range is not None
            for c in self.capacity.values()
        )

    @property
    def key(self) -> tuple[str, str, str]:
        """(driver, pool, device): how allocations name a device."""
        return (self.driver, self.pool, self.name)

    def attribute(self, name: str) -> Attribute | None:
        """The attribute ``name`` (``productName``, or ``domain/productName``), None if absent."""
        return _qualified(self.attributes, name, self.driver)

    def capacity_of(self, name: str) -> Capacity | None:
        """The capacity ``name`` (``memory``, or ``domain/memory``), None if absent."""
        return _qualified(self.capacity, name, self.driver)


@dataclass(frozen=True, slots=True)
class DeviceClass:
    """A DeviceClass: the CEL selectors its devices pass, and the extended resource it serves."""

    name: str
    selectors: tuple[str, ...]
    extended_resource_name: str | None
    config: tuple[Mapping[str, Any], ...] = ()

    @property
    def implicit_resource_name(self) -> str:
        """``deviceclass.resource.kubernetes.io/<class>``, which every class serves."""
        return IMPLICIT_PREFIX + self.name

    @property
    def resource_names(self) -> tuple[str, ...]:
        """Every extended resource name a pod may ask for to get this class's devices."""
        explicit = (self.extended_resource_name,) if self.extended_resource_name else ()
        return (*explicit, self.implicit_resource_name)


@dataclass(frozen=True, slots=True)
class Allocation:
    """What the scheduler gave a ResourceClaim, and who holds it (``status``)."""

    namespace: str
    name: str
    devices: tuple[tuple[str, str, str, str], ...]  # (request, driver, pool, device)
    reserved_for: tuple[str, ...]  # "<resource>/<name>" of each consumer, e.g. "pods/train-0"


def split_qualified(name: str, driver: str) -> tuple[str, str]:
    """``gpu.nvidia.com/uuid`` -> (domain, id); a name without a domain is in the driver's."""
    domain, sep, ident = name.partition("/")
    return (domain, ident) if sep else (driver, name)


def _qualified(values: Mapping[str, _V], name: str, driver: str) -> _V | None:
    """The value of ``name`` among keys with or without a domain (the driver's when absent)."""
    wanted = split_qualified(name, driver)
    for key, value in values.items():
        if split_qualified(key, driver) == wanted:
            return value
    return None


def node_slice(
    name: str, driver: str, node: str, devices: list[dict[str, Any]], *, generation: int
) -> dict[str, Any]:
    """The document of a ResourceSlice named ``name`` that holds the whole pool of ``node``
    (the pool named after the node, one slice): what a driver publishes for a node's devices."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


@dataclass(frozen=True)
class ResourceSlice:
    """One ResourceSlice: its pool (name, generation, number of slices), where its devices
    may be used (``node_name``, ``all_nodes``, ``node_selector``, or per device), its shared
    counter sets, and its devices. The structured allocator reads pools of these
    (docs/allocator.md, "Pools")."""

    name: str
    driver: str
    pool: str
    generation: int
    resource_slice_count: int
    node_name: str | None
    all_nodes: bool
    node_selector: Mapping[str, Any] | None
    per_device_node_selection: bool
    shared_counters: tuple[CounterSet, ...]
    devices: tuple[Device, ...]


def dra_product(device: Device) -> tuple[str | None, str | None]:
    """(GPU model as GFD spells it, MIG profile) of a device the NVIDIA DRA driver publishes
    (docs/dra.md, "Device attributes"): ``productName``, and ``profile`` for ``type: mig``."""
    name = device.attribute("productName")
    model = sanitise_model(name) if isinstance(name, str) and name else None
    profile = device.attribute("profile") if device.attribute("type") == "mig" else None
    return model, profile if isinstance(profile, str) else None
