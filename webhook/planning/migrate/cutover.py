"""The cluster after each cutover step, and where every GPU pod runs then.

A step cuts one node over: its device plugin stops (no ``nvidia.com/*`` left in its
allocatable) and NVIDIA's DRA driver publishes its GPUs (:func:`driver_slice`): never both.
The pods that held its GPUs are resubmitted (rewritten to claims where the plan rewrites
them) and placed by the one allocator (``webhook.policy.allocator.fit``) on the cluster as it
is then, the pods already placed on a node holding what they hold (their demands are added
up and allocated together, as the scheduler adds a node's pods). A pod that fits no node is
reported: it no longer fits. Nodes are cut over greedily: next, the node whose cutover leaves
the fewest pods without a node, then the fewest pods to move (docs/migrate.md, "Order").
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from webhook.planning.migrate.classes import DRIVER, ClassPlan
from webhook.planning.migrate.rewrite import rewrite_spec
from webhook.policy.allocator import fit
from webhook.policy.demand import Demand, pod_demand
from webhook.policy.dra import node_slice
from webhook.policy.inventory import Inventory
from webhook.policy.supply import Supply

#: Builds the supply of a cluster state: (nodes, extra DRA objects) -> Supply.
SupplyOf = Callable[[Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]]], Supply]


def _nvml_name(product: str) -> str:
    # GFD's label is NVML's name with dashes for spaces (docs/migrate.md): spaces back.
    return product.replace("-", " ")


def driver_slice(node: Mapping[str, Any], inventory: Inventory) -> dict[str, Any] | None:
    """The ResourceSlice NVIDIA's DRA driver publishes for ``node`` once cut over: one pool
    named after the node, a ``gpu-<i>`` device per whole GPU and a MIG device per instance
    the device plugin advertises (docs/dra.md, "Devices"); None for a node with no GPU."""
    meta = node.get("metadata") or {}
    name = str(meta.get("name") or "")
    labels = meta.get("labels") or {}
    whole = 0
    migs: list[tuple[str, int]] = []
    product = ""
    for pool in inventory.pools:
        if name not in pool.nodes or pool.origin.kind != "nodes":
            continue
        per = max(len(pool.nodes), 1)
        for offer in pool.offers:
            units = (offer.devices or 0) // per
            product = product or (offer.model or "")
            if offer.profile:
                migs.append((offer.profile, units))
            else:
                whole = max(whole, units)
    if not whole and not migs:
        return None
    count = int(labels.get("nvidia.com/gpu.count") or 0)
    parents = max(count - whole, 1) if migs else 0
    memory = labels.get("nvidia.com/gpu.memory")
    product_name = _nvml_name(product or str(labels.get("nvidia.com/gpu.product") or "unknown"))
    devices: list[dict[str, Any]] = []
    for i in range(whole):
        device: dict[str, Any] = {
            "name": f"gpu-{i}",
            "attributes": _attributes("gpu", product_name, f"GPU-{name}-{i}"),
        }
        if memory:
            device["capacity"] = {"memory": {"value": f"{memory}Mi"}}
        devices.append(device)
    n = 0
    for profile, units in migs:
        for _ in range(units):
            parent = whole + n % parents
            attributes = _attributes("mig", product_name, f"MIG-{name}-{n}")
            attributes["profile"] = {"string": profile}
            attributes["parentUUID"] = {"string": f"GPU-{name}-{parent}"}
            slug = profile.replace(".", "")
            devices.append({"name": f"gpu-{parent}-mig-{slug}-{n}", "attributes": attributes})
            n += 1
    return node_slice(f"{name}-{DRIVER}-migrate", DRIVER, name, devices, generation=1)


def _attributes(kind: str, product: str, uuid: str) -> dict[str, Any]:
    return {
        "type": {"string": kind},
        "uuid": {"string": uuid},
        "productName": {"string": product},
    }


def cut_node(node: Mapping[str, Any]) -> dict[str, Any]:
    """The Node once its device plugin is gone: no ``nvidia.com/*`` in allocatable."""
    out = copy.deepcopy(dict(node))
    status = out.setdefault("status", {})
    for section in ("allocatable", "capacity"):
        found = status.get(section) or {}
        status[section] = {k: v for k, v in found.items() if not str(k).startswith("nvidia.com/")}
    return out


@dataclass
class GpuPod:
    """A running (or waiting) GPU pod: its spec, where it runs now, and where it went."""

    key: str
    namespace: str
    spec: Mapping[str, Any]
    node: str | None
    rewritten: bool = False


@dataclass(frozen=True)
class Move:
    """What a step does to one pod: ``to`` the node it is placed on (None: fits nowhere),
    ``fits_on`` every node it could go to then, ``form`` ``rewritten`` (claims) or ``as is``."""

    pod: str
    source: str | None
    to: str | None
    fits_on: tuple[str, ...]
    form: str
    reason: str = ""


@dataclass(frozen=True)
class Step:
    """One cutover step: the node, its pods' moves, the labels and settings to flip."""

    number: int
    node: str
    moves: tuple[Move, ...]
    slice: Mapping[str, Any] | None
    # Where every GPU pod runs once the step is done (None: it fits no node).
    placements: Mapping[str, str | None] = field(default_factory=dict)

    @property
    def lost(self) -> tuple[Move, ...]:
        """The pods that fit no node after this step."""
        return tuple(m for m in self.moves if m.to is None)


@dataclass
class _State:
    pods: dict[str, GpuPod]
    cut: list[str] = field(default_factory=list)


def _merged(held: Sequence[Demand], new: Demand) -> Demand:
    """``new`` with the demands already placed on a node: their resources added up, each pod
    one container, every claim allocated together."""
    if not held:
        return new
    everything = (*held, new)
    resources: dict[str, Fraction] = {}
    for d in everything:
        for k, v in d.resources.items():
            resources[k] = resources.get(k, Fraction(0)) + v
    containers = tuple(
        (f"pod-{i}", False, None, dict(d.resources)) for i, d in enumerate(everything)
    )
    claims = tuple(c for d in everything for c in d.claims)
    return Demand(
        label=new.label,
        resources=resources,
        containers=containers,
        claims=claims,
        node_selector=new.node_selector,
        required_terms=new.required_terms,
        tolerations=new.tolerations,
    )


class Simulation:
    """Places the GPU pods on the cluster as it is after each step."""

    def __init__(
        self,
        nodes: Sequence[Mapping[str, Any]],
        inventory: Inventory,
        classes: Sequence[ClassPlan],
        supply_of: SupplyOf,
        claim_specs: Mapping[tuple[str, str, str], Mapping[str, Any]],
    ) -> None:
        self.nodes = {str((n.get("metadata") or {}).get("name")): n for n in nodes}
        self.inventory = inventory
        self.classes = tuple(classes)
        self.supply_of = supply_of
        self.claim_specs = dict(claim_specs)
        self.slices = {name: driver_slice(n, inventory) for name, n in self.nodes.items()}

    def supply(self, cut: Sequence[str]) -> Supply:
        """The supply with the nodes of ``cut`` cut over and the plan's classes applied."""
        nodes = [cut_node(n) if name in cut else n for name, n in self.nodes.items()]
        extra: list[Mapping[str, Any]] = [c.object() for c in self.classes]
        extra += [s for name in cut if (s := self.slices.get(name)) is not None]
        return self.supply_of(nodes, extra)

    def demand(self, pod: GpuPod, rewritten: bool) -> Demand:
        """The pod's demand, as it is or as the plan rewrites it (with its template)."""
        spec = dict(pod.spec)
        spec.pop("nodeName", None)
        specs = self.claim_specs
        if rewritten:
            name = f"{pod.key.replace('/', '-')}-gpu"
            spec, template, _ = rewrite_spec(spec, name, pod.node, self.classes)
            if template is not None:
                specs = {**specs, ("ResourceClaimTemplate", pod.namespace, name): template}
        return pod_demand(spec, pod.key, specs, pod.namespace)

    def step(self, state: _State, node: str) -> tuple[_State, tuple[Move, ...]]:
        """Cut ``node`` over: the state after, and the moves of the pods that held it."""
        cut = [*state.cut, node]
        supply = self.supply(cut)
        pods = {k: copy.copy(p) for k, p in state.pods.items()}
        held: dict[str, list[Demand]] = {}
        moving = []
        for pod in pods.values():
            if pod.node is not None and pod.node != node:
                held.setdefault(pod.node, []).append(self.demand(pod, pod.rewritten))
            else:
                moving.append(pod)
        moves = []
        groups = {g.node: g for g in supply.groups if g.node_names}
        for pod in sorted(moving, key=lambda p: p.key):
            # Resubmitted as the plan rewrites it once any node is cut over.
            demand = self.demand(pod, True)
            rewritten = demand.claims != self.demand(pod, False).claims
            fits_on = []
            reason = ""
            for name, group in groups.items():
                verdict = fit(_merged(held.get(name, ()), demand), group, supply)
                if verdict.fits:
                    fits_on.append(name)
                elif not reason or name == pod.node:
                    reason = f"{verdict.reason}: {verdict.detail}".strip(": ")
            to = pod.node if pod.node in fits_on else (fits_on[0] if fits_on else None)
            if to is not None:
                held.setdefault(to, []).append(demand)
            moves.append(
                Move(
                    pod.key,
                    pod.node,
                    to,
                    tuple(fits_on),
                    "rewritten" if rewritten else "as is",
                    "" if to else reason,
                )
            )
            pod.node = to
            pod.rewritten = rewritten
        return _State(pods, cut), tuple(moves)

    def run(self, pods: Sequence[GpuPod], order: Sequence[str] | None = None) -> tuple[Step, ...]:
        """Every step, in ``order`` or the greedy order (module docstring)."""
        state = _State({p.key: p for p in pods})
        left = [n for n in self.nodes if self.slices.get(n) is not None]
        steps: list[Step] = []
        while left:
            if order is not None:
                node = order[len(steps)]
                after, moves = self.step(state, node)
            else:
                tried = [(self.step(state, n), n) for n in left]
                (after, moves), node = min(
                    tried,
                    key=lambda t: (
                        sum(1 for m in t[0][1] if m.to is None),
                        len(t[0][1]),
                        t[1],
                    ),
                )
            left.remove(node)
            where = {k: p.node for k, p in sorted(after.pods.items())}
            steps.append(Step(len(steps) + 1, node, moves, self.slices.get(node), where))
            state = after
        return tuple(steps)
