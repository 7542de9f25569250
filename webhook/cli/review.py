"""``gpu-policy review``: judge manifests offline with the engine the server runs, and report.

The report is text for people (verdict per object, the rules that did not pass, warnings, the
diff of what the webhook would change), or JSON or YAML for programs.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from webhook.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    add_colour_argument,
    print_plugin_warnings,
    use_colour,
)
from webhook.cli.render import COLOURS, paint, to_json, to_yaml
from webhook.files import Document, kubernetes_objects, load_inventory, load_policy, read_text
from webhook.policy import Decision, Inventory, Policy, review
from webhook.policy.claims import with_claim_objects

DESCRIPTION = "gpu-policy review: judge manifests offline with the same engine as the server."


def add_parser(sub: Any) -> None:
    """Add the ``review`` subcommand to the CLI's sub-parsers."""
    p = sub.add_parser("review", help="review manifests offline", description=DESCRIPTION)
    p.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="manifests (multi-document YAML); - reads stdin",
    )
    p.add_argument(
        "--policy",
        help="policy file (SharingPolicy, device-plugin ConfigMap or config file); "
        "default: the bundled example",
    )
    p.add_argument("--nodes", help="node dump (kubectl get nodes -o yaml) to use as the inventory")
    p.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text")
    p.add_argument("--operation", default="CREATE", choices=("CREATE", "UPDATE"))
    p.add_argument("-n", "--namespace", help="namespace for objects that name none")
    add_colour_argument(p)
    p.set_defaults(func=run)


def _objects(path: str) -> list[Document]:
    """The objects of a manifest file, or of stdin for ``-``."""
    if path == "-":
        return kubernetes_objects(sys.stdin.read(), source="<stdin>")
    return kubernetes_objects(read_text(path), source=path)


def review_objects(
    objects: list[dict[str, Any]],
    *,
    policy: Policy,
    inventory: Inventory,
    operation: str = "CREATE",
    namespace: str | None = None,
) -> list[tuple[dict[str, Any], Decision]]:
    """Each object with the engine's decision on it, as ``gpu-policy review`` judges the
    objects of its files together (a pod beside its claim template sees the template)."""
    if inventory.dra is not None:
        # A pod reviewed beside its ResourceClaimTemplate is judged on what the template asks.
        found = with_claim_objects(inventory.dra, objects, namespace=namespace)
        inventory = replace(inventory, dra=found)
    return [
        (
            obj,
            review(
                obj,
                policy=policy,
                inventory=inventory,
                operation=operation,
                namespace=namespace,
            ),
        )
        for obj in objects
    ]


def review_files(
    files: Iterable[str],
    *,
    policy_path: str | None,
    nodes_path: str | None,
    operation: str = "CREATE",
    namespace: str | None = None,
) -> list[tuple[dict[str, Any], Decision]]:
    """``gpu-policy review --policy P --nodes N FILES``: each object of the files with its
    decision (what :func:`run` prints)."""
    policy = load_policy(policy_path)
    inventory = load_inventory(policy, nodes_path)
    objects = [obj for path in files for _, obj in _objects(path)]
    return review_objects(
        objects, policy=policy, inventory=inventory, operation=operation, namespace=namespace
    )


def run(args: argparse.Namespace) -> int:
    """Review every object of every file; exit 1 when one is denied."""
    policy = load_policy(args.policy)
    print_plugin_warnings(policy)
    inventory = load_inventory(policy, args.nodes)
    objects = [obj for path in args.files for _, obj in _objects(path)]
    pairs = review_objects(
        objects,
        policy=policy,
        inventory=inventory,
        operation=args.operation,
        namespace=args.namespace,
    )
    decisions = [d for _, d in pairs]
    if args.output == "json":
        print(to_json([decision_dict(d) for d in decisions]))
    elif args.output == "yaml":
        print(to_yaml([decision_dict(d) for d in decisions]), end="")
    else:
        print(text_report(pairs, colour=use_colour(args.colour)), end="")
        denied = sum(not d.allowed for d in decisions)
        print(f"{len(decisions)} reviewed, {denied} denied")
        print(f"policy: {policy.source}; inventory: {inventory.source}")
    return EXIT_FAILED if any(not d.allowed for d in decisions) else EXIT_OK


def decision_dict(decision: Decision) -> dict[str, Any]:
    """The JSON shape of one reviewed object (``gpu-policy review -o json``)."""
    return {
        "kind": decision.kind,
        "namespace": decision.namespace,
        "name": decision.name,
        "allowed": decision.allowed,
        "enforcement": decision.enforcement,
        "results": [r.as_dict() for r in decision.results],
        "warnings": list(decision.warnings),
        "changes": list(decision.changes),
        "patch": list(decision.patch),
        "mutated": decision.mutated,
    }


def unified_diff(original: Mapping[str, Any], mutated: Mapping[str, Any], label: str) -> str:
    """A unified diff of the two objects as YAML, for reviews in a terminal."""
    lines = difflib.unified_diff(
        to_yaml(original).splitlines(keepends=True),
        to_yaml(mutated).splitlines(keepends=True),
        fromfile=f"{label} (submitted)",
        tofile=f"{label} (after the webhook)",
    )
    return "".join(lines)


def text_report(
    pairs: Iterable[tuple[Mapping[str, Any], Decision]], *, colour: bool = False
) -> str:
    """The human report: verdict per object, the rules that did not pass, warnings, the diff."""

    def painted(status: str, text: str) -> str:
        return paint(COLOURS[status], text, colour=colour)

    out: list[str] = []
    for obj, decision in pairs:
        ident = f"{decision.kind}/{decision.name or '?'}"
        if decision.namespace:
            ident += f" -n {decision.namespace}"
        skipped = all(r.status == "skip" for r in decision.results)
        verdict = "SKIPPED" if skipped else ("ALLOWED" if decision.allowed else "DENIED")
        status = "skip" if skipped else ("pass" if decision.allowed else "fail")
        out.append(f"{painted(status, verdict)} {ident}")
        for r in decision.results:
            if r.status in ("fail", "warn", "error") or skipped:
                out.append(f"  {painted(r.status, r.status.upper()):s} {r.rule}: {r.message}")
        for w in decision.warnings:
            if not w.startswith("["):
                out.append(f"  {painted('warn', 'WARNING')} {w}")
        if decision.mutated is not None:
            out.append("  changes: " + "; ".join(decision.changes))
            out.append(unified_diff(obj, decision.mutated, ident).rstrip("\n"))
        out.append("")
    return "\n".join(out)
