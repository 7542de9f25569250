"""The filters the scheduler runs before it allocates devices: NodeName, TaintToleration,
NodeAffinity, and NodeResourcesFit for extended resources; each refusal in its words."""

from __future__ import annotations

from typing import Any

from tests import objects as o
from tests.core.policy.allocator.world import demand_of, supply_of
from webhook.policy.allocator import Fit, fit


def judge(world_node: dict[str, Any], the_pod: dict[str, Any]) -> Fit:
    supply = supply_of([world_node])
    plain = fit(demand_of([the_pod]), supply.groups[0], supply, prune=False)
    pruned = fit(demand_of([the_pod]), supply.groups[0], supply, prune=True)
    assert pruned == plain
    return pruned


def tainted(effect: str) -> dict[str, Any]:
    found = o.node_object("gpu-1")
    found["spec"] = {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": effect}]}
    return found


def test_an_untolerated_taint_keeps_the_pod_off() -> None:
    refused = judge(tainted("NoSchedule"), o.pod(o.gpu(1), name="p"))
    assert refused.reason == "node(s) had untolerated taint {nvidia.com/gpu: present}"
    assert refused.stage == "node"
    toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    assert judge(tainted("NoSchedule"), o.pod(o.gpu(1), name="p", tolerations=[toleration])).fits
    # An empty key with Exists tolerates every taint.
    assert judge(
        tainted("NoExecute"), o.pod(o.gpu(1), name="p", tolerations=[{"operator": "Exists"}])
    ).fits


def test_node_affinity_by_label_and_by_name() -> None:
    labelled = o.node_object("gpu-1", labels={"pool": "a100"})
    term = {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["h100"]}]}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }
    refused = judge(labelled, o.pod(o.gpu(1), name="p", affinity=affinity))
    assert refused.reason == "node(s) didn't match Pod's node affinity/selector"
    assert "pool=a100" in refused.detail
    by_name = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]}
    affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ] = [term, by_name]
    assert judge(labelled, o.pod(o.gpu(1), name="p", affinity=affinity)).fits


def test_node_name_and_missing_resources() -> None:
    refused = judge(o.node_object("gpu-1"), o.pod(o.gpu(1), name="p", nodeName="gpu-2"))
    assert refused.reason == "node(s) didn't match the requested node name"
    refused = judge(
        o.node_object("cpu-1", gpus=None),
        o.pod(o.ctr(limits={"nvidia.com/mig-1g.10gb": 1}), name="p"),
    )
    assert refused.reason == "Insufficient nvidia.com/mig-1g.10gb"
    assert refused.stage == "resources"
