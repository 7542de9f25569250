"""Node groups a demand cannot tell apart are judged once; what it reads still tells them
apart (docs/allocator.md, "Node groups")."""

from __future__ import annotations

from tests.policy.allocator.world import (
    claim,
    demand_of,
    device,
    device_class,
    exactly,
    node,
    pod,
    resource_slice,
    supply_of,
)
from webhook.policy.allocator import fit_anywhere

GPU_CLASS = device_class("gpu.nvidia.com", extended="nvidia.com/gpu")


def dra_nodes(count: int) -> list[dict]:
    out: list[dict] = [GPU_CLASS]
    for i in range(count):
        name = f"node-{i}"
        out.append(node(name, {"zone": f"z{i % 2}"}))
        devices = [
            device(f"gpu-{j}", {"uuid": f"GPU-{i}-{j}", "productName": "A100"}) for j in range(2)
        ]
        out.append(resource_slice(f"{name}-gpus", name, devices, nodeName=name))
    return out


def test_nodes_alike_but_for_names_and_uuids_share_one_judgement() -> None:
    world = dra_nodes(20)
    verdict = fit_anywhere(demand_of([pod("p", {"nvidia.com/gpu": 3})]), supply_of(world))
    assert verdict.outcome == "does-not-fit"
    assert len(verdict.answers) == 20
    assert len({id(answer) for _, answer in verdict.answers}) == 1


def test_a_selector_on_a_uuid_tells_the_nodes_apart() -> None:
    world = dra_nodes(20)
    wanted = claim(
        "c",
        exactly(
            "gpu",
            "gpu.nvidia.com",
            selectors=['device.attributes["gpu.nvidia.com"].uuid == "GPU-13-1"'],
        ),
    )
    verdict = fit_anywhere(demand_of([wanted]), supply_of([*world, wanted]))
    assert verdict.fits and verdict.group == "node-13"
    assert [g for g, answer in verdict.answers if answer.fits] == ["node-13"]


def test_a_node_selector_tells_the_zones_apart() -> None:
    world = dra_nodes(4)
    pinned = pod("p", {"nvidia.com/gpu": 1}, nodeSelector={"zone": "z1"})
    verdict = fit_anywhere(demand_of([pinned]), supply_of(world))
    assert [g for g, answer in verdict.answers if answer.fits] == ["node-1", "node-3"]


def test_a_search_past_its_budget_is_unknown_not_refused() -> None:
    # 11 of 24 devices for one request, then one no device matches for the other: as the
    # scheduler's, the search tries every combination of the 11 (millions) before giving up.
    devices = [device(f"gpu-{j}", {"index": j}) for j in range(24)]
    world = [
        node("big"),
        GPU_CLASS,
        resource_slice("big-gpus", "big", devices, nodeName="big"),
    ]
    hard = claim(
        "c",
        exactly("a", "gpu.nvidia.com", 11),
        exactly(
            "b", "gpu.nvidia.com", 1, selectors=['device.attributes["gpu.nvidia.com"].index > 100']
        ),
    )
    verdict = fit_anywhere(demand_of([hard]), supply_of([*world, hard]), budget_s=0.001)
    assert verdict.outcome == "unknown"
    assert not verdict.fits
