"""The example suites: they pass, and between them they pin every rule and every mutation."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from tests.support.harness import SUITES
from webhook.harness import Case, LocalRunner, Suite, load_suites, run_suites
from webhook.policy import NODE_SELECTION_MODES, RULES, review
from webhook.policy.rules import WARNING_RULES


@pytest.fixture(scope="module")
def examples():  # type: ignore[no-untyped-def]
    suites, problems = load_suites([str(SUITES)])
    assert problems == []
    return suites


def test_every_example_case_passes(examples) -> None:  # type: ignore[no-untyped-def]
    results, deselected = run_suites(examples, LocalRunner())
    assert deselected == 0
    assert len(results) >= 40
    failed = {r.case.id: [d.what for d in r.differences] for r in results if r.status != "pass"}
    assert failed == {}


def test_every_rule_fails_in_some_case(examples) -> None:  # type: ignore[no-untyped-def]
    pinned = {rule for s in examples for c in s.cases for rule in c.expect.failed or ()}
    assert pinned == set(RULES) - WARNING_RULES
    warned = {
        rule
        for s in examples
        for c in s.cases
        for pattern in c.expect.warnings or ()
        for rule in WARNING_RULES
        if f"[{rule}]" in pattern.pattern.replace("\\", "")
    }
    assert warned == WARNING_RULES


MUTATIONS = {
    "rename nvidia.com/gpu.shared -> nvidia.com/gpu": r"nvidia\.com/gpu\.shared -> nvidia\.com/gpu$",
    "rename nvidia.com/gpu -> nvidia.com/gpu.shared": r"nvidia\.com/gpu -> nvidia\.com/gpu\.shared$",
    "node selector": r"^nodeSelector nvidia\.com/gpu\.product=",
    "node affinity": r"^node affinity nvidia\.com/gpu\.product In \(.*, .*\)",
    "tolerations": r"^tolerations nvidia\.com/gpu:NoSchedule",
    "limit added": r": limits nvidia\.com/gpu = 1$",
    "MIG single steering": r"^nodeSelector nvidia\.com/gpu\.product=.*-MIG-1g\.10gb$",
    # GFD's spelling of a +me profile: a dot, never the + (not valid in a label value).
    "MIG single +me steering": r"^nodeSelector nvidia\.com/gpu\.product=.*-MIG-1g\.10gb\.me-SHARED$",
    "rename of a +me resource": r"nvidia\.com/mig-1g\.10gb\.me -> nvidia\.com/gpu$",
    "GPU isolation": r'^init container "setup": env NVIDIA_VISIBLE_DEVICES=void$',
}


@pytest.mark.parametrize("mutation", MUTATIONS)
def test_every_mutation_is_pinned_by_a_golden_file(examples, mutation: str) -> None:  # type: ignore[no-untyped-def]
    runner = LocalRunner()
    changes = [
        change
        for suite in examples
        for case in suite.cases
        if case.expect.golden is not None and not case.expect.golden.unchanged
        for change in runner.run(suite, case).changes
    ]
    assert any(re.search(MUTATIONS[mutation], c) for c in changes), changes


def _selects(suite: Suite, case: Case, mode: str) -> bool:
    """Whether the case's pod gets a product node selection under ``mode``."""
    policy = replace(suite.policy, inject_node_selection=mode)
    decision = review(case.obj, policy=policy, inventory=suite.inventory, operation=case.operation)
    return any(c.startswith(("nodeSelector ", "node affinity ")) for c in decision.changes)


@pytest.mark.parametrize("mode", NODE_SELECTION_MODES)
def test_every_node_selection_mode_is_shown_by_golden_files(examples, mode: str) -> None:  # type: ignore[no-untyped-def]
    """Golden cases run under each mode on at least four clusters, and show what sets the mode
    apart from intent: when-needed drops a selection intent keeps, always adds one intent does
    not, never selects nothing."""
    shown = [
        (suite, case)
        for suite in examples
        for case in suite.cases
        if case.expect.golden is not None
        and not case.expect.golden.unchanged
        and suite.policy_for(case).inject_node_selection == mode
    ]
    assert len({suite.name for suite, _ in shown}) >= 4, [c.id for _, c in shown]
    selects = {case.id: _selects(suite, case, mode) for suite, case in shown}
    by_intent = {case.id: _selects(suite, case, "intent") for suite, case in shown}
    differs = {
        "intent": any(selects.values()),
        "when-needed": any(by_intent[c] and not selects[c] for c in selects),
        "always": any(selects[c] and not by_intent[c] for c in selects),
        "never": any(by_intent.values()) and not any(selects.values()),
    }
    assert differs[mode], (selects, by_intent)


def test_no_orphan_golden_files(examples) -> None:  # type: ignore[no-untyped-def]
    used = {
        c.expect.golden.path.resolve()
        for s in examples
        for c in s.cases
        if c.expect.golden is not None and c.expect.golden.path is not None
    }
    on_disk = {p.resolve() for p in (SUITES / "golden").rglob("*.yaml")}
    assert on_disk == used
