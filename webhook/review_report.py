"""Turning Decisions into what people and programs read: text, JSON and YAML reports."""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from webhook.policy import Decision

# ANSI colour codes per status.
_COLOURS = dict(
    zip(("pass", "fail", "warn", "skip", "error"), ("32", "31", "33", "2", "35"), strict=True)
)


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


def _yaml(obj: Any) -> str:
    return yaml.safe_dump(obj, sort_keys=False, default_flow_style=False)


def unified_diff(original: Mapping[str, Any], mutated: Mapping[str, Any], label: str) -> str:
    """A unified diff of the two objects as YAML, for reviews in a terminal."""
    lines = difflib.unified_diff(
        _yaml(original).splitlines(keepends=True),
        _yaml(mutated).splitlines(keepends=True),
        fromfile=f"{label} (submitted)",
        tofile=f"{label} (after the webhook)",
    )
    return "".join(lines)


def text_report(
    pairs: Iterable[tuple[Mapping[str, Any], Decision]], *, colour: bool = False
) -> str:
    """The human report: verdict per object, the rules that did not pass, warnings, the diff."""

    def paint(status: str, text: str) -> str:
        return f"\033[{_COLOURS[status]}m{text}\033[0m" if colour else text

    out: list[str] = []
    for obj, decision in pairs:
        ident = f"{decision.kind}/{decision.name or '?'}"
        if decision.namespace:
            ident += f" -n {decision.namespace}"
        skipped = all(r.status == "skip" for r in decision.results)
        verdict = "SKIPPED" if skipped else ("ALLOWED" if decision.allowed else "DENIED")
        status = "skip" if skipped else ("pass" if decision.allowed else "fail")
        out.append(f"{paint(status, verdict)} {ident}")
        for r in decision.results:
            if r.status in ("fail", "warn", "error") or skipped:
                out.append(f"  {paint(r.status, r.status.upper()):s} {r.rule}: {r.message}")
        for w in decision.warnings:
            if not w.startswith("["):
                out.append(f"  {paint('warn', 'WARNING')} {w}")
        if decision.mutated is not None:
            out.append("  changes: " + "; ".join(decision.changes))
            out.append(unified_diff(obj, decision.mutated, ident).rstrip("\n"))
        out.append("")
    return "\n".join(out)


def json_report(decisions: Iterable[Decision]) -> str:
    """One JSON document: a list of objects (see decision_dict)."""
    return json.dumps([decision_dict(d) for d in decisions], indent=2, sort_keys=False)


def yaml_report(decisions: Iterable[Decision]) -> str:
    """The same as json_report, as YAML."""
    return _yaml([decision_dict(d) for d in decisions])
