"""The allocator with what the cluster uses now (``Usage``): the audit's "does it fit now"."""

from __future__ import annotations

from typing import Any

from tests import objects as o
from tests.core.policy.allocator import world as w
from webhook.policy.allocator import fit_anywhere
from webhook.policy.allocator.result import Verdict
from webhook.policy.allocator.usage import EMPTY, Usage

GPU_CLASS = o.device_class("gpu.nvidia.com", driver="gpu.nvidia.com")
DRIVER = "gpu.nvidia.com"


def _verdict(objs: list[dict[str, Any]], usage: Usage = EMPTY) -> Verdict:
    wanted = [o for o in objs if o["kind"] in ("Pod", "ResourceClaim")]
    return fit_anywhere(w.demand_of(wanted), w.supply_of(objs), budget_s=5.0, usage=usage)


def _two_gpu_node(name: str) -> list[dict[str, Any]]:
    devices = [o.device("gpu-0"), o.device("gpu-1")]
    return [o.node_object(name, gpus=None), o.resource_slice(name, *devices, name=f"{name}-gpus")]


def test_allocated_devices_are_in_use() -> None:
    world = [
        *_two_gpu_node("a"),
        GPU_CLASS,
        o.resource_claim("c", o.exactly()),
    ]
    assert _verdict(world).fits  # the empty cluster: the webhook's question
    one = Usage(devices=frozenset({(DRIVER, "a", "gpu-0")}))
    assert _verdict(world, one).fits
    both = Usage(devices=frozenset({(DRIVER, "a", "gpu-0"), (DRIVER, "a", "gpu-1")}))
    refused = _verdict(world, both)
    assert refused.outcome == "does-not-fit"
    assert refused.closest is not None and refused.closest.reason == "cannot allocate all claims"


def test_a_full_node_leaves_its_twin_to_fit() -> None:
    # Nodes of one shape are judged once on an empty cluster; in use, each on its own.
    world = [
        *_two_gpu_node("a"),
        *_two_gpu_node("b"),
        GPU_CLASS,
        o.resource_claim("c", o.exactly(count=2)),
    ]
    usage = Usage(devices=frozenset({(DRIVER, "a", "gpu-0")}))
    found = _verdict(world, usage)
    assert found.fits and found.group == "b"
    answers = dict(found.answers)
    assert not answers["a"].fits and answers["b"].fits


def test_bound_pods_hold_extended_resources() -> None:
    world = [o.node_object("a", gpus=2), o.pod(o.gpu(2), name="p")]
    assert _verdict(world).fits
    held = _verdict(world, Usage(requested={"a": {"nvidia.com/gpu": 1}}))
    assert held.outcome == "does-not-fit"
    assert held.closest is not None
    assert held.closest.reason == "Insufficient nvidia.com/gpu"
    assert "node group a has 2 of which bound pods request 1" in held.closest.detail
    # What is held on another node changes nothing here.
    assert _verdict(world, Usage(requested={"b": {"nvidia.com/gpu": 2}})).fits


def test_an_allocated_partition_consumes_the_whole_gpus_counters() -> None:
    counters = {"counterSet": "gpu-0-counters", "counters": {"memory": {"value": "24Gi"}}}
    part = {"counterSet": "gpu-0-counters", "counters": {"memory": {"value": "6Gi"}}}
    devices = [
        o.device("gpu-0", {"type": "gpu"}, consumesCounters=[counters]),
        o.device("gpu-0-mig-0", {"type": "mig"}, consumesCounters=[part]),
    ]
    sets = [{"name": "gpu-0-counters", "counters": {"memory": {"value": "24Gi"}}}]
    slices = [
        o.resource_slice("a30", *devices, name="a30-gpus", count=2),
        o.resource_slice("a30", name="a30-counters", count=2, sharedCounters=sets),
    ]
    whole = o.resource_claim(
        "c",
        o.exactly(
            selectors=['device.attributes["gpu.nvidia.com"].type == "gpu"'],
        ),
    )
    world = [o.node_object("a30", gpus=None), GPU_CLASS, *slices, whole]
    assert _verdict(world).fits
    # The partition is allocated to another claim: its 6Gi are gone from the counter set,
    # so the whole GPU (24Gi) cannot be allocated, though no claim holds it.
    used = Usage(devices=frozenset({(DRIVER, "a30", "gpu-0-mig-0")}))
    assert _verdict(world, used).outcome == "does-not-fit"
