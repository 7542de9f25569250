"""The real control plane (tests/support/controlplane.py) as the product meets it.

Nodes made the way a kubelet and a device plugin make them are the live inventory; the
scheduler places GPU pods by what those Nodes advertise; the API server calls our webhook
by URL and returns its denial to the client.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.objects import configmap_ref_policy, ctr, example_cluster, pod, workload
from tests.support import gunicorn
from tests.support.cli import run_cli
from tests.support.cluster import running_cluster
from tests.support.controlplane import ControlPlane
from tests.support.waiting import wait_until
from webhook.certs.issue import write_certs

MakeNode = Callable[..., dict[str, Any]]


def gpu_pod(name: str, gpus: int | str, **spec: Any) -> dict[str, Any]:
    """A pod asking for ``gpus`` nvidia.com/gpu, for the test's namespace."""
    return pod(ctr(limits={"nvidia.com/gpu": str(gpus)}), name=name, namespace=None, **spec)


def load_example_cluster(
    plane: ControlPlane, make_gpu_node: MakeNode, namespace: str
) -> tuple[str, str]:
    """The example cluster's Nodes and its device-plugin ConfigMap (in ``namespace``)."""
    nodes, configmap = example_cluster((namespace, "device-plugin-config"))
    for node in nodes:
        make_gpu_node(node=node)
    plane.create(configmap)
    return namespace, "device-plugin-config"


def test_gpu_nodes_made_as_the_device_plugin_does_are_the_live_inventory(
    control_plane: ControlPlane, kube_namespace: str, make_gpu_node: MakeNode, tmp_path: Path
) -> None:
    ref = load_example_cluster(control_plane, make_gpu_node, kube_namespace)
    # A pod bound to the L20 node holds one of its 8 slots (no kubelet runs it: it stays
    # Pending, bound, as the scheduler leaves it).
    control_plane.create(gpu_pod("infer-0", 1, nodeName="10.0.2.11"), namespace=kube_namespace)
    policy = tmp_path / "policy.yaml"
    policy.write_text(configmap_ref_policy(configmap_ref=ref))

    result = run_cli(
        "inventory",
        "--policy",
        str(policy),
        "--kubeconfig",
        str(control_plane.kubeconfig),
        "-o",
        "table",
    )

    assert result.returncode == 0, result.stderr
    assert "GPU slots: 11 (NVIDIA-L20 x 8 + Tesla-T4 x 3)" in result.stdout
    l20 = next(line for line in result.stdout.splitlines() if "NVIDIA-L20-SHARED" in line)
    assert l20.split()[-3:-1] == ["1", "7"]  # requested, free


def test_scheduler_places_gpu_pods_by_the_nodes_allocatable(
    control_plane: ControlPlane, kube_namespace: str, make_gpu_node: MakeNode
) -> None:
    node = make_gpu_node(gpus=1)["metadata"]["name"]
    core = client.CoreV1Api(control_plane.client)
    for name in ("first", "second"):
        control_plane.create(gpu_pod(name, 1), namespace=kube_namespace)

    assert wait_until(
        lambda: core.read_namespaced_pod("first", kube_namespace).spec.node_name == node, 120, 0.2
    )

    def refused() -> list[str]:
        events = core.list_namespaced_event(
            kube_namespace, field_selector="involvedObject.name=second"
        ).items
        return [e.message for e in events if e.reason == "FailedScheduling"]

    assert wait_until(lambda: bool(refused()), 120, 0.2)
    assert "1 Insufficient nvidia.com/gpu" in refused()[0]
    assert core.read_namespaced_pod("second", kube_namespace).spec.node_name is None


def test_controllers_paused_for_a_live_cluster_act_on_what_came_meanwhile(
    control_plane: ControlPlane, kube_namespace: str, make_gpu_node: MakeNode
) -> None:
    """``live_cluster`` pauses the controller-manager and the scheduler; the next test that
    needs them lets them go on (``start_controllers``), and they act on what was made while
    they were paused: a ReplicaSet gets its pod, and the scheduler binds it."""
    node = make_gpu_node(gpus=1)["metadata"]["name"]
    replicas = workload("ReplicaSet", "held", kube_namespace, gpu={"nvidia.com/gpu": "1"})
    replicas["metadata"] = {"name": "held", "namespace": kube_namespace}
    core = client.CoreV1Api(control_plane.client)
    with running_cluster(control_plane):
        assert not control_plane.controllers_running
        control_plane.create(replicas)
    control_plane.start_controllers()

    def bound() -> bool:
        pods = core.list_namespaced_pod(kube_namespace, label_selector="app=held").items
        return len(pods) == 1 and pods[0].spec.node_name == node

    assert wait_until(bound, 120, 0.2)


@pytest.mark.slow
def test_registered_webhook_denies_through_the_api_server(
    control_plane: ControlPlane,
    kube_namespace: str,
    register_webhooks: Callable[..., list[dict[str, Any]]],
    tmp_path: Path,
) -> None:
    certs = write_certs(tmp_path / "certs")
    core = client.CoreV1Api(control_plane.client)
    with gunicorn.running(tmp_path, certs, workers=1) as server:
        register_webhooks(
            f"https://127.0.0.1:{server.port}",
            certs.ca_cert.read_bytes(),
            namespace=kube_namespace,
        )

        def create() -> ApiException | None:
            try:
                core.create_namespaced_pod(kube_namespace, gpu_pod("half", "0.5"))
            except ApiException as e:
                return e
            return None

        # Until the API server's informer has seen the new configuration, its own validation
        # answers (422, a quantity that must be an integer); then the webhook, first.
        errors: list[ApiException | None] = []
        assert wait_until(
            lambda: errors.append(create()) or getattr(errors[-1], "status", 0) == 403, 30, 0.2
        ), errors[-1]
        status = json.loads(errors[-1].body)  # type: ignore[union-attr]
        assert status["reason"] == "Forbidden"
        assert status["message"].startswith(
            'admission webhook "mutate.gpu-policy.test" denied the request: '
        )
        assert "ask for an integer" in status["message"]
