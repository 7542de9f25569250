"""``gpu-policy audit --apply``: the reports written with server-side apply, through the real
client against the real API server, which validates each against its CRD's schema (the CRDs
made of the vendored schemas in tests/fixtures/report-crds)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cli import run_cli
from tests.support.cluster import LiveCluster
from webhook.audit import LABELS, Collector, audit, reports
from webhook.files import load_policy
from webhook.kube.lister import ClusterError, connect_audit, read_for_audit
from webhook.kube.reports import FIELD_MANAGER, apply_reports, report_kinds

from .test_lister import CLUSTER, NOW, dump_nodes, dump_objects

# api -> (cluster resource, namespaced resource)
RESOURCES = {
    "wgpolicyk8s": ("clusterpolicyreports", "policyreports"),
    "openreports": ("clusterreports", "reports"),
}
APIS = pytest.mark.parametrize("api", list(RESOURCES))


@pytest.fixture
def kubeconfig(cluster: LiveCluster, report_crds: list[str], tmp_path: Path) -> Path:
    """seed003-before in the real API server, with the report CRDs; its kubeconfig."""
    cluster.add_many(dump_nodes())
    cluster.add_many(dump_objects())
    return cluster.write_kubeconfig(tmp_path)


def stored(cluster: LiveCluster, api: str) -> dict[tuple[str, str | None, str], dict[str, Any]]:
    """Every report the API server holds, by (kind, namespace, name)."""
    out = {}
    for item in cluster.dump(*(k.kind for k in report_kinds(api))):
        meta = item["metadata"]
        out[(item["kind"], meta.get("namespace"), meta["name"])] = item
    return out


def run_audit(kubeconfig: Path, api: str, **kwargs: Any) -> Any:
    """One audit of the cluster at the dump's clock, its reports applied."""
    policy = load_policy(CLUSTER / "policy.yaml")
    client = connect_audit(str(kubeconfig))
    try:
        collector = Collector()
        nodes = read_for_audit(client, collector, timeout=10)
        now = datetime(2025, 7, 14, 8, 18, 53, tzinfo=UTC)
        written = reports(audit(collector, nodes, policy=policy, now=now), api=api)
        return apply_reports(client, written, api=api, timeout=10, **kwargs), written
    finally:
        client.close()


def foreign_report(api: str, namespace: str) -> dict[str, Any]:
    """A report another tool wrote (Kyverno's labels), in ``namespace``."""
    api_version = f"{report_kinds(api)[1].group}/{report_kinds(api)[1].version}"
    return {
        "apiVersion": api_version,
        "kind": report_kinds(api)[1].kind,
        "metadata": {
            "name": "kyverno-pod-security",
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "kyverno"},
        },
        "results": [],
    }


@APIS
def test_the_first_run_creates_the_reports_a_rerun_replaces_them(
    cluster: LiveCluster, kubeconfig: Path, api: str
) -> None:
    cluster_kind, kind = (k.kind for k in report_kinds(api))
    done, written = run_audit(kubeconfig, api)
    expected = {
        (cluster_kind, None, "gpu-policy-audit"),
        (kind, "nlp", "gpu-policy-audit"),
        (kind, "pii", "gpu-policy-audit"),
    }
    assert set(stored(cluster, api)) == expected
    assert done.deleted == ()
    assert sorted(done.applied) == sorted(
        f"{k} {ns}/{n}" if ns else f"{k} {n}" for k, ns, n in expected
    )
    # What was stored is what was written, and the field manager owns it.
    for report in written:
        meta = report["metadata"]
        item = stored(cluster, api)[(report["kind"], meta.get("namespace"), meta["name"])]
        assert item["results"] == report["results"]
        assert item["metadata"]["labels"] == LABELS
        assert [m["manager"] for m in item["metadata"]["managedFields"]] == [FIELD_MANAGER]
    nlp = stored(cluster, api)[(kind, "nlp", "gpu-policy-audit")]
    assert nlp["summary"]["fail"] == 1
    # Every write was a server-side apply with force, by the tool's field manager.
    patches = [r for r in cluster.requests if r.verb == "patch"]
    assert len(patches) == 3
    assert all(r.query == {"fieldManager": FIELD_MANAGER, "force": "true"} for r in patches)
    assert not [r for r in cluster.requests if r.verb in ("create", "update")]

    # The pod that held the slot in nlp goes: the replicas fit, the rerun's report says so.
    cluster.modify(
        "Pod",
        "nlp-inference-7f9c6d8b54-q7x2m",
        lambda p: p["status"].update(phase="Succeeded"),
        namespace="nlp",
    )
    again, _ = run_audit(kubeconfig, api)
    assert again.deleted == ()
    after = stored(cluster, api)
    assert set(after) == expected
    assert after[(kind, "nlp", "gpu-policy-audit")]["results"] != nlp["results"]


@APIS
def test_reports_a_run_no_longer_writes_are_deleted_and_nothing_else(
    cluster: LiveCluster, kubeconfig: Path, api: str
) -> None:
    cluster_kind, kind = (k.kind for k in report_kinds(api))
    run_audit(kubeconfig, api)
    cluster.add(foreign_report(api, "pii"))
    # pii's GPU workload goes away: its report is the previous run's only.
    for obj in dump_objects():
        if obj["metadata"]["namespace"] == "pii":
            cluster.delete(obj["kind"], obj["metadata"]["name"], namespace="pii")
    done, _ = run_audit(kubeconfig, api)
    assert done.deleted == (f"{kind} pii/gpu-policy-audit",)
    assert set(stored(cluster, api)) == {
        (cluster_kind, None, "gpu-policy-audit"),
        (kind, "nlp", "gpu-policy-audit"),
        (kind, "pii", "kyverno-pod-security"),
    }
    # Only the tool's own reports were listed: by their labels.
    lists = [r for r in cluster.requests if r.resource in RESOURCES[api] and r.verb == "list"]
    assert lists
    assert all(
        r.query["labelSelector"]
        == "app.kubernetes.io/managed-by=gpu-policy,app.kubernetes.io/name=gpu-policy-audit"
        for r in lists
    )


def test_the_earlier_reports_are_listed_page_by_page(
    cluster: LiveCluster, kubeconfig: Path
) -> None:
    run_audit(kubeconfig, "wgpolicyk8s")
    for obj in dump_objects():
        if obj["metadata"]["namespace"] == "pii":
            cluster.delete(obj["kind"], obj["metadata"]["name"], namespace="pii")
    cluster.requests.clear()
    done, _ = run_audit(kubeconfig, "wgpolicyk8s", page_size=1)
    assert done.deleted == ("PolicyReport pii/gpu-policy-audit",)
    lists = [r for r in cluster.requests if r.resource == "policyreports" and r.verb == "list"]
    assert [r.query.get("limit") for r in lists] == ["1", "1"]
    assert "continue" in lists[1].query


def test_the_api_server_refuses_what_the_crd_schema_refuses(
    cluster: LiveCluster, kubeconfig: Path
) -> None:
    # The guard on every apply above: a report the schema refuses is a cluster error.
    policy = load_policy(CLUSTER / "policy.yaml")
    client = connect_audit(str(kubeconfig))
    try:
        collector = Collector()
        nodes = read_for_audit(client, collector, timeout=10)
        written = reports(audit(collector, nodes, policy=policy, now=datetime.now(UTC)))
        written[1]["results"][0]["result"] = "failed"
        with pytest.raises(
            ClusterError, match=r"HTTP 422 .*results\[0\]\.result: Unsupported value: \"failed\""
        ):
            apply_reports(client, written, api="wgpolicyk8s", timeout=10)
    finally:
        client.close()


def audit_cli(kubeconfig: Path, *args: str) -> Any:
    policy = str(CLUSTER / "policy.yaml")
    return run_cli("audit", "--kubeconfig", str(kubeconfig), "--policy", policy, *args)


@APIS
def test_the_command_applies_and_keeps_its_exit_status(
    cluster: LiveCluster, kubeconfig: Path, api: str
) -> None:
    done = audit_cli(kubeconfig, "--now", NOW, "--apply", "--report-api", api, "-o", "json")
    assert done.returncode == 1, done.stderr
    assert yaml.safe_load(done.stdout)["exitStatus"] == 1
    cluster_kind, kind = (k.kind for k in report_kinds(api))
    assert done.stderr.splitlines()[-1] == (
        f"reports applied: 1 {cluster_kind}, 2 {kind}s (field manager gpu-policy)"
    )
    assert len(stored(cluster, api)) == 3


Breaks = Callable[[LiveCluster], None]


@pytest.mark.parametrize(
    ("api", "breaks", "words"),
    [
        (
            "wgpolicyk8s",
            lambda c: c.remove_crd("clusterpolicyreports.wgpolicyk8s.io"),
            "listing ClusterPolicyReports: HTTP 404 Not Found: the cluster does not serve "
            "ClusterPolicyReport (wgpolicyk8s.io/v1alpha2): install the ClusterPolicyReport CRD",
        ),
        (
            "openreports",
            lambda c: c.remove_crd("reports.openreports.io"),
            "the cluster does not serve Report (openreports.io/v1alpha1): install the Report "
            "CRD (kubectl apply the CRDs of openreports/reports-api",
        ),
        (
            "wgpolicyk8s",
            lambda c: c.forbid("policyreports"),
            "listing PolicyReports: HTTP 403 Forbidden: policyreports.wgpolicyk8s.io is "
            'forbidden: User "restricted-',
        ),
        (
            "wgpolicyk8s",
            lambda c: c.forbid("policyreports"),
            "grant list, create, patch and delete on policyreports.wgpolicyk8s.io",
        ),
    ],
    ids=["crd-missing", "openreports-crd-missing", "forbidden", "forbidden-fix"],
)
def test_a_cluster_error_is_one_line_with_the_fix_and_exit_2(
    cluster: LiveCluster, kubeconfig: Path, api: str, breaks: Breaks, words: str
) -> None:
    breaks(cluster)
    done = audit_cli(kubeconfig, "--apply", "--report-api", api, "-o", "json")
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("gpu-policy audit: ")
    assert words in done.stderr
    # Nothing was written: the existing reports are listed before anything is applied.
    assert not [r for r in cluster.requests if r.verb in ("patch", "delete")]


def test_apply_needs_a_live_cluster() -> None:
    done = run_cli(
        "audit",
        "--nodes",
        str(CLUSTER / "nodes.yaml"),
        "--objects",
        str(CLUSTER / "nodes.yaml"),
        "--apply",
        env={"PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 2
    assert "--apply writes the reports to a live cluster" in done.stderr
