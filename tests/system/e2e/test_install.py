"""The webhook installed as the README says, in front of a real API server.

The chart is rendered with ``helm template`` and the README's install values, and every object
is applied with the real ``kubectl`` (the API server must accept them all). The one change: no
kubelet runs the chart's pods, so the webhook configurations are pointed at a local
``gpu-policy serve`` by URL. That server runs as the chart runs it: the chart's policy file,
watching the cluster with the chart's ServiceAccount identity (so with exactly the RBAC the
chart grants). The cluster is the TKE example after its rollout (the L20 and T4 Nodes of
``examples/clusters/seed003-l20-t4``, the device plugin's ConfigMap in ``gpu-operator``).

Then pods, Deployments and dry runs go through the API server: what is stored, what kubectl
prints, and how many reviews the server counted.
"""

from __future__ import annotations

import base64
import contextlib
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import doc_examples, gunicorn
from tests.support.controlplane import ControlPlane, create_node, delete_namespace
from tests.support.gunicorn import Server
from tests.support.waiting import wait_until
from webhook.certs.issue import write_certs
from webhook.contract import KUBE_ENV, POLICY_FILE_ENV

ROOT = doc_examples.ROOT
TOOLS = ROOT / ".cache" / "tools"
CLUSTER = ROOT / "examples" / "clusters" / "seed003-l20-t4"
RELEASE, RELEASE_NS, APP_NS = "gpu-policy-webhook", "gpu-policy", "nlp"
# The README's install command, as `helm template` (no cluster needed to render).
HELM_TEMPLATE = [
    "template",
    RELEASE,
    "charts/gpu-policy-webhook",
    "--namespace",
    RELEASE_NS,
    "--set",
    "image.repository=registry.example.com/gpu-policy-webhook",
    "--set",
    "devicePlugin.configMapRef.namespace=gpu-operator",
    "--set",
    "devicePlugin.configMapRef.name=time-slicing-config",
]
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@dataclass
class Installed:
    """The control plane with the webhook installed, and how to reach both."""

    plane: ControlPlane
    server: Server
    rendered: list[dict[str, Any]]
    applied: str  # what `kubectl apply` printed

    def kubectl(self, command: str) -> subprocess.CompletedProcess[str]:
        """``command`` (a shell line starting with kubectl) against the cluster, from the
        repository root; stdout and stderr in one stream, as a terminal shows them."""
        return self.plane.shell(command)

    def reviews(self, endpoint: str) -> float:
        """The reviews the server counted at ``endpoint`` ("mutate" or "validate")."""
        return self.server.metric("gpu_policy_reviews_total", endpoint=endpoint)

    def pod(self, name: str) -> dict[str, Any]:
        """The pod as the API server stored it."""
        from kubernetes import client

        stored = client.CoreV1Api(self.plane.client).read_namespaced_pod(name, APP_NS)
        return self.plane.client.sanitize_for_serialization(stored)  # type: ignore[no-any-return]


def _tool(name: str) -> str:
    path = TOOLS / name
    if not path.exists():
        pytest.skip(f"{name} is not in .cache/tools (run `make tools`)")
    return str(path)


def _seed_objects() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The example cluster's GPU Nodes and its device-plugin ConfigMap, moved to gpu-operator."""
    nodes = yaml.safe_load((CLUSTER / "nodes.yaml").read_text())["items"]
    gpu_nodes = [n for n in nodes if "nvidia.com/gpu" in n["status"].get("allocatable", {})]
    configmap = yaml.safe_load((CLUSTER / "device-plugin-config.yaml").read_text())
    configmap["metadata"] = {"name": "time-slicing-config", "namespace": "gpu-operator"}
    return gpu_nodes, configmap


def _point_at(plane: ControlPlane, url: str, ca_pem: bytes) -> None:
    """Every webhook of the chart's two configurations calls ``url`` + its path instead of the
    Service (no kubelet runs the chart's pods here); the rest stays as the chart made it."""
    from kubernetes import client

    api = client.AdmissionregistrationV1Api(plane.client)
    bundle = base64.b64encode(ca_pem).decode()
    for read, replace in (
        (api.read_mutating_webhook_configuration, api.replace_mutating_webhook_configuration),
        (api.read_validating_webhook_configuration, api.replace_validating_webhook_configuration),
    ):
        config = read(RELEASE)
        for hook in config.webhooks:
            path = hook.client_config.service.path
            hook.client_config = client.AdmissionregistrationV1WebhookClientConfig(
                url=url + path, ca_bundle=bundle
            )
        replace(RELEASE, config)


@pytest.fixture(scope="module")
def installed(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Installed]:
    """The chart applied, the example cluster's Nodes and ConfigMap made, the server serving."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    helm, kubectl = _tool("helm"), _tool("kubectl")
    tmp = tmp_path_factory.mktemp("install")
    plane = control_plane
    core = client.CoreV1Api(plane.client)
    rendered_text = subprocess.run(
        [helm, *HELM_TEMPLATE], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    (tmp / "chart.yaml").write_text(rendered_text)
    rendered = [d for d in yaml.safe_load_all(rendered_text) if d]

    nodes, configmap = _seed_objects()
    env = dict(os.environ, KUBECONFIG=str(plane.kubeconfig))
    try:
        for ns in (RELEASE_NS, APP_NS, "gpu-operator"):
            core.create_namespace({"metadata": {"name": ns}})
        plane.create(configmap)
        for node in nodes:
            create_node(plane, node)
        applied = subprocess.run(
            [kubectl, "apply", "--server-side", "-f", str(tmp / "chart.yaml")],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert applied.returncode == 0, applied.stderr
        # Pods need the namespace's default ServiceAccount, which the controller-manager makes.
        assert wait_until(lambda: _has_default_account(plane, APP_NS), timeout=30)

        # The server as the chart's Deployment runs it: its policy file, its identity.
        policy = next(d for d in rendered if d["kind"] == "ConfigMap")["data"]["policy.yaml"]
        (tmp / "policy.yaml").write_text(policy)
        account = next(d for d in rendered if d["kind"] == "ServiceAccount")["metadata"]["name"]
        kubeconfig = plane.write_kubeconfig(
            tmp / "webhook.kubeconfig",
            user=f"system:serviceaccount:{RELEASE_NS}:{account}",
            groups=("system:serviceaccounts", f"system:serviceaccounts:{RELEASE_NS}"),
        )
        certs = write_certs(tmp / "tls", service=RELEASE, namespace=RELEASE_NS, days=1)
        ca_pem = certs.ca_cert.read_bytes()
        server = gunicorn.start(
            tmp, certs, **{POLICY_FILE_ENV: str(tmp / "policy.yaml"), KUBE_ENV: str(kubeconfig)}
        )
        try:
            # Every worker, not the one whose /readyz answers: each judges from its own snapshot.
            assert wait_until(lambda: server.cluster_ready(2), timeout=60), server.log()
            _point_at(plane, f"https://127.0.0.1:{server.port}", ca_pem)
            yield Installed(plane, server, rendered, applied.stdout)
        finally:
            gunicorn.stop(server)
    finally:
        subprocess.run(
            [
                kubectl,
                "delete",
                "--ignore-not-found",
                "-f",
                str(tmp / "chart.yaml"),
                "--wait=false",
            ],
            env=env,
            capture_output=True,
            check=False,
        )
        for node in nodes:
            with contextlib.suppress(ApiException):
                core.delete_node(node["metadata"]["name"])
        for ns in (APP_NS, "gpu-operator", RELEASE_NS):
            delete_namespace(plane, ns)


def _has_default_account(plane: ControlPlane, namespace: str) -> bool:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        client.CoreV1Api(plane.client).read_namespaced_service_account("default", namespace)
    except ApiException:
        return False
    return True


def _first_call(installed: Installed) -> None:
    """Wait until the API server calls the webhook (it picks a new configuration up within a
    second or so): dry-run GPU pods until one is reviewed."""
    pod = yaml.safe_load((ROOT / "examples/manifests/pod-gpu-1-shared.yaml").read_text())
    before = installed.reviews("mutate")

    def called() -> bool:
        installed.kubectl(
            "kubectl create --dry-run=server -f examples/manifests/pod-gpu-1-shared.yaml"
        )
        return installed.reviews("mutate") > before

    assert pod["metadata"]["namespace"] == APP_NS
    assert wait_until(called, timeout=30, poll=0.5), installed.server.log()


def test_the_api_server_accepts_every_object_of_the_chart(installed: Installed) -> None:
    """`kubectl apply` of the whole render: every object stored, none refused."""
    shown = installed.applied.splitlines()
    for doc in installed.rendered:
        name = doc["metadata"]["name"]
        assert any(line.endswith(f"/{name} serverside-applied") for line in shown), (
            f"{doc['kind']}/{name} not applied:\n{installed.applied}"
        )
    assert len(shown) == len(installed.rendered), installed.applied


def test_the_examples_through_the_api_server(
    installed: Installed, request: pytest.FixtureRequest
) -> None:
    """The README's and docs' kubectl examples print what the pages show, through the chart's
    webhook configurations; the denials are kubectl's real text around the webhook's message."""
    _first_call(installed)
    examples = doc_examples.checked_by(request.node.nodeid)
    assert len(examples) == 4
    try:
        for example in examples:
            result = installed.kubectl(example.command)
            doc_examples.assert_prints(example, result.stdout)
            assert (result.returncode != 0) == ("denied the request" in example.output)
    finally:
        installed.kubectl("kubectl delete pod -n nlp --all --force --grace-period=0")


def _settled(read: Callable[[], float]) -> float:
    """A server figure once it stops moving: each worker adds its counts to the shared figures
    once a second, so reviews answered just before (the probes of ``_first_call``) may land
    late."""
    last = read()
    while True:
        time.sleep(1.2)
        now = read()
        if now == last:
            return now
        last = now


def _gpu_pod(name: str, **metadata: Any) -> dict[str, Any]:
    """A pod with one container asking for ``nvidia.com/gpu: 1`` (limits only, as users write)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": APP_NS, **metadata},
        "spec": {
            "containers": [
                {
                    "name": "cuda",
                    "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                    "resources": {"limits": {"nvidia.com/gpu": 1}},
                }
            ]
        },
    }


def _cpu_pod(name: str) -> dict[str, Any]:
    pod = _gpu_pod(name)
    pod["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1", "memory": "1Gi"}}
    return pod


def _tolerates_gpu(pod: dict[str, Any]) -> bool:
    return any(t.get("key") == "nvidia.com/gpu" for t in pod["spec"].get("tolerations", []))


def test_a_gpu_pod_is_stored_as_the_webhook_changed_it(installed: Installed) -> None:
    _first_call(installed)
    patches = _settled(
        lambda: installed.server.metric("gpu_policy_patches_total", endpoint="mutate")
    )
    installed.plane.create(_gpu_pod("cuda-1"))
    stored = installed.pod("cuda-1")
    assert _tolerates_gpu(stored)
    assert stored["metadata"]["annotations"]["gpu-policy.io/mutations"] == (
        "tolerations nvidia.com/gpu:NoSchedule"
    )
    assert wait_until(
        lambda: (
            installed.server.metric("gpu_policy_patches_total", endpoint="mutate") == patches + 1
        )
    )


def test_a_server_side_dry_run_shows_the_change_and_stores_nothing(installed: Installed) -> None:
    _first_call(installed)
    result = installed.kubectl(
        "kubectl apply --server-side --dry-run=server -o yaml "
        "-f examples/manifests/pod-annotation-product-l20.yaml"
    )
    assert result.returncode == 0, result.stdout
    returned = yaml.safe_load(result.stdout)
    assert returned["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-L20-SHARED"}
    assert _tolerates_gpu(returned)
    gone = installed.kubectl("kubectl get pod llm-l20 -n nlp")
    assert gone.returncode == 1 and 'pods "llm-l20" not found' in gone.stdout
    assert wait_until(lambda: "name=llm-l20 operation=CREATE dryRun=true" in installed.server.log())


def test_pods_the_controller_manager_creates_are_mutated(installed: Installed) -> None:
    """A Deployment's pods are created by the ReplicaSet controller, not by the user: they go
    through the webhook too, and the scheduler places them where the change points."""
    _first_call(installed)
    template = _gpu_pod("unused", annotations={"gpu-policy.io/product": "Tesla-T4"})
    template["metadata"] = {
        "labels": {"app": "ocr"},
        "annotations": template["metadata"]["annotations"],
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "ocr", "namespace": APP_NS},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "ocr"}},
            "template": {"metadata": template["metadata"], "spec": template["spec"]},
        },
    }
    from kubernetes import client

    core = client.CoreV1Api(installed.plane.client)
    installed.plane.create(deployment)
    try:

        def bound() -> list[Any]:
            pods = core.list_namespaced_pod(APP_NS, label_selector="app=ocr").items
            return [p for p in pods if p.spec.node_name] if len(pods) == 2 else []

        assert wait_until(lambda: len(bound()) == 2, timeout=60)
        for pod in bound():
            assert pod.metadata.owner_references[0].kind == "ReplicaSet"
            assert pod.spec.node_selector == {"nvidia.com/gpu.product": "Tesla-T4-SHARED"}
            assert pod.spec.node_name == "10.0.2.12"  # the T4
            assert any(t.key == "nvidia.com/gpu" for t in pod.spec.tolerations)
    finally:
        installed.kubectl("kubectl delete deployment ocr -n nlp --wait=false")
        installed.kubectl("kubectl delete pod -n nlp -l app=ocr --force --grace-period=0")


def test_reinvoked_after_a_second_mutating_webhook(installed: Installed, tmp_path: Path) -> None:
    """Another mutating webhook, called after this one, states the pod's GPU model: the API
    server calls this one again (``reinvocationPolicy: IfNeeded``), and the stored pod gets the
    node selection only that second call could make."""
    from kubernetes import client

    _first_call(installed)
    api = client.AdmissionregistrationV1Api(installed.plane.client)
    certs = write_certs(tmp_path / "tls", service="annotator", namespace=APP_NS, days=1)
    ca_pem = certs.ca_cert.read_bytes()
    label = {"gpu-policy.test/annotate": "yes"}
    with gunicorn.running(
        tmp_path, certs, app="tests.system.e2e.annotator:app", workers=1
    ) as other:
        api.create_mutating_webhook_configuration(
            {
                "metadata": {"name": "zz-annotator"},  # after "gpu-policy-webhook" by name
                "webhooks": [
                    {
                        "name": "product.annotator.test",
                        "clientConfig": {
                            "url": f"https://127.0.0.1:{other.port}/mutate",
                            "caBundle": base64.b64encode(ca_pem).decode(),
                        },
                        "rules": [
                            {
                                "apiGroups": [""],
                                "apiVersions": ["v1"],
                                "resources": ["pods"],
                                "operations": ["CREATE"],
                            }
                        ],
                        "objectSelector": {"matchLabels": label},
                        "sideEffects": "None",
                        "admissionReviewVersions": ["v1"],
                        "failurePolicy": "Fail",
                    }
                ],
            }
        )
        try:
            # The API server calls a new configuration once its informer has seen it.
            def annotated() -> bool:
                dry = installed.kubectl(
                    "kubectl run probe -n nlp --image=x --dry-run=server -o yaml "
                    "--labels=gpu-policy.test/annotate=yes"
                )
                return "gpu-policy.io/product: NVIDIA-L20" in dry.stdout

            assert wait_until(annotated, timeout=30, poll=0.5)
            installed.plane.create(_gpu_pod("reinvoked", labels=label))
        finally:
            api.delete_mutating_webhook_configuration("zz-annotator")
    stored = installed.pod("reinvoked")
    assert stored["metadata"]["annotations"]["gpu-policy.io/product"] == "NVIDIA-L20"
    assert stored["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-L20-SHARED"}
    calls = "endpoint=mutate kind=Pod namespace=nlp name=reinvoked operation=CREATE dryRun=false"
    assert wait_until(lambda: installed.server.log().count(calls) == 2), installed.server.log()


def test_pods_without_gpus_never_reach_the_webhook(installed: Installed) -> None:
    """The chart's matchConditions keep pods that ask for no nvidia.com/* resource away: five
    CPU pods and a CPU Deployment cost no review; one GPU pod after them costs two."""
    _first_call(installed)

    def reviews() -> float:
        return installed.reviews("mutate") + installed.reviews("validate")

    before = _settled(reviews)
    for i in range(5):
        installed.plane.create(_cpu_pod(f"cpu-{i}"))
    result = installed.kubectl(
        "kubectl create deployment web -n nlp --image=nginx:1.27 --replicas=2"
    )
    assert result.returncode == 0, result.stdout
    installed.plane.create(_gpu_pod("after-the-cpu-pods"))
    # Each worker adds its reviews to the shared figures once a second: wait for the GPU pod's.
    assert wait_until(lambda: reviews() >= before + 2, timeout=10)
    time_for_stragglers = wait_until(lambda: reviews() > before + 2, timeout=2.5)
    assert not time_for_stragglers, f"{reviews() - before} reviews, 2 expected"
