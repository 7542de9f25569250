"""One recipe from the cluster's objects to the supply the allocator reads (supply/assemble.py).

Node groups of nodes that exist (one a node: labels, taints, allocatable extended resources,
the ResourceSlices it reaches) and of nodes that can appear (declared autoscaled pools,
Karpenter NodePools), and every caller (node dumps, the live view, the audit) building the
same supply from the same objects.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.objects import dra_gpu, nvidia_classes, resource_slice
from tests.support.paths import REPO
from webhook.files import cluster_from_text, load_inventory, load_policy
from webhook.kube.snapshot import live_view
from webhook.kube.source import ClusterState
from webhook.policy.dra import parse_slice
from webhook.policy.nodes import Taint
from webhook.policy.supply.assemble import DraObjects, assemble, template_slice

EXAMPLES = REPO / "examples" / "clusters"


def node(
    name: str,
    *,
    allocatable: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"taints": taints or []}
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
        "status": {"allocatable": {"cpu": "8", "memory": "64Gi", **(allocatable or {})}},
    }


def network_slice() -> dict[str, Any]:
    """Devices every node reaches (allNodes): a shared slice."""
    found = resource_slice("fabric", dra_gpu(9, product="NVIDIA H100 80GB HBM3"))
    del found["spec"]["nodeName"]
    found["spec"]["allNodes"] = True
    return found


@pytest.fixture(scope="module")
def policy():  # type: ignore[no-untyped-def]
    return load_policy(EXAMPLES / "autoscaled" / "policy.yaml")


def test_each_node_is_a_group_with_what_the_scheduler_reads(policy) -> None:  # type: ignore[no-untyped-def]
    nodes = [
        node(
            "t4-1",
            allocatable={"nvidia.com/gpu": "4", "example.com/nic": "2"},
            labels={"nvidia.com/gpu.product": "Tesla-T4-SHARED"},
            taints=[
                {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
                {"key": "soft", "effect": "PreferNoSchedule"},
            ],
        ),
        node("dra-1", unschedulable=True),
    ]
    dra = DraObjects(
        nvidia_classes(),
        [resource_slice("dra-1", dra_gpu(0), dra_gpu(1)), network_slice()],
    )
    supply = assemble(policy, nodes=nodes, source="test", dra=dra).supply
    assert supply is not None
    groups = {g.key: g for g in supply.groups}
    t4, dra_node = groups["node t4-1"], groups["node dra-1"]
    # Extended resources only, as counts; the scheduler's taint filter reads no
    # PreferNoSchedule; a cordon is the unschedulable taint.
    assert dict(t4.allocatable) == {"nvidia.com/gpu": 4, "example.com/nic": 2}
    assert t4.taints == (Taint("nvidia.com/gpu", "", "NoSchedule"),)
    assert t4.labels["nvidia.com/gpu.product"] == "Tesla-T4-SHARED"
    assert Taint("node.kubernetes.io/unschedulable", "", "NoSchedule") in dra_node.taints
    # A node-local slice reaches its node only; the shared one reaches every node.
    assert [s.name for s in dra_node.slices] == ["dra-1-gpu.nvidia.com", "fabric-gpu.nvidia.com"]
    assert [s.name for s in t4.slices] == ["fabric-gpu.nvidia.com"]
    assert set(supply.classes) == {"gpu.nvidia.com", "mig.nvidia.com"}
    # The autoscaled pools of the policy, at zero, are groups that can appear.
    at_zero = {g.key: g for g in supply.groups if g.can_appear}
    assert set(at_zero) == {"pool gpu-t4", "pool gpu-l4x4"}


def test_a_pool_at_zero_is_what_one_of_its_nodes_will_have(policy) -> None:  # type: ignore[no-untyped-def]
    supply = assemble(policy, nodes=[], source="no GPU node yet").supply
    assert supply is not None
    groups = {g.key: g for g in supply.groups}
    l4 = groups["pool gpu-l4x4"]
    assert l4.node_names == () and l4.bounds == (0, 2) and l4.can_appear
    assert dict(l4.allocatable) == {"nvidia.com/gpu": 4}
    assert l4.labels["nvidia.com/gpu.product"] == "NVIDIA-L4"
    # The taints the policy's tolerations are for: what its nodes are taken to carry.
    assert l4.taints == (Taint("nvidia.com/gpu", "", "NoSchedule"),)
    t4 = groups["pool gpu-t4"]
    # Shared 4 ways by config key t4: four slots, under the name the plugin advertises.
    assert sum(t4.allocatable.values()) == 4
    assert t4.labels["nvidia.com/device-plugin.config"] == "t4"


def test_a_pool_at_zero_with_a_device_class_publishes_its_devices(tmp_path: Path) -> None:
    policy_path = tmp_path / "policy.yaml"
    policy_path.write_text(
        """\
apiVersion: gpu-policy.io/v1alpha1
kind: SharingPolicy
metadata: {name: dra-pool}
spec:
  devicePlugin: {config: {version: v1, flags: {migStrategy: none}}}
  pools:
    - {name: h100, config: default, product: NVIDIA-H100-80GB-HBM3, gpusPerNode: 8,
       memoryMiB: 81559, minNodes: 0, maxNodes: 3, deviceClass: gpu.nvidia.com}
"""
    )
    policy = load_policy(policy_path)
    supply = assemble(
        policy, nodes=[], source="test", dra=DraObjects(device_classes=nvidia_classes())
    ).supply
    assert supply is not None
    (group,) = supply.groups
    assert group.key == "pool h100" and group.can_appear
    # Its GPUs come from DRA, not from a device plugin.
    assert dict(group.allocatable) == {}
    (published,) = group.slices
    assert published.node_name == group.node
    assert len(published.devices) == 8
    device = published.devices[0]
    assert device.driver == "gpu.nvidia.com"
    assert device.attribute("type") == "gpu"
    assert str(device.attribute("productName")).startswith("NVIDIA H100")
    assert published in supply.slices
    # The slice parses as the driver's would (every field the allocator reads).
    found, problems = parse_slice(template_slice(policy_pool(policy), "n"))
    assert found is not None and not problems


def policy_pool(policy):  # type: ignore[no-untyped-def]
    return assemble(policy, nodes=None, source="policy").pools[0]


def test_every_caller_builds_the_same_supply() -> None:
    """A node dump (review, plan, the server's --nodes) and the live view go through the one
    recipe: the same objects give the same node groups."""
    where = EXAMPLES / "mixed-t4-dra-h100"
    policy = load_policy(where / "policy.yaml")
    from_dump = load_inventory(policy, where / "nodes.yaml").supply
    dump = cluster_from_text((where / "nodes.yaml").read_text(), source="dump")
    dra = dump.dra()
    assert dra is not None
    state = ClusterState(
        nodes=tuple(dump.nodes),
        gpu_pods=(),
        configmap=None,
        configmap_ref=None,
        resource_versions={},
        synced=True,
        last_sync_monotonic=0.0,
        errors=0,
        watch_restarts=0,
        api_reachable=True,
        generation=1,
        built_monotonic=0.0,
        device_classes=tuple(dra.device_classes),
        resource_slices=tuple(dra.resource_slices),
        dra="DRA available",
        dra_available=True,
    )
    live = live_view(policy, state).inventory.supply
    assert from_dump is not None and live is not None
    shapes = [sorted((g.key, g.shape) for g in s.groups) for s in (from_dump, live)]
    assert shapes[0] == shapes[1]
    assert [g.key for g in from_dump.groups if g.slices] == ["node dgx-h100-01"]


def test_without_dra_objects_no_slices_and_no_classes(policy) -> None:  # type: ignore[no-untyped-def]
    found = assemble(
        policy, nodes=[node("a", allocatable={"nvidia.com/gpu": "1"})], source="test"
    ).supply
    assert found is not None
    assert found.classes == {} and found.slices == ()
