"""GPU budgets (webhook/policy/quota, docs/quota.md): what a pod costs, and the request added.

The example policy's pools: an L20 time-sliced 8 ways, a T4 time-sliced 3 ways, an A100 40GB
in mixed MIG (1g.5gb time-sliced 2 ways, 2g.10gb, 3g.20gb); and a small DRA cluster: two
A100s (gpu.nvidia.com), an H100 split into MIG devices (mig.nvidia.com), an L4 published with
--consumable-shares=4.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from typing import Any

import jsonpatch
import pytest

from tests import objects as o
from webhook.contract import QUOTA_ANNOTATION, QUOTA_RESOURCE
from webhook.policy import Inventory, Policy, review
from webhook.policy.dra import dra_snapshot
from webhook.policy.errors import PolicyError
from webhook.policy.model import parse_policy
from webhook.policy.quota.budgets import Budget, budget_limits, namespace_budgets
from webhook.policy.quota.nodes import nodes_to_advertise
from webhook.policy.quota.settings import QuotaPolicy, parse_quota

ON = QuotaPolicy(enabled=True)
L20 = {"nvidia.com/gpu.product": "NVIDIA-L20-SHARED"}


def _firsts(*alternatives: dict[str, Any]) -> dict[str, Any]:
    return {"name": "gpu", "firstAvailable": list(alternatives)}


TEMPLATES = [
    o.claim_template("two-gpus", o.exactly(count=2)),
    o.claim_template(
        "mig-1g",
        o.exactly(
            "mig.nvidia.com", selectors=["device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"]
        ),
    ),
    o.claim_template(
        "a-share", o.exactly("shares.nvidia.com", capacity={"requests": {"shares": "1"}})
    ),
    o.claim_template(
        "mig-or-gpu",
        _firsts(
            {"name": "small", "deviceClassName": "mig.nvidia.com"},
            {"name": "big", "deviceClassName": "gpu.nvidia.com"},
        ),
    ),
]


@pytest.fixture(scope="module")
def dra_inventory(example_inventory: Inventory) -> Inventory:
    classes = [
        *o.nvidia_classes(),
        o.device_class(
            "shares.nvidia.com",
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].productName == 'NVIDIA L4'",
        ),
    ]
    classes[0]["spec"]["extendedResourceName"] = "example.com/gpu"
    slices = [
        o.resource_slice("a100-1", o.dra_gpu(0), o.dra_gpu(1)),
        o.resource_slice("h100-1", o.dra_mig(0, "1g.10gb", 0), o.dra_mig(0, "3g.40gb", 4)),
        o.resource_slice("shared-1", o.dra_gpu(7, product="NVIDIA L4", shares=4)),
    ]
    return replace(example_inventory, dra=dra_snapshot(classes, slices, (), TEMPLATES))


def _charged(obj: dict[str, Any], policy: Policy, inventory: Inventory) -> int | None:
    """The synthetic request the webhook gives ``obj`` (None: it adds none)."""
    decision = review(obj, policy=policy, inventory=inventory)
    assert decision.allowed, decision.denial
    mutated = jsonpatch.apply_patch(obj, list(decision.patch))
    amounts = [
        c["resources"]["requests"][QUOTA_RESOURCE]
        for c in mutated["spec"]["containers"]
        if QUOTA_RESOURCE in (c.get("resources") or {}).get("requests", {})
    ]
    assert len(amounts) <= 1
    if not amounts:
        return None
    limits = [
        c["resources"].get("limits", {}).get(QUOTA_RESOURCE) for c in mutated["spec"]["containers"]
    ]
    assert amounts[0] in limits  # requests = limits, as extended resources must be
    return int(amounts[0])


def _claim_pod(template: str) -> dict[str, Any]:
    return o.pod(
        o.ctr(resources={"claims": [{"name": "gpu"}]}),
        resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": template}],
    )


CASES = [
    # Device plugin: replicas, MIG slices (1g.5gb is also time-sliced 2 ways), pinning.
    ("l20-pinned-by-its-product", o.pod(o.gpu(1), nodeSelector=L20), ON, 125),
    ("unpinned-gpu-charged-the-heaviest-pool", o.pod(o.gpu(1)), ON, 333),
    ("mig-3g-is-3-of-7-slices", o.pod(o.gpu(1, "nvidia.com/mig-3g.20gb")), ON, 428),
    ("mig-1g-shared-2-ways", o.pod(o.gpu(1, "nvidia.com/mig-1g.5gb")), ON, 71),
    (
        "mig-by-memory",
        o.pod(o.gpu(1, "nvidia.com/mig-3g.20gb")),
        replace(ON, mig_share="memory"),
        500,
    ),
    # Overrides by name and by profile.
    (
        "weight-by-name",
        o.pod(o.gpu(1), nodeSelector=L20),
        replace(ON, weights={"nvidia.com/gpu": Fraction(1, 2)}),
        500,
    ),
    (
        "weight-by-profile",
        o.pod(o.gpu(1, "nvidia.com/mig-2g.10gb")),
        replace(ON, weights={"2g.10gb": Fraction(1, 4)}),
        250,
    ),
    # DRA: devices by count, MIG devices, consumable shares, the heaviest alternative.
    ("dra-two-gpus", _claim_pod("two-gpus"), ON, 2000),
    ("dra-mig-1g-of-an-h100", _claim_pod("mig-1g"), ON, 142),
    ("dra-one-share-of-four", _claim_pod("a-share"), ON, 250),
    ("dra-first-available-the-heaviest", _claim_pod("mig-or-gpu"), ON, 1000),
    (
        "dra-weight-by-class",
        _claim_pod("two-gpus"),
        replace(ON, weights={"gpu.nvidia.com": Fraction(1, 2)}),
        1000,
    ),
    # KEP-5004: extended names a DeviceClass serves weigh what its devices weigh.
    ("extended-resource-name-of-a-class", o.pod(o.gpu(2, "example.com/gpu")), ON, 2000),
    (
        "implicit-deviceclass-name",
        o.pod(o.gpu(1, "deviceclass.resource.kubernetes.io/mig.nvidia.com")),
        ON,
        428,
    ),
    # Off: nothing is added.
    ("quota-off", o.pod(o.gpu(1)), QuotaPolicy(), None),
]


@pytest.mark.parametrize(
    ("obj", "quota", "milli"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_cost(
    obj: dict[str, Any],
    quota: QuotaPolicy,
    milli: int | None,
    example_policy: Policy,
    dra_inventory: Inventory,
) -> None:
    assert _charged(obj, replace(example_policy, quota=quota), dra_inventory) == milli


def test_the_warning_says_the_cost_and_that_the_heaviest_was_charged(
    example_policy: Policy, dra_inventory: Inventory
) -> None:
    decision = review(
        o.pod(o.gpu(1)), policy=replace(example_policy, quota=ON), inventory=dra_inventory
    )
    (warning,) = [w for w in decision.warnings if w.startswith("[gpu-quota]")]
    assert "this pod costs 0.333 GPU-equivalents" in warning
    assert f"requests.{QUOTA_RESOURCE}" in warning
    assert "charged the heaviest" in warning
    assert decision.mutated is not None
    assert decision.mutated["metadata"]["annotations"][QUOTA_ANNOTATION].startswith("0.333: ")


def test_charging_twice_is_charging_once_whatever_the_spelling(
    example_policy: Policy, dra_inventory: Inventory
) -> None:
    policy = replace(example_policy, quota=ON)
    obj = o.pod(o.gpu(1, "nvidia.com/mig-3g.20gb"), o.ctr("sidecar", limits={QUOTA_RESOURCE: "5"}))
    first = review(obj, policy=policy, inventory=dra_inventory)
    mutated = jsonpatch.apply_patch(obj, list(first.patch))
    # What a user wrote on another container is taken away: the pod pays its cost once.
    assert QUOTA_RESOURCE not in mutated["spec"]["containers"][1]["resources"].get("limits", {})
    assert review(mutated, policy=policy, inventory=dra_inventory).patch == ()
    # The API server hands 1000 back as 1k: still no second patch.
    big = jsonpatch.apply_patch(o.pod(o.gpu(1), nodeSelector=L20), [])
    big["spec"]["containers"][0]["resources"] = {
        "limits": {"nvidia.com/gpu": 1, QUOTA_RESOURCE: "1k"},
        "requests": {"nvidia.com/gpu": 1, QUOTA_RESOURCE: "1k"},
    }
    heavy = replace(policy, quota=replace(ON, weights={"nvidia.com/gpu": Fraction(1)}))
    again = review(big, policy=heavy, inventory=dra_inventory)
    assert not [p for p in again.patch if QUOTA_RESOURCE.replace("/", "~1") in p["path"]]


def test_a_claim_not_known_yet_is_not_counted_and_said(
    example_policy: Policy, dra_inventory: Inventory
) -> None:
    decision = review(
        _claim_pod("later"), policy=replace(example_policy, quota=ON), inventory=dra_inventory
    )
    assert any("not counted, not known yet" in w and "later" in w for w in decision.warnings)


def test_exempt_namespaces_and_audit_mode_are_not_charged(
    example_policy: Policy, dra_inventory: Inventory
) -> None:
    policy = replace(example_policy, quota=ON)
    assert _charged(o.pod(o.gpu(1), namespace="kube-system"), policy, dra_inventory) is None
    assert _charged(o.pod(o.gpu(1)), replace(policy, enforcement="audit"), dra_inventory) is None


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"enable": True}, "spec.quota.enable"),
        ({"enabled": "yes"}, "spec.quota.enabled"),
        ({"migShare": "slices"}, "spec.quota.migShare"),
        ({"weights": {"nvidia.com/gpu": -1}}, "spec.quota.weights.nvidia.com/gpu"),
        ({"weights": {"nvidia.com/gpu": "half"}}, "spec.quota.weights.nvidia.com/gpu"),
    ],
)
def test_bad_quota_settings_name_the_field(body: dict[str, Any], field: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_quota({"quota": body}, "p.yaml")
    assert caught.value.field == field


def test_quota_settings_in_a_policy() -> None:
    policy = parse_policy(
        {
            "apiVersion": "gpu-policy.io/v1alpha1",
            "kind": "SharingPolicy",
            "spec": {
                "devicePlugin": {"config": {"version": "v1"}},
                "quota": {"enabled": True, "migShare": "memory", "weights": {"mig-1g.5gb": "1/8"}},
            },
        },
        source="p.yaml",
    )
    assert policy.quota == QuotaPolicy(True, "memory", {"1g.5gb": Fraction(1, 8)})


def test_the_nodes_that_advertise(dra_inventory: Inventory) -> None:
    every = ["a100-1", "h100-1", "shared-1", "cpu-1"]
    assert nodes_to_advertise(dra_inventory, every) == {"a100-1", "h100-1", "shared-1"}
    network = o.dra_gpu(9)
    slice_ = o.resource_slice("x", network)
    del slice_["spec"]["nodeName"]
    slice_["spec"]["allNodes"] = True
    everywhere = replace(dra_inventory, dra=dra_snapshot(o.nvidia_classes(), [slice_]))
    assert nodes_to_advertise(everywhere, every) == set(every)


def _quota(namespace: str, name: str, hard: str, used: str | None) -> dict[str, Any]:
    status = {"used": {f"requests.{QUOTA_RESOURCE}": used}} if used is not None else {}
    return {
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"hard": {f"requests.{QUOTA_RESOURCE}": hard, "pods": "10"}},
        "status": status,
    }


def test_budgets_per_namespace(example_policy: Policy, dra_inventory: Inventory) -> None:
    charged = o.pod(
        o.ctr(limits={"nvidia.com/gpu": 1}, requests={QUOTA_RESOURCE: "1k"}),
        name="a",
        namespace="team-a",
    )
    done = {
        **o.pod(o.ctr(requests={QUOTA_RESOURCE: "500"}), name="done", namespace="team-a"),
        "status": {"phase": "Succeeded"},
    }
    old = o.pod(o.gpu(1), name="old", namespace="team-a")
    claims = _claim_pod("two-gpus")
    claims["metadata"] = {"namespace": "kube-system", "name": "driver"}
    found = namespace_budgets(
        [
            _quota("team-a", "gpu-budget", "2k", "1k"),
            _quota("team-a", "tight", "1500", "1k"),
            _quota("team-b", "cpu", "", None),
        ],
        [charged, done, old, claims, o.pod(o.ctr(), namespace="team-c")],
        policy=example_policy,
        inventory=dra_inventory,
    )
    assert found == [
        Budget("kube-system", (), None, None, 0, 0, ("driver (exempt)",)),
        Budget(
            "team-a", ("gpu-budget", "tight"), 1500, 1000, 1000, 1, ("old (predates the charge)",)
        ),
    ]


def test_a_pod_that_fails_a_rule_is_charged_too(
    example_policy: Policy, dra_inventory: Inventory
) -> None:
    """The mutating endpoint lets it through (the validating one refuses it): should the
    verdicts of the two differ, the pod must not run uncounted."""
    obj = o.pod(o.gpu(2), nodeSelector=L20)
    decision = review(obj, policy=replace(example_policy, quota=ON), inventory=dra_inventory)
    assert decision.failed == ("gpu-shared-request-above-one",)
    mutated = jsonpatch.apply_patch(obj, list(decision.patch))
    assert mutated["spec"]["containers"][0]["resources"]["requests"][QUOTA_RESOURCE] == "250"


def test_the_warning_names_the_budget_the_server_read(
    example_policy: Policy, dra_inventory: Inventory
) -> None:
    quota = replace(
        ON,
        budgets=budget_limits(
            [_quota("default", "gpu-budget", "2k", "0"), _quota("default", "tight", "1500", None)]
        ),
    )
    decision = review(
        o.pod(o.gpu(1)), policy=replace(example_policy, quota=quota), inventory=dra_inventory
    )
    (warning,) = [w for w in decision.warnings if w.startswith("[gpu-quota]")]
    assert (
        "counted against the namespace's GPU budget of 1.5 GPU-equivalents (ResourceQuota tight:"
        in warning
    )
    elsewhere = review(
        o.pod(o.gpu(1), namespace="team-b"),
        policy=replace(example_policy, quota=quota),
        inventory=dra_inventory,
    )
    (warning,) = [w for w in elsewhere.warnings if w.startswith("[gpu-quota]")]
    assert "if it has one" in warning
