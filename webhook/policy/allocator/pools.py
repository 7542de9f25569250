"""Which devices a node reaches, gathered into pools: a port of ``pools_incubating.go``.

Ported from k8s.io/dynamic-resource-allocation v0.36.2,
``structured/internal/incubating/pools_incubating.go``: ``NodeMatches``, ``GatherPools``,
``addSlice``, ``buildPool``, ``getAndValidateCounterSets``, ``validateDeviceNames``,
``validateDeviceCounterConsumption``, ``poolHasBindingConditions``, ``checkSlicesInPool``.
Slices are ``webhook.policy.dra.ResourceSlice`` values; the feature gates are those v1.36.2
turns on by default (DRAPartitionableDevices on), so the feature-off branches are left out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.policy.dra import CounterSet, ResourceSlice
from webhook.policy.nodes import node_selector_matches


@dataclass(frozen=True, slots=True)
class Node:
    """The node allocation is for: its name and labels (what ``NodeMatches`` reads)."""

    name: str
    labels: Mapping[str, str]


@dataclass
class Pool:
    """``Pool`` (pools_incubating.go): one (driver, pool) with the slices reaching the node."""

    driver: str
    pool: str
    is_incomplete: bool = False
    is_invalid: bool = False
    invalid_reason: str = ""
    device_slices_targeting_node: list[ResourceSlice] = field(default_factory=list)
    device_slices_not_targeting_node: list[ResourceSlice] = field(default_factory=list)
    counter_sets: dict[str, CounterSet] = field(default_factory=dict)

    @property
    def pool_id(self) -> str:
        """``PoolID.String()``: driver/pool."""
        return f"{self.driver}/{self.pool}"


class NodeSelectionError(ValueError):
    """A node selector that cannot be parsed (``nodeaffinity.NewNodeSelector`` fails)."""


def node_matches(
    node: Node,
    node_name_to_match: str | None,
    all_nodes_match: bool,
    node_selector: Mapping[str, Any] | None,
) -> bool:
    """``NodeMatches``: does a slice's (or device's) node selection admit the node?"""
    if node_name_to_match:
        return node.name == node_name_to_match
    if all_nodes_match:
        return True
    if node_selector is not None:
        return node_selector_matches(node_selector, node.name, node.labels)
    return False


def gather_pools(
    slices_for_node: Iterable[ResourceSlice], node: Node, all_slices: Iterable[ResourceSlice]
) -> list[Pool]:
    """``GatherPools``: the pools whose slices reach ``node``, sorted by ID, those with
    binding conditions last."""
    pools: dict[tuple[str, str], list[ResourceSlice]] = {}
    for found in slices_for_node:
        relevant = False
        if found.shared_counters:
            relevant = True
        elif found.node_name or found.all_nodes or found.node_selector is not None:
            relevant = node_matches(node, found.node_name, found.all_nodes, found.node_selector)
        elif found.per_device_node_selection:
            relevant = any(
                node_matches(node, d.node, d.all_nodes, d.node_selector) for d in found.devices
            )
        else:
            continue
        if relevant:
            add_slice(pools, found)

    all_slices = tuple(all_slices)
    result: list[Pool] = []
    with_binding_conditions: list[Pool] = []
    for (driver, pool_name), slices_for_pool in pools.items():
        first = slices_for_pool[0]
        if len(slices_for_pool) == first.resource_slice_count:
            pool = build_pool(driver, pool_name, slices_for_pool, None)
        else:
            # Some slices of the pool do not target this node: the pool is complete when
            # every slice of its generation exists somewhere.
            obsolete, all_for_pool = check_slices_in_pool(
                all_slices, driver, pool_name, first.generation
            )
            if obsolete:
                continue
            if len(all_for_pool) != first.resource_slice_count:
                result.append(Pool(driver, pool_name, is_incomplete=True))
                continue
            pool = build_pool(driver, pool_name, slices_for_pool, all_for_pool)
        if pool_has_binding_conditions(pool):
            with_binding_conditions.append(pool)
        else:
            result.append(pool)
    result.sort(key=lambda p: (p.driver, p.pool))
    with_binding_conditions.sort(key=lambda p: (p.driver, p.pool))
    return result + with_binding_conditions


def add_slice(pools: dict[tuple[str, str], list[ResourceSlice]], found: ResourceSlice) -> None:
    """``addSlice``: keep the slices of each pool's newest generation."""
    key = (found.driver, found.pool)
    current = pools.get(key)
    if current is None:
        pools[key] = [found]
        return
    if found.generation < current[0].generation:
        return
    if found.generation > current[0].generation:
        pools[key] = [found]
        return
    current.append(found)


def build_pool(
    driver: str,
    pool_name: str,
    slices: list[ResourceSlice],
    all_slices_for_pool: list[ResourceSlice] | None,
) -> Pool:
    """``buildPool``: the pool's device slices and counter sets, or an invalid pool."""
    slices = sorted(slices, key=lambda s: s.name)
    counter_set_slices = [s for s in slices if s.shared_counters]
    device_slices = [s for s in slices if not s.shared_counters]
    problem = validate_device_names(device_slices)
    counter_sets: dict[str, CounterSet] = {}
    if problem is None:
        counter_sets, problem = get_and_validate_counter_sets(counter_set_slices)
    if problem is None:
        problem = validate_device_counter_consumption(counter_sets, slices)
    if problem is not None:
        return Pool(driver, pool_name, is_invalid=True, invalid_reason=problem)
    if all_slices_for_pool is None or len(slices) == len(all_slices_for_pool):
        return Pool(
            driver, pool_name, device_slices_targeting_node=device_slices, counter_sets=counter_sets
        )
    targeting = {s.name for s in slices}
    not_targeting = [s for s in all_slices_for_pool if s.name not in targeting]
    problem = validate_device_counter_consumption(counter_sets, not_targeting)
    if problem is not None:
        return Pool(driver, pool_name, is_invalid=True, invalid_reason=problem)
    return Pool(
        driver,
        pool_name,
        device_slices_targeting_node=device_slices,
        device_slices_not_targeting_node=not_targeting,
        counter_sets=counter_sets,
    )


def get_and_validate_counter_sets(
    slices: list[ResourceSlice],
) -> tuple[dict[str, CounterSet], str | None]:
    """``getAndValidateCounterSets``: the pool's counter sets by name, each once."""
    counter_sets: dict[str, CounterSet] = {}
    for found in slices:
        for counter_set in found.shared_counters:
            if counter_set.name in counter_sets:
                return {}, f"duplicate counter set name {counter_set.name}"
            counter_sets[counter_set.name] = counter_set
    return counter_sets, None


def validate_device_names(slices: list[ResourceSlice]) -> str | None:
    """``validateDeviceNames``: no device name twice in a pool."""
    names: set[str] = set()
    for found in slices:
        for device in found.devices:
            if device.name in names:
                return f"duplicate device name {device.name}"
            names.add(device.name)
    return None


def validate_device_counter_consumption(
    counter_sets: Mapping[str, CounterSet], slices: list[ResourceSlice]
) -> str | None:
    """``validateDeviceCounterConsumption``: every counter a device consumes exists."""
    for found in slices:
        for device in found.devices:
            for consumption in device.consumes_counters:
                counter_set = counter_sets.get(consumption.counter_set)
                if counter_set is None:
                    return f"counter set {consumption.counter_set} not found"
                for name in consumption.counters:
                    if name not in counter_set.counters:
                        return f"counter {name} not found in counter set {counter_set.name}"
    return None


def pool_has_binding_conditions(pool: Pool) -> bool:
    """``poolHasBindingConditions``: such pools are tried last."""
    return any(d.binding_conditions for s in pool.device_slices_targeting_node for d in s.devices)


def check_slices_in_pool(
    slices: Iterable[ResourceSlice], driver: str, pool_name: str, generation: int
) -> tuple[bool, list[ResourceSlice]]:
    """``checkSlicesInPool``: whether a newer generation exists (the pool is obsolete), and
    all slices of the pool of ``generation``."""
    found_slices: list[ResourceSlice] = []
    for found in slices:
        if found.driver != driver or found.pool != pool_name:
            continue
        if found.generation == generation:
            found_slices.append(found)
        elif found.generation > generation:
            return True, []
    return False, found_slices
