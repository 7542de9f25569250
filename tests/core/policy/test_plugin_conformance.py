"""Conformance with NVIDIA's device plugin and GFD (k8s-device-plugin v0.20.0).

One row per validation branch of ``api/config/v1`` (and of the plugin's ``validateFlags``),
and one per GFD label rule the config -> offers path reaches. Every row names the NVIDIA file,
the function and the commit it was read at; docs/device-plugin.md lists those commits and
every rule. A row whose file the document does not list fails.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.objects import gpu, gpu_node, pod
from tests.support.paths import REPO
from webhook.contract import GPU_POLICY_API_VERSION, SHARING_POLICY_KIND
from webhook.files import load_inventory, load_policy
from webhook.policy import (
    PolicyError,
    inventory_from_nodes,
    inventory_from_policy,
    parse_policy,
    review,
)
from webhook.policy.plugin_config import PluginConfig, parse_plugin_config, parse_plugin_configmap
from webhook.policy.products import MIG_PROFILES, product_value
from webhook.policy.resources import ResourceForm, is_mig_profile, mig_form, parse_resource

DOC = (REPO / "docs" / "device-plugin.md").read_text()
CLUSTERS = REPO / "examples" / "clusters"

_V = "k8s-device-plugin v0.20.0"
CONFIG = f"{_V} api/config/v1/config.go parseConfigFrom (read at 03973a97)"
CONFIG_MPS = f"{_V} api/config/v1/config.go NewConfig, #1762 (read at 03973a97; tests f14d3d12)"
CONFIG_IGNORES = f"{_V} api/config/v1/config.go DisableResourceNamingInConfig (read at 03973a97)"
SHARING = f"{_V} api/config/v1/sharing.go SharingStrategy/ReplicatedResources (read at 03973a97)"
RESOURCES_UNMARSHAL = (
    f"{_V} api/config/v1/replicas.go ReplicatedResources.UnmarshalJSON "
    "(api/config/v1/replicas_test.go at fe7630fd)"
)
RESOURCE_UNMARSHAL = (
    f"{_V} api/config/v1/replicas.go ReplicatedResource.UnmarshalJSON (read at 9b89da8b)"
)
DEVICES_UNMARSHAL = (
    f"{_V} api/config/v1/replicas.go ReplicatedDevices.UnmarshalJSON (read at 9b89da8b)"
)
NAME = f"{_V} api/config/v1/resources.go NewResourceName (read at 84c8174d)"
NAME_LENGTH = f"{_V} api/config/v1/consts.go MaxResourceNameLength (read at 2f91983a)"
TOP_RESOURCES = f"{_V} api/config/v1/resources.go Resource.UnmarshalJSON (read at 84c8174d)"
VALIDATE_FLAGS = f"{_V} cmd/nvidia-device-plugin/main.go validateFlags"
DEVICE_MAP = f"{_V} internal/rm/device_map.go updateDeviceMapWithReplicas (read at 0deecb2d)"
CHANGELOG = f"{_V} CHANGELOG.md v0.12.0-rc.2 'Remove timeSlicing.strategy'"
YAML_TO_JSON = "kubernetes-sigs/yaml yaml.go yamlToJSONTarget (read at 1e5b47d3)"
MPS_PLUGIN = f"{_V} internal/plugin/mps.go getMPSOptions (read at ffd67d5d)"
MPS_DAEMON = f"{_V} cmd/mps-control-daemon/mps/manager.go Daemons (read at 5bd74edc)"
GFD_RESOURCE = f"{_V} internal/lm/resource.go getProductName/baseLabeler (read at aaccdfd2)"
GFD_MIG = (
    f"{_V} internal/lm/mig-strategy.go newMigStrategy{{Single,Mixed}}Labeler (read at b9fe486d)"
)
GFD_MIG_NAME = f"{_V} internal/resource/nvml-mig-device.go GetName (read at f161ab27)"
# Read at the v0.20.0 tag itself (tag object 460230bc, commit 1b826acc).
FLAG_TYPES = f"{_V} api/config/v1/flags.go CommandLineFlags (tag v0.20.0)"
VALIDATE_FLAGS_TAG = f"{_V} cmd/nvidia-device-plugin/main.go validateFlags (tag v0.20.0)"
IMEX = f"{_V} api/config/v1/imex.go AssertChannelIDsValid (tag v0.20.0)"
MPS_DEVICE = f"{_V} cmd/mps-control-daemon/mps/device.go assertReplicas/maxClients (tag v0.20.0)"
MPS_WAIT = f"{_V} internal/plugin/mps.go getMPSOptions/waitForDaemon (tag v0.20.0)"
GFD_CAPABLE = f"{_V} internal/lm/nvml.go newSharingLabeler/newMigCapabilityLabeler (tag v0.20.0)"


@dataclass(frozen=True)
class Refused:
    """The plugin does not start: ``reason`` is part of its own message."""

    field: str
    reason: str


@dataclass(frozen=True)
class Loads:
    """The plugin starts. ``warns``: the fields the webhook warns about, in order."""

    warns: tuple[str, ...] = ()
    strategy: str | None = None
    mig_strategy: str | None = None
    gpu_replicas: int | None = None
    fail: bool | None = None
    rename: bool | None = None
    # False: the plugin loads the config yet never registers a resource on its nodes.
    served: bool | None = None


@dataclass(frozen=True)
class ConfigRow:
    rule: str
    doc: str
    expect: Refused | Loads
    source: str


TS = "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 2}]}}"
MPS = "sharing: {mps: {resources: [{name: nvidia.com/gpu, replicas: 2}]}}"
UUID = "4cf8db2d-06c0-7d70-1a51-e59b25b2c16c"


def _ts_entry(entry: str, section: str = "timeSlicing") -> str:
    return f"sharing: {{{section}: {{resources: [{entry}]}}}}"


CONFIG_ROWS = [
    # --- the file and its version -------------------------------------------------------
    ConfigRow("file-empty-is-v1", "", Loads(strategy="none", mig_strategy="none"), CONFIG),
    ConfigRow("file-not-a-mapping", "[1, 2]", Refused("", "must be a mapping"), CONFIG),
    ConfigRow("version-unknown", "version: v2", Refused("version", "unknown version"), CONFIG),
    ConfigRow("version-empty-is-v1", "version: ''", Loads(strategy="none"), CONFIG),
    ConfigRow(
        "version-checked-after-decoding",
        "version: v2\nsharing: {timeSlicing: {}}",
        Refused("sharing.timeSlicing.resources", "no resources specified"),
        CONFIG,
    ),
    ConfigRow(
        "top-level-unknown-key-ignored",
        f"sharng: {{timeSlicing: {{resources: []}}}}\n{TS}",
        Loads(warns=("sharng",), strategy="time-slicing"),
        CONFIG,
    ),
    ConfigRow(
        "struct-keys-any-case",
        "Sharing: {timeslicing: {resources: [{name: gpu, replicas: 3}]}}",
        Loads(strategy="time-slicing", gpu_replicas=3),
        CONFIG,
    ),
    # --- flags.migStrategy ----------------------------------------------------------------
    ConfigRow(
        "mig-strategy-unknown",
        "flags: {migStrategy: bogus}",
        Refused("flags.migStrategy", "unknown MIG strategy"),
        VALIDATE_FLAGS,
    ),
    ConfigRow(
        "mig-strategy-empty-string",
        "flags: {migStrategy: ''}",
        Refused("flags.migStrategy", "unknown MIG strategy: ''"),
        VALIDATE_FLAGS,
    ),
    ConfigRow(
        "mig-strategy-null-is-default-none",
        "flags: {migStrategy: null}",
        Loads(mig_strategy="none"),
        VALIDATE_FLAGS,
    ),
    ConfigRow(
        "flags-not-a-mapping", "flags: [single]", Refused("flags", "must be a mapping"), CONFIG
    ),
    # --- sharing sections -----------------------------------------------------------------
    ConfigRow(
        "time-slicing-empty-mapping",
        "sharing: {timeSlicing: {}}",
        Refused("sharing.timeSlicing.resources", "no resources specified"),
        RESOURCES_UNMARSHAL,
    ),
    ConfigRow(
        "time-slicing-null",
        "sharing:\n  timeSlicing:\n",
        Refused("sharing.timeSlicing.resources", "no resources specified"),
        RESOURCES_UNMARSHAL,
    ),
    ConfigRow(
        "time-slicing-empty-resources",
        "sharing: {timeSlicing: {resources: []}}",
        Refused("sharing.timeSlicing.resources", "no resources specified"),
        RESOURCES_UNMARSHAL,
    ),
    ConfigRow(
        "time-slicing-resources-not-a-list",
        "sharing: {timeSlicing: {resources: {name: gpu, replicas: 2}}}",
        Refused("sharing.timeSlicing.resources", "must be a list"),
        RESOURCES_UNMARSHAL,
    ),
    ConfigRow(
        "time-slicing-not-a-mapping",
        "sharing: {timeSlicing: 4}",
        Refused("sharing.timeSlicing", "must be a mapping"),
        RESOURCES_UNMARSHAL,
    ),
    ConfigRow(
        "mps-empty-mapping",
        "sharing: {mps: {}}",
        Refused("sharing.mps.resources", "no resources specified"),
        RESOURCES_UNMARSHAL,
    ),
    ConfigRow(
        "mps-null-is-no-mps",
        "sharing:\n  mps:\n",
        Loads(strategy="none", gpu_replicas=1),
        SHARING,
    ),
    ConfigRow(
        "rename-by-default-not-a-boolean",
        "sharing: {timeSlicing: {renameByDefault: 'yes', resources: [{name: gpu, replicas: 2}]}}",
        Refused("sharing.timeSlicing.renameByDefault", "true or false"),
        RESOURCES_UNMARSHAL,
    ),
    ConfigRow(
        "rename-by-default-null-is-false",
        "sharing: {timeSlicing: {renameByDefault: null, resources: [{name: gpu, replicas: 2}]}}",
        Loads(rename=False, gpu_replicas=2),
        RESOURCES_UNMARSHAL,
    ),
    ConfigRow(
        "fail-requests-not-a-boolean",
        "sharing: {timeSlicing: {failRequestsGreaterThanOne: 1, resources: [{name: gpu, replicas: 2}]}}",
        Refused("sharing.timeSlicing.failRequestsGreaterThanOne", "true or false"),
        RESOURCES_UNMARSHAL,
    ),
    ConfigRow(
        "time-slicing-strategy-key-removed",
        "sharing: {timeSlicing: {strategy: round-robin, resources: [{name: gpu, replicas: 2}]}}",
        Loads(warns=("sharing.timeSlicing.strategy",), strategy="time-slicing", gpu_replicas=2),
        CHANGELOG,
    ),
    ConfigRow(
        "time-slicing-unknown-key-ignored",
        "sharing: {timeSlicing: {renamebydefault: true, resources: [{name: gpu, replicas: 2}]}}",
        Loads(warns=("sharing.timeSlicing.renamebydefault",), rename=False),
        RESOURCES_UNMARSHAL,
    ),
    # --- one resources[] entry ------------------------------------------------------------
    ConfigRow(
        "resource-entry-not-a-mapping",
        _ts_entry("gpu"),
        Refused("sharing.timeSlicing.resources[0]", "must be a mapping"),
        RESOURCE_UNMARSHAL,
    ),
    ConfigRow(
        "resource-name-missing",
        _ts_entry("{replicas: 2}"),
        Refused("sharing.timeSlicing.resources[0].name", "no resource name specified"),
        RESOURCE_UNMARSHAL,
    ),
    ConfigRow(
        "resource-name-null-is-malformed",
        _ts_entry("{name: null, replicas: 2}"),
        Refused("sharing.timeSlicing.resources[0].name", "must be a resource name"),
        NAME,
    ),
    ConfigRow(
        "resource-name-bare-gets-prefix",
        _ts_entry("{name: gpu, replicas: 5}"),
        Loads(gpu_replicas=5),
        NAME,
    ),
    ConfigRow(
        "resource-name-upper-case",
        _ts_entry("{name: nvidia.com/GPU, replicas: 2}"),
        Refused("sharing.timeSlicing.resources[0].name", "incorrect format for resource name"),
        NAME,
    ),
    ConfigRow(
        "resource-name-plus-me",
        _ts_entry("{name: nvidia.com/mig-1g.10gb+me, replicas: 2}"),
        Refused("sharing.timeSlicing.resources[0].name", "incorrect format for resource name"),
        NAME,
    ),
    ConfigRow(
        "resource-name-other-domain-gets-prefix",
        _ts_entry("{name: example.com/gpu, replicas: 2}"),
        Refused("sharing.timeSlicing.resources[0].name", "'nvidia.com/example.com/gpu'"),
        NAME,
    ),
    ConfigRow(
        "resource-name-longer-than-63",
        _ts_entry(f"{{name: nvidia.com/{'g' * 53}, replicas: 2}}"),
        Refused("sharing.timeSlicing.resources[0].name", "63 characters or less"),
        NAME_LENGTH,
    ),
    ConfigRow(
        "resource-name-no-device-ignored",
        _ts_entry("{name: nvidia.com/gpu-a, replicas: 2}"),
        Loads(warns=("sharing.timeSlicing.resources[0].name",), gpu_replicas=1),
        DEVICE_MAP,
    ),
    ConfigRow(
        "resource-name-shared-form-ignored",
        _ts_entry("{name: nvidia.com/gpu.shared, replicas: 2}"),
        Loads(warns=("sharing.timeSlicing.resources[0].name",), gpu_replicas=1),
        DEVICE_MAP,
    ),
    ConfigRow(
        "resource-name-mig-under-none-ignored",
        _ts_entry("{name: nvidia.com/mig-1g.10gb, replicas: 2}"),
        Loads(warns=("sharing.timeSlicing.resources[0].name",), gpu_replicas=1),
        DEVICE_MAP,
    ),
    ConfigRow(
        "replicas-missing",
        _ts_entry("{name: gpu}"),
        Refused("sharing.timeSlicing.resources[0].replicas", "no replicas specified"),
        RESOURCE_UNMARSHAL,
    ),
    ConfigRow(
        "replicas-below-two",
        _ts_entry("{name: gpu, replicas: 1}"),
        Refused("sharing.timeSlicing.resources[0].replicas", "number of replicas must be >= 2"),
        RESOURCE_UNMARSHAL,
    ),
    ConfigRow(
        "replicas-null-is-zero",
        _ts_entry("{name: gpu, replicas: null}"),
        Refused("sharing.timeSlicing.resources[0].replicas", "must be >= 2, not 0"),
        RESOURCE_UNMARSHAL,
    ),
    ConfigRow(
        "replicas-whole-float",
        _ts_entry("{name: gpu, replicas: 4.0}"),
        Loads(gpu_replicas=4),
        YAML_TO_JSON,
    ),
    ConfigRow(
        "replicas-fractional",
        _ts_entry("{name: gpu, replicas: 4.5}"),
        Refused("sharing.timeSlicing.resources[0].replicas", "must be an integer"),
        YAML_TO_JSON,
    ),
    ConfigRow(
        "replicas-quoted",
        _ts_entry("{name: gpu, replicas: '4'}"),
        Refused("sharing.timeSlicing.resources[0].replicas", "must be an integer"),
        RESOURCE_UNMARSHAL,
    ),
    ConfigRow(
        "replicas-boolean",
        _ts_entry("{name: gpu, replicas: true}"),
        Refused("sharing.timeSlicing.resources[0].replicas", "must be an integer"),
        RESOURCE_UNMARSHAL,
    ),
    ConfigRow(
        "resource-entry-unknown-key-ignored",
        _ts_entry("{name: gpu, replica: 8, replicas: 2}"),
        Loads(warns=("sharing.timeSlicing.resources[0].replica",), gpu_replicas=2),
        RESOURCE_UNMARSHAL,
    ),
    # --- devices: parsed, then ignored unless "all" ---------------------------------------
    ConfigRow(
        "devices-all",
        _ts_entry("{name: gpu, devices: all, replicas: 2}"),
        Loads(),
        DEVICES_UNMARSHAL,
    ),
    ConfigRow(
        "devices-other-string",
        _ts_entry("{name: gpu, devices: some, replicas: 2}"),
        Refused("sharing.timeSlicing.resources[0].devices", "the only valid string input is 'all'"),
        DEVICES_UNMARSHAL,
    ),
    ConfigRow(
        "devices-null",
        _ts_entry("{name: gpu, devices: null, replicas: 2}"),
        Refused("sharing.timeSlicing.resources[0].devices", "the only valid string input is 'all'"),
        DEVICES_UNMARSHAL,
    ),
    ConfigRow(
        "devices-count-ignored",
        _ts_entry("{name: gpu, devices: 2, replicas: 2}"),
        Loads(warns=("sharing.timeSlicing.resources[0].devices",)),
        CONFIG_IGNORES,
    ),
    ConfigRow(
        "devices-count-not-positive",
        _ts_entry("{name: gpu, devices: 0, replicas: 2}"),
        Refused("sharing.timeSlicing.resources[0].devices", "a count of devices must be > 0"),
        DEVICES_UNMARSHAL,
    ),
    ConfigRow(
        "devices-list-ignored",
        _ts_entry(
            f"{{name: gpu, devices: [0, '1', '0:1', GPU-{UUID}, MIG-{UUID}, "
            f"'MIG-GPU-{UUID}/3/0'], replicas: 2}}"
        ),
        Loads(warns=("sharing.timeSlicing.resources[0].devices",)),
        CONFIG_IGNORES,
    ),
    ConfigRow(
        "devices-list-bad-entry",
        _ts_entry("{name: gpu, devices: [GPU-UUID], replicas: 2}"),
        Refused(
            "sharing.timeSlicing.resources[0].devices[0]",
            "unsupported type for device in devices list",
        ),
        DEVICES_UNMARSHAL,
    ),
    ConfigRow(
        "devices-list-negative-index",
        _ts_entry("{name: gpu, devices: [-1], replicas: 2}"),
        Refused(
            "sharing.timeSlicing.resources[0].devices[0]",
            "unsupported type for device in devices list",
        ),
        DEVICES_UNMARSHAL,
    ),
    ConfigRow(
        "devices-other-type",
        _ts_entry("{name: gpu, devices: true, replicas: 2}"),
        Refused("sharing.timeSlicing.resources[0].devices", "unrecognized type for devices spec"),
        DEVICES_UNMARSHAL,
    ),
    # --- rename: parsed, then ignored ------------------------------------------------------
    ConfigRow(
        "rename-ignored",
        _ts_entry("{name: gpu, rename: t4-shared, replicas: 2}"),
        Loads(warns=("sharing.timeSlicing.resources[0].rename",), rename=False),
        CONFIG_IGNORES,
    ),
    ConfigRow(
        "rename-malformed",
        _ts_entry("{name: gpu, rename: T4_Shared, replicas: 2}"),
        Refused("sharing.timeSlicing.resources[0].rename", "incorrect format for resource name"),
        NAME,
    ),
    ConfigRow(
        "rename-default-shared-is-quiet",
        "sharing: {timeSlicing: {renameByDefault: true, resources: "
        "[{name: gpu, rename: nvidia.com/gpu.shared, replicas: 2}]}}",
        Loads(rename=True),
        CONFIG_IGNORES,
    ),
    # --- top-level resources: parsed, then ignored ----------------------------------------
    ConfigRow(
        "top-level-resources-ignored",
        "resources: {gpus: [{pattern: '*', name: gpu}]}",
        Loads(warns=("resources",)),
        CONFIG_IGNORES,
    ),
    ConfigRow(
        "top-level-resources-without-pattern",
        "resources: {gpus: [{name: gpu}]}",
        Refused("resources.gpus[0]", "resources must have a 'pattern' field set"),
        TOP_RESOURCES,
    ),
    # --- time-slicing next to MPS, MPS rules -----------------------------------------------
    ConfigRow(
        "time-slicing-and-mps-uses-mps",
        "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 8}]}, "
        "mps: {resources: [{name: gpu, replicas: 4}]}}",
        Loads(warns=("sharing.timeSlicing",), strategy="mps", gpu_replicas=4),
        SHARING,
    ),
    ConfigRow(
        "time-slicing-next-to-mps-still-decoded",
        "sharing: {timeSlicing: {resources: []}, mps: {resources: [{name: gpu, replicas: 4}]}}",
        Refused("sharing.timeSlicing.resources", "no resources specified"),
        SHARING,
    ),
    ConfigRow(
        "mps-with-mig-strategy-mixed",
        f"flags: {{migStrategy: mixed}}\n{MPS}",
        Refused("flags.migStrategy", "using --mig-strategy=mixed is not supported with MPS"),
        VALIDATE_FLAGS,
    ),
    ConfigRow(
        "mps-naming-mig-under-none-loads",
        _ts_entry("{name: nvidia.com/mig-1g.10gb, replicas: 2}", "mps"),
        Loads(
            warns=("sharing.mps.resources[0].name", "sharing.mps.resources"),
            strategy="mps",
            gpu_replicas=1,
        ),
        MPS_DAEMON,
    ),
    ConfigRow(
        "mps-under-single-warns-mig",
        f"flags: {{migStrategy: single}}\n{MPS}",
        Loads(warns=("sharing.mps",), strategy="mps", mig_strategy="single", gpu_replicas=2),
        MPS_PLUGIN,
    ),
    ConfigRow(
        "mps-fail-requests-defaults-true",
        MPS,
        Loads(strategy="mps", fail=True),
        CONFIG_MPS,
    ),
    ConfigRow(
        "mps-fail-requests-explicit-false",
        "sharing: {mps: {failRequestsGreaterThanOne: false, resources: [{name: gpu, replicas: 2}]}}",
        Loads(strategy="mps", fail=False),
        CONFIG_MPS,
    ),
    ConfigRow(
        "time-slicing-fail-requests-defaults-false",
        TS,
        Loads(strategy="time-slicing", fail=False),
        RESOURCES_UNMARSHAL,
    ),
    # --- MPS: the control daemon's client limit, and a config that shares nothing --------
    ConfigRow(
        "mps-replicas-above-client-limit-never-served",
        _ts_entry("{name: gpu, replicas: 64}", "mps"),
        Loads(warns=("sharing.mps.resources",), strategy="mps", gpu_replicas=64, served=False),
        MPS_DEVICE,
    ),
    ConfigRow(
        "mps-replicas-49-never-served",
        _ts_entry("{name: gpu, replicas: 49}", "mps"),
        Loads(warns=("sharing.mps.resources",), gpu_replicas=49, served=False),
        MPS_DEVICE,
    ),
    ConfigRow(
        "mps-replicas-48-served-from-7.5-warns-below",
        _ts_entry("{name: gpu, replicas: 48}", "mps"),
        Loads(warns=("sharing.mps.resources",), gpu_replicas=48, served=True),
        MPS_DEVICE,
    ),
    ConfigRow(
        "mps-replicas-16-served-everywhere",
        _ts_entry("{name: gpu, replicas: 16}", "mps"),
        Loads(warns=(), gpu_replicas=16, served=True),
        MPS_DEVICE,
    ),
    ConfigRow(
        "time-slicing-has-no-client-limit",
        _ts_entry("{name: gpu, replicas: 64}"),
        Loads(warns=(), gpu_replicas=64, served=True),
        MPS_DEVICE,
    ),
    ConfigRow(
        "mps-sharing-nothing-never-served",
        _ts_entry("{name: nvidia.com/mig-1g.10gb, replicas: 2}", "mps"),
        Loads(warns=("sharing.mps.resources[0].name", "sharing.mps.resources"), served=False),
        MPS_WAIT,
    ),
    # --- flags: validateFlags, in its order, and the strict types of flags.go -------------
    ConfigRow(
        "device-list-strategy-unknown",
        "flags: {plugin: {deviceListStrategy: nvidia}}",
        Refused(
            "flags.plugin.deviceListStrategy",
            "invalid --device-list-strategy option: invalid strategy: 'nvidia'",
        ),
        VALIDATE_FLAGS_TAG,
    ),
    ConfigRow(
        "device-list-strategy-list-with-one-unknown",
        "flags: {plugin: {deviceListStrategy: [envvar, cdi]}}",
        Refused("flags.plugin.deviceListStrategy", "invalid strategy: 'cdi'"),
        VALIDATE_FLAGS_TAG,
    ),
    ConfigRow(
        "device-list-strategy-list-loads",
        "flags: {plugin: {deviceListStrategy: [envvar, volume-mounts, cdi-cri]}}",
        Loads(strategy="none"),
        VALIDATE_FLAGS_TAG,
    ),
    ConfigRow(
        "device-list-strategy-not-a-string",
        "flags: {plugin: {deviceListStrategy: 1}}",
        Refused("flags.plugin.deviceListStrategy", "invalid deviceListStrategy"),
        FLAG_TYPES,
    ),
    ConfigRow(
        "device-id-strategy-unknown",
        "flags: {plugin: {deviceIDStrategy: serial}}",
        Refused("flags.plugin.deviceIDStrategy", "invalid --device-id-strategy option: 'serial'"),
        VALIDATE_FLAGS_TAG,
    ),
    ConfigRow(
        "device-id-strategy-empty-string",
        "flags: {plugin: {deviceIDStrategy: ''}}",
        Refused("flags.plugin.deviceIDStrategy", "invalid --device-id-strategy option: ''"),
        VALIDATE_FLAGS_TAG,
    ),
    ConfigRow(
        "device-id-strategy-null-is-the-default",
        "flags: {plugin: {deviceIDStrategy: null}}",
        Loads(),
        FLAG_TYPES,
    ),
    ConfigRow(
        "device-id-strategy-index-loads",
        "flags: {plugin: {deviceIDStrategy: index}}",
        Loads(),
        VALIDATE_FLAGS_TAG,
    ),
    ConfigRow(
        "allocation-policy-unknown",
        "flags: {plugin: {sharedDevicesAllocationPolicy: spread}}",
        Refused(
            "flags.plugin.sharedDevicesAllocationPolicy",
            "invalid --shared-devices-allocation-policy option: 'spread'",
        ),
        VALIDATE_FLAGS_TAG,
    ),
    ConfigRow(
        "allocation-policy-packed-loads",
        "flags: {plugin: {sharedDevicesAllocationPolicy: packed}}",
        Loads(),
        VALIDATE_FLAGS_TAG,
    ),
    ConfigRow(
        "device-discovery-strategy-unknown",
        "flags: {deviceDiscoveryStrategy: wsl}",
        Refused("flags.deviceDiscoveryStrategy", "invalid --device-discovery-strategy option"),
        VALIDATE_FLAGS_TAG,
    ),
    ConfigRow(
        "device-discovery-strategy-tegra-loads",
        "flags: {deviceDiscoveryStrategy: tegra}",
        Loads(),
        VALIDATE_FLAGS_TAG,
    ),
    ConfigRow(
        "validate-flags-order-device-id-before-mig-strategy",
        "flags: {migStrategy: bogus, plugin: {deviceIDStrategy: serial}}",
        Refused("flags.plugin.deviceIDStrategy", "invalid --device-id-strategy option"),
        VALIDATE_FLAGS_TAG,
    ),
    ConfigRow(
        "flags-keys-match-in-any-case",
        "flags: {Plugin: {DeviceIDStrategy: serial}}",
        Refused("flags.plugin.deviceIDStrategy", "invalid --device-id-strategy option"),
        FLAG_TYPES,
    ),
    ConfigRow(
        "fail-on-init-error-quoted-yes",
        'flags: {failOnInitError: "yes"}',
        Refused("flags.failOnInitError", "cannot unmarshal string"),
        FLAG_TYPES,
    ),
    ConfigRow(
        "fail-on-init-error-bare-yes-is-a-yaml-bool",
        "flags: {failOnInitError: yes}",
        Loads(),
        YAML_TO_JSON,
    ),
    ConfigRow(
        "pass-device-specs-number",
        "flags: {plugin: {passDeviceSpecs: 1}}",
        Refused("flags.plugin.passDeviceSpecs", "cannot unmarshal number"),
        FLAG_TYPES,
    ),
    ConfigRow(
        "mig-strategy-number-is-not-turned-into-a-string",
        "flags: {migStrategy: 1}",
        Refused("flags.migStrategy", "cannot unmarshal number"),
        FLAG_TYPES,
    ),
    ConfigRow(
        "gfd-sleep-interval-not-a-duration",
        "flags: {gfd: {sleepInterval: soon}}",
        Refused("flags.gfd.sleepInterval", "invalid duration"),
        FLAG_TYPES,
    ),
    ConfigRow(
        "gfd-sleep-interval-infinite-loads",
        "flags: {gfd: {sleepInterval: infinite, oneshot: false}}",
        Loads(),
        FLAG_TYPES,
    ),
    ConfigRow(
        "imex-channel-zero-loads",
        "imex: {channelIDs: [0], required: true}",
        Loads(),
        IMEX,
    ),
    ConfigRow(
        "imex-channel-ids-two",
        "imex: {channelIDs: [0, 1]}",
        Refused("imex.channelIDs", "channelIDs must be [] or [0]; found [0 1]"),
        IMEX,
    ),
    ConfigRow(
        "imex-channel-ids-one-not-zero",
        "imex: {channelIDs: [3]}",
        Refused("imex.channelIDs", "channelIDs must be [] or [0]; found [3]"),
        IMEX,
    ),
    ConfigRow(
        "imex-channel-id-string",
        "imex: {channelIDs: ['0']}",
        Refused("imex.channelIDs[0]", "cannot unmarshal string"),
        IMEX,
    ),
    ConfigRow(
        "imex-required-string",
        "imex: {required: 'true'}",
        Refused("imex.required", "must be true or false"),
        IMEX,
    ),
    ConfigRow(
        "resource-listed-twice-advertises-larger",
        "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2}, "
        "{name: nvidia.com/gpu, replicas: 4}]}}",
        Loads(warns=("sharing.timeSlicing.resources[1].name",), gpu_replicas=4),
        DEVICE_MAP,
    ),
]


def _cited(source: str) -> bool:
    """The file a row cites (``*.go``, ``*.md`` or a URL) is one docs/device-plugin.md names."""
    cited = next(w for w in source.split() if w.endswith((".go", ".md")) or w.startswith("http"))
    return cited.rsplit("/", 1)[-1] in DOC if not cited.startswith("http") else cited in DOC


@pytest.mark.parametrize("row", CONFIG_ROWS, ids=[r.rule for r in CONFIG_ROWS])
def test_config_rule(row: ConfigRow) -> None:
    assert _cited(row.source), f"{row.source} is not in docs/device-plugin.md"
    doc = yaml.safe_load(row.doc)
    if isinstance(row.expect, Refused):
        with pytest.raises(PolicyError) as caught:
            parse_plugin_config(doc, key="k", source="cfg.yaml")
        assert caught.value.field == row.expect.field
        assert row.expect.reason in caught.value.reason
        assert str(caught.value).startswith("cfg.yaml: ")
        return
    config = parse_plugin_config(doc, key="k", source="cfg.yaml")
    expect = row.expect
    assert tuple(w.field for w in config.warnings) == expect.warns, config.warnings
    assert all(str(w).startswith("cfg.yaml: ") and w.reason for w in config.warnings)
    gpu = ResourceForm(None, False)
    checks: dict[str, tuple[Any, Any]] = {
        "strategy": (expect.strategy, config.strategy),
        "mig_strategy": (expect.mig_strategy, config.mig_strategy),
        "gpu_replicas": (expect.gpu_replicas, config.replicas(gpu)),
        "fail": (expect.fail, config.fail_requests_greater_than_one),
        "rename": (expect.rename, config.rename_by_default),
        "served": (expect.served, config.never_served() is None),
    }
    for name, (wanted, got) in checks.items():
        if wanted is not None:
            assert got == wanted, f"{name}: expected {wanted!r}, got {got!r}"


def test_resource_listed_twice_labels_the_first_entry() -> None:
    """GFD's replicationInfo takes the first match; the plugin advertises the larger count."""
    config = parse_plugin_config(
        yaml.safe_load(
            "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 4}, "
            "{name: gpu, replicas: 2}]}}"
        ),
        key="k",
        source="cfg.yaml",
    )
    gpu = ResourceForm(None, False)
    assert (config.replicas(gpu), config.labelled_replicas(gpu)) == (4, 4)
    assert len(config.resources) == 1
    config = parse_plugin_config(
        yaml.safe_load(
            "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2}, "
            "{name: gpu, replicas: 4}]}}"
        ),
        key="k",
        source="cfg.yaml",
    )
    assert (config.replicas(gpu), config.labelled_replicas(gpu)) == (4, 2)
    assert "advertises 4 replicas per device, GFD labels 2" in config.warnings[0].reason


# --------------------------------------------------------------------------------------------
# GFD labels and what is advertised, through the config -> offers path
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OfferWanted:
    name: str
    selector_key: str | None = None
    product: str | None = None
    replicas: int | None = None
    strategy: str | None = None
    slots: int | None = None


@dataclass(frozen=True)
class LabelRow:
    rule: str
    config: str
    product: str
    offers: tuple[OfferWanted, ...]
    source: str
    gpus: int = 1
    mig: dict[str, int] = field(default_factory=dict)


GPU_KEY = "nvidia.com/gpu.product"
A100 = "NVIDIA A100-SXM4-80GB"

LABEL_ROWS = [
    LabelRow(
        "gfd-product-sanitised",
        "version: v1",
        "NVIDIA GeForce  RTX 4090 (Laptop)",
        (OfferWanted("nvidia.com/gpu", GPU_KEY, "NVIDIA-GeForce-RTX-4090-Laptop", 1, "none"),),
        GFD_RESOURCE,
    ),
    LabelRow(
        "gfd-product-shared-suffix",
        "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 4}]}}",
        "NVIDIA L20",
        (OfferWanted("nvidia.com/gpu", GPU_KEY, "NVIDIA-L20-SHARED", 4, "time-slicing", 8),),
        GFD_RESOURCE,
        gpus=2,
    ),
    LabelRow(
        "gfd-renamed-has-no-shared-suffix",
        "sharing: {timeSlicing: {renameByDefault: true, resources: [{name: gpu, replicas: 4}]}}",
        "NVIDIA L20",
        (OfferWanted("nvidia.com/gpu.shared", GPU_KEY, "NVIDIA-L20", 4, "time-slicing"),),
        GFD_RESOURCE,
    ),
    LabelRow(
        "gfd-sharing-strategy-mps",
        "sharing: {mps: {resources: [{name: gpu, replicas: 2}]}}",
        "Tesla T4",
        (OfferWanted("nvidia.com/gpu", GPU_KEY, "Tesla-T4-SHARED", 2, "mps"),),
        GFD_RESOURCE,
    ),
    LabelRow(
        "gfd-mig-single-product-on-gpu-key",
        "flags: {migStrategy: single}",
        A100,
        (OfferWanted("nvidia.com/gpu", GPU_KEY, "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", 1, slots=7),),
        GFD_MIG,
        mig={"1g.10gb": 7},
    ),
    LabelRow(
        "gfd-mig-mixed-label-key",
        "flags: {migStrategy: mixed}",
        A100,
        (
            OfferWanted(
                "nvidia.com/mig-1g.10gb",
                "nvidia.com/mig-1g.10gb.product",
                "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
                1,
                "none",
                7,
            ),
        ),
        GFD_MIG,
        mig={"1g.10gb": 7},
    ),
    LabelRow(
        # The product value of a +me profile is checked by the property test below.
        "gfd-mig-mixed-me-label-key",
        "flags: {migStrategy: mixed}",
        A100,
        (OfferWanted("nvidia.com/mig-1g.10gb.me", "nvidia.com/mig-1g.10gb.me.product", slots=1),),
        GFD_MIG_NAME,
        mig={"1g.10gb+me": 1},
    ),
    LabelRow(
        "gfd-mig-mixed-shared-and-not",
        "flags: {migStrategy: mixed}\n"
        "sharing: {timeSlicing: {resources: [{name: nvidia.com/mig-1g.10gb, replicas: 2}]}}",
        A100,
        (
            OfferWanted(
                "nvidia.com/mig-1g.10gb",
                "nvidia.com/mig-1g.10gb.product",
                "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb-SHARED",
                2,
                "time-slicing",
                8,
            ),
            OfferWanted(
                "nvidia.com/mig-3g.40gb",
                "nvidia.com/mig-3g.40gb.product",
                "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb",
                1,
                "none",
                1,
            ),
        ),
        GFD_RESOURCE,
        mig={"1g.10gb": 4, "3g.40gb": 1},
    ),
    LabelRow(
        "plugin-mps-on-single-mig-serves-nothing",
        "flags: {migStrategy: single}\nsharing: {mps: {resources: [{name: gpu, replicas: 2}]}}",
        A100,
        (),
        MPS_PLUGIN,
        mig={"1g.10gb": 7},
    ),
    LabelRow(
        "plugin-mps-past-client-limit-serves-nothing",
        "sharing: {mps: {resources: [{name: gpu, replicas: 49}]}}",
        "NVIDIA L4",
        (),
        MPS_DEVICE,
    ),
    LabelRow(
        "plugin-mps-sharing-nothing-serves-nothing",
        "sharing: {mps: {resources: [{name: nvidia.com/mig-1g.10gb, replicas: 2}]}}",
        "NVIDIA L4",
        (),
        MPS_WAIT,
    ),
    LabelRow(
        "plugin-resource-listed-twice-advertises-larger",
        "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2}, {name: gpu, replicas: 4}]}}",
        "NVIDIA L20",
        (OfferWanted("nvidia.com/gpu", GPU_KEY, "NVIDIA-L20-SHARED", 4, "time-slicing", 8),),
        DEVICE_MAP,
        gpus=2,
    ),
]


def _pool_offers(row: LabelRow) -> list[Any]:
    pool: dict[str, Any] = {"config": "default", "product": row.product, "gpusPerNode": row.gpus}
    if row.mig:
        pool["migDevices"] = row.mig
    doc = {
        "apiVersion": GPU_POLICY_API_VERSION,
        "kind": SHARING_POLICY_KIND,
        "spec": {
            "devicePlugin": {"config": yaml.safe_load(row.config)},
            "pools": [pool],
        },
    }
    inventory = inventory_from_policy(parse_policy(doc, source="conformance"))
    return sorted((o for _, o in inventory.pairs), key=lambda o: o.form.name)


@pytest.mark.parametrize("row", LABEL_ROWS, ids=[r.rule for r in LABEL_ROWS])
def test_label_rule(row: LabelRow) -> None:
    assert _cited(row.source), f"{row.source} is not in docs/device-plugin.md"
    offers = _pool_offers(row)
    assert [o.form.name for o in offers] == [w.name for w in row.offers]
    for offer, wanted in zip(offers, row.offers, strict=True):
        got = {
            "selector_key": offer.selector[0] if offer.selector else None,
            "product": offer.product,
            "replicas": offer.replicas,
            "strategy": offer.strategy,
            "slots": offer.slots,
        }
        for name, value in got.items():
            expected = getattr(wanted, name)
            if expected is not None:
                assert value == expected, (
                    f"{wanted.name} {name}: expected {expected!r}, got {value!r}"
                )


@pytest.mark.parametrize(
    ("capability", "replicas", "served"),
    [
        ((6, 1), 16, True),  # Pascal: 16 clients
        ((6, 1), 17, False),
        ((7, 0), 16, True),  # Volta V100: still 16, the comparison is against v7.5
        ((7, 0), 17, False),
        ((7, 2), 48, False),  # Xavier
        ((7, 5), 48, True),  # Turing T4: 48
        ((7, 5), 49, False),
        ((8, 9), 48, True),  # Ada L4
        ((12, 0), 49, False),
        (None, 48, True),  # not known: the higher limit, with a warning on the config
        (None, 49, False),
    ],
    ids=str,
)
def test_mps_client_limit_by_compute_capability(
    capability: tuple[int, int] | None, replicas: int, served: bool
) -> None:
    """device.go: replicas > maxClients() fails assertReplicas; maxClients is 48 from v7.5 on.

    manager.go Daemons then fails for the whole node, and the plugin never registers.
    """
    assert _cited(MPS_DEVICE)
    config = parse_plugin_config(
        yaml.safe_load(_ts_entry(f"{{name: gpu, replicas: {replicas}}}", "mps")),
        key="k",
        source="cfg.yaml",
    )
    reason = config.never_served(capability)
    assert (reason is None) == served
    if not served:
        limit = 48 if capability is None or capability >= (7, 5) else 16
        assert f"maximum allowed replicas exceeded: {replicas} > {limit}" in str(reason)
        assert "never registers nvidia.com/gpu" in str(reason)


@dataclass(frozen=True)
class CapabilityRow:
    rule: str
    config: str
    selector: dict[str, str]
    allowed: bool
    mig: dict[str, int] = field(default_factory=dict)


L4_POOL = "NVIDIA L4"
CAPABILITY_ROWS = [
    CapabilityRow("mps-capable-true-on-time-slicing-refused", TS, {"nvidia.com/mps.capable": "true"}, False),
    CapabilityRow("mps-capable-false-on-time-slicing-admitted", TS, {"nvidia.com/mps.capable": "false"}, True),
    CapabilityRow("mps-capable-true-on-no-sharing-refused", "version: v1", {"nvidia.com/mps.capable": "true"}, False),
    CapabilityRow("mps-capable-true-on-mps-admitted", MPS, {"nvidia.com/mps.capable": "true"}, True),
    CapabilityRow("mps-capable-false-on-mps-refused", MPS, {"nvidia.com/mps.capable": "false"}, False),
    CapabilityRow(
        "mig-capable-false-on-mig-gpus-refused",
        "flags: {migStrategy: single}",
        {"nvidia.com/mig.capable": "false"},
        False,
        {"1g.10gb": 7},
    ),
    CapabilityRow(
        "mig-capable-true-on-mig-gpus-admitted",
        "flags: {migStrategy: single}",
        {"nvidia.com/mig.capable": "true"},
        True,
        {"1g.10gb": 7},
    ),
    # Without MIG instances the pool does not say whether its GPUs could be split: not judged.
    CapabilityRow("mig-capable-unknown-not-judged", "version: v1", {"nvidia.com/mig.capable": "true"}, True),
]  # fmt: skip


@pytest.mark.parametrize("row", CAPABILITY_ROWS, ids=[r.rule for r in CAPABILITY_ROWS])
def test_capability_labels_in_node_selection(row: CapabilityRow) -> None:
    """GFD writes mps.capable "true" only under an MPS config, mig.capable where a GPU can be
    split (nvml.go); a pod pinned to a value no node offering its GPU carries would stay
    Pending, and is refused with what the nodes say."""
    assert _cited(GFD_CAPABLE)
    pool: dict[str, Any] = {"config": "default", "product": A100 if row.mig else L4_POOL}
    if row.mig:
        pool["migDevices"] = row.mig
    doc = {
        "apiVersion": GPU_POLICY_API_VERSION,
        "kind": SHARING_POLICY_KIND,
        "spec": {"devicePlugin": {"config": yaml.safe_load(row.config)}, "pools": [pool]},
    }
    policy = parse_policy(doc, source="conformance")
    decision = review(
        pod(gpu(1), nodeSelector=row.selector),
        policy=policy,
        inventory=inventory_from_policy(policy),
    )
    assert decision.allowed == row.allowed, decision.denial
    if not row.allowed:
        assert decision.failed == ("gpu-node-selection",)
        ((key, value),) = row.selector.items()
        assert f"nodeSelector {key}={value}" in decision.denial
        assert f"their nodes say {key}=" in decision.denial


@pytest.mark.parametrize(
    ("nodes", "selector", "allowed"),
    [
        ("seed003-l20-t4", {"nvidia.com/mps.capable": "true"}, False),
        ("seed003-l20-t4", {"nvidia.com/mps.capable": "false"}, True),
        ("mps-l4", {"nvidia.com/mps.capable": "true"}, True),
        ("mps-l4", {"nvidia.com/mps.capable": "false"}, False),
        ("h100-mig-single", {"nvidia.com/mig.capable": "true"}, True),
        ("seed003-l20-t4", {"nvidia.com/mig.capable": "true"}, False),
    ],
    ids=str,
)
def test_capability_labels_of_node_dumps(
    nodes: str, selector: dict[str, str], allowed: bool
) -> None:
    """The same judgement on the labels GFD wrote on the example clusters' nodes (nvml.go)."""
    assert _cited(GFD_CAPABLE)
    policy = load_policy(CLUSTERS / nodes / "policy.yaml")
    inventory = load_inventory(policy, CLUSTERS / nodes / "nodes.yaml")
    decision = review(pod(gpu(1), nodeSelector=selector), policy=policy, inventory=inventory)
    assert decision.allowed == allowed, decision.denial
    if not allowed:
        assert decision.failed == ("gpu-node-selection",)


@pytest.mark.parametrize(
    ("major", "minor", "replicas", "reported"),
    [("8", "0", 48, False), ("8", "0", 49, True), ("7", "0", 16, False), ("7", "0", 17, True)],
    ids=str,
)
def test_a_node_advertising_mps_past_the_limit_is_a_disagreement(
    major: str, minor: str, replicas: int, reported: bool
) -> None:
    """device.go maxClients by the node's labelled capability: v0.20.0 registers no such
    resource, so a node object that shows one is stale (or runs another plugin)."""
    assert _cited(MPS_DEVICE)
    labels = {
        "nvidia.com/gpu.sharing-strategy": "mps",
        "nvidia.com/mps.capable": "true",
        "nvidia.com/gpu.compute.major": major,
        "nvidia.com/gpu.compute.minor": minor,
    }
    node = gpu_node("n1", gpus=1, replicas=replicas, extra_labels=labels, heavy=False)
    policy = parse_policy({"version": "v1"}, source="cfg")
    inventory = inventory_from_nodes([node], policy, source="nodes")
    found = [d for d in inventory.disagreements if "MPS control daemon accepts at most" in str(d)]
    assert bool(found) == reported, inventory.disagreements


def test_capability_in_required_node_affinity() -> None:
    """An affinity expression on mps.capable is judged like one on the product label."""
    policy = load_policy(CLUSTERS / "seed003-l20-t4" / "policy.yaml")
    inventory = load_inventory(policy, CLUSTERS / "seed003-l20-t4" / "nodes.yaml")
    term = {"key": "nvidia.com/mps.capable", "operator": "In", "values": ["true"]}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [term]}]
            }
        }
    }
    decision = review(pod(gpu(1), affinity=affinity), policy=policy, inventory=inventory)
    assert decision.failed == ("gpu-node-selection",), decision.denial
    term["operator"] = "NotIn"
    decision = review(pod(gpu(1), affinity=affinity), policy=policy, inventory=inventory)
    assert decision.allowed, decision.denial


@pytest.mark.parametrize(
    "text",
    ["", "\n", "# the plugin's defaults\n", "---\n"],
    ids=["empty", "newline", "comment", "marker"],
)
def test_an_empty_config_file_is_the_plugins_empty_config(tmp_path: Path, text: str) -> None:
    """config.go parseConfigFrom: yaml.Unmarshal of nothing leaves Config zero, version v1.

    The same for a configFile, an inline config and a ConfigMap key. An empty policy file is
    refused instead (the server keeps its last good policy while a file is rewritten), with
    the plugin's reading in the reason.
    """
    assert _cited(CONFIG)
    (tmp_path / "empty.yaml").write_text(text)
    referring = tmp_path / "policy.yaml"
    referring.write_text(
        f"apiVersion: {GPU_POLICY_API_VERSION}\nkind: {SHARING_POLICY_KIND}\n"
        "spec: {devicePlugin: {configFile: empty.yaml}}\n"
    )
    config = load_policy(referring).configs["default"]
    assert (config.strategy, config.mig_strategy, config.warnings) == ("none", "none", ())
    configmap = {"kind": "ConfigMap", "data": {"a": text}}
    assert parse_plugin_configmap(configmap, source="cm")["a"].strategy == "none"
    inline = {"apiVersion": GPU_POLICY_API_VERSION, "kind": SHARING_POLICY_KIND}
    inline["spec"] = {"devicePlugin": {"config": text}}
    assert parse_policy(inline, source="p").configs["default"].strategy == "none"
    (tmp_path / "bare.yaml").write_text("{}")
    assert load_policy(tmp_path / "bare.yaml").configs["default"].strategy == "none"
    with pytest.raises(PolicyError) as caught:
        load_policy(tmp_path / "empty.yaml")
    assert "loads an empty config file as version v1" in caught.value.reason


RM_NAMES = f"{_V} internal/rm/rm.go AddDefaultResourcesToConfig (read at 4caff141)"
SUFFIXED = f"{_V} api/config/v1/resources_test.go TestResourcePatternMatches, #1807 (e515bd16)"


@pytest.mark.parametrize(
    ("resource", "profile", "source"),
    [
        ("nvidia.com/mig-1g.10gb", "1g.10gb", RM_NAMES),
        ("nvidia.com/mig-1g.10gb.me", "1g.10gb+me", RM_NAMES),
        ("nvidia.com/mig-1g.24gb.me.all", "1g.24gb+me.all", SUFFIXED),
        ("nvidia.com/mig-1g.24gb.gfx", "1g.24gb+gfx", SUFFIXED),
        ("nvidia.com/mig-1g.24gb-me", "1g.24gb-me", SUFFIXED),
    ],
    ids=["mig-name-plain", "mig-name-me", "mig-name-me-all", "mig-name-gfx", "mig-name-dash-me"],
)
def test_mig_resource_names(resource: str, profile: str, source: str) -> None:
    """mixed advertises "mig-" + profile with "+" written "."; each suffix is its own name."""
    assert _cited(source)
    form = parse_resource(resource)
    assert form is not None and form.profile == profile
    assert form.original == resource
    assert mig_form(profile) == form == mig_form(resource.removeprefix("nvidia.com/"))
    assert is_mig_profile(profile)


# --------------------------------------------------------------------------------------------
# Every product value the webhook composes is a valid Kubernetes label value
# --------------------------------------------------------------------------------------------

# k8s.io/apimachinery/pkg/util/validation IsValidLabelValue.
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
LABEL_VALUE_MAX = 63

_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
# Short enough that model, "-MIG-<profile>" and "-SHARED" stay within 63 characters, as
# NVML's model names do (the longest sanitised model here is 3 * 11 + 2 = 35 characters).
_words = st.text(alphabet=_ALNUM, min_size=1, max_size=5)
# GFD drops what is not [A-Za-z0-9-_. ] and joins runs of spaces with "-".
_dropped = st.sampled_from(["", "(", ")", "/", "+", ",", "®"])
_joints = st.sampled_from(["-", "_", ".", ""])


@st.composite
def model_names(draw: st.DrawFn) -> str:
    """GPU model names as NVML reports them: words, spaces, some characters GFD drops."""
    words = []
    for _ in range(draw(st.integers(1, 3))):
        word = draw(_words) + draw(_joints) + draw(_words)
        words.append(draw(_dropped) + word + draw(_dropped))
    return draw(st.sampled_from([" ", "  "])).join(words)


ALL_PROFILES = sorted({p for profiles in MIG_PROFILES.values() for p in profiles})
PLAIN_PROFILES = [p for p in ALL_PROFILES if "+" not in p]


def _assert_label_value(value: str) -> None:
    assert len(value) <= LABEL_VALUE_MAX, value
    assert LABEL_VALUE.fullmatch(value), value


@settings(max_examples=200, deadline=None)
@given(
    model=model_names(),
    profile=st.sampled_from([None, *PLAIN_PROFILES]),
    replicas=st.integers(1, 64),
    renamed=st.booleans(),
)
def test_product_values_are_label_values(
    model: str, profile: str | None, replicas: int, renamed: bool
) -> None:
    _assert_label_value(
        product_value(model, ResourceForm(profile, False), replicas=replicas, renamed=renamed)
    )


@settings(max_examples=200, deadline=None)
@given(
    model=model_names(),
    profile=st.sampled_from(ALL_PROFILES),
    replicas=st.integers(1, 64),
    renamed=st.booleans(),
)
def test_product_values_of_every_mig_profile_are_label_values(
    model: str, profile: str, replicas: int, renamed: bool
) -> None:
    _assert_label_value(
        product_value(model, ResourceForm(profile, False), replicas=replicas, renamed=renamed)
    )


def test_config_warnings_are_carried_by_every_config_of_a_configmap() -> None:
    """A ConfigMap's keys keep their own warnings, each naming the key's file."""
    configs = parse_plugin_configmap(
        {
            "kind": "ConfigMap",
            "data": {
                "quiet": "version: v1",
                "loud": "sharing: {timeSlicing: {strategy: x, resources: [{name: gpu, replicas: 2}]}}",
            },
        },
        source="cm.yaml",
    )
    quiet: PluginConfig = configs["quiet"]
    assert quiet.warnings == ()
    assert [str(w) for w in configs["loud"].warnings] == [
        "cm.yaml: data.loud: sharing.timeSlicing.strategy: removed in v0.12 (CHANGELOG "
        "v0.12.0-rc.2); the device plugin ignores it: delete the line"
    ]
