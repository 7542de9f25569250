"""Each rule on the bundled example cluster (L20 x 8 and T4 x 3 time-sliced, an A100 in mixed MIG).

One row a case: the pod, whether it is allowed, the rules that fail, and words the message
must contain (the container, the resource and the fix).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.objects import ctr, gpu, pod
from webhook.policy import Inventory, Policy, review

CASES: list[tuple[str, dict[str, Any], bool, tuple[str, ...], tuple[str, ...]]] = [
    ("one-shared-gpu", pod(gpu(1)), True, (), ()),
    ("quoted-quantity", pod(gpu("1")), True, (), ()),
    (
        "two-shared-gpus",
        pod(gpu(2)),
        False,
        ("gpu-shared-request-above-one",),
        ('container "main"', "2 nvidia.com/gpu", "UnexpectedAdmissionError", "Ask for 1"),
    ),
    (
        "per-container-not-per-pod",
        pod(ctr("a", limits={"nvidia.com/gpu": 1}), ctr("b", limits={"nvidia.com/gpu": 1})),
        True,
        (),
        (),
    ),
    (
        "init-container-above-one",
        pod(gpu(1), initContainers=[ctr("warmup", limits={"nvidia.com/gpu": 2})]),
        False,
        ("gpu-shared-request-above-one",),
        ('init container "warmup"',),
    ),
    (
        "requests-differ-from-limits",
        pod(ctr(requests={"nvidia.com/gpu": 1}, limits={"nvidia.com/gpu": 2})),
        False,
        ("gpu-requests-equal-limits",),
        ('container "main"', "requests 1 but limits 2", "same number"),
    ),
    ("milli-quantity", pod(gpu("500m")), False, ("gpu-quantity",), ("0.5 of a device", "integer")),
    ("fraction", pod(gpu(0.5)), False, ("gpu-quantity",), ("0.5 of a device",)),
    ("zero", pod(gpu(0)), False, ("gpu-quantity",), ("no device",)),
    ("negative", pod(gpu(-1)), False, ("gpu-quantity",), ("negative",)),
    (
        "typo-in-name",
        pod(gpu(1, "nvidia.com/gpus")),
        False,
        ("gpu-resource-name",),
        ("nvidia.com/gpus", "did you mean nvidia.com/gpu"),
    ),
    ("other-nvidia-resource-untouched", pod(gpu(1, "nvidia.com/hostdev")), True, (), ()),
    (
        "mig-profile-not-offered",
        pod(gpu(1, "nvidia.com/mig-3g.40gb")),
        False,
        ("gpu-resource-offered",),
        ("nvidia.com/mig-3g.40gb", "Pending", "nvidia.com/mig-3g.20gb"),
    ),
    ("mig-profile-offered", pod(gpu(1, "nvidia.com/mig-2g.10gb")), True, (), ()),
    (
        "pinned-to-unshared-product",
        pod(gpu(1), nodeSelector={"nvidia.com/gpu.product": "Tesla-T4"}),
        False,
        ("gpu-node-selection",),
        ("nvidia.com/gpu.product=Tesla-T4", "nvidia.com/gpu.product=Tesla-T4-SHARED instead"),
    ),
    (
        "pinned-to-shared-product",
        pod(gpu(1), nodeSelector={"nvidia.com/gpu.product": "Tesla-T4-SHARED"}),
        True,
        (),
        (),
    ),
    (
        "two-mig-profiles-in-one-container",
        pod(ctr(limits={"nvidia.com/mig-1g.5gb": 1, "nvidia.com/mig-2g.10gb": 1})),
        False,
        ("gpu-container-forms",),
        ("one kind of GPU",),
    ),
    (
        "shared-and-exclusive-in-one-container",
        pod(ctr(limits={"nvidia.com/gpu": 1, "nvidia.com/gpu.shared": 1})),
        False,
        ("gpu-container-forms",),
        (),
    ),
    (
        "ephemeral-container-with-gpu",
        pod(gpu(1), ephemeralContainers=[ctr("debug", limits={"nvidia.com/gpu": 1})]),
        False,
        ("gpu-ephemeral-container",),
        ('ephemeral container "debug"',),
    ),
    (
        "exclusive-wanted-none-offered",
        pod(gpu(1), annotations={"gpu-policy.io/sharing": "exclusive"}),
        False,
        ("gpu-resource-offered",),
        ("exclusive",),
    ),
    (
        "bad-sharing-annotation",
        pod(gpu(1), annotations={"gpu-policy.io/sharing": "sometimes"}),
        False,
        ("gpu-intent",),
        ("shared, exclusive or any",),
    ),
    (
        "containers-on-different-pools",
        pod(
            ctr("a", limits={"nvidia.com/gpu": 1}),
            ctr("b", limits={"nvidia.com/mig-2g.10gb": 1}),
        ),
        False,
        ("gpu-resource-offered",),
        ("one node",),
    ),
]


@pytest.mark.parametrize(
    ("obj", "allowed", "failed", "words"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_rule(
    obj: dict[str, Any],
    allowed: bool,
    failed: tuple[str, ...],
    words: tuple[str, ...],
    example_policy: Policy,
    example_inventory: Inventory,
) -> None:
    decision = review(obj, policy=example_policy, inventory=example_inventory)
    assert decision.failed == failed, decision.denial
    assert decision.allowed is allowed
    for word in words:
        assert word in decision.denial
    if not allowed:
        assert decision.patch == ()


def test_every_failure_names_the_container(
    example_policy: Policy, example_inventory: Inventory
) -> None:
    for _, obj, _allowed, _, _ in CASES:
        decision = review(obj, policy=example_policy, inventory=example_inventory)
        for r in decision.results:
            if r.status == "fail" and r.rule != "gpu-intent" and "one node" not in r.message:
                assert r.container is not None and r.container in r.message


@pytest.mark.parametrize(
    "limits",
    [{"cpu": "1"}, {"cpu": "1", "nvidia.com/hostdev": 1}],
    ids=["cpu-only", "other-nvidia-resource-only"],
)
def test_pod_without_gpu_is_skipped_untouched(
    limits: dict[str, Any], example_policy: Policy, example_inventory: Inventory
) -> None:
    obj = pod(ctr(limits=limits))
    decision = review(obj, policy=example_policy, inventory=example_inventory)
    assert decision.allowed and decision.patch == () and decision.mutated is None
    assert [r.status for r in decision.results] == ["skip"]


def test_exempt_namespace(example_policy: Policy, example_inventory: Inventory) -> None:
    obj = pod(gpu(4), namespace="kube-system")
    decision = review(obj, policy=example_policy, inventory=example_inventory)
    assert decision.allowed and decision.patch == ()


def test_pod_update_is_not_judged(example_policy: Policy, example_inventory: Inventory) -> None:
    decision = review(
        pod(gpu(4)), policy=example_policy, inventory=example_inventory, operation="UPDATE"
    )
    assert decision.allowed and decision.patch == ()


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        ("Deployment", ("spec", "template")),
        ("StatefulSet", ("spec", "template")),
        ("DaemonSet", ("spec", "template")),
        ("ReplicaSet", ("spec", "template")),
        ("Job", ("spec", "template")),
        ("ReplicationController", ("spec", "template")),
        ("PodTemplate", ("template",)),
        ("CronJob", ("spec", "jobTemplate", "spec", "template")),
    ],
)
@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_templates_are_judged_as_their_pods(
    kind: str,
    path: tuple[str, ...],
    operation: str,
    example_policy: Policy,
    example_inventory: Inventory,
) -> None:
    def wrap(template_pod: dict[str, Any]) -> dict[str, Any]:
        node: dict[str, Any] = {"metadata": {}, "spec": template_pod["spec"]}
        for step in reversed(path):
            node = {step: node}
        return {
            "apiVersion": "v1",
            "kind": kind,
            "metadata": {"name": "w", "namespace": "ml"},
            **node,
        }

    denied = review(
        wrap(pod(gpu(2))), policy=example_policy, inventory=example_inventory, operation=operation
    )
    assert denied.failed == ("gpu-shared-request-above-one",)
    allowed = review(
        wrap(pod(gpu(1), nodeSelector={"nvidia.com/gpu.product": "Tesla-T4-SHARED"})),
        policy=example_policy,
        inventory=example_inventory,
        operation=operation,
    )
    assert allowed.allowed
    # Templates are never patched: the pods they create are, on their own CREATE.
    assert allowed.patch == () and allowed.mutated is None


def test_template_limits_only_counts_as_request(
    example_policy: Policy, example_inventory: Inventory
) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "ml"},
        "spec": {"template": {"spec": {"containers": [ctr(limits={"nvidia.com/gpu": 2})]}}},
    }
    decision = review(deployment, policy=example_policy, inventory=example_inventory)
    assert decision.failed == ("gpu-shared-request-above-one",)


def test_kinds_without_pod_spec_are_skipped(
    example_policy: Policy, example_inventory: Inventory
) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {}}
    decision = review(cm, policy=example_policy, inventory=example_inventory)
    assert decision.allowed and decision.results[0].status == "skip"


@pytest.mark.parametrize(
    ("mode", "allowed", "warns"),
    [("enforce", False, False), ("warn", True, True), ("audit", True, False)],
)
def test_enforcement_modes(
    mode: str, allowed: bool, warns: bool, example_policy: Policy, example_inventory: Inventory
) -> None:
    from dataclasses import replace

    policy = replace(example_policy, enforcement=mode)
    decision = review(pod(gpu(2)), policy=policy, inventory=example_inventory)
    assert decision.allowed is allowed
    assert bool(decision.warnings) is warns
    flagged = {r.rule for r in decision.results if r.status in ("fail", "warn")}
    assert "gpu-shared-request-above-one" in flagged
