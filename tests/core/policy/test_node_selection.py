"""``mutation.injectNodeSelection``: when the webhook writes the product selection down."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from tests.objects import gpu, pod
from tests.support.paths import REPO
from webhook.files import load_inventory, load_policy
from webhook.policy import PolicyError, parse_policy, review

CLUSTERS = REPO / "examples" / "clusters"
BOTH = "node affinity nvidia.com/gpu.product In (NVIDIA-L20-SHARED, Tesla-T4-SHARED)"
T4 = "nodeSelector nvidia.com/gpu.product=Tesla-T4-SHARED"
SHARED = {"gpu-policy.io/sharing": "shared"}
ON_T4 = {"gpu-policy.io/product": "Tesla-T4"}


@pytest.mark.parametrize(
    ("mode", "annotations", "selection"),
    [
        # Both products are shared: nvidia.com/gpu alone reaches the right nodes.
        ("intent", {}, None),
        ("when-needed", {}, None),
        ("always", {}, BOTH),
        ("never", {}, None),
        # The pod says it wants a shared GPU: intent writes it down.
        ("intent", SHARED, BOTH),
        ("when-needed", SHARED, None),
        ("always", SHARED, BOTH),
        ("never", SHARED, None),
        # One product of two: the name alone would reach the L20s too.
        ("intent", ON_T4, T4),
        ("when-needed", ON_T4, T4),
        ("always", ON_T4, T4),
        ("never", ON_T4, None),
    ],
    ids=str,
)
def test_modes_on_a_time_sliced_cluster(
    mode: str, annotations: dict[str, str], selection: str | None
) -> None:
    policy = load_policy(CLUSTERS / "seed003-l20-t4" / "policy.yaml")
    inventory = load_inventory(policy, CLUSTERS / "seed003-l20-t4" / "nodes.yaml")
    decision = review(
        pod(gpu(1), annotations=annotations),
        policy=replace(policy, inject_node_selection=mode),  # type: ignore[arg-type]
        inventory=inventory,
    )
    assert decision.allowed, decision.denial
    chosen = [c for c in decision.changes if c.startswith(("nodeSelector", "node affinity"))]
    assert chosen == ([selection] if selection else [])


@pytest.mark.parametrize(
    ("mode", "selected"),
    [("intent", True), ("when-needed", False), ("always", True), ("never", False)],
    ids=str,
)
def test_a_renamed_resource_keeps_the_product_under_intent(mode: str, selected: bool) -> None:
    """nvidia.com/gpu becomes gpu.shared: under intent the pod keeps the product it got."""
    policy = load_policy(CLUSTERS / "renamed-shared" / "policy.yaml")
    inventory = load_inventory(policy, CLUSTERS / "renamed-shared" / "nodes.yaml")
    # The default intent "shared" renames the request; the pod itself states nothing.
    shared_by_default = replace(policy, default_intent="shared", inject_node_selection=mode)
    decision = review(pod(gpu(1)), policy=shared_by_default, inventory=inventory)  # type: ignore[arg-type]
    assert any(c.startswith("container") and "->" in c for c in decision.changes)
    assert ("nodeSelector nvidia.com/gpu.product=Tesla-T4" in decision.changes) is selected


POLICY = """\
apiVersion: gpu-policy.io/v1alpha1
kind: SharingPolicy
spec:
  devicePlugin:
    config: {{version: v1, sharing: {{timeSlicing: {{resources: [{{name: nvidia.com/gpu, replicas: 2}}]}}}}}}
  mutation: {{injectNodeSelection: {value}}}
"""


@pytest.mark.parametrize(
    ("value", "mode"),
    [
        ("intent", "intent"),
        ("always", "always"),
        ("when-needed", "when-needed"),
        ("never", "never"),
        ("true", "intent"),
        ("false", "never"),
        ("null", "intent"),
    ],
    ids=str,
)
def test_values_and_aliases(value: str, mode: str) -> None:
    policy = parse_policy(yaml.safe_load(POLICY.format(value=value)), source="p.yaml")
    assert policy.inject_node_selection == mode


def test_an_unknown_mode_is_refused_with_the_choices() -> None:
    with pytest.raises(
        PolicyError, match=r"injectNodeSelection.*intent, always, when-needed, never"
    ):
        parse_policy(yaml.safe_load(POLICY.format(value="sometimes")), source="p.yaml")
