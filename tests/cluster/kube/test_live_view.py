"""The live cluster as the engine sees it: ConfigMap edits reloaded, a bad edit kept out
(`gpu-policy inventory --kubeconfig` on it: tests/cluster/kube/test_controlplane.py).

Real kubernetes client, real HTTP, the real API server (tests/support/cluster.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.objects import (
    configmap_ref_policy,
    ctr,
    load_example_cluster,
    pod,
    time_slicing_config,
)
from tests.support.cluster import LiveCluster
from tests.support.kube_helpers import MakeSource
from webhook.files import load_policy
from webhook.kube.snapshot import live_view
from webhook.policy import review


def _policy(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(configmap_ref_policy())
    return path


def test_configmap_edit_reloads_and_bad_edit_keeps_last_good(
    cluster: LiveCluster, make_source: MakeSource, tmp_path: Path
) -> None:
    configmap = load_example_cluster(cluster)
    policy = load_policy(_policy(tmp_path))
    source = make_source()
    assert source.wait_synced(5)
    state = source.current
    assert state is not None
    view = live_view(policy, state)
    assert view.configmap_error is None
    two = pod(ctr("m", limits={"nvidia.com/gpu": 2}), name="p", namespace="ml")
    assert review(two, policy=view.policy, inventory=view.inventory).failed == (
        "gpu-shared-request-above-one",
    )

    # The admin switches the T4 key off failRequestsGreaterThanOne: a warning, not a denial.
    edited = dict(configmap)
    edited["data"] = {
        k: v.replace("failRequestsGreaterThanOne: true", "failRequestsGreaterThanOne: false")
        for k, v in configmap["data"].items()
    }
    cluster.replace(edited)
    assert source.wait_for(
        lambda s: "failRequestsGreaterThanOne: false" in (s.configmap or {}).get("t4", ""), 2
    )
    good = live_view(policy, source.current, previous=view)  # type: ignore[arg-type]
    assert good.configmap_error is None
    decision = review(two, policy=good.policy, inventory=good.inventory)
    assert decision.allowed, decision.denial

    # A broken edit (replicas 1) is refused: the last good configs stay in force.
    broken = dict(configmap)
    broken["data"] = {
        **configmap["data"],
        "t4": configmap["data"]["t4"].replace("replicas: 3", "replicas: 1"),
    }
    cluster.replace(broken)
    assert source.wait_for(lambda s: "replicas: 1" in (s.configmap or {}).get("t4", ""), 2)
    kept = live_view(policy, source.current, previous=good)  # type: ignore[arg-type]
    assert kept.configmap_error is not None and "replicas must be >= 2" in kept.configmap_error
    assert kept.policy.configs == good.policy.configs


# The t4 key of the example ConfigMap (a block scalar, "|-": no final newline).
T4 = time_slicing_config(3).rstrip("\n")

# An edit of the T4 key the device plugin refuses: the reason the server keeps the last good
# configs for (docs/device-plugin.md, "Config file: what the plugin refuses, loads and ignores").
REFUSED = {
    "time-slicing-empty": (
        "version: v1\nsharing:\n  timeSlicing: {}",
        "sharing.timeSlicing.resources: no resources specified",
    ),
    "time-slicing-bare": (
        "version: v1\nsharing:\n  timeSlicing:",
        "sharing.timeSlicing.resources: no resources specified",
    ),
    "mps-empty": (
        "version: v1\nsharing:\n  mps: {}",
        "sharing.mps.resources: no resources specified",
    ),
    "rename-malformed": (
        T4.replace("replicas: 3", "replicas: 3\n        rename: Shared+T4"),
        "rename: incorrect format for resource name",
    ),
    "devices-malformed": (
        T4.replace("replicas: 3", "replicas: 3\n        devices: some"),
        "devices: devices set as 'some' but the only valid string input is 'all'",
    ),
    "mig-strategy-empty": (
        T4.replace("migStrategy: none", 'migStrategy: ""'),
        "flags.migStrategy: unknown MIG strategy: ''",
    ),
}

# An edit the plugin loads: the server follows it. (strategy, replicas) of the T4's offer after.
ACCEPTED = {
    "replicas-written-as-a-float": (
        T4.replace("replicas: 3", "replicas: 4.0"),
        ("time-slicing", 4),
    ),
    "old-strategy-key": (
        T4.replace("    resources:", "    strategy: roundrobin\n    resources:").replace(
            "replicas: 3", "replicas: 5"
        ),
        ("time-slicing", 5),
    ),
    "a-name-no-device-has": (
        T4.replace("replicas: 3", "replicas: 6\n      - name: nvidia.com/tpu\n        replicas: 2"),
        ("time-slicing", 6),
    ),
    "time-slicing-beside-mps": (
        T4 + "\n  mps:\n    resources:\n      - name: nvidia.com/gpu\n        replicas: 2",
        ("mps", 2),
    ),
    "listed-twice-the-larger-wins": (
        T4.replace("replicas: 3", "replicas: 2\n      - name: nvidia.com/gpu\n        replicas: 7"),
        ("time-slicing", 7),
    ),
}


def _t4_offer(view: Any) -> tuple[str, int]:
    """How the T4 key shares nvidia.com/gpu in the configs the view is using."""
    config = view.policy.configs["t4"]
    replicas = {r.form.name: r.replicas for r in config.resources}
    return config.strategy, replicas["nvidia.com/gpu"]


@pytest.mark.parametrize(
    ("edit", "outcome"),
    [*REFUSED.values(), *ACCEPTED.values()],
    ids=[*REFUSED, *ACCEPTED],
)
def test_live_configmap_edits_follow_the_plugin(
    cluster: LiveCluster, make_source: MakeSource, tmp_path: Path, edit: str, outcome: Any
) -> None:
    """A refused edit keeps the last good configs and says why; an accepted one is followed."""
    configmap = load_example_cluster(cluster)
    assert configmap["data"]["t4"] == T4
    policy = load_policy(_policy(tmp_path))
    source = make_source()
    assert source.wait_synced(5)
    good = live_view(policy, source.current)  # type: ignore[arg-type]
    assert good.configmap_error is None
    assert _t4_offer(good) == ("time-slicing", 3)
    cluster.replace({**configmap, "data": {**configmap["data"], "t4": edit}})
    assert source.wait_for(lambda s: (s.configmap or {}).get("t4") == edit, 2)
    after = live_view(policy, source.current, previous=good)  # type: ignore[arg-type]
    if isinstance(outcome, str):
        assert after.configmap_error is not None and outcome in after.configmap_error
        assert "ConfigMap gpu-operator/device-plugin-config" in after.configmap_error
        assert after.policy.configs == good.policy.configs
        assert _t4_offer(after) == ("time-slicing", 3)
    else:
        assert after.configmap_error is None
        assert _t4_offer(after) == outcome
