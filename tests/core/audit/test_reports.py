"""Policy WG reports: valid against the published CRD schemas, named so a rerun replaces them."""

from __future__ import annotations

import copy
import json
from collections import Counter
from typing import Any

import pytest

from tests.core.audit.conftest import Runner
from tests.core.audit.crd_schema import errors, schemas
from tests.objects import gfd_node, listed_pod, workload
from webhook.audit import LABELS, REPORT_NAME, AuditResult, reports, selector, stale

GPU1 = {"nvidia.com/gpu": 1}


@pytest.fixture
def result(run: Runner) -> AuditResult:
    """Something of every kind: a denial, a stuck pod, a refused one, nodes, two namespaces."""
    bad = workload("Deployment", "bad", "team-a")
    bad["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"nvidia.com/gpu": 1},
        "limits": {"nvidia.com/gpu": 2},
    }
    objects = [
        bad,
        workload("Deployment", "infer", "team-a", gpu=GPU1),
        listed_pod("infer-1", "team-a", gpu=GPU1, node="gpu-1", owned_by=("Deployment", "infer")),
        listed_pod("infer-2", "team-a", gpu=GPU1, owned_by=("Deployment", "infer"),
             scheduler="0/2 nodes are available: 2 Insufficient nvidia.com/gpu."),
        listed_pod("two", "team-b", gpu={"nvidia.com/gpu": 2}, node="gpu-2", phase="Failed",
             reason="UnexpectedAdmissionError", message="request too large"),
        workload("CronJob", "nightly", "team-b", gpu=GPU1),
        listed_pod("debug", "kube-system", gpu=GPU1, node="gpu-2"),
    ]  # fmt: skip
    batch = [{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}]
    shared = gfd_node("gpu-2", replicas=4, config_key="shared", taints=batch)
    return run(objects, [gfd_node("gpu-1"), shared])


@pytest.mark.parametrize("api", ["wgpolicyk8s", "openreports"])
def test_every_report_validates_against_its_crd_schema(result: AuditResult, api: str) -> None:
    written = reports(result, api=api)
    assert len(written) == 4  # the cluster, kube-system, team-a, team-b
    for report in written:
        assert errors(report) == [], json.dumps(report, indent=1)[:2000]


@pytest.mark.parametrize(
    ("api", "kinds"),
    [
        ("wgpolicyk8s", ("wgpolicyk8s.io/v1alpha2", "ClusterPolicyReport", "PolicyReport")),
        ("openreports", ("openreports.io/v1alpha1", "ClusterReport", "Report")),
    ],
)
def test_report_kinds_names_and_labels(
    result: AuditResult, api: str, kinds: tuple[str, str, str]
) -> None:
    api_version, cluster_kind, kind = kinds
    written = reports(result, api=api)
    assert [(r["kind"], r["metadata"].get("namespace")) for r in written] == [
        (cluster_kind, None),
        (kind, "kube-system"),
        (kind, "team-a"),
        (kind, "team-b"),
    ]
    for report in written:
        assert report["apiVersion"] == api_version
        assert report["metadata"]["name"] == REPORT_NAME
        assert report["metadata"]["labels"] == LABELS
        assert ("source" in report) is (api == "openreports")
    assert (
        selector()
        == "app.kubernetes.io/managed-by=gpu-policy,app.kubernetes.io/name=gpu-policy-audit"
    )


def test_one_result_per_rule_and_resource_with_counts(result: AuditResult) -> None:
    for report in reports(result):
        keys = Counter(
            (r["rule"], json.dumps(r.get("resources"), sort_keys=True)) for r in report["results"]
        )
        assert max(keys.values(), default=1) == 1
        assert report["summary"] == {
            k: sum(r["result"] == k for r in report["results"])
            for k in ("pass", "fail", "warn", "error", "skip")
        }
        for r in report["results"]:
            assert (r["source"], r["policy"]) == ("gpu-policy", "gpu-policy")
            assert r["timestamp"] == {"seconds": int(result.now.timestamp()), "nanos": 0}


def test_a_stuck_pod_as_a_report_result(result: AuditResult) -> None:
    team_a = next(r for r in reports(result) if r["metadata"].get("namespace") == "team-a")
    (stuck,) = [
        r for r in team_a["results"] if r["rule"] == "gpu-pod-scheduled" and r["result"] == "fail"
    ]
    assert stuck["resources"] == [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "infer",
                                   "namespace": "team-a", "uid": stuck["resources"][0]["uid"]}]  # fmt: skip
    assert stuck["severity"] == "high" and stuck["category"] == "GPU scheduling"
    props = stuck["properties"]
    assert props["schedulerMessage"] == "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    assert props["waiting"] == "29d 5h" and props["reasons"] == "full"
    assert props["slots"] == "1" and props["held"] == "1"
    assert "team-a/infer-1" in props["holders"] and "gpu-policy plan" in props["fix"]


def test_reruns_write_the_same_reports(run: Runner, result: AuditResult) -> None:
    """Same findings, same reports (names, order, content): server-side apply changes nothing."""
    assert reports(result) == reports(copy.deepcopy(result))


def test_a_namespace_too_large_for_one_object_is_split(result: AuditResult) -> None:
    written = reports(result, max_bytes=2000)
    team_a = [r for r in written if r["metadata"].get("namespace") == "team-a"]
    assert [r["metadata"]["name"] for r in team_a] == [
        REPORT_NAME, *(f"{REPORT_NAME}-{i}" for i in range(2, len(team_a) + 1))]  # fmt: skip
    assert len(team_a) > 1
    whole = next(r for r in reports(result) if r["metadata"].get("namespace") == "team-a")
    assert [x for r in team_a for x in r["results"]] == whole["results"]
    for report in team_a:
        assert errors(report) == []


def test_stale_reports_are_those_this_run_did_not_write(result: AuditResult) -> None:
    written = reports(result)
    existing = [
        ("PolicyReport", "team-a", REPORT_NAME),
        ("PolicyReport", "team-a", f"{REPORT_NAME}-2"),  # a split that is no longer needed
        ("PolicyReport", "gone", REPORT_NAME),  # a namespace without GPU workloads now
        ("ClusterPolicyReport", None, REPORT_NAME),
    ]
    assert stale(existing, written) == [
        ("PolicyReport", "gone", REPORT_NAME),
        ("PolicyReport", "team-a", f"{REPORT_NAME}-2"),
    ]


def _break(report: dict[str, Any], how: str) -> dict[str, Any]:
    report = copy.deepcopy(report)
    first = report["results"][0]
    if how == "unknown-result":
        first["result"] = "ok"
    elif how == "undeclared-field":
        first["resultt"] = "pass"
    elif how == "non-string-property":
        first["properties"] = {"pods": 2}
    elif how == "no-policy":
        del first["policy"]
    elif how == "nanos-out-of-range":
        first["timestamp"]["nanos"] = 2**31
    elif how == "bad-name":
        report["metadata"]["name"] = "GPU Policy"
    elif how == "bad-label":
        report["metadata"]["labels"] = {"app.kubernetes.io/name": "-x-"}
    return report


@pytest.mark.parametrize(
    "how",
    ["unknown-result", "undeclared-field", "non-string-property", "no-policy",
     "nanos-out-of-range", "bad-name", "bad-label"],
)  # fmt: skip
def test_validation_is_not_vacuous(result: AuditResult, how: str) -> None:
    report = next(r for r in reports(result) if r["metadata"].get("namespace") == "team-a")
    assert errors(report) == []
    assert errors(_break(report, how)), how


def test_the_vendored_schemas_are_the_four_report_kinds() -> None:
    assert sorted(schemas()) == [
        ("openreports.io/v1alpha1", "ClusterReport"),
        ("openreports.io/v1alpha1", "Report"),
        ("wgpolicyk8s.io/v1alpha2", "ClusterPolicyReport"),
        ("wgpolicyk8s.io/v1alpha2", "PolicyReport"),
    ]
