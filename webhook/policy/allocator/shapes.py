"""What of a node group one demand can tell apart: groups that look alike to it are judged once.

The scheduler judges every node; a cluster has few kinds of nodes, and nodes of one kind differ
in what no filter reads for a given pod: their names and hostname labels, their devices' UUIDs.
:func:`projection` keeps of a group only what the demand's filters read: the node labels its
nodeSelector and affinity name (the names too, when it names nodes), the taints, the
allocatable of the resources it asks for, and, when it has claims, the devices with the
attributes its selectors and constraints can name. Two groups with one projection get one
answer. Where a selector could read attributes it does not name (a macro over a map), every
attribute counts. docs/allocator.md, "Node groups".
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
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
    extended = [supply.class_for_resource(r) for r in resources]
    claims = bool(demand.claims) or any(c is not None for c in extended)
    expressions, constrained = _claim_reads(demand, supply)
    for found in extended:
        if found is not None:
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


def _device(device: Device, node: str, attributes: frozenset[str] | None) -> tuple[Any, ...]:
    if attributes is None:
        shown = tuple(sorted((k, str(v), type(v).__name__) for k, v in device.attributes.items()))
    else:
        shown = tuple(
            sorted(
                (k, str(v), type(v).__name__)
                for k, v in device.attributes.items()
                if k in attributes or k.rpartition("/")[2] in attributes
            )
        )
    return (
        shown,
        tuple(sorted((k, repr(v)) for k, v in device.capacity.items())),
        device.allow_multiple_allocations,
        device.taints,
        repr(device.consumes_counters),
        device.binding_conditions,
        device.binds_to_node,
        "self" if device.node == node else device.node,
        device.all_nodes,
        repr(device.node_selector),
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
        repr(found.node_selector),
        found.per_device_node_selection,
        repr(found.shared_counters),
        tuple(_device(d, node, attributes) for d in found.devices),
    )


def projection(reads: Reads, group: NodeGroup, supply: Supply) -> int:
    """What of ``group`` the demand behind ``reads`` can tell apart, as a number: equal for
    groups it cannot tell apart. Numbered in ``supply`` and remembered on the group."""
    kinds: dict[Any, int] = supply.__dict__.setdefault("_reads", {})
    kind = kinds.setdefault(reads.key, len(kinds))
    cache: dict[int, int] = group.__dict__.setdefault("_projections", {})
    known = cache.get(kind)
    if known is not None:
        return known
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
    found = (
        group.node_names if reads.names else None,
        labels,
        group.taints,
        tuple(group.allocatable.get(r) for r in reads.resources),
        slices,
    )
    # A tuple's hash is not kept: the projection is numbered once, and the number compared.
    numbers: dict[tuple[Any, ...], int] = supply.__dict__.setdefault("_projections", {})
    number = numbers.setdefault(found, len(numbers))
    cache[kind] = number
    return number


def projections(reads: Reads, supply: Supply) -> list[int]:
    """:func:`projection` of every group of ``supply``, in order."""
    kinds: dict[Any, int] = supply.__dict__.setdefault("_reads", {})
    kind = kinds.setdefault(reads.key, len(kinds))
    out = []
    for group in supply.groups:
        cache = group.__dict__.get("_projections")
        known = cache.get(kind) if cache else None
        out.append(known if known is not None else projection(reads, group, supply))
    return out
