"""Karpenter NodePools: which GPU products they can launch, and what keeps them from it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.objects import gpu, pod
from tests.support.paths import REPO
from webhook.contract import PRODUCT_ANNOTATION
from webhook.files import load_policy
from webhook.policy import inventory_from_nodes, review
from webhook.policy.autoscaling import karpenter_pools
from webhook.policy.inventory import PoolOrigin, Scaling

AUTOSCALED = REPO / "examples" / "clusters" / "autoscaled"


def nodepool(
    name: str, labels: dict[str, str] | None = None, *requirements: tuple[str, str, list[str]]
) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"labels": labels or {}},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass"},
                    "requirements": [
                        {"key": k, "operator": op, "values": v} for k, op, v in requirements
                    ],
                },
            }
        },
    }


T4_LABELS = {"nvidia.com/device-plugin.config": "t4", "nvidia.com/gpu.product": "Tesla-T4-SHARED"}


def test_a_nodepool_labelled_for_gfd_is_a_pool_at_zero() -> None:
    policy = load_policy(AUTOSCALED / "policy.yaml")
    pools, notes = karpenter_pools([nodepool("gpu-t4", T4_LABELS)], policy)
    (pool,) = pools
    assert pool.name == "gpu-t4" and pool.at_zero and pool.config_key == "t4"
    assert pool.origin == PoolOrigin("karpenter", "gpu-t4")
    assert pool.scaling == Scaling(0, None)
    ((name, product, selector),) = [(o.form.name, o.product, o.selector) for o in pool.offers]
    assert (name, product) == ("nvidia.com/gpu", "Tesla-T4-SHARED")
    assert selector == ("nvidia.com/gpu.product", "Tesla-T4-SHARED")
    assert notes == ()
    assert pool.describe() == "pool gpu-t4 (Karpenter NodePool gpu-t4, from zero)"


@pytest.mark.parametrize(
    ("requirements", "products"),
    [
        (
            [("karpenter.k8s.aws/instance-gpu-name", "In", ["t4", "a10g"])],
            ["NVIDIA-A10G", "Tesla-T4"],
        ),
        (
            [
                ("karpenter.k8s.aws/instance-gpu-name", "In", ["a100"]),
                ("karpenter.k8s.aws/instance-gpu-memory", "In", ["81920"]),
            ],
            ["NVIDIA-A100-SXM4-80GB"],
        ),
        ([("karpenter.k8s.aws/instance-gpu-name", "In", ["a100"])], []),
        ([("karpenter.azure.com/sku-gpu-name", "In", ["T4"])], ["Tesla-T4"]),
        (
            [("nvidia.com/gpu.product", "In", ["NVIDIA-L4", "Tesla-T4-SHARED"])],
            ["NVIDIA-L4", "Tesla-T4"],
        ),
        ([("karpenter.k8s.aws/instance-gpu-name", "Exists", [])], []),
        ([("karpenter.k8s.aws/instance-family", "In", ["g4dn"])], []),
    ],
    ids=[
        "aws-names",
        "aws-a100-by-memory",
        "aws-a100-unknown-memory",
        "azure",
        "gfd",
        "exists",
        "no-gpu",
    ],
)
def test_products_from_requirements(
    requirements: list[tuple[str, str, list[str]]], products: list[str]
) -> None:
    policy = load_policy(AUTOSCALED / "policy.yaml")
    pools, _ = karpenter_pools([nodepool("gpu", None, *requirements)], policy)
    assert sorted(o.model or "" for p in pools for o in p.offers) == products
    names = [p.name for p in pools]
    assert names == (["gpu"] if len(products) == 1 else [f"gpu/{m}" for m in products])


def test_what_karpenter_cannot_launch_is_noted() -> None:
    policy = load_policy(AUTOSCALED / "policy.yaml")
    # The T4 product comes from the cloud's name only: the pods steered to it select a label
    # the NodePool does not define, so Karpenter would launch nothing for them.
    np = nodepool(
        "gpu-t4",
        {"nvidia.com/device-plugin.config": "t4", "nvidia.com/gpu.product": "Tesla-T4"},
    )
    _, notes = karpenter_pools([np], policy)
    (note,) = map(str, notes)
    assert "select nvidia.com/gpu.product=Tesla-T4-SHARED" in note
    assert "(it says Tesla-T4)" in note
    assert (
        "add nvidia.com/gpu.product: Tesla-T4-SHARED to its spec.template.metadata.labels" in note
    )


def test_the_nodes_win_and_declared_pools_come_first() -> None:
    policy = load_policy(AUTOSCALED / "policy.yaml")
    pools, notes = karpenter_pools(
        [
            nodepool("kp-t4", T4_LABELS),
            nodepool("kp-a10g", {"nvidia.com/gpu.product": "NVIDIA-A10G"}),
        ],
        policy,
    )
    inv = inventory_from_nodes([], policy, source="cluster", can_appear=pools, notes=notes)
    # kp-t4 is the pool the policy declares (same key and product): the declaration stays.
    assert [(p.name, p.origin.kind) for p in inv.pools] == [
        ("gpu-t4", "policy"),
        ("gpu-l4x4", "policy"),
        ("kp-a10g", "karpenter"),
    ]
    assert inv.source.endswith(
        "pools that can appear: declared in " + policy.source + ", Karpenter NodePool kp-a10g"
    )
    decision = review(
        pod(gpu(1), annotations={PRODUCT_ANNOTATION: "NVIDIA-A10G"}), policy=policy, inventory=inv
    )
    assert decision.allowed
    assert "nodeSelector nvidia.com/gpu.product=NVIDIA-A10G" in decision.changes
    assert "Karpenter NodePool kp-a10g" in decision.warnings[0]


def test_a_nodepool_running_a_mig_config_needs_its_layout_declared() -> None:
    policy = load_policy(None)  # the bundled example: key a100-40gb runs MIG mixed
    np = nodepool(
        "a100",
        {
            "nvidia.com/device-plugin.config": "a100-40gb",
            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
        },
    )
    pools, notes = karpenter_pools([np], policy)
    assert pools == ()
    assert "MIG mixed" in str(notes[0]) and "migDevices" in str(notes[0])
