"""One set of skip rules: review() and the endpoints skip the same requests, for the same reason.

A pod is reviewed on CREATE only, a pod template on CREATE and UPDATE; everything else is
allowed untouched, and the reason (the server's log line, the CLI's SKIPPED) is the same
whether the engine or the validating endpoint says it.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.objects import load, with_gpu
from webhook.admission import handle
from webhook.policy import Inventory, Policy, review


def _request(kind: str, operation: str) -> dict[str, Any]:
    doc = with_gpu(load("v1.36.2", "validate", "pod-create"), 1)
    pod = doc["request"]["object"]
    if kind == "Deployment":
        doc["request"]["kind"] = {"group": "apps", "version": "v1", "kind": "Deployment"}
        template = {"metadata": {"labels": {"app": "a"}}, "spec": pod["spec"]}
        pod = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": pod["metadata"],
               "spec": {"template": template}}  # fmt: skip
        doc["request"]["object"] = pod
    doc["request"]["operation"] = operation
    if operation in ("DELETE", "CONNECT"):
        doc["request"]["oldObject"] = doc["request"].pop("object")
    return doc


@pytest.mark.parametrize(
    ("kind", "operation", "reason"),
    [
        ("Pod", "CREATE", None),
        ("Pod", "UPDATE", "pod UPDATE: GPU resources cannot change after creation"),
        ("Pod", "DELETE", "DELETE is not reviewed"),
        ("Pod", "CONNECT", "CONNECT is not reviewed"),
        ("Deployment", "CREATE", None),
        ("Deployment", "DELETE", "DELETE is not reviewed"),
    ],
    ids=[
        "pod-create",
        "pod-update",
        "pod-delete",
        "pod-connect",
        "template-create",
        "template-delete",
    ],
)
def test_engine_and_validating_endpoint_skip_alike(
    kind: str,
    operation: str,
    reason: str | None,
    example_policy: Policy,
    example_inventory: Inventory,
) -> None:
    doc = _request(kind, operation)
    outcome = handle("validate", doc, policy=example_policy, inventory=example_inventory)
    assert outcome.skipped == reason
    obj = doc["request"].get("object") or doc["request"]["oldObject"]
    decision = review(
        copy.deepcopy(obj),
        policy=example_policy,
        inventory=example_inventory,
        operation=operation,
    )
    skipped = [r.message for r in decision.results if r.status == "skip"]
    assert skipped == ([] if reason is None else [reason])
