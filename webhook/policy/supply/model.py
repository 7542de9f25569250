"""The supply model: node groups of one shape, and the DeviceClasses that select their devices.

One group stands for every node of one shape: the nodes that exist (``node_names``) or the
nodes a pool or autoscaler can create (``bounds``). Each has what the scheduler's filters read
of a node: labels, taints, allocatable extended resources (device plugins), and the
ResourceSlices a node of the group reaches: its own node-local slices (``nodeName`` = the
group's representative node, :attr:`NodeGroup.node`) and the slices shared between nodes
(``nodeSelector``, ``allNodes``, per-device node selection). Which of the shared ones really
reach the node is the allocator's to decide (upstream ``GatherPools``), as in the scheduler.
The scheduler also hands every node the slices with ``sharedCounters`` of other nodes; they
hold no device for this node and change no answer, so a group leaves them out
(docs/allocator.md, "The supply").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from webhook.policy.dra import IMPLICIT_PREFIX, DeviceClass, ResourceSlice
from webhook.policy.nodes import Taint


@dataclass(frozen=True)
class NodeGroup:
    """Nodes of identical shape, existing or able to appear.

    ``key`` names the group in messages (``node-pool a100``, ``node gpu-1``). ``node_names``
    are its existing nodes (empty for nodes that can only appear). ``bounds`` are its scaling
    bounds ``(min, max)`` (``max`` None when unbounded), None for a fixed set of nodes.
    ``labels`` and ``taints`` are those every node of the group has (taints: NoSchedule and
    NoExecute, a cordon as ``node.kubernetes.io/unschedulable:NoSchedule``). ``allocatable`` is
    the extended resources a node advertises (``nvidia.com/gpu`` -> 8). ``slices`` are the
    ResourceSlices a node of the group may reach (see the module docstring).
    """

    key: str
    node_names: tuple[str, ...] = ()
    bounds: tuple[int, int | None] | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    allocatable: Mapping[str, int] = field(default_factory=dict)
    slices: tuple[ResourceSlice, ...] = ()

    @property
    def node(self) -> str:
        """The name of the node the group's node-local slices name: its first node, or the
        group's key for nodes that do not exist yet."""
        return self.node_names[0] if self.node_names else self.key

    @property
    def can_appear(self) -> bool:
        """True when nodes of this group can be created (a pool or autoscaler bound allows
        more than the nodes that exist)."""
        if self.bounds is None:
            return False
        high = self.bounds[1]
        return high is None or high > len(self.node_names)

    @cached_property
    def shape(self) -> tuple[Any, ...]:
        """What a demand's fit on this group depends on besides node names: two groups of one
        shape are judged once (docs/allocator.md, "Node groups"). A node-local slice counts by
        its content (the same devices on another node), a shared slice by its identity."""
        return (
            tuple(sorted(self.labels.items())),
            self.taints,
            tuple(sorted(self.allocatable.items())),
            tuple(_slice_shape(s, self.node) for s in self.slices),
        )


def group_name(key: str) -> str:
    """A group's key as messages say it: ``node gpu-1`` and ``a node of pool a100`` (the keys
    assemble() gives), ``node group <key>`` for any other key."""
    if key.startswith("node "):
        return key
    if key.startswith("pool "):
        return f"a node of {key}"
    return f"node group {key}"


def _slice_shape(found: ResourceSlice, node: str) -> tuple[Any, ...]:
    if found.node_name != node:
        return ("shared", found.driver, found.pool, found.name, found.generation)
    devices = tuple(
        repr(
            (
                d.name,
                d.attributes,
                d.capacity,
                d.taints,
                d.consumes_counters,
                d.allow_multiple_allocations,
                d.binding_conditions,
                d.binds_to_node,
            )
        )
        for d in found.devices
    )
    counters = repr(found.shared_counters)
    return ("local", found.driver, found.resource_slice_count, counters, devices)


@dataclass(frozen=True)
class Supply:
    """Every node group, the DeviceClasses by name, and the extended resources they serve.

    ``extended`` maps each ``spec.extendedResourceName`` to the class that serves it (of
    several, the one the scheduler uses: docs/dra.md, "Extended resources"); every class also
    serves ``deviceclass.resource.kubernetes.io/<class>`` (KEP-5004), resolved by
    :meth:`class_for_resource`. ``slices`` are all ResourceSlices of the cluster, which the
    allocator reads to tell an incomplete pool from one published in part to other nodes.
    """

    groups: tuple[NodeGroup, ...]
    classes: Mapping[str, DeviceClass] = field(default_factory=dict)
    extended: Mapping[str, str] = field(default_factory=dict)
    slices: tuple[ResourceSlice, ...] = ()

    def attribute_values(self, name: str) -> tuple[tuple[str, int], ...]:
        """How many devices of the supply's slices carry each value of the attribute ``name``
        (``profile``: the MIG profiles offered), sorted by value; worked out once per name."""
        known: dict[str, tuple[tuple[str, int], ...]] = self.__dict__.setdefault(
            "_attribute_values", {}
        )
        found = known.get(name)
        if found is None:
            counted = Counter(
                str(value)
                for s in self.slices
                for d in s.devices
                if (value := d.attribute(name)) is not None
            )
            found = known[name] = tuple(sorted(counted.items()))
        return found

    def class_for_resource(self, resource: str) -> DeviceClass | None:
        """The DeviceClass that serves the extended resource ``resource``, None when none does."""
        if resource.startswith(IMPLICIT_PREFIX):
            return self.classes.get(resource.removeprefix(IMPLICIT_PREFIX))
        name = self.extended.get(resource)
        return None if name is None else self.classes.get(name)
