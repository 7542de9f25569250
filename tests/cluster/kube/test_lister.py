"""The audit's paged listing, through the real client against the real API server."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cli import run_cli
from tests.support.cluster import LiveCluster
from tests.support.controlplane import ControlPlane
from tests.support.kube_helpers import Pages, read_cluster
from tests.support.paths import REPO
from webhook.audit import Collector, audit, document
from webhook.files import kubernetes_objects, load_policy, nodes_from_text, read_text
from webhook.kube.lister import AUDIT_KINDS, ClusterError
from webhook.kube.source import DRA_KINDS

ROOT = REPO
CLUSTER = ROOT / "examples" / "clusters" / "seed003-before"
OBJECTS = ROOT / "examples" / "audit" / "seed003-before" / "objects.yaml"
NOW = "2025-07-14T08:18:53Z"
RESOURCES = {
    "Pod": "pods",
    "Deployment": "deployments",
    "StatefulSet": "statefulsets",
    "DaemonSet": "daemonsets",
    "ReplicaSet": "replicasets",
    "Job": "jobs",
    "CronJob": "cronjobs",
}


def dump_objects() -> list[dict[str, Any]]:
    return [d.value for d in kubernetes_objects(read_text(OBJECTS), source=str(OBJECTS))]


def dump_nodes() -> list[dict[str, Any]]:
    path = CLUSTER / "nodes.yaml"
    return nodes_from_text(read_text(path), source=str(path))


@pytest.fixture
def kubeconfig(cluster: LiveCluster, tmp_path: Path) -> Path:
    """The dump's objects in the real API server; a kubeconfig for it (through the proxy)."""
    cluster.add_many(dump_nodes())
    cluster.add_many(dump_objects())
    return cluster.write_kubeconfig(tmp_path)


@pytest.mark.parametrize("page_size", [1, 2, 500], ids=["page-1", "page-2", "page-500"])
def test_the_live_audit_is_the_dump_audit(
    cluster: LiveCluster, kubeconfig: Path, page_size: int
) -> None:
    sink = Pages()
    nodes = read_cluster(kubeconfig, sink, page_size=page_size, timeout=10)
    policy = load_policy(CLUSTER / "policy.yaml")
    now = datetime(2025, 7, 14, 8, 18, 53, tzinfo=UTC)
    live = document(audit(sink.collector, nodes, policy=policy, now=now))
    # The same cluster as a dump (`kubectl get -o yaml` of every kind): read in one request
    # per kind, the server's own fields (uids, creationTimestamps) and all.
    dumped = Collector()
    # With the DRA objects the live read lists too: other tests on this control plane may have
    # left claims or templates, and both sides must see the same ones.
    dumped.add_all(cluster.dump(*AUDIT_KINDS, *DRA_KINDS.values()))
    offline = document(audit(dumped, cluster.dump("Node"), policy=policy, now=now))
    assert live["findings"] == offline["findings"]
    assert live["scanned"] == offline["scanned"]
    assert live["exitStatus"] == 1
    # Every page holds at most page_size objects, and every kind was paged through.
    # (DRA objects reach the sink as one list per kind, read page by page before.)
    assert all(size <= page_size for kind, size in sink.sizes if kind in AUDIT_KINDS)
    assert {kind for kind, _ in sink.sizes} - set(DRA_KINDS.values()) == set(AUDIT_KINDS)
    for kind, resource in RESOURCES.items():
        lists = [r for r in cluster.requests if r.resource == resource and r.verb == "list"]
        assert all(r.query.get("limit") == str(page_size) for r in lists)
        stored = sum(1 for o in dump_objects() if o["kind"] == kind)
        assert len(lists) == max(1, -(-stored // page_size)), kind
        assert sum(1 for r in lists if "continue" in r.query) == len(lists) - 1


def test_a_forbidden_kind_is_one_line_naming_it(cluster: LiveCluster, kubeconfig: Path) -> None:
    cluster.forbid("cronjobs")
    with pytest.raises(
        ClusterError,
        match=r'^listing CronJobs: HTTP 403 Forbidden: cronjobs\.batch is forbidden: User "restricted-\d+" cannot list resource "cronjobs"',
    ):
        read_cluster(kubeconfig, Collector(), timeout=10)


def test_a_cluster_that_is_down_is_one_line(cluster: LiveCluster, kubeconfig: Path) -> None:
    cluster.go_down("503")
    with pytest.raises(ClusterError, match=r"^listing Nodes: "):
        read_cluster(kubeconfig, Collector(), timeout=10)


def audit_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("audit", *args)


def test_the_command_on_a_live_cluster(cluster: LiveCluster, kubeconfig: Path) -> None:
    common = ["--kubeconfig", str(kubeconfig), "--policy", str(CLUSTER / "policy.yaml")]
    done = audit_cli(*common, "--now", NOW, "--page-size", "2", "-o", "json")
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    assert doc["pods"] == {"gpu": 4, "bound": 2, "waiting": 2, "refused": 0}
    assert [f["rule"] for f in doc["findings"] if f["result"] == "fail"] == ["gpu-pod-scheduled"]
    reports = audit_cli(*common, "--now", NOW, "-o", "reports")
    assert reports.returncode == 1
    assert len([d for d in yaml.safe_load_all(reports.stdout) if d]) == 3
    cluster.forbid("pods")
    refused = audit_cli(*common)
    assert refused.returncode == 2
    assert refused.stderr.startswith("gpu-policy audit: listing Pods: HTTP 403 Forbidden")
    assert len(refused.stderr.splitlines()) == 1


def test_as_a_kubectl_plugin_it_reads_the_current_kubeconfig(
    control_plane: ControlPlane, kubeconfig: Path, tmp_path: Path
) -> None:
    # `kubectl gpu-policy audit` with no --kubeconfig and no dumps reads the cluster of
    # $KUBECONFIG, as kubectl does; `gpu-policy audit` alone still asks for a source.
    plugin = Path(sys.executable).parent / "kubectl-gpu_policy"
    if not plugin.exists():
        pytest.skip("needs the installed package (pip install -e .)")
    env = {
        "PATH": str(Path(sys.executable).parent),
        # The cluster's own kubeconfig, as kubectl reads it: TLS, a client certificate.
        "KUBECONFIG": str(control_plane.kubeconfig),
        "HOME": str(tmp_path),
    }
    common = ["audit", "--policy", str(CLUSTER / "policy.yaml"), "--now", NOW, "-o", "json"]

    def run(script: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(Path(sys.executable).parent / script), *common],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=60,
            check=False,
        )

    done = run("kubectl-gpu_policy")
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["pods"]["waiting"] == 2
    refused = run("gpu-policy")
    assert refused.returncode == 2
    assert "give --kubeconfig" in refused.stderr
