"""Small worlds for the allocator tests: Nodes, ResourceSlices, DeviceClasses, claims and pods
(built with ``tests.objects``, as a user applies them) turned into the supply and demand models.

One node group per node: its labels, taints and allocatable, and the slices that name it or no
node (the shared ones). That is the simplest assembly; the real one groups nodes of one shape.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from webhook.policy.demand import Demand, claim_demand, pod_demand
from webhook.policy.dra import ResourceSlice, parse_device_class, parse_slice
from webhook.policy.nodes import Taint
from webhook.policy.supply import NodeGroup, Supply


def supply_of(objs: Iterable[Mapping[str, Any]]) -> Supply:
    """The Nodes, ResourceSlices and DeviceClasses among ``objs`` as a Supply."""
    objs = list(objs)
    slices: list[ResourceSlice] = []
    for obj in objs:
        if obj.get("kind") == "ResourceSlice":
            found, problems = parse_slice(obj)
            assert found is not None and not problems, problems
            slices.append(found)
    classes = {}
    extended = {}
    for obj in objs:
        if obj.get("kind") == "DeviceClass":
            parsed = parse_device_class(obj)
            classes[parsed.name] = parsed
            if parsed.extended_resource_name:
                extended[parsed.extended_resource_name] = parsed.name
    # Each node's slices in the order given: those naming it and those naming no node.
    shared = [(i, s) for i, s in enumerate(slices) if s.node_name is None]
    local: dict[str, list[tuple[int, ResourceSlice]]] = {}
    for i, found in enumerate(slices):
        if found.node_name is not None:
            local.setdefault(found.node_name, []).append((i, found))
    groups = []
    for obj in objs:
        if obj.get("kind") != "Node":
            continue
        meta = obj["metadata"]
        name = meta["name"]
        taints = tuple(
            Taint(t["key"], t.get("value", ""), t["effect"])
            for t in (obj.get("spec") or {}).get("taints") or ()
        )
        allocatable = {
            k: int(v)
            for k, v in ((obj.get("status") or {}).get("allocatable") or {}).items()
            if "/" in k
        }
        groups.append(
            NodeGroup(
                key=name,
                node_names=(name,),
                labels={"kubernetes.io/hostname": name, **(meta.get("labels") or {})},
                taints=taints,
                allocatable=allocatable,
                slices=tuple(s for _, s in sorted((*shared, *local.get(name, ())))),
            )
        )
    return Supply(tuple(groups), classes, extended, tuple(slices))


def demand_of(objs: Iterable[Mapping[str, Any]]) -> Demand:
    """The demand of the Pod among ``objs`` (with the claims and templates there); without a
    Pod, of the ResourceClaims there, allocated together."""
    objs = list(objs)
    specs = {}
    for obj in objs:
        kind = obj.get("kind")
        if kind == "ResourceClaim":
            specs[(kind, "default", obj["metadata"]["name"])] = obj["spec"]
        elif kind == "ResourceClaimTemplate":
            specs[(kind, "default", obj["metadata"]["name"])] = obj["spec"]["spec"]
    for obj in objs:
        if obj.get("kind") == "Pod":
            return pod_demand(obj["spec"], f"pod {obj['metadata']['name']}", specs, "default")
    claims = [o for o in objs if o.get("kind") == "ResourceClaim"]
    if len(claims) > 1:
        # Several claims allocated together, as upstream's claimsToAllocate: a pod names them.
        refs = [
            {"name": c["metadata"]["name"], "resourceClaimName": c["metadata"]["name"]}
            for c in claims
        ]
        return pod_demand({"resourceClaims": refs}, "pod", specs, "default")
    return claim_demand(claims[0]["spec"], f"claim {claims[0]['metadata']['name']}")
