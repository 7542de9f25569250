"""A review's rule results: one per rule, in the order ``RULES`` declares them.

The rules report findings (failures and warnings); a rule without a finding passes, and a rule
that could not be judged (because an earlier one failed) is skipped with the reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from webhook.policy.decision import RULES, RuleResult

_PASS = {rule: RuleResult(rule, "pass", text) for rule, text in RULES.items()}
# The common case, every rule passed: one shared tuple, nothing to build.
ALL_PASS = tuple(_PASS.values())


def rule_results(
    findings: Sequence[RuleResult], skipped: Iterable[str] = (), reason: str = ""
) -> tuple[RuleResult, ...]:
    """Every rule's result: its findings in the order found, else skipped (``reason``) or pass."""
    if not findings and not skipped:
        return ALL_PASS
    touched = {r.rule for r in findings}
    skip = set(skipped)
    out: list[RuleResult] = []
    for rule in RULES:
        if rule in touched:
            out += [r for r in findings if r.rule == rule]
        elif rule in skip:
            out.append(RuleResult(rule, "skip", reason))
        else:
            out.append(_PASS[rule])
    return tuple(out)


def as_warnings(results: Iterable[RuleResult]) -> tuple[RuleResult, ...]:
    """The results with every failure turned into a warning (enforcement ``warn`` or ``audit``)."""
    return tuple(
        RuleResult(r.rule, "warn", r.message, r.container) if r.status == "fail" else r
        for r in results
    )
