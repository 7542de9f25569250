"""Policy findings on what exists, node findings, ordering and the exit status."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tests.core.audit.conftest import Runner, make_policy
from tests.objects import gfd_node, listed_pod, workload
from webhook.audit import AuditResult, Finding, Ref, exit_status
from webhook.policy import inventory_from_nodes, review

GPU1 = {"nvidia.com/gpu": 1}
TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
MUTATED = {"gpu-policy.io/mutations": "tolerations nvidia.com/gpu:NoSchedule"}


def find(result: AuditResult, rule: str, name: str) -> Finding:
    found = [f for f in result.findings if f.rule == rule and f.subject.name == name]
    assert len(found) == 1, [(f.rule, f.subject) for f in result.findings]
    return found[0]


def _unequal(kind: str, name: str) -> dict[str, Any]:
    obj = workload(kind, name)
    template = obj["spec"]["jobTemplate"]["spec"] if kind == "CronJob" else obj["spec"]
    template["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"nvidia.com/gpu": 1},
        "limits": {"nvidia.com/gpu": 2},
    }
    return obj


@pytest.mark.parametrize(
    ("obj", "where"),
    [
        pytest.param(_unequal("Deployment", "infer"),
                     "in its pod template (kubectl edit deployment -n ml infer)", id="deployment"),
        pytest.param(_unequal("StatefulSet", "llm"),
                     "(kubectl edit statefulset -n ml llm): the controller replaces its pods",
                     id="statefulset"),
        pytest.param(_unequal("CronJob", "nightly"),
                     "in spec.jobTemplate (kubectl edit cronjob -n ml nightly): the next run",
                     id="cronjob"),
        pytest.param(_unequal("Job", "train"), "delete the Job and create it again", id="job"),
        pytest.param(listed_pod("debug", gpu=None, node="gpu-1") | {"spec": {"nodeName": "gpu-1",
                     "containers": [{"name": "main", "resources": {"requests": {"nvidia.com/gpu": 1},
                                                                   "limits": {"nvidia.com/gpu": 2}}}]}},
                     "a pod's resources cannot change, so delete it and create it again",
                     id="bare-pod"),
    ],
)  # fmt: skip
def test_what_would_be_denied_today_and_where_to_fix_it(
    run: Runner, obj: dict[str, Any], where: str
) -> None:
    result = run([obj], [gfd_node("gpu-1", gpus=2)])
    finding = find(result, "gpu-requests-equal-limits", obj["metadata"]["name"])
    assert finding.result == "fail"
    assert "requests 1 but limits 2" in finding.message
    assert finding.fix.startswith("set the GPU requests equal to the GPU limits ")
    assert where in finding.fix
    assert finding.details["enforcement"] == "enforce"
    assert result.exit_status() == 1


def test_a_shared_request_above_one_on_a_bare_pod(run: Runner) -> None:
    pod = listed_pod("two", gpu={"nvidia.com/gpu": 2}, node="gpu-1")
    result = run([pod], [gfd_node("gpu-1", replicas=4, config_key="shared")])
    finding = find(result, "gpu-shared-request-above-one", "two")
    assert finding.result == "fail"
    assert "failRequestsGreaterThanOne" in finding.message
    assert finding.details["containers"] == 'container "main"'


def test_enforcement_warn_reports_warnings(run: Runner) -> None:
    result = run([_unequal("Deployment", "infer")], [gfd_node("gpu-1", gpus=2)], enforcement="warn")
    finding = find(result, "gpu-requests-equal-limits", "infer")
    assert finding.result == "warn"
    assert result.exit_status() == 0


def test_exempt_namespaces_are_skipped_but_stuck_pods_still_reported(run: Runner) -> None:
    pod = listed_pod("smi", "kube-system", gpu={"nvidia.com/gpu": 2}, nodeSelector={"x": "y"})
    result = run([pod], [gfd_node("gpu-1", gpus=2)])
    skipped = find(result, "gpu-policy", "smi")
    assert (skipped.result, skipped.message) == ("skip", "namespace kube-system is exempt")
    assert not [f for f in result.findings if f.rule.startswith("gpu-request")]
    assert not [f for f in result.findings if f.rule == "gpu-webhook-changes"]
    assert find(result, "gpu-pod-scheduled", "smi").reasons == ("selection",)


@pytest.mark.parametrize(
    ("annotated", "result", "pods", "says"),
    [
        pytest.param((False, False), "warn", 2, "2 of its 2 pods run without", id="none-mutated"),
        pytest.param((True, False), "warn", 1, "1 of its 2 pods run without", id="one-mutated"),
        pytest.param((True, True), "pass", 2, "the webhook writes into its new pods", id="all"),
    ],
)
def test_what_the_webhook_would_change(
    run: Runner, annotated: tuple[bool, bool], result: str, pods: int, says: str
) -> None:
    objects = [
        workload("Deployment", "infer", gpu=GPU1),
        *(
            listed_pod(f"infer-{i}", gpu=GPU1, node="gpu-1", owned_by=("Deployment", "infer"),
                 annotations=MUTATED if mutated else None, tolerations=[TOLERATION])
            for i, mutated in enumerate(annotated)
        ),
    ]  # fmt: skip
    audited = run(objects, [gfd_node("gpu-1", gpus=2)], tolerations=[TOLERATION])
    finding = find(audited, "gpu-webhook-changes", "infer")
    assert (finding.result, finding.pods) == (result, pods)
    assert says in finding.message
    assert "tolerations nvidia.com/gpu:NoSchedule" in finding.message
    if result == "warn":
        assert "kubectl rollout restart deployment -n ml infer" in finding.fix


def test_a_bare_pod_runs_without_the_change(run: Runner) -> None:
    result = run(
        [listed_pod("debug", gpu=GPU1, node="gpu-1")], [gfd_node("gpu-1")], tolerations=[TOLERATION]
    )
    finding = find(result, "gpu-webhook-changes", "debug")
    assert finding.result == "warn"
    assert "delete it and create it again" in finding.fix


def test_nodes_whose_labels_disagree_with_allocatable(run: Runner) -> None:
    stale = gfd_node("gpu-2", replicas=4, config_key="shared")
    # GFD relabelled for 4 replicas; the plugin, not restarted, still advertises one.
    stale["status"]["allocatable"]["nvidia.com/gpu"] = "1"
    result = run([], [gfd_node("gpu-1"), stale])
    warned = find(result, "gpu-node-labels", "gpu-2")
    assert warned.result == "warn" and warned.cluster_scoped
    assert "restart the device plugin" in warned.message
    assert find(result, "gpu-node-labels", "gpu-1").result == "pass"


def test_node_capacity_warns_where_pods_wait(run: Runner) -> None:
    objects = [listed_pod("waiting", gpu=GPU1), listed_pod("holder", gpu=GPU1, node="gpu-1")]
    result = run(objects, [gfd_node("gpu-1"), gfd_node("gpu-2", "t4", taints=[
        {"key": "dedicated", "value": "batch", "effect": "NoSchedule"}])])  # fmt: skip
    full = find(result, "gpu-node-capacity", "gpu-1")
    assert (full.result, full.message) == (
        "warn",
        "nvidia.com/gpu: 1 of 1 slot held; 1 waiting pod asks for its GPUs",
    )
    assert find(result, "gpu-node-capacity", "gpu-2").result == "pass"


def test_order_most_severe_then_longest_waiting(run: Runner) -> None:
    objects = [
        listed_pod("recent", gpu=GPU1, created="2025-07-10T00:00:00Z"),
        listed_pod("ancient", gpu=GPU1, created="2025-05-01T00:00:00Z"),
        listed_pod("holder", gpu=GPU1, node="gpu-1", created="2025-04-01T00:00:00Z"),
        listed_pod("debug", gpu=GPU1, node="gpu-1", created="2025-04-02T00:00:00Z"),
    ]
    result = run(objects, [gfd_node("gpu-1", gpus=2)], tolerations=[TOLERATION])
    problems = [(f.result, f.rule, f.subject.name) for f in result.problems()]
    assert problems[:2] == [
        ("fail", "gpu-pod-scheduled", "ancient"),
        ("fail", "gpu-pod-scheduled", "recent"),
    ]
    assert {r for r, _, _ in problems[2:]} == {"warn"}
    ranks = ["fail", "error", "warn", "skip", "pass"]
    assert [ranks.index(f.result) for f in result.findings] == sorted(
        ranks.index(f.result) for f in result.findings
    )


def test_one_finding_per_rule_and_object_and_the_counts(run: Runner) -> None:
    objects = [
        workload("Deployment", "infer", gpu=GPU1),
        *(listed_pod(f"infer-{i}", gpu=GPU1, owned_by=("Deployment", "infer")) for i in range(3)),
        listed_pod("bare", gpu={"nvidia.com/gpu": 2}, node="gpu-1"),
    ]
    result = run(objects, [gfd_node("gpu-1", gpus=2)])
    keys = Counter((f.rule, f.subject) for f in result.findings)
    assert max(keys.values()) == 1
    assert sum(result.summary().values()) == len(result.findings)
    assert (result.workloads, result.gpu_pods, result.bound, result.waiting) == (2, 4, 1, 3)
    assert (result.slots, result.held) == (2, 2)
    placements = {p.subject.name: p for p in result.placements}
    assert (placements["infer"].pods, placements["infer"].waiting) == (3, 3)
    assert placements["bare"].bound == {"gpu-1": 1}


@pytest.mark.parametrize(
    ("results", "status"),
    [((), 0), (("pass", "skip"), 0), (("warn", "error"), 0), (("pass", "fail"), 1)],
    ids=["nothing", "pass-skip", "warn-error", "a-fail"],
)
def test_exit_status(results: tuple[str, ...], status: int) -> None:
    findings = [Finding("r", r, Ref("Pod", "ml", f"p{i}"), "m") for i, r in enumerate(results)]
    assert exit_status(findings) == status


def test_the_policy_is_the_webhooks(run: Runner) -> None:
    """The same object, the same policy: the audit's verdict is review()'s."""
    obj = _unequal("Deployment", "infer")
    nodes = [gfd_node("gpu-1", gpus=2)]
    policy = make_policy()
    decision = review(obj, policy=policy, inventory=inventory_from_nodes(nodes, policy, source="t"))
    result = run([obj], nodes, policy=policy)
    failed = {f.rule for f in result.findings if f.result == "fail" and f.category == "policy"}
    assert failed == set(decision.failed)
