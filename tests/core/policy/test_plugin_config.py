"""The device plugin's config: every real config a user has loads; what the plugin refuses, we refuse.

Fixtures under tests/fixtures/device-plugin-configs/ are taken verbatim from clusters' ConfigMaps
and from NVIDIA's documentation (each file names its source); invalid/ holds what the plugin
rejects.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.support.paths import TESTS
from webhook.files import load_policy
from webhook.policy import PolicyError
from webhook.policy.plugin_config import parse_plugin_config, parse_plugin_configmap
from webhook.policy.resources import ResourceForm

FIXTURES = TESTS / "fixtures" / "device-plugin-configs"
VALID = sorted(FIXTURES.glob("*.yaml"))
INVALID = sorted((FIXTURES / "invalid").glob("*.yaml"))


@pytest.mark.parametrize("path", VALID, ids=[p.stem for p in VALID])
def test_real_configs_load_verbatim(path: Path) -> None:
    policy = load_policy(path)
    assert policy.configs
    for config in policy.configs.values():
        assert config.mig_strategy in ("none", "single", "mixed")
        for res in config.resources:
            assert res.replicas >= 2


@pytest.mark.parametrize("path", INVALID, ids=[p.stem for p in INVALID])
def test_what_the_plugin_refuses_is_refused(path: Path) -> None:
    with pytest.raises(PolicyError) as caught:
        load_policy(path)
    err = caught.value
    assert str(path) in str(err)
    assert err.reason


def test_there_are_fixtures() -> None:
    assert len(VALID) >= 8 and len(INVALID) >= 5


def test_seed_003_configmap_keys() -> None:
    policy = load_policy(FIXTURES / "seed003-time-slicing-config.yaml")
    assert set(policy.configs) >= {"any", "l20", "t4"}
    gpu = ResourceForm(None, False)
    assert policy.configs["l20"].replicas(gpu) == 8
    assert policy.configs["t4"].replicas(gpu) == 3
    assert policy.configs["t4"].fail_requests_greater_than_one
    assert policy.default_config == "any"


def test_seed_001_mig_mixed_key() -> None:
    policy = load_policy(FIXTURES / "seed001-time-slicing-config.yaml")
    a100 = policy.configs["a100-40gb"]
    assert a100.mig_strategy == "mixed"
    assert a100.replicas(ResourceForm("3g.20gb", False)) == 3
    assert a100.replicas(ResourceForm("4g.20gb", False)) == 1


def _cfg(text: str) -> object:
    return yaml.safe_load(text)


@pytest.mark.parametrize(
    ("doc", "field", "reason"),
    [
        ("version: v2", "version", "unknown version"),
        ("flags: {migStrategy: bogus}", "flags.migStrategy", "unknown MIG strategy"),
        (
            "sharing: {timeSlicing: {resources: []}}",
            "sharing.timeSlicing.resources",
            "no resources",
        ),
        (
            "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 1}]}}",
            "sharing.timeSlicing.resources[0].replicas",
            ">= 2",
        ),
        (
            "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu}]}}",
            "sharing.timeSlicing.resources[0].replicas",
            "no replicas",
        ),
        (
            "sharing: {timeSlicing: {resources: [{replicas: 2}]}}",
            "sharing.timeSlicing.resources[0].name",
            "no resource name",
        ),
        (
            "sharing: {timeSlicing: {renameByDefault: 'yes', resources: [{name: gpu, replicas: 2}]}}",
            "sharing.timeSlicing.renameByDefault",
            "true or false",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 40 else None,
)
def test_refusals_name_field_and_reason(doc: str, field: str, reason: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_plugin_config(_cfg(doc), key="k", source="cfg.yaml")
    assert caught.value.field == field
    assert reason in caught.value.reason
    assert str(caught.value).startswith("cfg.yaml: ")


def test_fail_requests_greater_than_one_semantics() -> None:
    ts = parse_plugin_config(
        _cfg("sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2}]}}"), key="k", source="s"
    )
    assert ts.fail_requests_greater_than_one is False  # time-slicing: default false
    mps = parse_plugin_config(
        _cfg("sharing: {mps: {resources: [{name: gpu, replicas: 2}]}}"), key="k", source="s"
    )
    assert mps.fail_requests_greater_than_one is True  # MPS: absent means enforced
    mps_off = parse_plugin_config(
        _cfg(
            "sharing: {mps: {failRequestsGreaterThanOne: false, resources: [{name: gpu, replicas: 2}]}}"
        ),
        key="k",
        source="s",
    )
    assert mps_off.fail_requests_greater_than_one is False


def test_bare_name_gets_prefix_and_rename_applies() -> None:
    cfg = parse_plugin_config(
        _cfg(
            "sharing: {timeSlicing: {renameByDefault: true, resources: [{name: gpu, replicas: 4}]}}"
        ),
        key="k",
        source="s",
    )
    assert cfg.advertised(ResourceForm(None, False)).name == "nvidia.com/gpu.shared"
    assert cfg.advertised(ResourceForm("1g.5gb", False)).name == "nvidia.com/mig-1g.5gb"


def test_policy_errors_name_the_policy_field(tmp_path: Path) -> None:
    bad = tmp_path / "policy.yaml"
    bad.write_text(
        "apiVersion: gpu-policy.io/v1alpha1\nkind: SharingPolicy\n"
        "spec:\n  enforcement: sometimes\n  devicePlugin:\n    config: {version: v1}\n"
    )
    with pytest.raises(
        PolicyError, match=r"policy.yaml: spec.enforcement: 'sometimes' is not one of"
    ):
        load_policy(bad)
    bad.write_text(
        "apiVersion: gpu-policy.io/v1alpha1\nkind: SharingPolicy\nspec:\n  devicePlugin:\n    configMapFile: missing.yaml\n"
    )
    with pytest.raises(PolicyError, match=r"cannot read missing\.yaml"):
        load_policy(bad)
    bad.write_text("spec: [unclosed\n")
    with pytest.raises(PolicyError, match="line"):
        load_policy(bad)


def test_every_refusal_of_a_config_is_reported_at_once() -> None:
    """The plugin stops on the first; the webhook names that one first, then the others."""
    doc = _cfg(
        "version: v2\n"
        "flags: {plugin: {deviceIDStrategy: serial}}\n"
        "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 1}, {replicas: 2}]}}\n"
    )
    with pytest.raises(PolicyError) as caught:
        parse_plugin_config(doc, key="k", source="cfg.yaml")
    fields = [d.field for d in caught.value.diagnostics]
    assert fields == [
        "sharing.timeSlicing.resources[0].replicas",
        "sharing.timeSlicing.resources[1].name",
        "version",
        "flags.plugin.deviceIDStrategy",
    ]
    first = caught.value.diagnostics[0]
    assert (caught.value.field, caught.value.reason) == (first.field, first.reason)
    assert str(caught.value).startswith(
        "cfg.yaml: sharing.timeSlicing.resources[0].replicas: number of replicas must be >= 2"
    )
    assert all(str(d) in str(caught.value) for d in caught.value.diagnostics)


def test_every_key_of_a_configmap_is_read_and_each_refusal_reported() -> None:
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "plugin"},
        "data": {
            "good": "version: v1\n",
            "a": "flags: {migStrategy: half}\n",
            "b": "flags: {failOnInitError: 'yes'}\n",
            "c": 3,
        },
    }
    with pytest.raises(PolicyError) as caught:
        parse_plugin_configmap(configmap, source="cm.yaml")
    assert [(d.source, d.field) for d in caught.value.diagnostics] == [
        ("cm.yaml: data.a", "flags.migStrategy"),
        ("cm.yaml: data.b", "flags.failOnInitError"),
        ("cm.yaml", "data.c"),
    ]
