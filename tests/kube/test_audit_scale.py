"""The audit's benchmark cluster, its paged server, and the benchmark itself at a small size.

``bench/audit.py`` audits a generated cluster (``tests/support/audit_cluster.py``) served by
``tests/support/page_server.py``; these tests check that the server lists what the fake API
server lists, that the audit finds what the generator placed on purpose, and that the
benchmark runs end to end. No timings: those are the benchmark's to print.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.support.apiserver import FakeApiServer
from tests.support.audit_cluster import NOW, POLICY, Cluster
from tests.support.page_server import PageServer
from webhook.audit import audit, document
from webhook.policy import parse_policy

from .helpers import Pages, read_cluster

ROOT = Path(__file__).resolve().parents[2]


def live_audit(kubeconfig: Path, page_size: int) -> tuple[dict[str, Any], Pages]:
    """``gpu-policy audit --kubeconfig``'s path: the lister into a Collector, then audit()."""
    sink = Pages()
    nodes = read_cluster(kubeconfig, sink, page_size=page_size, timeout=10)
    policy = parse_policy(POLICY, source="bench")
    return document(audit(sink.collector, nodes, policy=policy, now=NOW)), sink


def problems(doc: dict[str, Any]) -> dict[str, int]:
    """Findings below pass per ``rule/result``, as Cluster.expected() counts them."""
    found = Counter(f"{f['rule']}/{f['result']}" for f in doc["findings"])
    return dict(sorted(found.items()))


def test_the_page_server_lists_what_the_fake_api_server_lists(tmp_path: Path) -> None:
    small = Cluster(50, 300, 0.3)
    nodes, objects = list(small.nodes()), list(small.objects())
    with FakeApiServer() as fake, PageServer() as pages:
        fake.add_many(nodes)
        fake.add_many(objects)
        pages.add_many(nodes)
        pages.add_many(objects)
        (tmp_path / "fake").mkdir()
        (tmp_path / "pages").mkdir()
        want, fake_sink = live_audit(fake.write_kubeconfig(tmp_path / "fake"), 7)
        got, page_sink = live_audit(pages.write_kubeconfig(tmp_path / "pages"), 7)
        fake_lists = Counter(r.resource for r in fake.requests if r.verb == "list")
    assert got == want
    assert page_sink.sizes == fake_sink.sizes
    assert pages.lists == fake_lists
    # 300 pods in pages of 7: 42 full pages and one of 6.
    assert [n for kind, n in page_sink.sizes if kind == "Pod"] == [7] * 42 + [6]


@pytest.mark.parametrize(
    ("nodes", "pods", "fraction"),
    [(50, 200, 0.5), (50, 1000, 0.1), (120, 3000, 0.2)],
    ids=["50-nodes-200-pods", "50-nodes-1000-pods", "120-nodes-3000-pods"],
)
def test_the_audit_finds_what_the_generator_placed(
    tmp_path: Path, nodes: int, pods: int, fraction: float
) -> None:
    cluster = Cluster(nodes, pods, fraction)
    with PageServer() as server:
        server.add_many(cluster.nodes())
        server.add_many(cluster.objects())
        doc, _ = live_audit(server.write_kubeconfig(tmp_path), 100)
    expected = cluster.expected().as_dict()
    assert doc["pods"] == expected["pods"]
    assert doc["pods"]["gpu"] == round(pods * fraction)
    assert len(doc["workloads"]) == expected["workloads"]
    assert problems(doc) == expected["findings"]
    # Every problem the generator placed on purpose is there, and pools ran full.
    assert {"gpu-pod-scheduled/fail", "gpu-pod-admitted/fail", "gpu-node-capacity/warn"} <= set(
        problems(doc)
    )


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_benchmark_runs_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "audit.json"
    sizes = ["--nodes", "50", "--pods", "1000", "--page-size", "100"]
    done = subprocess.run(
        [sys.executable, "bench/audit.py", *sizes, "--out", str(out)],
        cwd=ROOT,
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
