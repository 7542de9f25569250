"""DRA claims on the real control plane: what the scheduler does with them, and the webhook.

A Node without a device plugin, a ResourceSlice of two GPUs published on it as NVIDIA's DRA
driver would, and a DeviceClass selecting them (docs/dra-claims.md). A pod whose
ResourceClaimTemplate asks for three such GPUs:

* without the webhook, the template and the pod are created, the ResourceClaim controller
  makes the pod's claim, and the scheduler leaves the pod Pending: "cannot allocate all
  claims";
* with the webhook (watching the cluster, registered with the chart's own configuration), the
  template is refused at apply time, naming the two GPUs that exist;

and a template for two GPUs, which the webhook allows, gets its pod scheduled. A Deployment
whose pod template uses the template for three is refused too; a pod naming a template that
does not exist yet is created, with a warning naming it.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.objects import (
    GPU_CLASS_CEL,
    claim_pod,
    claim_template,
    device_class,
    dra_gpu,
    exactly,
    resource_slice,
)
from tests.support import gunicorn
from tests.support.chart_helpers import TOOLS, Renderer
from tests.support.cli import run_cli
from tests.support.controlplane import ControlPlane
from tests.support.waiting import wait_until
from webhook.certs.issue import write_certs

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
    with control_plane.created(klass, slice_):
        yield {"node": node, "class": klass["metadata"]["name"]}


def claim_deployment(name: str, template: str) -> dict[str, Any]:
    """A Deployment whose pods use the claim made from ``template``."""
    pod = claim_pod(name, template)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod["spec"]},
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

    # The audit, listing the live cluster, says why in DRA terms (and the pod that fits is
    # not reported as waiting).
    audit = run_cli("audit", "--kubeconfig", str(control_plane.kubeconfig), "-o", "json")
    assert audit.returncode == 1, audit.stderr
    found = [
        f
        for f in json.loads(audit.stdout)["findings"]
        if f["rule"] == "gpu-pod-scheduled" and f["namespace"] == kube_namespace
    ]
    assert [(f["name"], f["result"]) for f in found] == [("too-many", "fail")]
    assert found[0]["reasons"] == ["claim-unsatisfiable"]
    assert "has more than 2 matching devices" in found[0]["message"]


def chart_webhooks() -> list[dict[str, Any]]:
    """The chart's two webhook configurations, as `helm template` renders them by default."""
    helm = shutil.which("helm") or str(TOOLS / "helm")
    if not Path(helm).is_file():
        pytest.skip("helm is not on PATH nor in .cache/tools (run `make tools`)")
    rendered = Renderer(helm).render()
    return [
        *rendered.all("MutatingWebhookConfiguration"),
        *rendered.all("ValidatingWebhookConfiguration"),
    ]


def create_template(
    plane: ControlPlane, namespace: str, template: dict[str, Any], *, dry_run: bool = False
) -> ApiException | None:
    """Create ``template``; the API server's refusal, or None when it was created."""
    api = client.ResourceV1Api(plane.client)
    try:
        api.create_namespaced_resource_claim_template(
            namespace, template, dry_run="All" if dry_run else None
        )
    except ApiException as exc:
        return exc
    return None


@pytest.mark.slow
def test_the_webhook_refuses_the_template_with_what_exists_and_allows_what_fits(
    control_plane: ControlPlane,
    kube_namespace: str,
    dra_cluster: dict[str, str],
    register_webhooks: Callable[..., list[dict[str, Any]]],
    tmp_path: Path,
) -> None:
    klass = dra_cluster["class"]
    three = claim_template("three", exactly(klass, count=3), namespace=kube_namespace)
    two = claim_template("two", exactly(klass, count=2), namespace=kube_namespace)
    # A template made before the webhook: pods that refer to it are judged on it.
    assert create_template(control_plane, kube_namespace, three) is None
    again = claim_template("three-again", exactly(klass, count=3), namespace=kube_namespace)
    certs = write_certs(tmp_path / "certs")
    with gunicorn.running(
        tmp_path, certs, workers=1, GPU_POLICY_KUBE=str(control_plane.kubeconfig)
    ) as server:
        # The webhook sees the DRA kinds once API discovery and the first lists are done.
        assert wait_until(lambda: "DRA available" in server.get("/readyz")[1], 60, 0.2), (
            server.log()
        )
        register_webhooks(
            f"https://127.0.0.1:{server.port}",
            certs.ca_cert.read_bytes(),
            namespace=kube_namespace,
            objects=chart_webhooks(),
        )
        # Dry runs until the API server's informer has the configuration (dry runs call the
        # webhook too: sideEffects None), so nothing is created before the webhook answers.
        refusals: list[ApiException | None] = []
        assert wait_until(
            lambda: (
                refusals.append(create_template(control_plane, kube_namespace, three, dry_run=True))
                or getattr(refusals[-1], "status", 0) == 403
            ),
            30,
            0.2,
        ), refusals[-1]
        refused = create_template(control_plane, kube_namespace, again)
        assert refused is not None and refused.status == 403
        message = json.loads(refused.body)["message"]
        assert message.startswith(
            'admission webhook "resourceclaimtemplates.validate.gpu-policy.io" denied the request'
        )
        assert "[gpu-claim-devices-available]" in message
        assert f"3 devices of class {klass}" in message
        assert (
            f"no node has more than 2 matching devices (2 on node {dra_cluster['node']}" in message
        )
        (tmp_path / "refused.txt").write_text(message + "\n")

        # The pod that would use the template made before the webhook is refused too.
        with pytest.raises(ApiException) as caught:
            client.CoreV1Api(control_plane.client).create_namespaced_pod(
                kube_namespace, claim_pod("too-many", "three")
            )
        pod_message = json.loads(caught.value.body)["message"]
        assert caught.value.status == 403
        assert pod_message.startswith(
            'admission webhook "pod-claims.validate.gpu-policy.io" denied the request'
        )
        assert 'claim "gpu" (ResourceClaimTemplate three)' in pod_message

        # So is a Deployment whose pod template uses it: refused at apply time, instead of a
        # ReplicaSet creating pods that wait forever.
        apps = client.AppsV1Api(control_plane.client)
        with pytest.raises(ApiException) as caught:
            apps.create_namespaced_deployment(kube_namespace, claim_deployment("train", "three"))
        deployment_message = json.loads(caught.value.body)["message"]
        assert caught.value.status == 403
        assert deployment_message.startswith(
            'admission webhook "workloads.validate.gpu-policy.io" denied the request'
        )
        assert "[gpu-claim-devices-available]" in deployment_message
        assert 'claim "gpu" (ResourceClaimTemplate three)' in deployment_message
        (tmp_path / "deployment-refused.txt").write_text(deployment_message + "\n")

        # A template that does not exist yet: Kubernetes lets it come later, so the pod is
        # created, with a warning naming it.
        created = client.CoreV1Api(control_plane.client).create_namespaced_pod(
            kube_namespace, claim_pod("waits", "not-yet"), _preload_content=False
        )
        assert created.status == 201
        warning = created.headers.get("Warning", "")
        assert "[gpu-claim-exists]" in warning, warning
        assert "ResourceClaimTemplate not-yet" in warning

        assert create_template(control_plane, kube_namespace, two) is None
        control_plane.create(claim_pod("fits", "two"), namespace=kube_namespace)
        assert wait_until(lambda: bound_to(control_plane, kube_namespace, "fits"), 120, 0.3)
        assert bound_to(control_plane, kube_namespace, "fits") == dra_cluster["node"]
