"""GFD's capability labels on the real control plane: a pod pinned to a value no GPU node
carries stays Pending, and the webhook says so before it is created.

GFD writes ``nvidia.com/mps.capable: "false"`` on nodes whose device-plugin config does not
share by MPS (k8s-device-plugin v0.20.0 internal/lm/nvml.go newSharingLabeler; see
docs/device-plugin.md, "GFD labels").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes import client

from tests.objects import gpu, pod
from tests.support.controlplane import ControlPlane
from tests.support.waiting import wait_until
from webhook.policy import inventory_from_nodes, parse_policy, review

TIME_SLICED = {
    "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}
}
GFD_LABELS = {
    "nvidia.com/gpu.product": "NVIDIA-L4-SHARED",
    "nvidia.com/gpu.replicas": "4",
    "nvidia.com/gpu.sharing-strategy": "time-slicing",
    "nvidia.com/gpu.count": "1",
    "nvidia.com/mps.capable": "false",
    "nvidia.com/mig.capable": "false",
}


def test_a_pod_pinned_to_mps_capable_stays_pending_and_is_refused(
    control_plane: ControlPlane, kube_namespace: str, make_gpu_node: Callable[..., dict[str, Any]]
) -> None:
    node = make_gpu_node(labels=GFD_LABELS, gpus=4)
    pinned = pod(gpu(1), name="pinned", nodeSelector={"nvidia.com/mps.capable": "true"})
    pinned["metadata"].pop("namespace")

    # The webhook, with the Node as the API server stores it as its inventory.
    policy = parse_policy(TIME_SLICED, source="config.yaml")
    inventory = inventory_from_nodes([node], policy, source="control plane")
    decision = review(pinned, policy=policy, inventory=inventory)
    assert decision.failed == ("gpu-node-selection",), decision.denial
    assert "their nodes say nvidia.com/mps.capable=false" in decision.denial

    # The scheduler, without the webhook: the pod would stay Pending.
    control_plane.create(pinned, namespace=kube_namespace)
    core = client.CoreV1Api(control_plane.client)

    def refused() -> list[str]:
        events = core.list_namespaced_event(
            kube_namespace, field_selector="involvedObject.name=pinned"
        ).items
        return [e.message for e in events if e.reason == "FailedScheduling"]

    assert wait_until(lambda: bool(refused()), 120, 0.2)
    assert "didn't match Pod's node affinity/selector" in refused()[0]
    assert core.read_namespaced_pod("pinned", kube_namespace).spec.node_name is None

    # The same pod selecting "false" fits, for the webhook and for the scheduler.
    fitting = pod(gpu(1), name="fitting", nodeSelector={"nvidia.com/mps.capable": "false"})
    fitting["metadata"].pop("namespace")
    assert review(fitting, policy=policy, inventory=inventory).allowed
    control_plane.create(fitting, namespace=kube_namespace)
    name = node["metadata"]["name"]
    assert wait_until(
        lambda: core.read_namespaced_pod("fitting", kube_namespace).spec.node_name == name,
        120,
        0.2,
    )
