"""Reading what a DRA claim asks for (webhook/policy/claims.py), as the API types define it."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.policy.claims import claim_spec, pod_claim_refs, read_claim, sharing_strategy
from webhook.policy.errors import PolicyError
from webhook.policy.model import parse_policy


def _gpu_config(strategy: str, kind: str = "GpuConfig") -> dict[str, Any]:
    return {
        "driver": "gpu.nvidia.com",
        "parameters": {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": kind,
            "sharing": {"strategy": strategy},
        },
    }


def test_template_and_claim_carry_the_spec_at_their_own_paths() -> None:
    spec = {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "x"}}]}}
    claim = {"kind": "ResourceClaim", "spec": spec}
    template = {"kind": "ResourceClaimTemplate", "spec": {"spec": spec}}
    assert claim_spec(claim) is spec
    assert claim_spec(template) is spec
    assert claim_spec({"kind": "Pod", "spec": spec}) is None


def test_exactly_defaults_to_one_device_and_reads_mode_selectors_capacity() -> None:
    spec = {
        "devices": {
            "requests": [
                {"name": "one", "exactly": {"deviceClassName": "gpu.nvidia.com"}},
                {
                    "name": "all",
                    "exactly": {
                        "deviceClassName": "mig.nvidia.com",
                        "allocationMode": "All",
                        "selectors": [{"cel": {"expression": "device.driver == 'x'"}}],
                        "adminAccess": True,
                        "capacity": {"requests": {"shares": "2"}},
                    },
                },
            ]
        }
    }
    ask = read_claim(spec, "claim x")
    one, every = (r.alternatives[0] for r in ask.requests)
    assert (one.count, one.all_devices, one.admin_access) == (1, False, False)
    assert (every.count, every.all_devices, every.admin_access) == (0, True, True)
    assert every.selectors == ("device.driver == 'x'",)
    assert every.capacity == {"shares": "2"}
    assert ask.classes == ("gpu.nvidia.com", "mig.nvidia.com")


def test_first_available_subrequests_keep_their_order_and_never_admin_access() -> None:
    spec = {
        "devices": {
            "requests": [
                {
                    "name": "gpu",
                    "firstAvailable": [
                        {"name": "big", "deviceClassName": "gpu.nvidia.com", "count": 2},
                        {"name": "mig", "deviceClassName": "mig.nvidia.com", "adminAccess": True},
                    ],
                }
            ]
        }
    }
    (request,) = read_claim(spec, "c").requests
    assert request.first_available
    assert [(a.name, a.count, a.admin_access) for a in request.alternatives] == [
        ("gpu/big", 2, False),
        ("gpu/mig", 1, False),
    ]


@pytest.mark.parametrize(
    ("requests", "expected"),
    [
        pytest.param(None, "MPS", id="no-requests-list-applies-to-all"),
        pytest.param([], "MPS", id="empty-list-applies-to-all"),
        pytest.param(["gpu"], "MPS", id="named"),
        pytest.param(["gpu/sub"], "MPS", id="a-subrequest-of-it"),
        pytest.param(["other"], None, id="another-request"),
    ],
)
def test_sharing_config_applies_to_the_requests_it_names(
    requests: list[str] | None, expected: str | None
) -> None:
    config: dict[str, Any] = {"opaque": _gpu_config("MPS")}
    if requests is not None:
        config["requests"] = requests
    spec = {
        "devices": {
            "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}],
            "config": [config],
        }
    }
    assert read_claim(spec, "c").requests[0].sharing == expected


@pytest.mark.parametrize(
    ("parameters", "expected"),
    [
        pytest.param(_gpu_config("TimeSlicing")["parameters"], "TimeSlicing", id="gpu-timeslicing"),
        pytest.param(_gpu_config("MPS", "MigDeviceConfig")["parameters"], "MPS", id="mig-mps"),
        pytest.param(
            {**_gpu_config("MPS")["parameters"], "apiVersion": "resource.nvidia.com/v1"},
            None,
            id="another-version",
        ),
        pytest.param(
            {**_gpu_config("MPS")["parameters"], "kind": "VfioDeviceConfig"},
            None,
            id="a-kind-without-sharing",
        ),
        pytest.param(_gpu_config("Fabric")["parameters"], None, id="unknown-strategy"),
    ],
)
def test_sharing_strategy_is_the_nvidia_drivers(
    parameters: dict[str, Any], expected: str | None
) -> None:
    assert sharing_strategy({"opaque": {"driver": "gpu.nvidia.com", "parameters": parameters}}) == (
        expected
    )


def test_pod_claim_refs_by_name_and_by_template() -> None:
    spec = {
        "resourceClaims": [
            {"name": "a", "resourceClaimTemplateName": "t"},
            {"name": "b", "resourceClaimName": "shared"},
            {"name": "c"},
        ]
    }
    refs = [(r.name, r.claim, r.template) for r in pod_claim_refs(spec)]
    assert refs == [("a", None, "t"), ("b", "shared", None)]


def _policy(dra: object) -> dict[str, Any]:
    return {
        "apiVersion": "gpu-policy.io/v1alpha1",
        "kind": "SharingPolicy",
        "spec": {"devicePlugin": {"config": {"version": "v1"}}, "dra": dra},
    }


def test_policy_dra_defaults_and_values() -> None:
    default = parse_policy(_policy({}), source="p.yaml").dra
    assert default.fail_requests_greater_than_one
    assert default.is_gpu_class("gpu.nvidia.com")
    assert default.is_gpu_class("mig-1g-12gb.gpu.nvidia.com")
    assert not default.is_gpu_class("gpu.example.com")
    assert not default.is_gpu_class("notnvidia.com")
    given = parse_policy(
        _policy(
            {
                "deviceClassSuffixes": ["example.com"],
                "failRequestsGreaterThanOne": False,
                "adminAccessNamespaces": ["monitoring"],
            }
        ),
        source="p.yaml",
    ).dra
    assert given.is_gpu_class("gpu.example.com")
    assert not given.fail_requests_greater_than_one
    assert given.admin_access_namespaces == {"monitoring"}


@pytest.mark.parametrize(
    ("dra", "field"),
    [
        pytest.param({"failRequestGreaterThanOne": True}, "spec.dra.failRequestGreaterThanOne"),
        pytest.param({"deviceClassSuffixes": []}, "spec.dra.deviceClassSuffixes"),
        pytest.param({"failRequestsGreaterThanOne": "yes"}, "spec.dra.failRequestsGreaterThanOne"),
    ],
)
def test_policy_dra_mistakes_name_the_field(dra: object, field: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy(_policy(dra), source="p.yaml")
    assert field in str(caught.value)
