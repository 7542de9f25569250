"""``gpu-policy migrate plan|check``: move a cluster from the device plugin to DRA, node by node.

``plan`` reads the cluster (``--kubeconfig``, or ``--nodes`` with ``--objects`` dumps), and
prints the plan and, with ``--write-dir``, writes it: ``deviceclasses.yaml``, ``workloads/``
(ResourceClaimTemplates and rewritten workloads), ``resourcequotas.yaml``, ``steps/`` (the
ResourceSlice the driver will publish on each node) and ``plan.json``. ``check`` judges a
cluster mid-way: dual-published nodes, GPUs given twice, and (``--plan DIR``) each step's
state. The planning is pure (``webhook.planning.migrate``; docs/migrate.md).

Exit status: 0 fine; 1 ``check`` found a GPU given twice or a step left a node dual-published,
or ``plan`` found pods that no longer fit; 2 a usage, file or cluster error.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webhook.cli.common import EXIT_FAILED, EXIT_OK, UsageError
from webhook.cli.render import to_json, to_yaml
from webhook.files import cluster_from_text, kubernetes_objects, load_policy, read_text
from webhook.planning.migrate import check, check_text, document, files, make_migration, plan_text
from webhook.policy import Inventory, Policy
from webhook.policy.supply import Supply
from webhook.policy.supply.assemble import DraObjects, assemble

_DRA = ("DeviceClass", "ResourceSlice", "ResourceClaim", "ResourceClaimTemplate")


def add_parser(sub: Any) -> None:
    """Add the ``migrate`` subcommand (``plan``, ``check``) to the CLI's sub-parsers."""
    p = sub.add_parser(
        "migrate",
        help="move the cluster from the device plugin to DRA, node by node",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, helptext in (
        ("plan", "write the DeviceClasses, templates, rewritten workloads, quotas and steps"),
        ("check", "dual-published nodes, GPUs given twice, and each step's state"),
    ):
        q = actions.add_parser(name, help=helptext, description=helptext)
        q.add_argument("--kubeconfig", metavar="FILE", help="read the live cluster")
        q.add_argument("--context", help="kubeconfig context (default: the current one)")
        q.add_argument(
            "--nodes", metavar="FILE", help="node dump (with DeviceClasses, ResourceSlices)"
        )
        q.add_argument(
            "--objects",
            metavar="FILE",
            nargs="+",
            default=[],
            help="dumps of pods, workloads, ResourceQuotas, ResourceClaims (with --nodes)",
        )
        q.add_argument("--policy", help="policy file; default: the bundled example")
        q.add_argument("-o", "--output", choices=("text", "json"), default="text")
        if name == "plan":
            q.add_argument("--write-dir", metavar="DIR", help="write the plan's files here")
        else:
            q.add_argument("--plan", metavar="DIR", help="a plan's directory: judge its steps")
    p.set_defaults(func=run)


@dataclass
class _Cluster:
    nodes: list[dict[str, Any]] = field(default_factory=list)
    objects: list[dict[str, Any]] = field(default_factory=list)
    quotas: list[dict[str, Any]] = field(default_factory=list)
    dra: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: {k: [] for k in _DRA})


def _from_dumps(args: argparse.Namespace) -> _Cluster:
    out = _Cluster()
    dump = cluster_from_text(read_text(args.nodes), source=args.nodes)
    out.nodes = dump.nodes
    for kind, objects in dump.by_kind.items():
        out.dra.setdefault(kind, []).extend(objects)
    for path in args.objects:
        for doc in kubernetes_objects(read_text(path), source=path):
            obj = doc.value
            kind = obj.get("kind")
            if kind == "ResourceQuota":
                out.quotas.append(obj)
            elif kind in _DRA:
                out.dra[str(kind)].append(obj)
            else:
                out.objects.append(obj)
    return out


def _from_cluster(args: argparse.Namespace) -> _Cluster:
    from webhook.kube.lister import ClusterError, connect_audit
    from webhook.kube.migrate import read_for_migrate

    try:
        api = connect_audit(args.kubeconfig, args.context)
        try:
            read = read_for_migrate(api)
        finally:
            api.close()  # type: ignore[no-untyped-call]  # untyped upstream
    except ClusterError as exc:
        raise UsageError(str(exc), command="migrate") from None
    out = _Cluster(read.nodes, read.objects, read.quotas)
    for kind, objects in read.dra.items():
        out.dra[kind] = list(objects)
    return out


def _read(args: argparse.Namespace) -> _Cluster:
    if args.kubeconfig and (args.nodes or args.objects):
        raise UsageError("give --kubeconfig or --nodes/--objects, not both", command="migrate")
    if args.kubeconfig:
        return _from_cluster(args)
    if not args.nodes:
        raise UsageError(
            "give --kubeconfig FILE, or --nodes FILE [--objects FILE...]", command="migrate"
        )
    return _from_dumps(args)


def _inventory(
    policy: Policy,
    nodes: Sequence[Mapping[str, Any]],
    dra: Mapping[str, Sequence[Any]],
    source: str,
) -> Inventory:
    objects = DraObjects(*(list(dra.get(k, ())) for k in _DRA))
    return assemble(policy, nodes=nodes, source=source, dra=objects)


def _supply_of(policy: Policy, cluster: _Cluster) -> Any:
    """The recipe of a cluster state's supply: the cluster's DRA objects plus ``extra``."""

    def supply_of(nodes: Sequence[Mapping[str, Any]], extra: Sequence[Mapping[str, Any]]) -> Supply:
        dra = {k: list(v) for k, v in cluster.dra.items()}
        for obj in extra:
            dra.setdefault(str(obj.get("kind")), []).append(dict(obj))
        found = _inventory(policy, nodes, dra, "plan").supply
        assert found is not None  # assemble always attaches one
        return found

    return supply_of


def _write(
    directory: Path, written: Mapping[str, list[dict[str, Any]]], plan: dict[str, Any]
) -> None:
    for rel, objects in written.items():
        path = directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join("---\n" + to_yaml(o) for o in objects), encoding="utf-8")
    (directory / "plan.json").write_text(to_json(plan) + "\n", encoding="utf-8")


def _plan(args: argparse.Namespace, policy: Policy, cluster: _Cluster) -> int:
    inventory = _inventory(policy, cluster.nodes, cluster.dra, "cluster")
    specs = inventory.dra.claim_specs if inventory.dra is not None else {}
    migration = make_migration(
        inventory,
        cluster.nodes,
        cluster.objects,
        cluster.quotas,
        _supply_of(policy, cluster),
        specs,
    )
    plan = document(migration)
    if args.write_dir:
        _write(Path(args.write_dir), files(migration), plan)
    print(
        to_json(plan) if args.output == "json" else plan_text(migration),
        end="\n" if args.output == "json" else "",
    )
    return EXIT_FAILED if migration.lost else EXIT_OK


def _steps(directory: str | None) -> list[dict[str, Any]]:
    if directory is None:
        return []
    path = Path(directory) / "plan.json"
    try:
        plan = json.loads(path.read_text(encoding="utf-8"))
        return [dict(s) for s in plan.get("steps", ())]
    except (OSError, ValueError, AttributeError, TypeError) as exc:
        raise UsageError(
            f"--plan {directory}: cannot read plan.json: {exc}", command="migrate"
        ) from None


def _check(args: argparse.Namespace, policy: Policy, cluster: _Cluster) -> int:
    inventory = _inventory(policy, cluster.nodes, cluster.dra, "cluster")
    pods = [o for o in cluster.objects if o.get("kind") == "Pod"]
    result = check(inventory, pods, _steps(args.plan))
    print(
        to_json(result.document()) if args.output == "json" else check_text(result),
        end="\n" if args.output == "json" else "",
    )
    return EXIT_FAILED if result.failed else EXIT_OK


def run(args: argparse.Namespace) -> int:
    """Plan or check; the exit status says whether something needs a person."""
    policy = load_policy(args.policy)
    cluster = _read(args)
    if args.action == "plan":
        return _plan(args, policy, cluster)
    return _check(args, policy, cluster)
