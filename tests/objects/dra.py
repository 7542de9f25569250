"""DRA objects (resource.k8s.io/v1) as NVIDIA's DRA driver publishes and users ask for them.

docs/dra-claims.md: classes gpu.nvidia.com / mig.nvidia.com, attributes type, productName,
profile, capacity memory and (with --consumable-shares) shares.
"""

from __future__ import annotations

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
    config: list[Any] | None = None,
    extended: str | None = None,
    created: str = "",
) -> dict[str, Any]:
    """A DeviceClass with CEL selectors (and opaque config entries); ``extended``: the
    extended resource name it serves; ``created``: its creationTimestamp."""
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": e}} for e in expressions]}
    if config:
        spec["config"] = config
    if extended:
        spec["extendedResourceName"] = extended
    meta: dict[str, Any] = {"name": name}
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


def resource_slice(
    node: str,
    *devices: dict[str, Any],
    driver: str = "gpu.nvidia.com",
    generation: int = 1,
    count: int = 1,
    name: str | None = None,
) -> dict[str, Any]:
    """One ResourceSlice of ``node``'s devices: its pool (named after the node) at
    ``generation``, in ``count`` slices."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name or f"{node}-{driver}"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": count},
            "devices": list(devices),
        },
    }


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
    namespace: str = "default",
) -> dict[str, Any]:
    """A ResourceClaimTemplate with these requests (``exactly`` / ``firstAvailable``)."""
    devices: dict[str, Any] = {"requests": list(requests)}
    if config:
        devices["config"] = config
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": devices}},
    }


def resource_claim(
    name: str,
    *requests: dict[str, Any],
    config: list[Any] | None = None,
    namespace: str = "default",
) -> dict[str, Any]:
    """A ResourceClaim with these requests."""
    template = claim_template(name, *requests, config=config, namespace=namespace)
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
