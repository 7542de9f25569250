"""The request the mutating webhook adds under ``spec.quota.enabled`` (docs/quota.md).

A GPU pod's cost in GPU-equivalents (``weights.pod_cost``) becomes a request, equal to its
limit, of the synthetic extended resource ``gpu-policy.io/gpu-milli`` on its first GPU
container: a standard ResourceQuota on ``requests.gpu-policy.io/gpu-milli`` is then the
namespace's budget, enforced by the API server's quota admission, which runs after the
mutating webhooks, charges nothing for a dry run and releases the charge when the pod goes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from fractions import Fraction
from typing import Any

from webhook.contract import QUOTA_ANNOTATION, QUOTA_MILLI, QUOTA_RESOURCE
from webhook.policy.decision import Decision
from webhook.policy.engine.mutation import MUTABLE
from webhook.policy.inventory import Inventory
from webhook.policy.model import Policy
from webhook.policy.patch import diff
from webhook.policy.quantity import QuantityError, quantity_value
from webhook.policy.quota.weights import Cost, equivalents, pod_cost
from webhook.policy.resources import parse_resource

_LISTS = ("initContainers", "containers")


def _asks_for_gpu(container: Mapping[str, Any], inventory: Inventory) -> bool:
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        return False
    if resources.get("claims"):
        return True
    dra = inventory.dra
    for key in ("requests", "limits"):
        names = resources.get(key)
        for name in names if isinstance(names, Mapping) else ():
            if parse_resource(str(name)) is not None:
                return True
            if dra is not None and dra.class_for_resource(str(name)) is not None:
                return True
    return False


def _without(container: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``container`` without the synthetic resource (what a user wrote is replaced)."""
    out = dict(container)
    resources = out.get("resources")
    if isinstance(resources, Mapping):
        res = dict(resources)
        for key in ("requests", "limits"):
            amounts = res.get(key)
            if isinstance(amounts, Mapping) and QUOTA_RESOURCE in amounts:
                kept = {k: v for k, v in amounts.items() if k != QUOTA_RESOURCE}
                if kept:
                    res[key] = kept
                else:
                    res.pop(key)
        out["resources"] = res
    return out


def _amount(container: object, key: str) -> Any:
    resources = container.get("resources") if isinstance(container, Mapping) else None
    amounts = resources.get(key) if isinstance(resources, Mapping) else None
    return amounts.get(QUOTA_RESOURCE) if isinstance(amounts, Mapping) else None


def _same(amount: object, milli: int) -> bool:
    try:
        return quantity_value(amount) == milli
    except QuantityError:
        return False


def with_request(spec: Mapping[str, Any], milli: int, inventory: Inventory) -> dict[str, Any]:
    """A copy of the pod ``spec`` whose first GPU app container requests ``milli`` of the
    synthetic resource (requests = limits, as extended resources must), and no other does."""
    out = dict(spec)
    for key in _LISTS:
        containers = spec.get(key)
        if isinstance(containers, list):
            out[key] = [_without(c) if isinstance(c, Mapping) else c for c in containers]
    containers = out.get("containers")
    if not isinstance(containers, list) or not containers:
        return out
    # An app container, so the charge lasts while the pod runs (the scheduler and the quota
    # both add up app containers and take the largest init container beside them).
    index = next(
        (
            i
            for i, c in enumerate(containers)
            if isinstance(c, Mapping) and _asks_for_gpu(c, inventory)
        ),
        0,
    )
    before = spec.get("containers")
    was = before[index] if isinstance(before, list) and len(before) > index else {}
    chosen = dict(containers[index])
    resources = dict(chosen.get("resources") or {})
    for key in ("requests", "limits"):
        # The API server hands a charged pod back with 1000 written 1k: keep what is there
        # when it is the same amount, so that a charged pod needs no second patch.
        amount = _amount(was, key)
        text = amount if amount is not None and _same(amount, milli) else str(milli)
        resources[key] = {**dict(resources.get(key) or {}), QUOTA_RESOURCE: text}
    chosen["resources"] = resources
    containers[index] = chosen
    return out


def _in_scope(decision: Decision, policy: Policy, operation: str) -> bool:
    return (
        policy.quota.enabled
        and decision.kind == "Pod"
        and operation == "CREATE"
        # Not only allowed pods: the mutating endpoint lets a pod that fails a rule through
        # (the validating one refuses it), and a pod judged failing at mutation and passing at
        # validation, when the inventory changed in between, must not run uncounted.
        and decision.enforcement != "audit"
        # Not "in scope of the rules": a pod the rules skip (a DRA extended name, a claim not
        # known yet) may still cost something, and one that asks for no GPU costs nothing.
        and decision.namespace not in policy.exempt_namespaces
    )


def cost_warning(cost: Cost, budget: tuple[str, int] | None = None) -> str:
    """What the user reads when the webhook charges a pod: its cost, and the namespace's budget
    (ResourceQuota name and amount) when the server knows it."""
    if budget is None:
        against = (
            f"counted against the namespace's GPU budget: its ResourceQuota on "
            f"requests.{QUOTA_RESOURCE}, if it has one (docs/quota.md)"
        )
    else:
        limit = Fraction(budget[1], QUOTA_MILLI)
        against = (
            f"counted against the namespace's GPU budget of {equivalents(limit)} "
            f"GPU-equivalent{'' if limit == 1 else 's'} (ResourceQuota {budget[0]}: "
            f"requests.{QUOTA_RESOURCE} {budget[1]}) (docs/quota.md)"
        )
    text = (
        f"[gpu-quota] this pod costs {equivalents(cost.total)} "
        f"GPU-equivalent{'' if cost.total == 1 else 's'} "
        f"({cost.describe()}): it requests {QUOTA_RESOURCE}: {cost.milli} "
        f"({QUOTA_MILLI}, which a ResourceQuota writes 1k, is 1 GPU), {against}"
    )
    if cost.largest:
        text += (
            "; it may land on GPUs of different weight and is charged the heaviest: "
            "select one pool (nodeSelector, gpu-policy.io/product) to be charged its weight"
        )
    if cost.unknown_claims:
        text += "; not counted, not known yet: " + ", ".join(cost.unknown_claims)
    return text


def charge(
    decision: Decision,
    obj: Mapping[str, Any],
    *,
    policy: Policy,
    inventory: Inventory,
    operation: str,
) -> Decision:
    """``decision`` with the pod's cost requested, its patch rebuilt and a warning saying so;
    unchanged when quota is off or the pod is not one the webhook admits and mutates."""
    if not _in_scope(decision, policy, operation):
        return decision
    base = decision.mutated if decision.mutated is not None else obj
    spec = base.get("spec")
    if not isinstance(spec, Mapping):
        return decision
    cost = pod_cost(spec, namespace=decision.namespace or "", policy=policy, inventory=inventory)
    warning = cost_warning(cost, policy.quota.budgets.get(decision.namespace or ""))
    if cost.milli == 0:
        if not cost.unknown_claims:
            return decision
        return replace(decision, warnings=(*decision.warnings, warning))
    mutated = dict(base)
    mutated["spec"] = with_request(spec, cost.milli, inventory)
    metadata = dict(base.get("metadata") or {})
    annotations = dict(metadata.get("annotations") or {})
    annotations[QUOTA_ANNOTATION] = f"{equivalents(cost.total)}: {cost.describe()}"
    metadata["annotations"] = annotations
    mutated["metadata"] = metadata
    return replace(
        decision,
        mutated=mutated,
        patch=tuple(diff(obj, mutated, within=MUTABLE)),
        warnings=(*decision.warnings, warning),
        changes=(*decision.changes, f"requests {QUOTA_RESOURCE}: {cost.milli}"),
    )
