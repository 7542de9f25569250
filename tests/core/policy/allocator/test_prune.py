"""The counting before the search (docs/allocator.md, "Pruning") changes no answer: each case
is judged with the plain port and with pruning, and both give the scheduler's answer, with the
same reason and detail. The cases are those where a counting rule applies, or nearly does."""

from __future__ import annotations

import random
from typing import Any

import pytest

from tests import objects as o
from tests.core.policy.allocator import world as w
from webhook.policy.allocator import fit_anywhere

GPU = o.device_class("gpu.nvidia.com", driver="gpu.nvidia.com", extended="nvidia.com/gpu")
PRODUCT = 'device.attributes["gpu.nvidia.com"].productName == "A100"'
FITS, NOT, ERROR = "fits", "does-not-fit", "error"


def gpus(count: int, **fields: Any) -> dict[str, Any]:
    """A node's slice of ``count`` A100s (``fields`` on each device)."""
    devices = [o.device(f"gpu-{i}", {"productName": "A100"}, **fields) for i in range(count)]
    return o.resource_slice("n", *devices, name="n-gpus")


def mixed(a100: int, h100: int) -> dict[str, Any]:
    devices = [o.device(f"a-{i}", {"productName": "A100"}) for i in range(a100)]
    devices += [o.device(f"h-{i}", {"productName": "H100"}) for i in range(h100)]
    return o.resource_slice("n", *devices, name="n-gpus")


def without_product_on(index: int, count: int) -> dict[str, Any]:
    """``count`` devices, the one at ``index`` without productName: PRODUCT errs on it."""
    devices = [
        o.device(f"gpu-{i}", {} if i == index else {"productName": "A100"}) for i in range(count)
    ]
    return o.resource_slice("n", *devices, name="n-gpus")


def shared_gpu() -> dict[str, Any]:
    """One device that allows multiple allocations (consumable capacity)."""
    capacity = {"memory": {"value": "80Gi", "requestPolicy": {"default": "10Gi"}}}
    found = o.device("gpu-0", allowMultipleAllocations=True, capacity=capacity)
    return o.resource_slice("n", found, name="n-gpus")


def two(name: str, count: int, **fields: Any) -> dict[str, Any]:
    return o.exactly(name=name, count=count, **fields)


WHOLE = 'device.attributes["gpu.nvidia.com"].type == "gpu"'
PART = 'device.attributes["gpu.nvidia.com"].type == "mig"'


TAINT = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}

CASES: dict[str, tuple[list[dict[str, Any]], str, str]] = {
    # Rule 1: a request for more devices than pass its class and selectors.
    "nine of eight": ([o.pod(o.gpu(9), name="p"), gpus(8)], NOT, "has 8 such device(s)"),
    "eight of eight": ([o.pod(o.gpu(8), name="p"), gpus(8)], FITS, ""),
    "five A100 of four among twelve": (
        [o.resource_claim("c", two("g", 5, selectors=[PRODUCT])), mixed(4, 8)],
        NOT,
        "has 4 such device(s)",
    ),
    "three of four, one tainted": (
        [
            o.resource_claim("c", two("g", 4)),
            gpus(3),
            o.resource_slice("n", o.device("x", taints=[TAINT]), name="t", pool="t"),
        ],
        NOT,
        "1 of them with a taint",
    ),
    # Rule 1 across alternatives: the first is short, the second fits.
    "first alternative short": (
        [
            o.resource_claim(
                "c",
                {
                    "name": "g",
                    "firstAvailable": [
                        {"name": "nine", "deviceClassName": "gpu.nvidia.com", "count": 9},
                        {"name": "two", "deviceClassName": "gpu.nvidia.com", "count": 2},
                    ],
                },
            ),
            gpus(8),
        ],
        FITS,
        "",
    ),
    # Rule 2: two requests of one claim, each alone possible, together more than there is.
    "five and four of eight": ([o.resource_claim("c", two("a", 5), two("b", 4)), gpus(8)], NOT, ""),
    # Rule 3: two claims together.
    "two claims of five of eight": (
        [o.resource_claim("c", two("a", 5)), o.resource_claim("d", two("a", 5)), gpus(8)],
        NOT,
        "",
    ),
    "a claim and the extended resources": (
        [o.pod(o.gpu(6), name="p", claims=["c"]), o.resource_claim("c", two("a", 3)), gpus(8)],
        NOT,
        "",
    ),
    # Admin access lets claims share devices: rule 3 must not apply.
    "two admin claims of five of eight": (
        [
            o.resource_claim("c", two("a", 5, adminAccess=True)),
            o.resource_claim("d", two("a", 5, adminAccess=True)),
            gpus(8),
        ],
        FITS,
        "",
    ),
    # A device that allows multiple allocations serves several requests: rule 2 must not apply.
    "two requests on one shared device": (
        [o.resource_claim("c", two("a", 1), two("b", 1)), shared_gpu()],
        FITS,
        "",
    ),
    # A selector that errs on a device the search reaches: the error, with or without pruning.
    "an error the search meets": (
        [
            o.resource_claim("c", two("a", 1, selectors=[PRODUCT]), two("b", 9)),
            without_product_on(3, 8),
        ],
        ERROR,
        "CEL runtime error",
    ),
    # ... and on a device the search never reaches (request a has no device, so the search
    # never looks at b's): no error, with or without pruning.
    "an error the search never meets": (
        [
            o.resource_claim(
                "c",
                two("a", 1, selectors=['device.attributes["gpu.nvidia.com"].productName == "X"']),
                two("b", 1, selectors=[PRODUCT]),
            ),
            without_product_on(3, 8),
        ],
        NOT,
        "",
    ),
    # Rule 4: the only whole GPUs, taken whole, use up the counters of every MIG device.
    "whole GPUs and a MIG device of them": (
        [
            o.pod(o.ctr(), name="p", claims=["c", "d"]),
            o.resource_claim("c", two("gpu", 2, selectors=[WHOLE])),
            o.resource_claim("d", two("mig", 1, selectors=[PART])),
            *o.partitionable(2),
        ],
        NOT,
        "",
    ),
    "a whole GPU and the MIG devices of the other": (
        [
            o.resource_claim(
                "c", two("gpu", 1, selectors=[WHOLE]), two("mig", 2, selectors=[PART])
            ),
            *o.partitionable(2),
        ],
        FITS,
        "",
    ),
    "a whole GPU and MIG devices of both": (
        [
            o.resource_claim(
                "c", two("gpu", 1, selectors=[WHOLE]), two("mig", 3, selectors=[PART])
            ),
            *o.partitionable(2),
        ],
        NOT,
        "",
    ),
    # An All request with a device it cannot take: found by counting, as by the search.
    "all devices, one tainted": (
        [
            o.resource_claim("c", two("a", 1, allocationMode="All")),
            gpus(2),
            o.resource_slice("n", o.device("x", taints=[TAINT]), name="t", pool="t"),
        ],
        NOT,
        "",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_pruning_gives_the_plain_port_s_answer(name: str) -> None:
    objs, expected, words = CASES[name]
    world = [o.node_object("n", gpus=None), GPU, *objs]
    plain = fit_anywhere(w.demand_of(world), w.supply_of(world), budget_s=30, prune=False)
    pruned = fit_anywhere(w.demand_of(world), w.supply_of(world), budget_s=30, prune=True)
    assert pruned == plain
    if expected == ERROR:
        assert pruned.outcome == NOT
        assert pruned.closest is not None and pruned.closest.error
        assert words in pruned.closest.reason
        return
    assert pruned.outcome == expected
    if words:
        assert pruned.closest is not None
        assert words in pruned.closest.detail


# Random small worlds: devices with a few attribute values (some without productName, on
# which PRODUCT errs), taints, shared devices, network devices, incomplete and invalid pools,
# partitionable devices; claims with counts, selectors, alternatives, All, admin access,
# tolerations and constraints, and the claim for extended resources. Fixed seeds: the same
# worlds every run.
SELECTORS = [
    PRODUCT,
    'device.attributes["gpu.nvidia.com"].numa == 0',
    '"productName" in device.attributes["gpu.nvidia.com"]',
]


def _random_device(rng: random.Random, index: int) -> dict[str, Any]:
    attributes: dict[str, Any] = {"numa": rng.randint(0, 1)}
    if rng.random() < 0.9:
        attributes["productName"] = rng.choice(["A100", "H100"])
    fields: dict[str, Any] = {}
    if rng.random() < 0.15:
        fields["taints"] = [TAINT]
    if rng.random() < 0.1:
        fields["allowMultipleAllocations"] = True
        fields["capacity"] = {"memory": {"value": "80Gi", "requestPolicy": {"default": "40Gi"}}}
    return o.device(f"gpu-{index}", attributes, **fields)


def _random_request(rng: random.Random, name: str) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if rng.random() < 0.4:
        fields["selectors"] = [rng.choice(SELECTORS)]
    if rng.random() < 0.2:
        fields["tolerations"] = [{"key": "maintenance", "operator": "Exists"}]
    if rng.random() < 0.1:
        fields["allocationMode"] = "All"
    if rng.random() < 0.1:
        fields["adminAccess"] = True
    if rng.random() < 0.2:
        subs = [
            {"name": f"s{i}", "deviceClassName": "gpu.nvidia.com", "count": rng.randint(1, 4)}
            for i in range(2)
        ]
        return {"name": name, "firstAvailable": subs}
    return two(name, rng.randint(1, 4), **fields)


def _pool(found: dict[str, Any], count: int) -> dict[str, Any]:
    found["spec"]["pool"]["resourceSliceCount"] = count
    return found


def _random_slices(rng: random.Random) -> list[dict[str, Any]]:
    """The node's GPUs, and at times: network devices every node reaches, a pool published in
    part (incomplete), a pool with one device name twice (invalid), partitionable devices
    that share one counter set."""
    devices = [_random_device(rng, i) for i in range(rng.randint(0, 7))]
    out = [o.resource_slice("n", *devices, name="n-gpus")]
    if rng.random() < 0.15:
        net = [_random_device(rng, i) for i in range(rng.randint(1, 3))]
        out.append(o.resource_slice(None, *net, name="net", pool="net", allNodes=True))
    if rng.random() < 0.1:
        out.append(_pool(o.resource_slice("n", o.device("h-0"), name="half", pool="half"), 2))
    if rng.random() < 0.1:
        for name in ("dup-a", "dup-b"):
            out.append(_pool(o.resource_slice("n", o.device("d-0"), name=name, pool="dup"), 2))
    if rng.random() < 0.2:
        memory = {"memory": {"value": rng.choice(["20Gi", "40Gi"])}}
        counters = [{"name": "gpu-0", "counters": memory}]
        parts = [
            o.device(
                f"p-{i}",
                {"productName": "A100"},
                consumesCounters=[
                    {"counterSet": "gpu-0", "counters": {"memory": {"value": "10Gi"}}}
                ],
            )
            for i in range(rng.randint(1, 4))
        ]
        if rng.random() < 0.5:
            # The whole GPU the parts are cut from: taken, it uses up their counters.
            whole = {"counterSet": "gpu-0", "counters": memory}
            parts.append(o.device("p-whole", {"productName": "H100"}, consumesCounters=[whole]))
        shared = o.resource_slice("n", name="parts-c", pool="parts", sharedCounters=counters)
        out += [
            _pool(o.resource_slice("n", *parts, name="parts-d", pool="parts"), 2),
            _pool(shared, 2),
        ]
    return out


def _random_world(seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    claims = []
    for c in range(rng.randint(1, 2)):
        requests = [_random_request(rng, f"r{i}") for i in range(rng.randint(1, 2))]
        constraints = []
        if rng.random() < 0.3:
            kind = rng.choice(["matchAttribute", "distinctAttribute"])
            constraints = [{kind: "gpu.nvidia.com/" + rng.choice(["numa", "productName"])}]
        claims.append(o.resource_claim(f"c{c}", *requests, constraints=constraints))
    names = [c["metadata"]["name"] for c in claims]
    # At times GPUs asked as an extended resource too, which DRA serves: one more claim.
    gpus_asked = {"nvidia.com/gpu": rng.randint(1, 4)} if rng.random() < 0.3 else {}
    return [
        o.node_object("n", gpus=None),
        GPU,
        *_random_slices(rng),
        *claims,
        o.pod(o.ctr(limits=gpus_asked), name="p", claims=names),
    ]


@pytest.mark.parametrize("seed", range(600))
def test_pruning_gives_the_plain_port_s_answer_on_random_worlds(seed: int) -> None:
    world = _random_world(seed)
    plain = fit_anywhere(w.demand_of(world), w.supply_of(world), budget_s=30, prune=False)
    pruned = fit_anywhere(w.demand_of(world), w.supply_of(world), budget_s=30, prune=True)
    assert pruned == plain
