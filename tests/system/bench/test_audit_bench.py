"""bench/audit.py run end to end on a small cluster of its page server: the audit finds what the
generator placed, and both variants fetch the same pages."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO


@pytest.mark.slow
def test_the_benchmark_runs_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "audit.json"
    sizes = ["--nodes", "50", "--pods", "1000", "--page-size", "100"]
    done = subprocess.run(
        [sys.executable, "-m", "bench.audit", *sizes, "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the audit found what the generator placed" in done.stdout
    report = json.loads(out.read_text())
    assert report["matches"] is True
    audit_counts = report["audit"]
    # 100 GPU pods go through the scenarios in turn: 20 workloads (69 pods), 7 more (26 pods),
    # then 4 pods of the MIG 3g.20gb workload and 1 of the pinned one.
    assert audit_counts["pods"]["gpu"] == 100
    assert audit_counts["pods"]["refused"] == 3  # 2 asking for 2 shared GPUs, 1 flaky device
    findings = audit_counts["findings"]
    # mig-3g-00007, mig-3g-00027 (no such profile), and the too-big pod (16 GPUs: no node has that many)
    assert findings["gpu-resource-offered/fail"] == 3
    assert findings["gpu-node-selection/fail"] == 2  # v100-pinned-00008, v100-pinned-00028
    assert findings["gpu-shared-request-above-one/fail"] == 1
    assert findings["gpu-webhook-changes/warn"] == 1  # pre-webhook-00009
    assert findings["gpu-pod-scheduled/warn"] == 1  # queued-00013, gated
    assert findings["gpu-pod-admitted/fail"] == 2
    assert audit_counts == report["expected"]
    # Both variants fetched the same pages: every kind, in pages of 100.
    rows = {row["variant"]: row for row in report["rows"]}
    assert rows["list"]["pages_by_resource"] == rows["audit"]["pages_by_resource"]
    objects = report["cluster"]["objects"]
    listed = ["nodes", "pods", "deployments", "statefulsets", "daemonsets", "replicasets"]
    listed += ["jobs", "cronjobs"]
    # A kind without objects (no DaemonSets here) still costs one request.
    pages = {r: max(1, -(-objects.get(r, 0) // 100)) for r in listed}
    assert rows["audit"]["pages_by_resource"] == dict(sorted(pages.items()))
    assert objects["nodes"] == 50 and objects["pods"] == 1000
