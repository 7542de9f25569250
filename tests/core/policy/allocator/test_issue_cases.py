"""The cases of docs/allocator.md's "What the old engine got wrong": each judged as
kube-scheduler v1.36.2 judges it on an empty cluster (the pure allocator, no webhook)."""

from __future__ import annotations

from typing import Any

from tests.core.policy.allocator import world as w
from webhook.policy.allocator import fit_anywhere
from webhook.policy.allocator.result import Verdict

GPU_CLASS = w.device_class("gpu.nvidia.com")
GPU_EXTENDED = w.device_class("gpu.nvidia.com", extended="nvidia.com/gpu")


def verdict(*objs: dict[str, Any]) -> Verdict:
    """The verdict, the same with and without pruning (docs/allocator.md, "Pruning")."""
    plain = fit_anywhere(w.demand_of(objs), w.supply_of(objs), budget_s=5, prune=False)
    pruned = fit_anywhere(w.demand_of(objs), w.supply_of(objs), budget_s=5, prune=True)
    assert pruned == plain
    return pruned


def gpus(node_name: str, *devices: dict[str, Any], pool: str | None = None) -> dict[str, Any]:
    return w.resource_slice(
        f"{node_name}-gpus", pool or node_name, list(devices), nodeName=node_name
    )


def test_containers_add_up_to_more_gpus_than_a_node_has() -> None:
    nodes = [w.node("gpu-1", gpu=2), w.node("gpu-2", gpu=2)]
    refused = verdict(*nodes, w.pod("two", {"nvidia.com/gpu": 2}, {"nvidia.com/gpu": 2}))
    assert refused.outcome == "does-not-fit"
    assert refused.closest is not None
    assert refused.closest.reason == "Insufficient nvidia.com/gpu"
    assert "4 in all" in refused.closest.detail and "has 2" in refused.closest.detail
    assert verdict(*nodes, w.pod("one", {"nvidia.com/gpu": 1}, {"nvidia.com/gpu": 1})).fits


def test_seed_003_one_gpu_per_node_two_containers_of_one() -> None:
    nodes = [w.node(f"gpu-{i}", gpu=1) for i in range(3)]
    assert not verdict(*nodes, w.pod("p", {"nvidia.com/gpu": 1}, {"nvidia.com/gpu": 1})).fits


def test_init_containers_take_the_max_not_the_sum() -> None:
    nodes = [w.node("gpu-1", gpu=2)]
    spec = w.pod("p", {"nvidia.com/gpu": 2})
    spec["spec"]["initContainers"] = [
        {"name": "warm", "resources": {"limits": {"nvidia.com/gpu": 2}}}
    ]
    assert verdict(*nodes, spec).fits
    spec["spec"]["initContainers"][0]["restartPolicy"] = "Always"  # a sidecar stays
    assert not verdict(*nodes, spec).fits


def test_extended_resource_and_claim_share_the_node_s_dra_gpus() -> None:
    world = [
        w.node("dra-1"),
        GPU_EXTENDED,
        gpus("dra-1", w.device("gpu-0"), w.device("gpu-1")),
        w.claim("one", w.exactly("gpu", "gpu.nvidia.com")),
    ]
    refused = verdict(*world, w.pod("p", {"nvidia.com/gpu": 2}, claims=["one"]))
    assert refused.outcome == "does-not-fit"
    assert refused.closest is not None and refused.closest.reason == "cannot allocate all claims"
    assert verdict(*world, w.pod("p", {"nvidia.com/gpu": 2})).fits
    assert verdict(*world, w.pod("p", {"nvidia.com/gpu": 1}, claims=["one"])).fits


def test_implicit_device_class_resource_name() -> None:
    world = [w.node("dra-1"), GPU_CLASS, gpus("dra-1", w.device("gpu-0"), w.device("gpu-1"))]
    name = "deviceclass.resource.kubernetes.io/gpu.nvidia.com"
    refused = verdict(*world, w.pod("p", {name: 3}))
    assert refused.outcome == "does-not-fit"
    assert refused.closest is not None
    assert "asks for 3 devices of class gpu.nvidia.com" in refused.closest.detail
    assert "has 2 such device(s)" in refused.closest.detail
    assert verdict(*world, w.pod("p", {name: 2})).fits


def test_match_attribute_without_two_such_devices() -> None:
    world = [
        w.node("dra-1"),
        GPU_CLASS,
        gpus(
            "dra-1",
            w.device("gpu-0", {"pcieRoot": "pci0"}),
            w.device("gpu-1", {"pcieRoot": "pci1"}),
        ),
    ]
    together = w.claim(
        "pair",
        w.exactly("gpu", "gpu.nvidia.com", 2),
        constraints=[{"matchAttribute": "gpu.nvidia.com/pcieRoot"}],
    )
    refused = verdict(*world, together)
    assert refused.outcome == "does-not-fit"
    assert refused.closest is not None
    assert "matchAttribute gpu.nvidia.com/pcieRoot" in refused.closest.detail
    apart = w.claim(
        "pair",
        w.exactly("gpu", "gpu.nvidia.com", 2),
        constraints=[{"distinctAttribute": "gpu.nvidia.com/pcieRoot"}],
    )
    assert verdict(*world, apart).fits


def _reachable_from(node_name: str, name: str) -> dict[str, Any]:
    selector = {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
        ]
    }
    return w.resource_slice(
        f"nic-{name}", f"fabric-{name}", [w.device(name)], nodeSelector=selector
    )


def test_network_devices_reachable_from_different_nodes() -> None:
    world = [
        w.node("a"),
        w.node("b"),
        GPU_CLASS,
        _reachable_from("a", "nic-0"),
        _reachable_from("b", "nic-1"),
    ]
    assert not verdict(*world, w.claim("two", w.exactly("gpu", "gpu.nvidia.com", 2))).fits
    assert verdict(*world, w.claim("one", w.exactly("gpu", "gpu.nvidia.com", 1))).fits


def test_no_schedule_device_taint() -> None:
    taint = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}
    world = [w.node("dra-1"), GPU_CLASS, gpus("dra-1", w.device("gpu-0", taints=[taint]))]
    refused = verdict(*world, w.claim("c", w.exactly("gpu", "gpu.nvidia.com")))
    assert refused.outcome == "does-not-fit"
    assert refused.closest is not None
    assert "1 of them with a taint it does not tolerate" in refused.closest.detail
    toleration = {"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}
    tolerating = w.claim("c", w.exactly("gpu", "gpu.nvidia.com", tolerations=[toleration]))
    assert verdict(*world, tolerating).fits


def _a30_with_mig() -> list[dict[str, Any]]:
    whole = w.device(
        "gpu-0",
        {"type": "gpu"},
        consumesCounters=[
            {"counterSet": "gpu-0-counters", "counters": {"memory": {"value": "24Gi"}}}
        ],
    )
    mig = w.device(
        "gpu-0-mig-1g-6gb-0",
        {"type": "mig"},
        consumesCounters=[
            {"counterSet": "gpu-0-counters", "counters": {"memory": {"value": "6Gi"}}}
        ],
    )
    mig2 = dict(mig, name="gpu-0-mig-1g-6gb-1")
    counters = [{"name": "gpu-0-counters", "counters": {"memory": {"value": "24Gi"}}}]
    # Since resource.k8s.io/v1 of 1.35, a pool's counter sets are published in a slice of
    # their own, beside the slices of the devices that consume them.
    devices = w.resource_slice("a30-gpus", "a30", [whole, mig, mig2], nodeName="a30")
    shared = w.resource_slice("a30-counters", "a30", [], nodeName="a30", sharedCounters=counters)
    for found in (devices, shared):
        found["spec"]["pool"]["resourceSliceCount"] = 2
    return [w.node("a30"), GPU_CLASS, devices, shared]


def test_whole_a30_and_its_mig_partition_share_one_counter_set() -> None:
    world = _a30_with_mig()
    both = w.claim(
        "c",
        w.exactly(
            "whole",
            "gpu.nvidia.com",
            selectors=['device.attributes["gpu.nvidia.com"].type == "gpu"'],
        ),
        w.exactly(
            "part",
            "gpu.nvidia.com",
            selectors=['device.attributes["gpu.nvidia.com"].type == "mig"'],
        ),
    )
    refused = verdict(*world, both)
    assert refused.outcome == "does-not-fit"
    assert refused.closest is not None
    assert "need more devices than node group a30 has" in refused.closest.detail
    assert "share counter sets" in refused.closest.detail
    two_parts = w.claim(
        "c",
        w.exactly(
            "parts",
            "gpu.nvidia.com",
            2,
            selectors=['device.attributes["gpu.nvidia.com"].type == "mig"'],
        ),
    )
    assert verdict(*world, two_parts).fits


def test_cel_runtime_error_fails_the_pod_even_where_another_node_fits() -> None:
    product = 'device.attributes["gpu.nvidia.com"].productName == "A100"'
    world = [
        w.node("good"),
        w.node("bad"),
        GPU_CLASS,
        gpus("good", w.device("gpu-0", {"productName": "A100"})),
        gpus("bad", w.device("gpu-0", {"uuid": "GPU-1"})),  # no productName: "no such key"
    ]
    refused = verdict(*world, w.claim("c", w.exactly("gpu", "gpu.nvidia.com", selectors=[product])))
    assert refused.outcome == "does-not-fit"
    assert refused.closest is not None and refused.closest.error
    assert "CEL runtime error" in refused.closest.reason
    guarded = f'"productName" in device.attributes["gpu.nvidia.com"] && {product}'
    assert verdict(
        *world, w.claim("c", w.exactly("gpu", "gpu.nvidia.com", selectors=[guarded]))
    ).fits


def test_any_gpu_and_80gi_backtrack_on_h100_and_a100() -> None:
    memory = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0'
    world = [
        w.node("mixed"),
        GPU_CLASS,
        gpus(
            "mixed",
            w.device("h100", {"productName": "H100"}, capacity={"memory": {"value": "80Gi"}}),
            w.device("a100", {"productName": "A100"}, capacity={"memory": {"value": "40Gi"}}),
        ),
    ]
    both = w.claim(
        "c",
        w.exactly("any", "gpu.nvidia.com"),
        w.exactly("big", "gpu.nvidia.com", selectors=[memory]),
    )
    assert verdict(*world, both).fits


def test_node_selector_on_a_product_label_only_dra_nodes_lack() -> None:
    world = [
        w.node("labelled", {"nvidia.com/gpu.product": "A100"}),
        w.node("dra-only"),
        GPU_EXTENDED,
        gpus("dra-only", w.device("gpu-0", {"productName": "H100"})),
    ]
    pinned = w.pod("p", {"nvidia.com/gpu": 1}, nodeSelector={"nvidia.com/gpu.product": "H100"})
    refused = verdict(*world, pinned)
    assert refused.outcome == "does-not-fit"
    assert refused.closest is not None
    assert refused.closest.reason == "node(s) didn't match Pod's node affinity/selector"
