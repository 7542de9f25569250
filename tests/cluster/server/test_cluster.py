"""GPU_POLICY_KUBE: the app follows the cluster's nodes and device-plugin ConfigMap.

The real ``kubernetes`` client against the real API server (tests/support/cluster.py), through a
kubeconfig, as ``gpu-policy serve`` would run with ``GPU_POLICY_KUBE=<kubeconfig>``.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from tests.objects import configmap_ref_policy, load, load_example_cluster, with_gpu
from tests.support.cluster import LiveCluster
from tests.support.waiting import TIMEOUT, wait_until
from webhook.server import Settings, create_app
from webhook.server.cluster import ClusterError


def wait(predicate: Callable[[], bool], timeout: float = TIMEOUT) -> bool:
    return wait_until(predicate, timeout, poll=0.02)


@pytest.fixture
def kube(live_cluster: LiveCluster) -> LiveCluster:
    """The real API server, through a fault proxy of the test's own."""
    return live_cluster


@pytest.fixture
def make_app(tmp_path: Path, kube: LiveCluster) -> Iterator[Callable[..., Flask]]:
    apps: list[Flask] = []

    def make(enforcement: str = "enforce") -> Flask:
        policy = tmp_path / "policy.yaml"
        policy.write_text(configmap_ref_policy(enforcement))
        settings = Settings(
            policy_file=policy, kube=str(kube.write_kubeconfig(tmp_path)), reload_interval=0
        )
        app = create_app(settings)
        apps.append(app)
        return app

    yield make
    for app in apps:
        cluster = app.extensions["gpu_policy"].cluster
        if cluster is not None:
            cluster.stop()


def validate(app: Flask, quantity: int) -> dict[str, Any]:
    doc = with_gpu(load("v1.36.2", "validate", "pod-create"), quantity)
    resp = app.test_client().post(
        "/validate", data=json.dumps(doc), content_type="application/json"
    )
    assert resp.status_code == 200
    return dict(resp.get_json()["response"])


def ready(app: Flask) -> tuple[int, str]:
    resp = app.test_client().get("/readyz")
    return resp.status_code, resp.get_data(as_text=True)


def test_the_app_follows_the_cluster(
    kube: LiveCluster, make_app: Callable[..., Flask], tmp_path: Path
) -> None:
    configmap = load_example_cluster(kube)
    app = make_app()
    assert wait(lambda: ready(app)[0] == 200), ready(app)
    text = ready(app)[1]
    assert f"cluster ({tmp_path / 'kubeconfig'}): 8 nodes, data 0 s old" in text
    snapshot = app.extensions["gpu_policy"].state.snapshot
    assert snapshot.inventory.source.startswith("cluster (")

    # The ConfigMap's configs are in force: two shared GPUs fail at the device plugin.
    denied = validate(app, 2)
    assert denied["allowed"] is False
    assert "NVIDIA-L20-SHARED (8 slots)" in denied["status"]["message"]

    # The admin turns failRequestsGreaterThanOne off: allowed, with a warning.
    lenient = dict(configmap)
    lenient["data"] = {
        k: v.replace("failRequestsGreaterThanOne: true", "failRequestsGreaterThanOne: false")
        for k, v in configmap["data"].items()
    }
    kube.replace(lenient)
    assert wait(lambda: validate(app, 2)["allowed"] is True)
    assert validate(app, 2)["warnings"][0].startswith("[gpu-shared-request-above-one]")

    # A broken edit is refused: the last good configs stay, /readyz says so.
    broken = dict(lenient)
    broken["data"] = {
        **lenient["data"],
        "t4": lenient["data"]["t4"].replace("replicas: 3", "replicas: 1"),
    }
    kube.replace(broken)
    assert wait(lambda: "ConfigMap refused" in ready(app)[1])
    assert ready(app)[0] == 200
    assert validate(app, 2)["allowed"] is True

    # A policy file reload keeps the cluster's view (nodes and the last good configs).
    (tmp_path / "policy.yaml").write_text(configmap_ref_policy("audit"))
    response = validate(app, 2)
    snapshot = app.extensions["gpu_policy"].state.snapshot
    assert snapshot.policy.enforcement == "audit"
    assert snapshot.inventory.source.startswith("cluster (")
    assert response["allowed"] is True and "warnings" not in response


def test_not_ready_until_the_cluster_is_listed(
    kube: LiveCluster, make_app: Callable[..., Flask]
) -> None:
    load_example_cluster(kube)
    kube.go_down("503")
    app = make_app()
    status, text = ready(app)
    assert status == 503 and "not listed yet" in text
    kube.come_back()
    assert wait(lambda: ready(app)[0] == 200), ready(app)


def test_unusable_kubeconfig_is_a_cluster_error(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match=r"GPU_POLICY_KUBE=.*kubeconfig not found"):
        create_app(Settings(kube=str(tmp_path / "missing")))


def _metric(app: Flask, name: str) -> float | None:
    text = app.test_client().get("/metrics").get_data(as_text=True)
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_cluster_health_is_in_the_metrics(
    kube: LiveCluster, make_app: Callable[..., Flask]
) -> None:
    configmap = load_example_cluster(kube)
    app = make_app()
    feed = app.extensions["gpu_policy"].cluster
    assert wait(lambda: ready(app)[0] == 200), ready(app)
    feed.report()
    assert _metric(app, "gpu_policy_cluster_api_reachable") == 1.0
    assert _metric(app, "gpu_policy_configmap_refused") == 0.0
    assert (
        abs(time.time() - (_metric(app, "gpu_policy_cluster_last_sync_timestamp_seconds") or 0))
        < 10
    )

    # An edit the device plugin would refuse shows as refused, the last good configs serve on.
    broken = dict(configmap)
    broken["data"] = {
        k: v.replace("replicas: 8", "replicas: 1") for k, v in configmap["data"].items()
    }
    kube.replace(broken)
    assert wait(lambda: "ConfigMap refused" in ready(app)[1]), ready(app)
    feed.report()
    assert _metric(app, "gpu_policy_configmap_refused") == 1.0

    # The API server goes away: the watch counts its errors and says it is unreachable.
    kube.go_down("503")
    assert wait(lambda: not feed.source.health().api_reachable)
    feed.report()
    assert _metric(app, "gpu_policy_cluster_api_reachable") == 0.0
    assert (_metric(app, "gpu_policy_cluster_watch_events_total") or 0) > 0
    kube.come_back()


def test_a_live_configmap_edit_logs_what_the_plugin_ignores_once(
    kube: LiveCluster, make_app: Callable[..., Flask], caplog: pytest.LogCaptureFixture
) -> None:
    """An accepted ConfigMap edit with an ignored key: one warning line, not one per snapshot."""
    configmap = load_example_cluster(kube)
    with caplog.at_level(logging.WARNING, logger="webhook.server.state"):
        app = make_app()
        assert wait(lambda: ready(app)[0] == 200), ready(app)
        edited = dict(configmap)
        edited["data"] = {
            **configmap["data"],
            # The key removed in v0.12, beside renameByDefault at the same indentation.
            "t4": re.sub(
                r"\n( *)renameByDefault: false",
                r"\n\1renameByDefault: false\n\1strategy: x",
                configmap["data"]["t4"],
            ),
        }
        kube.replace(edited)

        def logged() -> list[str]:
            return [r.getMessage() for r in caplog.records if "strategy" in r.getMessage()]

        assert wait(lambda: len(logged()) == 1), caplog.text
        kube.add(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "a"}}
        )
        time.sleep(0.3)  # later cluster snapshots with the same configs log nothing new
    (line,) = logged()
    assert line.startswith("device-plugin config: ")
    assert "sharing.timeSlicing.strategy" in line
