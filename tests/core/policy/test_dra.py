"""The DRA model: device classes, ResourceSlice devices, and CEL selectors as the scheduler reads
them (webhook/policy/dra/, docs/dra.md)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.objects import (
    GPU_CLASS_CEL,
    allocated_claim,
    device_class,
    dra_gpu,
    resource_slice,
)
from webhook.policy.dra import (
    IMPLICIT_PREFIX,
    dra_snapshot,
    parse_allocation,
    parse_resource_slice,
)


def gpu(
    index: int,
    *,
    product: str = "NVIDIA A100-SXM4-40GB",
    memory: str = "40Gi",
    version: str = "550.54.15",
) -> dict[str, Any]:
    """A GPU with the attributes these tests read: an int, a version, a qualified name."""
    return dra_gpu(
        index,
        product=product,
        memory=memory,
        attributes={
            "index": {"int": index},
            "driverVersion": {"version": version},
            "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"},
        },
    )


@pytest.fixture
def snapshot():
    return dra_snapshot(
        [device_class("gpu.nvidia.com", GPU_CLASS_CEL, extended="nvidia.com/gpu")],
        [
            resource_slice(
                "node-a",
                gpu(0),
                gpu(1, memory="80Gi", product="NVIDIA H100 80GB HBM3", version="560.1.0"),
            )
        ],
    )


def test_a_class_selects_the_devices_its_cel_admits(snapshot):
    devices, problems = snapshot.class_devices("gpu.nvidia.com")
    assert [d.name for d in devices] == ["gpu-0", "gpu-1"]
    assert problems == ()
    assert devices[0].node == "node-a" and devices[0].pool == "node-a"


def test_a_class_serves_its_extended_resource_and_the_implicit_name(snapshot):
    assert snapshot.class_for_resource("nvidia.com/gpu").name == "gpu.nvidia.com"
    assert snapshot.class_for_resource(IMPLICIT_PREFIX + "gpu.nvidia.com").name == "gpu.nvidia.com"
    assert snapshot.class_for_resource("nvidia.com/mig-1g.5gb") is None
    assert snapshot.classes["gpu.nvidia.com"].resource_names == (
        "nvidia.com/gpu",
        "deviceclass.resource.kubernetes.io/gpu.nvidia.com",
    )


# Each expression against gpu-0 (A100, 40Gi, driver 550.54.15) of the fixture's slice.
EXPRESSIONS = [
    ("driver", "device.driver == 'gpu.nvidia.com'", True),
    (
        "implicit domain",
        "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA A100-SXM4-40GB'",
        True,
    ),
    (
        "qualified attribute",
        "device.attributes['resource.kubernetes.io'].pcieRoot == 'pci0000:00'",
        True,
    ),
    ("int attribute", "device.attributes['gpu.nvidia.com'].index == 0", True),
    (
        "string functions",
        "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA A100')",
        True,
    ),
    ("regex", "device.attributes['gpu.nvidia.com'].productName.matches('H100')", False),
    (
        "quantity compareTo",
        "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0",
        True,
    ),
    (
        "quantity equality across units",
        "device.capacity['gpu.nvidia.com'].memory == quantity('40960Mi')",
        True,
    ),
    (
        "quantity isGreaterThan",
        "device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('50Gi'))",
        False,
    ),
    (
        "quantity isLessThan",
        "device.capacity['gpu.nvidia.com'].memory.isLessThan(quantity('50G'))",
        True,
    ),
    (
        "quantity arithmetic",
        "device.capacity['gpu.nvidia.com'].memory.sub(quantity('8Gi')).asInteger() == 34359738368",
        True,
    ),
    (
        "semver order",
        "device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(semver('550.0.0'))",
        True,
    ),
    ("semver prerelease order", "semver('1.0.0-rc.1').isLessThan(semver('1.0.0'))", True),
    ("semver parts", "device.attributes['gpu.nvidia.com'].driverVersion.major() == 550", True),
    (
        "semver equality",
        "device.attributes['gpu.nvidia.com'].driverVersion == semver('550.54.15')",
        True,
    ),
    ("absent domain is an empty map", "has(device.attributes['dra.example.com'].model)", False),
    (
        "cel.bind",
        "cel.bind(g, device.attributes['gpu.nvidia.com'], g.type == 'gpu' && g.index == 0)",
        True,
    ),
    (
        "nested cel.bind",
        "cel.bind(g, device.attributes['gpu.nvidia.com'], cel.bind(i, g.index, i + 1 == 1))",
        True,
    ),
]


@pytest.mark.parametrize(
    ("expression", "expected"),
    [(e, x) for _, e, x in EXPRESSIONS],
    ids=[i for i, _, _ in EXPRESSIONS],
)
def test_cel_reads_a_device_as_the_scheduler_does(snapshot, expression, expected):
    match = snapshot.selectors.evaluate(snapshot.devices[0], expression)
    assert match.problem is None
    assert match.matched is expected


@pytest.mark.parametrize(
    ("expression", "words"),
    [
        ("device.driver ==", "does not compile"),
        ("device.attributes['gpu.nvidia.com'].noSuchAttribute == 1", "fails on device gpu-0"),
        ("device.attributes['dra.example.com'].model == 'x'", "fails on device gpu-0"),
        ("device.attributes['gpu.nvidia.com'].productName", "could not be converted to bool"),
        (
            "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('lots')) > 0",
            "fails on device gpu-0",
        ),
        (
            "device.attributes['gpu.nvidia.com'].index.isGreaterThan(quantity('1'))",
            "fails on device gpu-0",
        ),
    ],
    ids=[
        "syntax",
        "absent attribute",
        "attribute of an absent domain",
        "not a bool",
        "bad quantity",
        "int is no quantity",
    ],
)
def test_an_expression_that_cannot_be_evaluated_is_reported_and_matches_nothing(
    snapshot, expression, words
):
    match = snapshot.selectors.evaluate(snapshot.devices[0], expression)
    assert match.matched is False
    assert words in match.problem
    assert expression in match.problem


def test_a_class_whose_selector_does_not_compile_selects_nothing_and_says_so():
    snapshot = dra_snapshot(
        [device_class("broken", "device.driver == 'gpu.nvidia.com' &&& true")],
        [resource_slice("node-a", gpu(0))],
    )
    devices, problems = snapshot.class_devices("broken")
    assert devices == ()
    assert len(problems) == 1 and "does not compile" in problems[0]
    assert problems[0] in map(str, snapshot.problems)


def test_each_expression_is_compiled_once(snapshot, monkeypatch):
    import cel

    from webhook.policy import selectors

    selectors.clear_cache()
    calls = []
    real = cel.compile
    monkeypatch.setattr(cel, "compile", lambda e: calls.append(e) or real(e))
    for device in snapshot.devices * 3:
        snapshot.selectors.evaluate(device, "device.driver == 'gpu.nvidia.com'")
    assert len(calls) == 1


def test_an_unknown_class_selects_nothing(snapshot):
    assert snapshot.class_devices("mig.nvidia.com") == (
        (),
        ("DeviceClass mig.nvidia.com does not exist",),
    )


def test_the_newest_class_serves_a_shared_extended_resource_name_and_the_clash_is_reported():
    snapshot = dra_snapshot(
        [
            device_class(
                "new", GPU_CLASS_CEL, extended="nvidia.com/gpu", created="2026-02-01T00:00:00Z"
            ),
            device_class(
                "old", GPU_CLASS_CEL, extended="nvidia.com/gpu", created="2026-01-01T00:00:00Z"
            ),
        ],
        [],
    )
    assert snapshot.class_for_resource("nvidia.com/gpu").name == "new"
    assert any("old and new both serve nvidia.com/gpu" in str(p) for p in snapshot.problems)


def test_only_the_newest_generation_of_a_pool_counts_and_an_incomplete_pool_is_reported():
    snapshot = dra_snapshot(
        [device_class("gpu.nvidia.com", GPU_CLASS_CEL)],
        [
            resource_slice("node-a", gpu(0), gpu(1), generation=1, name="old"),
            resource_slice("node-a", gpu(0), generation=2, count=2, name="new"),
        ],
    )
    assert [(d.slice, d.name) for d in snapshot.devices] == [("new", "gpu-0")]
    assert any("1 of its 2 ResourceSlices" in str(p) for p in snapshot.problems)


def test_devices_say_where_they_can_be_used():
    network = {
        "metadata": {"name": "fabric"},
        "spec": {
            "driver": "net.example.com",
            "allNodes": True,
            "pool": {"name": "fabric", "generation": 0, "resourceSliceCount": 1},
            "devices": [{"name": "nic-0"}],
        },
    }
    per_device = {
        "metadata": {"name": "rack"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "perDeviceNodeSelection": True,
            "pool": {"name": "rack", "generation": 0, "resourceSliceCount": 1},
            "devices": [
                {"name": "a", "nodeName": "node-b"},
                {
                    "name": "b",
                    "nodeSelector": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "rack", "operator": "In", "values": ["r1"]}
                                ]
                            }
                        ]
                    },
                },
            ],
        },
    }
    (nic,), _ = parse_resource_slice(network)
    assert nic.all_nodes and nic.node is None
    (a, b), _ = parse_resource_slice(per_device)
    assert a.node == "node-b" and not a.all_nodes
    assert (
        b.node is None
        and b.node_selector["nodeSelectorTerms"][0]["matchExpressions"][0]["key"] == "rack"
    )


def test_consumable_capacity_and_multiple_allocations_are_read():
    shared = {
        "metadata": {"name": "s"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": "node-a",
            "pool": {"name": "node-a", "generation": 0, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": "gpu-0",
                    "allowMultipleAllocations": True,
                    "attributes": {"type": {"string": "gpu"}, "broken": {"float": 1.5}},
                    "capacity": {
                        "memory": {
                            "value": "80Gi",
                            "requestPolicy": {
                                "default": "10Gi",
                                "validRange": {"min": "1Gi", "step": "1Gi"},
                            },
                        }
                    },
                }
            ],
        },
    }
    (device,), problems = parse_resource_slice(shared)
    assert device.allow_multiple_allocations
    memory = device.capacity_of("gpu.nvidia.com/memory")
    assert memory.value == 80 * 2**30 and memory.default == 10 * 2**30
    assert memory.valid_range == (2**30, None, 2**30)
    assert device.attribute("type") == "gpu"
    assert [str(p) for p in problems] == [
        "ResourceSlice s: device gpu-0: attribute broken has no value this webhook can read"
    ]
    assert (problems[0].source, problems[0].field) == ("ResourceSlice s", "device gpu-0")


def test_a_claim_allocation_names_its_devices_and_consumers():
    claim = allocated_claim("train-gpu", "node-a", "gpu-1", reserved_for=("train-0",))
    allocation = parse_allocation(claim)
    assert allocation.devices == (("gpu", "gpu.nvidia.com", "node-a", "gpu-1"),)
    assert allocation.reserved_for == ("pods/train-0",)
    assert parse_allocation({"metadata": {"name": "pending"}}).devices == ()


def test_of_classes_created_together_the_lowest_name_serves_the_shared_name():
    same = "2026-02-01T00:00:00Z"
    snapshot = dra_snapshot(
        [
            device_class("b-class", GPU_CLASS_CEL, extended="nvidia.com/gpu", created=same),
            device_class("a-class", GPU_CLASS_CEL, extended="nvidia.com/gpu", created=same),
        ],
        [],
    )
    assert snapshot.class_for_resource("nvidia.com/gpu").name == "a-class"
    # The implicit name of each class still reaches that class.
    assert snapshot.class_for_resource(IMPLICIT_PREFIX + "b-class").name == "b-class"


def test_cel_sees_allow_multiple_allocations():
    shared = resource_slice("node-a", {**gpu(0), "allowMultipleAllocations": True}, gpu(1))
    snapshot = dra_snapshot([device_class("shared", "device.allowMultipleAllocations")], [shared])
    devices, problems = snapshot.class_devices("shared")
    assert [d.name for d in devices] == ["gpu-0"] and problems == ()


def test_a_snapshot_built_from_the_previous_one_reuses_its_unchanged_devices():
    classes = [device_class("gpu.nvidia.com", GPU_CLASS_CEL, extended="nvidia.com/gpu")]
    same, changed = resource_slice("node-a", gpu(0)), resource_slice("node-b", gpu(0))
    first = dra_snapshot(classes, [same, changed])
    assert len(first.class_devices("gpu.nvidia.com")[0]) == 2
    edited = resource_slice("node-b", gpu(0), gpu(1), generation=2)
    second = dra_snapshot(classes, [same, edited], previous=first)
    kept = {d.slice: d for d in first.devices}
    again = [d for d in second.devices if d.pool == "node-a"]
    assert again == [kept["node-a-gpu.nvidia.com"]] and again[0] is kept["node-a-gpu.nvidia.com"]
    assert [d.name for d in second.devices if d.pool == "node-b"] == ["gpu-0", "gpu-1"]
    assert second.selectors is first.selectors
    assert len(second.class_devices("gpu.nvidia.com")[0]) == 3


def test_a_remembered_result_never_mixes_true_with_one():
    flags = resource_slice(
        "node-a",
        {"name": "a", "attributes": {"x": {"bool": True}}},
        {"name": "b", "attributes": {"x": {"int": 1}}},
    )
    flags["spec"]["driver"] = "dra.example.com"
    snapshot = dra_snapshot(
        [device_class("t", "device.attributes['dra.example.com'].x == true")], [flags]
    )
    assert [d.name for d in snapshot.class_devices("t")[0]] == ["a"]
