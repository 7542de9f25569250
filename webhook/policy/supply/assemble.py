"""One recipe from what the cluster says to what the engine reads: :func:`assemble`.

The sources are adapters, each read here and nowhere else:

- the device plugin: Node objects (``status.allocatable``, labels, taints) and the plugin's
  config (through :func:`~webhook.policy.inventory.inventory_from_nodes`, which names pools);
- DRA: DeviceClasses, ResourceSlices, ResourceClaims and ResourceClaimTemplates
  (:func:`~webhook.policy.dra.dra_snapshot` for the classes and the claims,
  :func:`~webhook.policy.dra.parse_slice` for the slices the allocator reads);
- declared pools (the policy's ``spec.pools``) and Karpenter NodePools
  (:func:`~webhook.policy.autoscaling.karpenter_pools`): node groups that can appear; a pool
  with a ``deviceClass`` gets the devices its nodes would publish (:func:`template_slice`).

Every caller (the server's live snapshot, ``gpu-policy review --nodes``, the audit, ``plan``)
calls :func:`assemble`, which returns the :class:`~webhook.policy.inventory.Inventory` (the
naming view: which resource name to rewrite to, which labels select a product) with the
:class:`~webhook.policy.supply.model.Supply` the allocator judges fit on attached
(``inventory.supply``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from webhook.policy.autoscaling import karpenter_pools
from webhook.policy.dra import DraSnapshot, ResourceSlice, dra_snapshot, node_slice, parse_slice
from webhook.policy.inventory import (
    Inventory,
    Pool,
    assumed_taints,
    inventory_from_nodes,
    inventory_from_policy,
)
from webhook.policy.model import Policy
from webhook.policy.nodes import UNSCHEDULABLE_TAINT, Taint
from webhook.policy.quantity import QuantityError, parse_gpu_quantity
from webhook.policy.supply.model import NodeGroup, Supply
from webhook.policy.supply.served import two_sources

#: How long the allocator searches per review in the server (the issue's default): a search
#: cut short allows with a warning.
FIT_BUDGET_S = 0.05
#: In the commands (review, test, audit, plan) nobody waits on an admission call: a search
#: long enough that the answer does not depend on how loaded the machine is.
OFFLINE_FIT_BUDGET_S = 5.0

#: The driver NVIDIA's DRA driver publishes GPUs under (docs/dra.md, [drv]).
NVIDIA_DRIVER = "gpu.nvidia.com"


@dataclass(frozen=True)
class DraObjects:
    """The DRA objects one source holds (a cluster list, a node dump), as read."""

    device_classes: Sequence[Mapping[str, Any]] = ()
    resource_slices: Sequence[Mapping[str, Any]] = ()
    resource_claims: Sequence[Mapping[str, Any]] = ()
    resource_claim_templates: Sequence[Mapping[str, Any]] = ()

    def __bool__(self) -> bool:
        return any(
            (
                self.device_classes,
                self.resource_slices,
                self.resource_claims,
                self.resource_claim_templates,
            )
        )


def assemble(
    policy: Policy,
    *,
    nodes: Iterable[Mapping[str, Any]] | None,
    source: str,
    dra: DraObjects | None = None,
    nodepools: Iterable[Mapping[str, Any]] = (),
    previous: DraSnapshot | None = None,
    fit_budget_s: float = FIT_BUDGET_S,
) -> Inventory:
    """The inventory and supply of one source: ``nodes`` (None: no Node objects, the policy's
    pools stand for them), the DRA objects ``dra`` (None: DRA not seen), Karpenter's
    ``nodepools``. ``previous``: the last snapshot's DRA side, whose compiled selectors and
    unchanged slices are reused. ``source`` says where it all came from, for messages.
    ``fit_budget_s``: how long the allocator may search per review.
    """
    snapshot = None
    if dra is not None:
        snapshot = dra_snapshot(
            dra.device_classes,
            dra.resource_slices,
            dra.resource_claims,
            dra.resource_claim_templates,
            previous=previous,
        )
    if nodes is None:
        inventory = inventory_from_policy(policy)
        if snapshot is not None:
            inventory = replace(inventory, dra=snapshot)
        node_list: list[Mapping[str, Any]] = []
    else:
        node_list = list(nodes)
        can_appear, notes = karpenter_pools(nodepools, policy)
        inventory = inventory_from_nodes(
            node_list, policy, source=source, can_appear=can_appear, notes=notes, dra=snapshot
        )
    supply = build_supply(policy, inventory, node_list, snapshot)
    problems = two_sources(supply.groups, snapshot) if snapshot is not None else []
    return replace(
        inventory,
        supply=supply,
        fit_budget_s=fit_budget_s,
        disagreements=(*inventory.disagreements, *problems),
    )


def build_supply(
    policy: Policy,
    inventory: Inventory,
    nodes: Sequence[Mapping[str, Any]],
    dra: DraSnapshot | None,
) -> Supply:
    """The node groups of ``nodes`` (one a node: the allocator judges identical shapes once)
    and of the inventory's pools that stand for nodes not given (pools at zero, and every pool
    when no Node objects are), with the DRA classes and slices of ``dra``."""
    slices = _slices(dra)
    local: dict[str, list[ResourceSlice]] = {}
    shared: list[ResourceSlice] = []
    for found in slices:
        if found.node_name is not None:
            local.setdefault(found.node_name, []).append(found)
        else:
            shared.append(found)
    groups = [g for node in nodes if (g := _node_group(node, local, shared)) is not None]
    known = {g.node for g in groups}
    # A slice names its node: the node exists, even where its Node object was not given (a
    # dump of the DRA objects alone). What else it has is unknown: its name is its label.
    for name in sorted(set(local) - known):
        groups.append(
            NodeGroup(
                key=f"node {name}",
                node_names=(name,),
                labels={"kubernetes.io/hostname": name},
                slices=(*local[name], *shared),
            )
        )
    known |= set(local)
    templates: list[ResourceSlice] = []
    for pool in inventory.pools:
        if nodes and not pool.at_zero:
            continue  # its nodes are groups of their own
        if pool.nodes and all(name in known for name in pool.nodes):
            continue
        group, published = _pool_group(policy, pool, dra, shared)
        groups.append(group)
        templates += published
    return Supply(
        groups=tuple(groups),
        classes=dict(dra.classes) if dra is not None else {},
        extended=dict(dra.extended) if dra is not None else {},
        slices=(*slices, *templates),
    )


def _slices(dra: DraSnapshot | None) -> list[ResourceSlice]:
    """The ResourceSlices of the snapshot (of each pool, its newest generation)."""
    if dra is None:
        return []
    out = []
    for obj, _devices, _problems in dra.slices.values():
        found, _ = parse_slice(obj)
        if found is not None:
            out.append(found)
    return sorted(out, key=lambda s: (s.driver, s.pool, s.name))


def _count(raw: object) -> int | None:
    try:
        return parse_gpu_quantity(raw)
    except QuantityError:
        return None


def _node_group(
    node: Mapping[str, Any],
    local: Mapping[str, list[ResourceSlice]],
    shared: Sequence[ResourceSlice],
) -> NodeGroup | None:
    """One Node as a group of one: its labels, the taints the scheduler filters on (a cordon
    as the unschedulable taint), its allocatable extended resources, the slices it reaches."""
    meta = node.get("metadata") or {}
    name = str(meta.get("name") or "")
    if not name:
        return None
    spec = node.get("spec") or {}
    taints = [
        Taint(str(t.get("key", "")), str(t.get("value") or ""), str(t["effect"]))
        for t in spec.get("taints") or ()
        if isinstance(t, Mapping) and t.get("effect") in ("NoSchedule", "NoExecute")
    ]
    if spec.get("unschedulable"):
        taints.append(Taint(*UNSCHEDULABLE_TAINT))
    allocatable = {}
    for resource, raw in ((node.get("status") or {}).get("allocatable") or {}).items():
        # Extended resources only (a domain, outside kubernetes.io): the webhook judges no
        # cpu or memory.
        if isinstance(resource, str) and "/" in resource and "kubernetes.io/" not in resource:
            count = _count(raw)
            if count is not None:
                allocatable[resource] = count
    labels = meta.get("labels") or {}
    return NodeGroup(
        key=f"node {name}",
        node_names=(name,),
        labels={str(k): str(v) for k, v in labels.items()},
        taints=tuple(taints),
        allocatable=allocatable,
        slices=(*local.get(name, ()), *shared),
    )


def _pool_group(
    policy: Policy, pool: Pool, dra: DraSnapshot | None, shared: Sequence[ResourceSlice]
) -> tuple[NodeGroup, list[ResourceSlice]]:
    """A pool of nodes not given as Node objects: what each of its nodes will have (the
    labels the engine selects its product by, the config key's label, the taints the policy's
    tolerations are for, the per-node offers) and, with a ``deviceClass``, the slice each
    node would publish."""
    key = f"pool {pool.name}"
    labels: dict[str, str] = {}
    if pool.config_key and pool.config_key != policy.default_config:
        labels[policy.node_label] = pool.config_key
    for offer in pool.offers:
        if offer.selector is not None:
            labels.setdefault(*offer.selector)
    count = pool.node_count
    if pool.scaling is not None:
        bounds: tuple[int, int | None] = (pool.scaling.min_nodes or 0, pool.scaling.max_nodes)
    else:
        bounds = (count, count)
    published: list[ResourceSlice] = []
    if pool.device_class and dra is not None and pool.device_class in dra.classes:
        template = template_slice(pool, pool.nodes[0] if pool.nodes else key)
        found, _ = parse_slice(template)
        if found is not None:
            published.append(found)
    group = NodeGroup(
        key=key,
        node_names=pool.nodes,
        bounds=bounds,
        labels=labels,
        taints=assumed_taints(policy),
        allocatable=_per_node(pool) if not pool.device_class else {},
        slices=(*published, *shared),
    )
    return group, published


#: What a node of a pool is taken to advertise when nothing says how much (a config key's
#: pool without Node objects or declared pools: docs/policy.md): the webhook never refuses a
#: count it cannot know.
UNKNOWN_COUNT = 1 << 30


def _per_node(pool: Pool) -> dict[str, int]:
    """What one node of ``pool`` advertises, resource name -> count."""
    if pool.per_node:
        return dict(pool.per_node)
    count = pool.node_count
    out: dict[str, int] = {}
    for offer in pool.offers:
        known = offer.slots is not None and count > 0
        per = offer.slots // count if known and offer.slots is not None else UNKNOWN_COUNT
        out[offer.form.name] = max(out.get(offer.form.name, 0), per)
    return out


def _product_name(model: str | None) -> str:
    # GFD's product label is NVML's name with spaces as dashes; the driver publishes NVML's
    # name. Which dashes were spaces is lost: the first one always was ("NVIDIA-A100-..." is
    # "NVIDIA A100-..."), and selectors match on the model's prefix.
    if not model:
        return "unknown"
    head, _, rest = model.partition("-")
    return f"{head} {rest}" if rest else head


def template_slice(pool: Pool, node: str) -> dict[str, Any]:
    """The ResourceSlice NVIDIA's DRA driver would publish on one node of ``pool``: a device
    per GPU (``type: gpu``), or per MIG device (``type: mig``, ``profile``) for a pool with
    MIG devices, with ``productName`` and ``memory`` (docs/dra.md, "Device attributes")."""
    model = next((o.model for o in pool.offers if o.model), None)
    memory = next((o.memory_mib for o in pool.offers if o.memory_mib), None)
    devices: list[dict[str, Any]] = []
    for resource, count in sorted(pool.per_node.items()):
        offer = next((o for o in pool.offers if o.form.name == resource), None)
        profile = offer.profile if offer is not None else None
        for i in range(count):
            attributes: dict[str, Any] = {
                "type": {"string": "mig" if profile else "gpu"},
                "productName": {"string": _product_name(model)},
            }
            if profile:
                attributes["profile"] = {"string": profile}
            device: dict[str, Any] = {"name": f"{'mig' if profile else 'gpu'}-{len(devices)}-{i}"}
            device["attributes"] = attributes
            if memory and not profile:
                device["capacity"] = {"memory": {"value": f"{memory}Mi"}}
            devices.append(device)
    return node_slice(f"{node}-template", NVIDIA_DRIVER, node, devices, generation=0)
