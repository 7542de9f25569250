"""``gpu-policy inventory`` from node and pod dumps: the table before and after a rollout."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from .conftest import CLUSTERS, ROOT, gpu_policy


def inventory(cluster: str, *extra: str, process: bool = False) -> subprocess.CompletedProcess[str]:
    return gpu_policy(
        "inventory",
        "--policy",
        str(CLUSTERS / cluster / "policy.yaml"),
        "--nodes",
        str(CLUSTERS / cluster / "nodes.yaml"),
        *extra,
        process=process,
    )


def test_seed_003_before_and_after() -> None:
    before = inventory("seed003-before", process=True)
    after = inventory("seed003-l20-t4")
    assert before.returncode == after.returncode == 0
    assert "GPU slots: 2 (NVIDIA-L20 x 1 + Tesla-T4 x 1)" in before.stdout
    assert "GPU slots: 11 (NVIDIA-L20 x 8 + Tesla-T4 x 3)" in after.stdout


def test_pods_hold_slots(tmp_path: Path) -> None:
    pods = tmp_path / "pods.yaml"
    pods.write_text(
        """
apiVersion: v1
kind: List
items:
- {kind: Pod, metadata: {name: a}, spec: {nodeName: 10.0.2.11, containers: [{name: m, resources: {limits: {nvidia.com/gpu: 1}}}]}, status: {phase: Running}}
- {kind: Pod, metadata: {name: b}, spec: {nodeName: 10.0.2.11, containers: [{name: m, resources: {limits: {nvidia.com/gpu: 1}}}]}, status: {phase: Running}}
- {kind: Pod, metadata: {name: cpu-request-gpu-limit}, spec: {nodeName: 10.0.2.11, containers: [{name: m, resources: {requests: {cpu: 1}, limits: {cpu: 2, nvidia.com/gpu: 1}}}]}, status: {phase: Running}}
- {kind: Pod, metadata: {name: done}, spec: {nodeName: 10.0.2.11, containers: [{name: m, resources: {limits: {nvidia.com/gpu: 1}}}]}, status: {phase: Succeeded}}
- {kind: Pod, metadata: {name: pending}, spec: {containers: [{name: m, resources: {limits: {nvidia.com/gpu: 1}}}]}, status: {phase: Pending}}
"""
    )
    result = inventory("seed003-l20-t4", "--pods", str(pods), "-o", "json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    l20 = next(p for p in out["pools"] if p["product"] == "NVIDIA-L20-SHARED")
    # The GPU limit of the pod that requests only CPU is its GPU request (API defaulting).
    assert (l20["slots"], l20["requested"], l20["free"]) == (8, 3, 5)
    assert out["total_slots"] == 11


def test_disagreements_are_reported() -> None:
    result = gpu_policy(
        "inventory",
        "--policy",
        str(CLUSTERS / "seed003-l20-t4" / "policy.yaml"),
        "--nodes",
        str(ROOT / "tests" / "fixtures" / "nodes" / "labels-replicas-4-but-allocatable-1.yaml"),
    )
    assert "disagreement:" in result.stdout and "restart the device plugin" in result.stdout


def test_gpu_node_taints_are_the_chart_value_from_the_nodes() -> None:
    import yaml

    tainted = inventory("h100-mig-single", "--gpu-node-taints")
    untainted = inventory("mps-l4", "--gpu-node-taints")
    assert tainted.returncode == untainted.returncode == 0
    value = yaml.safe_load(tainted.stdout)["webhook"]["isolation"]["gpuNodeTaints"]
    assert value == [[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]]
    # Untainted GPU nodes: every pod can reach one.
    assert yaml.safe_load(untainted.stdout)["webhook"]["isolation"]["gpuNodeTaints"] == [[]]
