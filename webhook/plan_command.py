"""``gpu-policy plan``'s shell: measurements and config texts in, tables and rollout files out.

The sizing itself is pure (``webhook.planning``); this module reads the measurements file,
renders the sizing table and writes ``device-plugin-config.yaml``, ``label-nodes.sh`` and
``policy.yaml``.
``webhook.commands`` loads the policy and the inventory and hands in ``inventory_report``'s
renderers for the before/after views (this module sits beside it, and may not import it).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, is_dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml

from webhook.contract import DEVICE_PLUGIN_CONFIGMAP
from webhook.planning import (
    CONFIGMAP_FILE,
    DEFAULT_HEADROOM,
    Measurement,
    Plan,
    configmap_text,
    label_script,
    make_plan,
    parse_headroom,
    parse_measure_arg,
    parse_measurements,
    planned_inventory,
    policy_text,
)
from webhook.policy import Inventory, Policy, PolicyError

LABEL_SCRIPT = "label-nodes.sh"
POLICY_FILE = "policy.yaml"
RULE = "replicas = floor(memory x (1 - headroom) / measured); below 2: not shared"


def _load_yaml(text: str, source: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PolicyError(source, "", f"not valid YAML: {exc}") from None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError(str(path), "", f"cannot read: {exc.strerror or exc}") from None


def read_measurements(
    measure: Sequence[str], files: Sequence[str]
) -> tuple[tuple[Measurement, ...], Fraction | None]:
    """``--measure`` values and measurement files: every measurement, and a file's headroom."""
    out = [parse_measure_arg(m) for m in measure]
    headroom = None
    for name in files:
        found, file_headroom = parse_measurements(_load_yaml(_read(Path(name)), name), source=name)
        out += found
        headroom = file_headroom if file_headroom is not None else headroom
    if not out:
        raise PolicyError("gpu-policy plan", "", "give --measure PRODUCT=MEMORY or --measurements")
    return tuple(out), headroom


def sizing_rows(plan: Plan) -> list[dict[str, Any]]:
    """One row per pool and resource: seed 003's table, before and after."""
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


def _cell(v: Any) -> str:
    return "-" if v is None else str(v)


def sizing_table(plan: Plan) -> str:
    """The sizing table for a terminal."""
    headers = [
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
    ]
    data = []
    for r in sizing_rows(plan):
        use = r["use_at_full_slots"]
        data.append(
            [
                r["product"],
                r["resource"],
                f"{_cell(r['config_before'])} -> {_cell(r['config_after'])}",
                _cell(r["memory_mib"]),
                _cell(r["measured_mib"]),
                f"{r['replicas_before']} -> {r['replicas_after']}",
                f"{r['slots_before']} -> {r['slots_after']}",
                _cell(r["memory_per_slot_mib"]),
                _cell(r["headroom_per_slot_mib"]),
                "-" if use is None else f"{use * 100:.1f} %",
            ]
        )
    widths = [max(len(h), *(len(row[i]) for row in data)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in data
    ]
    before, after = plan.slots()
    lines.append(f"GPU slots: {before} -> {after}")
    return "\n".join(lines) + "\n"


def _headroom_text(headroom: Fraction) -> str:
    return f"{float(headroom * 100):g} %"


def render_text(plan: Plan, before: str, after: str, written: Iterable[Path]) -> str:
    """Before view, after view, sizing table, warnings and the files written."""
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
    plan: Plan, before: Sequence[Any], after: Sequence[Any], written: Iterable[Path]
) -> str:
    """The same as ``render_text``, as one JSON document."""
    slots = plan.slots()
    return json.dumps(
        {
            "headroom": float(plan.headroom),
            "rule": RULE,
            "before": [_plain(r) for r in before],
            "after": [_plain(r) for r in after],
            "sizing": sizing_rows(plan),
            "slots": {"before": slots[0], "after": slots[1]},
            "configs": plan.configs,
            "labels": [{"node": n, "config": k} for n, k in plan.labels],
            "warnings": [{"code": w.code, "subject": w.subject, "message": w.message}
                         for w in plan.warnings],
            "written": [str(p) for p in written],
        },
        indent=2,
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


def run(
    args: Any,
    policy: Policy,
    inventory: Inventory,
    *,
    existing: Mapping[str, str],
    configmap: tuple[str, str] | None,
    table: Callable[[Inventory], str],
    rows: Callable[[Inventory], Sequence[Any]],
) -> int:
    """Plan, print and (with ``--write-dir``) write; ``table``/``rows`` render an inventory."""
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
    if args.output == "json":
        print(render_json(plan, rows(inventory), rows(after), written))
    else:
        print(render_text(plan, table(inventory), table(after), written), end="")
    return 0
