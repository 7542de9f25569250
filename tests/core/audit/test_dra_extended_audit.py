"""Pending pods whose nvidia.com/gpu a DeviceClass serves (no device plugin on the node): the
audit gives the allocator's answer, not "no node advertises it" (webhook/audit/extended.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.objects import NOW, listed_pod
from webhook.audit import Collector, audit
from webhook.files import cluster_from_text, load_policy
from webhook.policy.supply.assemble import OFFLINE_FIT_BUDGET_S, assemble

CLUSTERS = Path(__file__).resolve().parents[3] / "examples" / "clusters"
DRA_A100 = CLUSTERS / "dra-a100"


def _pending(gpus: int) -> dict[str, Any]:
    return listed_pod(
        "train",
        gpu={"nvidia.com/gpu": gpus},
        created="2025-07-14T08:00:00Z",
        scheduler="0/1 nodes are available: 1 cannot allocate all claims.",
    )


def _audit(cluster: Path, pod: dict[str, Any]) -> Any:
    """The audit of ``pod`` with the cluster's Node objects (the device plugin's view of
    each node) and its DRA objects, collected as a listing gives them."""
    policy = load_policy(cluster / "policy.yaml")
    items = yaml.safe_load((cluster / "nodes.yaml").read_text())["items"]
    collector = Collector()
    collector.add_all([i for i in items if i["kind"] != "Node"])
    collector.add_all([pod])
    nodes = [i for i in items if i["kind"] == "Node"]
    result = audit(collector, nodes, policy=policy, now=NOW)
    (stuck,) = [f for f in result.findings if f.rule == "gpu-pod-scheduled"]
    return stuck


def test_a_name_the_device_plugin_and_a_device_class_both_serve() -> None:
    """Two T4 nodes advertise one nvidia.com/gpu each; an H100 node's 8 GPUs come from a
    DeviceClass serving the same name. A pod asking for 2 fits the H100 node, as the scheduler
    places it (NodeResourcesFit leaves the name to DRA there): before the allocator decided,
    the audit counted only the device plugin's slots and called it too-large."""
    stuck = _audit(CLUSTERS / "mixed-t4-dra-h100", _pending(2))
    assert stuck.reasons == ("elsewhere",)
    assert "dgx-h100-01" in stuck.message


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
        assert 'container "main" (nvidia.com/gpu: 9) asks for 9 devices' in stuck.message
        assert "node dgx-a100-01 has 8 such device(s)" in stuck.message
