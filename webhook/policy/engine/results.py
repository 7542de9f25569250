"""The runner: a review's findings turned into one result per rule, and into the Decision.

The steps report findings (failures and warnings). Every rule of ``DECLARATIONS``
(``webhook/policy/rules.py``) gets, in the declared order: its findings, in the order found;
else a skip, when the reviewer skips what it applies to (a pod whose GPUs all come from its
claims skips the container rules) or when it is a placement rule and the review stopped after
a failed check ("fix the errors above first"); else a pass. A rule whose aspect the subject
does not have (GPU isolation while it is off, the claim rules of a pod without claims, the
container rules of a claim) has no result at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

from webhook.policy.decision import Decision, RuleResult
from webhook.policy.engine.mutation import MUTABLE, template_changes
from webhook.policy.engine.subjects import Subject
from webhook.policy.patch import diff
from webhook.policy.rules import DECLARATIONS, PHASES, Aspect, Phase

FIX_FIRST: Final = "fix the errors above first"
_PASS: Final = {rule.id: RuleResult(rule.id, "pass", rule.summary) for rule in DECLARATIONS}


@dataclass(frozen=True, slots=True)
class Aspects:
    """What a review judges: the aspects of its subject it judges, and those it skips with
    the reason (``webhook.policy.rules.Aspect``). An aspect in neither has no rule in force."""

    judged: frozenset[Aspect]
    skipped: tuple[tuple[Aspect, str], ...] = ()


def rule_results(
    findings: Sequence[RuleResult], aspects: Aspects, *, reached: Phase = "placement"
) -> tuple[RuleResult, ...]:
    """Every rule's result (see the module's docstring); ``reached``: the last phase the
    review ran (``checks`` when a check failed: the placement rules are then skipped)."""
    if not findings:
        return _clean(aspects, reached)
    touched = {f.rule for f in findings}
    out: list[RuleResult] = []
    for rule, default in _defaults(aspects, reached):
        if rule in touched:
            out += [f for f in findings if f.rule == rule]
        elif default is not None:
            out.append(default)
    return tuple(out)


@cache
def _defaults(aspects: Aspects, reached: Phase) -> tuple[tuple[str, RuleResult | None], ...]:
    """Each rule's result when it has no finding: a pass, a skip, or None (not in force).
    One of a few fixed answers, worked out once each."""
    skipped = dict(aspects.skipped)
    last = PHASES.index(reached)
    out: list[tuple[str, RuleResult | None]] = []
    for rule in DECLARATIONS:
        result: RuleResult | None = None
        if rule.applies_to in skipped:
            result = RuleResult(rule.id, "skip", skipped[rule.applies_to])
        elif rule.applies_to in aspects.judged:
            stopped = PHASES.index(rule.phase) > last
            result = RuleResult(rule.id, "skip", FIX_FIRST) if stopped else _PASS[rule.id]
        out.append((rule.id, result))
    return tuple(out)


@cache
def _clean(aspects: Aspects, reached: Phase) -> tuple[RuleResult, ...]:
    # A review without findings: one shared tuple per fixed answer, nothing to build.
    return tuple(r for _, r in _defaults(aspects, reached) if r is not None)


def as_warnings(results: Iterable[RuleResult]) -> tuple[RuleResult, ...]:
    """The results with every failure turned into a warning (enforcement ``warn`` or ``audit``)."""
    return tuple(
        RuleResult(r.rule, "warn", r.message, r.container) if r.status == "fail" else r
        for r in results
    )


def fails(findings: Iterable[RuleResult]) -> bool:
    """True when one of ``findings`` is a failure."""
    return any(f.status == "fail" for f in findings)


def skipped_decision(subject: Subject, why: str, mode: str) -> Decision:
    """The Decision on an object out of scope: allowed untouched, with the reason."""
    out_of_scope = (RuleResult("gpu-policy", "skip", why),)
    return Decision(
        subject.kind, subject.namespace, subject.name, True, out_of_scope, enforcement=mode
    )


def decision(
    subject: Subject,
    results: tuple[RuleResult, ...],
    *,
    mode: str,
    clean: bool,
    changes: Sequence[str] = (),
    mutated: dict[str, Any] | None = None,
    changes_warning: bool = False,
) -> Decision:
    """The Decision under enforcement ``mode``; ``clean``: every rule passed. ``mutated``:
    the object as it will be (its patch is worked out here); ``changes_warning``: the changes
    are told as a warning instead (a pod template's, which is never patched)."""
    if mode != "enforce" and not clean:
        results = as_warnings(results)
    warnings: list[str] = []
    if mode != "audit" and not clean:
        warnings = [f"[{r.rule}] {r.message}" for r in results if r.status == "warn"]
    patch: tuple[dict[str, Any], ...] = ()
    if changes_warning and changes:
        warnings.append(template_changes(subject.kind, changes))
    elif mutated is not None:
        patch = tuple(diff(subject.obj, mutated, within=MUTABLE))
    allowed = clean or not fails(results)
    return Decision(
        kind=subject.kind,
        namespace=subject.namespace,
        name=subject.name,
        allowed=allowed,
        results=results,
        warnings=tuple(warnings),
        changes=tuple(changes),
        mutated=mutated,
        patch=patch,
        enforcement=mode,
    )


def judged(*aspects: Aspect, skipped: Mapping[Aspect, str] | None = None) -> Aspects:
    """:class:`Aspects` judging ``aspects`` and skipping those of ``skipped`` (aspect ->
    reason)."""
    return Aspects(frozenset(aspects), tuple((skipped or {}).items()))
