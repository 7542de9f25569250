"""Reading what GPU budgets need: the ResourceQuotas and the pods (docs/quota.md).

The server polls the budgets (``read_budget_limits``) so that its warning names them; the
budget tables of ``inventory`` and ``audit`` also list the pods (``read_budget_objects``).

Pods are listed page by page (``lister.list_pages``) and kept only as far as a budget reads
them: namespace, name, phase, the containers' resources and the claims.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from webhook.kube.lister import PAGE_SIZE, failure, list_pages
from webhook.kube.raw import PODS, RESOURCE_QUOTAS, Collection
from webhook.policy.quota.budgets import budget_limits


def _trim_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    return {
        "metadata": {"namespace": meta.get("namespace"), "name": meta.get("name")},
        "status": {"phase": (pod.get("status") or {}).get("phase")},
        "spec": {
            **{
                key: [{"resources": c.get("resources") or {}} for c in spec.get(key) or []]
                for key in ("containers", "initContainers")
            },
            "resourceClaims": spec.get("resourceClaims") or [],
        },
    }


def read_budget_limits(
    api: client.ApiClient, *, timeout: float = 10.0
) -> dict[str, tuple[str, int]]:
    """Per namespace, its GPU budget (ResourceQuota name, thousandths); ClusterError when
    ResourceQuotas cannot be listed."""
    try:
        quotas = [
            q
            for page in list_pages(Collection(api, RESOURCE_QUOTAS), timeout=timeout)
            for q in page
        ]
    except ApiException as exc:
        raise failure("listing ResourceQuotas for GPU budgets", exc) from None
    return budget_limits(quotas)


def read_budget_objects(
    api: client.ApiClient, *, page_size: int = PAGE_SIZE, timeout: float = 30.0
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every ResourceQuota and every pod (trimmed), cluster-wide; ClusterError when refused."""
    try:
        quotas = [
            q
            for page in list_pages(
                Collection(api, RESOURCE_QUOTAS), page_size=page_size, timeout=timeout
            )
            for q in page
        ]
        pods = [
            _trim_pod(p)
            for page in list_pages(Collection(api, PODS), page_size=page_size, timeout=timeout)
            for p in page
        ]
    except ApiException as exc:
        raise failure("listing ResourceQuotas and pods for GPU budgets", exc) from None
    return quotas, pods
