"""Pools that can appear: the policy's autoscaled pools join what the nodes offer now."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tests.objects import ctr, gpu, pod
from tests.support.paths import REPO
from webhook.contract import (
    GPU_POLICY_API_VERSION,
    PRODUCT_ANNOTATION,
    SHARING_ANNOTATION,
    SHARING_POLICY_KIND,
)
from webhook.files import load_inventory, load_policy, nodes_from_text, read_text
from webhook.policy import (
    Inventory,
    Policy,
    PolicyError,
    inventory_from_nodes,
    inventory_from_policy,
    review,
)
from webhook.policy.inventory import Offer, PoolOrigin, Scaling
from webhook.policy.model import DeclaredPool, Enforcement, parse_policy

ROOT = REPO
SEED003 = ROOT / "examples" / "clusters" / "seed003-l20-t4"
T4_NODE = "10.0.2.12"

T4_AT_ZERO = DeclaredPool(
    config="t4",
    product="Tesla-T4",
    nodes=0,
    gpus_per_node=1,
    memory_mib=15360,
    mig_devices=(),
    min_nodes=0,
    max_nodes=3,
)


def _seed003() -> tuple[Policy, list[dict[str, Any]]]:
    policy = load_policy(SEED003 / "policy.yaml")
    nodes = nodes_from_text(read_text(SEED003 / "nodes.yaml"), source="nodes.yaml")
    return policy, nodes


def _without(nodes: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [n for n in nodes if n["metadata"]["name"] != name]


def _what_pods_see(offer: Offer) -> tuple[object, ...]:
    # Everything the engine decides with, except how many devices exist right now.
    return (
        offer.form,
        offer.profile,
        offer.product,
        offer.replicas,
        offer.strategy,
        offer.fail_requests_greater_than_one,
        offer.memory_mib,
        offer.selector,
    )


def _policy_doc(pool: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": GPU_POLICY_API_VERSION,
        "kind": SHARING_POLICY_KIND,
        "spec": {"devicePlugin": {"config": {"version": "v1"}}, "pools": [pool]},
    }


def test_an_autoscaled_pool_at_zero_offers_what_its_nodes_will() -> None:
    policy, nodes = _seed003()
    live = inventory_from_nodes(nodes, policy, source="nodes")
    without_t4 = inventory_from_nodes(
        _without(nodes, T4_NODE), replace(policy, pools=(T4_AT_ZERO,)), source="nodes"
    )
    live_t4 = next(p for p in live.pools if p.config_key == "t4")
    declared = next(p for p in without_t4.pools if p.config_key == "t4")
    assert declared.at_zero and not live_t4.at_zero
    assert declared.node_count == 0 and declared.nodes == ()
    assert declared.origin == PoolOrigin("policy", policy.source)
    assert declared.scaling == Scaling(0, 3)
    assert [_what_pods_see(o) for o in declared.offers] == [
        _what_pods_see(o) for o in live_t4.offers
    ]
    assert [(o.devices, o.slots) for o in declared.offers] == [(0, 0)]
    assert "pools that can appear: declared in" in without_t4.source
    assert "no node yet: pool t4/Tesla-T4 (declared in" in without_t4.summary()


def test_live_nodes_are_the_pool_and_take_its_bounds() -> None:
    policy, nodes = _seed003()
    inv = inventory_from_nodes(nodes, replace(policy, pools=(T4_AT_ZERO,)), source="nodes")
    t4 = [p for p in inv.pools if p.config_key == "t4"]
    assert len(t4) == 1
    assert t4[0].origin.kind == "nodes" and t4[0].node_count == 1
    assert t4[0].scaling == Scaling(0, 3) and not t4[0].at_zero
    assert inv.at_zero == ()
    assert "pools that can appear" not in inv.source


def test_pools_without_bounds_stand_for_nodes_only_without_a_cluster() -> None:
    # The bundled example declares fixed pools: they describe nodes when no cluster is at
    # hand, and a cluster's nodes replace them.
    policy = load_policy(None)
    assert policy.pools and not any(p.autoscaled for p in policy.pools)
    offline = inventory_from_policy(policy)
    assert [p.node_count for p in offline.pools] == [1, 1, 1]
    assert offline.at_zero == ()
    assert inventory_from_nodes([], policy, source="cluster").pools == ()


def test_offline_an_autoscaled_pool_has_its_minimum() -> None:
    policy = parse_policy(
        _policy_doc({"config": "default", "product": "Tesla-T4", "minNodes": 2, "maxNodes": 4}),
        source="p.yaml",
    )
    (pool,) = inventory_from_policy(policy).pools
    assert pool.node_count == 2 and not pool.at_zero
    assert pool.offers[0].devices == 2


def test_policy_reads_the_autoscaled_fields() -> None:
    policy = parse_policy(
        _policy_doc(
            {
                "name": "t4-spot",
                "config": "default",
                "product": "Tesla-T4",
                "maxNodes": 4,
                "deviceClass": "gpu.nvidia.com",
            }
        ),
        source="p.yaml",
    )
    (declared,) = policy.pools
    assert (declared.name, declared.min_nodes, declared.max_nodes) == ("t4-spot", None, 4)
    assert declared.nodes == 1 and declared.autoscaled
    (pool,) = inventory_from_nodes([], policy, source="cluster").pools
    assert pool.name == "t4-spot" and pool.at_zero
    assert pool.device_class == "gpu.nvidia.com"
    assert pool.describe() == "pool t4-spot (declared in p.yaml, at most 4 nodes)"


@pytest.mark.parametrize(
    ("pool", "field", "words"),
    [
        ({"config": "default", "minNodes": 3, "maxNodes": 2}, "spec.pools[0].minNodes", "above"),
        ({"config": "default", "nodes": 5, "maxNodes": 2}, "spec.pools[0].nodes", "maxNodes"),
        ({"config": "default", "maxNodes": 0}, "spec.pools[0]", "maxNodes must be >= 1"),
        ({"config": "default", "minNode": 0}, "spec.pools[0].minNode", "unknown field"),
    ],
    ids=["min-above-max", "nodes-above-max", "max-zero", "misspelt"],
)
def test_bad_bounds_are_refused(pool: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(PolicyError) as err:
        parse_policy(_policy_doc(pool), source="p.yaml")
    assert err.value.field == field
    assert words in err.value.reason


AUTOSCALED = ROOT / "examples" / "clusters" / "autoscaled"


def _autoscaled() -> tuple[Policy, Inventory, Inventory]:
    policy = load_policy(AUTOSCALED / "policy.yaml")
    at_zero = load_inventory(policy, AUTOSCALED / "nodes.yaml")
    scaled_up = load_inventory(policy, AUTOSCALED / "nodes-scaled-up.yaml")
    return policy, at_zero, scaled_up


PODS = {
    "one-gpu": pod(gpu(1)),
    "request-only": pod(ctr(requests={"nvidia.com/gpu": 1})),
    "shared-intent": pod(gpu(1), annotations={SHARING_ANNOTATION: "shared"}),
    "exclusive-intent": pod(gpu(1), annotations={SHARING_ANNOTATION: "exclusive"}),
    "shared-name": pod(gpu(1, "nvidia.com/gpu.shared")),
    "three-gpus": pod(gpu(3)),
    "product": pod(gpu(1), annotations={PRODUCT_ANNOTATION: "Tesla-T4"}),
    "two-containers": pod(
        ctr("a", limits={"nvidia.com/gpu": 1}), ctr("b", limits={"nvidia.com/gpu": 1})
    ),
}


@pytest.mark.parametrize("name", PODS)
def test_a_pod_for_a_pool_at_zero_is_mutated_as_with_its_node(name: str) -> None:
    policy, at_zero, scaled_up = _autoscaled()
    waiting = review(PODS[name], policy=policy, inventory=at_zero)
    landed = review(PODS[name], policy=policy, inventory=scaled_up)
    assert waiting.allowed and landed.allowed
    assert waiting.patch == landed.patch and waiting.changes == landed.changes
    assert landed.warnings == ()
    # One warning per container that asks for a GPU, naming it.
    assert len(waiting.warnings) == len(PODS[name]["spec"]["containers"])
    for warning in waiting.warnings:
        assert warning.startswith("[gpu-pool-at-zero] container ")
        assert "no node offers yet" in warning and "pool gpu-" in warning


def test_the_warning_names_only_the_pools_that_can_serve() -> None:
    policy, at_zero, _ = _autoscaled()
    (warning,) = review(PODS["three-gpus"], policy=policy, inventory=at_zero).warnings
    assert "pool gpu-l4x4 (declared in" in warning and "0-2 nodes" in warning
    assert "gpu-t4" not in warning


@pytest.mark.parametrize("mode", ["warn", "audit"])
def test_the_warning_under_other_modes(mode: Enforcement) -> None:
    policy, at_zero, _ = _autoscaled()
    decision = review(PODS["one-gpu"], policy=replace(policy, enforcement=mode), inventory=at_zero)
    assert decision.allowed
    assert [r.status for r in decision.results if r.rule == "gpu-pool-at-zero"] == ["warn"]
    assert bool(decision.warnings) == (mode == "warn")


def test_what_no_pool_offers_is_refused_with_what_can() -> None:
    policy, at_zero, _ = _autoscaled()
    slice_pod = pod(gpu(1, "nvidia.com/mig-1g.5gb"))
    decision = review(slice_pod, policy=policy, inventory=at_zero)
    assert not decision.allowed and decision.failed == ("gpu-resource-offered",)
    assert "no node or autoscaled pool offers MIG 1g.5gb instances" in decision.denial
    assert "Tesla-T4-SHARED (no node yet: pool gpu-t4" in decision.denial
    assert "NVIDIA-L4 (no node yet: pool gpu-l4x4" in decision.denial


def test_a_live_node_beside_a_pool_at_zero_takes_no_warning() -> None:
    policy = load_policy(AUTOSCALED / "policy.yaml")
    nodes = nodes_from_text(read_text(AUTOSCALED / "nodes-scaled-up.yaml"), source="n")
    only_t4 = inventory_from_nodes(
        [n for n in nodes if "l4x4" not in n["metadata"]["name"]], policy, source="n"
    )
    assert [p.name for p in only_t4.at_zero] == ["gpu-l4x4"]
    one = review(PODS["one-gpu"], policy=policy, inventory=only_t4)
    assert one.allowed and one.warnings == ()
    three = review(PODS["three-gpus"], policy=policy, inventory=only_t4)
    assert three.allowed and three.warnings and "gpu-l4x4" in three.warnings[0]
