"""``gpu-policy plan``: measurements and the cluster in, sizing tables and rollout files out.

The sizing itself is pure (``webhook.planning``, imported here and nowhere else in the
CLI); this command reads the measurements and the raw device-plugin config texts (kept verbatim
in the written ConfigMap), prints the inventory before and after with the sizing table, and
writes ``device-plugin-config.yaml``, ``label-nodes.sh`` and ``policy.yaml``.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, is_dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from webhook.cli.common import EXIT_OK, cluster_arguments, read_cluster
from webhook.cli.pools import rows as pool_rows
from webhook.cli.pools import text as pool_text
from webhook.cli.render import cell, table, to_json
from webhook.contract import DEVICE_PLUGIN_CONFIGMAP
from webhook.files import load_inventory, load_policy, read_text, single_document
from webhook.planning import (
    CONFIGMAP_FILE,
    DEFAULT_HEADROOM,
    Measurement,
    Plan,
    configmap_text,
    configmap_texts,
    existing_configs,
    label_script,
    make_plan,
    parse_headroom,
    parse_measure_arg,
    parse_measurements,
    planned_inventory,
    policy_text,
    pool_changes,
)
from webhook.policy import Inventory, Policy, PolicyError

DESCRIPTION = (
    "replicas = floor(GPU memory x (1 - headroom) / measured process memory); "
    "below 2 the GPU stays unshared. Prints the inventory before and after, the sizing, "
    "and warnings; --write-dir writes the device-plugin ConfigMap, the kubectl label "
    "commands and the matching policy."
)
LABEL_SCRIPT = "label-nodes.sh"
POLICY_FILE = "policy.yaml"
RULE = "replicas = floor(memory x (1 - headroom) / measured); below 2: not shared"


def read_measurements(
    measure: Sequence[str], files: Sequence[str]
) -> tuple[tuple[Measurement, ...], Fraction | None]:
    """``--measure`` values and measurement files: every measurement, and a file's headroom."""
    out = [parse_measure_arg(m) for m in measure]
    headroom = None
    for name in files:
        doc = single_document(read_text(name), source=name)
        found, file_headroom = parse_measurements(doc, source=name)
        out += found
        headroom = file_headroom if file_headroom is not None else headroom
    if not out:
        raise PolicyError("gpu-policy plan", "", "give --measure PRODUCT=MEMORY or --measurements")
    return tuple(out), headroom


def sizing_rows(plan: Plan) -> list[dict[str, Any]]:
    """One row per pool and resource, before and after."""
    rows = []
    for pool in plan.pools:
        for o in pool.offers:
            use = o.use_at_full_slots
            rows.append(
                {
                    "product": (o.offer.product or pool.pool.name).removesuffix("-SHARED"),
                    "resource": o.offer.form.original,
                    "config_before": pool.pool.config_key,
                    "config_after": pool.key_after,
                    "memory_mib": o.offer.memory_mib,
                    "measured_mib": None if o.measured is None else o.measured.memory_mib,
                    "workload": None if o.measured is None else o.measured.workload,
                    "replicas_before": o.offer.replicas,
                    "replicas_after": o.replicas_after,
                    "slots_before": o.slots_before,
                    "slots_after": o.slots_after,
                    "memory_per_slot_mib": o.memory_per_slot,
                    "headroom_per_slot_mib": o.headroom_per_slot,
                    "use_at_full_slots": None if use is None else round(use, 4),
                }
            )
    return rows


SIZING_HEADERS = (
    "PRODUCT",
    "RESOURCE",
    "CONFIG",
    "MIB/GPU",
    "MEASURED",
    "REPLICAS",
    "SLOTS",
    "MIB/SLOT",
    "HEADROOM/SLOT",
    "USE AT FULL SLOTS",
)


def sizing_table(plan: Plan) -> str:
    """The sizing table for a terminal."""
    data = []
    for r in sizing_rows(plan):
        use = r["use_at_full_slots"]
        data.append(
            [
                r["product"],
                r["resource"],
                f"{cell(r['config_before'])} -> {cell(r['config_after'])}",
                cell(r["memory_mib"]),
                cell(r["measured_mib"]),
                f"{r['replicas_before']} -> {r['replicas_after']}",
                f"{r['slots_before']} -> {r['slots_after']}",
                cell(r["memory_per_slot_mib"]),
                cell(r["headroom_per_slot_mib"]),
                "-" if use is None else f"{use * 100:.1f} %",
            ]
        )
    lines = table(SIZING_HEADERS, data)
    before, after = plan.slots()
    lines.append(f"GPU slots: {before} -> {after}")
    return "\n".join(lines) + "\n"


def _headroom_text(headroom: Fraction) -> str:
    return f"{float(headroom * 100):g} %"


def render_text(
    plan: Plan, before: str, after: str, written: Iterable[Path], changes: Sequence[str] = ()
) -> str:
    """Before view, after view, sizing table, the pools it changes, warnings, files written."""
    parts = [
        "BEFORE",
        before.rstrip("\n"),
        "",
        f"AFTER (headroom {_headroom_text(plan.headroom)} of each GPU's memory)",
        after.rstrip("\n"),
        "",
        f"SIZING ({RULE})",
        sizing_table(plan).rstrip("\n"),
    ]
    if changes:
        parts += ["", "POOLS THE CHANGE AFFECTS", *(f"- {c}" for c in changes)]
    if plan.warnings:
        parts.append("")
        parts += [f"warning: {w}" for w in plan.warnings]
    files = list(written)
    if files:
        parts.append("")
        parts += [f"wrote {p}" for p in files]
    return "\n".join(parts) + "\n"


def _plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    return value


def render_json(
    plan: Plan,
    before: Sequence[Any],
    after: Sequence[Any],
    written: Iterable[Path],
    changes: Sequence[str] = (),
) -> str:
    """The same as ``render_text``, as one JSON document."""
    slots = plan.slots()
    return to_json(
        {
            "headroom": float(plan.headroom),
            "rule": RULE,
            "before": [_plain(r) for r in before],
            "after": [_plain(r) for r in after],
            "sizing": sizing_rows(plan),
            "slots": {"before": slots[0], "after": slots[1]},
            "configs": plan.configs,
            "labels": [{"node": n, "config": k} for n, k in plan.labels],
            "pool_changes": list(changes),
            "warnings": [{"code": w.code, "subject": w.subject, "message": w.message}
                         for w in plan.warnings],
            "written": [str(p) for p in written],
        }
    )  # fmt: skip


def write_files(
    plan: Plan,
    policy: Policy,
    existing: Mapping[str, str],
    directory: str | Path,
    *,
    configmap: tuple[str, str],
) -> list[Path]:
    """Write the ConfigMap, the label commands and the matching policy into ``directory``."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    files = {
        CONFIGMAP_FILE: configmap_text(plan, existing, namespace=configmap[0], name=configmap[1]),
        LABEL_SCRIPT: label_script(plan, policy.node_label),
        POLICY_FILE: policy_text(plan, policy),
    }
    written = []
    for name, text in files.items():
        path = out / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    (out / LABEL_SCRIPT).chmod(0o755)
    return written


def add_parser(sub: Any) -> None:
    """Add the ``plan`` subcommand to the CLI's sub-parsers."""
    p = sub.add_parser(
        "plan",
        help="size time-slicing replicas from measured memory and write the rollout",
        description=DESCRIPTION,
    )
    cluster_arguments(p, required=True)
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
    p.set_defaults(func=run)


def _cluster(
    args: argparse.Namespace,
) -> tuple[Policy, Inventory, dict[str, str], tuple[str, str] | None]:
    """The policy, the inventory, the device-plugin config texts and the ConfigMap's place:
    from the live cluster with ``--kubeconfig``, else from the files."""
    policy = load_policy(args.policy)
    existing, where = existing_configs(policy)
    if not args.kubeconfig:
        return policy, load_inventory(policy, args.nodes), existing, where
    view, state = read_cluster(policy, args)
    live = state.configmap_document()
    if view.configmap_error is None and live is not None:
        existing, where = configmap_texts(live)
    return view.policy, view.inventory, existing, where


def run(args: argparse.Namespace) -> int:
    """Plan, print and (with ``--write-dir``) write."""
    policy, inventory, existing, configmap = _cluster(args)
    measurements, file_headroom = read_measurements(args.measure or (), args.measurements or ())
    if args.headroom is not None:
        headroom = parse_headroom(args.headroom)
    else:
        headroom = file_headroom if file_headroom is not None else DEFAULT_HEADROOM
    rename = None if args.rename_by_default is None else args.rename_by_default == "true"
    plan = make_plan(
        inventory,
        policy,
        measurements,
        headroom=headroom,
        rename_by_default=rename,
        existing=existing,
    )
    after = planned_inventory(plan, source="plan")
    where = configmap or DEVICE_PLUGIN_CONFIGMAP
    if args.configmap:
        ns, _, name = str(args.configmap).rpartition("/")
        where = (ns or where[0], name)
    written: list[Path] = []
    if args.write_dir:
        written = write_files(plan, policy, existing, args.write_dir, configmap=where)
    changes = pool_changes(plan, policy.node_label)
    if args.output == "json":
        before_rows, after_rows = pool_rows(inventory), pool_rows(after)
        print(render_json(plan, before_rows, after_rows, written, changes))
    else:
        before_text, after_text = pool_text(inventory), pool_text(after)
        print(render_text(plan, before_text, after_text, written, changes), end="")
    return EXIT_OK
