"""A review's rule results: one per rule, in the order ``RULES`` declares them.

The rules report findings (failures and warnings); a rule without a finding passes, and a rule
that could not be judged (because an earlier one failed) is skipped with the reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import cache

from webhook.policy.decision import RULES, RuleResult

_PASS = {rule: RuleResult(rule, "pass", text) for rule, text in RULES.items()}
# The common case, every rule passed: one shared tuple, nothing to build.
ALL_PASS = tuple(_PASS.values())


def skipping(rules: Iterable[str], reason: str) -> dict[str, str]:
    """``rules`` mapped to the one ``reason`` they are skipped for (for :func:`rule_results`)."""
    return dict.fromkeys(rules, reason)


def rule_results(
    findings: Sequence[RuleResult],
    skipped: Mapping[str, str] | None = None,
    omit: frozenset[str] = frozenset(),
) -> tuple[RuleResult, ...]:
    """Every rule's result: its findings in the order found, else skipped (rule -> reason in
    ``skipped``) or pass; the rules in ``omit`` (not in force: GPU isolation when it is off)
    have none."""
    if not findings:
        return _clean(tuple(sorted((skipped or {}).items())), omit)
    skip = skipped or {}
    touched = {r.rule for r in findings}
    out: list[RuleResult] = []
    for rule in RULES:
        if rule in omit and rule not in touched:
            continue
        if rule in touched:
            out += [r for r in findings if r.rule == rule]
        elif rule in skip:
            out.append(RuleResult(rule, "skip", skip[rule]))
        else:
            out.append(_PASS[rule])
    return tuple(out)


@cache
def _clean(skipped: tuple[tuple[str, str], ...], omit: frozenset[str]) -> tuple[RuleResult, ...]:
    # A review without findings skips one of a few fixed sets of rules: one shared tuple each.
    if not skipped and not omit:
        return ALL_PASS
    skip = dict(skipped)
    return tuple(
        RuleResult(rule, "skip", skip[rule]) if rule in skip else _PASS[rule]
        for rule in RULES
        if rule not in omit
    )


def as_warnings(results: Iterable[RuleResult]) -> tuple[RuleResult, ...]:
    """The results with every failure turned into a warning (enforcement ``warn`` or ``audit``)."""
    return tuple(
        RuleResult(r.rule, "warn", r.message, r.container) if r.status == "fail" else r
        for r in results
    )
