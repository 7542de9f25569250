"""``audit()``: judge what already runs with the webhook's engine, and say why GPU pods wait.

Each family has its module (``policy_findings.py``, ``node_findings.py``; scheduling here).
The input is what a cluster listing (or a dump) gave the Collector, the node objects, the
policy and the inventory built from those nodes; the output an AuditResult: one Finding per
rule and reported object, pass included, which the output and report modules render.

Three families of findings:

* **policy** (per GPU workload or bare pod, the engine's rules, judged once per owner):
  what ``review()`` would deny today, and ``gpu-webhook-changes``: what it would write into
  new pods that the running ones lack;
* **scheduling** (per GPU workload or bare pod): ``gpu-pod-scheduled`` for pods not bound
  to a node, ``gpu-pod-admitted`` for pods the kubelet refused, with the reason in GPU terms
  (``webhook.audit.stuck``; for pods with DRA claims in DRA terms, ``webhook.audit.claims``),
  how long the oldest has waited and the scheduler's message;
* **nodes** (cluster-scoped): ``gpu-node-capacity`` per GPU node (full while pods wait for
  it), ``gpu-node-labels`` (the inventory's label / allocatable disagreements).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from webhook.audit.claims import ClaimDiagnosis
from webhook.audit.findings import Finding, Ref, format_age
from webhook.audit.isolation import isolation_findings
from webhook.audit.migration import migration_findings
from webhook.audit.node_findings import node_findings
from webhook.audit.owners import Collector, Group, as_utc, parse_time
from webhook.audit.policy_findings import policy_findings
from webhook.audit.stuck import Capacity, Reason, pod_requests, scheduler_message
from webhook.audit.trim import ADMISSION_ERROR
from webhook.policy import Inventory, Policy, review
from webhook.policy.decision import Status
from webhook.policy.dra import dra_snapshot
from webhook.policy.nodes import node_views
from webhook.policy.supply.assemble import (
    OFFLINE_FIT_BUDGET_S,
    DraObjects,
    assemble,
    build_supply,
)
from webhook.policy.supply.served import offered
from webhook.policy.workloads import locate

__all__ = ["AuditResult", "Placement", "audit", "exit_status"]

EXIT_CLEAN, EXIT_FAILED = 0, 1


@dataclass(frozen=True)
class AuditResult:
    """Everything one audit found, pass included, most severe first then oldest."""

    findings: tuple[Finding, ...]
    placements: tuple[Placement, ...]
    now: datetime
    policy: str
    policy_source: str
    inventory_source: str
    inventory_summary: str
    scanned: Mapping[str, int] = field(default_factory=dict)
    workloads: int = 0
    gpu_pods: int = 0
    bound: int = 0
    waiting: int = 0
    refused: int = 0
    slots: int = 0
    held: int = 0

    def problems(self) -> tuple[Finding, ...]:
        """The findings that did not pass (what the text table shows)."""
        return tuple(f for f in self.findings if f.result != "pass")

    def summary(self) -> dict[str, int]:
        """Count of findings per result, every result present."""
        counts = Counter(f.result for f in self.findings)
        return {r: counts.get(r, 0) for r in ("pass", "fail", "warn", "error", "skip")}

    def exit_status(self) -> int:
        """0 when nothing is at fail level, 1 otherwise."""
        return exit_status(self.findings)


def exit_status(findings: Iterable[Finding]) -> int:
    """``gpu-policy audit``'s exit status: 1 when any finding is at fail level, else 0."""
    return EXIT_FAILED if any(f.result == "fail" for f in findings) else EXIT_CLEAN


def _age(since: datetime | None, now: datetime) -> int | None:
    return None if since is None else int((now - since).total_seconds())


def _created(obj: Mapping[str, Any]) -> datetime | None:
    return parse_time((obj.get("metadata") or {}).get("creationTimestamp"))


@dataclass(slots=True)
class _Stuck:
    pods: list[Mapping[str, Any]] = field(default_factory=list)
    reasons: list[Reason] = field(default_factory=list)


def _is_refused(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Failed" and status.get("reason") == ADMISSION_ERROR


def _is_bound(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName")) and not _is_refused(pod)


def _gated(pod: Mapping[str, Any]) -> Reason | None:
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "PodScheduled" and condition.get("reason") == "SchedulingGated":
            return Reason(
                "gated",
                "it has scheduling gates (spec.schedulingGates): the scheduler does not look "
                "at it until they are removed",
                "whatever set the gate (a queue such as Kueue) removes it when the pod's turn "
                "comes: look there, not at the GPUs",
            )
    return None


def _stuck_findings(
    group: Group, rule: str, stuck: dict[tuple[str, ...], _Stuck], now: datetime
) -> list[Finding]:
    total = len(group.pods)
    out = []
    for codes, entry in stuck.items():
        oldest = entry.pods[0]
        since = _created(oldest)
        waited = _age(since, now)
        name = (oldest.get("metadata") or {}).get("name", "")
        count = len(entry.pods)
        if count == 1 and total == 1:
            which = f"1 pod ({name})"
        elif count == total:
            which = f"{count} pods, the oldest {name},"
        else:
            which = f"{count} of {total} pods, the oldest {name},"
        if rule == "gpu-pod-scheduled":
            head = f"{which} not bound to a node for {format_age(waited)}"
        else:
            head = (
                f"{which} refused by the kubelet (UnexpectedAdmissionError), created "
                f"{format_age(waited)} ago"
            )
        details: dict[str, str] = {"reasons": ", ".join(codes), "pods": str(count)}
        for reason in entry.reasons:
            details.update({k: v for k, v in reason.details.items() if v})
        # A gated pod waits for its gate, a scale-up one for its node: both as they should.
        result: Status = "warn" if set(codes) <= {"gated", "scale-up"} else "fail"
        out.append(
            Finding(
                rule=rule,
                result=result,
                subject=group.subject,
                message=f"{head}: " + "; ".join(r.message for r in entry.reasons),
                fix="; ".join(r.fix for r in entry.reasons),
                category="scheduling",
                pods=count,
                since=since,
                waiting=waited,
                scheduler=scheduler_message(oldest),
                reasons=codes,
                details=details,
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one reported object's GPU pods are: bound per node, waiting, refused."""

    subject: Ref
    requests: Mapping[str, int]
    bound: Mapping[str, int]
    waiting: int = 0
    refused: int = 0
    waiting_since: datetime | None = None

    @property
    def pods(self) -> int:
        """Every GPU pod of the object."""
        return sum(self.bound.values()) + self.waiting + self.refused

    def as_dict(self) -> dict[str, Any]:
        """The JSON form."""
        out: dict[str, Any] = {
            "kind": self.subject.kind,
            "namespace": self.subject.namespace,
            "name": self.subject.name,
            "requests": dict(self.requests),
            "pods": self.pods,
            "bound": dict(self.bound),
            "waiting": self.waiting,
            "refused": self.refused,
        }
        if self.waiting_since is not None:
            out["waitingSince"] = self.waiting_since.strftime("%Y-%m-%dT%H:%M:%SZ")
        return out


def _pending_reasons(
    pod: Mapping[str, Any],
    requests: Mapping[str, int],
    capacity: Capacity,
    claims: ClaimDiagnosis | None,
) -> list[Reason]:
    """Why an unbound pod waits: its GPU resources (as the nodes offer them), its GPU claims
    (as the ResourceSlices offer them and the claims hold them), or both."""
    reasons = capacity.diagnose_pending(pod, requests) if requests else []
    if claims is not None and claims.asks(pod):
        reasons += claims.diagnose(pod)
    return reasons


def _scheduling_findings(
    group: Group,
    capacity: Capacity,
    now: datetime,
    waiters: Counter[str],
    claims: ClaimDiagnosis | None = None,
) -> tuple[list[Finding], Placement]:
    subject = group.subject
    common: dict[str, Any] = {"subject": subject, "category": "scheduling", "since": group.created}
    judged_spec = (group.judged or {}).get("spec") or {}
    if not group.pods:
        none = "no pods right now"
        template = judged_spec.get("template") or (
            ((judged_spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}
        )
        placement = Placement(subject, pod_requests(template.get("spec") or {}), {})
        return [
            Finding(rule="gpu-pod-scheduled", result="skip", message=none, **common),
            Finding(rule="gpu-pod-admitted", result="skip", message=none, **common),
        ], placement
    pending: dict[tuple[str, ...], _Stuck] = {}
    refused: dict[tuple[str, ...], _Stuck] = {}
    bound: Counter[str] = Counter()
    for pod in group.pods:
        requests = pod_requests(pod.get("spec") or {})
        if _is_refused(pod):
            reasons = capacity.diagnose_refused(pod, requests)
            into = refused
        elif _is_bound(pod):
            bound[(pod.get("spec") or {})["nodeName"]] += 1
            continue
        else:
            gated = _gated(pod)
            reasons = [gated] if gated else _pending_reasons(pod, requests, capacity, claims)
            for reason in reasons:
                waiters.update(reason.nodes)
            into = pending
        entry = into.setdefault(tuple(r.code for r in reasons), _Stuck(reasons=reasons))
        entry.pods.append(pod)
    out = _stuck_findings(group, "gpu-pod-scheduled", pending, now)
    if not pending:
        on = ", ".join(f"{node} ({n})" for node, n in sorted(bound.items()))
        message = f"{sum(bound.values())} GPU {'pod' if sum(bound.values()) == 1 else 'pods'}"
        message += f" bound: {on}" if on else " bound"
        out.append(
            Finding(
                rule="gpu-pod-scheduled",
                result="pass",
                message=message,
                pods=len(group.pods),
                **common,
            )
        )
    out += _stuck_findings(group, "gpu-pod-admitted", refused, now)
    if not refused:
        out.append(
            Finding(
                rule="gpu-pod-admitted",
                result="pass",
                message="no pod was refused by the kubelet",
                pods=len(group.pods),
                **common,
            )
        )
    waiting = [p for entry in pending.values() for p in entry.pods]
    placement = Placement(
        subject=subject,
        requests=pod_requests(group.pods[0].get("spec") or {}),
        bound=dict(sorted(bound.items())),
        waiting=len(waiting),
        refused=sum(len(entry.pods) for entry in refused.values()),
        waiting_since=min((t for p in waiting if (t := _created(p))), default=None),
    )
    return out, placement


def _asks_for_gpu(obj: Mapping[str, Any], claims: ClaimDiagnosis | None) -> bool:
    """A GPU container, or (where the audit sees DRA) a GPU claim or a claim it cannot find.

    Pods and templates are kept by the trim for their claims alone; here the claims decide.
    """
    workload = locate(obj)
    if workload is None:
        return False
    if workload.spec.get("containers") or workload.spec.get("initContainers"):
        return True  # the trim keeps GPU containers only
    if claims is None:
        return False
    pod = {
        "metadata": {"namespace": (obj.get("metadata") or {}).get("namespace")},
        "spec": workload.spec,
        "status": obj.get("status") or {},
    }
    return claims.asks(pod)


def _gpu_groups(groups: list[Group], claims: ClaimDiagnosis | None) -> list[Group]:
    """The groups with their GPU pods only, and without those left with no GPU object."""
    out = []
    for group in groups:
        group.pods = [p for p in group.pods if _asks_for_gpu(p, claims)]
        if group.pods or (group.judged is not None and _asks_for_gpu(group.judged, claims)):
            out.append(group)
    return out


def audit(
    collected: Collector,
    nodes: Iterable[Mapping[str, Any]],
    *,
    policy: Policy,
    now: datetime,
    inventory: Inventory | None = None,
    nodepools: Iterable[Mapping[str, Any]] = (),
) -> AuditResult:
    """Judge the collected GPU workloads and pods against the policy and the nodes.

    ``nodes`` are Node objects (full or trimmed): they give the per-node view (allocatable,
    labels, taints) the stuck-pod reasons need. ``inventory`` defaults to the one those
    nodes make with ``policy`` and Karpenter's ``nodepools``, as the webhook builds it (pools
    that can appear included), with the DRA objects the collector read. ``now`` dates the
    waiting times.
    """
    now = as_utc(now)
    node_list = list(nodes)
    found = collected.dra
    objects = DraObjects(
        found["DeviceClass"],
        found["ResourceSlice"],
        found["ResourceClaim"],
        found["ResourceClaimTemplate"],
    )
    joined = False
    if inventory is None:
        inventory = assemble(
            policy,
            nodes=node_list,
            source="nodes",
            dra=objects if objects else None,
            nodepools=nodepools,
            # A batch job: nobody waits on it, its answers must not depend on the load.
            fit_budget_s=OFFLINE_FIT_BUDGET_S,
        )
    elif inventory.dra is None and objects:
        # An inventory given without DRA objects: the collected ones join its naming view.
        joined = True
        inventory = replace(
            inventory,
            dra=dra_snapshot(
                objects.device_classes,
                objects.resource_slices,
                objects.resource_claims,
                objects.resource_claim_templates,
            ),
        )
    supply = inventory.supply
    if supply is None or joined:
        # An inventory given without its supply, or joined by the DRA objects collected here:
        # the allocator's node groups come from the same nodes and DRA objects.
        supply = build_supply(policy, inventory, node_list, inventory.dra)
    views = node_views(node_list)
    capacity = Capacity(views, inventory, supply)
    claims = (
        ClaimDiagnosis(inventory.dra, policy.dra, capacity.fit_now)
        if inventory.dra is not None
        else None
    )
    groups = _gpu_groups(collected.groups(), claims)
    for group in groups:
        for pod in group.pods:
            if _is_bound(pod):
                capacity.hold(pod, group.subject, pod_requests(pod.get("spec") or {}))
    findings: list[Finding] = []
    placements: list[Placement] = []
    waiters: Counter[str] = Counter()
    for group in groups:
        if group.judged is not None:
            decision = review(group.judged, policy=policy, inventory=inventory)
            findings += policy_findings(group, decision)
        scheduling, placement = _scheduling_findings(group, capacity, now, waiters, claims)
        findings += scheduling
        placements.append(placement)
    findings += node_findings(views, capacity, inventory, waiters)
    findings += migration_findings(inventory, (p for g in groups for p in g.pods))
    gpu_nodes = {n.name for n in views} | {n.name for n in inventory.gpu_nodes.nodes or ()}
    findings += isolation_findings(collected.exposed, gpu_nodes, policy)
    findings.sort(key=Finding.sort_key)
    pods = [p for g in groups for p in g.pods]
    bound = sum(1 for p in pods if _is_bound(p))
    refused = sum(1 for p in pods if _is_refused(p))
    return AuditResult(
        findings=tuple(findings),
        placements=tuple(placements),
        now=now,
        policy=policy.name,
        policy_source=policy.source,
        inventory_source=inventory.source,
        inventory_summary=offered(inventory),
        scanned=dict(sorted(collected.scanned.items())),
        workloads=len(groups),
        gpu_pods=len(pods),
        bound=bound,
        waiting=len(pods) - bound - refused,
        refused=refused,
        slots=sum(sum(n.gpus.values()) for n in views),
        held=sum(capacity.held.values()),
    )
