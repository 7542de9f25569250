"""Pending pods whose nvidia.com/gpu a DeviceClass serves (no device plugin on the node): the
audit gives the allocator's answer, not "no node advertises it" (webhook/audit/extended.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.objects import NOW
from webhook.audit import Collector, audit
from webhook.files import cluster_from_text, load_policy
from webhook.policy.supply.assemble import OFFLINE_FIT_BUDGET_S, assemble

DRA_A100 = Path(__file__).resolve().parents[3] / "examples" / "clusters" / "dra-a100"


def _pending(gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "train",
            "namespace": "ml",
            "uid": "uid-train",
            "creationTimestamp": "2025-07-14T08:00:00Z",
        },
        "spec": {
            "containers": [
                {"name": "train", "image": "i", "resources": {"limits": {"nvidia.com/gpu": gpus}}}
            ]
        },
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/1 nodes are available: 1 cannot allocate all claims.",
                }
            ],
        },
    }


@pytest.mark.parametrize(("gpus", "reason"), [(9, "too-large"), (2, "elsewhere")])
def test_a_pod_asking_for_gpus_a_device_class_serves(gpus: int, reason: str) -> None:
    policy = load_policy(DRA_A100 / "policy.yaml")
    dump = cluster_from_text((DRA_A100 / "nodes.yaml").read_text(), source="nodes.yaml")
    inventory = assemble(
        policy,
        nodes=dump.nodes,
        source="dump",
        dra=dump.dra(),
        fit_budget_s=OFFLINE_FIT_BUDGET_S,
    )
    collector = Collector()
    collector.add_all([_pending(gpus)])
    result = audit(collector, [], policy=policy, now=NOW, inventory=inventory)
    (stuck,) = [f for f in result.findings if f.rule == "gpu-pod-scheduled"]
    assert stuck.reasons == (reason,)
    # Not the device plugin's words: the node serves nvidia.com/gpu through DRA.
    assert "no node advertises" not in stuck.message
    if reason == "too-large":
        assert "asks for 9 device(s) of class gpu.nvidia.com" in stuck.message
        assert "node group node dgx-a100-01 has 8 such device(s)" in stuck.message
