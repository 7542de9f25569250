"""``gpu-policy audit``: what is already wrong or stuck in the cluster, and why, in GPU terms.

Reads a live cluster (``--kubeconfig``, ``--context``; in a pod with neither, the pod's
service account: listed page by page) or dumps (``--nodes`` plus ``--objects``, the output of
``kubectl get pods,deployments,statefulsets,daemonsets,replicasets,jobs,cronjobs -A -o
yaml``), judges every GPU workload with the webhook's engine and explains every GPU pod that
waits (``webhook.audit``). On a live cluster the policy's ``configMapRef`` is read as the
server reads it: the device-plugin ConfigMap replaces the policy file's configs. It never
changes a workload; ``--apply`` writes the reports (``webhook.kube.reports``).

Exit status: 0 nothing at fail level, 1 findings at fail level, 2 a usage, file or cluster
error (one line on stderr).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from webhook.audit import APIS, AuditResult, Collector, audit, document, reports, text
from webhook.audit.owners import parse_time
from webhook.cli.common import UsageError, add_colour_argument, in_pod, use_colour
from webhook.cli.render import COLOURS, paint, to_json, to_yaml
from webhook.files import cluster_from_text, kubernetes_objects, load_policy, read_text
from webhook.policy import Policy

if TYPE_CHECKING:
    from webhook.kube.reports import Applied

DESCRIPTION = (
    "Judge the GPU workloads that already run with the webhook's policy, and say why GPU pods "
    "wait (held slots, missing resources, selectors, taints). Never changes a workload; "
    "--apply writes the reports. Exit 0: nothing at fail level; 1: findings at fail level; "
    "2: usage, file or cluster error."
)
OUTPUTS = ("text", "json", "yaml", "reports")


def add_parser(sub: Any) -> None:
    """Add the ``audit`` subcommand to the CLI's sub-parsers."""
    p = sub.add_parser(
        "audit",
        help="what is already wrong or stuck in the cluster, and why",
        description=DESCRIPTION,
    )
    source = p.add_argument_group(
        "where the cluster comes from (one of; in a pod, neither: its service account)"
    )
    source.add_argument("--kubeconfig", metavar="FILE", help="read the live cluster")
    source.add_argument("--context", help="kubeconfig context (default: the current one)")
    source.add_argument("--nodes", metavar="FILE", help="a node dump (kubectl get nodes -o yaml)")
    source.add_argument(
        "--objects",
        metavar="FILE",
        nargs="+",
        help="dumps of kubectl get pods,deployments,statefulsets,daemonsets,replicasets,"
        "jobs,cronjobs -A -o yaml (with --nodes)",
    )
    p.add_argument("--policy", help="policy file; default: the bundled example")
    p.add_argument(
        "--now",
        metavar="RFC3339",
        help="the audit's clock, for a dump taken earlier (default: the current time)",
    )
    p.add_argument("-o", "--output", choices=OUTPUTS, default="text")
    p.add_argument(
        "--report-api",
        choices=tuple(APIS),
        default="wgpolicyk8s",
        help="report kinds for -o reports and --apply: PolicyReport (wgpolicyk8s) or Report "
        "(openreports)",
    )
    p.add_argument(
        "--apply",
        action="store_true",
        help="write the reports to the live cluster (server-side apply, field manager "
        "gpu-policy) and delete the ones an earlier run wrote that this run does not",
    )
    p.add_argument("--all", action="store_true", help="list passing findings too")
    p.add_argument("--page-size", type=int, default=500, help="objects per list request")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per cluster request")
    add_colour_argument(p)
    p.set_defaults(func=run)


def _now(value: str | None) -> datetime:
    """``--now`` parsed, or the current time."""
    if value is None:
        return datetime.now(UTC)
    parsed = parse_time(value)
    if parsed is None:
        raise UsageError(
            f"--now {value!r} is not an RFC 3339 time (e.g. 2025-07-14T08:18:53Z)",
            command="audit",
        )
    return parsed


def _live(args: argparse.Namespace) -> bool:
    """Whether the options say a live cluster (a kubeconfig, or in a pod no source at all).

    Raises UsageError when they fit together in no way.
    """
    dumps = bool(args.nodes or args.objects)
    if args.kubeconfig and dumps:
        raise UsageError("give --kubeconfig or --nodes/--objects, not both", command="audit")
    if args.context and not args.kubeconfig:
        raise UsageError("--context needs --kubeconfig", command="audit")
    if args.page_size < 1:
        raise UsageError("--page-size must be at least 1", command="audit")
    if args.kubeconfig or (not dumps and in_pod()):
        return True
    if not (args.nodes and args.objects):
        raise UsageError(
            "give --kubeconfig FILE, or --nodes FILE with --objects FILE...", command="audit"
        )
    if args.apply:
        raise UsageError(
            "--apply writes the reports to a live cluster: give --kubeconfig, not dumps "
            "(-o reports prints them)",
            command="audit",
        )
    return False


def _dump_policy_note(policy: Policy) -> str | None:
    """What a dump audit does with a policy whose device-plugin config lives in the cluster."""
    ref = policy.configmap_ref
    if ref is None:
        return None
    where = f"{ref.namespace}/{ref.name}"
    uses = (
        "the policy file's own device-plugin configs"
        if policy.configs
        else "no device-plugin config (only the nodes' labels and allocatable say how GPUs "
        "are shared)"
    )
    return (
        f"the policy's devicePlugin.configMapRef ({where}) is read from a live cluster only; "
        f"this dump audit uses {uses}. To judge with it, save it (kubectl get configmap -n "
        f"{ref.namespace} {ref.name} -o yaml > cm.yaml) and name it in the policy as "
        "devicePlugin.configMapFile: cm.yaml"
    )


def from_dumps(policy: Policy, args: argparse.Namespace, now: datetime) -> AuditResult:
    """Audit the node dump and the object dumps."""
    note = _dump_policy_note(policy)
    if note:
        print(f"warning: {note}", file=sys.stderr)
    # The node dump may carry the DRA objects too (kubectl get nodes,deviceclasses,...).
    dump = cluster_from_text(read_text(args.nodes), source=args.nodes)
    nodes = dump.nodes
    collector = Collector()
    for kind, objects in dump.by_kind.items():
        collector.add_all(objects, kind=kind)
    for path in args.objects:
        collector.add_all(d.value for d in kubernetes_objects(read_text(path), source=path))
    return audit(collector, nodes, policy=policy, now=now)


def from_cluster(policy: Policy, args: argparse.Namespace, now: datetime) -> int:
    """Audit the live cluster, read page by page; print it, and apply the reports if asked."""
    # kubernetes is imported only for this mode.
    from webhook.kube.lister import (
        ClusterError,
        connect_audit,
        read_configmap,
        read_for_audit,
        read_nodepools,
    )
    from webhook.kube.reports import apply_reports
    from webhook.kube.snapshot import with_configmap

    collector = Collector()
    try:
        api = connect_audit(args.kubeconfig, args.context)
        try:
            ref = policy.configmap_ref
            if ref is not None:
                where = (ref.namespace, ref.name)
                found = read_configmap(api, *where, timeout=args.timeout)
                if found is None:
                    # As the server: no ConfigMap, the policy file's configs (if any) apply.
                    print(
                        f"warning: the policy's devicePlugin.configMapRef {'/'.join(where)} "
                        "is not in the cluster: judging with the policy file's configs",
                        file=sys.stderr,
                    )
                policy, refused = with_configmap(policy, found, where)
                if refused:
                    # As the server and `inventory`: a ConfigMap that does not parse is not used.
                    print(f"warning: device-plugin ConfigMap refused: {refused}", file=sys.stderr)
            nodes = read_for_audit(api, collector, page_size=args.page_size, timeout=args.timeout)
            nodepools = read_nodepools(api, page_size=args.page_size, timeout=args.timeout)
            result = audit(collector, nodes, policy=policy, now=now, nodepools=nodepools)
            print(render(result, args), end="", flush=True)
            if policy.quota.enabled and args.output == "text":
                # GPU budgets per namespace (docs/quota.md).
                from webhook.cli.budgets import budget_lines
                from webhook.kube.quotas import read_budget_objects
                from webhook.policy.inventory import inventory_from_nodes
                from webhook.policy.quota.budgets import namespace_budgets

                quotas, pods = read_budget_objects(api, timeout=args.timeout)
                gpu_nodes = inventory_from_nodes(nodes, policy, source="the cluster")
                budgets = namespace_budgets(quotas, pods, policy=policy, inventory=gpu_nodes)
                print("\n".join(budget_lines(budgets)), flush=True)
            if args.apply:
                written = reports(result, api=args.report_api)
                applied = apply_reports(
                    api,
                    written,
                    api=args.report_api,
                    page_size=args.page_size,
                    timeout=args.timeout,
                )
                print(applied_line(applied), file=sys.stderr)
        finally:
            api.close()  # type: ignore[no-untyped-call]  # untyped upstream
    except ClusterError as exc:
        raise UsageError(str(exc), command="audit") from None
    return result.exit_status()


def _counted(labels: tuple[str, ...]) -> str:
    """``1 ClusterPolicyReport, 2 PolicyReports`` for ``Kind ns/name`` labels."""
    kinds = Counter(label.split(" ", 1)[0] for label in labels)
    return ", ".join(f"{n} {kind}{'s' if n != 1 else ''}" for kind, n in sorted(kinds.items()))


def applied_line(applied: Applied) -> str:
    """One line on what ``--apply`` wrote and deleted."""
    line = f"reports applied: {_counted(applied.applied)} (field manager gpu-policy)"
    if applied.deleted:
        line += f"; deleted, from an earlier run: {', '.join(applied.deleted)}"
    return line


def render(result: AuditResult, args: argparse.Namespace) -> str:
    """The result in the ``-o`` format."""
    if args.output == "json":
        return to_json(document(result, include_pass=args.all)) + "\n"
    if args.output == "yaml":
        return to_yaml(document(result, include_pass=args.all))
    if args.output == "reports":
        written = reports(result, api=args.report_api)
        return "".join("---\n" + to_yaml(report) for report in written)
    colour = use_colour(args.colour)
    return text(
        result,
        include_pass=args.all,
        paint=lambda res, cell: paint(COLOURS.get(res, "0"), cell, colour=colour),
    )


def run(args: argparse.Namespace) -> int:
    """Audit the cluster or the dumps, print the result, exit 1 on findings at fail level."""
    live = _live(args)
    now = _now(args.now)
    policy = load_policy(args.policy)
    if live:
        return from_cluster(policy, args, now)
    result = from_dumps(policy, args, now)
    print(render(result, args), end="")
    return result.exit_status()
