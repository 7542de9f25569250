"""``gpu-policy audit``: what is already wrong or stuck in the cluster, and why, in GPU terms.

Reads a live cluster (``--kubeconfig``, ``--context``: listed page by page) or dumps
(``--nodes`` plus ``--objects``, the output of ``kubectl get pods,deployments,statefulsets,
daemonsets,replicasets,jobs,cronjobs -A -o yaml``), judges every GPU workload with the
webhook's engine and explains every GPU pod that waits (``webhook.audit``). Read-only.

Exit status: 0 nothing at fail level, 1 findings at fail level, 2 a usage, file or cluster
error (one line on stderr).
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from webhook.audit import APIS, AuditResult, Collector, audit, document, reports, text
from webhook.audit.owners import parse_time
from webhook.cli.main import UsageError, add_colour_argument, use_colour
from webhook.cli.render import paint, to_json, to_yaml
from webhook.cli.review import COLOURS
from webhook.files import kubernetes_objects, load_policy, nodes_from_text, read_text
from webhook.policy import Policy

DESCRIPTION = (
    "Judge the GPU workloads that already run with the webhook's policy, and say why GPU pods "
    "wait (held slots, missing resources, selectors, taints). Read-only. Exit 0: nothing at "
    "fail level; 1: findings at fail level; 2: usage, file or cluster error."
)
OUTPUTS = ("text", "json", "yaml", "reports")


def add_parser(sub: Any) -> None:
    """Add the ``audit`` subcommand to the CLI's sub-parsers."""
    p = sub.add_parser(
        "audit",
        help="what is already wrong or stuck in the cluster, and why",
        description=DESCRIPTION,
    )
    source = p.add_argument_group("where the cluster comes from (one of)")
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
        help="report kinds for -o reports: PolicyReport (wgpolicyk8s) or Report (openreports)",
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


def _check(args: argparse.Namespace) -> None:
    """The options fit together, or a UsageError says which do not."""
    if args.kubeconfig and (args.nodes or args.objects):
        raise UsageError("give --kubeconfig or --nodes/--objects, not both", command="audit")
    if args.context and not args.kubeconfig:
        raise UsageError("--context needs --kubeconfig", command="audit")
    if not args.kubeconfig and not (args.nodes and args.objects):
        raise UsageError(
            "give --kubeconfig FILE, or --nodes FILE with --objects FILE...", command="audit"
        )
    if args.page_size < 1:
        raise UsageError("--page-size must be at least 1", command="audit")


def from_dumps(policy: Policy, args: argparse.Namespace, now: datetime) -> AuditResult:
    """Audit the node dump and the object dumps."""
    nodes = nodes_from_text(read_text(args.nodes), source=args.nodes)
    collector = Collector()
    for path in args.objects:
        collector.add_all(d.value for d in kubernetes_objects(read_text(path), source=path))
    return audit(collector, nodes, policy=policy, now=now)


def from_cluster(policy: Policy, args: argparse.Namespace, now: datetime) -> AuditResult:
    """Audit the live cluster, read page by page."""
    # kubernetes is imported only for this mode.
    from webhook.kube.lister import ClusterError, read_for_audit

    collector = Collector()
    try:
        nodes = read_for_audit(
            args.kubeconfig,
            collector,
            context=args.context,
            page_size=args.page_size,
            timeout=args.timeout,
        )
    except ClusterError as exc:
        raise UsageError(str(exc), command="audit") from None
    return audit(collector, nodes, policy=policy, now=now)


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
    _check(args)
    now = _now(args.now)
    policy = load_policy(args.policy)
    result = from_cluster(policy, args, now) if args.kubeconfig else from_dumps(policy, args, now)
    print(render(result, args), end="")
    return result.exit_status()
