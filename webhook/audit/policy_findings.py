"""The audit's policy family: what ``review()`` would deny today per GPU workload or bare pod,
and ``gpu-webhook-changes``, what it would write into new pods that the running ones lack
(docs/audit.md)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from webhook.audit.findings import Finding, Ref, worst
from webhook.audit.owners import Group
from webhook.contract import MUTATIONS_ANNOTATION
from webhook.policy import Decision
from webhook.policy.decision import RuleResult
from webhook.policy.rules import RULES

# What to change, per engine rule; where to change it depends on the object (see _where).
_RULE_FIXES = {
    "gpu-ephemeral-container": "remove the GPU resources from the ephemeral container",
    "gpu-resource-name": "ask for a GPU resource name the cluster offers (the message names them)",
    "gpu-quantity": "ask for a whole, positive number of GPUs",
    "gpu-requests-equal-limits": "set the GPU requests equal to the GPU limits",
    "gpu-container-forms": "give each container one kind of GPU",
    "gpu-intent": "correct the gpu-policy.io/ annotations",
    "gpu-node-selection": "select nodes that offer the GPU it asks for (the message says which)",
    "gpu-shared-request-above-one": "ask for 1 shared GPU per container",
    "gpu-resource-offered": "ask for a GPU that some node offers (the message says which)",
    "gpu-claim-admin-access": "remove adminAccess, or run it in a namespace the policy allows",
    "gpu-claim-device-class": "name a DeviceClass the cluster has (the message says which)",
    "gpu-claim-shared-request-above-one": "ask for 1 device (or 1 share) per shared request",
    "gpu-claim-mig-profile": "ask for a MIG profile some ResourceSlice offers",
    "gpu-claim-devices-available": "ask for the devices some node has (the message says which)",
}
_CONTROLLERS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet")


def _manage(subject: Ref) -> str:
    """``kubectl edit deployment -n nlp nlp-inference``."""
    return f"kubectl edit {subject.kind.lower()} -n {subject.namespace} {subject.name}"


def _where(subject: Ref) -> str:
    """Where a fix to the pod spec goes for this object, and what happens then."""
    kind = subject.kind
    if kind == "Pod":
        return (
            "in its manifest: a pod's resources cannot change, so delete it and create it "
            "again from the corrected manifest"
        )
    if kind in _CONTROLLERS:
        return f"in its pod template ({_manage(subject)}): the controller replaces its pods"
    if kind == "CronJob":
        return f"in spec.jobTemplate ({_manage(subject)}): the next run uses it"
    if kind == "Job":
        return (
            "in its manifest: a Job's pod template cannot change, so delete the Job and create "
            "it again"
        )
    return f"in the {kind} that makes these pods (its pods cannot change)"


def _restart(subject: Ref) -> str:
    if subject.kind in ("Deployment", "StatefulSet", "DaemonSet"):
        return (
            f"kubectl rollout restart {subject.kind.lower()} -n {subject.namespace} "
            f"{subject.name} makes them again through the webhook"
        )
    if subject.kind == "CronJob":
        return "the next run's pods get it"
    return "delete them so that they are made again through the webhook"


def _merge(results: tuple[RuleResult, ...]) -> dict[str, list[RuleResult]]:
    by_rule: dict[str, list[RuleResult]] = defaultdict(list)
    for result in results:
        by_rule[result.rule].append(result)
    return by_rule


def policy_findings(group: Group, decision: Decision) -> list[Finding]:
    subject = group.subject
    assert group.judged is not None
    since = group.created
    pods = len(group.pods)
    common: dict[str, Any] = {"subject": subject, "category": "policy", "since": since}
    out = []
    for rule, results in _merge(decision.results).items():
        status = worst(r.status for r in results)
        flagged = [r for r in results if r.status == status]
        message = "; ".join(dict.fromkeys(r.message for r in flagged if r.message))
        fix = ""
        if status in ("fail", "warn") and rule in _RULE_FIXES:
            fix = f"{_RULE_FIXES[rule]} {_where(subject)}"
        details = {"enforcement": decision.enforcement}
        containers = [r.container for r in flagged if r.container]
        if containers:
            details["containers"] = ", ".join(dict.fromkeys(containers))
        out.append(
            Finding(
                rule=rule,
                result=status,
                message=message or RULES.get(rule, ""),
                fix=fix,
                pods=pods,
                details=details,
                **common,
            )
        )
    if decision.results and decision.results[0].rule == "gpu-policy":
        return out  # skipped (exempt, no GPU): nothing would change either
    out.append(_changes_finding(group, decision, common))
    return out


def _changes_finding(group: Group, decision: Decision, common: dict[str, Any]) -> Finding:
    rule = "gpu-webhook-changes"
    changes = "; ".join(decision.changes)
    if not changes:
        return Finding(
            rule=rule, result="pass", message="the webhook would change nothing", **common
        )
    subject = group.subject
    if subject.kind == "Pod":
        return Finding(
            rule=rule,
            result="warn",
            message=f"the pod runs without what the webhook would write into it: {changes}",
            fix="delete it and create it again from its manifest: the webhook writes it then",
            pods=1,
            details={"changes": changes},
            **common,
        )
    without = [
        p
        for p in group.pods
        if MUTATIONS_ANNOTATION not in ((p.get("metadata") or {}).get("annotations") or {})
    ]
    if not without:
        return Finding(
            rule=rule,
            result="pass",
            message=f"the webhook writes into its new pods: {changes}",
            pods=len(group.pods),
            details={"changes": changes},
            **common,
        )
    return Finding(
        rule=rule,
        result="warn",
        message=(
            f"{len(without)} of its {len(group.pods)} pods run without what the webhook writes "
            f"into new ones ({changes}): they were made before the webhook ran, or while it "
            "was off"
        ),
        fix=f"nothing to do for new pods; for these, {_restart(subject)}",
        pods=len(without),
        details={"changes": changes},
        **common,
    )
