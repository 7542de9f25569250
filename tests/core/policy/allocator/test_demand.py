"""The demand model: a pod's requests added up as the scheduler adds them
(component-helpers ``PodRequests``), its claims read once, and the claim for extended
resources a DeviceClass serves, built per node as the dynamicresources plugin builds it."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from webhook.policy.demand import extended_resource_claim, pod_demand, pod_requests
from webhook.policy.dra import DeviceClass

GPU = "nvidia.com/gpu"


def container(name: str, gpus: int, **extra: Any) -> dict[str, Any]:
    return {"name": name, "resources": {"limits": {GPU: gpus}}, **extra}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"containers": [container("a", 1), container("b", 2)]}, 3),
        # an init container runs alone: the larger of it and the containers
        ({"initContainers": [container("i", 4)], "containers": [container("a", 1)]}, 4),
        ({"initContainers": [container("i", 1)], "containers": [container("a", 3)]}, 3),
        # a sidecar (restartable init container) runs beside the containers, and beside the
        # init containers after it
        (
            {
                "initContainers": [container("s", 1, restartPolicy="Always"), container("i", 3)],
                "containers": [container("a", 1)],
            },
            4,
        ),
        # a sidecar after an init container does not run beside it
        (
            {
                "initContainers": [container("i", 3), container("s", 1, restartPolicy="Always")],
                "containers": [container("a", 1)],
            },
            3,
        ),
        ({"containers": [container("a", 1)], "overhead": {GPU: 1}}, 2),
    ],
)
def test_pod_requests_add_up_as_the_scheduler_does(spec: dict[str, Any], expected: int) -> None:
    assert pod_requests(spec)[GPU] == expected


def test_requests_win_over_limits_and_pod_level_cpu_replaces_the_sum() -> None:
    spec = {
        "containers": [
            {"name": "a", "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": 2}}},
            {"name": "b", "resources": {"requests": {"cpu": "1"}}},
        ],
        "resources": {"requests": {"cpu": "4"}},
    }
    assert pod_requests(spec)["cpu"] == 4
    del spec["resources"]
    assert pod_requests(spec)["cpu"] == Fraction(3, 2)


def test_claims_are_read_once_and_missing_ones_named() -> None:
    spec = {
        "containers": [container("a", 0)],
        "resourceClaims": [
            {"name": "x", "resourceClaimName": "shared"},
            {"name": "y", "resourceClaimName": "shared"},
            {"name": "z", "resourceClaimTemplateName": "one-gpu"},
            {"name": "w", "resourceClaimTemplateName": "gone"},
        ],
    }
    request = {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "g"}}]}}
    specs = {
        ("ResourceClaim", "ns", "shared"): request,
        ("ResourceClaimTemplate", "ns", "one-gpu"): request,
    }
    demand = pod_demand(spec, "pod p", specs, "ns")
    assert [c.label for c in demand.claims] == [
        'claim "x" (ResourceClaim shared)',
        'claim "z" (ResourceClaimTemplate one-gpu)',
    ]
    assert demand.missing == ("ResourceClaimTemplate gone",)
    assert demand.claims[0].requests[0].exactly is not None
    assert demand.claims[0].requests[0].exactly.count == 1


def _classes(name: str) -> DeviceClass | None:
    return DeviceClass("gpu.nvidia.com", (), GPU) if name == GPU else None


def test_extended_claim_gives_init_containers_the_devices_of_later_containers() -> None:
    spec = {
        "initContainers": [container("i", 2)],
        "containers": [container("a", 1), container("b", 1)],
    }
    demand = pod_demand(spec, "pod p", {}, "ns")
    found, unfit = extended_resource_claim(demand.resources, demand.containers, _classes, {})
    assert unfit is None and found is not None
    # The containers' two devices serve the init container too: no extra request.
    counts = {r.name: r.exactly.count for r in found.requests if r.exactly is not None}
    assert counts == {"container-1-request-0": 1, "container-2-request-0": 1}
    spec["initContainers"] = [container("i", 3)]
    demand = pod_demand(spec, "pod p", {}, "ns")
    found, _ = extended_resource_claim(demand.resources, demand.containers, _classes, {})
    assert found is not None
    assert sum(r.exactly.count for r in found.requests if r.exactly is not None) == 3


def test_extended_claim_only_where_the_node_does_not_advertise_the_name() -> None:
    demand = pod_demand({"containers": [container("a", 2)]}, "pod p", {}, "ns")
    found, unfit = extended_resource_claim(demand.resources, demand.containers, _classes, {GPU: 8})
    assert found is None and unfit is None  # the device plugin serves it there
    other = pod_demand(
        {"containers": [{"name": "a", "resources": {"limits": {"example.com/fpga": 1}}}]},
        "pod p",
        {},
        "ns",
    )
    found, unfit = extended_resource_claim(other.resources, other.containers, _classes, {})
    assert found is None and unfit == "example.com/fpga"
