"""Cases of upstream's allocator tests, ported as table tests.

Each case names the case of ``structured/internal/allocatortesting/allocator_testing.go``
(k8s.io/dynamic-resource-allocation v0.36.2, ``TestAllocator``) it ports: the same claims,
classes, slices and node, and upstream's expectation: a result (fits), no result (does not
fit) or an error (the scheduler fails the pod). Cases that need devices allocated already are
left out: the webhook judges an empty cluster.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests import objects as o
from tests.core.policy.allocator import world as w
from webhook.policy.allocator import fit

A = "driver-a"
B = "driver-b"
NODE = o.node_object("node-1", labels={"region": "region-1"}, gpus=None)
CLASS_A = o.device_class("class-a", driver=A)
CLASS_B = o.device_class("class-b", driver=B)


def one_device(
    name: str = "slice-1",
    pool: str = "pool-1",
    driver: str = A,
    node: str | None = "node-1",
    **spec: Any,
) -> dict[str, Any]:
    return o.resource_slice(node, o.device("device-1"), name=name, pool=pool, driver=driver, **spec)


def network_attached(region: str) -> dict[str, Any]:
    """A slice of one device reachable from the nodes of ``region``, named by no node."""
    terms = [{"matchExpressions": [{"key": "region", "operator": "In", "values": [region]}]}]
    return one_device(node=None, nodeSelector={"nodeSelectorTerms": terms})


def memory(name: str, size: str) -> dict[str, Any]:
    return o.device(name, capacity={"memory": {"value": size}})


def at_least(size: str) -> str:
    return f'device.capacity["{A}"].memory.compareTo(quantity("{size}")) >= 0'


def sub(name: str, cls: str, count: int = 1, **fields: Any) -> dict[str, Any]:
    body = {"name": name, "deviceClassName": cls, "count": count, **fields}
    if "selectors" in fields:
        body["selectors"] = [{"cel": {"expression": e}} for e in fields["selectors"]]
    return body


def counters(
    name: str, pool: str, sets: dict[str, dict[str, str]], node: str | None = None, **spec: Any
) -> dict[str, Any]:
    shared = [
        {"name": n, "counters": {k: {"value": v} for k, v in c.items()}} for n, c in sets.items()
    ]
    return o.resource_slice(node, name=name, pool=pool, driver=A, sharedCounters=shared, **spec)


def sharing_8gi(*devices: dict[str, Any]) -> list[dict[str, Any]]:
    """Pool pool-1 of node-1 in two slices: ``devices``, and the counter set counter-set-1 of
    8Gi of memory they consume."""
    return [
        o.resource_slice("node-1", *devices, name="slice-1", pool="pool-1", driver=A, count=2),
        counters("slice-2", "pool-1", {"counter-set-1": {"memory": "8Gi"}}, "node-1", count=2),
    ]


def consuming(name: str, counter_set: str, **amounts: str) -> dict[str, Any]:
    return o.device(
        name,
        consumesCounters=[
            {"counterSet": counter_set, "counters": {k: {"value": v} for k, v in amounts.items()}}
        ],
    )


def pool_of(count: int, *slices: dict[str, Any]) -> list[dict[str, Any]]:
    for found in slices:
        found["spec"]["pool"]["resourceSliceCount"] = count
    return list(slices)


TAINT_NO_SCHEDULE = {"key": "taint-key", "value": "taint-value", "effect": "NoSchedule"}
TAINT_NO_EXECUTE = {"key": "taint-key", "value": "taint-value-2", "effect": "NoExecute"}
TOLERATE_NO_EXECUTE = {"key": "taint-key", "operator": "Exists", "effect": "NoExecute"}

FITS, NOT, ERROR = "fits", "does-not-fit", "error"


def small_and_large(first: str, second: str) -> list[dict[str, Any]]:
    """``small-and-large``: a request for 1Gi and one for 2Gi, devices of both sizes."""
    sizes = {"1Gi": "device-1", "2Gi": "device-2"}
    devices = [memory(sizes[first], first), memory(sizes[second], second)]
    return [
        o.resource_claim(
            "claim-0",
            o.exactly("class-a", name="req-0", selectors=[at_least("1Gi")]),
            o.exactly("class-a", name="req-1", selectors=[at_least("2Gi")]),
        ),
        CLASS_A,
        o.resource_slice("node-1", *devices, name="slice-1", pool="pool-1", driver=A),
    ]


def shareable(value: int, *, policy: dict[str, Any] | None = None) -> dict[str, Any]:
    """A device that allows multiple allocations, with capacity ``capacity-0``; by default
    the request policy of ``withCapacityRequestPolicyRange``: default 2, range 2..4 step 2."""
    policy = policy or {"default": "2", "validRange": {"min": "2", "step": "2", "max": "4"}}
    capacity = {"capacity-0": {"value": str(value), "requestPolicy": policy}}
    return o.device("device-1", allowMultipleAllocations=True, capacity=capacity)


def asking(amount: int, claim_name: str = "claim-0") -> dict[str, Any]:
    """A claim for one device of class-a and ``amount`` of its capacity-0."""
    capacity = {"requests": {"capacity-0": str(amount)}}
    return o.resource_claim(claim_name, o.exactly("class-a", name="req-0", capacity=capacity))


def two_tainted() -> dict[str, Any]:
    """``tainted-two-devices``: one device tainted NoSchedule, one NoExecute."""
    devices = [
        o.device("device-1", taints=[TAINT_NO_SCHEDULE]),
        o.device("device-2", taints=[TAINT_NO_EXECUTE]),
    ]
    return o.resource_slice("node-1", *devices, name="slice-1", pool="pool-1", driver=A)


CASES: dict[str, tuple[list[dict[str, Any]], str, str]] = {
    "simple": (
        [o.resource_claim("claim-0", o.exactly("class-a", name="req-0")), CLASS_A, one_device()],
        FITS,
        "",
    ),
    "other-node": (
        [
            o.resource_claim("claim-0", o.exactly("class-a", name="req-0")),
            CLASS_A,
            one_device(node="node-2"),
        ],
        NOT,
        "",
    ),
    "small-and-large": (small_and_large("1Gi", "2Gi"), FITS, ""),
    # The large device comes first: taken for the small request, then given back.
    "small-and-large-backtrack-requests": (small_and_large("2Gi", "1Gi"), FITS, ""),
    "devices-split-across-different-slices": (
        [
            o.resource_claim("claim-0", o.exactly("class-a", name="req-0", count=2)),
            CLASS_A,
            one_device("slice-1", "pool-1"),
            one_device("slice-2", "pool-2"),
        ],
        FITS,
        "",
    ),
    "duplicate-slice": (
        [
            o.resource_claim("claim-0", o.exactly("class-a", name="req-0")),
            CLASS_A,
            *pool_of(2, one_device("slice-1"), one_device("slice-1-2")),
        ],
        ERROR,  # both slices of the pool name their device device-1: the pool is invalid
        "invalid resource pools were encountered",
    ),
    "not-enough-suitable-devices": (
        [
            o.resource_claim("claim-0", o.exactly("class-a", name="req-0", count=2)),
            CLASS_A,
            one_device(),
        ],
        NOT,
        "",
    ),
    "unknown-class": (
        [o.resource_claim("claim-0", o.exactly("class-b", name="req-0")), CLASS_A, one_device()],
        ERROR,
        "could not retrieve device class class-b",
    ),
    "all-devices-single": (
        [
            o.resource_claim("claim-0", o.exactly("class-a", name="req-0", allocationMode="All")),
            CLASS_A,
            one_device(),
        ],
        FITS,
        "",
    ),
    "all-devices-of-the-incomplete-pool": (
        [
            o.resource_claim("claim-0", o.exactly("class-a", name="req-0", allocationMode="All")),
            CLASS_A,
            *pool_of(2, one_device()),
        ],
        ERROR,
        "is currently being updated",
    ),
    "all-devices-no-slices": (
        [
            o.resource_claim("claim-0", o.exactly("class-a", name="req-0", allocationMode="All")),
            CLASS_A,
        ],
        NOT,
        "",
    ),
    "network-attached-device": (
        [
            o.resource_claim("claim-0", o.exactly("class-a", name="req-0")),
            CLASS_A,
            network_attached("region-1"),
        ],
        FITS,
        "",
    ),
    "unsuccessful-allocation-network-attached-device": (
        [
            o.resource_claim("claim-0", o.exactly("class-a", name="req-0")),
            CLASS_A,
            network_attached("region-2"),
        ],
        NOT,
        "",
    ),
    "local-and-network-attached-devices": (
        [
            o.resource_claim("claim-0", o.exactly("class-a", name="req-0", count=2)),
            CLASS_A,
            one_device(),
            one_device("slice-2", "pool-2", node=None, allNodes=True),
        ],
        FITS,
        "",
    ),
    "several-different-drivers": (
        [
            o.resource_claim(
                "claim-0", o.exactly("class-a", name="req-0"), o.exactly("class-b", name="req-1")
            ),
            CLASS_A,
            CLASS_B,
            one_device(),
            one_device("slice-2", driver=B),
        ],
        FITS,
        "",
    ),
    "with-constraint-non-existent-attribute": (
        [
            o.resource_claim(
                "claim-0",
                o.exactly("class-a", name="req-0"),
                constraints=[{"matchAttribute": f"{A}/no-such-attribute"}],
            ),
            CLASS_A,
            one_device(),
        ],
        NOT,
        "",
    ),
    "with-constraint-not-matching-int-attribute": (
        [
            o.resource_claim(
                "claim-0",
                o.exactly("class-a", name="req-0", count=2),
                constraints=[{"matchAttribute": f"{A}/numa"}],
            ),
            CLASS_A,
            o.resource_slice(
                "node-1",
                o.device("device-1", {"numa": 1}),
                o.device("device-2", {"numa": 2}),
                name="slice-1",
                pool="pool-1",
                driver=A,
            ),
        ],
        NOT,
        "",
    ),
    "with-constraint-for-request-retry": (
        [
            o.resource_claim(
                "claim-0",
                o.exactly("class-a", name="req-0"),
                o.exactly("class-a", name="req-1"),
                constraints=[{"requests": ["req-0"], "matchAttribute": f"{A}/numa"}],
            ),
            CLASS_A,
            o.resource_slice(
                "node-1",
                o.device("device-1"),
                o.device("device-2", {"numa": 1}),
                name="slice-1",
                pool="pool-1",
                driver=A,
            ),
        ],
        FITS,  # req-0 must take device-2 (device-1 has no numa): the search backtracks
        "",
    ),
    "invalid-CEL-one-device": (
        [
            o.resource_claim(
                "claim-0", o.exactly("class-a", name="req-0", selectors=["noSuchVar"])
            ),
            CLASS_A,
            one_device(),
        ],
        ERROR,
        "undeclared reference",  # as upstream: a compile error
    ),
    "too-many-devices-single-request": (
        [
            o.resource_claim("claim-0", o.exactly("class-a", name="req-0", count=500)),
            CLASS_A,
            one_device(),
        ],
        ERROR,
        "exceeds the claim limit of 32",
    ),
    "prioritized-list-first-unavailable": (
        [
            o.resource_claim(
                "claim-0",
                {
                    "name": "req-0",
                    "firstAvailable": [sub("sub-0", "class-b"), sub("sub-1", "class-a")],
                },
            ),
            CLASS_A,
            CLASS_B,
            one_device(),
        ],
        FITS,
        "",
    ),
    "prioritized-list-non-available": (
        [
            o.resource_claim(
                "claim-0",
                {
                    "name": "req-0",
                    "firstAvailable": [sub("sub-0", "class-b", 2), sub("sub-1", "class-a", 2)],
                },
            ),
            CLASS_A,
            CLASS_B,
            one_device(),
            one_device("slice-2", "pool-2", driver=B),
        ],
        NOT,
        "",
    ),
    "prioritized-list-with-backtracking": (
        [
            o.resource_claim(
                "claim-0",
                {
                    "name": "req-0",
                    "firstAvailable": [
                        sub("sub-0", "class-a", selectors=[at_least("8Gi")]),
                        sub("sub-1", "class-a", selectors=[at_least("4Gi")]),
                    ],
                },
                o.exactly("class-a", name="req-1", selectors=[at_least("8Gi")]),
            ),
            CLASS_A,
            o.resource_slice(
                "node-1", memory("device-1", "8Gi"), name="slice-1", pool="pool-1", driver=A
            ),
            o.resource_slice(
                "node-1", memory("device-2", "4Gi"), name="slice-2", pool="pool-2", driver=A
            ),
        ],
        FITS,
        "",
    ),
    "prioritized-list-too-many-in-first-subrequest": (
        [
            o.resource_claim(
                "claim-0",
                {
                    "name": "req-0",
                    "firstAvailable": [sub("sub-0", "class-b", 500), sub("sub-1", "class-a")],
                },
            ),
            CLASS_A,
            CLASS_B,
            one_device(),
        ],
        FITS,
        "",
    ),
    "partitionable-devices-single-device": (
        [
            o.resource_claim("claim-0", o.exactly("class-a", name="req-0")),
            CLASS_A,
            *sharing_8gi(consuming("device-1", "counter-set-1", memory="4Gi")),
        ],
        FITS,
        "",
    ),
    "partitionable-devices-multiple-devices (over the counters)": (
        [
            o.resource_claim("claim-0", o.exactly("class-a", name="req-0", count=2)),
            CLASS_A,
            *sharing_8gi(
                consuming("device-1", "counter-set-1", memory="4Gi"),
                consuming("device-2", "counter-set-1", memory="6Gi"),
            ),
        ],
        NOT,
        "",
    ),
    "partitionable-devices-per-device-node-selection-nodename": (
        [
            o.resource_claim("claim-0", o.exactly("class-a", name="req-0")),
            CLASS_A,
            o.resource_slice(
                None,
                o.device("device-1", nodeName="node-2"),
                o.device("device-2", nodeName="node-1"),
                name="slice-1",
                pool="pool-1",
                driver=A,
                perDeviceNodeSelection=True,
            ),
        ],
        FITS,
        "",
    ),
    "tainted-two-devices": (
        [o.resource_claim("claim-0", o.exactly("class-a", name="req-0")), CLASS_A, two_tainted()],
        NOT,
        "",
    ),
    "tainted-two-devices-tolerated": (
        [
            o.resource_claim(
                "claim-0", o.exactly("class-a", name="req-0", tolerations=[TOLERATE_NO_EXECUTE])
            ),
            CLASS_A,
            two_tainted(),
        ],
        FITS,
        "",
    ),
    "tainted-no-effect": (
        [
            o.resource_claim("claim-0", o.exactly("class-a", name="req-0")),
            CLASS_A,
            o.resource_slice(
                "node-1",
                o.device("device-1", taints=[{"key": "taint-key", "value": "v", "effect": "None"}]),
                name="slice-1",
                pool="pool-1",
                driver=A,
            ),
        ],
        FITS,
        "",
    ),
    "tainted-all-devices-single": (
        [
            o.resource_claim("claim-0", o.exactly("class-a", name="req-0", allocationMode="All")),
            CLASS_A,
            o.resource_slice(
                "node-1",
                o.device("device-1", taints=[TAINT_NO_SCHEDULE]),
                name="slice-1",
                pool="pool-1",
                driver=A,
            ),
        ],
        NOT,
        "",
    ),
    "with-constraint": (
        [
            o.resource_claim(
                "claim-0",
                o.exactly("class-a", name="req-0"),
                o.exactly("class-a", name="req-1"),
                constraints=[
                    {"matchAttribute": f"{A}/numa"},
                    {"matchAttribute": f"{A}/driverVersion"},
                    {"matchAttribute": f"{A}/stringAttribute"},
                    {"matchAttribute": f"{A}/boolAttribute"},
                ],
            ),
            CLASS_A,
            o.resource_slice(
                "node-1",
                *[
                    o.device(
                        name,
                        {
                            "driverVersion": "v:1.0.0",
                            "numa": 1,
                            "stringAttribute": "value",
                            "boolAttribute": True,
                        },
                    )
                    for name in ("device-1", "device-2")
                ],
                name="slice-1",
                pool="pool-1",
                driver=A,
            ),
        ],
        FITS,
        "",
    ),
    "separate-claims-share-device (without admin access)": (
        [
            o.resource_claim("claim-0", o.exactly("class-a", name="req-0")),
            o.resource_claim("claim-1", o.exactly("class-a", name="req-0")),
            CLASS_A,
            one_device(),
        ],
        NOT,
        "",
    ),
    "admin-access-enabled (two claims, one device)": (
        [
            o.resource_claim("claim-0", o.exactly("class-a", name="req-0", adminAccess=True)),
            o.resource_claim("claim-1", o.exactly("class-a", name="req-0", adminAccess=True)),
            CLASS_A,
            one_device(),
        ],
        FITS,
        "",
    ),
    "consumable-capacity-multi-allocatable-device-with-range-policy-with-capacity-request": (
        [
            asking(1),
            asking(1, "claim-1"),
            CLASS_A,
            o.resource_slice("node-1", shareable(4), name="slice-1", pool="pool-1", driver=A),
        ],
        FITS,  # both rounded up to 2: the device's 4 hold them
        "",
    ),
    "consumable-capacity-multi-allocatable-device-with-range-policy-step": (
        [
            asking(3),
            CLASS_A,
            o.resource_slice("node-1", shareable(4), name="slice-1", pool="pool-1", driver=A),
        ],
        FITS,  # 3 rounded up to 4
        "",
    ),
    "consumable-capacity-multi-allocatable-device-with-exceeded-consumable-capacity-request": (
        [
            asking(1),
            asking(2, "claim-1"),
            CLASS_A,
            o.resource_slice("node-1", shareable(2), name="slice-1", pool="pool-1", driver=A),
        ],
        NOT,
        "",
    ),
    "consumable-capacity-multi-allocatable-device-with-request-over-max-sharing-policy": (
        [
            asking(6),
            CLASS_A,
            o.resource_slice("node-1", shareable(10), name="slice-1", pool="pool-1", driver=A),
        ],
        NOT,  # the policy's max is 4, whatever the device has
        "",
    ),
}


@pytest.mark.parametrize("prune", [False, True], ids=["plain", "pruned"])
@pytest.mark.parametrize("name", list(CASES))
def test_upstream_case(name: str, prune: bool) -> None:
    objs, expected, message = CASES[name]
    supply = w.supply_of([NODE, *objs])
    result = fit(w.demand_of(objs), supply.groups[0], supply, budget_s=5, prune=prune)
    if expected == ERROR:
        assert result.outcome == "does-not-fit"
        assert message in result.reason
        return
    assert result.outcome == expected, (result.reason, result.detail)
    assert not result.error


@pytest.mark.parametrize("name", list(CASES))
def test_pruning_changes_no_answer(name: str) -> None:
    # Outcome, reason, detail and error: the counting before the search only skips searches
    # that find nothing (docs/allocator.md, "Pruning").
    objs, _, _ = CASES[name]
    supply = w.supply_of([NODE, *objs])
    demand = w.demand_of(objs)
    plain = fit(demand, supply.groups[0], supply, budget_s=5, prune=False)
    assert fit(demand, supply.groups[0], supply, budget_s=5, prune=True) == plain
