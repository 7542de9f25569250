"""``gpu-policy test -o json``: the results of a harness run as one JSON document.

For scripts and CI systems that read results without parsing the table: every case with what
it expected, what the review answered (verdict, failed rules, warnings, message, the object
after admission) and each difference. Two runs on the same suites give the same document but
for the ``seconds`` fields, so a diff of two documents shows what behaviour changed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from webhook.harness.report import display_path
from webhook.harness.run import CaseResult


def _answer(result: CaseResult) -> dict[str, Any] | None:
    got = result.observed
    if got is None:
        return None
    return {
        "summary": got.summary(),
        "allowed": got.allowed,
        "failed": list(got.failed),
        "warnings": list(got.warnings),
        "message": got.message,
        "changes": list(got.changes),
        "mutated": got.mutated,
        "error": got.error,
        "refusedByValidation": got.refused_by_validation,
        "policyRefused": got.policy_refused,
    }


def _case(result: CaseResult) -> dict[str, Any]:
    case = result.case
    return {
        "suite": case.suite,
        "case": case.name,
        "file": display_path(case.path),
        "line": case.line,
        "object": case.source,
        "status": result.status,
        "expected": case.expect.summary(),
        "got": _answer(result),
        "differences": [{"what": d.what, "detail": d.detail} for d in result.differences],
        "skipReason": result.skip_reason or None,
        "goldenWritten": (
            display_path(result.golden_written) if result.golden_written is not None else None
        ),
        "seconds": round(result.seconds, 6),
    }


def results_document(
    results: Sequence[CaseResult],
    problems: Sequence[object] = (),
    *,
    deselected: int = 0,
    seconds: float = 0.0,
    mode: str = "local",
) -> dict[str, Any]:
    """The whole run: mode, counts, every case in run order, every suite file problem."""
    counts = Counter(r.status for r in results)
    return {
        "mode": mode,
        "summary": {
            "passed": counts["pass"],
            "failed": counts["fail"],
            "skipped": counts["skip"],
            "errors": counts["error"],
            "deselected": deselected,
            "suiteFileErrors": len(problems),
            "seconds": round(seconds, 6),
        },
        "cases": [_case(r) for r in results],
        "problems": [str(p) for p in problems],
    }
