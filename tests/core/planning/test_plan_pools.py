"""`gpu-policy plan` on autoscaled pools: which pools a sharing change affects, and what they need."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import yaml

from tests.support.paths import REPO
from webhook.contract import GPU_POLICY_API_VERSION, SHARING_POLICY_KIND
from webhook.files import load_inventory, load_policy
from webhook.planning import (
    configmap_text,
    existing_configs,
    make_plan,
    planned_inventory,
    policy_text,
    pool_changes,
)
from webhook.planning.measurements import Measurement
from webhook.policy import inventory_from_nodes
from webhook.policy.model import parse_policy
from webhook.policy.resources import ResourceForm

AUTOSCALED = REPO / "examples" / "clusters" / "autoscaled"
T4 = Measurement(4401, "Tesla-T4")


def test_a_pool_at_zero_is_sized_and_its_node_template_named() -> None:
    policy = load_policy(AUTOSCALED / "policy.yaml")
    inventory = load_inventory(policy, AUTOSCALED / "nodes.yaml")
    plan = make_plan(inventory, policy, [T4], headroom=Fraction(1, 10))
    (change,) = pool_changes(plan, policy.node_label)
    assert change.startswith("pool gpu-t4 (declared in ")
    assert "nvidia.com/gpu x4 -> x3" in change
    assert (
        "the nodes its autoscaler adds must carry nvidia.com/device-plugin.config=t4, "
        "nvidia.com/gpu.product=Tesla-T4-SHARED"
    ) in change
    # The planned view keeps the declared pool's name.
    assert [p.name for p in planned_inventory(plan).pools] == ["gpu-t4", "gpu-l4x4"]


def test_a_pool_moved_to_a_new_key_keeps_its_declaration_on_it(tmp_path: Path) -> None:
    doc = {
        "apiVersion": GPU_POLICY_API_VERSION,
        "kind": SHARING_POLICY_KIND,
        "metadata": {"name": "p"},
        "spec": {
            "devicePlugin": {"config": {"version": "v1"}},
            "pools": [
                {"name": "t4", "config": "default", "product": "Tesla-T4", "memoryMiB": 15360,
                 "maxNodes": 3},
                {"name": "l4", "config": "default", "product": "NVIDIA-L4", "maxNodes": 2},
            ],
        },
    }  # fmt: skip
    policy = parse_policy(doc, source="p.yaml")
    plan = make_plan(inventory_from_nodes([], policy, source="cluster"), policy, [T4])
    (change,) = pool_changes(plan, policy.node_label)
    assert "config key default -> tesla-t4" in change
    assert "nvidia.com/device-plugin.config=tesla-t4" in change
    assert "spec.pools config tesla-t4 in the written policy" in change
    written = yaml.safe_load(policy_text(plan, policy))
    assert written["spec"]["pools"] == [
        {"name": "t4", "config": "tesla-t4", "product": "Tesla-T4", "gpusPerNode": 1,
         "memoryMiB": 15360, "maxNodes": 3},
        {"name": "l4", "config": "default", "product": "NVIDIA-L4", "gpusPerNode": 1,
         "maxNodes": 2},
    ]  # fmt: skip
    # The written policy and ConfigMap load together: the moved pool's key is in the ConfigMap.
    (tmp_path / "policy.yaml").write_text(policy_text(plan, policy))
    (tmp_path / "device-plugin-config.yaml").write_text(
        configmap_text(plan, existing_configs(policy)[0])
    )
    reread = load_policy(tmp_path / "policy.yaml")
    assert [p.config for p in reread.pools] == ["tesla-t4", "default"]
    assert reread.configs["tesla-t4"].replicas(ResourceForm(None, False)) == 3


def test_gpus_driven_by_dra_are_not_sized_for_the_device_plugin() -> None:
    # The H100 node's GPUs come from NVIDIA's DRA driver: no device-plugin config runs there, so
    # the plan neither time-slices them nor relabels the node; the T4s are planned as before.
    mixed = AUTOSCALED.parent / "mixed-t4-dra-h100"
    policy = load_policy(mixed / "policy.yaml")
    inventory = load_inventory(policy, mixed / "nodes.yaml")
    h100 = Measurement(10240, "NVIDIA-H100-80GB-HBM3")
    plan = make_plan(inventory, policy, [T4, h100], headroom=Fraction(1, 10))
    changes = pool_changes(plan, policy.node_label)
    assert len(changes) == 1 and changes[0].startswith("pool default/Tesla-T4 (nodes)")
    assert not any("dgx-h100-01" in node for p in plan.pools for node in p.pool.nodes)
