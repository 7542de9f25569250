"""DRA objects (resource.k8s.io/v1) as NVIDIA's DRA driver publishes and users ask for them.

docs/dra-claims.md: classes gpu.nvidia.com / mig.nvidia.com, attributes type, productName,
profile, capacity memory and (with --consumable-shares) shares.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

GPU_CLASS_CEL = (
    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
)
MIG_CLASS_CEL = (
    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"
)


def device_class(
    name: str,
    *expressions: str,
    driver: str | None = None,
    config: list[Any] | None = None,
    extended: str | None = None,
    created: str = "",
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A DeviceClass with CEL selectors (and opaque config entries); ``driver``: a first
    selector that picks that driver's devices; ``extended``: the extended resource name it
    serves; ``created``: its creationTimestamp."""
    if driver is not None:
        expressions = (f'device.driver == "{driver}"', *expressions)
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": e}} for e in expressions]}
    if config:
        spec["config"] = config
    if extended:
        spec["extendedResourceName"] = extended
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = dict(labels)
    if created:
        meta["creationTimestamp"] = created
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": meta,
        "spec": spec,
    }


def nvidia_classes() -> list[dict[str, Any]]:
    """The two DeviceClasses the NVIDIA DRA driver's chart installs."""
    return [
        device_class("gpu.nvidia.com", GPU_CLASS_CEL),
        device_class("mig.nvidia.com", MIG_CLASS_CEL),
    ]


def dra_gpu(
    index: int,
    *,
    product: str = "NVIDIA A100-SXM4-40GB",
    memory: str = "40Gi",
    shares: int | None = None,
    attributes: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A full GPU device; ``shares``: published with --consumable-shares=<shares>;
    ``attributes``: more attributes (``{"driverVersion": {"version": "550.54.15"}}``)."""
    device: dict[str, Any] = {
        "name": f"gpu-{index}",
        "attributes": {
            "type": {"string": "gpu"},
            "productName": {"string": product},
            "uuid": {"string": f"GPU-{index:08d}"},
            **(attributes or {}),
        },
        "capacity": {"memory": {"value": memory}},
    }
    if shares is not None:
        device["allowMultipleAllocations"] = True
        device["capacity"]["shares"] = {
            "value": str(shares),
            "requestPolicy": {
                "default": "1",
                "validRange": {"min": "1", "max": str(shares), "step": "1"},
            },
        }
    return device


def dra_mig(
    parent: int, profile: str, slot: int, *, product: str = "NVIDIA H100 80GB HBM3"
) -> dict[str, Any]:
    """A MIG device of ``profile`` on GPU ``parent``."""
    return {
        "name": f"gpu-{parent}-mig-{profile.replace('.', '')}-{slot}",
        "attributes": {
            "type": {"string": "mig"},
            "profile": {"string": profile},
            "productName": {"string": product},
            "parentUUID": {"string": f"GPU-{parent:08d}"},
        },
    }


def device(name: str, attributes: Mapping[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """A device of any driver; ``attributes`` given as plain values are typed here (a bool,
    an int, ``"v:1.2.3"`` a version, any other value a string); ``extra``: capacity,
    consumesCounters, taints, allowMultipleAllocations..."""
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


# The spec fields that say which nodes reach a slice's devices, written before its pool.
_WHERE = ("nodeSelector", "allNodes", "perDeviceNodeSelection")


def resource_slice(
    node: str | None,
    *devices: dict[str, Any],
    driver: str = "gpu.nvidia.com",
    generation: int = 1,
    count: int = 1,
    name: str | None = None,
    pool: str | None = None,
    labels: Mapping[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """One ResourceSlice of ``node``'s devices (None: a slice of no node, placed by
    ``nodeSelector``, ``allNodes`` or ``perDeviceNodeSelection`` in ``spec``): its pool
    (``pool``, or named after the node) at ``generation``, in ``count`` slices. ``spec``
    also takes ``sharedCounters``: since 1.35 a slice holds devices or counters, not both."""
    where = {"nodeName": node} if node is not None else {}
    where.update({key: spec.pop(key) for key in _WHERE if key in spec})
    meta: dict[str, Any] = {"name": name or f"{node}-{driver}"}
    if labels:
        meta["labels"] = dict(labels)
    body: dict[str, Any] = {
        "driver": driver,
        **where,
        "pool": {"name": pool or node, "generation": generation, "resourceSliceCount": count},
    }
    if devices or "sharedCounters" not in spec:
        body["devices"] = list(devices)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": meta,
        "spec": {**body, **spec},
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
    # One pool of two slices: the API server takes no counters with devices.
    return [
        resource_slice(node, name=f"{prefix}-c", pool=prefix, count=2, sharedCounters=counters),
        resource_slice(node, *devices, name=f"{prefix}-d", pool=prefix, count=2),
    ]


def exactly(
    device_class_name: str = "gpu.nvidia.com", *, name: str = "gpu", **fields: Any
) -> dict[str, Any]:
    """A DeviceRequest with ``exactly`` (count, allocationMode, selectors, adminAccess...)."""
    selectors = fields.pop("selectors", None)
    body: dict[str, Any] = {"deviceClassName": device_class_name, **fields}
    if selectors:
        body["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return {"name": name, "exactly": body}


def sharing_config(strategy: str, *requests: str, kind: str = "GpuConfig") -> dict[str, Any]:
    """A claim config entry: the NVIDIA driver's GpuConfig sharing ``strategy``."""
    entry: dict[str, Any] = {
        "opaque": {
            "driver": "gpu.nvidia.com",
            "parameters": {
                "apiVersion": "resource.nvidia.com/v1beta1",
                "kind": kind,
                "sharing": {"strategy": strategy},
            },
        }
    }
    if requests:
        entry["requests"] = list(requests)
    return entry


def claim_template(
    name: str,
    *requests: dict[str, Any],
    config: list[Any] | None = None,
    constraints: list[Any] | None = None,
    namespace: str = "default",
) -> dict[str, Any]:
    """A ResourceClaimTemplate with these requests (``exactly`` / ``firstAvailable``), config
    entries and constraints (``matchAttribute``, ``distinctAttribute``)."""
    devices: dict[str, Any] = {"requests": list(requests)}
    if config:
        devices["config"] = config
    if constraints:
        devices["constraints"] = constraints
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": devices}},
    }


def resource_claim(name: str, *requests: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A ResourceClaim with these requests; ``fields`` as for :func:`claim_template`."""
    template = claim_template(name, *requests, **fields)
    return {**template, "kind": "ResourceClaim", "spec": template["spec"]["spec"]}


def allocated_claim(
    name: str,
    pool: str,
    *devices: str,
    namespace: str = "ml",
    driver: str = "gpu.nvidia.com",
    request: str = "gpu",
    reserved_for: tuple[str, ...] = (),
) -> dict[str, Any]:
    """A ResourceClaim as the scheduler leaves it: ``devices`` of ``pool`` allocated to
    ``request``, reserved for the pods named in ``reserved_for``."""
    status: dict[str, Any] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": request, "driver": driver, "pool": pool, "device": d}
                    for d in devices
                ]
            }
        }
    }
    if reserved_for:
        status["reservedFor"] = [
            {"resource": "pods", "name": pod, "uid": str(i + 1)}
            for i, pod in enumerate(reserved_for)
        ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "status": status,
    }
