"""The inventory from node dumps: allocatable names the resources, GFD labels the products."""

from __future__ import annotations

import pytest

from tests.objects import gpu, pod
from tests.support.paths import REPO
from webhook.files import load_inventory, load_policy
from webhook.policy import Inventory, review

ROOT = REPO
CLUSTERS = ROOT / "examples" / "clusters"
NODES = ROOT / "tests" / "fixtures" / "nodes"
# The A100 fixtures' nodes are tainted nvidia.com/gpu=present:NoSchedule and the seed003 policy
# injects no toleration: a pod must tolerate the taint itself, or it fits no node.
TOLERATES_GPU = [{"key": "nvidia.com/gpu", "operator": "Exists"}]


def cluster(name: str) -> tuple[object, Inventory]:
    policy = load_policy(CLUSTERS / name / "policy.yaml")
    return policy, load_inventory(policy, CLUSTERS / name / "nodes.yaml")


def offers(inv: Inventory) -> set[tuple[str, str | None, int, int | None]]:
    return {(o.form.name, o.product, o.replicas, o.slots) for _, o in inv.pairs}


def test_seed_003_after_rollout_has_11_slots() -> None:
    _, inv = cluster("seed003-l20-t4")
    assert offers(inv) == {
        ("nvidia.com/gpu", "NVIDIA-L20-SHARED", 8, 8),
        ("nvidia.com/gpu", "Tesla-T4-SHARED", 3, 3),
    }
    assert sum(o.slots or 0 for _, o in inv.pairs) == 11
    assert {p.config_key for p in inv.pools} == {"l20", "t4"}
    assert inv.disagreements == ()


def test_seed_001_mig_mixed_and_t4() -> None:
    _, inv = cluster("seed001-a100-t4")
    names = {o.form.name for _, o in inv.pairs}
    assert names == {
        "nvidia.com/mig-1g.5gb",
        "nvidia.com/mig-2g.10gb",
        "nvidia.com/mig-3g.20gb",
        "nvidia.com/gpu",
    }
    mig = next(o for _, o in inv.pairs if o.form.name == "nvidia.com/mig-3g.20gb")
    assert mig.selector == ("nvidia.com/mig-3g.20gb.product", mig.product)
    assert mig.profile == "3g.20gb" and mig.replicas == 3


def test_mig_single_units_know_their_profile() -> None:
    _, inv = cluster("h100-mig-single")
    units = {o.profile for _, o in inv.pairs}
    assert units == {None, "1g.10gb", "1g.10gb+me"}


def test_renamed_pool_advertises_shared_name() -> None:
    _, inv = cluster("renamed-shared")
    shared = inv.advertising("nvidia.com/gpu.shared")
    assert shared and all(o.product == "Tesla-T4" and o.replicas == 4 for _, o in shared)


def test_summary_names_products_and_slots() -> None:
    _, inv = cluster("seed003-l20-t4")
    assert inv.summary() == "nvidia.com/gpu: NVIDIA-L20-SHARED (8 slots), Tesla-T4-SHARED (3 slots)"


@pytest.mark.parametrize(
    ("fixture", "expected", "disagrees"),
    [
        ("labels-product-shared-but-allocatable-renamed", {("nvidia.com/gpu.shared", 4)}, True),
        ("labels-replicas-4-but-allocatable-1", {("nvidia.com/gpu", 1)}, True),
        ("mig-mixed-stale-gpu-zero", {("nvidia.com/mig-3g.40gb", 4)}, False),
        ("mig-single-invalid", set(), False),
        ("no-gfd-labels-allocatable-gpu", {("nvidia.com/gpu", 4)}, False),
    ],
)
def test_allocatable_wins_for_names(
    fixture: str, expected: set[tuple[str, int]], disagrees: bool
) -> None:
    policy = load_policy(CLUSTERS / "seed003-l20-t4" / "policy.yaml")
    inv = load_inventory(policy, NODES / f"{fixture}.yaml")
    assert {(o.form.name, o.slots) for _, o in inv.pairs} == expected
    assert bool(inv.disagreements) is disagrees


def test_stale_plugin_is_treated_as_not_shared() -> None:
    policy = load_policy(CLUSTERS / "seed003-l20-t4" / "policy.yaml")
    inv = load_inventory(policy, NODES / "labels-replicas-4-but-allocatable-1.yaml")
    (offer,) = [o for _, o in inv.pairs]
    assert offer.replicas == 1
    assert "restart the device plugin" in str(inv.disagreements[0])


def test_me_profile_spelling() -> None:
    policy = load_policy(CLUSTERS / "seed001-a100-t4" / "policy.yaml")
    inv = load_inventory(policy, NODES / "mig-mixed-with-me-profile.yaml")
    me = inv.advertising("nvidia.com/mig-1g.10gb.me")
    assert me and me[0][1].profile == "1g.10gb+me"
    decision = review(pod(gpu(1, "nvidia.com/mig-1g.10gb.me")), policy=policy, inventory=inv)
    assert decision.allowed, decision.denial


def test_product_annotation_tolerates_old_driver_names() -> None:
    policy = load_policy(CLUSTERS / "seed003-l20-t4" / "policy.yaml")
    inv = load_inventory(policy, NODES / "old-driver-mig-single-shared.yaml")
    obj = pod(
        gpu(1),
        annotations={"gpu-policy.io/product": "NVIDIA-A100-SXM4-40GB"},
        tolerations=TOLERATES_GPU,
    )
    assert review(obj, policy=policy, inventory=inv).allowed
    # Without the toleration the scheduler would never place it: refused, naming the taint.
    del obj["spec"]["tolerations"]
    refused = review(obj, policy=policy, inventory=inv)
    assert refused.failed == ("gpu-node-selection",)
    assert "nvidia.com/gpu=present:NoSchedule" in refused.denial


def test_pending_forever_names_what_is_offered() -> None:
    policy, inv = cluster("renamed-shared")
    from dataclasses import replace

    strict = replace(policy, rewrite_resource_names=False)
    obj = pod(gpu(1), annotations={"gpu-policy.io/sharing": "shared"})
    decision = review(obj, policy=strict, inventory=inv)
    assert decision.failed == ("gpu-resource-offered",)
    assert "Ask for nvidia.com/gpu.shared instead" in decision.denial


@pytest.mark.parametrize(
    ("annotations", "allowed"),
    [
        ({"gpu-policy.io/mig-profile": "1g.5gb.me"}, True),
        ({"gpu-policy.io/mig-profile": "1g.5gb+me"}, True),
        ({"gpu-policy.io/mig-profile": "1g.5gb"}, False),
        ({"gpu-policy.io/product": "NVIDIA-A100-SXM4-40GB"}, True),
        ({"gpu-policy.io/sharing": "shared"}, True),
    ],
    ids=str,
)
def test_mig_single_me_product_is_recognised(annotations: dict[str, str], allowed: bool) -> None:
    """Under ``single`` GFD writes ``-MIG-1g.5gb.me``: the unit is a 1g.5gb+me instance."""
    policy = load_policy(CLUSTERS / "seed003-l20-t4" / "policy.yaml")
    inv = load_inventory(policy, NODES / "mig-single-me-profile-shared.yaml")
    (offer,) = [o for _, o in inv.pairs]
    assert (offer.form.name, offer.profile, offer.replicas, offer.slots) == (
        "nvidia.com/gpu",
        "1g.5gb+me",
        2,
        16,
    )
    assert offer.model == "NVIDIA-A100-SXM4-40GB"
    obj = pod(gpu(1), annotations=annotations, tolerations=TOLERATES_GPU)
    decision = review(obj, policy=policy, inventory=inv)
    assert decision.allowed is allowed, decision.denial
