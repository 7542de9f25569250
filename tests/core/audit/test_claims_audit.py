"""Pending pods with DRA claims, explained in DRA terms (webhook/audit/claims.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tests import objects as o
from tests.core.audit.conftest import make_policy
from webhook.audit import Collector, audit, reports
from webhook.policy import inventory_from_nodes
from webhook.policy.dra import dra_snapshot

NS = "ml"


def _pod(
    name: str, *claims: dict[str, str], generated: dict[str, str] | None = None
) -> dict[str, Any]:
    """A pending pod whose only GPU is its claims (no nvidia.com resource)."""
    scheduler = "0/1 nodes are available: 1 cannot allocate all claims."
    return o.listed_pod(name, NS, claims=claims, generated=generated, scheduler=scheduler)


def _allocated(
    name: str, devices: list[str], pods: list[str], node: str = "a100-1"
) -> dict[str, Any]:
    claim = o.resource_claim(name, o.exactly(), namespace=NS)
    claim["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": "gpu.nvidia.com", "pool": node, "device": d}
                    for d in devices
                ]
            }
        },
        "reservedFor": [{"resource": "pods", "name": p, "uid": f"uid-{p}"} for p in pods],
    }
    return claim


def _run(pods: list[dict[str, Any]], claims: list[dict[str, Any]], templates: list[dict[str, Any]]):
    policy = make_policy()
    snapshot = dra_snapshot(
        o.nvidia_classes(),
        [o.resource_slice("a100-1", o.dra_gpu(0), o.dra_gpu(1))],
        claims,
        templates,
    )
    inventory = replace(inventory_from_nodes([], policy, source="test"), dra=snapshot)
    collector = Collector()
    collector.add_all(pods)
    return audit(collector, [], policy=policy, now=o.NOW, inventory=inventory)


def _stuck(result) -> Any:
    (finding,) = [f for f in result.findings if f.rule == "gpu-pod-scheduled"]
    return finding


def test_a_template_asking_for_more_than_exists() -> None:
    result = _run(
        [_pod("train", {"name": "gpu", "resourceClaimTemplateName": "three"})],
        [],
        [o.claim_template("three", o.exactly(count=3), namespace=NS)],
    )
    finding = _stuck(result)
    assert finding.result == "fail"
    assert finding.reasons == ("claim-unsatisfiable",)
    # The allocator's answer on an empty cluster: the webhook's, in the scheduler's terms.
    assert 'claim "gpu" (ResourceClaimTemplate ml/three) fits no node' in finding.message
    assert 'request "gpu" asks for 3 devices of class gpu.nvidia.com' in finding.message
    assert "no node has more than 2 matching devices (2 on node a100-1" in finding.message
    assert "cannot allocate all claims" in (finding.scheduler or "")
    assert result.exit_status() == 1


def test_every_matching_device_held_names_the_claims_and_their_pods() -> None:
    mine = o.resource_claim("train-gpu-x7", o.exactly(), namespace=NS)
    result = _run(
        [
            _pod(
                "train",
                {"name": "gpu", "resourceClaimTemplateName": "one"},
                generated={"gpu": "train-gpu-x7"},
            )
        ],
        [
            mine,
            _allocated("infer-gpu-a1", ["gpu-0"], ["infer-0"]),
            _allocated("shared", ["gpu-1"], ["w-0", "w-1", "w-2", "w-3"]),
        ],
        [o.claim_template("one", o.exactly(), namespace=NS)],
    )
    finding = _stuck(result)
    assert finding.reasons == ("claim-allocated",)
    assert "ml/infer-gpu-a1 (pod infer-0): gpu-0 on node a100-1" in finding.message
    assert "ml/shared (shared by 4 pods: w-0, w-1, w-2 and 1 more): gpu-1" in finding.message
    # The finding reaches the PolicyReports.
    report_results = [r for doc in reports(result) for r in doc.get("results", ())]
    assert any("claim-allocated" in str(r) for r in report_results)


def test_a_missing_template() -> None:
    result = _run([_pod("train", {"name": "gpu", "resourceClaimTemplateName": "gone"})], [], [])
    finding = _stuck(result)
    assert finding.reasons == ("claim-missing",)
    assert "ResourceClaimTemplate gone does not exist in ml" in finding.message


def test_free_devices_mean_something_else_keeps_it() -> None:
    result = _run(
        [_pod("train", {"name": "gpu", "resourceClaimTemplateName": "one"})],
        [_allocated("infer-gpu-a1", ["gpu-0"], ["infer-0"])],
        [o.claim_template("one", o.exactly(), namespace=NS)],
    )
    assert _stuck(result).reasons == ("claim-elsewhere",)


def test_pods_with_other_drivers_claims_are_not_gpu_pods() -> None:
    result = _run(
        [_pod("net", {"name": "nic", "resourceClaimTemplateName": "nic"})],
        [],
        [o.claim_template("nic", o.exactly("nic.example.com"), namespace=NS)],
    )
    assert result.gpu_pods == 0
    assert not [f for f in result.findings if f.rule == "gpu-pod-scheduled"]


def test_dra_objects_come_with_the_objects_dump() -> None:
    """`gpu-policy audit --objects` with DRA objects in the dump: no inventory given."""
    collector = Collector()
    collector.add_all(
        [
            _pod("train", {"name": "gpu", "resourceClaimTemplateName": "three"}),
            *o.nvidia_classes(),
            o.resource_slice("a100-1", o.dra_gpu(0), o.dra_gpu(1)),
            o.claim_template("three", o.exactly(count=3), namespace=NS),
        ]
    )
    result = audit(collector, [], policy=make_policy(), now=o.NOW)
    assert _stuck(result).reasons == ("claim-unsatisfiable",)
    assert result.scanned["ResourceSlice"] == 1


def test_an_allocated_partition_keeps_the_whole_gpu_from_a_claim() -> None:
    """The whole A30 and its MIG partition consume one counter set: once another claim holds
    the partition, the whole GPU cannot be allocated, though no claim holds it. (The greedy
    count this diagnosis used before saw the whole GPU free and said claim-elsewhere.)"""
    memory = {"counterSet": "gpu-0-counters", "counters": {"memory": {"value": "24Gi"}}}
    part = {"counterSet": "gpu-0-counters", "counters": {"memory": {"value": "6Gi"}}}
    whole = {**o.dra_gpu(0), "consumesCounters": [memory]}
    mig = {
        "name": "gpu-0-mig-1g6gb-0",
        "attributes": {"type": {"string": "mig"}, "profile": {"string": "1g.6gb"}},
        "consumesCounters": [part],
    }
    devices = o.resource_slice("a30-1", whole, mig, count=2)
    sets = [{"name": "gpu-0-counters", "counters": {"memory": {"value": "24Gi"}}}]
    counters = o.resource_slice("a30-1", name="a30-1-counters", count=2, sharedCounters=sets)
    template = o.claim_template(
        "whole",
        o.exactly(selectors=['device.attributes["gpu.nvidia.com"].type == "gpu"']),
        namespace=NS,
    )
    pending = _pod("train", {"name": "gpu", "resourceClaimTemplateName": "whole"})

    def run(claims: list[dict[str, Any]]) -> Any:
        snapshot = dra_snapshot(o.nvidia_classes(), [devices, counters], claims, [template])
        policy = make_policy()
        inventory = replace(inventory_from_nodes([], policy, source="test"), dra=snapshot)
        collector = Collector()
        collector.add_all([pending])
        return audit(collector, [], policy=policy, now=o.NOW, inventory=inventory)

    assert _stuck(run([])).reasons == ("claim-elsewhere",)
    held = _allocated("infer-mig", ["gpu-0-mig-1g6gb-0"], ["infer-0"], node="a30-1")
    finding = _stuck(run([held]))
    assert finding.reasons == ("claim-allocated",)
    assert "ml/infer-mig (pod infer-0): gpu-0-mig-1g6gb-0 on node a30-1" in finding.message
