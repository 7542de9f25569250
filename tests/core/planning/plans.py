"""Plans of the example clusters, shared by the planning tests."""

from __future__ import annotations

from typing import Any

from tests.support.paths import REPO
from webhook.files import load_policy, nodes_from_text
from webhook.planning import Measurement, Plan, make_plan
from webhook.policy import Policy, inventory_from_nodes

ROOT = REPO
CLUSTERS = ROOT / "examples" / "clusters"
# The per-process memory measured on the L20 and the T4 of examples/clusters/seed003-before.
SEED003 = (Measurement(4621, "NVIDIA-L20"), Measurement(4401, "Tesla-T4"))


def cluster(name: str) -> tuple[Policy, list[dict[str, Any]]]:
    """The policy and the nodes of ``examples/clusters/<name>``."""
    policy = load_policy(CLUSTERS / name / "policy.yaml")
    path = CLUSTERS / name / "nodes.yaml"
    return policy, nodes_from_text(path.read_text(), source=str(path))


def plan_for(
    name: str, measurements: Any, nodes: list[dict[str, Any]] | None = None, **kw: Any
) -> Plan:
    """The plan for an example cluster (its nodes, or ``nodes`` instead)."""
    policy, loaded = cluster(name)
    inventory = inventory_from_nodes(nodes if nodes is not None else loaded, policy, source=name)
    return make_plan(inventory, policy, measurements, **kw)
