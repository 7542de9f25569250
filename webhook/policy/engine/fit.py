"""Whether a pod, a pod template or a claim could run on some node: the allocator's verdict.

Every way the object asks for a device (its containers' requests added up as the scheduler
adds them, ``deviceclass.resource.kubernetes.io/*`` and other names DeviceClasses serve, its
claims and templates) is read into one :class:`~webhook.policy.demand.Demand` and judged
by :func:`~webhook.policy.allocator.fit_anywhere` against the supply the inventory was
assembled with (``inventory.supply``, webhook/policy/supply/assemble.py): on an empty cluster,
over every node group, existing or able to appear. The object is refused only when no group
could run it; a search out of time allows it with a warning (docs/rules.md, "Whether it
fits").

The verdict reuses the rule ids users already match on: ``gpu-resource-offered`` when no
node has enough of an extended resource, ``gpu-claim-devices-available`` when the devices of
the claims (or of extended resources DeviceClasses serve) cannot be allocated,
``gpu-claim-mig-profile`` when what cannot be allocated is a MIG profile no device has,
``gpu-node-selection`` when no node passes the node filters (selectors, affinity, taints).
The words of a claims refusal come from the allocator's explanation (``refusal.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from webhook.policy.allocator import (
    DOES_NOT_FIT,
    UNKNOWN,
    Fit,
    Reads,
    Verdict,
    fit_anywhere,
    reads_of,
)
from webhook.policy.claims import ClaimAsk, pod_claim_refs, read_claim
from webhook.policy.decision import RuleResult
from webhook.policy.demand import (
    Demand,
    claim_demand,
    is_dra_extended_resource_name,
    pod_demand,
)
from webhook.policy.demand.extended import EXTENDED_CLAIM
from webhook.policy.engine.claims import gpu_requests
from webhook.policy.engine.refusal import EXTENDED_WORDS, claims_refusal
from webhook.policy.inventory import Inventory, keep
from webhook.policy.model import Policy
from webhook.policy.records import MAPPING
from webhook.policy.supply import NodeGroup, Supply, group_name
from webhook.policy.workloads import Workload, containers

# The rule that reports each filter's failure (Fit.stage).
_RULE_OF_STAGE: Mapping[str, str] = {
    "node": "gpu-node-selection",
    "resources": "gpu-resource-offered",
    "claims": "gpu-claim-devices-available",
}
# What to change, per filter that fails.
_FIX: Mapping[str, str] = {
    "node": (
        "Select nodes that have what the pod asks for, or tolerate their taints "
        "(spec.nodeSelector, spec.affinity, spec.tolerations)"
    ),
    "resources": (
        "Ask for no more than one node of some group has, or spread the work over several pods"
    ),
    "claims": (
        "Ask for no more devices than one node of some group has, or loosen the selectors "
        "and constraints"
    ),
}


def pod_fit(
    spec: Mapping[str, Any], what: str, namespace: str | None, inventory: Inventory
) -> Verdict | None:
    """The allocator's verdict on the pod spec ``spec`` (of a pod, or a template, as it will be
    created: after the mutation), None when the inventory carries no supply."""
    supply = inventory.supply
    if supply is None:
        return None
    by_spec: dict[str, Verdict] = inventory.fit_groups.setdefault(_BY_SPEC, {})
    spec_key = _spec_key(spec)
    if spec_key is not None and (known := by_spec.get(spec_key)) is not None:
        return known
    claim_specs = inventory.dra.claim_specs if inventory.dra is not None else {}
    demand = pod_demand(spec, what, claim_specs, namespace or "")
    by_demand: dict[str, Verdict] = inventory.fit_groups.setdefault(_BY_DEMAND, {})
    key = _verdict_key(demand, supply)
    verdict = by_demand.get(key) if key is not None else None
    if verdict is None:
        verdict = _judged(demand, inventory)
        if verdict.outcome == UNKNOWN:  # a search cut short is tried again
            return verdict
        if key is not None:
            keep(by_demand, key, verdict)
    if spec_key is not None:
        keep(by_spec, spec_key, verdict)
    return verdict


# The fit_groups entries that hold the verdicts on pod specs, by _spec_key (a pod seen again:
# the pods of one workload), and on demands, by _verdict_key (a pod spec seen for the first
# time that asks what another asked: pods of other workloads). Each review after a pause
# walked the allocator anew, ~0.1-0.2 ms of a cold review (docs/performance.md, "Seventh
# round", "Eighth round"). The spec's key is read first: it is the cheaper (the demand is
# not read). Each bounded by keep(), so that what clients send cannot grow them without
# bound.
_BY_SPEC = "verdicts on pod specs"
_BY_DEMAND = "verdicts on demands"
# What pod_demand reads of a pod spec besides its containers (and resourceClaims, below).
_DEMAND_FIELDS = ("resources", "overhead", "nodeName", "nodeSelector", "affinity", "tolerations")
_CONTAINER_LISTS = ("initContainers", "containers")


def _spec_key(spec: Mapping[str, Any]) -> str | None:
    """Everything of ``spec`` the demand is read from (pod_demand; the verdict depends on
    nothing else of the pod, not its name), as text; None for a spec that names claims,
    whose demand also reads the claims of its namespace. The spec is decoded JSON or YAML
    (dicts, lists, scalars), whose repr is its content: two specs that differ in what the
    demand reads never share a key (equal content with another key only costs a search)."""
    if spec.get("resourceClaims"):
        return None
    parts: list[Any] = [spec.get(field) for field in _DEMAND_FIELDS]
    for name in _CONTAINER_LISTS:
        raw = spec.get(name)
        if isinstance(raw, list):  # a container's name, restartPolicy and resources
            raw = [
                (c.get("name"), c.get("restartPolicy"), c.get("resources"))
                if isinstance(c, MAPPING)
                else c
                for c in raw
            ]
        parts.append(raw)
    return repr(parts)


def _verdict_key(demand: Demand, supply: Supply) -> str | None:
    """Everything of ``demand`` the allocator's verdict depends on, as text; None for a demand
    with claims (they are the namespace's objects, not the pod's).

    Not the label (the verdict never names the pod) and, unless a DeviceClass serves one of
    the extended resources, not the containers: only the claim built for such resources reads
    them (its requests per container, named in its words); the node filters and
    ``fitsRequest`` read the requests added up. Of those, only the names with a domain
    (``nvidia.com/gpu``): ``fitsRequest``, the claim for extended resources and ``reads_of``
    read only extended resource names, and a node group's allocatable (which names the
    closest group) holds only names with a domain (``webhook/policy/supply/assemble.py``).
    So the first pods of workloads that ask for the same devices with other CPU and memory
    share a verdict. The values are decoded JSON or YAML and exact quantities, whose repr is
    their content: two demands that differ in what the allocator reads never share a key
    (equal content with another key only costs a search).
    """
    if demand.claims or demand.missing:
        return None
    served = any(
        supply.class_for_resource(name) is not None
        for name in demand.resources
        if is_dra_extended_resource_name(name)
    )
    return repr(
        (
            sorted((name, q) for name, q in demand.resources.items() if "/" in name),
            demand.containers if served else None,
            demand.node_name,
            demand.node_selector,
            demand.required_terms,
            demand.tolerations,
        )
    )


def claims_fit(
    spec: Mapping[str, Any], what: str, namespace: str | None, inventory: Inventory
) -> Verdict | None:
    """The allocator's verdict on the claims of the pod spec ``spec`` alone, where the pod may
    run, its containers' extended resources left out: for a pod that other rules refuse,
    whether its claims could ever be allocated is still said. None without a supply or
    claims."""
    if inventory.supply is None:
        return None
    claim_specs = inventory.dra.claim_specs if inventory.dra is not None else {}
    demand = pod_demand(spec, what, claim_specs, namespace or "")
    if not demand.claims:
        return None
    return _judged(replace(demand, resources={}, containers=()), inventory)


def judgeable(findings: Iterable[RuleResult]) -> bool:
    """Whether the allocator can judge claims beside ``findings``: not when a DeviceClass they
    name does not exist (``gpu-claim-device-class`` says so; the allocator would only fail
    on it)."""
    return not any(f.rule == "gpu-claim-device-class" and f.status == "fail" for f in findings)


def claim_fit(spec: Mapping[str, Any], what: str, inventory: Inventory) -> Verdict | None:
    """The allocator's verdict on a lone ResourceClaimSpec (a claim's, a template's): can
    some node allocate it? None when the inventory carries no supply."""
    if inventory.supply is None:
        return None
    return _judged(claim_demand(spec, what), inventory)


# The fit_groups entry that holds _slice_keys of the snapshot's supply.
_SLICE_KEYS = "slice node selection"


def _terms_keys(terms: Iterable[Any]) -> set[str] | None:
    """The label keys NodeSelectorTerms read; None when one reads node names (``matchFields``),
    which only the nodes one by one can answer."""
    keys: set[str] = set()
    for term in terms:
        if not isinstance(term, Mapping):
            continue
        if term.get("matchFields"):
            return None
        for expression in term.get("matchExpressions") or ():
            if isinstance(expression, Mapping):
                keys.add(str(expression.get("key")))
    return keys


def _merged(supply: Supply, keys: frozenset[str]) -> Supply:
    """``supply`` with the node groups that differ only in labels the demand does not read
    (``kubernetes.io/hostname``, GFD's timestamp) made one, which keeps the labels it reads:
    what the scheduler's filters answer for one node they answer for each (the allocator
    judges the first node's own slices, of the same content as the others')."""
    merged: dict[Any, list[NodeGroup]] = {}
    for group in supply.groups:
        labels = tuple(sorted((k, v) for k, v in group.labels.items() if k in keys))
        merged.setdefault((labels, group.shape[1:], group.bounds), []).append(group)
    groups = []
    for members in merged.values():
        first = members[0]
        if len(members) == 1:
            groups.append(first)
            continue
        names = tuple(n for g in members for n in g.node_names)
        groups.append(
            replace(
                first,
                key=f"{first.key} (and {len(members) - 1} more like it)",
                node_names=names,
                labels={k: v for k, v in first.labels.items() if k in keys},
            )
        )
    return replace(supply, groups=tuple(groups))


def _slice_keys(supply: Supply) -> frozenset[str] | None:
    """The node label keys that decide which nodes reach the shared ResourceSlices and their
    devices (a slice's ``nodeSelector``, a device's own): nodes that differ in them reach
    different devices, so they may not be made one group. None when a selector reads node
    names."""
    keys: set[str] = set()
    for found in supply.slices:
        selectors = [found.node_selector]
        if found.per_device_node_selection:
            selectors += [d.node_selector for d in found.devices]
        for selector in selectors:
            read = _terms_keys((selector or {}).get("nodeSelectorTerms") or ())
            if read is None:
                return None
            keys |= read
    return frozenset(keys)


def _supply_for(reads: Reads, inventory: Inventory) -> Supply:
    """The inventory's supply with the node groups merged that a demand reading ``reads``
    cannot tell apart by labels (:func:`_merged`); the supply itself when the demand reads
    node names (``spec.nodeName``, ``matchFields``)."""
    supply = inventory.supply
    assert supply is not None
    if reads.names:
        return supply
    keys = frozenset(reads.label_keys)
    # What the slices' node selection reads is read for every demand: network-attached
    # devices reach some nodes of one shape and not others (found by the differential test).
    # Worked out once per snapshot, not per review.
    if _SLICE_KEYS not in inventory.fit_groups:
        inventory.fit_groups[_SLICE_KEYS] = _slice_keys(supply)
    slice_keys = inventory.fit_groups[_SLICE_KEYS]
    if slice_keys is None:
        return supply
    keys |= slice_keys
    found = inventory.fit_groups.get(keys)
    if found is None:
        found = _merged(supply, keys)
        inventory.fit_groups[keys] = found
    assert isinstance(found, Supply)
    return found


def _judged(demand: Demand, inventory: Inventory) -> Verdict:
    assert inventory.supply is not None
    # What the demand reads of a node group, worked out once: it picks the merged supply
    # and the groups fit_anywhere judges (the merged supply keeps the DeviceClasses).
    reads = reads_of(demand, inventory.supply)
    supply = _supply_for(reads, inventory)
    verdict = fit_anywhere(demand, supply, budget_s=inventory.fit_budget_s, reads=reads)
    closest = verdict.closest
    if closest is None or closest.stage != "resources":
        return verdict
    # Of the groups that come as near, name the one with the most of what the pod asks for:
    # "has 1" of a GPU node tells more than "has 0" of a node without GPUs.
    groups = {g.key: g for g in supply.groups}

    def has(answer: tuple[str, Fit]) -> int:
        group = groups.get(answer[0])
        if group is None:
            return -1
        return sum(group.allocatable.get(n, 0) for n in demand.resources)

    peers = [
        (key, f)
        for key, f in verdict.answers
        if f.outcome == DOES_NOT_FIT and (f.stage, f.closeness) == ("resources", closest.closeness)
    ]
    if not peers:
        return verdict
    key, found = max(peers, key=has)
    # An answer shared by groups of one shape names the first of them: name this one.
    named = replace(found, group=key, detail=found.detail.replace(found.group, key))
    return replace(verdict, closest=named)


#: The words of the warning on an object allowed because the device search ran out of time
#: (the differential test tells such an allowance from a wrong answer by them).
UNPROVEN = "could not be proven in the time allowed"


def unproven(results: Iterable[RuleResult]) -> bool:
    """Whether ``results`` hold the warning of a search cut short: a review whose answer
    depends on how fast the machine was, not only on the object, policy and snapshot."""
    # The warnings filtered inside the generator: it then yields only for them, not once per
    # result (a dozen per review, most of them passes; docs/performance.md, "Tenth round").
    return any(UNPROVEN in r.message for r in results if r.status == "warn")


def verdict_findings(
    verdict: Verdict | None, what: str, *, has_claims: bool, supply: Supply | None = None
) -> list[RuleResult]:
    """The rule result of a verdict: a failure that says why no node group can run ``what``
    (the scheduler's reason, what in the demand fails and what the closest group has, the
    fix), a warning when fit could not be proven in time, nothing when it fits. ``supply``:
    what the verdict was reached on (the MIG profiles it offers, for a refused profile)."""
    if verdict is None or verdict.fits:
        return []
    closest = verdict.closest
    if verdict.outcome == UNKNOWN:
        rule = "gpu-claim-devices-available" if has_claims else "gpu-resource-offered"
        return [
            RuleResult(
                rule,
                "warn",
                f"{what}: whether some node can run it {UNPROVEN} "
                f"(the device search was cut short{_near(closest)}); it is allowed "
                '(docs/rules.md, "Whether it fits")',
            )
        ]
    assert verdict.outcome == DOES_NOT_FIT and closest is not None
    rule = _rule(closest, has_claims)
    worded = claims_refusal(verdict, closest, what, supply)
    if worded is None:
        why, fix = _why(closest), _FIX.get(closest.stage, "")
    else:
        why, fix, profile = worded
        rule = "gpu-claim-mig-profile" if profile and has_claims else rule
    return [
        RuleResult(
            rule,
            "fail",
            f"{what} fits no node, existing or able to appear: {why}: it would stay Pending"
            f"{'' if closest.error else f' (the scheduler: {closest.reason})'}. {fix}".rstrip(),
        )
    ]


def _rule(closest: Fit, has_claims: bool) -> str:
    rule = _RULE_OF_STAGE.get(closest.stage, "gpu-resource-offered")
    if rule == "gpu-claim-devices-available" and not has_claims:
        # Only extended resources a DeviceClass serves: the pod's own resources are at fault.
        return "gpu-resource-offered"
    return rule


def _why(closest: Fit) -> str:
    detail = (closest.detail or closest.reason).replace(EXTENDED_CLAIM, EXTENDED_WORDS)
    where = group_name(closest.group)
    return f"{detail} (closest: {where})" if where not in detail else detail


def _near(closest: Fit | None) -> str:
    if closest is None:
        return ""
    where = group_name(closest.group)
    return f"; the closest node group that does not fit, {where}: {_why(closest)}"


def decided(
    verdict: Verdict | None,
    explained: Sequence[RuleResult],
    what: str,
    *,
    has_claims: bool,
    supply: Supply | None = None,
) -> list[RuleResult]:
    """The failures about fit, as the allocator decides them.

    ``explained`` are the refusals the device-plugin placement found in the inventory's
    terms (no node has that many of a resource), each a proof for one container alone: kept
    when the allocator agrees that nothing fits or could not finish, dropped when it finds a
    node group that fits, and given by the allocator's own reason when they saw nothing
    wrong (claims, what only fails together). Without a verdict (an inventory not made by
    ``assemble()``, which has no supply) they stand.
    """
    if verdict is None:
        return list(explained)
    if verdict.fits:
        return []
    if explained:
        # Each is a proof on its own (no node has that many): it stands when the allocator
        # agrees, and when its search ran out of time.
        return list(explained)
    return verdict_findings(verdict, what, has_claims=has_claims, supply=supply)


def pod_claims(
    workload: Workload, namespace: str | None, policy: Policy, inventory: Inventory
) -> tuple[tuple[ClaimAsk, ...], tuple[RuleResult, ...]]:
    """The GPU claims of a pod spec that the inventory knows (by claim or template name), and
    a ``gpu-claim-exists`` warning for each claim or template it does not know.

    A claim or template the snapshot does not hold is not judged: Kubernetes accepts a pod
    that names one before it exists (the pod waits for it), it may be applied in the same
    ``kubectl apply`` a moment later, and it is judged itself when it is created.
    """
    dra = inventory.dra
    if dra is None or not workload.spec.get("resourceClaims"):
        return (), ()
    out = []
    missing = []
    where = f" in namespace {namespace}" if namespace else ""
    for ref in pod_claim_refs(workload.spec):
        if ref.claim is not None:
            key = ("ResourceClaim", namespace or "", ref.claim)
            label = f'claim "{ref.name}" (ResourceClaim {ref.claim})'
        else:
            key = ("ResourceClaimTemplate", namespace or "", ref.template or "")
            label = f'claim "{ref.name}" (ResourceClaimTemplate {ref.template})'
        spec = dra.claim_specs.get(key)
        if spec is None:
            kind_name = f"{key[0]} {key[2]}"
            missing.append(
                RuleResult(
                    "gpu-claim-exists",
                    "warn",
                    f"{label}: no {kind_name}{where} in {inventory.source}, so what it asks "
                    f"for is not judged; the pod waits until it exists (Kubernetes lets it be "
                    f"created later). Create {kind_name}, or correct the name.",
                )
            )
            continue
        claim = read_claim(spec, label)
        if gpu_requests(claim, policy.dra):
            out.append(claim)
    return tuple(out), tuple(missing)


def served_by_dra(workload: Workload, policy: Policy, inventory: Inventory) -> bool:
    """True when a container asks for an extended resource a GPU DeviceClass serves."""
    dra = inventory.dra
    if dra is None:
        return False
    for _list_name, _i, container in containers(workload.spec):
        resources = container.get("resources")
        if not isinstance(resources, dict):
            continue
        for key in ("requests", "limits"):
            names = resources.get(key)
            for resource in names if isinstance(names, dict) else ():
                if isinstance(resource, str) and "/" in resource:
                    served = dra.class_for_resource(resource)
                    if served is not None and policy.dra.is_gpu_class(served.name):
                        return True
    return False
