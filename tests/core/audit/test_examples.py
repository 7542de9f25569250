"""The dumps in examples/audit: an 8-node cluster with two GPUs, before and after sharing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import yaml

from tests.core.audit.crd_schema import errors
from tests.support.paths import REPO
from webhook.audit import AuditResult, Collector, audit, document, reports, text
from webhook.files import load_policy, nodes_from_text, read_text

ROOT = REPO
SCHEDULER = "0/8 nodes are available: 8 Insufficient nvidia.com/gpu."
# The dumps' clocks (see the comment at the top of each objects.yaml).
BEFORE = ("seed003-before", "seed003-before", datetime(2025, 7, 14, 8, 18, 53, tzinfo=UTC))
AFTER = ("seed003-after", "seed003-l20-t4", datetime(2025, 7, 14, 9, 0, 0, tzinfo=UTC))


def audited(dump: str, cluster: str, now: datetime) -> AuditResult:
    policy = load_policy(ROOT / "examples" / "clusters" / cluster / "policy.yaml")
    nodes_file = ROOT / "examples" / "clusters" / cluster / "nodes.yaml"
    nodes = nodes_from_text(read_text(nodes_file), source=str(nodes_file))
    collector = Collector()
    objects = ROOT / "examples" / "audit" / dump / "objects.yaml"
    for doc in yaml.safe_load_all(objects.read_text()):
        collector.add(doc)
    return audit(collector, nodes, policy=policy, now=now)


@pytest.fixture(scope="module")
def before() -> AuditResult:
    return audited(*BEFORE)


@pytest.fixture(scope="module")
def after() -> AuditResult:
    return audited(*AFTER)


def test_before_the_two_replicas_wait_for_the_two_held_slots(before: AuditResult) -> None:
    (stuck,) = [f for f in before.findings if f.result == "fail"]
    assert (stuck.rule, str(stuck.subject), stuck.pods) == (
        "gpu-pod-scheduled",
        "Deployment nlp/nlp-inference",
        2,
    )
    assert stuck.reasons == ("full",)
    assert stuck.message.startswith(
        "2 of 3 pods, the oldest nlp-inference-7f9c6d8b54-h4tzp, not bound to a node for 29d 5h: "
    )
    assert "2 of 2 slots held (10.0.2.11: 1 of 1, 10.0.2.12: 1 of 1)" in stuck.message
    # Both holders, oldest first.
    assert (
        "by nlp/nlp-inference-7f9c6d8b54-q7x2m (Deployment nlp-inference, 1 slot, since 2025-04-02), "
        "pii/pii-detection-5b8d9f7c6-k2w9r (Deployment pii-detection, 1 slot, since 2025-05-20)"
    ) in stuck.message
    assert "sharing would help: none of these GPUs is shared" in stuck.message
    assert stuck.waiting is not None and stuck.waiting > 28 * 86400
    assert stuck.scheduler == SCHEDULER
    assert "`gpu-policy plan --measure NVIDIA-L20=MEMORY --measure Tesla-T4=MEMORY`" in stuck.fix
    assert before.exit_status() == 1
    assert (before.gpu_pods, before.bound, before.waiting, before.held, before.slots) == (
        4,
        2,
        2,
        2,
        2,
    )


def test_before_as_text(before: AuditResult) -> None:
    out = text(before)
    head = out.splitlines()[:2]
    assert head[0].split() == ["RESULT", "RULE", "NAMESPACE", "OBJECT", "PODS", "WAITING"]
    assert head[1].split() == [
        "fail",
        "gpu-pod-scheduled",
        "nlp",
        "Deployment/nlp-inference",
        "2",
        "29d",
        "5h",
    ]
    assert f'  scheduler: "{SCHEDULER}"' in out
    assert "nlp        Deployment/nlp-inference  3     nvidia.com/gpu: 1  10.0.2.11 (1)  2" in out
    assert "GPU slots: 2 of 2 held" in out
    # The non-GPU pods (the gateway, the device plugin's) were read and left out.
    assert before.scanned == {"DaemonSet": 1, "Deployment": 3, "Pod": 7, "ReplicaSet": 3}


def test_after_the_rollout_the_replicas_fit(after: AuditResult) -> None:
    assert [f for f in after.findings if f.result != "pass"] == []
    assert after.exit_status() == 0
    placed = {p.subject.name: dict(p.bound) for p in after.placements}
    assert placed["nlp-inference"] == {"10.0.2.11": 2, "10.0.2.12": 1}
    scheduled = next(
        f
        for f in after.findings
        if f.rule == "gpu-pod-scheduled" and f.subject.name == "nlp-inference"
    )
    assert scheduled.message == "3 GPU pods bound: 10.0.2.11 (2), 10.0.2.12 (1)"
    capacity = {f.subject.name: f.message for f in after.findings if f.rule == "gpu-node-capacity"}
    assert capacity == {
        "10.0.2.11": "nvidia.com/gpu: 2 of 8 slots held",
        "10.0.2.12": "nvidia.com/gpu: 2 of 3 slots held",
    }
    out = text(after)
    assert out.startswith("no findings: every GPU workload and node passes\n")
    assert "10.0.2.11 (2), 10.0.2.12 (1)  0" in out
    assert "GPU slots: 4 of 11 held" in out


@pytest.mark.parametrize("case", [BEFORE, AFTER], ids=["before", "after"])
@pytest.mark.parametrize("api", ["wgpolicyk8s", "openreports"])
def test_the_examples_reports_are_valid(case: tuple[str, str, datetime], api: str) -> None:
    for report in reports(audited(*case), api=api):
        assert errors(report) == []


def test_json_document(before: AuditResult) -> None:
    doc = document(before)
    assert (doc["apiVersion"], doc["kind"], doc["exitStatus"]) == (
        "gpu-policy.io/v1alpha1",
        "AuditResult",
        1,
    )
    assert doc["summary"]["fail"] == 1
    assert doc["pods"] == {"gpu": 4, "bound": 2, "waiting": 2, "refused": 0}
    assert doc["slots"] == {"total": 2, "held": 2}
    first = doc["findings"][0]
    assert (first["rule"], first["namespace"], first["name"], first["waiting"]) == (
        "gpu-pod-scheduled", "nlp", "nlp-inference", "29d 5h")  # fmt: skip
    assert first["schedulerMessage"] == SCHEDULER
    assert first["since"] == "2025-06-15T02:37:12Z"
    assert {w["name"]: w["waiting"] for w in doc["workloads"]} == {
        "nlp-inference": 2,
        "pii-detection": 0,
    }
