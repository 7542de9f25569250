"""The guard against dual-published nodes (``spec.dra.dualPublishedNodes``, docs/migrate.md).

While a cluster moves from the device plugin to DRA, a node may publish the same GPUs in
``status.allocatable`` and in a ResourceSlice; the scheduler then keeps two ledgers for one set
of GPUs and may give a GPU to a device-plugin pod and to a claim. A pod with GPU claims is the
one that can take a GPU twice there:

- ``warn``: the review warns, naming the nodes;
- ``avoid``: the pod gets a required node affinity (``matchFields`` ``metadata.name NotIn``,
  added to every term, since terms are ORed) that keeps it off them; when the allocator
  (``webhook.policy.allocator``) proves that only those nodes could serve it, it is refused.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from webhook.policy.allocator import DOES_NOT_FIT, fit_anywhere
from webhook.policy.decision import Decision, RuleResult
from webhook.policy.demand import pod_demand
from webhook.policy.dual import DualNode, dual_published
from webhook.policy.engine.mutation import MUTABLE, mutated_copy, template_changes
from webhook.policy.inventory import Inventory
from webhook.policy.model import Policy
from webhook.policy.patch import diff
from webhook.policy.workloads import Workload

RULE = "gpu-claim-dual-published"
_FIELD = "metadata.name"


@dataclass(frozen=True)
class Guard:
    """What the guard adds to a review: its findings and, with ``avoid``, the pod spec with the
    affinity (None when nothing is to change)."""

    findings: tuple[RuleResult, ...] = ()
    spec: dict[str, Any] | None = None
    change: str = ""

    def _writes(self, decision: Decision) -> bool:
        # Only an allowed pod is mutated, and nothing is written under enforcement audit.
        return self.spec is not None and decision.allowed and decision.enforcement != "audit"

    def applied_to_pod(
        self, decision: Decision, obj: Mapping[str, Any], workload: Workload
    ) -> Decision:
        """``decision`` on a Pod with the affinity written into its mutated copy and patch,
        when the pod is allowed and mutated."""
        if not self._writes(decision):
            return decision
        assert self.spec is not None  # _writes says so
        changes = (*decision.changes, self.change)
        base = decision.mutated if decision.mutated is not None else obj
        spec = dict(_spec_at(base, workload))
        spec["affinity"] = self.spec["affinity"]
        mutated = mutated_copy(base, workload, spec, "; ".join(changes))
        return replace(
            decision,
            changes=changes,
            mutated=mutated,
            patch=tuple(diff(obj, mutated, within=MUTABLE)),
        )

    def applied_to_template(self, decision: Decision) -> Decision:
        """``decision`` on a pod template with the affinity as a change its pods will get,
        when the template is allowed."""
        if not self._writes(decision):
            return decision
        warning = template_changes(decision.kind, (self.change,))
        return replace(
            decision,
            changes=(*decision.changes, self.change),
            warnings=(*decision.warnings, warning),
        )


def _spec_at(obj: Mapping[str, Any], workload: Workload) -> Mapping[str, Any]:
    node: Any = obj
    for step in workload.path:
        node = node[step]
    spec = node.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _nodes(dual: Sequence[DualNode]) -> str:
    return ", ".join(d.node for d in dual)


def with_affinity(spec: Mapping[str, Any], nodes: Sequence[str]) -> dict[str, Any]:
    """A copy of ``spec`` whose required node affinity keeps it off ``nodes``: a
    ``metadata.name NotIn`` field requirement in every ``nodeSelectorTerms`` entry (one term
    holding only it when there is none). A term that already keeps off these nodes is kept."""
    out = copy.deepcopy(dict(spec))
    affinity = out.setdefault("affinity", {})
    node_affinity = affinity.setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.setdefault("nodeSelectorTerms", [])
    wanted = {"key": _FIELD, "operator": "NotIn", "values": sorted(nodes)}
    if not terms:
        terms.append({})
    for term in terms:
        fields = term.setdefault("matchFields", [])
        kept = any(
            f.get("key") == _FIELD
            and f.get("operator") == "NotIn"
            and set(nodes) <= set(f.get("values") or ())
            for f in fields
        )
        if not kept:
            fields.append(dict(wanted))
    return out


# The guard of a pod it does not concern (most pods: no claims, or no dual-published node):
# frozen and empty, so one serves every review.
_NO_GUARD = Guard()


def dual_guard(
    workload: Workload,
    has_claims: bool,
    namespace: str | None,
    *,
    policy: Policy,
    inventory: Inventory,
) -> Guard:
    """The guard's findings and affinity for a pod spec with GPU claims (``has_claims``)."""
    supply = inventory.supply
    if not has_claims or supply is None:
        return _NO_GUARD
    dual = dual_published(supply)
    if not dual:
        return _NO_GUARD
    names = [d.node for d in dual]
    what = "; ".join(d.describe() for d in dual)
    if policy.dra.dual_published_nodes == "warn":
        message = (
            f"nodes {_nodes(dual)} publish the same GPUs through the device plugin and DRA "
            f"({what}): the scheduler may give one GPU to a device-plugin pod and to this "
            "pod's claims. Finish their cutover (gpu-policy migrate check), or set "
            "spec.dra.dualPublishedNodes: avoid to keep claim pods off them"
        )
        return Guard((RuleResult(RULE, "warn", message),))
    guarded = with_affinity(workload.spec, names)
    change = f"required node affinity: not on the dual-published nodes {', '.join(names)}"
    claim_specs = inventory.dra.claim_specs if inventory.dra is not None else {}
    demand = pod_demand(workload.spec, "pod", claim_specs, namespace or "")
    if not demand.missing:
        # Judged as the pod is, once: the answers per node group say whether some node other
        # than the dual ones fits (the allocator judges alike groups once; a node-name field
        # in the affinity would set every node apart).
        verdict = fit_anywhere(demand, supply)
        keys = {f"node {d.node}" for d in dual}
        # A group not judged in time may fit: only a proof refuses.
        elsewhere = any(f.outcome != DOES_NOT_FIT for key, f in verdict.answers if key not in keys)
        if verdict.fits and not elsewhere:
            message = (
                f"only the dual-published nodes {_nodes(dual)} could serve its claims "
                f"({what}), and spec.dra.dualPublishedNodes is avoid: there the scheduler "
                "may give a GPU already held by a device-plugin pod. Finish their cutover "
                "(gpu-policy migrate plan), or free DRA-only nodes for it"
            )
            return Guard((RuleResult(RULE, "fail", message),))
    return Guard(spec=guarded, change=change)
