"""Small worlds for the allocator tests: nodes, ResourceSlices, DeviceClasses and pods written
as the YAML objects a user applies, turned into the supply and demand models.

One node group per node: its labels, taints and allocatable, and the slices that name it or no
node (the shared ones). That is the simplest assembly; the real one groups nodes of one shape.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from webhook.policy.demand import Demand, claim_demand, pod_demand
from webhook.policy.dra import ResourceSlice, parse_device_class, parse_slice
from webhook.policy.nodes import Taint
from webhook.policy.supply import NodeGroup, Supply

DRIVER = "gpu.nvidia.com"


def objects(text: str) -> list[dict[str, Any]]:
    """Every object of a YAML stream."""
    return [o for o in yaml.safe_load_all(text) if o]


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


def node(
    name: str,
    labels: Mapping[str, str] | None = None,
    *,
    gpu: int = 0,
    allocatable: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """A Node object with labels, ``gpu`` device-plugin GPUs (``nvidia.com/gpu``) and other
    allocatable extended resources."""
    resources = dict(allocatable or {})
    if gpu:
        resources["nvidia.com/gpu"] = gpu
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "status": {"allocatable": resources},
    }


def device(name: str, attributes: Mapping[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """A device of a ResourceSlice; attributes given as plain values are typed here."""
    typed = {}
    for key, value in (attributes or {}).items():
        if isinstance(value, bool):
            typed[key] = {"bool": value}
        elif isinstance(value, int):
            typed[key] = {"int": value}
        elif isinstance(value, str) and value.startswith("v:"):
            typed[key] = {"version": value[2:]}
        else:
            typed[key] = {"string": value}
    return {"name": name, "attributes": typed, **extra}


def resource_slice(
    name: str, pool: str, devices: list[dict[str, Any]], *, driver: str = DRIVER, **spec: Any
) -> dict[str, Any]:
    """A ResourceSlice of one pool of one slice; ``spec`` sets nodeName, allNodes,
    nodeSelector, sharedCounters, perDeviceNodeSelection."""
    return {
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
            # Since 1.35 a slice holds devices or shared counters, not both.
            **({"devices": devices} if devices or "sharedCounters" not in spec else {}),
            **spec,
        },
    }


def partitionable(gpus: int, node: str = "n") -> list[dict[str, Any]]:
    """``gpus`` partitionable GPUs on ``node`` as NVIDIA's driver publishes them: each a whole
    device (attribute ``type: gpu``) and two halves (``type: mig``), all consuming one counter
    set of 40Gi of memory, in one pool of two slices (counters, then devices)."""
    counters, devices = [], []
    for g in range(gpus):
        counters.append({"name": f"gpu-{g}", "counters": {"memory": {"value": "40Gi"}}})

        def takes(memory: str, g: int = g) -> list[dict[str, Any]]:
            return [{"counterSet": f"gpu-{g}", "counters": {"memory": {"value": memory}}}]

        devices.append(device(f"gpu-{g}", {"type": "gpu"}, consumesCounters=takes("40Gi")))
        for half in range(2):
            devices.append(
                device(f"gpu-{g}-mig-{half}", {"type": "mig"}, consumesCounters=takes("20Gi"))
            )
    prefix = "parts" if node == "n" else f"{node}-parts"
    out = [
        resource_slice(f"{prefix}-c", prefix, [], nodeName=node, sharedCounters=counters),
        resource_slice(f"{prefix}-d", prefix, devices, nodeName=node),
    ]
    for found in out:  # one pool of two slices: the API server takes no counters with devices
        found["spec"]["pool"]["resourceSliceCount"] = 2
    return out


def device_class(
    name: str, *selectors: str, extended: str | None = None, driver: str = DRIVER
) -> dict[str, Any]:
    """A DeviceClass selecting ``driver``'s devices and passing ``selectors``."""
    exprs = [f'device.driver == "{driver}"', *selectors]
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": e}} for e in exprs]}
    if extended:
        spec["extendedResourceName"] = extended
    return {"kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


def claim(name: str, *requests: dict[str, Any], **devices: Any) -> dict[str, Any]:
    """A ResourceClaim with ``requests`` (and ``constraints=[...]`` etc. in ``devices``)."""
    return {
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": list(requests), **devices}},
    }


def exactly(name: str, device_class_name: str, count: int = 1, **fields: Any) -> dict[str, Any]:
    """A request ``exactly`` ``count`` devices of a class."""
    body = {"deviceClassName": device_class_name, "count": count, **fields}
    if "selectors" in fields:
        body["selectors"] = [{"cel": {"expression": e}} for e in fields["selectors"]]
    return {"name": name, "exactly": body}


def pod(
    name: str, *containers: Mapping[str, int], claims: Iterable[str] = (), **spec: Any
) -> dict[str, Any]:
    """A Pod whose containers request the given resources and which names ``claims``."""
    return {
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {"name": f"c{i}", "resources": {"requests": dict(c), "limits": dict(c)}}
                for i, c in enumerate(containers)
            ],
            "resourceClaims": [{"name": c, "resourceClaimName": c} for c in claims],
            **spec,
        },
    }
