"""GPU budgets per namespace, as ``gpu-policy inventory`` and ``audit`` print them
(docs/quota.md, "Seeing budgets")."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from webhook.cli.render import cell, table
from webhook.contract import QUOTA_MILLI
from webhook.policy.inventory import Inventory
from webhook.policy.model import Policy
from webhook.policy.quota.budgets import Budget, namespace_budgets

HEADERS = ("NAMESPACE", "BUDGET", "USED", "CHARGED PODS", "UNCOUNTED GPU PODS")


def _gpus(milli: int | None) -> str | None:
    """Thousandths as GPU-equivalents: ``1.75``."""
    if milli is None:
        return None
    return f"{milli / QUOTA_MILLI:.3f}".rstrip("0").rstrip(".")


def budget_lines(budgets: list[Budget]) -> list[str]:
    """The budgets table (GPU-equivalents), and one line per uncounted pod."""
    if not budgets:
        return []
    rows = [
        [
            b.namespace,
            cell(_gpus(b.limit)) + (f" ({', '.join(b.quotas)})" if b.quotas else ""),
            cell(_gpus(b.used)),
            f"{b.charged_pods} ({_gpus(b.charged)})",
            str(len(b.uncounted)),
        ]
        for b in budgets
    ]
    lines = [
        "",
        "GPU budgets (GPU-equivalents; ResourceQuota on requests.gpu-policy.io/gpu-milli):",
    ]
    lines += table(HEADERS, rows)
    lines += [f"uncounted: {b.namespace}/{pod}" for b in budgets for pod in b.uncounted]
    return lines


def budget_json(budgets: list[Budget]) -> list[dict[str, Any]]:
    """The budgets as JSON-ready dicts, amounts in thousandths and in GPU-equivalents."""
    return [
        {
            **asdict(b),
            "quotas": list(b.quotas),
            "uncounted": list(b.uncounted),
            "limitGpus": _gpus(b.limit),
            "usedGpus": _gpus(b.used),
            "chargedGpus": _gpus(b.charged),
        }
        for b in budgets
    ]


def live_budgets(
    kubeconfig: str | None,
    context: str | None,
    policy: Policy,
    inventory: Inventory,
    *,
    timeout: float,
) -> list[Budget]:
    """The budgets of the cluster ``kubeconfig`` reaches (lists ResourceQuotas and pods)."""
    from webhook.kube.lister import connect_audit
    from webhook.kube.quotas import read_budget_objects

    api = connect_audit(kubeconfig, context)
    try:
        quotas, pods = read_budget_objects(api, timeout=timeout)
    finally:
        api.close()  # type: ignore[no-untyped-call]  # untyped upstream
    return namespace_budgets(quotas, pods, policy=policy, inventory=inventory)
