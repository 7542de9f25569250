"""Nodes: as gpu-feature-discovery and the device plugin leave a GPU node, and as the kubelet
leaves a plain one.

:func:`gpu_node` carries what a real GPU node carries (the labels gpu-feature-discovery writes,
managedFields, images, conditions), so that trimming and the 5,000-node benchmark see objects
of a realistic size (about 8 KB of JSON each); :func:`gfd_node` is the same without the bulk;
:func:`cluster` makes many in a mix of set-ups. :func:`node_object` is a Node with the
capacity, allocatable and Ready condition a test names, for a real API server.
"""

from __future__ import annotations

import datetime as dt
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

# (product, memory MiB, family, MIG capable) as GFD writes them.
PRODUCTS: dict[str, tuple[str, int, str, bool]] = {
    "a100-80": ("NVIDIA-A100-SXM4-80GB", 81920, "ampere", True),
    "a100-40": ("NVIDIA-A100-SXM4-40GB", 40960, "ampere", True),
    "h100": ("NVIDIA-H100-80GB-HBM3", 81559, "hopper", True),
    "l20": ("NVIDIA-L20", 46068, "ada-lovelace", False),
    "t4": ("Tesla-T4", 15360, "turing", False),
}

_TS = "2025-01-01T00:00:00Z"


def _images(n: int) -> list[dict[str, Any]]:
    return [
        {
            "names": [
                f"registry.example.com/team-{i}/image-{i}@sha256:{i:064x}",
                f"registry.example.com/team-{i}/image-{i}:v1.{i}.0",
            ],
            "sizeBytes": 100_000_000 + i * 1_234_567,
        }
        for i in range(n)
    ]


def gpu_node(
    name: str,
    kind: str = "a100-80",
    *,
    gpus: int = 8,
    replicas: int = 1,
    rename: bool = False,
    mig_profile: str | None = None,
    config_key: str | None = None,
    extra_labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    heavy: bool = True,
) -> dict[str, Any]:
    """A Node as GFD and the device plugin leave it.

    ``replicas > 1`` means time-slicing: ``-SHARED`` product and N x gpus advertised
    (``nvidia.com/gpu.shared`` when ``rename``). ``mig_profile`` makes a mixed-strategy MIG
    node advertising ``nvidia.com/mig-<profile>`` (7 per GPU). ``heavy`` adds the bulk a
    real node has (managedFields, images, conditions, annotations).
    """
    product, memory, family, mig_capable = PRODUCTS[kind]
    labels: dict[str, str] = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": f"gpu-{kind}-x{gpus}",
        "topology.kubernetes.io/zone": f"zone-{zlib.crc32(name.encode()) % 3}",
        "nvidia.com/cuda.driver.major": "550",
        "nvidia.com/cuda.driver.minor": "127",
        "nvidia.com/cuda.runtime.major": "12",
        "nvidia.com/cuda.runtime.minor": "4",
        "nvidia.com/gfd.timestamp": "1735689600",
        "nvidia.com/mig.capable": str(mig_capable).lower(),
        # GFD (internal/lm/nvml.go newSharingLabeler): "true" only under an MPS config; the
        # nodes built here are time-sliced or not shared.
        "nvidia.com/mps.capable": "false",
        "feature.node.kubernetes.io/pci-10de.present": "true",
        "feature.node.kubernetes.io/kernel-version.major": "6",
    }
    allocatable: dict[str, str] = {
        "cpu": "95500m",
        "memory": "1031234560Ki",
        "ephemeral-storage": "1844083692Ki",
        "pods": "110",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
    }
    if mig_profile:
        res = f"nvidia.com/mig-{mig_profile}"
        labels.update(
            {
                "nvidia.com/mig.strategy": "mixed",
                f"{res}.product": f"{product}-MIG-{mig_profile}",
                f"{res}.count": str(gpus * 7),
                f"{res}.replicas": "1",
                f"{res}.sharing-strategy": "none",
                f"{res}.memory": str(memory // 8),
                f"{res}.multiprocessors": "14",
                f"{res}.slices.gi": "1",
                f"{res}.slices.ci": "1",
                "nvidia.com/gpu.count": str(gpus),
                "nvidia.com/gpu.replicas": "0",
                "nvidia.com/mig.config": "all-1g.10gb",
                "nvidia.com/mig.config.state": "success",
            }
        )
        allocatable[res] = str(gpus * 7)
    else:
        shared = replicas > 1
        labels.update(
            {
                "nvidia.com/gpu.product": product + ("-SHARED" if shared and not rename else ""),
                "nvidia.com/gpu.count": str(gpus),
                "nvidia.com/gpu.replicas": str(replicas),
                "nvidia.com/gpu.sharing-strategy": "time-slicing" if shared else "none",
                "nvidia.com/gpu.memory": str(memory),
                "nvidia.com/gpu.family": family,
                "nvidia.com/gpu.compute.major": "8",
                "nvidia.com/gpu.compute.minor": "0",
                "nvidia.com/gpu.machine": "DGX-A100",
            }
        )
        res = "nvidia.com/gpu.shared" if shared and rename else "nvidia.com/gpu"
        allocatable[res] = str(gpus * replicas)
    if config_key:
        labels["nvidia.com/device-plugin.config"] = config_key
    labels.update(extra_labels or {})
    node: dict[str, Any] = {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": f"00000000-0000-0000-0000-{zlib.crc32(name.encode()):012d}",
            "creationTimestamp": _TS,
            "labels": labels,
        },
        "spec": {"podCIDR": "10.244.3.0/24", "providerID": f"aws:///zone/{name}"},
        "status": {"capacity": dict(allocatable), "allocatable": allocatable},
    }
    if taints is None:
        taints = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    if taints:
        node["spec"]["taints"] = taints
    if heavy:
        node["metadata"]["annotations"] = {
            "node.alpha.kubernetes.io/ttl": "0",
            "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            "csi.volume.kubernetes.io/nodeid": '{"ebs.csi.aws.com":"i-0123456789abcdef0"}',
            "nfd.node.kubernetes.io/feature-labels": ",".join(sorted(labels)[:20]),
            "nfd.node.kubernetes.io/extended-resources": "",
        }
        node["metadata"]["managedFields"] = [
            {
                "manager": manager,
                "operation": "Update",
                "apiVersion": "v1",
                "time": _TS,
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {f"f:{k}": {} for k in labels}}},
            }
            for manager in ("kubelet", "gpu-feature-discovery", "nfd-master")
        ]
        node["status"].update(
            {
                "conditions": [
                    {
                        "type": t,
                        "status": "False" if t != "Ready" else "True",
                        "lastHeartbeatTime": _TS,
                        "lastTransitionTime": _TS,
                        "reason": f"Kubelet{t}",
                        "message": f"kubelet reports {t}",
                    }
                    for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
                ],
                "addresses": [
                    {"type": "InternalIP", "address": "10.0.3.17"},
                    {"type": "Hostname", "address": name},
                ],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "nodeInfo": {
                    "machineID": "0" * 32,
                    "systemUUID": "ec2a0000-0000-0000-0000-000000000000",
                    "bootID": "1" * 32,
                    "kernelVersion": "6.1.0-18-cloud-amd64",
                    "osImage": "Ubuntu 22.04.4 LTS",
                    "containerRuntimeVersion": "containerd://1.7.13",
                    "kubeletVersion": "v1.30.2",
                    "kubeProxyVersion": "",  # deprecated, still serialised (the models need it)
                    "operatingSystem": "linux",
                    "architecture": "amd64",
                },
                "images": _images(20),
            }
        )
    return node


def gfd_node(name: str, kind: str = "l20", **kwargs: Any) -> dict[str, Any]:
    """A GPU node as GFD labels it: one GPU, no taints and none of the bulk unless given
    (the keywords of :func:`gpu_node`)."""
    kwargs.setdefault("taints", [])
    kwargs.setdefault("heavy", False)
    kwargs.setdefault("gpus", 1)
    return gpu_node(name, kind, **kwargs)


def cluster(n: int) -> list[dict[str, Any]]:
    """``n`` realistic GPU nodes in a mix of set-ups (most plain A100/H100 nodes)."""
    nodes = []
    for i in range(n):
        slot = i % 10
        name = f"gpu-{i:05d}"
        if slot < 4:
            nodes.append(gpu_node(name, "a100-80", config_key="any"))
        elif slot < 6:
            nodes.append(gpu_node(name, "h100", config_key="any"))
        elif slot < 8:
            nodes.append(gpu_node(name, "l20", gpus=4, replicas=4, config_key="l20"))
        elif slot == 8:
            nodes.append(gpu_node(name, "a100-40", mig_profile="1g.5gb", config_key="a100-40gb"))
        else:
            nodes.append(gpu_node(name, "t4", gpus=1, replicas=4, rename=True, config_key="t4"))
    return nodes


def node_object(
    name: str,
    *,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    gpus: int | None = 1,
    resource: str = "nvidia.com/gpu",
    capacity: Mapping[str, str] | None = None,
    allocatable: Mapping[str, str] | None = None,
    ready: bool = True,
) -> dict[str, Any]:
    """A Node as the kubelet and the device plugin leave it (``status`` included).

    ``capacity`` defaults to 8 CPUs, 32 GiB, 110 pods plus ``gpus`` of ``resource`` (none when
    ``gpus`` is None); ``allocatable`` defaults to ``capacity``.
    """
    cap = {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"}
    if gpus is not None:
        cap[resource] = str(gpus)
    cap.update(capacity or {})
    alloc = dict(cap) if allocatable is None else {**cap, **allocatable}
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                **(labels or {}),
            },
        },
        "spec": {"taints": [dict(t) for t in taints]} if taints else {},
        "status": {
            "capacity": cap,
            "allocatable": alloc,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "KubeletReady" if ready else "KubeletNotReady",
                    "message": "kubelet is posting ready status",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
        },
    }


def cpu_node(name: str) -> dict[str, Any]:
    """A Node without GPUs, as the kubelet leaves it."""
    return node_object(name, gpus=None)
