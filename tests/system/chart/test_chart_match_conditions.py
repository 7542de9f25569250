"""The matchConditions CEL, taken from the rendered chart, evaluated on sample objects.

The API server evaluates these with cel-go; here the `common-expression-language` library
(import name ``cel``) evaluates the very same strings. Like cel-go on untyped objects, it
raises on a missing field, so the expressions' has() guards are exercised too: an error
would make the API server apply the failurePolicy instead of skipping the object.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.support.chart_helpers import webhooks


def cel() -> Any:
    """The ``cel`` module, imported when a test first evaluates: importing it loads its REPL's
    libraries, a quarter second each pytest worker would pay when it collects this file."""
    return pytest.importorskip(
        "cel", reason="the common-expression-language package is not installed"
    )


pytestmark = pytest.mark.slow


def container(name: str = "main", **resources: dict[str, str]) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "busybox"}
    if resources:
        c["resources"] = resources
    return c


def pod_spec(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    return spec


GPU = container(limits={"nvidia.com/gpu": "1"})
GPU_REQUESTS_ONLY = container(requests={"nvidia.com/gpu": "1"})
MIG = container(limits={"nvidia.com/mig-1g.5gb": "1"}, requests={"nvidia.com/mig-1g.5gb": "1"})
SHARED = container(limits={"nvidia.com/gpu.shared": "1"})
CPU = container(requests={"cpu": "500m", "memory": "1Gi"}, limits={"cpu": "1", "memory": "1Gi"})
OTHER_VENDOR = container(limits={"amd.com/gpu": "1", "gpu.nvidia.com/whatever": "1"})
PLAIN = container()
EMPTY_RESOURCES = {"name": "main", "image": "busybox", "resources": {}}


def pod(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


def workload(kind: str, api_version: str, spec: dict[str, Any]) -> dict[str, Any]:
    template = {"metadata": {"labels": {"app": "x"}}, "spec": spec}
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": "w"},
        "spec": {"selector": {"matchLabels": {"app": "x"}}, "template": template},
    }


def cronjob(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "c"},
        "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": spec}}}},
    }


def podtemplate(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": "t"},
        "template": {"spec": spec},
    }


# (id, resource as the webhook rules name it, object, expected)
SAMPLES: list[tuple[str, str, dict[str, Any], bool]] = [
    ("pod with nvidia.com/gpu limit", "pods", pod(pod_spec(GPU)), True),
    ("pod with nvidia.com/gpu request only", "pods", pod(pod_spec(GPU_REQUESTS_ONLY)), True),
    ("pod with a MIG device", "pods", pod(pod_spec(MIG)), True),
    ("pod with a .shared GPU", "pods", pod(pod_spec(SHARED)), True),
    (
        "pod with GPU in the second container",
        "pods",
        pod(pod_spec(CPU, container("b", limits={"nvidia.com/gpu": "1"}))),
        True,
    ),
    ("pod with GPU only in an initContainer", "pods", pod(pod_spec(CPU, init=(GPU,))), True),
    ("plain pod", "pods", pod(pod_spec(PLAIN)), False),
    ("pod with only cpu and memory", "pods", pod(pod_spec(CPU)), False),
    ("pod with empty resources", "pods", pod(pod_spec(EMPTY_RESOURCES)), False),
    ("pod with other vendors' resources", "pods", pod(pod_spec(OTHER_VENDOR)), False),
    ("pod with cpu-only initContainer", "pods", pod(pod_spec(PLAIN, init=(CPU,))), False),
    (
        "pod without spec",
        "pods",
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}},
        False,
    ),
    (
        "Deployment with a GPU template",
        "deployments",
        workload("Deployment", "apps/v1", pod_spec(GPU)),
        True,
    ),
    (
        "Deployment, GPU in initContainer",
        "deployments",
        workload("Deployment", "apps/v1", pod_spec(PLAIN, init=(GPU,))),
        True,
    ),
    ("plain Deployment", "deployments", workload("Deployment", "apps/v1", pod_spec(CPU)), False),
    (
        "StatefulSet with GPU",
        "statefulsets",
        workload("StatefulSet", "apps/v1", pod_spec(MIG)),
        True,
    ),
    ("DaemonSet with GPU", "daemonsets", workload("DaemonSet", "apps/v1", pod_spec(GPU)), True),
    ("ReplicaSet with GPU", "replicasets", workload("ReplicaSet", "apps/v1", pod_spec(GPU)), True),
    ("Job with GPU", "jobs", workload("Job", "batch/v1", pod_spec(GPU)), True),
    ("plain Job", "jobs", workload("Job", "batch/v1", pod_spec(PLAIN)), False),
    (
        "ReplicationController with GPU",
        "replicationcontrollers",
        workload("ReplicationController", "v1", pod_spec(GPU)),
        True,
    ),
    (
        "Deployment without template",
        "deployments",
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {}},
        False,
    ),
    ("CronJob with a GPU template", "cronjobs", cronjob(pod_spec(GPU)), True),
    (
        "CronJob, GPU request in initContainer",
        "cronjobs",
        cronjob(pod_spec(PLAIN, init=(GPU_REQUESTS_ONLY,))),
        True,
    ),
    ("plain CronJob", "cronjobs", cronjob(pod_spec(CPU)), False),
    ("PodTemplate with GPU", "podtemplates", podtemplate(pod_spec(GPU)), True),
    ("plain PodTemplate", "podtemplates", podtemplate(pod_spec(PLAIN)), False),
]

CLAIMS = {"resourceClaims": [{"name": "g", "resourceClaimTemplateName": "t"}]}
DEVICE_CLASS_NAME = container(limits={"deviceclass.resource.kubernetes.io/gpu.nvidia.com": "2"})
# A name a DeviceClass may serve (spec.extendedResourceName): any extended name can be one.
EXTENDED = container(requests={"example.com/gpu": "1"}, limits={"example.com/gpu": "1"})
# Pod templates that may get GPUs through DRA: judged (validating entries only) while the
# chart judges DRA (dra.enabled and server.watchCluster, the default), as their pods would be.
DRA_TEMPLATES: list[tuple[str, str, dict[str, Any], bool]] = [
    (
        "Deployment whose template takes a claim",
        "deployments",
        workload("Deployment", "apps/v1", {**pod_spec(CPU), **CLAIMS}),
        True,
    ),
    (
        "StatefulSet asking for a DeviceClass by name",
        "statefulsets",
        workload("StatefulSet", "apps/v1", pod_spec(DEVICE_CLASS_NAME)),
        True,
    ),
    (
        "DaemonSet asking for an extended name",
        "daemonsets",
        workload("DaemonSet", "apps/v1", pod_spec(CPU, init=(EXTENDED,))),
        True,
    ),
    ("Job with a claim", "jobs", workload("Job", "batch/v1", {**pod_spec(PLAIN), **CLAIMS}), True),
    ("CronJob with a claim", "cronjobs", cronjob({**pod_spec(PLAIN), **CLAIMS}), True),
    (
        "ReplicaSet, claims empty",
        "replicasets",
        workload("ReplicaSet", "apps/v1", {**pod_spec(CPU), "resourceClaims": []}),
        False,
    ),
    ("PodTemplate with a claim", "podtemplates", podtemplate({**pod_spec(PLAIN), **CLAIMS}), True),
    (
        "Deployment, cpu and hugepages",
        "deployments",
        workload(
            "Deployment",
            "apps/v1",
            pod_spec(container(limits={"cpu": "1", "hugepages-2Mi": "1Gi"})),
        ),
        False,
    ),
]


def _conditions_for(
    rendered, resource: str, mutating: bool, *, pod_claims: bool = False
) -> list[str]:
    """The expressions of the entry whose rules cover ``resource`` (for pods: the entry for
    pods that ask for nvidia.com/* resources, or with ``pod_claims`` the one for pods with
    claims)."""
    kind = "MutatingWebhookConfiguration" if mutating else "ValidatingWebhookConfiguration"
    found = [
        [c["expression"] for c in hook["matchConditions"]]
        for k, hook in webhooks(rendered)
        if k == kind
        and any(resource in rule["resources"] for rule in hook["rules"])
        and hook["name"].startswith("pod-claims.") is pod_claims
    ]
    assert len(found) == 1, f"{len(found)} {kind} entries cover {resource}"
    return found[0]


def _matches(expressions: list[str], obj: dict[str, Any]) -> bool:
    # All matchConditions must hold; the API server passes object, oldObject, request.
    context = {"object": copy.deepcopy(obj), "oldObject": None, "request": {"operation": "CREATE"}}
    return all(cel().evaluate(e, context) is True for e in expressions)


@pytest.mark.parametrize(
    ("resource", "obj", "expected"), [s[1:] for s in SAMPLES], ids=[s[0] for s in SAMPLES]
)
def test_validating_match_conditions(
    default_render, resource: str, obj: dict[str, Any], expected: bool
) -> None:
    assert _matches(_conditions_for(default_render, resource, mutating=False), obj) is expected


@pytest.mark.parametrize(
    ("obj", "expected"),
    [(s[2], s[3]) for s in SAMPLES if s[1] == "pods"],
    ids=[s[0] for s in SAMPLES if s[1] == "pods"],
)
def test_mutating_match_conditions(default_render, obj: dict[str, Any], expected: bool) -> None:
    assert _matches(_conditions_for(default_render, "pods", mutating=True), obj) is expected


@pytest.mark.parametrize(
    ("resource", "obj", "expected"),
    [s[1:] for s in DRA_TEMPLATES],
    ids=[s[0] for s in DRA_TEMPLATES],
)
def test_templates_that_may_use_dra_are_validated(
    default_render, renderer, resource: str, obj: dict[str, Any], expected: bool
) -> None:
    assert _matches(_conditions_for(default_render, resource, mutating=False), obj) is expected
    # Templates are never patched: the mutating entries do not take what only DRA serves.
    assert _matches(_conditions_for(default_render, resource, mutating=True), obj) is False
    # Without the DRA objects to judge them by (no watch, or DRA off), they are not sent.
    from tests.support.chart_helpers import CASES

    no_dra = renderer.render_case(CASES["ci/no-dra-values.yaml"])
    assert _matches(_conditions_for(no_dra, resource, mutating=False), obj) is False


def test_every_expression_compiles(default_render) -> None:
    expressions = [
        c["expression"] for _, hook in webhooks(default_render) for c in hook["matchConditions"]
    ]
    # pods and three template entries in each configuration, and the three DRA entries
    assert len(expressions) == 11
    for expression in expressions:
        cel().compile(expression)


def test_guards_are_needed(default_render) -> None:
    """Without has(), a missing field is an error, not false: the guards matter."""
    with pytest.raises(Exception):  # noqa: B017 - the library raises KeyError or its own error
        cel().evaluate("object.spec.template.spec.containers.size() > 0", {"object": {"spec": {}}})
    deployment = _conditions_for(default_render, "deployments", mutating=False)
    assert _matches(deployment, {"spec": {"template": {}}}) is False


def claim(kind: str, *requests: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"devices": {"requests": list(requests)}}
    body = spec if kind == "ResourceClaim" else {"spec": spec}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": "c"},
        "spec": body,
    }


def exactly(device_class: str) -> dict[str, Any]:
    return {"name": "r", "exactly": {"deviceClassName": device_class}}


def first_available(*classes: str) -> dict[str, Any]:
    subs = [{"name": f"s{i}", "deviceClassName": c} for i, c in enumerate(classes)]
    return {"name": "r", "firstAvailable": subs}


CLAIM_SAMPLES: list[tuple[str, dict[str, Any], bool]] = [
    ("gpu class", exactly("gpu.nvidia.com"), True),
    ("per-profile MIG class", exactly("mig-1g-12gb.gpu.nvidia.com"), True),
    ("another vendor", exactly("gpu.example.com"), False),
    ("a name that only ends in the letters", exactly("notnvidia.com"), False),
    ("firstAvailable, GPU second", first_available("net.example.com", "mig.nvidia.com"), True),
    ("firstAvailable, no GPU", first_available("net.example.com"), False),
]


@pytest.mark.parametrize(
    ("kind", "request_", "expected"),
    [(k, s[1], s[2]) for k in ("ResourceClaim", "ResourceClaimTemplate") for s in CLAIM_SAMPLES],
    ids=[f"{k}: {s[0]}" for k in ("ResourceClaim", "ResourceClaimTemplate") for s in CLAIM_SAMPLES],
)
def test_claims_reach_the_webhook_only_for_gpu_classes(
    default_render, kind: str, request_: dict[str, Any], expected: bool
) -> None:
    resource = kind.lower() + "s"
    conditions = _conditions_for(default_render, resource, mutating=False)
    assert _matches(conditions, claim(kind, request_)) is expected
    # Not even a claim without requests makes the expression fail.
    assert _matches(conditions, {"spec": {}}) is False


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (
            pod(
                {
                    **pod_spec(CPU),
                    "resourceClaims": [{"name": "g", "resourceClaimTemplateName": "t"}],
                }
            ),
            True,
        ),
        (
            pod({**pod_spec(GPU), "resourceClaims": [{"name": "g", "resourceClaimName": "c"}]}),
            False,
        ),
        (pod(pod_spec(CPU)), False),
        (pod({**pod_spec(CPU), "resourceClaims": []}), False),
        (pod(pod_spec(CPU, DEVICE_CLASS_NAME)), True),
        (pod(pod_spec(PLAIN, init=(EXTENDED,))), True),
        # Any extended name may be served by a DeviceClass: other vendors' too (the webhook
        # allows them at once when no GPU class serves the name).
        (pod(pod_spec(OTHER_VENDOR)), True),
        (pod(pod_spec(GPU, DEVICE_CLASS_NAME)), False),
        ({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}, False),
    ],
    ids=[
        "claims only",
        "claims and a GPU resource: the pods entry has it",
        "no claims",
        "empty",
        "a DeviceClass by name",
        "an extended name in an init container",
        "another vendor's extended name",
        "a DeviceClass name and a GPU resource: the pods entry has it",
        "no spec",
    ],
)
def test_pods_that_may_use_dra_reach_the_webhook_once(
    default_render, obj: dict[str, Any], expected: bool
) -> None:
    conditions = _conditions_for(default_render, "pods", mutating=False, pod_claims=True)
    assert _matches(conditions, obj) is expected


# ---- GPU isolation (ci/isolation-values.yaml): pods that can reach a GPU node are sent too.
H100_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present"}
L4_TOLERATIONS = [
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "pool", "operator": "Equal", "value": "l4", "effect": "NoExecute"},
]


def _with(spec: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {**spec, **fields}


ISOLATION_SAMPLES = [
    ("GPU pod", pod(pod_spec(GPU)), "default", True),
    ("plain pod", pod(pod_spec(CPU)), "default", False),
    (
        "tolerates the H100 taint",
        pod(_with(pod_spec(CPU), tolerations=[H100_TOLERATION])),
        "default",
        True,
    ),
    (
        "tolerates the H100 taint with another value",
        pod(_with(pod_spec(CPU), tolerations=[{**H100_TOLERATION, "value": "true"}])),
        "default",
        False,
    ),
    (
        "catch-all toleration",
        pod(_with(pod_spec(CPU), tolerations=[{"operator": "Exists"}])),
        "default",
        True,
    ),
    (
        # (nvidia.com/gpu Exists alone would also tolerate the H100s' taint.)
        "tolerates half of the L4 taints",
        pod(_with(pod_spec(CPU), tolerations=L4_TOLERATIONS[1:])),
        "default",
        False,
    ),
    (
        "tolerates both L4 taints",
        pod(_with(pod_spec(CPU), tolerations=L4_TOLERATIONS)),
        "default",
        True,
    ),
    (
        "NoExecute-only toleration",
        pod(
            _with(
                pod_spec(CPU),
                tolerations=[
                    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}
                ],
            )
        ),
        "default",
        False,
    ),
    ("bound by nodeName", pod(_with(pod_spec(CPU), nodeName="node-1")), "default", True),
    (
        "exempt namespace",
        pod(_with(pod_spec(CPU), tolerations=[{"operator": "Exists"}])),
        "gpu-operator",
        False,
    ),
    ("GPU pod in the exempt namespace", pod(pod_spec(GPU)), "gpu-operator", True),
]


@pytest.fixture(scope="module")
def isolation_render(renderer):  # type: ignore[no-untyped-def]
    from tests.support.chart_helpers import CASES

    return renderer.render_case(CASES["ci/isolation-values.yaml"])


@pytest.mark.parametrize("mutating", [True, False], ids=["mutating", "validating"])
@pytest.mark.parametrize(
    ("obj", "namespace", "expected"),
    [s[1:] for s in ISOLATION_SAMPLES],
    ids=[s[0] for s in ISOLATION_SAMPLES],
)
def test_isolation_sends_exactly_the_pods_that_reach_a_gpu_node(
    isolation_render, mutating: bool, obj: dict[str, Any], namespace: str, expected: bool
) -> None:
    expressions = _conditions_for(isolation_render, "pods", mutating=mutating)
    context = {
        "object": copy.deepcopy(obj),
        "oldObject": None,
        "request": {"operation": "CREATE", "namespace": namespace},
    }
    assert all(cel().evaluate(e, context) is True for e in expressions) is expected


def test_isolation_sends_no_pod_update_that_asks_for_no_gpu(isolation_render) -> None:  # type: ignore[no-untyped-def]
    tolerating = pod(_with(pod_spec(CPU), tolerations=[{"operator": "Exists"}]))
    expressions = _conditions_for(isolation_render, "pods", mutating=False)
    for operation, sent in (("CREATE", True), ("UPDATE", False)):
        context = {
            "object": tolerating,
            "oldObject": None,
            "request": {"operation": operation, "namespace": "monitoring"},
        }
        assert all(cel().evaluate(e, context) is True for e in expressions) is sent


def test_isolation_covers_pod_templates(isolation_render) -> None:  # type: ignore[no-untyped-def]
    daemonset = workload(
        "DaemonSet", "apps/v1", _with(pod_spec(CPU), tolerations=[{"operator": "Exists"}])
    )
    context = {
        "object": daemonset,
        "oldObject": None,
        "request": {"operation": "CREATE", "namespace": "monitoring"},
    }
    expressions = _conditions_for(isolation_render, "daemonsets", mutating=False)
    assert all(cel().evaluate(e, context) is True for e in expressions)
    plain = workload("Deployment", "apps/v1", pod_spec(CPU))
    context["object"] = plain
    assert not all(cel().evaluate(e, context) is True for e in expressions)


def test_untainted_gpu_nodes_send_every_pod(renderer) -> None:  # type: ignore[no-untyped-def]
    rendered = renderer.render(
        "--set",
        "policy.spec.isolation.mode=warn",
        "--set-json",
        "webhook.isolation.gpuNodeTaints=[[]]",
    )
    expressions = _conditions_for(rendered, "pods", mutating=True)
    context = {
        "object": pod(pod_spec(CPU)),
        "oldObject": None,
        "request": {"operation": "CREATE", "namespace": "web"},
    }
    assert all(cel().evaluate(e, context) is True for e in expressions)
    context["request"]["namespace"] = "gpu-operator"
    assert not all(cel().evaluate(e, context) is True for e in expressions)
