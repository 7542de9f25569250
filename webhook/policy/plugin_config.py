"""The NVIDIA device plugin's config file (api/config/v1), read the way the plugin reads it.

What the plugin refuses is refused here, with the plugin's reason, the file and the field.
What it loads loads here too. Where it silently ignores something (a removed or misspelt key,
the ``rename`` and ``devices`` fields, an entry no device matches, the time-slicing section
next to an MPS one), the config carries a PolicyWarning saying so. Where it loads a config yet
never registers a resource (MPS past the control daemon's client limit, MPS that shares
nothing), :meth:`PluginConfig.never_served` says why and the inventory offers nothing. Every
rule, and the NVIDIA source it comes from, is listed in docs/device-plugin.md ("Config file",
"When the plugin serves nothing").

Field names are the plugin's own (``migStrategy``, ``renameByDefault``,
``failRequestsGreaterThanOne``, ``replicas``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import yaml

from webhook.policy.errors import PolicyError, PolicyWarning
from webhook.policy.resources import GPU, PREFIX, ResourceForm, parse_resource

MigStrategy = Literal["none", "single", "mixed"]
SharingStrategy = Literal["none", "time-slicing", "mps"]
MIG_STRATEGIES: tuple[MigStrategy, ...] = ("none", "single", "mixed")

# api/config/v1/consts.go MaxResourceNameLength: the whole name, prefix included.
MAX_RESOURCE_NAME = 63
# cmd/mps-control-daemon/mps/device.go maxClients: the most MPS replicas the control daemon
# accepts per GPU, 48 from compute capability 7.5 on and 16 below it (docs/device-plugin.md,
# "MPS limits").
MPS_MAX_CLIENTS = 48
MPS_MAX_CLIENTS_BELOW_7_5 = 16
MPS_FULL_LIMIT_FROM = (7, 5)

# cmd/nvidia-device-plugin/main.go validateFlags and api/config/v1/consts.go: the values the
# plugin starts with. An absent or null flag takes the command-line default, always valid.
DEVICE_LIST_STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
DEVICE_ID_STRATEGIES = ("uuid", "index")
ALLOCATION_POLICIES = ("distributed", "packed")
DEVICE_DISCOVERY_STRATEGIES = ("auto", "nvml", "tegra")

# k8s.io/apimachinery NameIsDNSSubdomain: a lowercase RFC 1123 subdomain, at most 253.
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_SUBDOMAIN_MAX = 253
_HEX = re.compile(r"^[0-9A-Fa-f]+$")
_UUID = re.compile(r"^[0-9A-Fa-f]{8}(-[0-9A-Fa-f]{4}){3}-[0-9A-Fa-f]{12}$")

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
_GO_DURATION = re.compile(r"^[-+]?((\d+(\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h))+$|^[-+]?0$")
_SHARING_FIELDS = ("timeSlicing", "mps")
_REPLICATED_FIELDS = ("renameByDefault", "failRequestsGreaterThanOne", "resources")
_RESOURCE_FIELDS = ("name", "rename", "devices", "replicas")


@dataclass(frozen=True, slots=True)
class ReplicatedResource:
    """What the plugin does with one resource name of the active sharing section.

    ``replicas`` is what the plugin advertises per device; ``labelled`` is what GFD labels
    as ``<name>.replicas``. They differ only when the name is listed twice: the plugin keeps
    the larger count, GFD the first entry's.
    """

    form: ResourceForm  # always the unshared form: the name the plugin replicates
    replicas: int
    labelled: int


@dataclass(frozen=True, slots=True)
class PluginConfig:
    """One device-plugin config file: one key of the plugin's ConfigMap."""

    key: str
    mig_strategy: MigStrategy
    strategy: SharingStrategy
    rename_by_default: bool
    fail_requests_greater_than_one: bool
    resources: tuple[ReplicatedResource, ...]
    warnings: tuple[PolicyWarning, ...] = ()

    def _entry(self, form: ResourceForm) -> ReplicatedResource | None:
        original = form.original
        for res in self.resources:
            if res.form.original == original:
                return res
        return None

    def replicas(self, form: ResourceForm) -> int:
        """How many replicas of each device the plugin advertises for ``form`` (1: not shared)."""
        entry = self._entry(form)
        return entry.replicas if entry is not None else 1

    def labelled_replicas(self, form: ResourceForm) -> int:
        """The ``<name>.replicas`` label GFD writes for ``form`` (1: not shared)."""
        entry = self._entry(form)
        return entry.labelled if entry is not None else 1

    def advertised(self, form: ResourceForm) -> ResourceForm:
        """The form the plugin advertises for devices of ``form``'s kind."""
        shared = self.replicas(form) > 1
        return form.with_renamed(shared and self.rename_by_default)

    def never_served(self, compute_capability: tuple[int, int] | None = None) -> str | None:
        """Why the plugin never registers any resource on a node running this config, or None.

        Only MPS has such configs: one that shares no device, or more replicas than the MPS
        control daemon admits on GPUs of ``compute_capability`` (None: not known, the highest
        limit is assumed). See docs/device-plugin.md, "When the plugin serves nothing".
        """
        if self.strategy != "mps":
            return None
        if not self.resources:
            return _MPS_SHARES_NOTHING
        replicas = max(res.replicas for res in self.resources)
        limit = mps_max_clients(compute_capability)
        if replicas > limit:
            return _mps_over_limit(replicas, limit)
        return None

    @property
    def serves_mig_instances(self) -> bool:
        """False when the plugin stops on MIG devices: MPS cannot share them.

        Under ``migStrategy: single`` on MIG-enabled GPUs every ``nvidia.com/gpu`` is a MIG
        instance, so such a node advertises nothing (docs/device-plugin.md, "When the plugin
        serves nothing").
        """
        return self.strategy != "mps"


def mps_max_clients(compute_capability: tuple[int, int] | None) -> int:
    """The most MPS replicas per GPU the control daemon accepts (mps/device.go maxClients).

    ``isAtLeastVolta`` compares the capability with ``v7.5`` (not Volta's 7.0): below 7.5 the
    limit is 16. An unknown capability gets the higher limit.
    """
    if compute_capability is not None and compute_capability < MPS_FULL_LIMIT_FROM:
        return MPS_MAX_CLIENTS_BELOW_7_5
    return MPS_MAX_CLIENTS


# What the plugin does when the MPS control daemon has no daemon for its resource
# (internal/plugin/mps.go waitForDaemon, server.go Start, main.go startPlugins).
_NEVER_REGISTERED = (
    f"the device plugin waits for that daemon, fails, restarts every 30 s and never registers "
    f"{GPU} on such a node"
)
_MPS_SHARES_NOTHING = (
    "MPS shares none of this config's devices: the MPS control daemon starts no daemon "
    f"('Resource is not shared'), yet {_NEVER_REGISTERED}"
)


def _mps_over_limit(replicas: int, limit: int) -> str:
    below = " (16 below compute capability 7.5)" if limit == MPS_MAX_CLIENTS else ""
    return (
        f"{replicas} MPS replicas per GPU, but the MPS control daemon accepts at most {limit}"
        f"{below} and refuses to start ('invalid MPS configuration: invalid device maximum "
        f"allowed replicas exceeded: {replicas} > {limit}'): {_NEVER_REGISTERED}"
    )


class _Reader:
    """Reads one config document, collecting warnings; raises PolicyError on a refusal."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.warnings: list[PolicyWarning] = []

    def refuse(self, field: str, reason: str) -> PolicyError:
        return PolicyError(self.source, field, reason)

    def warn(self, field: str, reason: str) -> None:
        self.warnings.append(PolicyWarning(self.source, field, reason))

    def mapping(self, value: object, field: str) -> Mapping[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.refuse(field, f"must be a mapping, not {type(value).__name__}")
        return value

    def unknown_keys(
        self, body: Mapping[str, Any], known: Sequence[str], field: str, *, fold: bool = False
    ) -> None:
        """Warn about keys the plugin never reads (``fold``: Go struct fields, any case)."""
        names = {k.lower() for k in known} if fold else set(known)
        for key in body:
            if (str(key).lower() if fold else str(key)) in names:
                continue
            where = f"{field}.{key}" if field else str(key)
            if field.startswith("sharing.") and key == "strategy":
                reason = (
                    "removed in v0.12 (CHANGELOG v0.12.0-rc.2); the device plugin ignores it: "
                    "delete the line"
                )
            else:
                reason = (
                    f"unknown field, ignored by the device plugin (known here: "
                    f"{', '.join(known)}): check the spelling"
                )
            self.warn(where, reason)

    def boolean(self, value: object, field: str) -> bool | None:
        # A null leaves the Go field at its zero value (false, or an unset *bool).
        if value is None or isinstance(value, bool):
            return value
        raise self.refuse(field, f"must be true or false, not {value!r}")


def _struct_field(body: Mapping[str, Any], name: str) -> tuple[bool, Any]:
    """``(present, value)`` of a Go struct field: encoding/json also takes other letter cases.

    The last matching key wins, as each key of the object is assigned in turn.
    """
    present, value = False, None
    for key, item in body.items():
        if isinstance(key, str) and key.lower() == name.lower():
            present, value = True, item
    return present, value


def _uuid(text: str) -> bool:
    """What github.com/google/uuid Parse accepts."""
    if len(text) == 36 + 9:
        if text[:9].lower() != "urn:uuid:":
            return False
        text = text[9:]
    elif len(text) == 36 + 2:
        text = text[1:37]
    elif len(text) == 32:
        return _HEX.match(text) is not None
    return _UUID.match(text) is not None


def _device_ref(text: str) -> bool:
    """A GPU index, a MIG index ``<gpu>:<mig>``, or a GPU or MIG UUID (replicas.go)."""
    if text.isascii() and text.isdigit():
        return True
    parts = text.split(":")
    if len(parts) == 2 and all(p.isascii() and p.isdigit() for p in parts):
        return True
    if text.startswith("GPU-"):
        return _uuid(text[len("GPU-") :])
    if text.startswith("MIG-"):
        rest = text[len("MIG-") :]
        if _uuid(rest):
            return True
        gpu, *indexes = rest.split("/")
        return (
            len(indexes) == 2
            and gpu.startswith("GPU-")
            and _uuid(gpu[len("GPU-") :])
            and all(i.isascii() and i.isdigit() for i in indexes)
        )
    return False


def _integral(value: object) -> int | None:
    """An int as Go decodes it from YAML: integers, and floats with no fraction."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _devices(r: _Reader, value: object, field: str) -> bool:
    """Check ``devices`` as ReplicatedDevices.UnmarshalJSON does; True when it is ``all``."""
    if value is None or isinstance(value, str):
        if value != "all":
            raise r.refuse(
                field,
                f"devices set as {value or ''!r} but the only valid string input is 'all'",
            )
        return True
    count = _integral(value)
    if count is not None:
        if count <= 0:
            raise r.refuse(field, f"devices set as {count} but a count of devices must be > 0")
        return False
    if isinstance(value, list):
        for i, item in enumerate(value):
            index = _integral(item)
            if (index is not None and index >= 0) or (isinstance(item, str) and _device_ref(item)):
                continue
            raise r.refuse(
                f"{field}[{i}]",
                f"unsupported type for device in devices list: {item!r} (use a GPU index, "
                "a MIG index <gpu>:<mig>, or a GPU-/MIG- UUID)",
            )
        return False
    raise r.refuse(field, f"unrecognized type for devices spec: {value!r}")


def _resource_name(r: _Reader, value: object, field: str) -> str:
    """The full name, as NewResourceName (api/config/v1/resources.go) builds and checks it."""
    if not isinstance(value, str):
        raise r.refuse(field, f"must be a resource name, not {value!r}")
    name = value if value.startswith(PREFIX) else PREFIX + value
    if len(name) > MAX_RESOURCE_NAME:
        raise r.refuse(
            field,
            f"fully-qualified resource name must be {MAX_RESOURCE_NAME} characters or less: {name}",
        )
    part = name[len(PREFIX) :]
    if len(part) > _DNS_SUBDOMAIN_MAX or _DNS_SUBDOMAIN.match(part) is None:
        raise r.refuse(
            field,
            f"incorrect format for resource name {name!r}: after nvidia.com/ it must be a "
            "lowercase RFC 1123 subdomain (lower case letters, digits, '-' and '.', starting "
            "and ending with a letter or digit)",
        )
    return name


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


def _entry(
    r: _Reader, raw: object, where: str, rename_by_default: bool
) -> tuple[str, int, str | None]:
    """One ``resources[i]`` entry: (full name, replicas, rename as written or None)."""
    # A null entry decodes as an empty one (UnmarshalJSON sees an empty map).
    item = r.mapping(raw, where)
    if "name" not in item:
        raise r.refuse(f"{where}.name", "no resource name specified")
    name = _resource_name(r, item["name"], f"{where}.name")
    all_devices = True
    if "devices" in item:
        all_devices = _devices(r, item["devices"], f"{where}.devices")
    if "replicas" not in item:
        raise r.refuse(f"{where}.replicas", "no replicas specified")
    raw_replicas = item["replicas"]
    replicas = 0 if raw_replicas is None else _integral(raw_replicas)
    if replicas is None:
        raise r.refuse(f"{where}.replicas", f"must be an integer, not {raw_replicas!r}")
    if replicas < 2:
        raise r.refuse(
            f"{where}.replicas",
            f"number of replicas must be >= 2, not {replicas}: to stop sharing, remove the entry",
        )
    rename = None
    if "rename" in item:
        rename = _resource_name(r, item["rename"], f"{where}.rename")
    section = where.rsplit(".resources", 1)[0]
    if rename is not None and not (rename_by_default and rename == name + ".shared"):
        shared = f"{name}.shared with renameByDefault: true" if rename_by_default else name
        r.warn(
            f"{where}.rename",
            f"setting the 'rename' field in {section}.resources is not supported: the device "
            f"plugin ignores it and advertises {shared}",
        )
    if not all_devices:
        r.warn(
            f"{where}.devices",
            f"customizing the 'devices' field in {section}.resources is not supported: the "
            "device plugin ignores it and shares every device",
        )
    r.unknown_keys(item, _RESOURCE_FIELDS, where)
    return name, replicas, rename


def _section(r: _Reader, raw: object, field: str, mig_strategy: MigStrategy) -> _Section:
    """One ``sharing.timeSlicing`` or ``sharing.mps`` section (ReplicatedResources)."""
    if raw is not None and not isinstance(raw, Mapping):
        raise r.refuse(field, f"must be a mapping, not {type(raw).__name__}")
    body: Mapping[str, Any] = raw or {}
    rename = bool(r.boolean(body.get("renameByDefault"), f"{field}.renameByDefault"))
    fail = r.boolean(body.get("failRequestsGreaterThanOne"), f"{field}.failRequestsGreaterThanOne")
    raw_resources = body.get("resources")
    if raw_resources is not None and not isinstance(raw_resources, list):
        raise r.refuse(f"{field}.resources", "must be a list of {name, replicas} entries")
    if not raw_resources:
        raise r.refuse(
            f"{field}.resources",
            f"no resources specified: list at least one {{name, replicas}}, or remove {field}",
        )
    r.unknown_keys(body, _REPLICATED_FIELDS, field)
    advertised: dict[str, int] = {}
    labelled: dict[str, int] = {}
    first_index: dict[str, int] = {}
    for i, entry in enumerate(raw_resources):
        where = f"{field}.resources[{i}]"
        name, replicas, _ = _entry(r, entry, where, rename)
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
            raise r.refuse(f"resources.{group}", "must be a list of {pattern, name}")
        for i, raw_entry in enumerate(entries):
            where = f"resources.{group}[{i}]"
            entry = r.mapping(raw_entry, where)
            for needed in ("pattern", "name"):
                if needed not in entry:
                    raise r.refuse(where, f"resources must have a '{needed}' field set")
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


_JSON_TYPES = {bool: "bool", str: "string", int: "number", float: "number", list: "array"}


def _json_type(value: object) -> str:
    return _JSON_TYPES.get(type(value), "object")


def _typed(r: _Reader, value: object, kind: str, field: str) -> object:
    """One flag as encoding/json decodes it into its Go type; refuses what it cannot decode."""
    if value is None:
        return None  # a nil pointer: the command-line / environment value
    ok = {
        "bool": isinstance(value, bool),
        "string": isinstance(value, str),
        "strings": isinstance(value, str)
        or (isinstance(value, list) and all(isinstance(v, str) for v in value)),
        "duration": (isinstance(value, (int, float)) and not isinstance(value, bool))
        or (isinstance(value, str) and (value == "infinite" or _GO_DURATION.match(value))),
    }[kind]
    if ok:
        return value
    if kind == "strings":
        reason = f"invalid deviceListStrategy: {value!r}: give a strategy or a list of them"
    elif kind == "duration":
        reason = f"invalid duration {value!r}: use a Go duration such as 60s, or infinite"
    else:
        go = "bool" if kind == "bool" else "string"
        hint = "write true or false" if kind == "bool" else "quote the value"
        reason = (
            f"json: cannot unmarshal {_json_type(value)} into Go struct field of type {go}: {hint}"
        )
    raise r.refuse(field, f"the device plugin cannot read {value!r} ({reason})")


def _typed_fields(
    r: _Reader, body: Mapping[str, Any], fields: Mapping[str, str], where: str
) -> dict[str, object]:
    """The typed fields of one flags struct, by their Go names (keys match in any case)."""
    values: dict[str, object] = {}
    for name, kind in fields.items():
        present, raw = _struct_field(body, name)
        if present:
            values[name] = _typed(r, raw, kind, f"{where}.{name}")
    return values


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
        raise r.refuse(
            "imex.channelIDs",
            f"the device plugin cannot read {ids!r} (json: cannot unmarshal "
            f"{_json_type(ids)} into Go struct field of type []int): write [] or [0]",
        )
    channels = []
    for i, item in enumerate(ids):
        channel = _integral(item)
        if channel is None:
            raise r.refuse(
                f"imex.channelIDs[{i}]",
                f"the device plugin cannot read {item!r} (json: cannot unmarshal "
                f"{_json_type(item)} into Go value of type int)",
            )
        channels.append(channel)
    return channels


def _one_of(r: _Reader, value: object, allowed: Sequence[str], field: str, reason: str) -> None:
    if value is not None and value not in allowed:
        raise r.refuse(field, f"{reason}: use {', '.join(allowed)}")


def _validate_flags(r: _Reader, flags: _Flags, imex: list[int], mps: bool) -> MigStrategy:
    """cmd/nvidia-device-plugin/main.go validateFlags, in its order: the first failure wins.

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
        raise r.refuse("flags.migStrategy", "using --mig-strategy=mixed is not supported with MPS")
    _one_of(
        r,
        flags.discovery,
        DEVICE_DISCOVERY_STRATEGIES,
        "flags.deviceDiscoveryStrategy",
        f"invalid --device-discovery-strategy option {flags.discovery!r}",
    )
    if mig_strategy is None:
        raise r.refuse(
            "flags.migStrategy",
            f"unknown MIG strategy: {raw_strategy!r}: use none, single or mixed",
        )
    if imex not in ([], [0]):
        raise r.refuse(
            "imex.channelIDs",
            "invalid IMEX channel IDs: invalid IMEX config: channelIDs must be [] or [0]; "
            f"found [{' '.join(str(i) for i in imex)}]",
        )
    return mig_strategy


def parse_plugin_config(doc: object, *, key: str, source: str) -> PluginConfig:
    """Validate one device-plugin config document (already decoded from YAML).

    Raises PolicyError naming ``source``, the field and the reason for everything the plugin
    itself refuses at start (docs/device-plugin.md, "Config file"), checked in the plugin's
    order: decoding, then the version, then the flags. What it loads but ignores is kept as
    warnings on the returned config.
    """
    r = _Reader(source)
    if doc is not None and not isinstance(doc, Mapping):
        raise r.refuse("", f"must be a mapping, not {type(doc).__name__}")
    # An empty file decodes as an empty config: version v1 and every default (config.go
    # parseConfigFrom: yaml.Unmarshal of nothing leaves the Config zero).
    body: Mapping[str, Any] = doc or {}
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
        raise r.refuse("version", f"unknown version: {version} (only v1 exists)")
    mig_strategy = _validate_flags(r, flags, imex, mps is not None)
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
        warnings=tuple(r.warnings),
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
    configs = {}
    for key, text in data.items():
        if not isinstance(text, str):
            raise PolicyError(source, f"data.{key}", "must be the text of a config file")
        configs[str(key)] = parse_plugin_text(text, key=str(key), source=f"{source}: data.{key}")
    return configs
