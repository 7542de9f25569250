"""The claim rules (webhook/policy/engine/claims.py) on a small DRA cluster.

The cluster: node a100-1 with 2 A100s (gpu.nvidia.com), node h100-1 with an H100 split into
MIG devices (3 x 1g.10gb, 1 x 3g.40gb; mig.nvidia.com), node shared-1 with one GPU published
with --consumable-shares=4. One row a case: the object, whether it is allowed, the rules that
fail, and words the message must contain (what the cluster does offer).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tests import objects as o
from webhook.policy import Inventory, Policy, review
from webhook.policy.model import DraPolicy
from webhook.policy.supply.assemble import OFFLINE_FIT_BUDGET_S, DraObjects, assemble

PROFILE_1G = "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"
PROFILE_7G = "device.attributes['gpu.nvidia.com'].profile == '7g.80gb'"


def _objects() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    classes = [
        *o.nvidia_classes(),
        o.device_class("mig-1g-10gb.gpu.nvidia.com", o.MIG_CLASS_CEL, PROFILE_1G),
        o.device_class("mig-7g-80gb.gpu.nvidia.com", o.MIG_CLASS_CEL, PROFILE_7G),
    ]
    slices = [
        o.resource_slice("a100-1", o.dra_gpu(0), o.dra_gpu(1)),
        o.resource_slice(
            "h100-1",
            o.dra_mig(0, "1g.10gb", 0),
            o.dra_mig(0, "1g.10gb", 1),
            o.dra_mig(0, "1g.10gb", 2),
            o.dra_mig(0, "3g.40gb", 4),
        ),
        o.resource_slice("shared-1", o.dra_gpu(7, product="NVIDIA L4", shares=4)),
    ]
    return classes, slices


TEMPLATES = [
    o.claim_template("gpu-2", o.exactly(count=2)),
    o.claim_template("gpu-big", o.exactly(count=3)),
]


def _assembled(policy: Policy, classes: Any, slices: Any) -> Inventory:
    """The example policy's inventory with these DRA objects, by the one recipe (the supply the
    allocator judges fit on); the commands' search budget, so that load does not matter."""
    return assemble(
        policy,
        nodes=None,
        source="test",
        dra=DraObjects(classes, slices, resource_claim_templates=TEMPLATES),
        fit_budget_s=OFFLINE_FIT_BUDGET_S,
    )


@pytest.fixture(scope="module")
def dra_inventory(example_policy: Policy) -> Inventory:
    classes, slices = _objects()
    return _assembled(example_policy, classes, slices)


CASES: list[tuple[str, dict[str, Any], bool, tuple[str, ...], tuple[str, ...]]] = [
    ("one-gpu", o.claim_template("t", o.exactly()), True, (), ()),
    ("two-gpus-on-a-node-with-two", o.claim_template("t", o.exactly(count=2)), True, (), ()),
    (
        "three-gpus-of-a-class-with-two",
        o.claim_template("t", o.exactly(count=3)),
        False,
        ("gpu-claim-devices-available",),
        (
            'ResourceClaimTemplate t fits no node, existing or able to appear: request "gpu"',
            "3 devices of class gpu.nvidia.com",
            "no node has more than 2 matching devices",
            "node a100-1 (NVIDIA A100-SXM4-40GB)",
            "cannot allocate all claims",
            'Ask for at most 2 in request "gpu"',
        ),
    ),
    (
        "claim-too",
        o.resource_claim("c", o.exactly(count=3)),
        False,
        ("gpu-claim-devices-available",),
        ("ResourceClaim c",),
    ),
    (
        "selector-matches-nothing",
        o.claim_template(
            "t",
            o.exactly(selectors=["device.attributes['gpu.nvidia.com'].productName == 'H200'"]),
        ),
        False,
        ("gpu-claim-devices-available",),
        (
            "no device matches",
            "the selector \"device.attributes['gpu.nvidia.com'].productName == 'H200'\" matches "
            "none of the devices of class gpu.nvidia.com (2 on node a100-1",
            "Change the selector",
        ),
    ),
    (
        "selector-does-not-compile",
        o.claim_template("t", o.exactly(selectors=["device.attributes[ =="])),
        False,
        ("gpu-claim-devices-available",),
        ("CEL compile error", "Correct the selector"),
    ),
    ("all-devices", o.claim_template("t", o.exactly(allocationMode="All")), True, (), ()),
    (
        "unknown-class",
        o.claim_template("t", o.exactly("gpus.nvidia.com")),
        False,
        ("gpu-claim-device-class",),
        ("DeviceClass gpus.nvidia.com, which does not exist", "did you mean gpu.nvidia.com?"),
    ),
    ("another-drivers-class", o.claim_template("t", o.exactly("nic.example.com")), True, (), ()),
    (
        "mig-profile-offered",
        o.claim_template("t", o.exactly("mig.nvidia.com", selectors=[PROFILE_1G], count=3)),
        True,
        (),
        (),
    ),
    (
        "mig-profile-not-offered",
        o.claim_template("t", o.exactly("mig.nvidia.com", selectors=[PROFILE_7G])),
        False,
        ("gpu-claim-mig-profile",),
        ("MIG profile no node offers", "1g.10gb (3 devices)", "3g.40gb (1 device)"),
    ),
    (
        "per-profile-class-not-offered",
        o.claim_template("t", o.exactly("mig-7g-80gb.gpu.nvidia.com")),
        False,
        ("gpu-claim-mig-profile",),
        ("MIG profiles offered: 1g.10gb",),
    ),
    (
        "first-available-falls-back",
        o.claim_template(
            "t",
            {
                "name": "gpu",
                "firstAvailable": [
                    {"name": "big", "deviceClassName": "gpu.nvidia.com", "count": 4},
                    {"name": "small", "deviceClassName": "mig.nvidia.com"},
                ],
            },
        ),
        True,
        (),
        (),
    ),
    (
        "first-available-none-fits",
        o.claim_template(
            "t",
            {
                "name": "gpu",
                "firstAvailable": [
                    {"name": "big", "deviceClassName": "gpu.nvidia.com", "count": 4},
                    {"name": "mig", "deviceClassName": "mig.nvidia.com", "count": 5},
                ],
            },
        ),
        False,
        ("gpu-claim-devices-available",),
        (
            "no alternative of firstAvailable that one node can serve",
            '"gpu/big" asks for 4 devices of class gpu.nvidia.com (node h100-1 has 0)',
            '"gpu/mig" asks for 5 devices of class mig.nvidia.com (node h100-1 has 4)',
            'Ask for at most 4 in one alternative of request "gpu"',
        ),
    ),
    (
        "two-requests-that-fit-only-apart",
        o.claim_template("t", o.exactly(name="a", count=2), o.exactly(name="b", count=1)),
        False,
        ("gpu-claim-devices-available",),
        ("its requests together need more devices than node a100-1 has",),
    ),
    (
        "shared-for-two",
        o.claim_template("t", o.exactly(count=2), config=[o.sharing_config("MPS")]),
        False,
        ("gpu-claim-shared-request-above-one",),
        ("shares its devices (MPS)", "2 devices", "failRequestsGreaterThanOne", "count: 1"),
    ),
    (
        "shared-for-one",
        o.claim_template("t", o.exactly(), config=[o.sharing_config("TimeSlicing")]),
        True,
        (),
        (),
    ),
    (
        "sharing-config-of-another-request",
        o.claim_template(
            "t",
            o.exactly("mig.nvidia.com", name="a", count=2),
            o.exactly("mig.nvidia.com", name="b"),
            config=[o.sharing_config("TimeSlicing", "b", kind="MigDeviceConfig")],
        ),
        True,
        (),
        (),
    ),
    (
        "shares-above-one",
        o.claim_template("t", o.exactly(capacity={"requests": {"shares": "2"}})),
        False,
        ("gpu-claim-shared-request-above-one",),
        ("2 shares of one device", "capacity.requests.shares"),
    ),
    (
        "one-share",
        o.claim_template("t", o.exactly(capacity={"requests": {"shares": "1"}})),
        True,
        (),
        (),
    ),
    (
        "shares-beyond-any-device",
        o.claim_template("t", o.exactly(capacity={"requests": {"memory": "100Gi"}})),
        False,
        ("gpu-claim-devices-available",),
        ("no device matches",),
    ),
    (
        "admin-access",
        o.claim_template("t", o.exactly(adminAccess=True)),
        False,
        ("gpu-claim-admin-access",),
        ("adminAccess: true", "in no namespace", "spec.dra.adminAccessNamespaces"),
    ),
    (
        "pod-with-a-known-template",
        o.pod(o.ctr(), resourceClaims=[{"name": "g", "resourceClaimTemplateName": "gpu-big"}]),
        False,
        ("gpu-claim-devices-available",),
        ('claim "g" (ResourceClaimTemplate gpu-big), request "gpu"', "has more than 2"),
    ),
    (
        "pod-with-two-templates-on-one-node",
        o.pod(
            o.ctr(),
            resourceClaims=[
                {"name": "a", "resourceClaimTemplateName": "gpu-2"},
                {"name": "b", "resourceClaimTemplateName": "gpu-2"},
            ],
        ),
        False,
        ("gpu-claim-devices-available",),
        ("together",),
    ),
    (
        "pod-with-a-template-and-a-bad-gpu-resource",
        o.pod(o.gpu(2), resourceClaims=[{"name": "g", "resourceClaimTemplateName": "gpu-big"}]),
        False,
        ("gpu-shared-request-above-one", "gpu-claim-devices-available"),
        (),
    ),
]


@pytest.mark.parametrize(
    ("obj", "allowed", "failed", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_claim_rule(
    example_policy: Policy,
    dra_inventory: Inventory,
    obj: dict[str, Any],
    allowed: bool,
    failed: tuple[str, ...],
    words: tuple[str, ...],
) -> None:
    decision = review(obj, policy=example_policy, inventory=dra_inventory)
    assert decision.allowed is allowed, decision.denial
    assert decision.failed == failed
    for word in words:
        assert word in decision.denial


def test_admin_access_where_the_policy_allows_it(
    example_policy: Policy, dra_inventory: Inventory
) -> None:
    policy = replace(example_policy, dra=DraPolicy(admin_access_namespaces=frozenset({"ops"})))
    obj = o.claim_template("t", o.exactly(adminAccess=True), namespace="ops")
    assert review(obj, policy=policy, inventory=dra_inventory).allowed
    elsewhere = review(
        o.claim_template("t", o.exactly(adminAccess=True)), policy=policy, inventory=dra_inventory
    )
    assert "only in namespaces ops" in elsewhere.denial


def test_shared_above_one_is_policy_switchable(
    example_policy: Policy, dra_inventory: Inventory
) -> None:
    policy = replace(example_policy, dra=DraPolicy(fail_requests_greater_than_one=False))
    obj = o.claim_template("t", o.exactly(count=2), config=[o.sharing_config("MPS")])
    assert review(obj, policy=policy, inventory=dra_inventory).allowed


def test_class_config_shares_too(example_policy: Policy, dra_inventory: Inventory) -> None:
    classes, slices = _objects()
    classes.append(
        o.device_class(
            "ts.gpu.nvidia.com",
            "device.driver == 'gpu.nvidia.com'",
            config=[o.sharing_config("TimeSlicing")],
        )
    )
    inventory = _assembled(example_policy, classes, slices)
    obj = o.claim_template("t", o.exactly("ts.gpu.nvidia.com", count=2))
    decision = review(obj, policy=example_policy, inventory=inventory)
    assert decision.failed == ("gpu-claim-shared-request-above-one",)


@pytest.mark.parametrize("mode", ["warn", "audit"])
def test_enforcement_modes(example_policy: Policy, dra_inventory: Inventory, mode: str) -> None:
    policy = replace(example_policy, enforcement=mode)
    decision = review(
        o.claim_template("t", o.exactly(count=3)), policy=policy, inventory=dra_inventory
    )
    assert decision.allowed
    assert [r.rule for r in decision.results if r.status == "warn"] == [
        "gpu-claim-devices-available"
    ]
    assert bool(decision.warnings) is (mode == "warn")


def test_without_dra_objects_claims_are_skipped(
    example_policy: Policy, example_inventory: Inventory
) -> None:
    decision = review(
        o.claim_template("t", o.exactly(count=30)),
        policy=example_policy,
        inventory=example_inventory,
    )
    assert decision.allowed
    (result,) = decision.results
    assert result.status == "skip" and "no DRA objects" in result.message


def test_claims_report_the_claim_rules_only(
    example_policy: Policy, dra_inventory: Inventory
) -> None:
    decision = review(
        o.claim_template("t", o.exactly()), policy=example_policy, inventory=dra_inventory
    )
    assert [r.rule for r in decision.results] == [
        "gpu-claim-admin-access",
        "gpu-claim-device-class",
        "gpu-claim-shared-request-above-one",
        "gpu-claim-mig-profile",
        "gpu-claim-devices-available",
    ]
    assert {r.status for r in decision.results} == {"pass"}


def _deployment(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "trainer", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "t"}}, "template": {"spec": spec}},
    }


def test_a_workload_is_judged_by_the_claims_of_its_template(
    example_policy: Policy, dra_inventory: Inventory
) -> None:
    """A Deployment whose pods could never be scheduled is refused at apply time, not left to
    a ReplicaSet that creates pods which wait forever."""
    spec = o.pod(o.ctr(), resourceClaims=[{"name": "g", "resourceClaimTemplateName": "gpu-big"}])
    decision = review(_deployment(spec["spec"]), policy=example_policy, inventory=dra_inventory)
    assert not decision.allowed
    assert decision.failed == ("gpu-claim-devices-available",)
    assert 'claim "g" (ResourceClaimTemplate gpu-big)' in decision.denial
    fits = o.pod(o.ctr(), resourceClaims=[{"name": "g", "resourceClaimTemplateName": "gpu-2"}])
    assert review(_deployment(fits["spec"]), policy=example_policy, inventory=dra_inventory).allowed


@pytest.mark.parametrize(
    ("ref", "named"),
    [
        ({"resourceClaimTemplateName": "not-yet"}, "ResourceClaimTemplate not-yet"),
        ({"resourceClaimName": "shared-run"}, "ResourceClaim shared-run"),
    ],
    ids=["template", "claim"],
)
@pytest.mark.parametrize("kind", ["Pod", "Deployment"])
def test_a_claim_the_cluster_lacks_is_a_warning_naming_it(
    example_policy: Policy,
    dra_inventory: Inventory,
    ref: dict[str, str],
    named: str,
    kind: str,
) -> None:
    obj = o.pod(o.ctr(), resourceClaims=[{"name": "g", **ref}])
    if kind == "Deployment":
        obj = _deployment(obj["spec"])
    decision = review(obj, policy=example_policy, inventory=dra_inventory, namespace="ml")
    assert decision.allowed
    (warning,) = decision.warnings
    assert warning.startswith("[gpu-claim-exists]")
    assert f"no {named} in namespace ml" in warning
    assert "created later" in warning
    # Under audit nothing is said to the user; the result still records it.
    audit = review(
        obj,
        policy=replace(example_policy, enforcement="audit"),
        inventory=dra_inventory,
        namespace="ml",
    )
    assert audit.allowed and not audit.warnings
    assert [r.rule for r in audit.results if r.status == "warn"] == ["gpu-claim-exists"]


def test_a_known_claim_beside_a_missing_one_is_still_judged(
    example_policy: Policy, dra_inventory: Inventory
) -> None:
    obj = o.pod(
        o.ctr(),
        resourceClaims=[
            {"name": "g", "resourceClaimTemplateName": "gpu-big"},
            {"name": "later", "resourceClaimTemplateName": "not-yet"},
        ],
    )
    decision = review(obj, policy=example_policy, inventory=dra_inventory)
    assert not decision.allowed
    assert decision.failed == ("gpu-claim-devices-available",)
    assert any("ResourceClaimTemplate not-yet" in w for w in decision.warnings)


def test_without_dra_objects_a_missing_claim_is_not_reported(
    example_policy: Policy, example_inventory: Inventory
) -> None:
    """Without DRA objects the webhook cannot know which claims exist: it says nothing."""
    obj = o.pod(o.ctr(), resourceClaims=[{"name": "g", "resourceClaimTemplateName": "not-yet"}])
    decision = review(obj, policy=example_policy, inventory=example_inventory)
    assert decision.allowed and not decision.warnings
