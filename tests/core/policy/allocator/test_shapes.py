"""Node groups a demand cannot tell apart are judged once; what it reads still tells them
apart (docs/allocator.md, "Node groups")."""

from __future__ import annotations

from tests import objects as o
from tests.core.policy.allocator import world as w
from webhook.policy.allocator import fit_anywhere

GPU_CLASS = o.device_class("gpu.nvidia.com", driver="gpu.nvidia.com", extended="nvidia.com/gpu")


def dra_nodes(count: int) -> list[dict]:
    out: list[dict] = [GPU_CLASS]
    for i in range(count):
        name = f"node-{i}"
        out.append(o.node_object(name, labels={"zone": f"z{i % 2}"}, gpus=None))
        devices = [
            o.device(f"gpu-{j}", {"uuid": f"GPU-{i}-{j}", "productName": "A100"}) for j in range(2)
        ]
        out.append(o.resource_slice(name, *devices, name=f"{name}-gpus"))
    return out


def test_nodes_alike_but_for_names_and_uuids_share_one_judgement() -> None:
    world = dra_nodes(20)
    verdict = fit_anywhere(w.demand_of([o.pod(o.gpu(3), name="p")]), w.supply_of(world))
    assert verdict.outcome == "does-not-fit"
    assert len(verdict.answers) == 20
    assert len({id(answer) for _, answer in verdict.answers}) == 1


def test_a_selector_on_a_uuid_tells_the_nodes_apart() -> None:
    world = dra_nodes(20)
    wanted = o.resource_claim(
        "c",
        o.exactly(
            selectors=['device.attributes["gpu.nvidia.com"].uuid == "GPU-13-1"'],
        ),
    )
    verdict = fit_anywhere(w.demand_of([wanted]), w.supply_of([*world, wanted]))
    assert verdict.fits and verdict.group == "node-13"
    assert [g for g, answer in verdict.answers if answer.fits] == ["node-13"]


def test_a_node_selector_tells_the_zones_apart() -> None:
    world = dra_nodes(4)
    pinned = o.pod(o.gpu(1), name="p", nodeSelector={"zone": "z1"})
    verdict = fit_anywhere(w.demand_of([pinned]), w.supply_of(world))
    assert [g for g, answer in verdict.answers if answer.fits] == ["node-1", "node-3"]


def _big_node(*devices: dict) -> list[dict]:
    return [
        o.node_object("big", gpus=None),
        GPU_CLASS,
        o.resource_slice("big", *devices, name="big-gpus"),
    ]


def _eleven_then_none() -> dict:
    """11 of 24 devices for one request, then one that no device matches."""
    return o.resource_claim(
        "c",
        o.exactly(name="a", count=11),
        o.exactly(name="b", selectors=['device.attributes["gpu.nvidia.com"].index > 100']),
    )


def test_a_search_past_its_budget_is_unknown_not_refused() -> None:
    # The plain port, as the scheduler's search: it tries every combination of 11 of the 24
    # devices (millions) for the first request before giving up on the second.
    world = _big_node(*(o.device(f"gpu-{j}", {"index": j}) for j in range(24)))
    hard = _eleven_then_none()
    verdict = fit_anywhere(
        w.demand_of([hard]), w.supply_of([*world, hard]), budget_s=0.001, prune=False
    )
    assert verdict.outcome == "unknown"
    assert not verdict.fits


def test_pruning_refuses_at_once_what_the_search_could_not_finish() -> None:
    # The same claim: counting proves that no device is left for the second request, which
    # is the scheduler's answer (its search has seconds; the port's runs out of half a
    # second, trying millions of combinations).
    world = _big_node(*(o.device(f"gpu-{j}", {"index": j}) for j in range(24)))
    hard = _eleven_then_none()
    supply = w.supply_of([*world, hard])
    plain = fit_anywhere(w.demand_of([hard]), supply, budget_s=0.5, prune=False)
    assert plain.outcome == "unknown"
    verdict = fit_anywhere(w.demand_of([hard]), supply, budget_s=0.5)
    assert verdict.outcome == "does-not-fit"
    assert verdict.closest is not None
    assert "request b asks for 1 device of class" in verdict.closest.detail
    assert "has 0 such device(s)" in verdict.closest.detail


def test_a_search_counting_cannot_cut_short_still_runs_out_of_time() -> None:
    # 23 devices of group 1 and one of group 2 (last); 11 devices for one request, one of
    # group 2 for the other, all of one group: enough devices for each request and for both,
    # so nothing is proven by counting, and the search tries the combinations of 11 of the
    # 23 before giving up.
    groups = [1] * 23 + [2]
    world = _big_node(*(o.device(f"gpu-{j:02d}", {"group": g}) for j, g in enumerate(groups)))
    hard = o.resource_claim(
        "c",
        o.exactly(name="a", count=11),
        o.exactly(name="b", selectors=['device.attributes["gpu.nvidia.com"].group == 2']),
        constraints=[{"matchAttribute": "gpu.nvidia.com/group"}],
    )
    verdict = fit_anywhere(w.demand_of([hard]), w.supply_of([*world, hard]), budget_s=0.001)
    assert verdict.outcome == "unknown"


def test_groups_left_when_time_runs_out_are_unknown_under_their_own_names() -> None:
    # Three nodes told apart by their GPU counts; the first search uses up the budget.
    world: list[dict] = [GPU_CLASS]
    for name, count in (("big", 24), ("mid", 23), ("small", 22)):
        world.append(o.node_object(name, gpus=None))
        devices = [o.device(f"gpu-{j}", {"index": j}) for j in range(count)]
        world.append(o.resource_slice(name, *devices, name=f"{name}-gpus"))
    hard = _eleven_then_none()
    verdict = fit_anywhere(
        w.demand_of([hard]), w.supply_of([*world, hard]), budget_s=0.001, prune=False
    )
    assert verdict.outcome == "unknown"
    assert [g for g, _ in verdict.answers] == ["big", "mid", "small"]
    assert [a.group for _, a in verdict.answers] == ["big", "mid", "small"]
    assert all(a.outcome == "unknown" for _, a in verdict.answers)
    assert verdict.answers[2][1].reason == "not judged: out of time"


def test_an_explanation_past_its_deadline_blames_no_part() -> None:
    # Searching parts of a refused demand has a deadline too; past it, the detail does not
    # name a request that was never shown to fail.
    import time

    from webhook.policy.allocator.explain import explain_claims
    from webhook.policy.allocator.pools import Node

    world = _big_node(*(o.device(f"gpu-{j}", {"index": j}) for j in range(24)))
    hard = _eleven_then_none()
    supply = w.supply_of([*world, hard])
    claims = w.demand_of([hard]).claims
    group = supply.groups[0]
    node_of = Node(group.node, group.labels)
    late = explain_claims(claims, group, supply, node_of, deadline=time.monotonic() - 1).text
    assert late == (
        "claim c: cannot be allocated on node group big; which request or constraint is at "
        "fault was not found in time"
    )
    in_time = explain_claims(claims, group, supply, node_of, deadline=time.monotonic() + 30).text
    assert "request b asks for 1 device of class" in in_time
