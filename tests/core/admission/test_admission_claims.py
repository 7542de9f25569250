"""ResourceClaims and ResourceClaimTemplates through /validate (and /mutate, which lets them be)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests import objects as o
from webhook.admission import handle
from webhook.policy import Inventory, Policy
from webhook.policy.supply.assemble import OFFLINE_FIT_BUDGET_S, DraObjects, assemble


@pytest.fixture(scope="module")
def inventory(example_policy: Policy) -> Inventory:
    """The example policy's cluster and a node with two A100s, by the one recipe (the supply
    the allocator judges claims on)."""
    dra = DraObjects(o.nvidia_classes(), [o.resource_slice("a100-1", o.dra_gpu(0), o.dra_gpu(1))])
    return assemble(
        example_policy, nodes=None, source="test", dra=dra, fit_budget_s=OFFLINE_FIT_BUDGET_S
    )


def _review(obj: dict, **kw: object) -> dict:
    return o.review(obj, group="resource.k8s.io", **kw)  # type: ignore[arg-type]


def test_a_template_asking_for_more_than_exists_is_denied(
    example_policy: Policy, inventory: Inventory
) -> None:
    body = _review(
        o.claim_template("train", o.exactly(count=3), namespace="ml"),
        resource="resourceclaimtemplates",
    )
    outcome = handle("validate", body, policy=example_policy, inventory=inventory)
    assert outcome.verdict == "denied"
    status = outcome.response["response"]["status"]
    assert "[gpu-claim-devices-available]" in status["message"]
    assert (
        'ResourceClaimTemplate train fits no node, existing or able to appear: request "gpu" '
        "asks for 3 devices of class gpu.nvidia.com, but no node has more than 2 matching "
        "devices (2 on node a100-1 (NVIDIA A100-SXM4-40GB))"
    ) in status["message"]
    assert status["message"].endswith('Ask for at most 2 in request "gpu"')
    assert outcome.failed == ("gpu-claim-devices-available",)
    annotations = outcome.response["response"]["auditAnnotations"]
    assert annotations["failed-rules"] == "gpu-claim-devices-available"


def test_a_claim_that_fits_is_allowed(example_policy: Policy, inventory: Inventory) -> None:
    body = _review(
        o.resource_claim("c", o.exactly(count=2), namespace="ml"), resource="resourceclaims"
    )
    outcome = handle("validate", body, policy=example_policy, inventory=inventory)
    assert outcome.verdict == "allowed"
    assert outcome.skipped is None


def test_warn_mode_allows_with_the_warning(example_policy: Policy, inventory: Inventory) -> None:
    body = _review(
        o.claim_template("train", o.exactly(count=3), namespace="ml"),
        resource="resourceclaimtemplates",
    )
    policy = replace(example_policy, enforcement="warn")
    outcome = handle("validate", body, policy=policy, inventory=inventory)
    assert outcome.verdict == "allowed"
    (warning,) = outcome.response["response"]["warnings"]
    assert warning.startswith("[gpu-claim-devices-available]")


@pytest.mark.parametrize("operation", ["UPDATE", "DELETE"])
def test_claims_are_judged_on_create_only(
    example_policy: Policy, inventory: Inventory, operation: str
) -> None:
    obj = o.resource_claim("c", o.exactly(count=3), namespace="ml")
    old = obj if operation != "CREATE" else None
    body = _review(
        None if operation == "DELETE" else obj,
        old=old,
        operation=operation,
        resource="resourceclaims",
    )
    outcome = handle("validate", body, policy=example_policy, inventory=inventory)
    assert outcome.verdict == "allowed"
    assert outcome.skipped


def test_mutate_sends_no_patch_for_a_claim(example_policy: Policy, inventory: Inventory) -> None:
    body = _review(o.resource_claim("c", o.exactly(), namespace="ml"), resource="resourceclaims")
    outcome = handle("mutate", body, policy=example_policy, inventory=inventory)
    assert outcome.verdict == "allowed"
    assert "patch" not in outcome.response["response"]
