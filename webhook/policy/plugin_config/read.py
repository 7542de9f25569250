"""Reading a config file, its text, or the plugin's ConfigMap into :class:`PluginConfig` values:
the top-level fields, the flags the plugin validates (``validateFlags``), the IMEX channels,
then the sections.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import yaml

from webhook.policy.errors import Diagnostics, PolicyError
from webhook.policy.plugin_config.config import (
    ALLOCATION_POLICIES,
    DEVICE_DISCOVERY_STRATEGIES,
    DEVICE_ID_STRATEGIES,
    DEVICE_LIST_STRATEGIES,
    MigStrategy,
    PluginConfig,
    SharingStrategy,
)
from webhook.policy.plugin_config.fields import (
    _integral,
    _json_type,
    _Reader,
    _struct_field,
    _typed_fields,
)
from webhook.policy.plugin_config.sections import (
    _as_mig_strategy,
    _mps_warnings,
    _sections,
    _top_level_resources,
)

_TOP_FIELDS = ("version", "flags", "resources", "sharing", "imex")
# api/config/v1/flags.go: the typed fields of flags, flags.plugin and flags.gfd. Inside
# ``flags`` sigs.k8s.io/yaml does not turn numbers or booleans into strings (the fields are
# promoted from an embedded struct, which its conversion does not follow), so every type is
# strict: ``failOnInitError: "yes"`` and ``migStrategy: 1`` stop the plugin.
_FLAG_FIELDS: dict[str, str] = {
    "migStrategy": "string",
    "failOnInitError": "bool",
    "mpsRoot": "string",
    "nvidiaDriverRoot": "string",
    "nvidiaDevRoot": "string",
    "gdrcopyEnabled": "bool",
    "gdsEnabled": "bool",
    "mofedEnabled": "bool",
    "useNodeFeatureAPI": "bool",
    "deviceDiscoveryStrategy": "string",
}
_PLUGIN_FLAG_FIELDS: dict[str, str] = {
    "passDeviceSpecs": "bool",
    "deviceListStrategy": "strings",
    "deviceIDStrategy": "string",
    "cdiAnnotationPrefix": "string",
    "nvidiaCTKPath": "string",
    "containerDriverRoot": "string",
    "sharedDevicesAllocationPolicy": "string",
}
_GFD_FLAG_FIELDS: dict[str, str] = {
    "oneshot": "bool",
    "noTimestamp": "bool",
    "sleepInterval": "duration",
    "outputFile": "string",
    "machineTypeFile": "string",
}


@dataclass(frozen=True, slots=True)
class _Flags:
    """The flags validateFlags checks, as written (None: absent or null, the CLI default)."""

    mig_strategy: object
    device_list: list[str] | None
    device_id: object
    allocation: object
    discovery: object


def _flags(r: _Reader, raw: object) -> _Flags:
    """Decode ``flags`` (api/config/v1/flags.go) with its strict types."""
    flags = r.mapping(raw, "flags")
    top = _typed_fields(r, flags, _FLAG_FIELDS, "flags")
    _, plugin_raw = _struct_field(flags, "plugin")
    plugin = _typed_fields(
        r, r.mapping(plugin_raw, "flags.plugin"), _PLUGIN_FLAG_FIELDS, "flags.plugin"
    )
    _, gfd_raw = _struct_field(flags, "gfd")
    _typed_fields(r, r.mapping(gfd_raw, "flags.gfd"), _GFD_FLAG_FIELDS, "flags.gfd")
    raw_list = plugin.get("deviceListStrategy")
    device_list = [raw_list] if isinstance(raw_list, str) else raw_list
    return _Flags(
        mig_strategy=top.get("migStrategy"),
        device_list=device_list if isinstance(device_list, list) else None,
        device_id=plugin.get("deviceIDStrategy"),
        allocation=plugin.get("sharedDevicesAllocationPolicy"),
        discovery=top.get("deviceDiscoveryStrategy"),
    )


def _imex_channels(r: _Reader, raw: object) -> list[int]:
    """Decode ``imex`` (api/config/v1/imex.go): ``channelIDs`` a list of ints, ``required``."""
    imex = r.mapping(raw, "imex")
    _, required = _struct_field(imex, "required")
    r.boolean(required, "imex.required")
    _, ids = _struct_field(imex, "channelIDs")
    if ids is None:
        return []
    if not isinstance(ids, list):
        r.error(
            "imex.channelIDs",
            f"the device plugin cannot read {ids!r} (json: cannot unmarshal "
            f"{_json_type(ids)} into Go struct field of type []int): write [] or [0]",
        )
        return []
    channels = []
    for i, item in enumerate(ids):
        channel = _integral(item)
        if channel is None:
            r.error(
                f"imex.channelIDs[{i}]",
                f"the device plugin cannot read {item!r} (json: cannot unmarshal "
                f"{_json_type(item)} into Go value of type int)",
            )
            continue
        channels.append(channel)
    return channels


def _one_of(r: _Reader, value: object, allowed: Sequence[str], field: str, reason: str) -> None:
    if value is not None and value not in allowed:
        r.error(field, f"{reason}: use {', '.join(allowed)}")


def _validate_flags(r: _Reader, flags: _Flags, imex: list[int], mps: bool) -> MigStrategy:
    """cmd/nvidia-device-plugin/main.go validateFlags, in its order: the first failure is the
    one the plugin stops on, the others are noted after it.

    Not checked here, as they depend on the node or on the DaemonSet: CDI strategies on a
    system without NVML, and ``--mps-root`` (the Helm chart always sets MPS_ROOT).
    """
    for strategy in flags.device_list or ():
        _one_of(
            r,
            strategy,
            DEVICE_LIST_STRATEGIES,
            "flags.plugin.deviceListStrategy",
            f"invalid --device-list-strategy option: invalid strategy: {strategy!r}",
        )
    _one_of(
        r,
        flags.device_id,
        DEVICE_ID_STRATEGIES,
        "flags.plugin.deviceIDStrategy",
        f"invalid --device-id-strategy option: {flags.device_id!r}",
    )
    _one_of(
        r,
        flags.allocation,
        ALLOCATION_POLICIES,
        "flags.plugin.sharedDevicesAllocationPolicy",
        f"invalid --shared-devices-allocation-policy option: {flags.allocation!r}",
    )
    raw_strategy = "none" if flags.mig_strategy is None else flags.mig_strategy
    mig_strategy = _as_mig_strategy(raw_strategy)
    if mps and mig_strategy == "mixed":
        r.error("flags.migStrategy", "using --mig-strategy=mixed is not supported with MPS")
    _one_of(
        r,
        flags.discovery,
        DEVICE_DISCOVERY_STRATEGIES,
        "flags.deviceDiscoveryStrategy",
        f"invalid --device-discovery-strategy option {flags.discovery!r}",
    )
    if mig_strategy is None:
        r.error(
            "flags.migStrategy",
            f"unknown MIG strategy: {raw_strategy!r}: use none, single or mixed",
        )
    if imex not in ([], [0]):
        r.error(
            "imex.channelIDs",
            "invalid IMEX channel IDs: invalid IMEX config: channelIDs must be [] or [0]; "
            f"found [{' '.join(str(i) for i in imex)}]",
        )
    return mig_strategy or "none"


def parse_plugin_config(doc: object, *, key: str, source: str) -> PluginConfig:
    """Validate one device-plugin config document (already decoded from YAML).

    Raises one PolicyError naming ``source``, the fields and the reasons of everything the
    plugin itself refuses at start (docs/device-plugin.md, "Config file"), in the plugin's
    order: decoding, then the version, then the flags (the first is the one the plugin stops
    on). What it loads but ignores is kept as warnings on the returned config.
    """
    r = _Reader(source)
    # An empty file decodes as an empty config: version v1 and every default (config.go
    # parseConfigFrom: yaml.Unmarshal of nothing leaves the Config zero).
    body = r.mapping(doc, "")
    r.check()  # nothing else can be read from a document that is not a mapping
    r.unknown_keys(body, _TOP_FIELDS, "", fold=True)
    _, raw_flags = _struct_field(body, "flags")
    flags = _flags(r, raw_flags)
    present, top_resources = _struct_field(body, "resources")
    if present:
        _top_level_resources(r, top_resources)
    _, raw_sharing = _struct_field(body, "sharing")
    applied = _as_mig_strategy(flags.mig_strategy or "none") or "none"
    time_slicing, mps = _sections(r, raw_sharing, applied)
    _, raw_imex = _struct_field(body, "imex")
    imex = _imex_channels(r, raw_imex)
    # config.go parseConfigFrom: the version once the file is decoded.
    _, version = _struct_field(body, "version")
    if version not in ("v1", "", None):
        r.error("version", f"unknown version: {version} (only v1 exists)")
    mig_strategy = _validate_flags(r, flags, imex, mps is not None)
    r.check()
    strategy: SharingStrategy = "none"
    section = None
    fail = False
    if mps is not None:
        # sharing.go: SharingStrategy() and ReplicatedResources() take MPS whenever it is set.
        strategy, section = "mps", mps
        if time_slicing is not None:
            r.warn(
                "sharing.timeSlicing",
                "ignored: with sharing.mps set the device plugin shares by MPS only; remove "
                "one of the two sections",
            )
        _mps_warnings(r, mps, mig_strategy)
        # MPS: true unless the file says false (config.go NewConfig, since #1762).
        fail = True if mps.fail is None else mps.fail
    elif time_slicing is not None:
        strategy, section = "time-slicing", time_slicing
        # Time-slicing enforces it only when it is true.
        fail = bool(time_slicing.fail)
    return PluginConfig(
        key=key,
        mig_strategy=mig_strategy,
        strategy=strategy,
        rename_by_default=section.rename if section is not None else False,
        fail_requests_greater_than_one=fail,
        resources=section.resources if section is not None else (),
        warnings=r.warnings,
    )


def parse_plugin_text(text: str, *, key: str, source: str) -> PluginConfig:
    """Parse one config file's text (YAML or JSON, as the plugin reads it)."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PolicyError(source, "", f"not valid YAML: {exc}") from None
    return parse_plugin_config(doc, key=key, source=source)


def parse_plugin_configmap(doc: object, *, source: str) -> dict[str, PluginConfig]:
    """Every key of a device-plugin ConfigMap, each a config file of its own."""
    if not isinstance(doc, Mapping):
        raise PolicyError(source, "", "expected a ConfigMap")
    if doc.get("kind") != "ConfigMap":
        raise PolicyError(source, "kind", f"expected a ConfigMap, found {doc.get('kind')!r}")
    data = doc.get("data")
    if data is not None and not isinstance(data, Mapping):
        raise PolicyError(source, "data", f"must be a mapping, not {type(data).__name__}")
    if not data:
        raise PolicyError(source, "data", "the ConfigMap holds no config")
    # Every key is read, and every problem of every key reported at once.
    found = Diagnostics(source)
    configs = {}
    for key, text in data.items():
        if not isinstance(text, str):
            found.error(f"data.{key}", "must be the text of a config file")
            continue
        try:
            configs[str(key)] = parse_plugin_text(
                text, key=str(key), source=f"{source}: data.{key}"
            )
        except PolicyError as exc:
            found.absorb(exc)
    found.check()
    return configs
