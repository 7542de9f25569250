"""The cases of docs/allocator.md's "What the old engine got wrong": each judged as
kube-scheduler v1.36.2 judges it on an empty cluster (the pure allocator, no webhook)."""

from __future__ import annotations

from typing import Any

from tests import objects as o
from tests.core.policy.allocator import world as w
from webhook.policy.allocator import fit_anywhere
from webhook.policy.allocator.result import Verdict

GPU_CLASS = o.device_class("gpu.nvidia.com", driver="gpu.nvidia.com")
GPU_EXTENDED = o.device_class("gpu.nvidia.com", driver="gpu.nvidia.com", extended="nvidia.com/gpu")


def verdict(*objs: dict[str, Any]) -> Verdict:
    """The verdict, the same with and without pruning (docs/allocator.md, "Pruning")."""
    plain = fit_anywhere(w.demand_of(objs), w.supply_of(objs), budget_s=5, prune=False)
    pruned = fit_anywhere(w.demand_of(objs), w.supply_of(objs), budget_s=5, prune=True)
    assert pruned == plain
    return pruned


def gpus(node_name: str, *devices: dict[str, Any], pool: str | None = None) -> dict[str, Any]:
    return o.resource_slice(node_name, *devices, name=f"{node_name}-gpus", pool=pool)


def two_containers(gpus: int, name: str) -> dict[str, Any]:
    """A pod of two containers asking for ``gpus`` GPUs each."""
    return o.pod(*(o.ctr(f"c{i}", limits={"nvidia.com/gpu": gpus}) for i in range(2)), name=name)


def test_containers_add_up_to_more_gpus_than_a_node_has() -> None:
    nodes = [o.node_object("gpu-1", gpus=2), o.node_object("gpu-2", gpus=2)]
    refused = verdict(*nodes, two_containers(2, "two"))
    assert refused.outcome == "does-not-fit"
    assert refused.closest is not None
    assert refused.closest.reason == "Insufficient nvidia.com/gpu"
    assert "4 in all" in refused.closest.detail and "has 2" in refused.closest.detail
    assert verdict(*nodes, two_containers(1, "one")).fits


def test_seed_003_one_gpu_per_node_two_containers_of_one() -> None:
    nodes = [o.node_object(f"gpu-{i}", gpus=1) for i in range(3)]
    assert not verdict(*nodes, two_containers(1, "p")).fits


def test_init_containers_take_the_max_not_the_sum() -> None:
    nodes = [o.node_object("gpu-1", gpus=2)]
    spec = o.pod(o.gpu(2), name="p")
    spec["spec"]["initContainers"] = [
        {"name": "warm", "resources": {"limits": {"nvidia.com/gpu": 2}}}
    ]
    assert verdict(*nodes, spec).fits
    spec["spec"]["initContainers"][0]["restartPolicy"] = "Always"  # a sidecar stays
    assert not verdict(*nodes, spec).fits


def test_extended_resource_and_claim_share_the_node_s_dra_gpus() -> None:
    world = [
        o.node_object("dra-1", gpus=None),
        GPU_EXTENDED,
        gpus("dra-1", o.device("gpu-0"), o.device("gpu-1")),
        o.resource_claim("one", o.exactly()),
    ]
    refused = verdict(*world, o.pod(o.gpu(2), name="p", claims=["one"]))
    assert refused.outcome == "does-not-fit"
    assert refused.closest is not None and refused.closest.reason == "cannot allocate all claims"
    assert verdict(*world, o.pod(o.gpu(2), name="p")).fits
    assert verdict(*world, o.pod(o.gpu(1), name="p", claims=["one"])).fits


def test_implicit_device_class_resource_name() -> None:
    world = [
        o.node_object("dra-1", gpus=None),
        GPU_CLASS,
        gpus("dra-1", o.device("gpu-0"), o.device("gpu-1")),
    ]
    name = "deviceclass.resource.kubernetes.io/gpu.nvidia.com"
    refused = verdict(*world, o.pod(o.ctr(limits={name: 3}), name="p"))
    assert refused.outcome == "does-not-fit"
    assert refused.closest is not None
    assert "asks for 3 devices of class gpu.nvidia.com" in refused.closest.detail
    assert "has 2 such device(s)" in refused.closest.detail
    assert verdict(*world, o.pod(o.ctr(limits={name: 2}), name="p")).fits


def test_match_attribute_without_two_such_devices() -> None:
    world = [
        o.node_object("dra-1", gpus=None),
        GPU_CLASS,
        gpus(
            "dra-1",
            o.device("gpu-0", {"pcieRoot": "pci0"}),
            o.device("gpu-1", {"pcieRoot": "pci1"}),
        ),
    ]
    together = o.resource_claim(
        "pair",
        o.exactly(count=2),
        constraints=[{"matchAttribute": "gpu.nvidia.com/pcieRoot"}],
    )
    refused = verdict(*world, together)
    assert refused.outcome == "does-not-fit"
    assert refused.closest is not None
    assert "matchAttribute gpu.nvidia.com/pcieRoot" in refused.closest.detail
    apart = o.resource_claim(
        "pair",
        o.exactly(count=2),
        constraints=[{"distinctAttribute": "gpu.nvidia.com/pcieRoot"}],
    )
    assert verdict(*world, apart).fits


def _reachable_from(node_name: str, name: str) -> dict[str, Any]:
    selector = {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
        ]
    }
    return o.resource_slice(
        None, o.device(name), name=f"nic-{name}", pool=f"fabric-{name}", nodeSelector=selector
    )


def test_network_devices_reachable_from_different_nodes() -> None:
    world = [
        o.node_object("a", gpus=None),
        o.node_object("b", gpus=None),
        GPU_CLASS,
        _reachable_from("a", "nic-0"),
        _reachable_from("b", "nic-1"),
    ]
    assert not verdict(*world, o.resource_claim("two", o.exactly(count=2))).fits
    assert verdict(*world, o.resource_claim("one", o.exactly(count=1))).fits


def test_no_schedule_device_taint() -> None:
    taint = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}
    world = [
        o.node_object("dra-1", gpus=None),
        GPU_CLASS,
        gpus("dra-1", o.device("gpu-0", taints=[taint])),
    ]
    refused = verdict(*world, o.resource_claim("c", o.exactly()))
    assert refused.outcome == "does-not-fit"
    assert refused.closest is not None
    assert "1 of them with a taint it does not tolerate" in refused.closest.detail
    toleration = {"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}
    tolerating = o.resource_claim("c", o.exactly(tolerations=[toleration]))
    assert verdict(*world, tolerating).fits


def _a30_with_mig() -> list[dict[str, Any]]:
    whole = o.device(
        "gpu-0",
        {"type": "gpu"},
        consumesCounters=[
            {"counterSet": "gpu-0-counters", "counters": {"memory": {"value": "24Gi"}}}
        ],
    )
    mig = o.device(
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
    devices = o.resource_slice("a30", whole, mig, mig2, name="a30-gpus", count=2)
    shared = o.resource_slice("a30", name="a30-counters", count=2, sharedCounters=counters)
    return [o.node_object("a30", gpus=None), GPU_CLASS, devices, shared]


def test_whole_a30_and_its_mig_partition_share_one_counter_set() -> None:
    world = _a30_with_mig()
    both = o.resource_claim(
        "c",
        o.exactly(
            name="whole",
            selectors=['device.attributes["gpu.nvidia.com"].type == "gpu"'],
        ),
        o.exactly(
            name="part",
            selectors=['device.attributes["gpu.nvidia.com"].type == "mig"'],
        ),
    )
    refused = verdict(*world, both)
    assert refused.outcome == "does-not-fit"
    assert refused.closest is not None
    assert "need more devices than node group a30 has" in refused.closest.detail
    assert "share counter sets" in refused.closest.detail
    two_parts = o.resource_claim(
        "c",
        o.exactly(
            name="parts",
            count=2,
            selectors=['device.attributes["gpu.nvidia.com"].type == "mig"'],
        ),
    )
    assert verdict(*world, two_parts).fits


def test_cel_runtime_error_fails_the_pod_even_where_another_node_fits() -> None:
    product = 'device.attributes["gpu.nvidia.com"].productName == "A100"'
    world = [
        o.node_object("good", gpus=None),
        o.node_object("bad", gpus=None),
        GPU_CLASS,
        gpus("good", o.device("gpu-0", {"productName": "A100"})),
        gpus("bad", o.device("gpu-0", {"uuid": "GPU-1"})),  # no productName: "no such key"
    ]
    refused = verdict(*world, o.resource_claim("c", o.exactly(selectors=[product])))
    assert refused.outcome == "does-not-fit"
    assert refused.closest is not None and refused.closest.error
    assert "CEL runtime error" in refused.closest.reason
    guarded = f'"productName" in device.attributes["gpu.nvidia.com"] && {product}'
    assert verdict(*world, o.resource_claim("c", o.exactly(selectors=[guarded]))).fits


def test_any_gpu_and_80gi_backtrack_on_h100_and_a100() -> None:
    memory = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0'
    world = [
        o.node_object("mixed", gpus=None),
        GPU_CLASS,
        gpus(
            "mixed",
            o.device("h100", {"productName": "H100"}, capacity={"memory": {"value": "80Gi"}}),
            o.device("a100", {"productName": "A100"}, capacity={"memory": {"value": "40Gi"}}),
        ),
    ]
    both = o.resource_claim(
        "c",
        o.exactly(name="any"),
        o.exactly(name="big", selectors=[memory]),
    )
    assert verdict(*world, both).fits


def test_node_selector_on_a_product_label_only_dra_nodes_lack() -> None:
    world = [
        o.node_object("labelled", labels={"nvidia.com/gpu.product": "A100"}, gpus=None),
        o.node_object("dra-only", gpus=None),
        GPU_EXTENDED,
        gpus("dra-only", o.device("gpu-0", {"productName": "H100"})),
    ]
    pinned = o.pod(o.gpu(1), name="p", nodeSelector={"nvidia.com/gpu.product": "H100"})
    refused = verdict(*world, pinned)
    assert refused.outcome == "does-not-fit"
    assert refused.closest is not None
    assert refused.closest.reason == "node(s) didn't match Pod's node affinity/selector"
