"""GPU isolation through the real API server, with the chart's own webhook configurations.

The chart is rendered with ``policy.spec.isolation.mode: enforce`` and the GPU node taint
``nvidia.com/gpu:NoSchedule``; its two webhook configurations are registered by URL (their
matchConditions and namespaceSelector as rendered) and the webhook runs under gunicorn,
watching the control plane's Nodes. The API server then decides which pods it sends, and
stores what the webhook answers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.support import gunicorn
from tests.support.chart_helpers import Renderer
from tests.support.controlplane import ControlPlane, create_namespace, delete_namespace
from tests.support.waiting import wait_until
from webhook.certs.issue import write_certs

pytestmark = pytest.mark.slow

GPU_TAINT = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}
TOLERATES_GPU = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
VOID = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}
# Ours in the chart: pods.mutate.gpu-policy.io, pods.validate.gpu-policy.io, ...
OUR_WEBHOOK = re.compile(r'name="[a-z]+\.(?:mutate|validate)\.gpu-policy\.io"')

POLICY = """\
apiVersion: gpu-policy.io/v1alpha1
kind: SharingPolicy
metadata: {{name: isolation}}
spec:
  enforcement: enforce
  exemptNamespaces: [kube-system]
  devicePlugin:
    config:
      version: v1
      flags: {{migStrategy: none}}
  isolation:
    mode: enforce
    exemptNamespaces: [{exempt}]
"""


def _pod(name: str, *containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": list(containers), **spec},
    }


def _ctr(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04", **extra}


def _webhook_calls(plane: ControlPlane) -> float:
    """Calls the API server made to our webhooks so far (its own admission metrics)."""
    response = plane.client.call_api("GET", f"{plane.url}/metrics")
    response.read()
    total = 0.0
    for line in response.data.decode().splitlines():
        if line.startswith("apiserver_admission_webhook_request_total{") and OUR_WEBHOOK.search(
            line
        ):
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.fixture
def exempt_namespace(control_plane: ControlPlane) -> Iterator[str]:
    """A namespace standing for the GPU Operator's (exempt from isolation)."""
    name = create_namespace(control_plane, "gpu-operator")
    try:
        yield name
    finally:
        delete_namespace(control_plane, name)


def test_isolation_through_the_api_server(
    control_plane: ControlPlane,
    kube_namespace: str,
    exempt_namespace: str,
    make_gpu_node: Callable[..., dict[str, Any]],
    register_webhooks: Callable[..., list[dict[str, Any]]],
    renderer: Renderer,
    tmp_path: Path,
) -> None:
    make_gpu_node(taints=[GPU_TAINT], gpus=4)
    rendered = renderer.render(
        "--set",
        "policy.spec.isolation.mode=enforce",
        "--set-json",
        f'policy.spec.isolation.exemptNamespaces=["{exempt_namespace}"]',
        "--set-json",
        f"webhook.isolation.gpuNodeTaints=[[{json.dumps(GPU_TAINT)}]]",
    )
    configurations = [
        d
        for d in rendered.docs
        if d["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
    ]
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY.format(exempt=exempt_namespace))
    certs = write_certs(tmp_path / "certs")
    core = client.CoreV1Api(control_plane.client)
    with gunicorn.running(
        tmp_path,
        certs,
        workers=1,
        GPU_POLICY_FILE=str(policy),
        GPU_POLICY_KUBE=str(control_plane.kubeconfig),
    ) as server:
        register_webhooks(
            f"https://127.0.0.1:{server.port}", certs.ca_cert.read_bytes(), objects=configurations
        )
        exposing = _pod(
            "notebook",
            _ctr("jupyter", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]),
            tolerations=TOLERATES_GPU,
        )

        def refused() -> ApiException | None:
            try:
                core.create_namespaced_pod(kube_namespace, exposing)
            except ApiException as e:
                return e
            core.delete_namespaced_pod("notebook", kube_namespace, grace_period_seconds=0)
            return None

        # Until the API server has seen the configurations and the webhook its GPU node, the
        # pod goes through; then it is refused, by the validating webhook.
        errors: list[ApiException | None] = []
        assert wait_until(lambda: errors.append(refused()) or errors[-1] is not None, 60, 0.3)
        status = json.loads(errors[-1].body)  # type: ignore[union-attr]
        assert status["reason"] == "Forbidden", status
        assert "[gpu-visible-devices]" in status["message"]
        assert "asks for no GPU but sets NVIDIA_VISIBLE_DEVICES=all" in status["message"]

        # A pod that tolerates the GPU taint and asks for no GPU: stored with void everywhere.
        tolerating = _pod(
            "preprocess",
            _ctr("main"),
            _ctr("sidecar"),
            initContainers=[_ctr("setup")],
            tolerations=TOLERATES_GPU,
        )
        stored = control_plane.create(tolerating, namespace=kube_namespace)
        spec = stored["spec"]
        for container in (*spec["initContainers"], *spec["containers"]):
            assert VOID in container["env"], container["name"]
        assert (
            "NVIDIA_VISIBLE_DEVICES=void"
            in stored["metadata"]["annotations"]["gpu-policy.io/mutations"]
        )

        # Pods that cannot be placed on the GPU node never reach the webhook.
        before = _webhook_calls(control_plane)
        assert before > 0
        for i in range(5):
            plain = control_plane.create(_pod(f"web-{i}", _ctr("nginx")), namespace=kube_namespace)
            assert "env" not in plain["spec"]["containers"][0]
        other_taint = [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]
        control_plane.create(
            _pod("batch", _ctr("main"), tolerations=other_taint), namespace=kube_namespace
        )

        # The exempt namespace: not sent either, stored as written.
        operator_pod = _pod(
            "dcgm-exporter",
            _ctr("exporter", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]),
            tolerations=[{"operator": "Exists"}],
        )
        kept = control_plane.create(operator_pod, namespace=exempt_namespace)
        assert kept["spec"]["containers"][0]["env"] == [
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}
        ]
        assert "gpu-policy.io/mutations" not in (kept["metadata"].get("annotations") or {})
        assert _webhook_calls(control_plane) == before

        # The webhook's own count agrees: what reached it was only the tolerating pods.
        connection = server.connect()
        try:
            connection.request("GET", "/metrics")
            metrics = connection.getresponse().read().decode()
        finally:
            connection.close()
        reviewed = gunicorn.metric_total(metrics, "gpu_policy_reviews_total")
        assert reviewed == _webhook_calls(control_plane)
