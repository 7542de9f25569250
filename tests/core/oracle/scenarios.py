"""Random scenarios for the differential test: a small cluster ("world") and one pod.

A scenario is plain Kubernetes objects: the world (Nodes with their ``status``, DeviceClasses,
ResourceSlices) and the manifests a user applies (ResourceClaims, ResourceClaimTemplates, the
Pod). :func:`generate` makes one from a seed with ``random.Random``, so that a seed and an index
replay the same scenario. Every name that is cluster-wide carries the world's id, and every Node
carries the label :data:`WORLD_LABEL`, which the pod selects: many worlds share one control
plane without meeting (docs/oracle.md).

The devices are published as NVIDIA's DRA driver publishes them (docs/dra.md "Devices"):
driver ``gpu.nvidia.com``, one pool per node named after it, devices ``gpu-<minor>`` and
``gpu-<minor>-mig-<profile>-<gi>-<start>``, attributes ``type``, ``uuid``, ``productName``,
``architecture``, ``cudaComputeCapability`` / ``driverVersion`` (versions), ``profile`` and
``parentUUID`` on MIG devices, capacity ``memory``. Partitionable GPUs (dynamic MIG) put their
``sharedCounters`` in a slice of their own (the API refuses a slice with both counters and
devices) and each device ``consumesCounters`` memory slices of it.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field
from typing import Any

from tests.objects import (
    claim_template,
    ctr,
    device,
    device_class,
    node_object,
    pod,
    resource_claim,
    resource_slice,
)

WORLD_LABEL = "oracle.gpu-policy.io/world"
RACK_LABEL = "oracle.gpu-policy.io/rack"
DRIVER = "gpu.nvidia.com"
#: What a scenario may create for the scheduler to place: a Pod, or a Deployment's pods.
WORKLOAD_KINDS = ("Pod", "Deployment")
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
DEVICE_TAINT = {"key": "oracle.gpu-policy.io/unhealthy", "value": "xid-79", "effect": "NoSchedule"}


@dataclass(frozen=True)
class Product:
    """A GPU model: its names, memory, and the MIG profiles it splits into (with the number
    of memory slices each takes out of ``slices``)."""

    name: str
    memory: str
    compute: str
    architecture: str
    slices: int = 0
    profiles: tuple[tuple[str, int], ...] = ()

    @property
    def label(self) -> str:
        """The product as GPU feature discovery writes it in ``nvidia.com/gpu.product``."""
        return self.name.replace(" ", "-")


PRODUCTS = (
    Product(
        "NVIDIA A100-SXM4-40GB",
        "40Gi",
        "8.0.0",
        "Ampere",
        8,
        (("1g.5gb", 1), ("2g.10gb", 2), ("3g.20gb", 4)),
    ),
    Product(
        "NVIDIA H100 80GB HBM3",
        "80Gi",
        "9.0.0",
        "Hopper",
        8,
        (("1g.10gb", 1), ("2g.20gb", 2), ("3g.40gb", 4)),
    ),
    Product("NVIDIA A30", "24Gi", "8.0.0", "Ampere", 4, (("1g.6gb", 1), ("2g.12gb", 2))),
    Product("Tesla T4", "15Gi", "7.5.0", "Turing"),
    Product("NVIDIA L4", "22Gi", "8.9.0", "Ada Lovelace"),
)
DRIVER_VERSIONS = ("535.161.8", "550.127.8", "570.86.15")


@dataclass
class Scenario:
    """One world and one pod. ``world`` holds the cluster's objects (Nodes with status,
    DeviceClasses, ResourceSlices); ``manifests`` the user's (claims, templates, the Pod, in
    creation order). ``alone``: it names a cluster-wide extended resource that another world
    would see (run it in a batch of its own). ``features``: what it uses, for the figures."""

    world_id: str
    world: list[dict[str, Any]] = field(default_factory=list)
    manifests: list[dict[str, Any]] = field(default_factory=list)
    alone: bool = False
    features: list[str] = field(default_factory=list)

    @property
    def pod(self) -> dict[str, Any]:
        """The scenario's Pod, or the workload whose pod template the scheduler will see
        (the last manifest that is one of :data:`WORKLOAD_KINDS`)."""
        return next(m for m in reversed(self.manifests) if m["kind"] in WORKLOAD_KINDS)

    @property
    def category(self) -> str:
        """A coarse kind of scenario for the agreement figures: dra, device-plugin or mixed."""
        dra = any(o["kind"] == "ResourceSlice" for o in self.world)
        plugin = any(
            k.startswith("nvidia.com/")
            for o in self.world
            if o["kind"] == "Node"
            for k in o["status"]["allocatable"]
        )
        return (
            "mixed" if dra and plugin else "dra" if dra else "device-plugin" if plugin else "none"
        )


# --- the world ---------------------------------------------------------------------------------


def _attrs(product: Product, uuid: str, driver_version: str) -> dict[str, str]:
    # Versions as "v:<version>" (tests.objects.device types the values).
    return {
        "type": "gpu",
        "uuid": uuid,
        "productName": product.name,
        "brand": "Nvidia",
        "architecture": product.architecture,
        "cudaComputeCapability": f"v:{product.compute}",
        "driverVersion": f"v:{driver_version}",
    }


def _counters(memory: str, start: int, size: int) -> dict[str, Any]:
    """Counters as the driver's partitions.go sets them: one per capacity (here ``memory``)
    and one ``memory-slice-<n>`` of 1 per memory slice, from ``start``, ``size`` of them."""
    counters: dict[str, Any] = {"memory": {"value": memory}}
    counters.update({f"memory-slice-{i}": {"value": "1"} for i in range(start, start + size)})
    return counters


def _mig_memory(profile: str) -> str:
    return profile.split(".")[1].upper().replace("GB", "Gi")


def _gpu_devices(
    rng: random.Random, product: Product, minor: int, uuid: str, version: str, mode: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The devices one GPU publishes, and its counter sets (partitionable mode only).

    ``mode``: ``whole`` (the GPU), ``mig`` (MIG enabled with a fixed layout: its instances
    only), ``partitionable`` (the GPU and every instance it could be cut into, all drawing on
    one counter set)."""
    whole = device(
        f"gpu-{minor}",
        _attrs(product, uuid, version),
        capacity={"memory": {"value": product.memory}},
    )
    if mode == "whole" or not product.profiles:
        return [whole], []
    instances: list[dict[str, Any]] = []
    if mode == "mig":
        layout: list[tuple[str, int, int]] = []
        start = 0
        while start < product.slices:
            profile, size = rng.choice(
                [p for p in product.profiles if p[1] <= product.slices - start]
            )
            layout.append((profile, size, start))
            start += size
    else:
        layout = [(p, s, st) for p, s in product.profiles for st in range(0, product.slices, s)]
    for gi, (profile, size, start) in enumerate(layout):
        attrs = _attrs(product, f"MIG-{uuid[4:]}-{gi}", version)
        attrs.update(type="mig", profile=profile, parentUUID=uuid)
        instance = device(
            f"gpu-{minor}-mig-{profile.replace('.', '')}-{gi}-{start}",
            attrs,
            capacity={"memory": {"value": _mig_memory(profile)}},
        )
        if mode == "partitionable":
            instance["consumesCounters"] = [
                {
                    "counterSet": f"gpu-{minor}-counter-set",
                    "counters": _counters(_mig_memory(profile), start, size),
                }
            ]
        instances.append(instance)
    if mode == "mig":
        return instances, []
    whole["consumesCounters"] = [
        {
            "counterSet": f"gpu-{minor}-counter-set",
            "counters": _counters(product.memory, 0, product.slices),
        }
    ]
    counters = [
        {
            "name": f"gpu-{minor}-counter-set",
            "counters": _counters(product.memory, 0, product.slices),
        }
    ]
    return [whole, *instances], counters


def _slices(
    pool: str,
    node: str | None,
    devices: list[dict[str, Any]],
    counters: list[dict[str, Any]],
    world: str,
    **where: Any,
) -> list[dict[str, Any]]:
    """A pool's ResourceSlices: one of devices, and one of counter sets when there are any;
    the pool is ``node``'s, or placed by ``where`` (``nodeSelector``)."""
    count = 2 if counters else 1

    def one(i: int, *devices: dict[str, Any], **spec: Any) -> dict[str, Any]:
        name = f"{pool}-{DRIVER}-{i}"
        labels = {WORLD_LABEL: world}
        return resource_slice(
            node, *devices, count=count, name=name, pool=pool, labels=labels, **where, **spec
        )

    out = [one(0, *devices)]
    if counters:
        out.append(one(1, sharedCounters=counters))
    return out


def _world_selector(world: str, rack: str | None = None) -> dict[str, Any]:
    exprs = [{"key": WORLD_LABEL, "operator": "In", "values": [world]}]
    if rack:
        exprs.append({"key": RACK_LABEL, "operator": "In", "values": [rack]})
    return {"nodeSelectorTerms": [{"matchExpressions": exprs}]}


@dataclass
class _Build:
    """What the generator knows about the world while it makes the pod."""

    rng: random.Random
    world: str
    scenario: Scenario
    products: list[Product] = field(default_factory=list)
    plugin_names: list[str] = field(default_factory=list)
    classes: list[str] = field(default_factory=list)
    ext_names: list[str] = field(default_factory=list)
    tainted_nodes: bool = False
    mig_devices: bool = False


def _node_groups(b: _Build) -> None:
    rng, world = b.rng, b.world
    n_groups = rng.choice((1, 1, 2))
    racks = ("r1", "r2")
    node_index = 0
    for _ in range(n_groups):
        source = rng.choice(("plugin", "plugin", "dra", "dra", "dra", "none"))
        product = rng.choice(PRODUCTS)
        b.products.append(product)
        gpus = rng.choice((1, 2, 2, 4, 8))
        taint = rng.random() < 0.2
        b.tainted_nodes |= taint
        for _ in range(rng.choice((1, 1, 2))):
            name = f"{world}-n{node_index}"
            rack = racks[node_index % 2]
            node_index += 1
            labels = {WORLD_LABEL: world, RACK_LABEL: rack}
            extra: dict[str, str] = {}
            if source != "none":
                labels.update(
                    {"nvidia.com/gpu.product": product.label, "nvidia.com/gpu.count": str(gpus)}
                )
            if source == "plugin":
                if product.profiles and rng.random() < 0.3:
                    profile = product.profiles[0][0]
                    labels["nvidia.com/mig.strategy"] = "mixed"
                    extra[f"nvidia.com/mig-{profile}"] = str(gpus * product.slices)
                    b.plugin_names.append(f"nvidia.com/mig-{profile}")
                else:
                    extra["nvidia.com/gpu"] = str(gpus)
                    b.plugin_names.append("nvidia.com/gpu")
            node = node_object(
                name, labels=labels, taints=[GPU_TAINT] if taint else [], gpus=None, capacity=extra
            )
            b.scenario.world.append(node)
            if source == "dra":
                version = rng.choice(DRIVER_VERSIONS)
                mode = rng.choice(("whole", "whole", "mig", "partitionable"))
                if mode != "whole":
                    # A slice holds at most 64 devices (and a MIG layout is per GPU anyway).
                    gpus = min(gpus, 2)
                devices: list[dict[str, Any]] = []
                counters: list[dict[str, Any]] = []
                for minor in range(gpus):
                    uuid = f"GPU-{world}-{name[-2:]}-{minor}"
                    d, c = _gpu_devices(rng, product, minor, uuid, version, mode)
                    devices += d
                    counters += c
                if mode != "whole" and product.profiles:
                    b.mig_devices = True
                    b.scenario.features.append(f"dra-{mode}")
                if rng.random() < 0.15 and devices:
                    rng.choice(devices)["taints"] = [dict(DEVICE_TAINT)]
                    b.scenario.features.append("device-taint")
                b.scenario.world += _slices(name, name, devices, counters, world)
    if rng.random() < 0.15:
        # Network-attached devices: reachable from the nodes of one rack of this world only
        # (allNodes would reach every world's nodes).
        product = rng.choice(PRODUCTS)
        rack = rng.choice(racks)
        devices = [
            device(
                f"gpu-{i}",
                _attrs(product, f"GPU-{world}-net-{i}", "550.127.8"),
                capacity={"memory": {"value": product.memory}},
            )
            for i in range(rng.choice((1, 2)))
        ]
        b.products.append(product)
        b.scenario.world += _slices(
            f"{world}-net", None, devices, [], world, nodeSelector=_world_selector(world, rack)
        )
        b.scenario.features.append("network-attached")


SELECTORS = (
    "device.attributes['gpu.nvidia.com'].productName == '{product}'",
    "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0",
    "device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(semver('540.0.0'))",
    "device.attributes['gpu.nvidia.com'].productName.lowerAscii().contains('h100')",
    "device.attributes['gpu.nvidia.com'].architecture == 'Ampere'",
    "device.attributes['gpu.nvidia.com'].profile == '{profile}'",
)


def _selector(b: _Build) -> str:
    product = b.rng.choice(b.products) if b.products else PRODUCTS[0]
    profile = product.profiles[0][0] if product.profiles else "1g.10gb"
    return b.rng.choice(SELECTORS).format(product=product.name, profile=profile)


def _device_classes(b: _Build) -> None:
    rng, world = b.rng, b.world
    base = f"device.driver == '{DRIVER}'"
    kinds = [("gpu", f"{base} && device.attributes['{DRIVER}'].type == 'gpu'")]
    if b.mig_devices or rng.random() < 0.3:
        kinds.append(("mig", f"{base} && device.attributes['{DRIVER}'].type == 'mig'"))
    if rng.random() < 0.3:
        kinds.append(("any", base))
    for kind, expression in kinds:
        name = f"{world}-{kind}.nvidia.com"
        ext = None
        if kind == "gpu" and rng.random() < 0.3:
            if rng.random() < 0.3:
                # The name the NVIDIA chart sets: cluster-wide, so this world runs alone.
                ext, b.scenario.alone = "nvidia.com/gpu", True
            else:
                ext = f"oracle.gpu-policy.io/{world}-gpu"
            b.ext_names.append(ext)
            b.scenario.features.append("extended-resource-name")
        exprs = [expression]
        if rng.random() < 0.15:
            exprs.append(_selector(b))
        b.scenario.world.append(
            device_class(name, *exprs, extended=ext, labels={WORLD_LABEL: world})
        )
        b.classes.append(name)


# --- the pod -----------------------------------------------------------------------------------


def _exactly(b: _Build) -> dict[str, Any]:
    rng = b.rng
    body: dict[str, Any] = {"deviceClassName": rng.choice(b.classes)}
    if rng.random() < 0.1:
        body["allocationMode"] = "All"
        b.scenario.features.append("allocation-all")
    else:
        body["count"] = rng.choice((1, 1, 1, 2, 2, 3))
    if rng.random() < 0.3:
        body["selectors"] = [{"cel": {"expression": _selector(b)}}]
        b.scenario.features.append("selector")
    if rng.random() < 0.15:
        body["tolerations"] = [
            {"key": DEVICE_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}
        ]
        b.scenario.features.append("device-toleration")
    return body


def _request(b: _Build, index: int) -> dict[str, Any]:
    if b.rng.random() < 0.2:
        b.scenario.features.append("first-available")
        subs = []
        for j in range(b.rng.choice((2, 3))):
            body = _exactly(b)
            body.pop("allocationMode", None)
            body.setdefault("count", 1)
            subs.append({"name": f"s{j}", **body})
        return {"name": f"r{index}", "firstAvailable": subs}
    return {"name": f"r{index}", "exactly": _exactly(b)}


def _claim_devices(b: _Build) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A claim's requests, and its constraints."""
    requests = [_request(b, i) for i in range(b.rng.choice((1, 1, 1, 2)))]
    constraints: list[dict[str, Any]] = []
    if b.rng.random() < 0.2:
        attribute = b.rng.choice(
            (
                "gpu.nvidia.com/productName",
                "gpu.nvidia.com/parentUUID",
                "gpu.nvidia.com/driverVersion",
                "gpu.nvidia.com/architecture",
            )
        )
        constraints = [{"matchAttribute": attribute}]
        b.scenario.features.append("match-attribute")
    elif b.rng.random() < 0.05:
        constraints = [{"distinctAttribute": "gpu.nvidia.com/uuid"}]
        b.scenario.features.append("distinct-attribute")
    return requests, constraints


def _container_resources(b: _Build) -> dict[str, str]:
    rng = b.rng
    # Device-plugin names where a node advertises them, or where a class serves them; else
    # the pod would be refused for a reason of no interest in nearly every DRA world.
    choices = ["none"] + (["plugin", "plugin"] if b.plugin_names or not b.classes else [])
    if b.classes:
        choices += ["deviceclass"]
    if b.ext_names:
        choices += ["ext", "ext"]
    what = rng.choice(choices)
    n = str(rng.choice((1, 1, 1, 2, 3)))
    if what == "plugin":
        name = rng.choice(b.plugin_names or ["nvidia.com/gpu"])
        b.scenario.features.append("plugin-request")
        return {name: n}
    if what == "deviceclass":
        b.scenario.features.append("deviceclass-request")
        return {f"deviceclass.resource.kubernetes.io/{rng.choice(b.classes)}": n}
    if what == "ext":
        b.scenario.features.append("extended-request")
        return {rng.choice(b.ext_names): n}
    return {}


def _container(name: str, limits: dict[str, str], claims: list[str]) -> dict[str, Any]:
    return ctr(name, limits=limits or None, claims=claims, image="registry.example/cuda:12")


def _pod_claims(b: _Build, namespace: str) -> list[dict[str, Any]]:
    """The pod's claims: ResourceClaims and ResourceClaimTemplates added to the manifests."""
    rng, world = b.rng, b.world
    pod_claims: list[dict[str, Any]] = []
    if b.classes and rng.random() < 0.6:
        for i in range(rng.choice((1, 1, 2))):
            name, full_name = f"c{i}", f"{world}-c{i}"
            requests, constraints = _claim_devices(b)
            if rng.random() < 0.35:
                b.scenario.manifests.append(
                    resource_claim(
                        full_name, *requests, constraints=constraints, namespace=namespace
                    )
                )
                pod_claims.append({"name": name, "resourceClaimName": full_name})
                b.scenario.features.append("claim")
            else:
                b.scenario.manifests.append(
                    claim_template(
                        full_name, *requests, constraints=constraints, namespace=namespace
                    )
                )
                pod_claims.append({"name": name, "resourceClaimTemplateName": full_name})
                b.scenario.features.append("claim-template")
    return pod_claims


def _pod(b: _Build) -> None:
    rng, world = b.rng, b.world
    namespace = f"oracle-{world}"
    pod_claims = _pod_claims(b, namespace)
    names = [c["name"] for c in pod_claims]
    containers = []
    for i in range(rng.choice((1, 1, 2))):
        uses = [c for c in names if rng.random() < 0.7] if names else []
        containers.append(_container(f"main{i}", _container_resources(b), uses))
    if names and not any(c["resources"].get("claims") for c in containers):
        containers[0]["resources"]["claims"] = [{"name": names[0]}]
    if not names and not any(c["resources"].get("limits") for c in containers):
        # A pod that asks for no GPU is not the webhook's to judge: give it one.
        while not containers[0]["resources"].get("limits"):
            containers[0]["resources"]["limits"] = _container_resources(b)
    init = []
    if rng.random() < 0.25:
        sidecar = rng.random() < 0.5
        c = _container("init0", _container_resources(b), [])
        if sidecar:
            c["restartPolicy"] = "Always"
        init.append(c)
        b.scenario.features.append("sidecar" if sidecar else "init-container")
    selector = {WORLD_LABEL: world}
    if b.products and rng.random() < 0.15:
        selector["nvidia.com/gpu.product"] = rng.choice(b.products).label
        b.scenario.features.append("product-selector")
    spec: dict[str, Any] = {"nodeSelector": selector, "terminationGracePeriodSeconds": 0}
    if init:
        spec["initContainers"] = init
    if pod_claims:
        spec["resourceClaims"] = pod_claims
    if b.tainted_nodes and rng.random() < 0.7:
        spec["tolerations"] = [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
        ]
    b.scenario.manifests.append(pod(*containers, name="gpu-pod", namespace=namespace, **spec))


def generate(seed: int, index: int) -> Scenario:
    """Scenario ``index`` of ``seed``: the same two numbers give the same objects."""
    rng = random.Random(f"{seed}/{index}")
    world = f"s{seed}-{index}"
    b = _Build(rng, world, Scenario(world))
    _node_groups(b)
    if any(o["kind"] == "ResourceSlice" for o in b.scenario.world) or rng.random() < 0.2:
        _device_classes(b)
    _pod(b)
    b.scenario.features = sorted(set(b.scenario.features))
    return b.scenario


def scenarios(seed: int, count: int, start: int = 0) -> list[Scenario]:
    """``count`` scenarios of ``seed``, from index ``start``."""
    return [generate(seed, i) for i in range(start, start + count)]


def copy_scenario(scenario: Scenario) -> Scenario:
    """A deep copy (the runner adds status and read-back objects to its own copy)."""
    return copy.deepcopy(scenario)
