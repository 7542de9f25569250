"""DRA claims on the real control plane: what the scheduler does with them, and the webhook.

A Node without a device plugin, a ResourceSlice of two GPUs published on it as NVIDIA's DRA
driver would, and a DeviceClass selecting them (docs/dra-claims.md). A pod whose
ResourceClaimTemplate asks for three such GPUs:

* without the webhook, the template and the pod are created, the ResourceClaim controller
  makes the pod's claim, and the scheduler leaves the pod Pending: "cannot allocate all
  claims";
* with the webhook (watching the cluster, registered with the chart's own configuration), the
  template is refused at apply time, naming the two GPUs that exist;

and a template for two GPUs, which the webhook allows, gets its pod scheduled.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.builders import (
    GPU_CLASS_CEL,
    claim_template,
    device_class,
    dra_gpu,
    exactly,
    resource_slice,
)
from tests.support.controlplane import ControlPlane
from tests.support.waiting import wait_until

MakeNode = Callable[..., dict[str, Any]]


@pytest.fixture
def dra_cluster(control_plane: ControlPlane, make_gpu_node: MakeNode) -> Iterator[dict[str, str]]:
    """A Node with no device plugin, two GPUs in its ResourceSlice, and their DeviceClass
    (named uniquely, ending in .nvidia.com: a GPU class for the webhook)."""
    node = make_gpu_node(gpus=None)["metadata"]["name"]
    tag = uuid.uuid4().hex[:6]
    klass = device_class(f"gpu-{tag}.nvidia.com", GPU_CLASS_CEL)
    slice_ = resource_slice(node, dra_gpu(0), dra_gpu(1))
    slice_["metadata"]["name"] = f"{node}-{tag}"
    slice_["spec"]["pool"]["name"] = f"{node}-{tag}"
    control_plane.create(klass)
    control_plane.create(slice_)
    api = client.ResourceV1Api(control_plane.client)
    try:
        yield {"node": node, "class": klass["metadata"]["name"]}
    finally:
        if control_plane.alive():
            with contextlib.suppress(ApiException):
                api.delete_resource_slice(slice_["metadata"]["name"])
            with contextlib.suppress(ApiException):
                api.delete_device_class(klass["metadata"]["name"])


def claim_pod(name: str, template: str) -> dict[str, Any]:
    """A pod whose one container uses the claim made from ``template``."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {"name": "main", "image": "cuda:12", "resources": {"claims": [{"name": "gpu"}]}}
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
        },
    }


def scheduling_failures(plane: ControlPlane, namespace: str, pod: str) -> list[str]:
    """The scheduler's FailedScheduling messages about ``pod``."""
    events = client.CoreV1Api(plane.client).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={pod}"
    )
    return [e.message for e in events.items if e.reason == "FailedScheduling"]


def bound_to(plane: ControlPlane, namespace: str, pod: str) -> str | None:
    return client.CoreV1Api(plane.client).read_namespaced_pod(pod, namespace).spec.node_name


def test_without_the_webhook_too_many_gpus_wait_forever_and_two_are_scheduled(
    control_plane: ControlPlane, kube_namespace: str, dra_cluster: dict[str, str]
) -> None:
    klass = dra_cluster["class"]
    control_plane.create(
        claim_template("three", exactly(klass, count=3), namespace=kube_namespace),
        namespace=kube_namespace,
    )
    control_plane.create(
        claim_template("two", exactly(klass, count=2), namespace=kube_namespace),
        namespace=kube_namespace,
    )
    control_plane.create(claim_pod("too-many", "three"), namespace=kube_namespace)
    control_plane.create(claim_pod("fits", "two"), namespace=kube_namespace)

    assert wait_until(lambda: bound_to(control_plane, kube_namespace, "fits"), 120, 0.3)
    assert bound_to(control_plane, kube_namespace, "fits") == dra_cluster["node"]
    assert wait_until(
        lambda: scheduling_failures(control_plane, kube_namespace, "too-many"), 120, 0.3
    )
    (message, *_) = scheduling_failures(control_plane, kube_namespace, "too-many")
    assert "cannot allocate all claims" in message
    assert bound_to(control_plane, kube_namespace, "too-many") is None
