"""Running cases: selection with ``-k``, one runner for all, golden updates, timings."""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml

from webhook.harness.compare import Difference, Observed, after_admission, check, dump_yaml
from webhook.harness.runners import Runner
from webhook.harness.suite import Case, Suite

Status = Literal["pass", "fail", "skip", "error"]


@dataclass
class CaseResult:
    """The verdict on one case."""

    suite: Suite
    case: Case
    status: Status
    observed: Observed | None = None
    differences: list[Difference] = field(default_factory=list)
    skip_reason: str = ""
    seconds: float = 0.0
    golden_written: Path | None = None


def matches(case_id: str, patterns: Sequence[str]) -> bool:
    """``-k``: a pattern with * ? or [ is a glob on ``suite/case``, otherwise a substring;
    both ignore case. No patterns select everything; several select what any one selects."""
    if not patterns:
        return True
    text = case_id.lower()
    for pattern in patterns:
        p = pattern.lower()
        if any(c in p for c in "*?[") and fnmatch.fnmatchcase(text, p):
            return True
        if p in text:
            return True
    return False


def golden_text(obj: object, case: Case) -> str:
    """A golden file: a comment naming its case, then the object with sorted keys."""
    header = (
        f"# {case.suite}/{case.name} ({case.path.name}): the object after the webhook.\n"
        "# Written by gpu-policy test --update-golden; review changes to it like code.\n"
    )
    return header + dump_yaml(obj)


def _update_golden(case: Case, observed: Observed) -> Path | None:
    """Write the golden file when it is missing or differs; the path written, or None."""
    golden = case.expect.golden
    if golden is None or golden.path is None or observed.error is not None or not observed.allowed:
        return None
    obj = after_admission(case, observed)
    if golden.path.is_file():
        try:
            if yaml.safe_load(golden.path.read_text(encoding="utf-8")) == obj:
                return None
        except yaml.YAMLError:
            pass  # a broken golden file is rewritten
    golden.path.parent.mkdir(parents=True, exist_ok=True)
    golden.path.write_text(golden_text(obj, case), encoding="utf-8")
    return golden.path


def run_case(
    suite: Suite, case: Case, runner: Runner, *, update_golden: bool = False
) -> CaseResult:
    """Run one case and judge it."""
    reason = suite.skip or case.skip or runner.unsupported(case)
    if reason:
        return CaseResult(suite, case, "skip", skip_reason=reason)
    start = time.perf_counter()
    observed = runner.run(suite, case)
    written = _update_golden(case, observed) if update_golden else None
    differences = check(case, observed)
    if observed.error is not None:
        status: Status = "error"
    else:
        status = "fail" if differences else "pass"
    return CaseResult(
        suite,
        case,
        status,
        observed=observed,
        differences=differences,
        seconds=time.perf_counter() - start,
        golden_written=written,
    )


def run_suites(
    suites: Iterable[Suite],
    runner: Runner,
    *,
    keywords: Sequence[str] = (),
    update_golden: bool = False,
) -> tuple[list[CaseResult], int]:
    """Run every selected case of every suite; the results and how many were deselected."""
    results: list[CaseResult] = []
    deselected = 0
    for suite in suites:
        for case in suite.cases:
            if not matches(case.id, keywords):
                deselected += 1
                continue
            results.append(run_case(suite, case, runner, update_golden=update_golden))
    return results, deselected
