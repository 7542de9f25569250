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

from tests.policy.allocator.world import (
    claim,
    demand_of,
    device,
    device_class,
    exactly,
    node,
    resource_slice,
    supply_of,
)
from webhook.policy.allocator import fit

A = "driver-a"
B = "driver-b"
NODE = node("node-1", {"region": "region-1"})
CLASS_A = device_class("class-a", driver=A)
CLASS_B = device_class("class-b", driver=B)


def one_device(
    name: str = "slice-1", pool: str = "pool-1", driver: str = A, **spec: Any
) -> dict[str, Any]:
    spec.setdefault("nodeName", "node-1")
    return resource_slice(name, pool, [device("device-1")], driver=driver, **spec)


def memory(name: str, size: str) -> dict[str, Any]:
    return device(name, capacity={"memory": {"value": size}})


def at_least(size: str) -> str:
    return f'device.capacity["{A}"].memory.compareTo(quantity("{size}")) >= 0'


def sub(name: str, cls: str, count: int = 1, **fields: Any) -> dict[str, Any]:
    body = {"name": name, "deviceClassName": cls, "count": count, **fields}
    if "selectors" in fields:
        body["selectors"] = [{"cel": {"expression": e}} for e in fields["selectors"]]
    return body


def counters(name: str, pool: str, sets: dict[str, dict[str, str]], **spec: Any) -> dict[str, Any]:
    shared = [
        {"name": n, "counters": {k: {"value": v} for k, v in c.items()}} for n, c in sets.items()
    ]
    return resource_slice(name, pool, [], driver=A, sharedCounters=shared, **spec)


def consuming(name: str, counter_set: str, **amounts: str) -> dict[str, Any]:
    return device(
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

CASES: dict[str, tuple[list[dict[str, Any]], str, str]] = {
    "simple": ([claim("claim-0", exactly("req-0", "class-a")), CLASS_A, one_device()], FITS, ""),
    "other-node": (
        [claim("claim-0", exactly("req-0", "class-a")), CLASS_A, one_device(nodeName="node-2")],
        NOT,
        "",
    ),
    "small-and-large": (
        [
            claim(
                "claim-0",
                exactly("req-0", "class-a", selectors=[at_least("1Gi")]),
                exactly("req-1", "class-a", selectors=[at_least("2Gi")]),
            ),
            CLASS_A,
            resource_slice(
                "slice-1",
                "pool-1",
                [memory("device-1", "1Gi"), memory("device-2", "2Gi")],
                driver=A,
                nodeName="node-1",
            ),
        ],
        FITS,
        "",
    ),
    "small-and-large-backtrack-requests": (
        [
            claim(
                "claim-0",
                exactly("req-0", "class-a", selectors=[at_least("1Gi")]),
                exactly("req-1", "class-a", selectors=[at_least("2Gi")]),
            ),
            CLASS_A,
            resource_slice(
                "slice-1",
                "pool-1",
                [memory("device-2", "2Gi"), memory("device-1", "1Gi")],
                driver=A,
                nodeName="node-1",
            ),
        ],
        FITS,
        "",
    ),
    "devices-split-across-different-slices": (
        [
            claim("claim-0", exactly("req-0", "class-a", 2)),
            CLASS_A,
            *pool_of(2, one_device("slice-1"), one_device("slice-2") | {}),
        ],
        ERROR,  # both slices name their device device-1: the pool is invalid
        "invalid resource pools",
    ),
    "not-enough-suitable-devices": (
        [claim("claim-0", exactly("req-0", "class-a", 2)), CLASS_A, one_device()],
        NOT,
        "",
    ),
    "unknown-class": (
        [claim("claim-0", exactly("req-0", "class-b")), CLASS_A, one_device()],
        ERROR,
        "could not retrieve device class class-b",
    ),
    "all-devices-single": (
        [
            claim("claim-0", exactly("req-0", "class-a", allocationMode="All")),
            CLASS_A,
            one_device(),
        ],
        FITS,
        "",
    ),
    "all-devices-of-the-incomplete-pool": (
        [
            claim("claim-0", exactly("req-0", "class-a", allocationMode="All")),
            CLASS_A,
            *pool_of(2, one_device()),
        ],
        ERROR,
        "is currently being updated",
    ),
    "all-devices-no-slices": (
        [claim("claim-0", exactly("req-0", "class-a", allocationMode="All")), CLASS_A],
        NOT,
        "",
    ),
    "network-attached-device": (
        [
            claim("claim-0", exactly("req-0", "class-a")),
            CLASS_A,
            one_device(
                nodeName=None,
                nodeSelector={
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "region", "operator": "In", "values": ["region-1"]}
                            ]
                        }
                    ]
                },
            ),
        ],
        FITS,
        "",
    ),
    "unsuccessful-allocation-network-attached-device": (
        [
            claim("claim-0", exactly("req-0", "class-a")),
            CLASS_A,
            one_device(
                nodeName=None,
                nodeSelector={
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "region", "operator": "In", "values": ["region-2"]}
                            ]
                        }
                    ]
                },
            ),
        ],
        NOT,
        "",
    ),
    "local-and-network-attached-devices": (
        [
            claim("claim-0", exactly("req-0", "class-a", 2)),
            CLASS_A,
            one_device(),
            one_device("slice-2", "pool-2", nodeName=None, allNodes=True),
        ],
        FITS,
        "",
    ),
    "several-different-drivers": (
        [
            claim("claim-0", exactly("req-0", "class-a"), exactly("req-1", "class-b")),
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
            claim(
                "claim-0",
                exactly("req-0", "class-a"),
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
            claim(
                "claim-0",
                exactly("req-0", "class-a", 2),
                constraints=[{"matchAttribute": f"{A}/numa"}],
            ),
            CLASS_A,
            resource_slice(
                "slice-1",
                "pool-1",
                [device("device-1", {"numa": 1}), device("device-2", {"numa": 2})],
                driver=A,
                nodeName="node-1",
            ),
        ],
        NOT,
        "",
    ),
    "with-constraint-for-request-retry": (
        [
            claim(
                "claim-0",
                exactly("req-0", "class-a"),
                exactly("req-1", "class-a"),
                constraints=[{"requests": ["req-0"], "matchAttribute": f"{A}/numa"}],
            ),
            CLASS_A,
            resource_slice(
                "slice-1",
                "pool-1",
                [device("device-1"), device("device-2", {"numa": 1})],
                driver=A,
                nodeName="node-1",
            ),
        ],
        FITS,  # req-0 must take device-2 (device-1 has no numa): the search backtracks
        "",
    ),
    "invalid-CEL-one-device": (
        [
            claim("claim-0", exactly("req-0", "class-a", selectors=["noSuchVar"])),
            CLASS_A,
            one_device(),
        ],
        ERROR,
        "selector #0: CEL",  # a compile error upstream (undeclared reference)
    ),
    "too-many-devices-single-request": (
        [claim("claim-0", exactly("req-0", "class-a", 500)), CLASS_A, one_device()],
        ERROR,
        "exceeds the claim limit of 32",
    ),
    "prioritized-list-first-unavailable": (
        [
            claim(
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
            claim(
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
            claim(
                "claim-0",
                {
                    "name": "req-0",
                    "firstAvailable": [
                        sub("sub-0", "class-a", selectors=[at_least("8Gi")]),
                        sub("sub-1", "class-a", selectors=[at_least("4Gi")]),
                    ],
                },
                exactly("req-1", "class-a", selectors=[at_least("8Gi")]),
            ),
            CLASS_A,
            resource_slice(
                "slice-1", "pool-1", [memory("device-1", "8Gi")], driver=A, nodeName="node-1"
            ),
            resource_slice(
                "slice-2", "pool-2", [memory("device-2", "4Gi")], driver=A, nodeName="node-1"
            ),
        ],
        FITS,
        "",
    ),
    "prioritized-list-too-many-in-first-subrequest": (
        [
            claim(
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
            claim("claim-0", exactly("req-0", "class-a")),
            CLASS_A,
            *pool_of(
                2,
                resource_slice(
                    "slice-1",
                    "pool-1",
                    [consuming("device-1", "counter-set-1", memory="4Gi")],
                    driver=A,
                    nodeName="node-1",
                ),
                counters(
                    "slice-2", "pool-1", {"counter-set-1": {"memory": "8Gi"}}, nodeName="node-1"
                ),
            ),
        ],
        FITS,
        "",
    ),
    "partitionable-devices-multiple-devices (over the counters)": (
        [
            claim("claim-0", exactly("req-0", "class-a", 2)),
            CLASS_A,
            *pool_of(
                2,
                resource_slice(
                    "slice-1",
                    "pool-1",
                    [
                        consuming("device-1", "counter-set-1", memory="4Gi"),
                        consuming("device-2", "counter-set-1", memory="6Gi"),
                    ],
                    driver=A,
                    nodeName="node-1",
                ),
                counters(
                    "slice-2", "pool-1", {"counter-set-1": {"memory": "8Gi"}}, nodeName="node-1"
                ),
            ),
        ],
        NOT,
        "",
    ),
    "partitionable-devices-per-device-node-selection-nodename": (
        [
            claim("claim-0", exactly("req-0", "class-a")),
            CLASS_A,
            resource_slice(
                "slice-1",
                "pool-1",
                [
                    device("device-1", nodeName="node-2"),
                    device("device-2", nodeName="node-1"),
                ],
                driver=A,
                perDeviceNodeSelection=True,
            ),
        ],
        FITS,
        "",
    ),
    "tainted-two-devices": (
        [
            claim("claim-0", exactly("req-0", "class-a")),
            CLASS_A,
            resource_slice(
                "slice-1",
                "pool-1",
                [
                    device("device-1", taints=[TAINT_NO_SCHEDULE]),
                    device("device-2", taints=[TAINT_NO_EXECUTE]),
                ],
                driver=A,
                nodeName="node-1",
            ),
        ],
        NOT,
        "",
    ),
    "tainted-two-devices-tolerated": (
        [
            claim("claim-0", exactly("req-0", "class-a", tolerations=[TOLERATE_NO_EXECUTE])),
            CLASS_A,
            resource_slice(
                "slice-1",
                "pool-1",
                [
                    device("device-1", taints=[TAINT_NO_SCHEDULE]),
                    device("device-2", taints=[TAINT_NO_EXECUTE]),
                ],
                driver=A,
                nodeName="node-1",
            ),
        ],
        FITS,
        "",
    ),
    "tainted-no-effect": (
        [
            claim("claim-0", exactly("req-0", "class-a")),
            CLASS_A,
            resource_slice(
                "slice-1",
                "pool-1",
                [
                    device(
                        "device-1", taints=[{"key": "taint-key", "value": "v", "effect": "None"}]
                    ),
                ],
                driver=A,
                nodeName="node-1",
            ),
        ],
        FITS,
        "",
    ),
    "tainted-all-devices-single": (
        [
            claim("claim-0", exactly("req-0", "class-a", allocationMode="All")),
            CLASS_A,
            resource_slice(
                "slice-1",
                "pool-1",
                [device("device-1", taints=[TAINT_NO_SCHEDULE])],
                driver=A,
                nodeName="node-1",
            ),
        ],
        NOT,
        "",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_upstream_case(name: str) -> None:
    objs, expected, message = CASES[name]
    supply = supply_of([NODE, *objs])
    result = fit(demand_of(objs), supply.groups[0], supply, budget_s=5)
    if expected == ERROR:
        assert result.outcome == "does-not-fit"
        assert message in result.reason
        return
    assert result.outcome == expected, (result.reason, result.detail)
    assert not result.error
