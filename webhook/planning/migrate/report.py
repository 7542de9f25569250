"""The plan and the check as a person reads them (``gpu-policy migrate plan|check``)."""

from __future__ import annotations

from webhook.planning.migrate.check import CheckResult
from webhook.planning.migrate.plan import Migration, step_commands


def plan_text(migration: Migration) -> str:
    """The readable report of a plan."""
    lines = ["DeviceClasses (deviceclasses.yaml):"]
    for c in migration.classes:
        how = (
            f"extendedResourceName {c.extended}"
            if c.extended
            else f"{c.sharing} x{c.replicas}: claims only"
        )
        lines.append(
            f"  {c.name}: serves {', '.join(c.serves)} ({how}); nodes {', '.join(c.nodes)}"
        )
    if migration.workloads:
        lines.append("Rewritten to claims (workloads/):")
        for w in migration.workloads:
            lines.append(f"  {w.key}: {'; '.join(w.rewrite.changes)}")
    if migration.quotas:
        lines.append("ResourceQuotas (resourcequotas.yaml):")
        for q in migration.quotas:
            hard = ", ".join(f"{k}: {v}" for k, v in sorted(q.obj["spec"]["hard"].items()))
            lines.append(f"  {q.namespace}/{q.name}: {hard}")
            lines += [f"    cannot be kept: {n}" for n in q.notes]
    lines.append("Cutover, one node a step:")
    for s in migration.steps:
        lines.append(f"  {s.number}. node {s.node}")
        lines += [f"       {c}" for c in step_commands(s)]
        for m in s.moves:
            where = f"-> {m.to}" if m.to else "-> fits no node"
            also = f" (fits on {', '.join(m.fits_on)})" if len(m.fits_on) > 1 else ""
            why = f": {m.reason}" if m.reason else ""
            lines.append(
                f"       pod {m.pod} ({m.form}) {m.source or 'pending'} {where}{also}{why}"
            )
    lost = migration.lost
    lines.append(
        f"{migration.pods} GPU pods; no longer fit after the last step: "
        + (", ".join(lost) if lost else "none")
    )
    lines += [f"note: {n}" for n in migration.notes]
    return "\n".join(lines) + "\n"


def check_text(result: CheckResult) -> str:
    """The readable report of a check."""
    lines = []
    if not result.dual:
        lines.append("dual-published nodes: none")
    for d in result.dual:
        lines.append(f"DUAL-PUBLISHED {d.describe()}")
    for a in result.doubles:
        lines.append(f"DOUBLE ALLOCATION {a.describe()}")
    for s in result.steps:
        lines.append(f"step {s.number} node {s.node}: {s.state}" + (f" ({s.why})" if s.why else ""))
    return "\n".join(lines) + "\n"
