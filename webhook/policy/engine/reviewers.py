"""One reviewer per kind of subject: a pod, a pod template, a claim.

Each takes its subject (``subjects.py``), has the rules judge it and turns the findings into
the Decision (``results.py``). Pods and pod templates share the judgement of their pod spec
(``pod_spec.py``) and differ in what they do with the changes: a pod is mutated (its copy and
JSON Patch), a template only says what its pods will get.
"""

from __future__ import annotations

from typing import Final

from webhook.policy.decision import Decision, RuleResult
from webhook.policy.engine.claims import claim_findings
from webhook.policy.engine.fit import claim_fit, judgeable, verdict_findings
from webhook.policy.engine.mutation import mutated_copy
from webhook.policy.engine.pod_spec import judge_pod_spec
from webhook.policy.engine.results import decision, judged, rule_results
from webhook.policy.engine.subjects import ClaimSubject, PodSubject, TemplateSubject
from webhook.policy.inventory import Inventory
from webhook.policy.model import Policy


def review_pod(subject: PodSubject, *, policy: Policy, inventory: Inventory) -> Decision:
    """A Pod: the rules of its pod spec, and the pod as it will be created (copy and patch)."""
    judgement = judge_pod_spec(subject, policy=policy, inventory=inventory)
    findings = judgement.findings
    results = rule_results(findings, judgement.aspects, reached=judgement.reached)
    changes = judgement.changes or []
    mutated = None
    if changes and judgement.spec is not None:
        mutated = mutated_copy(subject.obj, subject.workload, judgement.spec, "; ".join(changes))
    out = decision(
        subject,
        results,
        mode=policy.enforcement,
        clean=not findings,
        changes=changes,
        mutated=mutated,
    )
    guard = judgement.guard
    return out if guard is None else guard.applied_to_pod(out, subject.obj, subject.workload)


def review_template(subject: TemplateSubject, *, policy: Policy, inventory: Inventory) -> Decision:
    """A pod template (Deployment, Job, ...): the rules of its pod spec as the pods it will
    create, never patched; what the mutation would change in its pods is a warning."""
    judgement = judge_pod_spec(subject, policy=policy, inventory=inventory)
    findings = judgement.findings
    results = rule_results(findings, judgement.aspects, reached=judgement.reached)
    out = decision(
        subject,
        results,
        mode=policy.enforcement,
        clean=not findings,
        changes=judgement.changes or (),
        changes_warning=True,
    )
    guard = judgement.guard
    return out if guard is None else guard.applied_to_template(out)


# A claim has no containers and no references to claims: the claim rules alone.
_CLAIM: Final = judged("claims")


def review_claim(subject: ClaimSubject, *, policy: Policy, inventory: Inventory) -> Decision:
    """A ResourceClaim or ResourceClaimTemplate: the claim rules and the allocator's verdict,
    nothing to mutate."""
    assert inventory.dra is not None  # read_subject skips a claim without DRA objects
    findings: list[RuleResult] = claim_findings(
        [subject.claim], dra=inventory.dra, policy=policy.dra, namespace=subject.namespace
    )
    what = subject.what
    if judgeable(findings):
        verdict = claim_fit(subject.spec, what, inventory)
        findings += verdict_findings(verdict, what, has_claims=True, supply=inventory.supply)
    results = rule_results(findings, _CLAIM)
    return decision(subject, results, mode=policy.enforcement, clean=not findings)
