"""The cases of docs/allocator.md's "What the old engine got wrong": each judged as
kube-scheduler v1.36.2 judges it on an empty cluster (the pure allocator, no webhook)."""

from __future__ import annotations

from typing import Any

from tests.core.policy.allocator import world as w
from tests.objects import (
    ctr,
    device,
    device_class,
    exactly,
    gpu,
    node_object,
    pod,
    resource_claim,
    resource_slice,
)
from webhook.policy.allocator import fit_anywhere
from webhook.policy.allocator.result import Verdict

GPU_CLASS = device_class("gpu.nvidia.com", driver="gpu.nvidia.com")
GPU_EXTENDED = device_class("gpu.nvidia.com", driver="gpu.nvidia.com", extended="nvidia.com/gpu")


def verdict(*objs: dict[str, Any]) -> Verdict:
    """The verdict, the same with and without pruning (docs/allocator.md, "Pruning")."""
    plain = fit_anywhere(w.demand_of(objs), w.supply_of(objs), budget_s=5, prune=False)
    pruned = fit_anywhere(w.demand_of(objs), w.supply_of(objs), budget_s=5, prune=True)
    assert pruned == plain
    return pruned


def gpus(node_name: str, *devices: dict[str, Any], pool: str | None = None) -> dict[str, Any]:
    return resource_slice(node_name, *devices, name=f"{node_name}-gpus", pool=pool)


def test_containers_add_up_to_more_gpus_than_a_node_has() -> None:
    nodes = [node_object("gpu-1", gpus=2), node_object("gpu-2", gpus=2)]
    refused = verdict(
        *nodes,
        pod(
            ctr("c0", limits={"nvidia.com/gpu": 2}),
            ctr("c1", limits={"nvidia.com/gpu": 2}),
            name="two",
        ),
    )
    assert refused.outcome == "does-not-fit"
    assert refused.closest is not None
    assert refused.closest.reason == "Insufficient nvidia.com/gpu"
    assert "4 in all" in refused.closest.detail and "has 2" in refused.closest.detail
    assert verdict(
        *nodes,
        pod(
            ctr("c0", limits={"nvidia.com/gpu": 1}),
            ctr("c1", limits={"nvidia.com/gpu": 1}),
            name="one",
        ),
    ).fits


def test_seed_003_one_gpu_per_node_two_containers_of_one() -> None:
    nodes = [node_object(f"gpu-{i}", gpus=1) for i in range(3)]
    assert not verdict(
        *nodes,
        pod(
            ctr("c0", limits={"nvidia.com/gpu": 1}),
            ctr("c1", limits={"nvidia.com/gpu": 1}),
            name="p",
        ),
    ).fits


def test_init_containers_take_the_max_not_the_sum() -> None:
    nodes = [node_object("gpu-1", gpus=2)]
    spec = pod(gpu(2), name="p")
    spec["spec"]["initContainers"] = [
        {"name": "warm", "resources": {"limits": {"nvidia.com/gpu": 2}}}
    ]
    assert verdict(*nodes, spec).fits
    spec["spec"]["initContainers"][0]["restartPolicy"] = "Always"  # a sidecar stays
    assert not verdict(*nodes, spec).fits


def test_extended_resource_and_claim_share_the_node_s_dra_gpus() -> None:
    world = [
        node_object("dra-1", gpus=None),
        GPU_EXTENDED,
        gpus("dra-1", device("gpu-0"), device("gpu-1")),
        resource_claim("one", exactly("gpu.nvidia.com", name="gpu")),
    ]
    refused = verdict(*world, pod(gpu(2), name="p", claims=["one"]))
    assert refused.outcome == "does-not-fit"
    assert refused.closest is not None and refused.closest.reason == "cannot allocate all claims"
    assert verdict(*world, pod(gpu(2), name="p")).fits
    assert verdict(*world, pod(gpu(1), name="p", claims=["one"])).fits


def test_implicit_device_class_resource_name() -> None:
    world = [
        node_object("dra-1", gpus=None),
        GPU_CLASS,
        gpus("dra-1", device("gpu-0"), device("gpu-1")),
    ]
    name = "deviceclass.resource.kubernetes.io/gpu.nvidia.com"
    refused = verdict(*world, pod(ctr(limits={name: 3}), name="p"))
    assert refused.outcome == "does-not-fit"
    assert refused.closest is not None
    assert "asks for 3 device(s) of class gpu.nvidia.com" in refused.closest.detail
    assert "has 2 such device(s)" in refused.closest.detail
    assert verdict(*world, pod(ctr(limits={name: 2}), name="p")).fits


def test_match_attribute_without_two_such_devices() -> None:
    world = [
        node_object("dra-1", gpus=None),
        GPU_CLASS,
        gpus(
            "dra-1",
            device("gpu-0", {"pcieRoot": "pci0"}),
            device("gpu-1", {"pcieRoot": "pci1"}),
        ),
    ]
    together = resource_claim(
        "pair",
        exactly("gpu.nvidia.com", name="gpu", count=2),
        constraints=[{"matchAttribute": "gpu.nvidia.com/pcieRoot"}],
    )
    refused = verdict(*world, together)
    assert refused.outcome == "does-not-fit"
    assert refused.closest is not None
    assert "matchAttribute gpu.nvidia.com/pcieRoot" in refused.closest.detail
    apart = resource_claim(
        "pair",
        exactly("gpu.nvidia.com", name="gpu", count=2),
        constraints=[{"distinctAttribute": "gpu.nvidia.com/pcieRoot"}],
    )
    assert verdict(*world, apart).fits


def _reachable_from(node_name: str, name: str) -> dict[str, Any]:
    selector = {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
        ]
    }
    return resource_slice(
        None, device(name), name=f"nic-{name}", pool=f"fabric-{name}", nodeSelector=selector
    )


def test_network_devices_reachable_from_different_nodes() -> None:
    world = [
        node_object("a", gpus=None),
        node_object("b", gpus=None),
        GPU_CLASS,
        _reachable_from("a", "nic-0"),
        _reachable_from("b", "nic-1"),
    ]
    assert not verdict(
        *world, resource_claim("two", exactly("gpu.nvidia.com", name="gpu", count=2))
    ).fits
    assert verdict(
        *world, resource_claim("one", exactly("gpu.nvidia.com", name="gpu", count=1))
    ).fits


def test_no_schedule_device_taint() -> None:
    taint = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}
    world = [
        node_object("dra-1", gpus=None),
        GPU_CLASS,
        gpus("dra-1", device("gpu-0", taints=[taint])),
    ]
    refused = verdict(*world, resource_claim("c", exactly("gpu.nvidia.com", name="gpu")))
    assert refused.outcome == "does-not-fit"
    assert refused.closest is not None
    assert "1 of them with a taint it does not tolerate" in refused.closest.detail
    toleration = {"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}
    tolerating = resource_claim(
        "c", exactly("gpu.nvidia.com", name="gpu", tolerations=[toleration])
    )
    assert verdict(*world, tolerating).fits


def _a30_with_mig() -> list[dict[str, Any]]:
    whole = device(
        "gpu-0",
        {"type": "gpu"},
        consumesCounters=[
            {"counterSet": "gpu-0-counters", "counters": {"memory": {"value": "24Gi"}}}
        ],
    )
    mig = device(
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
    devices = resource_slice("a30", whole, mig, mig2, name="a30-gpus", count=2)
    shared = resource_slice("a30", name="a30-counters", count=2, sharedCounters=counters)
    return [node_object("a30", gpus=None), GPU_CLASS, devices, shared]


def test_whole_a30_and_its_mig_partition_share_one_counter_set() -> None:
    world = _a30_with_mig()
    both = resource_claim(
        "c",
        exactly(
            "gpu.nvidia.com",
            name="whole",
            selectors=['device.attributes["gpu.nvidia.com"].type == "gpu"'],
        ),
        exactly(
            "gpu.nvidia.com",
            name="part",
            selectors=['device.attributes["gpu.nvidia.com"].type == "mig"'],
        ),
    )
    refused = verdict(*world, both)
    assert refused.outcome == "does-not-fit"
    assert refused.closest is not None
    assert "need more devices than node group a30 has" in refused.closest.detail
    assert "share counter sets" in refused.closest.detail
    two_parts = resource_claim(
        "c",
        exactly(
            "gpu.nvidia.com",
            name="parts",
            count=2,
            selectors=['device.attributes["gpu.nvidia.com"].type == "mig"'],
        ),
    )
    assert verdict(*world, two_parts).fits


def test_cel_runtime_error_fails_the_pod_even_where_another_node_fits() -> None:
    product = 'device.attributes["gpu.nvidia.com"].productName == "A100"'
    world = [
        node_object("good", gpus=None),
        node_object("bad", gpus=None),
        GPU_CLASS,
        gpus("good", device("gpu-0", {"productName": "A100"})),
        gpus("bad", device("gpu-0", {"uuid": "GPU-1"})),  # no productName: "no such key"
    ]
    refused = verdict(
        *world, resource_claim("c", exactly("gpu.nvidia.com", name="gpu", selectors=[product]))
    )
    assert refused.outcome == "does-not-fit"
    assert refused.closest is not None and refused.closest.error
    assert "CEL runtime error" in refused.closest.reason
    guarded = f'"productName" in device.attributes["gpu.nvidia.com"] && {product}'
    assert verdict(
        *world, resource_claim("c", exactly("gpu.nvidia.com", name="gpu", selectors=[guarded]))
    ).fits


def test_any_gpu_and_80gi_backtrack_on_h100_and_a100() -> None:
    memory = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0'
    world = [
        node_object("mixed", gpus=None),
        GPU_CLASS,
        gpus(
            "mixed",
            device("h100", {"productName": "H100"}, capacity={"memory": {"value": "80Gi"}}),
            device("a100", {"productName": "A100"}, capacity={"memory": {"value": "40Gi"}}),
        ),
    ]
    both = resource_claim(
        "c",
        exactly("gpu.nvidia.com", name="any"),
        exactly("gpu.nvidia.com", name="big", selectors=[memory]),
    )
    assert verdict(*world, both).fits


def test_node_selector_on_a_product_label_only_dra_nodes_lack() -> None:
    world = [
        node_object("labelled", labels={"nvidia.com/gpu.product": "A100"}, gpus=None),
        node_object("dra-only", gpus=None),
        GPU_EXTENDED,
        gpus("dra-only", device("gpu-0", {"productName": "H100"})),
    ]
    pinned = pod(gpu(1), name="p", nodeSelector={"nvidia.com/gpu.product": "H100"})
    refused = verdict(*world, pinned)
    assert refused.outcome == "does-not-fit"
    assert refused.closest is not None
    assert refused.closest.reason == "node(s) didn't match Pod's node affinity/selector"
