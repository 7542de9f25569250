"""The NVIDIA device plugin's config file (api/config/v1), parsed as strictly as the plugin does.

Field names are the plugin's own (``migStrategy``, ``renameByDefault``,
``failRequestsGreaterThanOne``, ``replicas``). Unknown fields are ignored, as the plugin's YAML
decoding ignores them, so every config a cluster runs today loads here too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import yaml

from webhook.policy.errors import PolicyError
from webhook.policy.resources import PREFIX, ResourceForm, parse_resource

MigStrategy = Literal["none", "single", "mixed"]
SharingStrategy = Literal["none", "time-slicing", "mps"]
MIG_STRATEGIES: tuple[MigStrategy, ...] = ("none", "single", "mixed")
_MAX_NAME = 63


@dataclass(frozen=True, slots=True)
class ReplicatedResource:
    """One entry of ``sharing.<strategy>.resources``."""

    form: ResourceForm  # always the unshared form: the name the plugin replicates
    replicas: int


@dataclass(frozen=True, slots=True)
class PluginConfig:
    """One device-plugin config file: one key of the plugin's ConfigMap."""

    key: str
    mig_strategy: MigStrategy
    strategy: SharingStrategy
    rename_by_default: bool
    fail_requests_greater_than_one: bool
    resources: tuple[ReplicatedResource, ...]

    def replicas(self, form: ResourceForm) -> int:
        """How many replicas of each device the plugin advertises for ``form`` (1: not shared)."""
        original = form.original
        for res in self.resources:
            if res.form.original == original:
                return res.replicas
        return 1

    def advertised(self, form: ResourceForm) -> ResourceForm:
        """The form the plugin advertises for devices of ``form``'s kind."""
        shared = self.replicas(form) > 1
        return form.with_renamed(shared and self.rename_by_default)


def _mapping(value: object, source: str, field: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PolicyError(source, field, f"must be a mapping, not {type(value).__name__}")
    return value


def _bool(value: object, source: str, field: str) -> bool:
    if not isinstance(value, bool):
        raise PolicyError(source, field, f"must be true or false, not {value!r}")
    return value


def _resource_name(value: object, source: str, field: str) -> ResourceForm:
    if not isinstance(value, str) or not value:
        raise PolicyError(source, field, "no resource name specified")
    # The plugin adds the "nvidia.com/" prefix to bare names.
    name = value if "/" in value else PREFIX + value
    if len(name.split("/", 1)[1]) > _MAX_NAME:
        raise PolicyError(source, field, f"resource name {name!r} is longer than 63 characters")
    form = parse_resource(name)
    if form is None or form.renamed:
        raise PolicyError(
            source,
            field,
            f"{name!r} is not a resource the device plugin can share: "
            "use nvidia.com/gpu or a MIG resource such as nvidia.com/mig-1g.5gb",
        )
    return form


def _replicated(
    section: object, source: str, field: str
) -> tuple[bool, bool | None, tuple[ReplicatedResource, ...]]:
    body = _mapping(section, source, field)
    rename = _bool(body.get("renameByDefault", False), source, f"{field}.renameByDefault")
    fail_raw = body.get("failRequestsGreaterThanOne")
    fail = (
        None if fail_raw is None else _bool(fail_raw, source, f"{field}.failRequestsGreaterThanOne")
    )
    strategy = body.get("strategy", "")
    if strategy not in ("", None):
        raise PolicyError(source, f"{field}.strategy", f"unknown time-slicing strategy: {strategy}")
    raw_resources = body.get("resources")
    if not isinstance(raw_resources, list) or not raw_resources:
        raise PolicyError(source, f"{field}.resources", "no resources specified")
    resources = []
    seen: set[str] = set()
    for i, entry in enumerate(raw_resources):
        where = f"{field}.resources[{i}]"
        item = _mapping(entry, source, where)
        form = _resource_name(item.get("name"), source, f"{where}.name")
        replicas = item.get("replicas")
        if replicas is None:
            raise PolicyError(source, f"{where}.replicas", "no replicas specified")
        if isinstance(replicas, bool) or not isinstance(replicas, int):
            raise PolicyError(source, f"{where}.replicas", f"must be an integer, not {replicas!r}")
        if replicas < 2:
            raise PolicyError(
                source, f"{where}.replicas", f"number of replicas must be >= 2, not {replicas}"
            )
        if form.name in seen:
            raise PolicyError(source, f"{where}.name", f"{form.name} is listed twice")
        seen.add(form.name)
        resources.append(ReplicatedResource(form, replicas))
    return rename, fail, tuple(resources)


def parse_plugin_config(doc: object, *, key: str, source: str) -> PluginConfig:
    """Validate one device-plugin config document (already decoded from YAML).

    Raises PolicyError naming ``source``, the field and the reason for everything the plugin
    itself would refuse at start: another version, an unknown migStrategy, sharing without
    resources, replicas below 2, time-slicing and MPS together, MPS on MIG devices.
    """
    body = _mapping(doc, source, "")
    version = body.get("version", "v1")
    if version not in ("v1", "", None):
        raise PolicyError(source, "version", f"unknown version: {version!r} (only v1 exists)")
    flags = _mapping(body.get("flags"), source, "flags")
    mig_strategy = flags.get("migStrategy", "none") or "none"
    if mig_strategy not in MIG_STRATEGIES:
        raise PolicyError(
            source,
            "flags.migStrategy",
            f"unknown MIG strategy {mig_strategy!r}: use none, single or mixed",
        )
    sharing = _mapping(body.get("sharing"), source, "sharing")
    time_slicing = sharing.get("timeSlicing")
    mps = sharing.get("mps")
    has_ts = bool(_mapping(time_slicing, source, "sharing.timeSlicing"))
    has_mps = bool(_mapping(mps, source, "sharing.mps"))
    if has_ts and has_mps:
        raise PolicyError(
            source, "sharing", "time-slicing and MPS are mutually exclusive: keep one of them"
        )
    strategy: SharingStrategy = "none"
    rename = False
    fail = False
    resources: tuple[ReplicatedResource, ...] = ()
    if has_ts:
        strategy = "time-slicing"
        rename, fail_flag, resources = _replicated(time_slicing, source, "sharing.timeSlicing")
        # Time-slicing enforces the flag only when it is true (default false).
        fail = bool(fail_flag)
    elif has_mps:
        strategy = "mps"
        rename, fail_flag, resources = _replicated(mps, source, "sharing.mps")
        # MPS always enforced it before v0.20; from v0.20 it defaults to true.
        fail = True if fail_flag is None else fail_flag
        if mig_strategy == "mixed":
            raise PolicyError(
                source, "flags.migStrategy", "using --mig-strategy=mixed is not supported with MPS"
            )
        for i, res in enumerate(resources):
            if res.form.profile is not None:
                raise PolicyError(
                    source,
                    f"sharing.mps.resources[{i}].name",
                    "sharing using MPS is not supported for MIG devices",
                )
    return PluginConfig(
        key=key,
        mig_strategy=mig_strategy,
        strategy=strategy,
        rename_by_default=rename,
        fail_requests_greater_than_one=fail,
        resources=resources,
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
    body = _mapping(doc, source, "")
    if body.get("kind") != "ConfigMap":
        raise PolicyError(source, "kind", f"expected a ConfigMap, found {body.get('kind')!r}")
    data = _mapping(body.get("data"), source, "data")
    if not data:
        raise PolicyError(source, "data", "the ConfigMap holds no config")
    configs = {}
    for key, text in data.items():
        if not isinstance(text, str):
            raise PolicyError(source, f"data.{key}", "must be the text of a config file")
        configs[str(key)] = parse_plugin_text(text, key=str(key), source=f"{source}: data.{key}")
    return configs
