"""Pools that scale from zero, through the real API server (tests/support/controlplane.py).

The webhook (gunicorn, watching the cluster) serves a cluster with no GPU node. A pod that a
pool declared in the policy, or a Karpenter NodePool, can serve is created, with the
gpu-pool-at-zero warning kubectl prints, and mutated exactly as the same pod is once a node of
that pool is there (the reference: the same create with the node present). A pod no pool can
serve is refused, naming what can. docs/autoscaling.md.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.support import gunicorn
from tests.support.cli import run_cli
from tests.support.controlplane import ControlPlane
from tests.support.paths import REPO
from tests.support.waiting import wait_until
from webhook.certs.issue import write_certs

ROOT = REPO
AUTOSCALED = ROOT / "examples" / "clusters" / "autoscaled"
NODEPOOL_CRD = ROOT / "tests" / "fixtures" / "karpenter" / "karpenter.sh_nodepools.yaml"
NODEPOOLS = ("karpenter.sh", "v1", "nodepools")

MakeNode = Callable[..., dict[str, Any]]
Register = Callable[..., list[dict[str, Any]]]

pytestmark = pytest.mark.slow


def _scaled_up_node(name: str) -> dict[str, Any]:
    """A node of the example's scaled-up cluster, as the autoscaler and GFD would make it."""
    doc = yaml.safe_load((AUTOSCALED / "nodes-scaled-up.yaml").read_text())
    return copy.deepcopy(next(n for n in doc["items"] if n["metadata"]["name"] == name))


def _pod(name: str, resource: str = "nvidia.com/gpu", **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            # No token volume: its random name would differ between the two pods compared.
            "automountServiceAccountToken": False,
            "containers": [
                {"name": "main", "image": "cuda:12", "resources": {"limits": {resource: "1"}}}
            ],
        },
    }


class Cluster:
    """The API server with the webhook registered for one namespace."""

    def __init__(self, plane: ControlPlane, namespace: str) -> None:
        self.core = client.CoreV1Api(plane.client)
        self.namespace = namespace

    def create(self, pod: dict[str, Any], *, dry_run: bool = False) -> tuple[Any, list[str]]:
        """The stored (or dry-run) pod and the warnings the API server sent back."""
        kwargs = {"dry_run": "All"} if dry_run else {}
        created, _, headers = self.core.create_namespaced_pod_with_http_info(
            self.namespace, pod, **kwargs
        )
        return created, _warnings(headers.get("Warning", ""))

    def refusal(self, pod: dict[str, Any]) -> str:
        """The message of the API server's refusal to create ``pod``."""
        with pytest.raises(ApiException) as err:
            self.core.create_namespaced_pod(self.namespace, pod)
        assert err.value.status == 403, err.value.body
        return str(json.loads(err.value.body)["message"])


def _warnings(header: str) -> list[str]:
    # RFC 7234 warnings as the API server writes them: 299 - "text", comma-separated, the
    # text a quoted-string (backslash escapes).
    found = re.findall(r'299 - "((?:[^"\\]|\\.)*)"', header)
    return [re.sub(r"\\(.)", r"\1", text) for text in found]


def _spec(pod: Any) -> dict[str, Any]:
    spec = client.ApiClient().sanitize_for_serialization(pod.spec)
    assert isinstance(spec, dict)
    return spec


@pytest.fixture
def webhook(
    control_plane: ControlPlane,
    kube_namespace: str,
    register_webhooks: Register,
    tmp_path: Path,
) -> Iterator[Cluster]:
    """The webhook serving the example autoscaled policy, watching the control plane."""
    core = client.CoreV1Api(control_plane.client)
    gpu_nodes = [
        n.metadata.name
        for n in core.list_node().items
        if any(k.startswith("nvidia.com/") for k in (n.status.allocatable or {}))
    ]
    assert gpu_nodes == [], "the cluster must start with no GPU node"
    policy_dir = tmp_path / "policy"
    policy_dir.mkdir()
    for name in ("policy.yaml", "device-plugin-config.yaml"):
        shutil.copy(AUTOSCALED / name, policy_dir / name)
    certs = write_certs(tmp_path / "certs")
    with gunicorn.running(
        tmp_path,
        certs,
        workers=1,
        GPU_POLICY_FILE=str(policy_dir / "policy.yaml"),
        GPU_POLICY_KUBE=str(control_plane.kubeconfig),
    ) as server:
        # Before its first listing the worker judges on the policy's declared pools alone (a
        # NodePool's pod is refused): wait for the cluster, not only for an answer.
        assert wait_until(lambda: server.cluster_ready(1), 60, 0.2), server.log()
        register_webhooks(
            f"https://127.0.0.1:{server.port}",
            certs.ca_cert.read_bytes(),
            namespace=kube_namespace,
        )
        cluster = Cluster(control_plane, kube_namespace)
        probe = _pod("probe")
        # The API server picks the new configurations up within about a second.
        assert wait_until(lambda: bool(cluster.create(probe, dry_run=True)[1]), 30, 0.2)
        yield cluster


def _landed_like(
    cluster: Cluster, make_gpu_node: MakeNode, node: dict[str, Any], pod: dict[str, Any]
) -> tuple[Any, list[str]]:
    """``pod`` created once ``node`` is there and the webhook has seen it: the reference."""
    make_gpu_node(node=node)
    assert wait_until(lambda: cluster.create(pod, dry_run=True)[1] == [], 30, 0.2)
    return cluster.create(pod)


def test_a_pod_a_declared_pool_can_serve_is_created_with_the_warning(
    webhook: Cluster, make_gpu_node: MakeNode
) -> None:
    waiting, warnings = webhook.create(_pod("notebook", **{"gpu-policy.io/sharing": "shared"}))
    (warning,) = warnings
    assert warning.startswith('[gpu-pool-at-zero] container "main" asks for nvidia.com/gpu, ')
    assert "which no node offers yet" in warning and "pool gpu-t4 (declared in" in warning
    assert waiting.spec.node_selector == {"nvidia.com/gpu.product": "Tesla-T4-SHARED"}

    # The same pod once the autoscaler added a T4 node: no warning, the same mutation.
    landed, later = _landed_like(
        webhook,
        make_gpu_node,
        _scaled_up_node("gpu-t4-7xk2p"),
        _pod("notebook-2", **{"gpu-policy.io/sharing": "shared"}),
    )
    assert later == []
    assert _spec(waiting) == _spec(landed)


def test_what_no_pool_can_offer_is_refused_with_what_can(webhook: Cluster) -> None:
    message = webhook.refusal(_pod("slice", "nvidia.com/mig-1g.5gb"))
    assert "[gpu-resource-offered]" in message
    assert "no node or autoscaled pool offers MIG 1g.5gb instances" in message
    assert "Tesla-T4-SHARED (no node yet: pool gpu-t4" in message
    assert "NVIDIA-L4 (no node yet: pool gpu-l4x4" in message


A10G_NODEPOOL = {
    "apiVersion": "karpenter.sh/v1",
    "kind": "NodePool",
    "metadata": {"name": "gpu-a10g"},
    "spec": {
        "template": {
            # GFD's product label, so that Karpenter can launch a node for pods selecting it.
            "metadata": {"labels": {"nvidia.com/gpu.product": "NVIDIA-A10G"}},
            "spec": {
                "nodeClassRef": {
                    "group": "karpenter.k8s.aws",
                    "kind": "EC2NodeClass",
                    "name": "gpu",
                },
                "requirements": [
                    {
                        "key": "karpenter.k8s.aws/instance-gpu-name",
                        "operator": "In",
                        "values": ["a10g"],
                    },
                    {
                        "key": "karpenter.sh/capacity-type",
                        "operator": "In",
                        "values": ["on-demand"],
                    },
                ],
                "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
            },
        }
    },
}


@pytest.fixture
def karpenter(control_plane: ControlPlane) -> Iterator[None]:
    """Karpenter's NodePool CRD and the gpu-a10g NodePool, removed after the test.

    Asked for before ``webhook``, so that the NodePool is there when the webhook starts, as
    on a cluster that runs Karpenter.
    """
    ext = client.ApiextensionsV1Api(control_plane.client)
    crd = yaml.safe_load(NODEPOOL_CRD.read_text())
    ext.create_custom_resource_definition(crd)

    def established() -> bool:
        conditions = ext.read_custom_resource_definition(crd["metadata"]["name"]).status.conditions
        return any(c.type == "Established" and c.status == "True" for c in conditions or ())

    assert wait_until(established, 30, 0.2)
    custom = client.CustomObjectsApi(control_plane.client)
    try:
        custom.create_cluster_custom_object(*NODEPOOLS, A10G_NODEPOOL)
        yield
    finally:
        ext.delete_custom_resource_definition(crd["metadata"]["name"])

        def gone() -> bool:
            try:
                ext.read_custom_resource_definition(crd["metadata"]["name"])
            except ApiException as exc:
                return exc.status == 404
            return False

        assert wait_until(gone, 60, 0.2)


def _a10g_node() -> dict[str, Any]:
    """A node Karpenter launched from gpu-a10g, labelled by GFD, with its plugin's resource."""
    node = _scaled_up_node("gpu-l4x4-q9d4m")
    node["metadata"]["name"] = "gpu-a10g-5hx8t"
    labels = node["metadata"]["labels"]
    labels.update(
        {
            "kubernetes.io/hostname": "gpu-a10g-5hx8t",
            "node.kubernetes.io/instance-type": "g5.xlarge",
            "karpenter.sh/nodepool": "gpu-a10g",
            "karpenter.k8s.aws/instance-gpu-name": "a10g",
            "nvidia.com/gpu.product": "NVIDIA-A10G",
            "nvidia.com/gpu.count": "1",
        }
    )
    for part in ("allocatable", "capacity"):
        node["status"][part]["nvidia.com/gpu"] = "1"
    return node


@pytest.mark.usefixtures("karpenter")
def test_a_pod_a_karpenter_nodepool_can_serve_is_created_with_the_warning(
    webhook: Cluster, make_gpu_node: MakeNode, control_plane: ControlPlane
) -> None:
    # `gpu-policy inventory` says where each pool comes from.
    shown = run_cli(
        "inventory",
        "--policy",
        str(AUTOSCALED / "policy.yaml"),
        "--kubeconfig",
        str(control_plane.kubeconfig),
    )
    assert shown.returncode == 0, shown.stderr
    origins = {line.split()[0]: line for line in shown.stdout.splitlines()[1:4]}
    assert "NodePool gpu-a10g, from zero" in origins["gpu-a10g"]
    assert "policy, 0-4 nodes" in origins["gpu-t4"]
    assert "Karpenter NodePool gpu-a10g" in shown.stdout.splitlines()[-1]

    a10g = {"gpu-policy.io/product": "NVIDIA-A10G"}
    waiting, warnings = webhook.create(_pod("train", **a10g))
    (warning,) = warnings
    assert "which no node offers yet" in warning
    assert "pool gpu-a10g (Karpenter NodePool gpu-a10g, from zero)" in warning
    assert waiting.spec.node_selector == {"nvidia.com/gpu.product": "NVIDIA-A10G"}

    landed, later = _landed_like(webhook, make_gpu_node, _a10g_node(), _pod("train-2", **a10g))
    assert later == []
    assert _spec(waiting) == _spec(landed)
