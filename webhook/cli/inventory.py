"""``gpu-policy inventory``: what the cluster offers per pool, what running pods hold, what is free.

The view a cluster admin wants before and after a sharing rollout: per pool
(config key and GPU model) the nodes, product, physical GPUs, sharing strategy, replicas, the
advertised resource, its slots, the slots requested by running pods and the free ones; then the
total ("GPU slots: 11 (NVIDIA-L20 x 8 + Tesla-T4 x 3)") and any label/allocatable disagreement.
ORIGIN says where each pool comes from: the nodes, the policy (``spec.pools``) or a Karpenter
NodePool, with an autoscaled pool's bounds; a pool with no node yet shows 0 nodes and slots.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from webhook.cli.common import EXIT_OK, cluster_arguments, print_plugin_warnings, read_cluster
from webhook.cli.pools import as_json, text
from webhook.cli.render import to_json, to_yaml
from webhook.files import kubernetes_objects, load_inventory, load_policy, read_text
from webhook.policy import Inventory

DESCRIPTION = (
    "Per pool (config key and GPU model): nodes, product, physical GPUs, "
    "sharing, replicas, advertised resource, slots, slots held by running pods, free."
)


def add_parser(sub: Any) -> None:
    """Add the ``inventory`` subcommand to the CLI's sub-parsers."""
    p = sub.add_parser(
        "inventory",
        help="what the cluster offers per pool, what pods hold, what is free",
        description=DESCRIPTION,
    )
    cluster_arguments(p, required=False)
    p.add_argument("--pods", help="a pod dump (kubectl get pods -A -o yaml) for --nodes")
    p.add_argument("-o", "--output", choices=("table", "json"), default="table")
    p.add_argument(
        "--gpu-node-taints",
        action="store_true",
        help="print the chart value webhook.isolation.gpuNodeTaints for this cluster's GPU "
        "nodes instead (docs/isolation.md)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the pools of the live cluster, or of a node dump (with a pod dump's usage)."""
    policy = load_policy(args.policy)
    pods: list[Any] = []
    if args.kubeconfig:
        view, state = read_cluster(policy, args)
        # The live ConfigMap's configs when the cluster has one the plugin accepts.
        print_plugin_warnings(view.policy if view.configmap_error is None else policy)
        inventory, pods = view.inventory, list(state.gpu_pods)
    else:
        print_plugin_warnings(policy)
        inventory = load_inventory(policy, args.nodes)
        if args.pods:
            pods = [d.value for d in kubernetes_objects(read_text(args.pods), source=args.pods)]
    budgets: list[Any] | None = None
    if args.kubeconfig and view.policy.quota.enabled and not args.gpu_node_taints:
        # GPU budgets per namespace (docs/quota.md): the quotas and every pod, listed once.
        from webhook.cli.budgets import live_budgets

        budgets = live_budgets(args.kubeconfig, None, view.policy, inventory, timeout=args.timeout)
    if args.gpu_node_taints:
        print(gpu_node_taints(inventory), end="")
    elif args.output == "json":
        from webhook.cli.budgets import budget_json

        found = json.loads(as_json(inventory, pods))
        if budgets is not None:
            found["budgets"] = budget_json(budgets)
        print(to_json(found))
    else:
        print(text(inventory, pods), end="")
        if budgets is not None:
            from webhook.cli.budgets import budget_lines

            print("\n".join(budget_lines(budgets)))
    return EXIT_OK


def gpu_node_taints(inventory: Inventory) -> str:
    """The chart's ``webhook.isolation.gpuNodeTaints`` for the inventory's GPU nodes, as YAML.

    One list per distinct set of NoSchedule / NoExecute taints; ``[]`` for untainted GPU nodes
    (every pod then reaches one, and every pod is sent to the webhook).
    """
    sets = [
        [
            {"key": t.key, **({"value": t.value} if t.value else {}), "effect": t.effect}
            for t in taints
        ]
        for taints in inventory.gpu_nodes.taint_sets()
    ]
    where = "the GPU nodes" if inventory.gpu_nodes.known else "the policy's tolerations"
    values = {"webhook": {"isolation": {"gpuNodeTaints": sets}}}
    return f"# From {where} ({inventory.source}).\n" + to_yaml(values)
