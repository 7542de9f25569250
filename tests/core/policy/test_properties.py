"""Properties that hold for every pod (hypothesis), on every test cluster.

- the patch applies to the original (with the jsonpatch library) and gives the mutated object;
- mutating twice equals mutating once (reinvocationPolicy: IfNeeded needs it);
- a mutated pod passes validation;
- a pod without GPU requests gets no patch (but under GPU isolation, docs/isolation.md);
- the submitted object is never modified in place.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import jsonpatch
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.paths import TESTS
from webhook.files import load_policy
from webhook.policy import Policy, inventory_from_policy, review
from webhook.policy.model import Isolation

GOLDEN = TESTS / "golden" / "policies"
PLAIN = {
    "example": load_policy(None),
    **{p.stem: load_policy(p) for p in sorted(GOLDEN.glob("*.yaml"))},
}
# The same clusters under GPU isolation: the properties hold for the void writes too.
POLICIES = {
    **PLAIN,
    **{f"{k}+isolation": replace(p, isolation=Isolation("enforce")) for k, p in PLAIN.items()},
}
INVENTORIES = {name: inventory_from_policy(p) for name, p in POLICIES.items()}

GPU_NAMES = [
    "nvidia.com/gpu",
    "nvidia.com/gpu.shared",
    "nvidia.com/mig-1g.5gb",
    "nvidia.com/mig-2g.10gb",
    "nvidia.com/mig-1g.10gb",
]
OTHER_NAMES = ["cpu", "memory", "nvidia.com/hostdev"]
quantities = st.sampled_from([1, 2, "1", "2", 1.0, "1000m"])
products = st.sampled_from(
    [
        "NVIDIA-L20",
        "Tesla-T4",
        "NVIDIA-A10G",
        "NVIDIA-L20-SHARED",
        "Tesla-T4-SHARED",
        "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb",
    ]
)


@st.composite
def resources(draw: st.DrawFn, *, with_gpu: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if with_gpu and draw(st.booleans()):
        name = draw(st.sampled_from(GPU_NAMES))
        qty = draw(quantities)
        where = draw(st.sampled_from(["limits", "requests", "both"]))
        if where in ("limits", "both"):
            out.setdefault("limits", {})[name] = qty
        if where in ("requests", "both"):
            out.setdefault("requests", {})[name] = qty
    for other in draw(st.lists(st.sampled_from(OTHER_NAMES), max_size=2, unique=True)):
        out.setdefault("limits", {})[other] = "1"
    return out


@st.composite
def pods(draw: st.DrawFn, *, with_gpu: bool = True) -> dict[str, Any]:
    def container(i: int) -> dict[str, Any]:
        c: dict[str, Any] = {"name": f"c{i}", "image": "img"}
        if draw(st.integers(0, 3)) == 0:
            value = draw(st.sampled_from(["void", "none", "", "all", "0", "GPU-1"]))
            c["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": value}]
        if draw(st.integers(0, 5)) == 0:
            c["securityContext"] = {"privileged": True}
        res = draw(resources(with_gpu=with_gpu))
        if res:
            c["resources"] = res
        return c

    spec: dict[str, Any] = {"containers": [container(i) for i in range(draw(st.integers(1, 3)))]}
    if draw(st.booleans()):
        spec["initContainers"] = [container(10)]
    if draw(st.booleans()):
        spec["nodeSelector"] = {"nvidia.com/gpu.product": draw(products)}
    if draw(st.booleans()):
        spec["tolerations"] = [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
        ]
    annotations = {}
    if draw(st.booleans()):
        annotations["gpu-policy.io/sharing"] = draw(st.sampled_from(["shared", "exclusive", "any"]))
    if draw(st.booleans()):
        annotations["gpu-policy.io/product"] = draw(products)
    meta: dict[str, Any] = {"name": "p", "namespace": "default"}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _review(obj: dict[str, Any], name: str) -> Any:
    return review(obj, policy=POLICIES[name], inventory=INVENTORIES[name])


cluster = st.sampled_from(sorted(POLICIES))
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(obj=pods(), name=cluster)
def test_patch_applies_and_mutation_is_idempotent(obj: dict[str, Any], name: str) -> None:
    before = copy.deepcopy(obj)
    decision = _review(obj, name)
    assert obj == before, "review() must not modify the submitted object"
    if decision.mutated is None:
        assert decision.patch == ()
        return
    assert decision.allowed
    patched = jsonpatch.apply_patch(obj, list(decision.patch))
    assert patched == decision.mutated
    again = _review(copy.deepcopy(decision.mutated), name)
    assert again.patch == (), f"second mutation changed: {again.changes}"
    assert again.allowed, again.denial


@SETTINGS
@given(obj=pods(), name=cluster)
def test_allowed_pods_stay_allowed_after_mutation(obj: dict[str, Any], name: str) -> None:
    decision = _review(obj, name)
    final = decision.mutated if decision.mutated is not None else obj
    assert _review(copy.deepcopy(final), name).allowed is decision.allowed


@SETTINGS
@given(obj=pods(with_gpu=False), name=st.sampled_from(sorted(PLAIN)))
def test_pods_without_gpu_get_no_patch(obj: dict[str, Any], name: str) -> None:
    decision = _review(obj, name)
    assert decision.allowed and decision.patch == () and decision.mutated is None


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_policy_cases_exist(name: str) -> None:
    assert isinstance(POLICIES[name], Policy) and INVENTORIES[name].pools
