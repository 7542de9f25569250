"""The live cluster as the engine sees it: `gpu-policy inventory --kubeconfig`, ConfigMap edits.

Real kubernetes client, real HTTP, the fake API server from apiserver.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.support.apiserver import FakeApiServer
from webhook.files import load_policy
from webhook.kube import ClusterSource
from webhook.kube.snapshot import live_view
from webhook.policy import review

from .helpers import FAST

ROOT = Path(__file__).resolve().parent.parent.parent
SEED003 = ROOT / "examples" / "clusters" / "seed003-l20-t4"


def _load_cluster(fake: FakeApiServer) -> dict[str, Any]:
    nodes = yaml.safe_load((SEED003 / "nodes.yaml").read_text())["items"]
    fake.add_many(nodes)
    configmap = yaml.safe_load((SEED003 / "device-plugin-config.yaml").read_text())
    configmap["metadata"] = {"name": "device-plugin-config", "namespace": "gpu-operator"}
    fake.add(configmap)
    return configmap


def _policy(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(
        "apiVersion: gpu-policy.io/v1alpha1\nkind: SharingPolicy\nspec:\n  devicePlugin:\n"
        "    configMapRef: {namespace: gpu-operator, name: device-plugin-config}\n"
        "    defaultConfig: any\n"
    )
    return path


def test_inventory_command_reads_the_live_cluster(fake: FakeApiServer, tmp_path: Path) -> None:
    _load_cluster(fake)
    from tests.support.objects import pod

    fake.add(pod("infer-0", gpu={"nvidia.com/gpu": "1"}, node="10.0.2.11"))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "webhook.cli",
            "inventory",
            "--policy",
            str(_policy(tmp_path)),
            "--kubeconfig",
            str(fake.write_kubeconfig(tmp_path)),
            "-o",
            "table",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    assert "GPU slots: 11 (NVIDIA-L20 x 8 + Tesla-T4 x 3)" in result.stdout
    l20 = next(line for line in result.stdout.splitlines() if "NVIDIA-L20-SHARED" in line)
    assert l20.split()[-3:-1] == ["1", "7"]  # requested, free


def test_configmap_edit_reloads_and_bad_edit_keeps_last_good(
    fake: FakeApiServer, api_client: Any, tmp_path: Path
) -> None:
    configmap = _load_cluster(fake)
    policy = load_policy(_policy(tmp_path))
    source = ClusterSource(
        api_client, configmap=("gpu-operator", "device-plugin-config"), timings=FAST
    ).start()
    try:
        assert source.wait_synced(5)
        state = source.current
        assert state is not None
        view = live_view(policy, state)
        assert view.configmap_error is None
        pod = {
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ml"},
            "spec": {"containers": [{"name": "m", "resources": {"limits": {"nvidia.com/gpu": 2}}}]},
        }
        assert review(pod, policy=view.policy, inventory=view.inventory).failed == (
            "gpu-shared-request-above-one",
        )

        # The admin switches the T4 key off failRequestsGreaterThanOne: a warning, not a denial.
        edited = dict(configmap)
        edited["data"] = {
            k: v.replace("failRequestsGreaterThanOne: true", "failRequestsGreaterThanOne: false")
            for k, v in configmap["data"].items()
        }
        fake.replace(edited)
        assert source.wait_for(
            lambda s: "failRequestsGreaterThanOne: false" in (s.configmap or {}).get("t4", ""), 2
        )
        good = live_view(policy, source.current, previous=view)  # type: ignore[arg-type]
        assert good.configmap_error is None
        decision = review(pod, policy=good.policy, inventory=good.inventory)
        assert decision.allowed, decision.denial

        # A broken edit (replicas 1) is refused: the last good configs stay in force.
        broken = dict(configmap)
        broken["data"] = {
            **configmap["data"],
            "t4": configmap["data"]["t4"].replace("replicas: 3", "replicas: 1"),
        }
        fake.replace(broken)
        assert source.wait_for(lambda s: "replicas: 1" in (s.configmap or {}).get("t4", ""), 2)
        kept = live_view(policy, source.current, previous=good)  # type: ignore[arg-type]
        assert kept.configmap_error is not None and "replicas must be >= 2" in kept.configmap_error
        assert kept.policy.configs == good.policy.configs
    finally:
        source.stop()
