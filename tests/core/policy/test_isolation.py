"""GPU isolation: pods that ask for no GPU, what reaches a GPU node, void, refusals, warnings."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import jsonpatch
import pytest

from tests.objects import cpu_node, ctr, gpu, gpu_node, pod
from webhook.policy import Inventory, Policy, inventory_from_nodes, inventory_from_policy, review
from webhook.policy.engine.isolation import visible_devices
from webhook.policy.errors import PolicyError
from webhook.policy.model import Isolation, parse_policy

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
TOLERATES = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
VOID = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}


def isolating(policy: Policy, mode: str = "enforce", exempt: tuple[str, ...] = ()) -> Policy:
    return replace(policy, isolation=Isolation(mode, frozenset(exempt)))  # type: ignore[arg-type]


def tainted(policy: Policy) -> Inventory:
    nodes = [gpu_node("gpu-1", "l20", taints=[GPU_TAINT], heavy=False), cpu_node("cpu-1")]
    return inventory_from_nodes(nodes, policy, source="t")


def untainted(policy: Policy) -> Inventory:
    nodes = [gpu_node("gpu-1", "l20", taints=[], heavy=False)]
    return inventory_from_nodes(nodes, policy, source="t")


def envs(obj: dict[str, Any]) -> dict[str, list[Any]]:
    spec = obj["spec"]
    return {
        c["name"]: c.get("env", [])
        for lst in ("initContainers", "containers")
        for c in spec.get(lst, [])
    }


@pytest.mark.parametrize(
    ("value", "seen"),
    [
        ("", "void"),
        ("void", "void"),
        (" , ", "void"),
        ("0,void", "void"),
        ("none", "none"),
        ("all", "all"),
        ("0,all", "all"),
        ("0,1", "0,1"),
        ("GPU-8f2a,GPU-1c3d", "GPU-8f2a,GPU-1c3d"),
        ("nvidia.com/gpu=all", "nvidia.com/gpu=all"),
    ],
)
def test_visible_devices_reads_the_variable_as_the_toolkit_does(value: str, seen: str) -> None:
    assert visible_devices(value) == seen


def test_isolation_is_off_by_default_and_the_gpu_operator_is_exempt() -> None:
    assert Isolation().mode == "off"
    assert Isolation().exempt_namespaces == frozenset({"gpu-operator"})


def test_a_bad_isolation_mode_names_the_field(example_policy: Policy) -> None:
    doc = {
        "apiVersion": "gpu-policy.io/v1alpha1",
        "kind": "SharingPolicy",
        "spec": {"devicePlugin": {"config": {"version": "v1"}}, "isolation": {"mode": "strict"}},
    }
    with pytest.raises(PolicyError, match=r"spec\.isolation\.mode.*off, warn, enforce"):
        parse_policy(doc, source="p.yaml")
    doc["spec"]["isolation"] = {"mode": False}  # YAML 1.1 reads `mode: off` so
    assert parse_policy(doc, source="p.yaml").isolation.mode == "off"


def test_off_leaves_a_pod_without_gpu_request_alone(example_policy: Policy) -> None:
    obj = pod(ctr("app"), tolerations=TOLERATES)
    decision = review(obj, policy=example_policy, inventory=tainted(example_policy))
    assert decision.results[0].message == "asks for no GPU"
    assert decision.patch == ()


def test_enforce_voids_every_container_of_a_pod_that_tolerates_the_gpu_taint(
    example_policy: Policy,
) -> None:
    policy = isolating(example_policy)
    obj = pod(ctr("app"), ctr("sidecar"), initContainers=[ctr("init")], tolerations=TOLERATES)
    before = copy.deepcopy(obj)
    decision = review(obj, policy=policy, inventory=tainted(policy))
    assert decision.allowed and obj == before
    after = jsonpatch.apply_patch(obj, list(decision.patch))
    assert envs(after) == {"init": [VOID], "app": [VOID], "sidecar": [VOID]}
    assert "gpu-policy.io/mutations" in after["metadata"]["annotations"]
    # Mutating the mutated pod changes nothing more.
    assert review(after, policy=policy, inventory=tainted(policy)).patch == ()


@pytest.mark.parametrize(
    ("spec", "reaches"),
    [
        pytest.param({}, False, id="no-toleration"),
        pytest.param({"tolerations": TOLERATES}, True, id="tolerates-gpu-taint"),
        pytest.param({"tolerations": [{"operator": "Exists"}]}, True, id="catch-all"),
        pytest.param(
            {"tolerations": [{"key": "nvidia.com/gpu", "value": "other", "effect": "NoSchedule"}]},
            False,
            id="other-value",
        ),
        pytest.param({"nodeName": "gpu-1"}, True, id="node-name-skips-noschedule"),
        pytest.param({"nodeName": "cpu-1", "tolerations": TOLERATES}, False, id="node-name-cpu"),
        pytest.param(
            {"tolerations": TOLERATES, "nodeSelector": {"kubernetes.io/hostname": "cpu-1"}},
            False,
            id="selects-cpu-node",
        ),
        pytest.param(
            {
                "tolerations": TOLERATES,
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "nvidia.com/gpu.product", "operator": "Exists"}
                                    ]
                                }
                            ]
                        }
                    }
                },
            },
            True,
            id="affinity-for-gfd-label",
        ),
        pytest.param(
            {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L20"}},
            False,
            id="selects-gpu-node-without-toleration",
        ),
    ],
)
def test_which_pods_reach_a_tainted_gpu_node(
    example_policy: Policy, spec: dict[str, Any], reaches: bool
) -> None:
    policy = isolating(example_policy)
    decision = review(pod(ctr("app"), **spec), policy=policy, inventory=tainted(policy))
    assert bool(decision.patch) is reaches
    if not reaches:
        assert decision.results[0].message == "asks for no GPU and cannot be placed on a GPU node"


def test_untainted_gpu_nodes_reach_every_pod(example_policy: Policy) -> None:
    policy = isolating(example_policy)
    decision = review(pod(ctr("app")), policy=policy, inventory=untainted(policy))
    assert decision.changes == ('container "app": env NVIDIA_VISIBLE_DEVICES=void',)


def test_without_nodes_the_policy_tolerations_stand_for_the_gpu_taints(
    example_policy: Policy,
) -> None:
    policy = isolating(example_policy)
    inventory = inventory_from_policy(policy)
    assert review(pod(ctr("app")), policy=policy, inventory=inventory).patch == ()
    assert review(pod(ctr("app"), tolerations=TOLERATES), policy=policy, inventory=inventory).patch


@pytest.mark.parametrize("value", ["all", "0", "GPU-8f2a"])
def test_a_variable_that_exposes_gpus_without_a_request_is_refused(
    example_policy: Policy, value: str
) -> None:
    policy = isolating(example_policy)
    app = ctr("app", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": value}])
    decision = review(pod(app, tolerations=TOLERATES), policy=policy, inventory=tainted(policy))
    assert not decision.allowed
    assert decision.failed == ("gpu-visible-devices",)
    message = decision.denial
    assert 'container "app" asks for no GPU' in message
    assert "GPU node gpu-1" in message
    assert "nvidia.com/gpu: 1" in message


@pytest.mark.parametrize("value", ["void", "", "none"])
def test_a_variable_that_exposes_no_gpu_is_kept(example_policy: Policy, value: str) -> None:
    policy = isolating(example_policy)
    app = ctr("app", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": value}])
    decision = review(pod(app, tolerations=TOLERATES), policy=policy, inventory=tainted(policy))
    assert decision.allowed and decision.patch == () and decision.failed == ()


def test_warn_mode_warns_and_writes_nothing(example_policy: Policy) -> None:
    policy = isolating(example_policy, "warn")
    exposing = ctr("x", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])
    obj = pod(ctr("app"), exposing, tolerations=TOLERATES)
    decision = review(obj, policy=policy, inventory=tainted(policy))
    assert decision.allowed and decision.patch == ()
    warned = [w for w in decision.warnings if w.startswith("[gpu-")]
    assert [w.split("]")[0] for w in warned] == ["[gpu-isolation", "[gpu-visible-devices"]


def test_privileged_container_is_warned_about_naming_nvml_and_containerd(
    example_policy: Policy,
) -> None:
    policy = isolating(example_policy)
    debug = ctr("debug", securityContext={"privileged": True})
    decision = review(pod(debug, tolerations=TOLERATES), policy=policy, inventory=tainted(policy))
    assert decision.allowed
    (warning,) = decision.warnings
    assert "Failed to initialize NVML: Unknown Error" in warning
    assert "privileged_without_host_devices" in warning


def test_opt_out_is_reported_and_left_alone(example_policy: Policy) -> None:
    policy = isolating(example_policy)
    app = ctr("app", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])
    obj = pod(app, tolerations=TOLERATES, annotations={"gpu-policy.io/isolation": "disabled"})
    decision = review(obj, policy=policy, inventory=tainted(policy))
    assert decision.allowed and decision.patch == ()
    assert decision.warnings and "opts out of GPU isolation" in decision.warnings[0]


def test_exempt_namespace_and_mirror_pods_are_untouched(example_policy: Policy) -> None:
    policy = isolating(example_policy, exempt=("gpu-operator",))
    inventory = tainted(policy)
    exporter = pod(ctr("dcgm"), namespace="gpu-operator", tolerations=TOLERATES)
    assert review(exporter, policy=policy, inventory=inventory).patch == ()
    mirror = pod(ctr("etcd"), nodeName="gpu-1", annotations={"kubernetes.io/config.mirror": "abc"})
    assert review(mirror, policy=policy, inventory=inventory).patch == ()


def test_gpu_containers_and_claim_containers_keep_their_env(example_policy: Policy) -> None:
    policy = isolating(example_policy)
    claimed = ctr("dra")
    claimed["resources"] = {"claims": [{"name": "gpu"}]}
    obj = pod(gpu(1), claimed, ctr("logs"))
    after = jsonpatch.apply_patch(
        obj, list(review(obj, policy=policy, inventory=untainted(policy)).patch)
    )
    assert envs(after) == {"main": [], "dra": [], "logs": [VOID]}


def test_global_audit_enforcement_writes_nothing(example_policy: Policy) -> None:
    policy = replace(isolating(example_policy), enforcement="audit")
    obj = pod(ctr("app"), tolerations=TOLERATES)
    assert review(obj, policy=policy, inventory=tainted(policy)).patch == ()
