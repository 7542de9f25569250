"""Writing the audit's reports into the cluster (``gpu-policy audit --apply``).

Each report goes in with server-side apply (``application/apply-patch+yaml``, field manager
``gpu-policy``, ``force``): the first run creates it, the next ones replace what the previous
run wrote, and nothing else has to be read first. Then the reports that carry the audit's
labels (``webhook.audit.selector()``) and that this run did not write (a namespace whose
GPU workloads are gone, a ``-2`` continuation no longer needed) are deleted. Reports of any
other source never match the selector, and are never touched.

The order is what makes a failure harmless: the existing reports are listed first (a missing
CRD or missing permission stops the run before it writes anything), the stale ones are
deleted last (only once every report of this run is in). The report kinds are custom
resources: the API server answers 404 when their CRD is not installed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from webhook.audit import APIS, selector, stale
from webhook.kube.failures import describe_failure
from webhook.kube.lister import ClusterError, failure, list_pages
from webhook.kube.raw import Collection, custom_path, read_json, request

__all__ = ["FIELD_MANAGER", "Applied", "ReportKind", "apply_reports", "report_kinds"]

FIELD_MANAGER = "gpu-policy"
APPLY_PATCH = "application/apply-patch+yaml"
#: Where each report API's CRDs come from, for the message when they are not installed.
_CRD_SOURCES = {
    "wgpolicyk8s": "Kyverno and Policy Reporter install them; or kubectl apply the CRDs of "
    "kubernetes-sigs/wg-policy-prototypes (policy-report/crd/v1alpha2)",
    "openreports": "kubectl apply the CRDs of openreports/reports-api "
    "(crd/openreports.io/v1alpha1)",
}
_OTHER_API = {"wgpolicyk8s": "openreports", "openreports": "wgpolicyk8s"}


@dataclass(frozen=True)
class ReportKind:
    """One report kind as the API server serves it (a custom resource)."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool

    def path(self, namespace: str | None = None) -> tuple[str, dict[str, str]]:
        """The path of one report (``{name}`` to fill) and its params, cluster-wide or in
        ``namespace``."""
        where = "namespaces/{namespace}/" if namespace else ""
        path = custom_path(self.group, self.version, where + self.plural) + "/{name}"
        return path, ({"namespace": namespace} if namespace else {})

    @property
    def resource(self) -> str:
        """``plural.group``, as RBAC and ``kubectl get`` name it."""
        return f"{self.plural}.{self.group}"


def report_kinds(api: str) -> tuple[ReportKind, ReportKind]:
    """(cluster kind, namespaced kind) of the report API ``api`` (a key of ``APIS``)."""
    api_version, kind, cluster_kind = APIS[api]
    group, version = api_version.split("/")
    return (
        ReportKind(group, version, cluster_kind, cluster_kind.lower() + "s", namespaced=False),
        ReportKind(group, version, kind, kind.lower() + "s", namespaced=True),
    )


@dataclass(frozen=True)
class Applied:
    """What ``apply_reports`` did: ``Kind namespace/name`` (or ``Kind name``) of each report."""

    applied: tuple[str, ...]
    deleted: tuple[str, ...]


def _label(kind: str, namespace: str | None, name: str) -> str:
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


def _error(doing: str, kind: ReportKind, api: str, exc: Exception) -> ClusterError:
    """One line: what failed, the API server's answer, and the fix."""
    status = exc.status if isinstance(exc, ApiException) else None
    if status == 404:
        return ClusterError(
            f"{doing}: {describe_failure(exc)}: the cluster does not serve {kind.kind} "
            f"({kind.group}/{kind.version}): install the {kind.kind} CRD "
            f"({_CRD_SOURCES[api]}), or write the other format with --report-api "
            f"{_OTHER_API[api]}"
        )
    fix = ""
    if status == 403:
        fix = (
            f"; grant list, create, patch and delete on {kind.resource} (the chart's "
            "audit.enabled does)"
        )
    return failure(doing, exc, fix)


def _existing(
    api: client.ApiClient, kind: ReportKind, *, page_size: int, timeout: float
) -> list[tuple[str, str | None, str]]:
    """(kind, namespace, name) of every ``kind`` report the audit wrote (by its labels)."""
    path = custom_path(kind.group, kind.version, kind.plural)
    collection = Collection(api, path, (("labelSelector", selector()),))
    found = []
    for page in list_pages(collection, page_size=page_size, timeout=timeout):
        for item in page:
            meta = item.get("metadata") or {}
            found.append((kind.kind, meta.get("namespace"), meta["name"]))
    return found


def _apply(api: client.ApiClient, kind: ReportKind, report: dict[str, Any], timeout: float) -> None:
    meta = report["metadata"]
    namespace = meta["namespace"] if kind.namespaced else None
    # The client sends a dict as JSON (which is YAML) under the apply-patch+yaml content type
    # (since kubernetes-client/python#1850, release 25).
    path, params = kind.path(namespace)
    read_json(
        request(
            api,
            "PATCH",
            path,
            params={**params, "name": meta["name"]},
            query=(("fieldManager", FIELD_MANAGER), ("force", True)),
            body=report,
            content_type=APPLY_PATCH,
            timeout=timeout,
        )
    )


def _delete(
    api: client.ApiClient, kind: ReportKind, namespace: str | None, name: str, timeout: float
) -> bool:
    """Delete one report; False when it was already gone."""
    try:
        path, params = kind.path(namespace)
        read_json(request(api, "DELETE", path, params={**params, "name": name}, timeout=timeout))
    except ApiException as exc:
        if exc.status == 404:  # deleted meanwhile (another run, a user): what we wanted
            return False
        raise
    return True


def apply_reports(
    api_client: client.ApiClient,
    written: list[dict[str, Any]],
    *,
    api: str,
    page_size: int = 500,
    timeout: float = 30.0,
) -> Applied:
    """Apply ``written`` (``webhook.audit.reports(result, api=api)``); delete the stale ones.

    Raises ClusterError with one line (the kind, the API server's answer, the fix) when a
    report kind is not served, a request is refused or the API server cannot be reached.
    """
    kinds = {k.kind: k for k in report_kinds(api)}
    existing: list[tuple[str, str | None, str]] = []
    for kind in kinds.values():
        try:
            existing += _existing(api_client, kind, page_size=page_size, timeout=timeout)
        except Exception as exc:  # ApiException, and urllib3's several connection errors
            raise _error(f"listing {kind.kind}s", kind, api, exc) from None
    applied = []
    for report in written:
        kind = kinds[report["kind"]]
        label = _label(kind.kind, report["metadata"].get("namespace"), report["metadata"]["name"])
        try:
            _apply(api_client, kind, report, timeout)
        except Exception as exc:
            raise _error(f"applying {label}", kind, api, exc) from None
        applied.append(label)
    deleted = []
    for kind_name, namespace, name in stale(existing, written):
        kind, label = kinds[kind_name], _label(kind_name, namespace, name)
        try:
            if _delete(api_client, kind, namespace, name, timeout):
                deleted.append(label)
        except Exception as exc:
            raise _error(f"deleting {label}", kind, api, exc) from None
    return Applied(tuple(applied), tuple(deleted))
