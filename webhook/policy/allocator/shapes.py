"""What of a node group one demand can tell apart: groups that look alike to it are judged once.

The scheduler judges every node; a cluster has few kinds of nodes, and nodes of one kind differ
in what no filter reads for a given pod: their names and hostname labels, their devices' UUIDs.
:func:`projection` keeps of a group only what the demand's filters read: the node labels its
nodeSelector and affinity name (the names too, when it names nodes), the taints, the
allocatable of the resources it asks for, and, when it has claims, the devices with the
attributes its selectors and constraints can name. Two groups with one projection get one
answer (:func:`judged_once`). Where a selector could read attributes it does not name (a
macro over a map), every attribute counts. docs/allocator.md, "Node groups".
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from webhook.policy.demand import Demand, is_dra_extended_resource_name
from webhook.policy.dra import Device, ResourceSlice
from webhook.policy.supply import NodeGroup, Supply

# Macros and functions that can visit keys an expression does not spell out.
_OPAQUE = re.compile(r"\b(exists|exists_one|all|map|filter|keys|size)\s*\(")
_TOKEN = re.compile(r"[A-Za-z_][\w.\-]*")


@dataclass(frozen=True, slots=True)
class Reads:
    """What one demand's filters read of a node group (computed once per demand)."""

    key: tuple[Any, ...]
    label_keys: tuple[str, ...]
    names: bool
    resources: tuple[str, ...]
    claims: bool
    attributes: frozenset[str] | None  # None: every attribute


def _term_keys(terms: Iterable[Any]) -> tuple[set[str], bool]:
    keys: set[str] = set()
    names = False
    for term in terms:
        if not isinstance(term, dict):
            continue
        for expr in term.get("matchExpressions") or ():
            if isinstance(expr, dict):
                keys.add(str(expr.get("key")))
        if term.get("matchFields"):
            names = True
    return keys, names


def _claim_reads(demand: Demand, supply: Supply) -> tuple[list[str], set[str]]:
    """The selector expressions of the demand's claims and their classes, and the attributes
    its constraints name."""
    expressions: list[str] = []
    names: set[str] = set()
    for claim in demand.claims:
        for constraint in claim.constraints:
            names |= {n for n in (constraint.match_attribute, constraint.distinct_attribute) if n}
        for request in claim.requests:
            alternatives = (request.exactly,) if request.exactly else request.first_available
            for alternative in alternatives:
                if alternative is None:
                    continue
                expressions += alternative.selectors
                device_class = supply.classes.get(alternative.device_class)
                if device_class is not None:
                    expressions += device_class.selectors
    return expressions, names


def reads_of(demand: Demand, supply: Supply) -> Reads:
    """What ``demand`` reads of a node group."""
    keys, names = _term_keys(demand.required_terms or ())
    keys |= set(demand.node_selector)
    names = names or demand.node_name is not None
    resources = tuple(sorted(r for r in demand.resources if is_dra_extended_resource_name(r)))
    # Most demands have no claim and no resource a DeviceClass serves: one loop finds that.
    expressions, constrained = _claim_reads(demand, supply) if demand.claims else ([], set())
    claims = bool(demand.claims)
    for resource in resources:
        found = supply.class_for_resource(resource)
        if found is not None:  # the claim made for it reads the class's selectors
            claims = True
            expressions += found.selectors
    attributes: set[str] | None = constrained
    for expression in expressions:
        if attributes is None or _OPAQUE.search(expression):
            attributes = None
            continue
        attributes |= set(_TOKEN.findall(expression))
        attributes |= set(re.findall(r"""["']([^"']+)["']""", expression))
    frozen = None if attributes is None else frozenset(attributes)
    key = (tuple(sorted(keys)), names, resources, claims, frozen)
    return Reads(key, tuple(sorted(keys)), names, resources, claims, frozen)


@lru_cache(maxsize=1024)
def _kept(names: tuple[str, ...], attributes: frozenset[str] | None) -> tuple[str, ...]:
    """Which of a device's attribute names a demand can read, sorted. Devices of one driver
    publish the same names: this is worked out once for them, not once per device."""
    if attributes is None:
        return tuple(sorted(names))
    return tuple(sorted(k for k in names if k in attributes or k.rpartition("/")[2] in attributes))


def _device(device: Device, node: str, attributes: frozenset[str] | None) -> tuple[Any, ...]:
    values = device.attributes
    # The type too: True == 1 in Python, not in CEL.
    shown = tuple(
        (k, str(v), type(v).__name__)
        for k in _kept(tuple(values), attributes)
        for v in (values[k],)
    )
    return (
        shown,
        # Capacity and taints are frozen values: compared as they are.
        tuple(sorted(device.capacity.items())),
        device.allow_multiple_allocations,
        device.taints,
        repr(device.consumes_counters) if device.consumes_counters else (),
        device.binding_conditions,
        device.binds_to_node,
        "self" if device.node == node else device.node,
        device.all_nodes,
        None if device.node_selector is None else repr(device.node_selector),
    )


def _slice(found: ResourceSlice, node: str, attributes: frozenset[str] | None) -> tuple[Any, ...]:
    local = found.node_name == node
    return (
        found.driver,
        # A node-local slice counts by its content, a shared one by its identity too.
        None if local else (found.name, found.pool, found.generation),
        found.resource_slice_count,
        "self" if local else found.node_name,
        found.all_nodes,
        None if found.node_selector is None else repr(found.node_selector),
        found.per_device_node_selection,
        repr(found.shared_counters) if found.shared_counters else (),
        tuple(_device(d, node, attributes) for d in found.devices),
    )


def projection(reads: Reads, group: NodeGroup) -> tuple[Any, ...]:
    """What of ``group`` the demand behind ``reads`` can tell apart: equal for groups it
    cannot tell apart."""
    labels: tuple[Any, ...] = tuple(group.labels.get(k) for k in reads.label_keys)
    slices: tuple[Any, ...] = ()
    if reads.claims:
        # Slices shared through a node selector reach nodes by their labels: all of them count.
        if any(
            s.node_selector is not None
            or (s.per_device_node_selection and any(d.node_selector for d in s.devices))
            for s in group.slices
        ):
            labels = tuple(sorted(group.labels.items()))
        slices = tuple(_slice(s, group.node, reads.attributes) for s in group.slices)
    return (
        group.node_names if reads.names else None,
        labels,
        group.taints,
        tuple(group.allocatable.get(r) for r in reads.resources),
        slices,
    )


Partition = tuple[tuple[int, ...], tuple[tuple[int, int], ...]]

# Partitions kept per supply, one per kind of demand; past this many, they are forgotten and
# made again (a supply lives until the cluster changes; a server meets few kinds of demand).
_KINDS_MAX = 256


def judged_once(reads: Reads, supply: Supply) -> Partition:
    """The groups of ``supply`` as the demand behind ``reads`` tells them apart: each group's
    projection as a number, in order, and each number once with the index of the first group
    that has it, in order. Remembered in ``supply`` for each kind of demand, so that the next
    review of that kind does not look at the groups again; only these numbers are kept, not
    the projections (the supply's groups are the supply's own: nothing is remembered on a
    group that another supply may share)."""
    known: dict[tuple[Any, ...], Partition] = supply.__dict__.setdefault("_judged_once", {})
    found = known.get(reads.key)
    if found is not None:
        return found
    # A tuple's hash is not kept: each projection is numbered once, and the numbers compared.
    numbers: dict[tuple[Any, ...], int] = {}
    keys = tuple(numbers.setdefault(projection(reads, g), len(numbers)) for g in supply.groups)
    firsts: dict[int, int] = {}
    for index, number in enumerate(keys):
        firsts.setdefault(number, index)
    if len(known) >= _KINDS_MAX:
        known.clear()
    found = known[reads.key] = (keys, tuple(firsts.items()))
    return found
