"""Per-namespace GPU budgets as the cluster holds them (docs/quota.md, "Seeing budgets").

The budget is a ResourceQuota's ``hard`` ``requests.gpu-policy.io/gpu-milli``, the use its
``status.used`` (the API server's own ledger) and, beside it, what the namespace's pods are
charged; a GPU pod without the request runs uncounted: it predates the feature, or its
namespace is exempt from the policy. ``gpu-policy inventory`` and ``audit`` print them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.contract import QUOTA_RESOURCE
from webhook.policy.demand import pod_requests
from webhook.policy.inventory import Inventory
from webhook.policy.model import Policy
from webhook.policy.quantity import QuantityError, quantity_value
from webhook.policy.resources import parse_resource

QUOTA_KEYS = (f"requests.{QUOTA_RESOURCE}", QUOTA_RESOURCE)


@dataclass(frozen=True, slots=True)
class Budget:
    """One namespace: its budget and use in thousandths of a GPU-equivalent, its GPU pods."""

    namespace: str
    quotas: tuple[str, ...]
    limit: int | None
    used: int | None
    charged: int
    charged_pods: int
    uncounted: tuple[str, ...]


def _milli(amounts: object) -> int | None:
    if not isinstance(amounts, Mapping):
        return None
    for key in QUOTA_KEYS:
        if key in amounts:
            try:
                return int(quantity_value(amounts[key]))
            except QuantityError:
                return None
    return None


def _meta(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def budget_limits(quotas: Iterable[Mapping[str, Any]]) -> dict[str, tuple[str, int]]:
    """Per namespace, the ResourceQuota on the synthetic resource with the smallest ``hard``
    (each must hold, so the smallest is the budget) and that amount in thousandths."""
    out: dict[str, tuple[str, int]] = {}
    for quota in quotas:
        namespace, name = _meta(quota)
        limit = _milli((quota.get("spec") or {}).get("hard"))
        if limit is not None and (namespace not in out or limit < out[namespace][1]):
            out[namespace] = (name, limit)
    return out


def asks_for_gpu(spec: Mapping[str, Any], inventory: Inventory) -> bool:
    """True when the pod spec asks for a GPU: an ``nvidia.com`` GPU name, a name a DeviceClass
    serves, or a claim."""
    if spec.get("resourceClaims"):
        return True
    dra = inventory.dra
    return any(
        parse_resource(name) is not None
        or (dra is not None and dra.class_for_resource(name) is not None)
        for name in pod_requests(spec)
    )


def namespace_budgets(
    quotas: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    *,
    policy: Policy,
    inventory: Inventory,
) -> list[Budget]:
    """Every namespace with a GPU budget or a GPU pod, sorted by name."""
    limits: dict[str, list[tuple[str, int | None, int | None]]] = {}
    for quota in quotas:
        namespace, name = _meta(quota)
        limit = _milli((quota.get("spec") or {}).get("hard"))
        if limit is not None:
            used = _milli((quota.get("status") or {}).get("used"))
            limits.setdefault(namespace, []).append((name, limit, used))
    charged: dict[str, list[int]] = {}
    uncounted: dict[str, list[str]] = {}
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue  # the quota no longer counts them either
        namespace, name = _meta(pod)
        spec = pod.get("spec") or {}
        cost = pod_requests(spec).get(QUOTA_RESOURCE)
        if cost is not None:
            charged.setdefault(namespace, []).append(int(cost))
        elif asks_for_gpu(spec, inventory):
            why = "exempt" if namespace in policy.exempt_namespaces else "predates the charge"
            uncounted.setdefault(namespace, []).append(f"{name} ({why})")
    out = []
    for namespace in sorted({*limits, *charged, *uncounted}):
        found = limits.get(namespace, [])
        # Several quotas on the resource: each must hold, so the smallest is the budget.
        tightest = min(found, key=lambda q: q[1] or 0, default=None)
        out.append(
            Budget(
                namespace=namespace,
                quotas=tuple(q[0] for q in found),
                limit=None if tightest is None else tightest[1],
                used=None if tightest is None else tightest[2],
                charged=sum(charged.get(namespace, [])),
                charged_pods=len(charged.get(namespace, [])),
                uncounted=tuple(uncounted.get(namespace, [])),
            )
        )
    return out
