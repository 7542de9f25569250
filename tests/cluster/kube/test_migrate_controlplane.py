"""A move from the device plugin to DRA on the real control plane (docs/migrate.md).

No GPUs: Nodes are written as the device plugin leaves them (``nvidia.com/*`` in
``status.allocatable``), ResourceSlices as NVIDIA's DRA driver publishes them, and the real
kube-scheduler decides. First the dangerous moment: a node dual-published with 2 GPUs, on
which the scheduler gives the same GPUs twice while the guard is off, and never while it is on
(``spec.dra.dualPublishedNodes: avoid``); ``migrate check`` and the audit name it. Then the
three kinds of node (time-sliced T4s, a mixed-MIG A100, exclusive H100s) cut over step by step
as ``migrate plan`` says.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.cluster.kube.test_dra_claims_controlplane import claim_pod
from tests.cluster.kube.test_dra_controlplane import (
    EXAMPLES,
    bound_to,
    create_pod,
    dra_objects,  # noqa: F401 - a fixture this module uses
    gpu_pod,
    left_unscheduled,
    webhook_watching,
)
from tests.objects import claim_template, dra_gpu, exactly, resource_slice
from tests.support.cli import run_cli
from tests.support.controlplane import ControlPlane, set_node_status
from tests.support.waiting import wait_until
from webhook.files import cluster_from_text

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

MakeNode = Callable[..., dict[str, Any]]
Create = Callable[[list[dict[str, Any]]], None]
H100 = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.count": "2",
}


def driver_slice(node: str, gpus: int) -> dict[str, Any]:
    """The ResourceSlice of ``gpus`` H100s NVIDIA's DRA driver publishes on ``node``."""
    devices = [dra_gpu(i, product="NVIDIA H100 80GB HBM3", memory="81559Mi") for i in range(gpus)]
    return resource_slice(node, *devices)


def gpu_class() -> dict[str, Any]:
    """The driver's DeviceClass gpu.nvidia.com (examples/clusters/dual-published)."""
    dump = cluster_from_text(
        (EXAMPLES / "dual-published" / "nodes.yaml").read_text(), source="dual-published"
    )
    return dict(dump.by_kind["DeviceClass"][0])


def template(namespace: str, name: str, count: int) -> dict[str, Any]:
    return claim_template(name, exactly(count=count), namespace=namespace)


def plugin_pod(name: str, gpus: int) -> dict[str, Any]:
    return gpu_pod(name, {"nvidia.com/gpu": str(gpus)})


def _create_namespaced(plane: ControlPlane, obj: dict[str, Any]) -> None:
    resource = plane.dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    resource.create(body=obj, namespace=obj["metadata"].get("namespace"))


def test_dual_published_node_gives_gpus_twice_and_check_and_audit_name_it(
    control_plane: ControlPlane,
    kube_namespace: str,
    make_gpu_node: MakeNode,
    dra_objects: Create,  # noqa: F811 - the fixture imported above
) -> None:
    node = make_gpu_node(gpus=2, labels=H100)["metadata"]["name"]
    dra_objects([gpu_class(), driver_slice(node, 2)])
    _create_namespaced(control_plane, template(kube_namespace, "two-gpus", 2))
    core = client.CoreV1Api(control_plane.client)
    assert create_pod(core, kube_namespace, plugin_pod("legacy", 2)) is None
    assert bound_to(core, kube_namespace, "legacy") == node
    assert create_pod(core, kube_namespace, claim_pod("claimer", "two-gpus")) is None
    # Recorded: the guard off, the scheduler binds 4 GPUs' worth of pods to a node of 2.
    assert bound_to(core, kube_namespace, "claimer") == node
    kubeconfig = str(control_plane.kubeconfig)
    checked = run_cli("migrate", "check", "--kubeconfig", kubeconfig, "-o", "json")
    assert checked.returncode == 1, checked.stderr
    found = json.loads(checked.stdout)
    assert [d["node"] for d in found["dualPublished"]] == [node]
    (double,) = found["doubleAllocations"]
    assert double["node"] == node and double["gpus"] == 2
    assert double["pluginPods"] == [f"{kube_namespace}/legacy"]
    assert double["pluginGpus"] == 2 and double["claimGpus"] == 2
    audited = run_cli("audit", "--kubeconfig", kubeconfig, "-o", "json")
    findings = json.loads(audited.stdout)["findings"]
    mine = {(f["rule"], f["result"]) for f in findings if f["name"] == node}
    assert ("gpu-node-dual-published", "warn") in mine
    assert ("gpu-node-double-allocation", "fail") in mine
    assert audited.returncode == 1


def test_with_avoid_claim_pods_never_land_on_the_dual_node(
    control_plane: ControlPlane,
    kube_namespace: str,
    make_gpu_node: MakeNode,
    dra_objects: Create,  # noqa: F811 - the fixture imported above
    register_webhooks: Callable[..., Any],
    tmp_path: Path,
) -> None:
    dual = make_gpu_node(gpus=2, labels=H100)["metadata"]["name"]
    dra_only = make_gpu_node(gpus=None)["metadata"]["name"]
    dra_objects([gpu_class(), driver_slice(dual, 2), driver_slice(dra_only, 1)])
    for name, count in (("one-gpu", 1), ("two-gpus", 2)):
        _create_namespaced(control_plane, template(kube_namespace, name, count))
    policy = tmp_path / "policy.yaml"
    policy.write_text((EXAMPLES / "dual-published" / "policy.yaml").read_text(), encoding="utf-8")
    core = client.CoreV1Api(control_plane.client)
    with webhook_watching(control_plane, policy, register_webhooks, kube_namespace, tmp_path):

        def refused() -> bool:
            denied = create_pod(core, kube_namespace, claim_pod("probe", "two-gpus"))
            return denied is not None and denied.status == 403

        # Once the webhook has seen the templates, two GPUs (only the dual node has them)
        # are refused, with the reason.
        assert wait_until(refused, 60, 0.5)
        denied = create_pod(core, kube_namespace, claim_pod("train", "two-gpus"))
        assert denied is not None
        assert f"only the dual-published nodes {dual}" in json.loads(denied.body)["message"]
        # One GPU: kept off the dual node, it goes to the DRA-only node ...
        assert create_pod(core, kube_namespace, claim_pod("infer-0", "one-gpu")) is None
        assert bound_to(core, kube_namespace, "infer-0") == dra_only
        # ... and the next one, with the DRA-only node full, waits rather than take the dual
        # node's GPUs.
        assert create_pod(core, kube_namespace, claim_pod("infer-1", "one-gpu")) is None
        assert left_unscheduled(core, kube_namespace, "infer-1")
        stored = core.read_namespaced_pod("infer-1", kube_namespace)
        terms = (
            stored.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution
        )
        assert terms.node_selector_terms[0].match_fields[0].values == [dual]


# --- three kinds of node, cut over as the plan says ------------------------------------------

THREE = EXAMPLES / "migrate-three-kinds"


def _load(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _in(namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"]["namespace"] = namespace
    out.pop("status", None)
    return out


def _cut_over(plane: ControlPlane, node: dict[str, Any]) -> None:
    """What stopping the device plugin does to a Node: its nvidia.com/* names leave status."""
    names = [k for k in node["status"]["allocatable"] if k.startswith("nvidia.com/")]
    gone = dict.fromkeys(names)
    set_node_status(plane, node["metadata"]["name"], {"allocatable": gone, "capacity": gone})


def test_three_kinds_cut_over_as_the_plan_says(
    control_plane: ControlPlane,
    kube_namespace: str,
    make_gpu_node: MakeNode,
    dra_objects: Create,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    ns = kube_namespace
    dump = cluster_from_text((THREE / "nodes.yaml").read_text(), source="three")
    nodes = {}
    for listed in dump.nodes:
        node = copy.deepcopy(listed)
        node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        nodes[node["metadata"]["name"]] = make_gpu_node(node=node)
    recorded = {}
    for obj in yaml.safe_load((THREE / "workloads.yaml").read_text())["items"]:
        _create_namespaced(control_plane, _in(ns, obj))
        if obj["kind"] == "Pod":
            recorded[f"{ns}/{obj['metadata']['name']}"] = _in(ns, obj)
    kubeconfig = str(control_plane.kubeconfig)
    out = tmp_path / "plan"
    planned = run_cli(
        "migrate", "plan", "--kubeconfig", kubeconfig, "--policy", str(THREE / "policy.yaml"),
        "--write-dir", str(out), "-o", "json",
    )  # fmt: skip
    assert planned.returncode in (0, 1), planned.stderr
    plan = json.loads(planned.stdout)
    assert plan == json.loads((out / "plan.json").read_text())
    # The API server accepts every object the plan emits: the classes and templates created,
    # the quota applied in a server-side dry run.
    dra_objects(_load(out / "deviceclasses.yaml"))
    rewritten: dict[str, dict[str, Any]] = {}
    for path in sorted((out / "workloads").glob("*.yaml")):
        tpl, workload = _load(path)
        _create_namespaced(control_plane, tpl)
        rewritten[f"{ns}/{workload['metadata']['name']}"] = workload
    for quota in _load(out / "resourcequotas.yaml"):
        resource = control_plane.dynamic.resources.get(api_version="v1", kind="ResourceQuota")
        resource.server_side_apply(
            body=quota, namespace=ns, field_manager="gpu-policy-test", dry_run="All"
        )
    core = client.CoreV1Api(control_plane.client)
    mine = [s for s in plan["steps"] if s["node"] in nodes]
    assert [s["node"] for s in mine] == [s["node"] for s in plan["steps"]]
    lost: set[str] = set()
    for step in mine:
        node = step["node"]
        moves = [m for m in step["pods"] if m["pod"].startswith(f"{ns}/")]
        for move in moves:
            if move["from"] == node:
                core.delete_namespaced_pod(move["pod"].split("/")[1], ns, grace_period_seconds=0)
        _cut_over(control_plane, nodes[node])
        (rslice,) = _load(next((out / "steps").glob(f"*-{node}.resourceslice.yaml")))
        dra_objects([rslice])
        for move in moves:
            name = move["pod"].split("/")[1]

            def gone(name: str = name) -> bool:
                return not [
                    p for p in core.list_namespaced_pod(ns).items if p.metadata.name == name
                ]

            assert wait_until(gone, 30, 0.2)
            pod = rewritten[move["pod"]] if move["form"] == "rewritten" else recorded[move["pod"]]
            pod = copy.deepcopy(pod)
            pod["metadata"] = {"name": name, "namespace": ns}
            pod["spec"].pop("nodeName", None)
            assert create_pod(core, ns, pod) is None, move
            if move["to"] is None:
                assert left_unscheduled(core, ns, name), move
                lost.add(move["pod"])
            else:
                where = bound_to(core, ns, name)
                assert where in move["fitsOn"] and where in (move["from"], move["to"]), (
                    move,
                    where,
                )
                lost.discard(move["pod"])
        checked = run_cli(
            "migrate", "check", "--kubeconfig", kubeconfig, "--plan", str(out), "-o", "json"
        )
        states = {s["node"]: s["state"] for s in json.loads(checked.stdout)["steps"]}
        assert states[node] == "done" and not json.loads(checked.stdout)["dualPublished"]
    # The report named every pod that no longer fits, and only those.
    assert lost == {p for p in plan["noLongerFit"] if p.startswith(f"{ns}/")}
    assert lost  # the T4 notebooks beyond one per GPU
