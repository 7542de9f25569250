"""Which rules a review reports, and how: the declarations of webhook/policy/rules.py at work.

Every review reports the rules in force on what it judged, in the declared order: a Pod's
container rules, its claim rules when it has claims, GPU isolation's while it is on; a
ResourceClaim's claim rules alone. A rule that could not be judged says why it was skipped.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest

from tests import objects as b
from tests.support.paths import REPO
from webhook.policy import Decision, Inventory, Policy, review
from webhook.policy.engine.results import FIX_FIRST
from webhook.policy.model import Isolation
from webhook.policy.rules import DECLARATIONS, RULES, Aspect
from webhook.policy.supply.assemble import OFFLINE_FIT_BUDGET_S, DraObjects, assemble

DECLARED_ORDER = list(RULES)


def _of(*aspects: Aspect) -> list[str]:
    """The ids of the rules that apply to ``aspects``, in the declared order."""
    return [r.id for r in DECLARATIONS if r.applies_to in aspects]


def _isolating(policy: Policy) -> Policy:
    return replace(policy, isolation=Isolation("enforce", frozenset()))


@pytest.fixture(scope="module")
def dra_inventory(example_policy: Policy) -> Inventory:
    """The example policy with two A100s on node a100-1, published through DRA."""
    return assemble(
        example_policy,
        nodes=None,
        source="test",
        dra=DraObjects(
            b.nvidia_classes(),
            [b.resource_slice("a100-1", b.dra_gpu(0), b.dra_gpu(1))],
            resource_claim_templates=[b.claim_template("gpu-1", b.exactly(count=1))],
        ),
        fit_budget_s=OFFLINE_FIT_BUDGET_S,
    )


def _ids(decision: Decision) -> list[str]:
    return list(dict.fromkeys(r.rule for r in decision.results))


def _in_declared_order(ids: list[str]) -> bool:
    return ids == sorted(ids, key=DECLARED_ORDER.index)


def test_a_gpu_pod_is_judged_by_the_container_rules_in_the_declared_order(
    example_policy: Policy, example_inventory: Inventory
) -> None:
    decision = review(b.pod(b.gpu(1)), policy=example_policy, inventory=example_inventory)
    assert decision.allowed
    assert _ids(decision) == _of("containers")
    assert {r.status for r in decision.results} == {"pass"}
    # A pass says what the rule checks, as declared.
    assert [r.message for r in decision.results] == [RULES[r] for r in _of("containers")]


def test_a_failed_check_skips_the_placement_rules(
    example_policy: Policy, example_inventory: Inventory
) -> None:
    decision = review(b.pod(b.gpu("500m")), policy=example_policy, inventory=example_inventory)
    assert not decision.allowed and decision.failed == ("gpu-quantity",)
    placement = {r.id for r in DECLARATIONS if r.phase == "placement"}
    skipped = {r.rule: r.message for r in decision.results if r.status == "skip"}
    assert skipped == dict.fromkeys(placement, FIX_FIRST)
    assert _in_declared_order(_ids(decision))


def test_a_failed_placement_rule_skips_nothing(
    example_policy: Policy, example_inventory: Inventory
) -> None:
    decision = review(b.pod(b.gpu(2)), policy=example_policy, inventory=example_inventory)
    assert decision.failed == ("gpu-shared-request-above-one",)
    assert not [r for r in decision.results if r.status == "skip"]


def test_isolation_rules_are_in_force_only_while_isolation_is_on(
    example_policy: Policy, example_inventory: Inventory
) -> None:
    obj = b.pod(b.gpu(1))
    off = review(obj, policy=example_policy, inventory=example_inventory)
    on = review(obj, policy=_isolating(example_policy), inventory=example_inventory)
    assert not set(_of("isolation")) & set(_ids(off))
    assert _ids(on) == _of("containers", "isolation")


def test_a_pod_of_claims_only_skips_the_container_rules_and_is_judged_by_the_claim_rules(
    example_policy: Policy, dra_inventory: Inventory
) -> None:
    obj = b.pod(b.ctr(), resourceClaims=[{"name": "g", "resourceClaimTemplateName": "gpu-1"}])
    decision = review(obj, policy=example_policy, inventory=dra_inventory)
    assert decision.allowed
    assert _ids(decision) == _of("containers", "claims", "claim-refs")
    for result in decision.results:
        if result.rule in _of("containers"):
            assert result.status == "skip"
            assert "asks for no nvidia.com resource" in result.message
        else:
            assert result.status == "pass"


def test_a_pod_without_claims_has_no_claim_rules(
    example_policy: Policy, dra_inventory: Inventory
) -> None:
    decision = review(b.pod(b.gpu(1)), policy=example_policy, inventory=dra_inventory)
    assert not set(_of("claims", "claim-refs")) & set(_ids(decision))


def test_a_claim_is_judged_by_the_claim_rules_alone(
    example_policy: Policy, dra_inventory: Inventory
) -> None:
    claim = b.resource_claim("one", b.exactly(count=1))
    decision = review(claim, policy=example_policy, inventory=dra_inventory)
    assert decision.allowed
    assert _ids(decision) == _of("claims")
    too_many = review(
        b.resource_claim("three", b.exactly(count=3)),
        policy=example_policy,
        inventory=dra_inventory,
    )
    assert too_many.failed == ("gpu-claim-devices-available",)
    assert _ids(too_many) == _of("claims")


def test_a_pod_that_asks_for_no_gpu_is_judged_by_isolation_alone(
    example_policy: Policy, example_inventory: Inventory
) -> None:
    obj: dict[str, Any] = b.pod(b.ctr(), tolerations=[{"operator": "Exists"}])
    decision = review(obj, policy=_isolating(example_policy), inventory=example_inventory)
    assert _ids(decision) == _of("containers", "isolation")
    containers = [r for r in decision.results if r.rule in _of("containers")]
    assert {(r.status, r.message) for r in containers} == {("skip", "asks for no GPU")}
    # Enforced isolation gives its container void, and passes.
    assert {r.status for r in decision.results if r.rule in _of("isolation")} == {"pass"}
    assert decision.patch


def test_a_template_reports_what_its_pods_would_report(
    example_policy: Policy, example_inventory: Inventory
) -> None:
    spec = b.pod(b.gpu("500m"))
    template = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"template": {"metadata": {}, "spec": spec["spec"]}},
    }
    of_pod = review(spec, policy=example_policy, inventory=example_inventory)
    of_template = review(template, policy=example_policy, inventory=example_inventory)
    assert [(r.rule, r.status) for r in of_template.results] == [
        (r.rule, r.status) for r in of_pod.results
    ]
    assert not of_template.patch


def test_every_declared_rule_has_its_row_in_docs_rules_md() -> None:
    table = (REPO / "docs" / "rules.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| `(gpu-[a-z0-9-]+)` \|", table, flags=re.MULTILINE))
    assert rows == set(RULES)
