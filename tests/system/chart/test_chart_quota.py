"""The chart with GPU budgets (quota.enabled, docs/quota.md): policy, webhook and RBAC agree."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
import yaml

from tests.support.chart_helpers import CASES, FULLNAME, Renderer
from webhook.policy.model import parse_policy


@pytest.fixture(scope="module")
def quota_render(renderer: Renderer) -> Any:
    return renderer.render_case(CASES["ci/quota-values.yaml"])


def test_the_rendered_policy_charges_pods(quota_render: Any) -> None:
    cm = quota_render.one("ConfigMap", f"{FULLNAME}-policy")
    policy = parse_policy(yaml.safe_load(cm["data"]["policy.yaml"]), source="chart policy.yaml")
    assert policy.quota.enabled
    assert policy.quota.mig_share == "memory"
    assert policy.quota.weights == {"nvidia.com/gpu.shared": Fraction(1, 4)}


def test_the_server_may_patch_node_status_and_nothing_more(
    quota_render: Any, default_render: Any
) -> None:
    def writes(rendered: Any) -> list[dict[str, Any]]:
        role = rendered.one("ClusterRole", FULLNAME)
        return [r for r in role["rules"] if set(r["verbs"]) - {"get", "list", "watch"}]

    assert writes(default_render) == []
    assert writes(quota_render) == [
        {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]}
    ]
    # And it reads the budgets, so that its warning names them.
    role = quota_render.one("ClusterRole", FULLNAME)
    assert {"apiGroups": [""], "resources": ["resourcequotas"], "verbs": ["list"]} in role["rules"]


def test_pods_with_claims_reach_the_mutating_webhook(
    quota_render: Any, default_render: Any
) -> None:
    def mutating(rendered: Any) -> str:
        (config,) = rendered.all("MutatingWebhookConfiguration")
        hook = next(h for h in config["webhooks"] if h["name"].startswith("pods.mutate"))
        return " ".join(c["expression"] for c in hook["matchConditions"])

    assert "resourceClaims" not in mutating(default_render)
    assert "size(object.spec.resourceClaims) > 0" in mutating(quota_render)


def test_quota_without_watching_the_cluster_fails(renderer: Renderer) -> None:
    error = renderer.fails("--set", "quota.enabled=true", "--set", "server.watchCluster=false")
    assert "quota.enabled needs server.watchCluster" in error
