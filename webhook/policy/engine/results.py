"""A review's rule results: one per rule, in the order ``RULES`` declares them.

The rules report findings (failures and warnings); a rule without a finding passes, and a rule
that could not be judged (because an earlier one failed) is skipped with the reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from webhook.policy.decision import CLAIM_RULES, POD_RULES, RULES, RuleResult

_PASS = {rule: RuleResult(rule, "pass", text) for rule, text in RULES.items()}
# The common case, every rule passed: one shared tuple per family, nothing to build.
ALL_PASS = tuple(_PASS[r] for r in POD_RULES)
_ALL_PASS = {
    POD_RULES: ALL_PASS,
    CLAIM_RULES: tuple(_PASS[r] for r in CLAIM_RULES),
    tuple(RULES): tuple(_PASS.values()),
}


def rule_results(
    findings: Sequence[RuleResult],
    skipped: Iterable[str] = (),
    reason: str = "",
    *,
    rules: tuple[str, ...] = POD_RULES,
) -> tuple[RuleResult, ...]:
    """Each of ``rules``' results, in RULES order: its findings in the order found, else
    skipped (``reason``) or pass."""
    if not findings and not skipped and rules in _ALL_PASS:
        return _ALL_PASS[rules]
    touched = {r.rule for r in findings}
    skip = set(skipped)
    out: list[RuleResult] = []
    for rule in RULES:
        if rule not in rules:
            continue
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
