"""What people and programs read of an audit: table rows, the text table, the JSON document.

The table holds the findings that did not pass, most severe first, then the longest waiting
(the oldest): a pod stuck for a month comes before a warning about a label. Under each row
its message, the scheduler's own words when a pod waits, and the fix.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from webhook.audit.audit import AuditResult
from webhook.audit.findings import format_age

__all__ = [
    "API_VERSION",
    "KIND",
    "TableRow",
    "document",
    "placement_rows",
    "summary_line",
    "table_rows",
    "text",
]

API_VERSION = "gpu-policy.io/v1alpha1"
KIND = "AuditResult"
HEADERS = ("RESULT", "RULE", "NAMESPACE", "OBJECT", "PODS", "WAITING")
PLACEMENT_HEADERS = ("NAMESPACE", "OBJECT", "PODS", "EACH ASKS", "BOUND", "WAITING", "REFUSED")
#: Where messages wrap in the text table, and how many workloads its GPU PODS table lists.
WIDTH = 100
PLACEMENTS_SHOWN = 20


@dataclass(frozen=True, slots=True)
class TableRow:
    """One finding as the text table shows it."""

    result: str
    rule: str
    namespace: str
    object: str
    pods: str
    waiting: str
    message: str
    fix: str
    scheduler: str | None

    def cells(self) -> tuple[str, ...]:
        """The row's columns, in HEADERS' order."""
        return (self.result, self.rule, self.namespace, self.object, self.pods, self.waiting)


def table_rows(result: AuditResult, *, include_pass: bool = False) -> list[TableRow]:
    """The rows of the text table: findings that did not pass (all with include_pass)."""
    findings = result.findings if include_pass else result.problems()
    return [
        TableRow(
            result=f.result,
            rule=f.rule,
            namespace=f.subject.namespace or "-",
            object=f"{f.subject.kind}/{f.subject.name}" if f.subject.name else f.subject.kind,
            pods=str(f.pods) if f.pods else "-",
            waiting=format_age(f.waiting),
            message=f.message,
            fix=f.fix,
            scheduler=f.scheduler,
        )
        for f in findings
    ]


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def summary_line(result: AuditResult) -> str:
    """``1 fail, 0 error, 2 warn, 0 skip, 25 pass; 2 GPU workloads, 4 GPU pods (...)``."""
    counts = result.summary()
    order = ("fail", "error", "warn", "skip", "pass")
    parts = ", ".join(f"{counts[r]} {r}" for r in order)
    pods = (
        f"{_count(result.gpu_pods, 'GPU pod')} ({result.bound} bound, {result.waiting} waiting, "
        f"{result.refused} refused by the kubelet)"
    )
    slots = f"GPU slots: {result.held} of {result.slots} held"
    return f"{parts}; {_count(result.workloads, 'GPU workload')}, {pods}; {slots}"


def _table(headers: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in (headers, *rows)
    ]


def _wrapped(label: str, body: str) -> list[str]:
    # Pod names and resource names hold hyphens and dots: wrap at spaces only.
    lines = textwrap.wrap(
        f"{label}{body}",
        width=WIDTH,
        initial_indent="  ",
        subsequent_indent="    ",
        break_long_words=False,
        break_on_hyphens=False,
    )
    return lines or [f"  {label}"]


def placement_rows(result: AuditResult, *, limit: int = PLACEMENTS_SHOWN) -> list[tuple[str, ...]]:
    """Where each GPU workload's pods are, waiting ones first: the GPU PODS table's rows."""
    ordered = sorted(
        result.placements,
        key=lambda p: (
            -(p.waiting + p.refused),
            p.waiting_since.timestamp() if p.waiting_since else 0.0,
            p.subject.namespace or "",
            p.subject.name,
        ),
    )
    rows: list[tuple[str, ...]] = []
    for p in ordered[:limit]:
        asks = ", ".join(f"{r}: {n}" for r, n in p.requests.items()) or "-"
        bound = ", ".join(f"{node} ({n})" for node, n in p.bound.items()) or "-"
        rows.append(
            (
                p.subject.namespace or "-",
                f"{p.subject.kind}/{p.subject.name}",
                str(p.pods),
                asks,
                bound,
                str(p.waiting),
                str(p.refused),
            )
        )
    return rows


def _plain(result: str, cell: str) -> str:
    return cell


def text(
    result: AuditResult,
    *,
    include_pass: bool = False,
    paint: Callable[[str, str], str] = _plain,
) -> str:
    """The findings as a table (message, scheduler message and fix under each row), then
    where each GPU workload's pods are, a summary line and what was audited.

    ``paint(result, cell)`` decorates the RESULT cells (a terminal's colours: the shell's
    business); the default leaves them plain.
    """
    rows = table_rows(result, include_pass=include_pass)

    lines = []
    if rows:
        table = _table(HEADERS, [r.cells() for r in rows])
        lines.append(table[0])
        for row, line in zip(rows, table[1:], strict=True):
            lines.append(paint(row.result, line[: len(row.result)]) + line[len(row.result) :])
            lines += _wrapped("", row.message)
            if row.scheduler:
                lines += _wrapped("scheduler: ", f'"{row.scheduler}"')
            if row.fix:
                lines += _wrapped("fix: ", row.fix)
    else:
        lines.append("no findings: every GPU workload and node passes")
    placements = placement_rows(result)
    if placements:
        lines.append("")
        lines.append("GPU PODS")
        lines += _table(PLACEMENT_HEADERS, placements)
        hidden = len(result.placements) - len(placements)
        if hidden > 0:
            lines.append(f"and {hidden} more GPU workloads (-o json lists them all)")
    lines.append("")
    lines.append(summary_line(result))
    lines.append(
        f"policy: {result.policy_source}; inventory: {result.inventory_source} "
        f"({result.inventory_summary}); at {result.now:%Y-%m-%dT%H:%M:%SZ}"
    )
    return "\n".join(lines) + "\n"


def document(result: AuditResult, *, include_pass: bool = False) -> dict[str, Any]:
    """The JSON document (``-o json``): summary, counts and the findings that did not pass."""
    findings = result.findings if include_pass else result.problems()
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "time": result.now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "policy": {"name": result.policy, "source": result.policy_source},
        "inventory": {"source": result.inventory_source, "summary": result.inventory_summary},
        "scanned": dict(result.scanned),
        "workloads": [p.as_dict() for p in result.placements],
        "pods": {
            "gpu": result.gpu_pods,
            "bound": result.bound,
            "waiting": result.waiting,
            "refused": result.refused,
        },
        "slots": {"total": result.slots, "held": result.held},
        "summary": result.summary(),
        "exitStatus": result.exit_status(),
        "findings": [f.as_dict() for f in findings],
    }
