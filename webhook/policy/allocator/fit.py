"""Does a demand fit a node group, and some group? The filters kube-scheduler runs, in order.

For one node group (:func:`fit`): NodeName, TaintToleration (NoSchedule, NoExecute, the
cordon) and NodeAffinity (nodeSelector, required node affinity) through
``webhook.policy.nodes``; NodeResourcesFit's check of extended resources
(``pkg/scheduler/framework/plugins/noderesources/fit.go`` ``fitsRequest``, where a resource a
DeviceClass serves and the node does not advertise is left to DRA); then the DynamicResources
filter: the pod's claims and the claim for its extended resources backed by DRA
(``webhook.policy.demand.extended_resource_claim``), allocated together by the structured
allocator (:mod:`webhook.policy.allocator.structured`). docs/allocator.md.

By default the cluster is empty (the webhook's question); ``usage``
(:class:`~webhook.policy.allocator.usage.Usage`) judges it with what bound pods and allocated
claims hold now (the audit's question).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from webhook.policy.allocator.explain import detailed, explain_claims
from webhook.policy.allocator.pools import Node
from webhook.policy.allocator.reach import group_allocator
from webhook.policy.allocator.result import DOES_NOT_FIT, FITS, UNKNOWN, Answers, Fit, Verdict
from webhook.policy.allocator.shapes import Reads, judged_once, reads_of
from webhook.policy.allocator.structured import AllocationError, BudgetExceeded
from webhook.policy.allocator.usage import EMPTY, Usage
from webhook.policy.demand import Demand, extended_resource_claim, is_dra_extended_resource_name
from webhook.policy.nodes import selector_matches, term_matches, untolerated_taints
from webhook.policy.supply import NodeGroup, Supply, group_name

# The scheduler's words for each filter that fails (the plugins' reasons).
NODE_NAME = "node(s) didn't match the requested node name"
NODE_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
CANNOT_ALLOCATE = "cannot allocate all claims"
# The answer of a group no projection judged in time (Answers names it after the group).
_LATE = Fit(UNKNOWN, "", "not judged: out of time", "", "claims")
# The least time the explanation of a refusal gets to search parts of the demand.
EXPLAIN_MIN_S = 0.05


def node_filters(demand: Demand, group: NodeGroup) -> Fit | None:
    """The NodeName, TaintToleration and NodeAffinity filters: a failing Fit, or None when
    some node of the group passes them."""
    # group.node, without its property call: a group with no nodes yet is named by its key.
    names = group.node_names or (group.key,)
    if demand.node_name is not None and demand.node_name not in names:
        return Fit(
            DOES_NOT_FIT, group.key, NODE_NAME, f"spec.nodeName is {demand.node_name}", "node"
        )
    # A group's cordon is one of its taints already (webhook.policy.supply.model).
    blocking = untolerated_taints(group.taints, demand.tolerations)
    if blocking:
        taint = blocking[0]
        return Fit(
            DOES_NOT_FIT,
            group.key,
            f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}",
            f"{group_name(group.key)} has the taint {taint}, which the pod does not tolerate",
            "node",
        )
    if not selector_matches(demand.node_selector, group.labels) or (
        demand.required_terms is not None
        and not any(
            term_matches(term, name, group.labels)
            for name in names
            for term in demand.required_terms
        )
    ):
        return Fit(
            DOES_NOT_FIT,
            group.key,
            NODE_AFFINITY,
            f"{group_name(group.key)} has the labels {_labels(group.labels)}",
            "node",
        )
    return None


def _labels(labels: Any) -> str:
    shown = ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))
    return "{" + shown + "}"


def fits_request(
    demand: Demand, group: NodeGroup, supply: Supply, usage: Usage = EMPTY
) -> Fit | None:
    """NodeResourcesFit for extended resources (``fitsRequest``): a failing Fit, or None.
    What bound pods request on the node (``usage``) is not free; CPU, memory and other native
    resources are not the supply model's."""
    for name, quantity in sorted(demand.resources.items()):
        if quantity <= 0 or not is_dra_extended_resource_name(name):
            continue
        allocatable = group.allocatable.get(name, 0)
        if allocatable == 0 and supply.class_for_resource(name) is not None:
            continue  # Backed by DRA: the DynamicResources filter allocates it.
        # `is not EMPTY` first: the webhook's question, on an empty cluster, calls no __bool__.
        held = usage.held(group.node, name) if usage is not EMPTY and usage else 0
        have = allocatable - held
        if have >= quantity:
            continue
        in_use = f" of which bound pods request {held}" if held else ""
        return Fit(
            DOES_NOT_FIT,
            group.key,
            f"Insufficient {name}",
            f"the pod asks for {name}: {quantity} in all (its containers added up as the "
            f"scheduler does); {group_name(group.key)} has {allocatable}{in_use}",
            "resources",
            1,
        )
    return None


def _allocate(
    demand: Demand,
    group: NodeGroup,
    supply: Supply,
    deadline: float | None,
    prune: bool,
    *,
    usage: Usage = EMPTY,
) -> Fit | None:
    """The DynamicResources filter: a failing Fit, or None when every claim is allocated."""
    extended, unfit = extended_resource_claim(
        demand.resources, demand.containers, supply.class_for_resource, group.allocatable
    )
    if unfit is not None:
        return Fit(
            DOES_NOT_FIT,
            group.key,
            "cannot fit resource",
            f"{group_name(group.key)} has no {unfit}",
            "claims",
            2,
        )
    claims = (*demand.claims, extended) if extended is not None else demand.claims
    if not claims:
        return None
    node = Node(group.node, group.labels)
    # The explanation of a refusal may search as long again as the verdict could, and at
    # least EXPLAIN_MIN_S: a verdict reached late in the budget still gets its reasons.
    allowed = None if deadline is None else max(deadline - time.monotonic(), EXPLAIN_MIN_S)
    allocator = group_allocator(group, supply, deadline, prune=prune, usage=usage)
    try:
        if allocator.allocate(node, claims):
            return None
    except AllocationError as err:
        return Fit(DOES_NOT_FIT, group.key, str(err), "", "claims", 3, error=not err.on_node)
    explain_by = None if allowed is None else time.monotonic() + allowed
    why = explain_claims(claims, group, supply, node, prune=prune, deadline=explain_by)
    return Fit(DOES_NOT_FIT, group.key, CANNOT_ALLOCATE, why.text, "claims", 2, explanation=why)


def fit(
    demand: Demand,
    group: NodeGroup,
    supply: Supply,
    *,
    budget_s: float = 0.05,
    prune: bool = True,
    usage: Usage = EMPTY,
) -> Fit:
    """Does ``demand`` fit a node of ``group`` as kube-scheduler judges, on an empty cluster
    or with what ``usage`` says is in use?

    ``unknown`` when the device search runs longer than ``budget_s`` seconds. ``prune``
    skips searches proven impossible by counting (:mod:`webhook.policy.allocator.prune`);
    False runs the plain port of upstream's search, for tests and benchmarks.
    """
    return _fit(demand, group, supply, time.monotonic() + budget_s, prune, usage=usage)


def _fit(
    demand: Demand,
    group: NodeGroup,
    supply: Supply,
    deadline: float,
    prune: bool,
    *,
    usage: Usage = EMPTY,
) -> Fit:
    failed = node_filters(demand, group)
    if failed is not None:
        return failed
    try:
        failed = fits_request(demand, group, supply, usage) or _allocate(
            demand, group, supply, deadline, prune, usage=usage
        )
    except BudgetExceeded:
        return Fit(UNKNOWN, group.key, "the device search ran out of time", "", "claims")
    return Fit(FITS, group.key) if failed is None else failed


def fit_anywhere(
    demand: Demand,
    supply: Supply,
    *,
    budget_s: float = 0.05,
    prune: bool = True,
    usage: Usage = EMPTY,
    reads: Reads | None = None,
) -> Verdict:
    """Does ``demand`` fit some node group of ``supply``, existing or able to appear?

    Groups the demand cannot tell apart (:func:`~webhook.policy.allocator.shapes.projection`)
    are judged once. Every group is judged while time remains, since an allocation error on
    any of them fails the pod in the scheduler; once the judging has taken ``budget_s``
    seconds, the groups left are ``unknown``. ``prune`` and ``usage`` as for :func:`fit`;
    with ``usage``, groups of one shape differ by what is in use on them: each is judged.
    ``reads``: :func:`~webhook.policy.allocator.shapes.reads_of` the demand, when the caller
    has worked it out already (on ``supply`` or one with the same DeviceClasses).
    """
    # The budget is for judging: telling the groups apart, done once per supply, is not
    # counted.
    remaining = budget_s
    judged: dict[int, Fit] = {}
    groups = supply.groups
    if usage is not EMPTY and usage:
        keys: Sequence[int] = range(len(groups))
        firsts: Sequence[tuple[int, int]] = [(i, i) for i in keys]
    else:
        keys, firsts = judged_once(reads or reads_of(demand, supply), supply)
    # Each projection is judged on the first group that has it, in the groups' order.
    for key, index in firsts:
        if remaining <= 0:
            break
        start = time.monotonic()
        judged[key] = _fit(demand, groups[index], supply, start + remaining, prune, usage=usage)
        remaining -= time.monotonic() - start
    names: tuple[str, ...] = supply.__dict__.get("_group_keys") or supply.__dict__.setdefault(
        "_group_keys", tuple(g.key for g in groups)
    )
    answers = Answers(names, keys, judged, _LATE)
    # One pass over the projections judged, in the groups' order: the first error fails the
    # pod; else the first group that fits is the first of the first projection that fits.
    first = None
    for key, index in firsts:
        found = judged.get(key)
        if found is None:
            continue
        if found.error:
            return Verdict(DOES_NOT_FIT, None, found, answers)
        if first is None and found.fits:
            first = groups[index].key
    if first is not None:
        return Verdict(FITS, first, None, answers)
    fits = list(judged.values())
    failing = [f for f in fits if f.outcome == DOES_NOT_FIT]
    # Of the groups that fail at the same filter, the one with the most for the request at
    # fault is named: "has 2" of the node with the MIG devices tells more than "has 0".
    closest = max(failing, key=lambda f: (f.closeness, f.nearness), default=None)
    if closest is not None and closest.explanation is not None:
        # The words of the request at fault are worked out for the group named alone.
        index = dict(firsts)[next(k for k, f in judged.items() if f is closest)]
        closest = detailed(closest, groups[index], supply)
    stages = frozenset(f.stage for f in failing)
    if len(judged) < len(firsts) or any(f.outcome == UNKNOWN for f in fits):
        return Verdict(UNKNOWN, None, closest, answers, stages)
    return Verdict(DOES_NOT_FIT, None, closest, answers, stages)
