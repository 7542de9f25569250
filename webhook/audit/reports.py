"""The audit as Kubernetes Policy WG reports, the format Policy Reporter and Kyverno show.

``wgpolicyk8s.io/v1alpha2``: a PolicyReport per namespace for the namespaced findings
(workloads and pods) and a ClusterPolicyReport for the cluster-scoped ones (nodes); or,
with ``api="openreports"``, ``openreports.io/v1alpha1`` Report and ClusterReport, the
format's successor. Each finding is one result (one per rule and object): ``source``
``gpu-policy``, the rule id, ``pass``/``fail``/``warn``/``error``/``skip``, the object under
``resources`` and the fix, waiting time and scheduler message under ``properties``.

Names are fixed (``gpu-policy-audit`` in each namespace, and cluster-wide), so that applying
a run's reports with server-side apply replaces the previous run's; a namespace whose
results would not fit one object (etcd refuses objects above 1.5 MiB by default) gets
``gpu-policy-audit-2``, ``-3``, ... Every report carries LABELS, so the previous run's
reports that this run no longer writes can be listed and deleted (``stale``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from webhook.audit.audit import AuditResult
from webhook.audit.findings import CATEGORIES, Finding, format_age

__all__ = [
    "APIS",
    "LABELS",
    "MAX_REPORT_BYTES",
    "REPORT_NAME",
    "SOURCE",
    "report_result",
    "reports",
    "selector",
    "stale",
]

SOURCE = "gpu-policy"
REPORT_NAME = "gpu-policy-audit"
LABELS = {"app.kubernetes.io/managed-by": "gpu-policy", "app.kubernetes.io/name": REPORT_NAME}
#: api -> (apiVersion, namespaced kind, cluster kind)
APIS: dict[str, tuple[str, str, str]] = {
    "wgpolicyk8s": ("wgpolicyk8s.io/v1alpha2", "PolicyReport", "ClusterPolicyReport"),
    "openreports": ("openreports.io/v1alpha1", "Report", "ClusterReport"),
}
#: Results per report object are cut at this many bytes of JSON: below etcd's default
#: 1.5 MiB request limit, with room for metadata and managedFields.
MAX_REPORT_BYTES = 1_000_000
_SEVERITY = {"scheduling": "high", "isolation": "high", "policy": "medium", "nodes": "low"}


def selector() -> str:
    """The label selector that lists every report an audit wrote (``-l`` for kubectl)."""
    return ",".join(f"{k}={v}" for k, v in LABELS.items())


def report_result(finding: Finding, *, seconds: int) -> dict[str, Any]:
    """One finding as a report result; ``seconds`` is the audit's time (Unix seconds)."""
    properties: dict[str, str] = {}
    if finding.fix:
        properties["fix"] = finding.fix
    if finding.pods:
        properties["pods"] = str(finding.pods)
    if finding.waiting is not None:
        properties["waiting"] = format_age(finding.waiting)
        properties["waitingSeconds"] = str(finding.waiting)
    if finding.since is not None:
        properties["since"] = finding.since.strftime("%Y-%m-%dT%H:%M:%SZ")
    if finding.scheduler:
        properties["schedulerMessage"] = finding.scheduler
    if finding.reasons:
        properties["reasons"] = ", ".join(finding.reasons)
    for key, value in finding.details.items():
        properties.setdefault(key, str(value))
    out: dict[str, Any] = {
        "source": SOURCE,
        "policy": SOURCE,
        "rule": finding.rule,
        "category": CATEGORIES.get(finding.category, finding.category),
        "result": finding.result,
        "scored": True,
        "message": finding.message,
        "timestamp": {"seconds": seconds, "nanos": 0},
    }
    if finding.result in ("fail", "warn", "error"):
        out["severity"] = _SEVERITY.get(finding.category, "medium")
    if finding.subject.name:
        out["resources"] = [finding.subject.as_reference()]
    if properties:
        out["properties"] = properties
    return out


def _summary(results: list[dict[str, Any]]) -> dict[str, int]:
    counts = {r: 0 for r in ("pass", "fail", "warn", "error", "skip")}
    for result in results:
        counts[result["result"]] += 1
    return counts


def _chunks(results: list[dict[str, Any]], max_bytes: int) -> list[list[dict[str, Any]]]:
    chunks: list[list[dict[str, Any]]] = [[]]
    size = 0
    for result in results:
        n = len(json.dumps(result, separators=(",", ":")))
        if chunks[-1] and size + n > max_bytes:
            chunks.append([])
            size = 0
        chunks[-1].append(result)
        size += n
    return chunks


def _report(
    api: str, namespace: str | None, name: str, results: list[dict[str, Any]]
) -> dict[str, Any]:
    api_version, kind, cluster_kind = APIS[api]
    metadata: dict[str, Any] = {"name": name, "labels": dict(LABELS)}
    if namespace:
        metadata["namespace"] = namespace
    out: dict[str, Any] = {
        "apiVersion": api_version,
        "kind": kind if namespace else cluster_kind,
        "metadata": metadata,
    }
    if api == "openreports":
        out["source"] = SOURCE
    out["summary"] = _summary(results)
    out["results"] = results
    return out


def reports(
    result: AuditResult, *, api: str = "wgpolicyk8s", max_bytes: int = MAX_REPORT_BYTES
) -> list[dict[str, Any]]:
    """The audit's reports: the cluster report first, then one per namespace (by name).

    ``api`` is ``wgpolicyk8s`` (PolicyReport / ClusterPolicyReport) or ``openreports``
    (Report / ClusterReport). Results are ordered by object and rule, so that two runs that
    find the same thing write the same reports but for the timestamps.
    """
    if api not in APIS:
        raise ValueError(f"unknown report API {api!r}: use {' or '.join(APIS)}")
    seconds = int(result.now.timestamp())
    by_namespace: dict[str, list[Finding]] = defaultdict(list)
    for finding in result.findings:
        by_namespace[finding.subject.namespace or ""].append(finding)
    by_namespace.setdefault("", [])  # the cluster report exists even when it is empty
    out = []
    for namespace in sorted(by_namespace):
        findings = sorted(
            by_namespace[namespace],
            key=lambda f: (f.subject.kind, f.subject.name, f.rule),
        )
        results = [report_result(f, seconds=seconds) for f in findings]
        for i, chunk in enumerate(_chunks(results, max_bytes)):
            name = REPORT_NAME if i == 0 else f"{REPORT_NAME}-{i + 1}"
            out.append(_report(api, namespace or None, name, chunk))
    return out


def stale(
    existing: Iterable[tuple[str, str | None, str]], written: Iterable[dict[str, Any]]
) -> list[tuple[str, str | None, str]]:
    """The previous run's reports (kind, namespace, name) that this run did not write.

    ``existing`` are the reports that carry LABELS in the cluster (list them with
    ``selector()``); what this returns is for the caller to delete.
    """
    kept = {(r["kind"], r["metadata"].get("namespace"), r["metadata"]["name"]) for r in written}
    return sorted(
        (e for e in existing if (e[0], e[1] or None, e[2]) not in kept),
        key=lambda e: (e[1] or "", e[0], e[2]),
    )
