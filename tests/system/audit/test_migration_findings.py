"""The audit's findings about a migration to DRA: dual-published nodes, GPUs given twice
(docs/migrate.md), from the dumps of examples/clusters/dual-published."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import run_cli
from tests.support.paths import REPO

DUAL = REPO / "examples" / "clusters" / "dual-published"


def _findings(*objects: str) -> list[dict[str, object]]:
    done = run_cli(
        "audit", "--policy", str(DUAL / "policy.yaml"), "--nodes", str(DUAL / "nodes.yaml"),
        "--objects", *objects, "-o", "json", "--now", "2026-11-27T12:00:00Z",
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    found: list[dict[str, object]] = json.loads(done.stdout)["findings"]
    return [f for f in found if str(f["rule"]).startswith("gpu-node-d")]


def test_the_dual_node_and_its_double_allocation_are_findings() -> None:
    found = {(f["rule"], f["result"], f["name"]): f for f in _findings(str(DUAL / "pods.yaml"))}
    assert set(found) == {
        ("gpu-node-dual-published", "warn", "h100-dual"),
        ("gpu-node-double-allocation", "fail", "h100-dual"),
    }
    double = found[("gpu-node-double-allocation", "fail", "h100-dual")]
    assert "ml/legacy" in str(double["message"]) and "ml/train-gpu-x1" in str(double["message"])


def test_without_the_claim_only_the_dual_node_is_reported(tmp_path: Path) -> None:
    pods = (DUAL / "pods.yaml").read_text().split("- apiVersion: resource.k8s.io/v1")[0]
    only_pod = tmp_path / "pods.yaml"
    only_pod.write_text(pods)
    assert [(f["rule"], f["name"]) for f in _findings(str(only_pod))] == [
        ("gpu-node-dual-published", "h100-dual")
    ]
