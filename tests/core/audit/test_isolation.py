"""The audit's GPU isolation check: running pods that see GPUs without asking for one."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tests.core.audit.conftest import Runner, make_policy
from tests.objects import cpu_node, gfd_node
from webhook.audit import reports
from webhook.policy.model import Isolation

ALL = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]


def running(
    name: str,
    namespace: str = "monitoring",
    *,
    node_name: str = "gpu-1",
    phase: str = "Running",
    owner: tuple[str, str] | None = None,
    **container: Any,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{name}",
        "creationTimestamp": "2025-06-01T00:00:00Z",
    }
    if owner is not None:
        meta["ownerReferences"] = [
            {"kind": owner[0], "name": owner[1], "controller": True, "apiVersion": "apps/v1"}
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"nodeName": node_name, "containers": [{"name": "main", **container}]},
        "status": {"phase": phase},
    }


def test_pods_that_see_gpus_without_a_request_are_reported_per_namespace(run: Runner) -> None:
    objects = [
        running("agent-a", owner=("DaemonSet", "agent"), env=ALL),
        running("agent-b", owner=("DaemonSet", "agent"), env=ALL, node_name="gpu-2"),
        running("debug", "platform", securityContext={"privileged": True}),
        running("on-cpu-node", node_name="cpu-1", env=ALL),
        running("voided", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]),
        running("done", env=ALL, phase="Succeeded"),
        running("dcgm", "gpu-operator", env=ALL),
        running("asks", env=ALL, resources={"limits": {"nvidia.com/gpu": "1"}}),
    ]
    nodes = [gfd_node("gpu-1"), gfd_node("gpu-2"), cpu_node("cpu-1")]
    policy = replace(make_policy(), isolation=Isolation("enforce"))
    result = run(objects, nodes, policy=policy)
    found = [f for f in result.findings if f.rule == "gpu-visible-without-request"]
    assert [(f.subject.kind, f.subject.namespace, f.subject.name) for f in found] == [
        ("DaemonSet", "monitoring", "agent"),
        ("Pod", "platform", "debug"),
    ]
    agent, debug = found
    assert agent.result == "fail" and agent.pods == 2
    assert "gpu-1, gpu-2" in agent.message
    assert 'container "main" sets NVIDIA_VISIBLE_DEVICES=all' in agent.message
    assert 'container "main" privileged' in debug.message
    by_namespace = {
        r["metadata"].get("namespace"): r for r in reports(result) if r["kind"] == "PolicyReport"
    }
    for namespace in ("monitoring", "platform"):
        rules = [x["rule"] for x in by_namespace[namespace]["results"]]
        assert "gpu-visible-without-request" in rules
        assert by_namespace[namespace]["results"][0]["category"] == "GPU isolation"


def test_without_enforced_isolation_they_are_warnings(run: Runner) -> None:
    result = run([running("agent", env=ALL)], [gfd_node("gpu-1")], policy=make_policy())
    (finding,) = [f for f in result.findings if f.rule == "gpu-visible-without-request"]
    assert finding.result == "warn"
    assert result.exit_status() == 0
