"""Subcommands of ``gpu-policy`` beyond ``review``, each beside the code it drives.

Each entry takes the argparse sub-parsers object and adds one subcommand; imports happen
inside the handlers so that ``gpu-policy review`` never loads flask, gunicorn or kubernetes.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # kubernetes is imported only when a command reads a cluster
    from webhook.kube import ClusterState
    from webhook.kube.snapshot import LiveView
    from webhook.policy import Policy

REGISTRY: list[Callable[[Any], None]] = []


def register(func: Callable[[Any], None]) -> Callable[[Any], None]:
    """Add a subcommand registrar to the CLI."""
    REGISTRY.append(func)
    return func


@register
def _certs(sub: Any) -> None:
    p = sub.add_parser("certs", help="make a CA and a serving certificate for the webhook")
    p.add_argument("--out", default="certs/dev", help="directory for ca.crt, tls.crt, tls.key")
    p.add_argument("--service", default="gpu-policy-webhook")
    p.add_argument("--namespace", default="gpu-policy")
    p.add_argument("--days", type=int, default=365)
    p.add_argument("--if-missing", action="store_true", help="keep valid existing files")

    def run(args: argparse.Namespace) -> int:
        from webhook.tls import write_certs

        paths = write_certs(
            args.out,
            service=args.service,
            namespace=args.namespace,
            days=args.days,
            if_missing=args.if_missing,
        )
        print(f"CA: {paths.ca_cert}\ncertificate: {paths.cert}\nkey: {paths.key}")
        return 0

    p.set_defaults(func=run)


def _cluster_arguments(p: Any, *, required: bool) -> None:
    """Where the cluster comes from: a live API server or a node dump, and the policy."""
    source = p.add_mutually_exclusive_group(required=required)
    source.add_argument("--kubeconfig", help="read the live cluster (a kubeconfig path)")
    source.add_argument("--nodes", help="a node dump (kubectl get nodes -o yaml)")
    p.add_argument("--policy", help="policy file; default: the bundled example")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the cluster")


def _read_cluster(policy: Policy, args: argparse.Namespace) -> tuple[LiveView, ClusterState]:
    """The live view and snapshot for ``--kubeconfig``; a refused ConfigMap is warned about."""
    from webhook.kube.snapshot import read_cluster
    from webhook.policy import PolicyError

    found = read_cluster(policy, args.kubeconfig, timeout=args.timeout)
    if found is None:
        raise PolicyError(args.kubeconfig, "", f"the cluster did not answer in {args.timeout:g} s")
    view, state = found
    if view.configmap_error:
        print(f"warning: device-plugin ConfigMap refused: {view.configmap_error}", file=sys.stderr)
    return view, state


@register
def _inventory(sub: Any) -> None:
    p = sub.add_parser(
        "inventory",
        help="what the cluster offers per pool, what pods hold, what is free",
        description="Per pool (config key and GPU model): nodes, product, physical GPUs, "
        "sharing, replicas, advertised resource, slots, slots held by running pods, free.",
    )
    _cluster_arguments(p, required=False)
    p.add_argument("--pods", help="a pod dump (kubectl get pods -A -o yaml) for --nodes")
    p.add_argument("-o", "--output", choices=("table", "json"), default="table")

    def run(args: argparse.Namespace) -> int:
        from webhook import inventory_report
        from webhook.files import kubernetes_objects, load_inventory, load_policy, read_text

        policy = load_policy(args.policy)
        pods: list[Any] = []
        if args.kubeconfig:
            view, state = _read_cluster(policy, args)
            inventory, pods = view.inventory, list(state.gpu_pods)
        else:
            inventory = load_inventory(policy, args.nodes)
            if args.pods:
                pods = [d.value for d in kubernetes_objects(read_text(args.pods), source=args.pods)]
        render = inventory_report.as_json if args.output == "json" else inventory_report.text
        print(render(inventory, pods), end="" if args.output == "table" else "\n")
        return 0

    p.set_defaults(func=run)


@register
def _plan(sub: Any) -> None:
    p = sub.add_parser(
        "plan",
        help="size time-slicing replicas from measured memory and write the rollout",
        description="replicas = floor(GPU memory x (1 - headroom) / measured process memory); "
        "below 2 the GPU stays unshared. Prints the inventory before and after, the sizing, "
        "and warnings; --write-dir writes the device-plugin ConfigMap, the kubectl label "
        "commands and the matching policy.",
    )
    _cluster_arguments(p, required=True)
    p.add_argument(
        "--measure",
        action="append",
        metavar="PRODUCT=MEMORY",
        help="measured memory of one process on a product (NVIDIA-L20=4621Mi); repeatable",
    )
    p.add_argument(
        "--measurements",
        action="append",
        metavar="FILE",
        help="a Measurements YAML (workloads: / products:, optional headroom:)",
    )
    p.add_argument("--headroom", help="share of each GPU's memory kept free: 10%% (default) or 0.1")
    p.add_argument(
        "--rename-by-default",
        choices=("true", "false"),
        help="renameByDefault for planned keys; default: each pool's current setting",
    )
    p.add_argument(
        "--write-dir", help="write device-plugin-config.yaml, label-nodes.sh, policy.yaml"
    )
    p.add_argument("--configmap", metavar="NAMESPACE/NAME", help="the written ConfigMap's place")
    p.add_argument("-o", "--output", choices=("table", "json"), default="table")

    def run(args: argparse.Namespace) -> int:
        from webhook import inventory_report, plan_command
        from webhook.files import load_inventory, load_policy

        policy = load_policy(args.policy)
        existing, where = plan_command.existing_configs(args.policy)
        if args.kubeconfig:
            view, state = _read_cluster(policy, args)
            if view.configmap_error is None and state.configmap_document() is not None:
                existing, where = plan_command.configmap_texts(state.configmap_document())
            policy, inventory = view.policy, view.inventory
        else:
            inventory = load_inventory(policy, args.nodes)
        return plan_command.run(
            args,
            policy,
            inventory,
            existing=existing,
            configmap=where,
            table=inventory_report.text,
            rows=inventory_report.rows,
        )

    p.set_defaults(func=run)


@register
def _serve(sub: Any) -> None:
    # webhook.serve imports neither flask nor gunicorn until the command runs.
    from webhook.serve import add_parser

    add_parser(sub)


@register
def _test(sub: Any) -> None:
    # The harness imports neither flask nor kubernetes; the cluster mode's dry-run creates
    # live in webhook.kube (the only package that imports kubernetes) and are handed in here.
    from webhook.harness.command import add_test_parser

    def dry_run_factory(kubeconfig: str, context: str | None, timeout: float) -> Any:
        from webhook.kube.dryrun import DryRunCreator, connect

        return DryRunCreator(connect(kubeconfig, context), timeout=timeout)

    add_test_parser(sub, dry_run_factory)
