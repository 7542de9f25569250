"""Trimming, backoff and client loading (against the real API server for one smoke call)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.config import ConfigException

from tests.objects import cpu_node, gpu_node, listed_pod
from tests.support.controlplane import ControlPlane
from webhook.kube import WatchTimings, configmap_data, load_client, trim_node, trim_pod


def test_trim_node_keeps_what_the_engine_reads() -> None:
    node = gpu_node("gpu-a", "l20", gpus=4, replicas=4, config_key="l20")
    node["spec"]["taints"].append(
        {
            "key": "node.kubernetes.io/unreachable",
            "effect": "NoExecute",
            "timeAdded": "2025-01-01T00:00:00Z",
        }
    )
    node["spec"]["unschedulable"] = True
    trimmed = trim_node(node)
    assert trimmed == {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "gpu-a", "labels": node["metadata"]["labels"]},
        "spec": {
            "taints": [
                {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
            ],
            "unschedulable": True,
        },
        "status": {
            "allocatable": node["status"]["allocatable"],
            "capacity": node["status"]["capacity"],
        },
    }
    assert trimmed["status"]["allocatable"]["nvidia.com/gpu"] == "16"


def test_trim_node_tolerates_a_bare_node() -> None:
    assert trim_node({"metadata": {"name": "x"}}) == {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "x", "labels": {}},
        "spec": {},
        "status": {"allocatable": {}, "capacity": {}},
    }
    assert trim_node(cpu_node("c"))["spec"] == {}


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(listed_pod("p"), None, id="no-gpu"),
        pytest.param(
            listed_pod("p", gpu={"nvidia.com/gpu": "1"}, phase="Succeeded"), None, id="succeeded"
        ),
        pytest.param(
            listed_pod("p", gpu={"nvidia.com/gpu": "1"}, phase="Failed"), None, id="failed"
        ),
        pytest.param(
            listed_pod("p", gpu={"nvidia.com/gpu.shared": "1"}, node="n1"),
            {
                "namespace": "ml",
                "name": "p",
                "nodeName": "n1",
                "phase": "Running",
                "containers": [{"name": "main", "requests": {"nvidia.com/gpu.shared": "1"}}],
            },
            id="running-shared",
        ),
        pytest.param(
            listed_pod("p", gpu={"nvidia.com/mig-1g.10gb": "2"}, phase="Pending"),
            {
                "namespace": "ml",
                "name": "p",
                "nodeName": None,
                "phase": "Pending",
                "containers": [{"name": "main", "requests": {"nvidia.com/mig-1g.10gb": "2"}}],
            },
            id="pending-mig",
        ),
        pytest.param(
            {
                "metadata": {"name": "p", "namespace": "ns"},
                "spec": {
                    "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]
                },
            },
            {
                "namespace": "ns",
                "name": "p",
                "nodeName": None,
                "phase": "Pending",
                "containers": [{"name": "c", "requests": {"nvidia.com/gpu": "1"}}],
            },
            id="limits-only-no-status",
        ),
    ],
)
def test_trim_pod(obj: dict[str, Any], expected: dict[str, Any] | None) -> None:
    assert trim_pod(obj) == expected


def test_configmap_data() -> None:
    assert configmap_data({"data": {"any": "version: v1\n"}}) == {"any": "version: v1\n"}
    assert configmap_data({"metadata": {"name": "empty"}}) == {}


def test_backoff_grows_is_capped_and_jittered() -> None:
    t = WatchTimings(backoff_initial=0.2, backoff_max=30.0, backoff_factor=2.0, backoff_jitter=0.5)
    assert t.backoff(0) == 0.0
    top = [t.backoff(n, rnd=lambda: 0.0) for n in range(1, 10)]
    assert top == [0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0]
    assert t.backoff(50, rnd=lambda: 0.0) == 30.0
    assert t.backoff(3, rnd=lambda: 1.0) == pytest.approx(0.4)  # the low end: d * (1 - jitter)
    assert all(0.4 <= t.backoff(3) <= 0.8 for _ in range(100))


def test_load_client_from_kubeconfig(
    control_plane: ControlPlane, make_gpu_node: Callable[..., Any], tmp_path: Path
) -> None:
    make_gpu_node("c1", gpus=None)
    # The cluster's own kubeconfig: TLS with its CA, a client certificate.
    path = tmp_path / "kubeconfig"
    path.write_text(control_plane.kubeconfig.read_text())
    before = path.read_text()
    api = load_client(str(path))
    try:
        assert api.configuration.host == control_plane.url
        assert api.configuration.keep_alive is True
        nodes = client.CoreV1Api(api).list_node()
        assert [n.metadata.name for n in nodes.items] == ["c1"]
    finally:
        api.close()
    assert path.read_text() == before  # never written back


def test_load_client_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(FileNotFoundError, match="kubeconfig not found"):
        load_client(str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigException):
        load_client("in-cluster")
