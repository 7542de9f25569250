"""The ``resources`` and ``sharing`` sections: which resource each entry replicates and how
many times, what the plugin ignores (with the reason), and what MPS cannot serve.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.policy.plugin_config.config import (
    _MPS_SHARES_NOTHING,
    _NEVER_REGISTERED,
    MIG_STRATEGIES,
    MPS_MAX_CLIENTS,
    MPS_MAX_CLIENTS_BELOW_7_5,
    MigStrategy,
    ReplicatedResource,
    _mps_over_limit,
)
from webhook.policy.plugin_config.fields import (
    _devices,
    _integral,
    _Reader,
    _resource_name,
    _struct_field,
)
from webhook.policy.resources import GPU, PREFIX, ResourceForm, parse_resource

_SHARING_FIELDS = ("timeSlicing", "mps")
_REPLICATED_FIELDS = ("renameByDefault", "failRequestsGreaterThanOne", "resources")
_RESOURCE_FIELDS = ("name", "rename", "devices", "replicas")


def _applies(form: ResourceForm | None, mig_strategy: MigStrategy) -> bool:
    """Whether some device can be advertised under this name before sharing renames it."""
    if form is None or form.renamed:
        return False
    return form.profile is None or mig_strategy == "mixed"


@dataclass(slots=True)
class _Section:
    rename: bool
    fail: bool | None
    resources: tuple[ReplicatedResource, ...]


def _entry(r: _Reader, raw: object, where: str, rename_by_default: bool) -> tuple[str, int] | None:
    """One ``resources[i]`` entry: (full name, replicas); None when the plugin refuses it."""
    # A null entry decodes as an empty one (UnmarshalJSON sees an empty map).
    item = r.mapping(raw, where)
    name = None
    if "name" not in item:
        r.error(f"{where}.name", "no resource name specified")
    else:
        name = _resource_name(r, item["name"], f"{where}.name")
    all_devices = True
    if "devices" in item:
        all_devices = _devices(r, item["devices"], f"{where}.devices")
    replicas = _replicas(r, item, where)
    rename = None
    if "rename" in item:
        rename = _resource_name(r, item["rename"], f"{where}.rename")
    section = where.rsplit(".resources", 1)[0]
    renamed = rename is not None and name is not None
    if renamed and not (rename_by_default and rename == f"{name}.shared"):
        shared = f"{name}.shared with renameByDefault: true" if rename_by_default else name
        r.warn(
            f"{where}.rename",
            f"setting the 'rename' field in {section}.resources is not supported: the "
            f"device plugin ignores it and advertises {shared}",
        )
    if not all_devices:
        r.warn(
            f"{where}.devices",
            f"customizing the 'devices' field in {section}.resources is not supported: the "
            "device plugin ignores it and shares every device",
        )
    r.unknown_keys(item, _RESOURCE_FIELDS, where)
    if name is None or replicas is None:
        return None
    return name, replicas


def _replicas(r: _Reader, item: Mapping[str, Any], where: str) -> int | None:
    """An entry's ``replicas`` (at least 2); None when the plugin refuses it (noted)."""
    if "replicas" not in item:
        r.error(f"{where}.replicas", "no replicas specified")
        return None
    raw_replicas = item["replicas"]
    replicas = 0 if raw_replicas is None else _integral(raw_replicas)
    if replicas is None:
        r.error(f"{where}.replicas", f"must be an integer, not {raw_replicas!r}")
        return None
    if replicas < 2:
        r.error(
            f"{where}.replicas",
            f"number of replicas must be >= 2, not {replicas}: to stop sharing, remove the entry",
        )
        return None
    return replicas


def _section(r: _Reader, raw: object, field: str, mig_strategy: MigStrategy) -> _Section:
    """One ``sharing.timeSlicing`` or ``sharing.mps`` section (ReplicatedResources)."""
    body = r.mapping(raw, field)
    rename = bool(r.boolean(body.get("renameByDefault"), f"{field}.renameByDefault"))
    fail = r.boolean(body.get("failRequestsGreaterThanOne"), f"{field}.failRequestsGreaterThanOne")
    raw_resources = body.get("resources")
    if raw_resources is not None and not isinstance(raw_resources, list):
        r.error(f"{field}.resources", "must be a list of {name, replicas} entries")
        raw_resources = []
    elif not raw_resources and (raw is None or isinstance(raw, Mapping)):
        r.error(
            f"{field}.resources",
            f"no resources specified: list at least one {{name, replicas}}, or remove {field}",
        )
    r.unknown_keys(body, _REPLICATED_FIELDS, field)
    advertised: dict[str, int] = {}
    labelled: dict[str, int] = {}
    first_index: dict[str, int] = {}
    for i, entry in enumerate(raw_resources or ()):
        where = f"{field}.resources[{i}]"
        read = _entry(r, entry, where, rename)
        if read is None:
            continue
        name, replicas = read
        form = parse_resource(name)
        if name in first_index:
            # device_map.go: replica IDs <device>::<n> of both entries merge (the larger count
            # wins); GFD's replicationInfo takes the first entry.
            r.warn(
                f"{where}.name",
                f"{name} is also listed at {field}.resources[{first_index[name]}]: the device "
                f"plugin advertises {max(advertised[name], replicas)} replicas per device, GFD "
                f"labels {labelled[name]}; keep one entry",
            )
            advertised[name] = max(advertised[name], replicas)
            continue
        first_index[name] = i
        advertised[name] = labelled[name] = replicas
        if not _applies(form, mig_strategy):
            r.warn(f"{where}.name", _ignored_reason(name, form, mig_strategy))
    resources = tuple(
        ReplicatedResource(form, advertised[name], labelled[name])
        for name in first_index
        if (form := parse_resource(name)) is not None and _applies(form, mig_strategy)
    )
    return _Section(rename, fail, resources)


def _ignored_reason(name: str, form: ResourceForm | None, mig_strategy: MigStrategy) -> str:
    if form is not None and form.renamed:
        return (
            f"{name} is the name shared devices get, not one devices have: the device plugin "
            f"matches nothing and ignores the entry; name {form.original} instead"
        )
    if form is not None and form.profile is not None:
        return (
            f"no device is advertised as {name} under migStrategy {mig_strategy} (MIG "
            "profiles have their own names only under mixed): the device plugin ignores the "
            "entry"
        )
    return (
        f"no NVIDIA GPU is advertised as {name}: the device plugin matches nothing and "
        f"ignores the entry (GPU names: {GPU}, {PREFIX}mig-<profile>)"
    )


def _top_level_resources(r: _Reader, raw: object) -> None:
    """Top-level ``resources`` (pattern/name pairs): checked, then ignored by the plugin."""
    body = r.mapping(raw, "resources")
    given = False
    for group in ("gpus", "mig"):
        entries = body.get(group)
        if entries is None:
            continue
        if not isinstance(entries, list):
            r.error(f"resources.{group}", "must be a list of {pattern, name}")
            continue
        for i, raw_entry in enumerate(entries):
            where = f"resources.{group}[{i}]"
            entry = r.mapping(raw_entry, where)
            missing = [needed for needed in ("pattern", "name") if needed not in entry]
            if missing:
                r.error(where, f"resources must have a '{missing[0]}' field set")
                continue
            _resource_name(r, entry["name"], f"{where}.name")
            given = True
    if given:
        r.warn(
            "resources",
            "customizing the 'resources' field is not supported: the device plugin ignores it",
        )


def _as_mig_strategy(value: object) -> MigStrategy | None:
    for strategy in MIG_STRATEGIES:
        if value == strategy:
            return strategy
    return None


def _sections(
    r: _Reader, raw: object, mig_strategy: MigStrategy
) -> tuple[_Section | None, _Section | None]:
    """Decode ``sharing``: (timeSlicing, mps); both are decoded, and refused, before use."""
    sharing = r.mapping(raw, "sharing")
    r.unknown_keys(sharing, _SHARING_FIELDS, "sharing", fold=True)
    ts_present, ts_raw = _struct_field(sharing, "timeSlicing")
    _, mps_raw = _struct_field(sharing, "mps")
    # TimeSlicing is a struct value: even a null reaches its UnmarshalJSON and is refused.
    time_slicing = _section(r, ts_raw, "sharing.timeSlicing", mig_strategy) if ts_present else None
    # MPS is a pointer: a null leaves it nil, and there is no MPS at all.
    mps = _section(r, mps_raw, "sharing.mps", mig_strategy) if mps_raw is not None else None
    return time_slicing, mps


def _mps_warnings(r: _Reader, section: _Section, mig_strategy: MigStrategy) -> None:
    if mig_strategy == "single":
        r.warn(
            "sharing.mps",
            "MPS cannot share MIG instances: on MIG-enabled GPUs under migStrategy single the "
            "device plugin stops ('sharing using MPS is not supported for MIG devices') and "
            "advertises nothing; only GPUs without MIG are shared",
        )
    if not section.resources:
        r.warn("sharing.mps.resources", f"{_MPS_SHARES_NOTHING}: name {GPU} here")
        return
    worst = max(section.resources, key=lambda res: res.replicas)
    if worst.replicas > MPS_MAX_CLIENTS:
        r.warn(
            "sharing.mps.resources",
            f"{worst.form.name}: {_mps_over_limit(worst.replicas, MPS_MAX_CLIENTS)}: use at "
            f"most {MPS_MAX_CLIENTS}",
        )
    elif worst.replicas > MPS_MAX_CLIENTS_BELOW_7_5:
        r.warn(
            "sharing.mps.resources",
            f"{worst.form.name}: {worst.replicas} MPS replicas per GPU: GPUs of compute "
            f"capability below 7.5 (GFD labels nvidia.com/gpu.compute.major and .minor) admit "
            f"at most {MPS_MAX_CLIENTS_BELOW_7_5}; on a node with one, the MPS control daemon "
            f"refuses to start and {_NEVER_REGISTERED}",
        )
