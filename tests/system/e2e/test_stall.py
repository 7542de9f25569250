"""The TKE cluster's stall and its way out, live ([tke-rollout] in docs/sources.md).

Before its time-slicing rollout the cluster had one NVIDIA L20 and one Tesla T4, one
``nvidia.com/gpu`` each (``examples/clusters/seed003-before``). The inference Deployment was
scaled past them and its new replicas sat Pending for weeks. Here the same, with the real
scheduler: the two Nodes from the dump, ``pii-detection`` and ``nlp-inference`` from
``examples/audit/seed003-before`` (without their model volume, which plays no part and whose
claim nothing here could bind), the extra replicas Pending with the scheduler's own message,
and ``gpu-policy audit --kubeconfig`` naming the holders and pointing at ``plan``.

Then the rollout as ``gpu-policy plan --kubeconfig --write-dir`` writes it: its ConfigMap applied
with kubectl, its ``label-nodes.sh`` run, and each Node's ``allocatable`` and GFD labels set to
what the restarted device plugin and GFD published after the rollout
(``examples/clusters/seed003-l20-t4``: ``nvidia.com/gpu`` 8 on the L20, 3 on the T4). The
scheduler binds the waiting replicas, and the audit with the written policy comes back clean.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.controlplane import ControlPlane, set_node_status
from tests.support.paths import REPO
from tests.support.waiting import wait_until

ROOT = REPO
TOOLS = ROOT / ".cache" / "tools"
BEFORE = ROOT / "examples" / "clusters" / "seed003-before"
AFTER = ROOT / "examples" / "clusters" / "seed003-l20-t4"
OBJECTS = ROOT / "examples" / "audit" / "seed003-before" / "objects.yaml"
GPU = "nvidia.com/gpu"
CONFIG_LABEL = "nvidia.com/device-plugin.config"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _gpu_nodes(dump: Path) -> dict[str, dict[str, Any]]:
    """The Nodes of a dump that advertise GPUs, by name."""
    items = yaml.safe_load(dump.read_text())["items"]
    return {n["metadata"]["name"]: n for n in items if GPU in n["status"].get("allocatable", {})}


def _deployment(name: str, namespace: str) -> dict[str, Any]:
    """A Deployment of the dump, as it would be applied: no status, no volumes."""
    items = yaml.safe_load(OBJECTS.read_text())["items"]
    found = next(o for o in items if o["kind"] == "Deployment" and o["metadata"]["name"] == name)
    spec = copy.deepcopy(found["spec"])
    pod = spec["template"]["spec"]
    pod.pop("volumes", None)
    for container in pod["containers"]:
        container.pop("volumeMounts", None)
        container.pop("readinessProbe", None)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": found["metadata"]["labels"]},
        "spec": spec,
    }


def _gpu_policy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "gpu-policy"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _pods(plane: ControlPlane, namespace: str, app: str) -> list[Any]:
    from kubernetes import client

    core = client.CoreV1Api(plane.client)
    return list(core.list_namespaced_pod(namespace, label_selector=f"app={app}").items)


def _bound(plane: ControlPlane, namespace: str, app: str) -> list[str]:
    return sorted(p.spec.node_name for p in _pods(plane, namespace, app) if p.spec.node_name)


def _failed_scheduling(plane: ControlPlane, namespace: str) -> list[str]:
    from kubernetes import client

    events = client.CoreV1Api(plane.client).list_namespaced_event(namespace).items
    return [e.message for e in events if e.reason == "FailedScheduling"]


@pytest.mark.skipif(not (TOOLS / "kubectl").exists(), reason="kubectl: run `make tools`")
def test_the_stall_the_audit_and_the_rollout(
    control_plane: ControlPlane,
    kube_namespace: str,
    make_gpu_node: Callable[..., dict[str, Any]],
    tmp_path: Path,
) -> None:
    from kubernetes import client

    plane, ns = control_plane, kube_namespace
    before = _gpu_nodes(BEFORE / "nodes.yaml")
    after = _gpu_nodes(AFTER / "nodes.yaml")
    assert sorted(before) == sorted(after) == ["10.0.2.11", "10.0.2.12"]
    for node in before.values():
        stored = make_gpu_node(node=node)
        assert stored["status"]["allocatable"][GPU] == "1"

    # pii-detection takes one GPU; then the inference service, scaled to 3, gets the other.
    plane.create(_deployment("pii-detection", ns))
    assert wait_until(lambda: len(_bound(plane, ns, "pii-detection")) == 1, timeout=60)
    plane.create(_deployment("nlp-inference", ns))
    assert wait_until(lambda: len(_pods(plane, ns, "nlp-inference")) == 3, timeout=60)
    assert wait_until(lambda: len(_bound(plane, ns, "nlp-inference")) == 1, timeout=60)
    assert wait_until(lambda: bool(_failed_scheduling(plane, ns)), timeout=60)
    message = _failed_scheduling(plane, ns)[0]
    assert message.startswith("0/2 nodes are available: 2 Insufficient nvidia.com/gpu."), message
    assert len(_bound(plane, ns, "nlp-inference")) == 1  # the other two stay Pending

    kubeconfig = str(plane.kubeconfig)
    audit = _gpu_policy(
        "audit", "--kubeconfig", kubeconfig, "--policy", str(BEFORE / "policy.yaml")
    )
    assert audit.returncode == 1, audit.stdout + audit.stderr
    out = audit.stdout
    assert "fail    gpu-pod-scheduled" in out, out
    assert "2 of 3 pods" in out and "2 of 2 slots held" in out, out
    # The same findings as the audit of the cluster's own dump (the README's example): the
    # summary line, counts of every result included, is the same live and from the dump.
    dump = _gpu_policy(
        "audit",
        "--nodes",
        str(BEFORE / "nodes.yaml"),
        "--objects",
        str(OBJECTS),
        "--policy",
        str(BEFORE / "policy.yaml"),
        "--now",
        "2025-07-14T08:18:53Z",
    )
    summary = next(line for line in dump.stdout.splitlines() if line.startswith("1 fail, "))
    assert summary.endswith("GPU slots: 2 of 2 held"), dump.stdout
    assert summary in out, out
    holders = [p.metadata.name for p in _pods(plane, ns, "pii-detection")] + [
        p.metadata.name for p in _pods(plane, ns, "nlp-inference") if p.spec.node_name
    ]
    joined = " ".join(out.split())  # the text wraps long lines
    for holder in holders:
        assert f"{ns}/{holder}" in joined, (holder, out)
    assert "`gpu-policy plan" in joined
    assert f'scheduler: "{message}"' in joined, out

    # The rollout, as `plan` writes it.
    written = tmp_path / "rollout"
    plan = _gpu_policy(
        "plan",
        "--kubeconfig",
        kubeconfig,
        "--policy",
        str(BEFORE / "policy.yaml"),
        "--measurements",
        str(ROOT / "examples" / "plan" / "measurements.yaml"),
        "--configmap",
        f"{ns}/time-slicing-config",
        "--write-dir",
        str(written),
    )
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert "GPU slots: 2 -> 11" in plan.stdout
    env = dict(os.environ, KUBECONFIG=kubeconfig)
    env["PATH"] = os.pathsep.join([str(TOOLS), env["PATH"]])
    for step in (
        ["kubectl", "apply", "-f", str(written / "device-plugin-config.yaml")],
        ["sh", str(written / "label-nodes.sh")],
    ):
        done = subprocess.run(step, env=env, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
    keys = yaml.safe_load((written / "device-plugin-config.yaml").read_text())["data"]
    core = client.CoreV1Api(plane.client)
    for name, node in after.items():
        labels = core.read_node(name).metadata.labels
        assert labels[CONFIG_LABEL] in keys, (name, labels)
        # The restarted device plugin and GFD: the new slot count, the -SHARED product and
        # replicas labels, as the cluster published them after its rollout.
        gfd = {k: v for k, v in node["metadata"]["labels"].items() if k != CONFIG_LABEL}
        core.patch_node(name, {"metadata": {"labels": gfd}})
        set_node_status(
            plane,
            name,
            {
                "capacity": {GPU: node["status"]["capacity"][GPU]},
                "allocatable": {GPU: node["status"]["allocatable"][GPU]},
            },
        )

    assert wait_until(lambda: len(_bound(plane, ns, "nlp-inference")) == 3, timeout=120)
    clean = _gpu_policy(
        "audit", "--kubeconfig", kubeconfig, "--policy", str(written / "policy.yaml")
    )
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "0 fail, 0 error, 0 warn" in clean.stdout, clean.stdout
    assert "4 GPU pods (4 bound, 0 waiting" in clean.stdout, clean.stdout
    assert "GPU slots: 4 of 11 held" in clean.stdout, clean.stdout
