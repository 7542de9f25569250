"""How the chart stops a pod without failing admissions (docs/server.md, "Stopping").

The server needs the pod's grace period to cover the time it keeps answering after SIGTERM and
the time the requests in flight then have; the kubelet kills whatever is left after it.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.chart_helpers import Renderer
from webhook import contract

pytestmark = pytest.mark.slow


def _pod(rendered: Any) -> dict[str, Any]:
    return dict(rendered.one("Deployment")["spec"]["template"]["spec"])


def _env(pod: dict[str, Any]) -> dict[str, str]:
    (container,) = pod["containers"]
    return {e["name"]: e.get("value") for e in container["env"]}


@pytest.mark.parametrize(
    ("delay", "drain"), [(None, None), (0, 10), (30, 60)], ids=["defaults", "no-delay", "long"]
)
def test_grace_period_covers_the_delay_and_the_drain(
    renderer: Renderer, chart_values: dict[str, Any], delay: int | None, drain: int | None
) -> None:
    args = []
    if delay is not None:
        args += ["--set", f"server.shutdownDelaySeconds={delay}"]
    if drain is not None:
        args += ["--set", f"server.drainTimeoutSeconds={drain}"]
    pod = _pod(renderer.render(*args))
    env = _env(pod)
    want_delay = chart_values["server"]["shutdownDelaySeconds"] if delay is None else delay
    want_drain = chart_values["server"]["drainTimeoutSeconds"] if drain is None else drain
    assert float(env[contract.SHUTDOWN_DELAY_ENV]) == want_delay
    assert float(env[contract.DRAIN_TIMEOUT_ENV]) == want_drain
    assert pod["terminationGracePeriodSeconds"] == want_delay + want_drain + 5


def test_default_delay_lets_endpoints_drop_the_pod(default_render: Any) -> None:
    """By default a stopping pod answers for a while (the server alone would not wait)."""
    env = _env(_pod(default_render))
    assert float(env[contract.SHUTDOWN_DELAY_ENV]) >= 5 > contract.DEFAULT_SHUTDOWN_DELAY


def test_default_install_survives_a_node_drain(default_render: Any) -> None:
    """Two replicas on different nodes, and a budget that keeps one while a node drains."""
    deployment = default_render.one("Deployment")
    assert deployment["spec"]["replicas"] >= 2
    pdb = default_render.one("PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    anti = _pod(default_render)["affinity"]["podAntiAffinity"]
    (term,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"


@pytest.mark.parametrize(
    "setting", ["server.shutdownDelaySeconds=-1", "server.drainTimeoutSeconds=0"]
)
def test_out_of_range_stop_times_are_refused(renderer: Renderer, setting: str) -> None:
    err = renderer.fails("--set", setting)
    assert setting.split("=", maxsplit=1)[0].split(".")[1] in err
