"""What the audit finds: one Finding per rule and reported object, and the levels they carry.

A Finding's ``result`` is one of the Policy WG report results (``pass``, ``fail``, ``warn``,
``error``, ``skip``), so that a finding becomes a PolicyReport result as it is. The levels
are ordered most severe first: ``fail`` (something is broken or would be denied), ``error``
(the audit could not judge it), ``warn``, ``skip`` (not judged: exempt, no pods), ``pass``.
Only ``fail`` makes ``gpu-policy audit`` exit 1.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from webhook.policy.decision import Status
from webhook.policy.rules import RULES

__all__ = [
    "AUDIT_RULES",
    "CATEGORIES",
    "LEVELS",
    "Finding",
    "Ref",
    "format_age",
    "rank",
    "rule_description",
    "worst",
]

#: Results, most severe first (the table's order, and how results of one rule merge).
LEVELS: tuple[Status, ...] = ("fail", "error", "warn", "skip", "pass")
_RANK: dict[str, int] = {level: i for i, level in enumerate(LEVELS)}

# Stable rule ids of the audit's own checks, beside the engine's (RULES): users filter
# reports and alerts on them. Never rename one.
AUDIT_RULES: dict[str, str] = {
    "gpu-pod-scheduled": "GPU pods are bound to a node",
    "gpu-pod-admitted": "the kubelet admitted the GPU pods (no UnexpectedAdmissionError)",
    "gpu-webhook-changes": "the workload already says what the webhook would write into it",
    "gpu-node-capacity": "pods waiting for a node's GPUs could get one of its slots",
    "gpu-node-labels": "a node's GPU labels agree with what it advertises",
    "gpu-node-dual-published": "no node publishes the same GPUs through the device plugin and "
    "DRA (docs/migrate.md)",
    "gpu-node-double-allocation": "no GPU is given both to a device-plugin pod and to a claim",
    "gpu-policy": "the object is one the policy judges",
    "gpu-visible-without-request": "no running container on a GPU node sees GPUs without "
    "asking for one",
}

#: Report categories: what kind of check produced a finding.
CATEGORIES = {
    "policy": "GPU policy",
    "scheduling": "GPU scheduling",
    "nodes": "GPU nodes",
    "isolation": "GPU isolation",
}


def rank(result: str) -> int:
    """0 for ``fail`` up to 4 for ``pass``: sort by it for most severe first."""
    return _RANK.get(result, len(LEVELS))


def worst(results: Iterable[Status]) -> Status:
    """The most severe of some results (``pass`` for none)."""
    found: Status = "pass"
    for result in results:
        if rank(result) < rank(found):
            found = result
    return found


def rule_description(rule: str) -> str:
    """What a rule checks, in one line (engine rules and audit rules)."""
    return RULES.get(rule) or AUDIT_RULES.get(rule, rule)


def format_age(seconds: int | None) -> str:
    """``29d 5h``, ``3h 12m``, ``45s``: how long a pod has been waiting, to the useful unit."""
    if seconds is None:
        return "-"
    seconds = max(seconds, 0)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs}s"


@dataclass(frozen=True, slots=True)
class Reason:
    """One cause of a stuck pod: a code, what is wrong, what to do, and details for reports."""

    code: str
    message: str
    fix: str
    details: Mapping[str, str] = field(default_factory=dict)
    nodes: tuple[str, ...] = ()  # the full nodes, for the node capacity findings


@dataclass(frozen=True, slots=True, order=True)
class Ref:
    """The object a finding is about, as a report's ObjectReference names it."""

    kind: str
    namespace: str | None
    name: str
    uid: str = ""
    api_version: str = "v1"

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name}"

    def as_reference(self) -> dict[str, str]:
        """The ObjectReference a PolicyReport result lists under ``resources``."""
        out = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name}
        if self.namespace:
            out["namespace"] = self.namespace
        if self.uid:
            out["uid"] = self.uid
        return out


@dataclass(frozen=True, slots=True)
class Finding:
    """One rule's verdict on one reported object (a workload, a bare pod or a node).

    ``pods`` is how many pods the finding covers (the two Pending replicas of a Deployment
    make one finding with ``pods=2``). ``since`` is when the oldest of them was created (for a
    policy finding: when the object was), ``waiting`` how long the oldest has waited, in
    seconds, for a pod that is stuck. ``scheduler`` quotes the scheduler's PodScheduled
    message. ``reasons`` are the stuck reasons' codes; ``details`` go to the report result's
    ``properties`` as they are (string values).
    """

    rule: str
    result: Status
    subject: Ref
    message: str
    fix: str = ""
    category: str = "policy"
    pods: int = 0
    since: datetime | None = None
    waiting: int | None = None
    scheduler: str | None = None
    reasons: tuple[str, ...] = ()
    details: Mapping[str, str] = field(default_factory=dict)

    @property
    def cluster_scoped(self) -> bool:
        """True for findings about cluster-scoped objects (nodes): ClusterPolicyReport."""
        return not self.subject.namespace

    def sort_key(self) -> tuple[Any, ...]:
        """Most severe first, then the longest waiting / oldest, then by object and rule."""
        since = self.since.timestamp() if self.since is not None else float("inf")
        subject = self.subject
        return (
            rank(self.result),
            since,
            subject.namespace or "",
            subject.kind,
            subject.name,
            self.rule,
        )

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (``gpu-policy audit -o json``)."""
        out: dict[str, Any] = {
            "rule": self.rule,
            "result": self.result,
            "category": CATEGORIES.get(self.category, self.category),
            "kind": self.subject.kind,
            "namespace": self.subject.namespace,
            "name": self.subject.name,
            "message": self.message,
            "fix": self.fix,
        }
        if self.subject.uid:
            out["uid"] = self.subject.uid
        if self.pods:
            out["pods"] = self.pods
        if self.since is not None:
            out["since"] = self.since.strftime("%Y-%m-%dT%H:%M:%SZ")
        if self.waiting is not None:
            out["waitingSeconds"] = self.waiting
            out["waiting"] = format_age(self.waiting)
        if self.scheduler:
            out["schedulerMessage"] = self.scheduler
        if self.reasons:
            out["reasons"] = list(self.reasons)
        if self.details:
            out["details"] = dict(self.details)
        return out
