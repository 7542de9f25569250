"""The judgement of a pod spec, shared by the reviewers of pods and of pod templates.

Three cases, by what the pod asks for: device-plugin GPUs (the container rules, the placement,
the allocator's verdict on the pod as it will be created, the mutation), GPUs from DRA alone
(its claims, or extended resources a DeviceClass serves: the claim rules and the allocator's
verdict), no GPU at all (GPU isolation alone). The reviewer of each kind turns the
:class:`Judgement` into its Decision: a pod gets the mutated copy and its patch, a template
the changes its pods will get as a warning.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from webhook.policy.decision import RuleResult
from webhook.policy.engine.checks import Ask, Found, check_container
from webhook.policy.engine.claims import claim_findings
from webhook.policy.engine.dual import Guard, dual_guard
from webhook.policy.engine.fit import (
    claims_fit,
    decided,
    judgeable,
    pod_fit,
    verdict_findings,
)
from webhook.policy.engine.intent import Intent, read_intent
from webhook.policy.engine.isolation import Isolation, judge, with_void
from webhook.policy.engine.mutation import mutated_spec
from webhook.policy.engine.placement import (
    Choice,
    awaiting_nodes,
    choose_names,
    per_container,
    selection,
)
from webhook.policy.engine.results import Aspects, fails, judged
from webhook.policy.engine.subjects import PodSubject
from webhook.policy.inventory import Inventory
from webhook.policy.model import Policy
from webhook.policy.records import per_review_record
from webhook.policy.rules import Aspect, Phase

# Why a pod's container rules are skipped: it asks for no GPU (GPU isolation alone judges it),
# or its GPUs all come from DRA (its claims are judged instead).
_NO_GPU: Final[Mapping[Aspect, str]] = {"containers": "asks for no GPU"}
_CLAIMS_ONLY: Final[Mapping[Aspect, str]] = {
    "containers": "asks for no nvidia.com resource: its GPU claims are judged"
}


@per_review_record
class Judgement:
    """What the rules found in a pod spec, and what the pod as created would be.

    ``aspects`` and ``reached`` are what the runner needs (``results.rule_results``);
    ``changes`` and ``spec`` the mutation (``spec`` is None when nothing is to change);
    ``guard`` the affinity the dual-published guard adds, once the pod is allowed.
    """

    findings: list[RuleResult]
    aspects: Aspects
    reached: Phase = "placement"
    changes: list[str] | None = None
    spec: dict[str, Any] | None = None
    guard: Guard | None = None


def judge_pod_spec(subject: PodSubject, *, policy: Policy, inventory: Inventory) -> Judgement:
    """The judgement of the pod spec of ``subject`` (a pod or a pod template in scope)."""
    isolation = _isolation(subject, policy=policy, inventory=inventory)
    if not subject.asks_for_gpu:
        return _isolated(subject, isolation, policy)
    claimed = _claim_parts(subject, policy, inventory)
    guard = dual_guard(
        subject.workload,
        bool(subject.claims),
        subject.namespace,
        policy=policy,
        inventory=inventory,
    )
    claimed += guard.findings
    if not subject.found:
        # Only claims or DRA-served names: no nvidia.com resource of the device plugin's.
        availability: list[RuleResult] = []
        if not fails(claimed):
            verdict = pod_fit(subject.workload.spec, subject.what, subject.namespace, inventory)
            availability = verdict_findings(
                verdict, subject.what, has_claims=bool(subject.claims), supply=inventory.supply
            )
        else:
            availability = _claims_alone(subject, claimed, inventory)
        findings = [*claimed, *availability, *isolation.findings]
        aspects = _aspects(subject, policy)
        return Judgement(findings, aspects, guard=guard)
    return _gpu_pod(subject, (claimed, isolation), guard, policy=policy, inventory=inventory)


def _aspects_of(claims: bool, isolation: bool, claims_only: bool) -> Aspects:
    aspects: list[Aspect] = ["containers"]
    if claims:
        aspects += ["claims", "claim-refs"]
    if isolation:
        aspects.append("isolation")
    return judged(*aspects, skipped=_CLAIMS_ONLY if claims_only else None)


# What a pod that asks for a GPU is judged on, by (whether it has claims, whether GPU
# isolation is on, whether its GPUs all come from DRA): eight answers, worked out once.
_ASPECTS: Final = {
    (claims, isolation, claims_only): _aspects_of(claims, isolation, claims_only)
    for claims in (False, True)
    for isolation in (False, True)
    for claims_only in (False, True)
}


def _aspects(subject: PodSubject, policy: Policy) -> Aspects:
    return _ASPECTS[bool(subject.claims), policy.isolation.on, not subject.found]


def _gpu_pod(
    subject: PodSubject,
    parts: tuple[list[RuleResult], Isolation],
    guard: Guard,
    *,
    policy: Policy,
    inventory: Inventory,
) -> Judgement:
    """A pod spec with device-plugin GPU requests: the container rules, the placement, the
    allocator's verdict on the pod as it will be created, the mutation. ``parts``: its claims'
    findings (the rules not about fit: the allocator judges that), its isolation."""
    claimed, isolation = parts
    mode = policy.enforcement
    aspects = _aspects(subject, policy)
    asks, intent, findings = _checked(subject, policy, inventory)
    findings += claimed
    if intent is None or not asks:
        # Every finding so far is a failure: nothing to place.
        findings += _claims_alone(subject, findings, inventory)
        findings += isolation.findings
        return Judgement(findings, aspects, reached="checks", guard=guard)
    # No finding so far: _checked gives an intent only then.
    choices, wanted, findings, short = _placed(asks, intent, policy, inventory)
    findings += claimed
    findings += isolation.findings
    changes: list[str] = []
    spec = dict(subject.workload.spec)
    if fails(findings):
        findings += [*short, *_claims_alone(subject, findings, inventory)]
    else:
        # The pod as it will be created (renamed, its node selection and tolerations added)
        # is what the scheduler will judge.
        if choices and mode != "audit":
            spec, changes = mutated_spec(subject.workload.spec, choices, wanted, policy)
        verdict = pod_fit(spec, subject.what, subject.namespace, inventory)
        findings += decided(
            verdict, short, subject.what, has_claims=bool(subject.claims), supply=inventory.supply
        )
    # A pod that fails a rule gets no patch at all (the API server refuses it anyway): an
    # isolation failure comes after placement has chosen, so it must also drop the choices.
    failed = fails(findings)
    if failed:
        changes = []
    if mode != "audit" and not failed and (choices or isolation.to_void):
        changes += with_void(spec, isolation.to_void)
    return Judgement(findings, aspects, changes=changes, spec=spec, guard=guard)


def _isolation(subject: PodSubject, *, policy: Policy, inventory: Inventory) -> Isolation:
    """The isolation findings and writes of a pod under review (none when isolation is off or
    the namespace is exempt from it)."""
    if not policy.isolation.on or subject.namespace in policy.isolation.exempt_namespaces:
        return Isolation([], [])
    if subject.workload.spec.get("resourceClaims"):
        # Its containers may get GPUs from DRA claims (resources.claims), which no
        # nvidia.com resource shows: voiding their NVIDIA_VISIBLE_DEVICES could take them away.
        return Isolation([], [])
    return judge(
        subject.workload, subject.found, where=subject.where, policy=policy, inventory=inventory
    )


_ISOLATED: Final = judged("isolation", skipped=_NO_GPU)


def _isolated(subject: PodSubject, isolation: Isolation, policy: Policy) -> Judgement:
    """A pod that asks for no GPU and can be placed on a GPU node: GPU isolation alone."""
    changes: list[str] = []
    spec = None
    if isolation.to_void and policy.enforcement != "audit" and not fails(isolation.findings):
        spec = dict(subject.workload.spec)
        changes = with_void(spec, isolation.to_void)
    return Judgement(isolation.findings, _ISOLATED, changes=changes, spec=spec)


def _claim_parts(subject: PodSubject, policy: Policy, inventory: Inventory) -> list[RuleResult]:
    """The claim rules' findings on a pod's claims (the rules not about fit: whether they can
    be allocated is the allocator's verdict on the whole pod, engine/fit.py)."""
    claimed: list[RuleResult] = list(subject.missing)
    if subject.claims:
        assert inventory.dra is not None  # pod_claims finds none without it
        claimed += claim_findings(
            subject.claims, dra=inventory.dra, policy=policy.dra, namespace=subject.namespace
        )
    return claimed


def _claims_alone(
    subject: PodSubject, findings: Sequence[RuleResult], inventory: Inventory
) -> list[RuleResult]:
    """For a pod other rules refuse: whether its claims alone could be allocated, so that
    the user learns of every problem at once."""
    if not subject.claims or not judgeable(findings):
        return []
    verdict = claims_fit(subject.workload.spec, subject.what, subject.namespace, inventory)
    return verdict_findings(verdict, subject.what, has_claims=True, supply=inventory.supply)


def _checked(
    subject: PodSubject, policy: Policy, inventory: Inventory
) -> tuple[list[Ask], Intent | None, list[RuleResult]]:
    """The containers' asks, the pod's intent (None once anything failed), and the failures."""
    asks: list[Ask] = []
    findings: list[RuleResult] = []
    found: Sequence[Found] = subject.found
    for list_name, i, container, entries in found:
        checked = check_container(list_name, i, container, entries, inventory)
        if isinstance(checked, Ask):
            asks.append(checked)
        else:
            findings += checked
    intent = read_intent(subject.workload, policy)
    if not isinstance(intent, Intent):
        findings += intent
        return asks, None, findings
    return asks, (None if findings else intent), findings


def _placed(
    asks: Sequence[Ask], intent: Intent, policy: Policy, inventory: Inventory
) -> tuple[list[Choice], Mapping[str, set[str]], list[RuleResult], list[RuleResult]]:
    """The chosen names (none when a placement rule fails), the node labels to select,
    findings, and the containers no node has enough for (in the inventory's terms: the
    allocator decides whether that refuses the pod)."""
    each = per_container(asks, intent, inventory)
    findings, short = each.findings, each.short
    if each.failed:
        return [], {}, findings, short
    choices = choose_names(asks, each.found, policy, each.dra)
    if isinstance(choices, RuleResult):
        return [], {}, [*findings, choices], short
    # A pod only pools at zero can serve is what makes the autoscaler add their node: it is
    # allowed and mutated as it would be with the node there, and told that it waits.
    findings += [w for w in map(awaiting_nodes, choices) if w is not None]
    mode = policy.inject_node_selection
    if mode == "never" or policy.enforcement == "audit":
        return choices, {}, findings, short
    # Under "intent" the pod keeps what it said it wants, and a renamed resource keeps the
    # kind of device the pod named, even when today's nodes make the selection redundant.
    renamed = any(c.name != c.ask.form.name for c in choices)
    keep = mode == "always" or (mode == "intent" and (intent.stated or renamed))
    wanted = selection(choices, inventory, keep=keep)
    if isinstance(wanted, RuleResult):
        return choices, {}, [*findings, wanted], short
    return choices, wanted, findings, short
