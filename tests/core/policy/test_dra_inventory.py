"""The inventory from DRA beside the Nodes: pools of the devices DeviceClasses select, judged by
the same engine (webhook/policy/inventory.py, docs/dra.md)."""

from __future__ import annotations

from typing import Any

from tests.objects import GPU_CLASS_CEL, device_class, dra_gpu, gpu, pod, resource_slice
from tests.support.paths import REPO
from webhook.files import cluster_from_text, load_policy
from webhook.policy import inventory_from_nodes, review
from webhook.policy.dra import dra_snapshot
from webhook.policy.supply.assemble import OFFLINE_FIT_BUDGET_S, assemble

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
    return inventory_from_nodes(nodes, POLICY, source="test", dra=dra_snapshot(classes, slices))


GPU_CLASS = device_class("gpu.nvidia.com", GPU_CLASS_CEL, extended="nvidia.com/gpu")


def test_the_devices_a_class_selects_are_a_pool_under_its_extended_resource_name():
    found = inventory(
        [node("a"), node("b")],
        [GPU_CLASS],
        [resource_slice("a", dra_gpu(0), dra_gpu(1)), resource_slice("b", dra_gpu(0))],
    )
    (pool,) = found.pools
    (offer,) = pool.offers
    assert pool.name == "gpu.nvidia.com/NVIDIA-A100-SXM4-40GB"
    assert pool.nodes == ("a", "b") and pool.device_class == "gpu.nvidia.com"
    assert pool.origin.describe() == "ResourceSlice pool a and 1 more"
    assert (offer.form.name, offer.product, offer.devices, offer.most_on_a_node) == (
        "nvidia.com/gpu",
        "NVIDIA-A100-SXM4-40GB",
        3,
        2,
    )
    assert offer.memory_mib == 40960
    assert "through DRA DeviceClass gpu.nvidia.com" in found.summary()
    assert found.dra is not None and found.disagreements == ()


def test_a_class_without_an_extended_resource_name_is_no_pool():
    mig = device_class("mig.nvidia.com", "device.attributes['gpu.nvidia.com'].type == 'mig'")
    found = inventory([node("a")], [mig], [resource_slice("a", dra_gpu(0))])
    assert found.pools == ()


def test_where_a_device_plugin_serves_the_name_its_dra_devices_do_not_count_and_it_is_reported():
    found = inventory(
        [node("both", {"nvidia.com/gpu": "1"}), node("dra")],
        [GPU_CLASS],
        [resource_slice("both", dra_gpu(0), dra_gpu(1)), resource_slice("dra", dra_gpu(0))],
    )
    dra_pool = next(p for p in found.pools if p.device_class)
    assert dra_pool.nodes == ("dra",) and dra_pool.offers[0].devices == 1
    (problem,) = found.disagreements
    assert problem.startswith("node both: nvidia.com/gpu comes from its device plugin")
    assert "serves it from the device plugin alone there" in problem


def test_devices_every_node_reaches_add_to_each_node():
    fabric = resource_slice("x", dra_gpu(5))
    del fabric["spec"]["nodeName"]
    fabric["spec"]["allNodes"] = True
    found = inventory([node("a")], [GPU_CLASS], [resource_slice("a", dra_gpu(0)), fabric])
    (offer,) = found.pools[0].offers
    assert (offer.devices, offer.most_on_a_node) == (2, 2)


def test_a_slice_node_selector_picks_nodes_by_their_labels():
    rack = resource_slice("rack", dra_gpu(0), dra_gpu(1))
    del rack["spec"]["nodeName"]
    term = {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}
    rack["spec"]["nodeSelector"] = {"nodeSelectorTerms": [term]}
    found = inventory([node("in", rack="r1"), node("out", rack="r2")], [GPU_CLASS], [rack])
    assert found.pools[0].nodes == ("in",)


def test_a_selector_that_does_not_compile_is_a_disagreement_and_selects_nothing():
    broken = device_class("broken", "device.driver ==", extended="nvidia.com/gpu")
    found = inventory([node("a")], [broken], [resource_slice("a", dra_gpu(0))])
    assert found.pools == ()
    assert any("does not compile" in d for d in found.disagreements)


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
    assert failed.rule == "gpu-resource-offered"
    assert "no node has that many: the most one node offers is 8" in failed.message
