"""DRA beside the Nodes: what DeviceClasses serve, read from the devices they select (no pool
of nodes: webhook/policy/supply/served.py), judged by the same engine (docs/dra.md)."""

from __future__ import annotations

from typing import Any

from tests.objects import GPU_CLASS_CEL, device_class, dra_gpu, gpu, pod, resource_slice
from tests.support.paths import REPO
from webhook.files import cluster_from_text, load_policy
from webhook.policy import review
from webhook.policy.supply.assemble import OFFLINE_FIT_BUDGET_S, DraObjects, assemble
from webhook.policy.supply.served import offered, served

ROOT = REPO
DRA_A100 = ROOT / "examples" / "clusters" / "dra-a100"
POLICY = load_policy(DRA_A100 / "policy.yaml")


def node(name: str, allocatable: dict[str, str] | None = None, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels)},
        "status": {"allocatable": {"cpu": "8", **(allocatable or {})}},
    }


def inventory(nodes: list[dict[str, Any]], classes: list[Any], slices: list[Any]):
    """The inventory and supply of ``nodes`` with the DRA objects, as every caller builds it."""
    return assemble(
        POLICY,
        nodes=nodes,
        source="test",
        dra=DraObjects(classes, slices),
        fit_budget_s=OFFLINE_FIT_BUDGET_S,
    )


GPU_CLASS = device_class("gpu.nvidia.com", GPU_CLASS_CEL, extended="nvidia.com/gpu")


def test_dra_devices_are_no_pool_of_nodes_but_what_a_class_serves():
    found = inventory(
        [node("a"), node("b")],
        [GPU_CLASS],
        [resource_slice("a", dra_gpu(0), dra_gpu(1)), resource_slice("b", dra_gpu(0))],
    )
    assert found.pools == ()
    through = served(found, "nvidia.com/gpu")
    assert through is not None and through.device_class == "gpu.nvidia.com"
    assert through.describe() == (
        "NVIDIA-A100-SXM4-40GB (3 devices) through DRA DeviceClass gpu.nvidia.com"
    )
    assert "nvidia.com/gpu: NVIDIA-A100-SXM4-40GB (3 devices) through DRA" in offered(found)
    assert found.dra is not None and found.disagreements == ()


def test_a_class_without_an_extended_resource_name_serves_no_name():
    mig = device_class("mig.nvidia.com", "device.attributes['gpu.nvidia.com'].type == 'mig'")
    found = inventory([node("a")], [mig], [resource_slice("a", dra_gpu(0))])
    assert served(found, "nvidia.com/gpu") is None
    assert offered(found) == "no GPU resources"


def test_where_a_device_plugin_serves_the_name_too_it_is_reported():
    found = inventory(
        [node("both", {"nvidia.com/gpu": "1"}), node("dra")],
        [GPU_CLASS],
        [resource_slice("both", dra_gpu(0), dra_gpu(1)), resource_slice("dra", dra_gpu(0))],
    )
    (problem,) = map(str, found.disagreements)
    assert problem.startswith("node both: nvidia.com/gpu comes from its device plugin")
    assert "(DeviceClass gpu.nvidia.com, 2 devices)" in problem
    assert "serves it from the device plugin alone there" in problem


def test_devices_every_node_reaches_count_on_each_node_that_has_the_plugin_too():
    fabric = resource_slice("x", dra_gpu(5))
    del fabric["spec"]["nodeName"]
    fabric["spec"]["allNodes"] = True
    found = inventory([node("a", {"nvidia.com/gpu": "1"})], [GPU_CLASS], [fabric])
    (problem,) = map(str, found.disagreements)
    assert "(DeviceClass gpu.nvidia.com, 1 devices)" in problem


def test_a_slice_node_selector_reaches_nodes_by_their_labels():
    rack = resource_slice("rack", dra_gpu(0), dra_gpu(1))
    del rack["spec"]["nodeName"]
    term = {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}
    rack["spec"]["nodeSelector"] = {"nodeSelectorTerms": [term]}
    plugin = {"nvidia.com/gpu": "1"}
    found = inventory(
        [node("in", plugin, rack="r1"), node("out", plugin, rack="r2")], [GPU_CLASS], [rack]
    )
    (problem,) = map(str, found.disagreements)
    assert problem.startswith("node in:")


def test_a_selector_that_does_not_compile_is_a_disagreement_and_selects_nothing():
    broken = device_class("broken", "device.driver ==", extended="nvidia.com/gpu")
    found = inventory([node("a")], [broken], [resource_slice("a", dra_gpu(0))])
    through = served(found, "nvidia.com/gpu")
    assert through is not None and through.kinds == ()
    assert any("does not compile" in str(d) for d in found.disagreements)


def test_a_product_the_devices_are_not_is_refused_with_what_they_are():
    found = inventory([node("a")], [GPU_CLASS], [resource_slice("a", dra_gpu(0))])
    h100 = pod(gpu(1))
    h100["metadata"]["annotations"] = {"gpu-policy.io/product": "NVIDIA-H100-80GB-HBM3"}
    refused = review(h100, policy=POLICY, inventory=found)
    (failed,) = [r for r in refused.results if r.status == "fail"]
    assert failed.rule == "gpu-node-selection"
    assert "NVIDIA-A100-SXM4-40GB (1 device) through DRA DeviceClass gpu.nvidia.com" in (
        failed.message
    )
    a100 = pod(gpu(1))
    a100["metadata"]["annotations"] = {"gpu-policy.io/product": "NVIDIA-A100-SXM4-40GB"}
    allowed = review(a100, policy=POLICY, inventory=found)
    # Allowed, and no node label written for devices no label is known to select.
    assert allowed.allowed
    assert not any("nodeSelector" in op["path"] for op in allowed.patch)


def test_a_dra_only_cluster_serves_a_gpu_pod_and_refuses_more_than_a_node_has():
    dump = cluster_from_text((DRA_A100 / "nodes.yaml").read_text(), source="nodes.yaml")
    found = assemble(
        POLICY, nodes=dump.nodes, source="dump", dra=dump.dra(), fit_budget_s=OFFLINE_FIT_BUDGET_S
    )
    assert review(pod(gpu(1)), policy=POLICY, inventory=found).allowed
    assert review(pod(gpu(8)), policy=POLICY, inventory=found).allowed
    refused = review(pod(gpu(9)), policy=POLICY, inventory=found)
    assert not refused.allowed
    (failed,) = [r for r in refused.results if r.status == "fail"]
    # The allocator's count, in the scheduler's terms: the claim it makes for nvidia.com/gpu.
    assert failed.rule == "gpu-resource-offered"
    assert 'container "main" (nvidia.com/gpu: 9) asks for 9 devices of class gpu.nvidia.com' in (
        failed.message
    )
    assert "no node has more than 8 matching devices (8 on node dgx-a100-01" in failed.message
