"""Dual-published nodes, GPUs given twice, and the webhook's guard (docs/migrate.md).

The cluster is examples/clusters/dual-published: h100-dual publishes its two H100s through the
device plugin and a ResourceSlice, h100-dra (one H100) through DRA only.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import jsonpatch
import pytest

from tests.objects import allocated_claim, claim_pod
from tests.support.paths import REPO
from webhook.files import cluster_from_text, load_policy, read_text
from webhook.policy import review
from webhook.policy.dra import parse_allocation
from webhook.policy.dual import double_allocations, dual_published
from webhook.policy.engine.dual import with_affinity
from webhook.policy.supply.assemble import DraObjects, assemble

DUAL = REPO / "examples" / "clusters" / "dual-published"


def _inventory(mode: str = "avoid", nodes_edit: Any = None) -> tuple[Any, Any]:
    policy = load_policy(str(DUAL / "policy.yaml"))
    policy = replace(policy, dra=replace(policy.dra, dual_published_nodes=mode))
    dump = cluster_from_text(read_text(str(DUAL / "nodes.yaml")), source="dump")
    nodes = copy.deepcopy(dump.nodes)
    if nodes_edit is not None:
        nodes_edit(nodes)
    k = dump.by_kind
    dra = DraObjects(k["DeviceClass"], k["ResourceSlice"], (), k["ResourceClaimTemplate"])
    return policy, assemble(policy, nodes=nodes, source="dump", dra=dra)


def test_only_the_node_with_both_ledgers_is_dual_published() -> None:
    _, inventory = _inventory()
    (dual,) = dual_published(inventory.supply)
    assert dual.node == "h100-dual" and dual.gpus == 2 and dual.plugin == {"nvidia.com/gpu": 2}


def test_a_node_whose_device_plugin_stopped_is_not_dual_published() -> None:
    def stop(nodes: list[dict[str, Any]]) -> None:
        for node in nodes:
            node["status"]["allocatable"].pop("nvidia.com/gpu", None)

    _, inventory = _inventory(nodes_edit=stop)
    assert dual_published(inventory.supply) == ()


def _alloc(devices: list[str]) -> Any:
    return parse_allocation(allocated_claim("claim", "h100-dual", *devices))


def _plugin_pod(gpus: int, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ml", "name": f"legacy-{gpus}"},
        "spec": {
            "nodeName": "h100-dual",
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": phase},
    }


@pytest.mark.parametrize(
    ("plugin", "claimed", "phase", "given"),
    [
        pytest.param(2, ["gpu-0", "gpu-1"], "Running", 4, id="four-on-two"),
        pytest.param(1, ["gpu-0"], "Running", None, id="two-on-two-is-not-double"),
        pytest.param(2, ["gpu-0"], "Succeeded", None, id="a-finished-pod-holds-nothing"),
    ],
)
def test_double_allocation_counts_both_ledgers(
    plugin: int, claimed: list[str], phase: str, given: int | None
) -> None:
    _, inventory = _inventory()
    supply = inventory.supply
    found = double_allocations(
        dual_published(supply), [_plugin_pod(plugin, phase)], [_alloc(claimed)], supply.slices
    )
    assert [d.given for d in found] == ([] if given is None else [given])


def test_warn_names_the_nodes_and_changes_nothing() -> None:
    policy, inventory = _inventory("warn")
    decision = review(
        claim_pod("p", namespace="ml", template="one-gpu"), policy=policy, inventory=inventory
    )
    assert decision.allowed and decision.patch == ()
    assert any("gpu-claim-dual-published" in w and "h100-dual" in w for w in decision.warnings)


def test_avoid_keeps_every_term_off_the_dual_node_and_twice_is_once() -> None:
    policy, inventory = _inventory("avoid")
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}
                        ]
                    },
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}
                        ]
                    },
                ]
            }
        }
    }
    pod = claim_pod("p", namespace="ml", template="one-gpu", affinity=affinity)
    decision = review(pod, policy=policy, inventory=inventory)
    assert decision.allowed
    mutated = jsonpatch.apply_patch(pod, list(decision.patch))
    terms = mutated["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert len(terms) == 2
    for term in terms:
        assert term["matchFields"] == [
            {"key": "metadata.name", "operator": "NotIn", "values": ["h100-dual"]}
        ]
        assert term["matchExpressions"]  # what the pod asked for is kept
    assert with_affinity(mutated["spec"], ["h100-dual"]) == mutated["spec"]


def test_avoid_refuses_what_only_the_dual_node_can_serve() -> None:
    policy, inventory = _inventory("avoid")
    decision = review(
        claim_pod("p", namespace="ml", template="two-gpus"), policy=policy, inventory=inventory
    )
    assert not decision.allowed
    failed = [r for r in decision.results if r.status == "fail"]
    assert [r.rule for r in failed] == ["gpu-claim-dual-published"]
    assert "only the dual-published nodes h100-dual" in failed[0].message
