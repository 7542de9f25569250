"""Pools that can appear: the policy's autoscaled pools join what the nodes offer now."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from webhook.contract import GPU_POLICY_API_VERSION, SHARING_POLICY_KIND
from webhook.files import load_policy, nodes_from_text, read_text
from webhook.policy import Policy, PolicyError, inventory_from_nodes, inventory_from_policy
from webhook.policy.inventory import Offer, PoolOrigin, Scaling
from webhook.policy.model import DeclaredPool, parse_policy

ROOT = Path(__file__).resolve().parent.parent.parent
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
