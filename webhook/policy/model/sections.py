"""Reading the sections of a SharingPolicy's ``spec`` (``pools``, ``devicePlugin``, ``dra``,
``isolation``, ``mutation``) into the values of ``webhook.policy.model.values``.

Each refuses an unknown key or a value of the wrong kind with a PolicyError naming the
source and the field.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import yaml

from webhook.policy.errors import PolicyError
from webhook.policy.model.values import (
    DEFAULT_ISOLATION_EXEMPT,
    DEFAULT_TOLERATIONS,
    ISOLATION_MODES,
    NODE_SELECTION_MODES,
    ConfigMapRef,
    DeclaredPool,
    DraPolicy,
    Isolation,
    NodeSelection,
    PluginSource,
    configmap_source,
)
from webhook.policy.plugin_config import (
    PluginConfig,
    parse_plugin_config,
    parse_plugin_configmap,
    parse_plugin_text,
)
from webhook.policy.resources import is_mig_profile


def _get(  # noqa: PLR0917 - a lookup helper: the positional form reads best
    body: Mapping[str, Any],
    key: str,
    kind: type | tuple[type, ...],
    default: Any,
    source: str,
    field: str,
) -> Any:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) and kind is int:
        raise PolicyError(source, field, f"must be an integer, not {value!r}")
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise PolicyError(source, field, f"must be {names}, not {value!r}")
    return value


def _node_selection(value: object, source: str) -> NodeSelection:
    # true / false were the only values before the modes: they keep meaning "inject" / "not".
    if value is None or value is True:
        return "intent"
    if value is False:
        return "never"
    choice: NodeSelection = _choice(
        value, NODE_SELECTION_MODES, source, "spec.mutation.injectNodeSelection"
    )
    return choice


def _choice(value: object, choices: tuple[str, ...], source: str, field: str) -> Any:
    if value not in choices:
        raise PolicyError(source, field, f"{value!r} is not one of {', '.join(choices)}")
    return value


def _pools(raw: object, source: str) -> tuple[DeclaredPool, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise PolicyError(source, "spec.pools", "must be a list")
    pools = []
    for i, entry in enumerate(raw):
        where = f"spec.pools[{i}]"
        if not isinstance(entry, Mapping):
            raise PolicyError(source, where, "must be a mapping")
        config = _get(entry, "config", str, None, source, f"{where}.config")
        if not config:
            raise PolicyError(source, f"{where}.config", "name the device-plugin config key")
        mig_raw = _get(entry, "migDevices", Mapping, {}, source, f"{where}.migDevices")
        mig = []
        for profile, count in mig_raw.items():
            p = str(profile).removeprefix("mig-")
            if not is_mig_profile(p):
                raise PolicyError(source, f"{where}.migDevices.{profile}", "not a MIG profile")
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise PolicyError(source, f"{where}.migDevices.{profile}", "must be a count >= 1")
            mig.append((p, count))
        low, high = _scaling(entry, source, where)
        nodes = _get(entry, "nodes", int, 1 if low is None else low, source, f"{where}.nodes")
        gpus = _get(entry, "gpusPerNode", int, 1, source, f"{where}.gpusPerNode")
        if nodes < 0 or gpus < 0:
            raise PolicyError(source, where, "nodes and gpusPerNode cannot be negative")
        if high is not None and nodes > high:
            raise PolicyError(source, f"{where}.nodes", f"more than maxNodes ({high})")
        pools.append(
            DeclaredPool(
                config=config,
                product=_get(entry, "product", str, None, source, f"{where}.product"),
                nodes=nodes,
                gpus_per_node=gpus,
                memory_mib=_get(entry, "memoryMiB", int, None, source, f"{where}.memoryMiB"),
                mig_devices=tuple(mig),
                name=_get(entry, "name", str, None, source, f"{where}.name") or None,
                min_nodes=low,
                max_nodes=high,
                device_class=_get(entry, "deviceClass", str, None, source, f"{where}.deviceClass")
                or None,
            )
        )
    return tuple(pools)


_POOL_FIELDS = frozenset(
    {
        "name",
        "config",
        "product",
        "nodes",
        "minNodes",
        "maxNodes",
        "gpusPerNode",
        "memoryMiB",
        "migDevices",
        "deviceClass",
    }
)


def _scaling(entry: Mapping[str, Any], source: str, where: str) -> tuple[int | None, int | None]:
    """A declared pool's (minNodes, maxNodes); unknown fields are refused here, once per pool."""
    unknown = sorted(str(k) for k in entry if k not in _POOL_FIELDS)
    if unknown:
        raise PolicyError(
            source,
            f"{where}.{unknown[0]}",
            f"unknown field (known: {', '.join(sorted(_POOL_FIELDS))})",
        )
    low = _get(entry, "minNodes", int, None, source, f"{where}.minNodes")
    high = _get(entry, "maxNodes", int, None, source, f"{where}.maxNodes")
    if (low is not None and low < 0) or (high is not None and high < 1):
        raise PolicyError(source, where, "minNodes cannot be negative, maxNodes must be >= 1")
    if low is not None and high is not None and low > high:
        raise PolicyError(source, f"{where}.minNodes", f"above maxNodes ({high})")
    return low, high


_CONFIG_KEYS = ("config", "configFile", "configMap", "configMapFile")
_DEVICE_PLUGIN = "spec.devicePlugin"


def _configmap_ref(body: Mapping[str, Any], source: str) -> ConfigMapRef | None:
    where = f"{_DEVICE_PLUGIN}.configMapRef"
    ref_raw = _get(body, "configMapRef", Mapping, None, source, where)
    if ref_raw is None:
        return None
    ns, name = ref_raw.get("namespace"), ref_raw.get("name")
    if not isinstance(ns, str) or not isinstance(name, str) or not ns or not name:
        raise PolicyError(source, where, "needs a namespace and a name")
    return ConfigMapRef(ns, name)


def _device_plugin(
    body: Mapping[str, Any], source: str, read: Callable[[str], str] | None
) -> tuple[dict[str, PluginConfig], ConfigMapRef | None, PluginSource]:
    """The configs ``spec.devicePlugin`` gives, the ConfigMap to watch, and the configs' texts."""
    given = [k for k in _CONFIG_KEYS if k in body]
    ref = _configmap_ref(body, source)
    if len(given) > 1:
        raise PolicyError(
            source,
            _DEVICE_PLUGIN,
            f"give one of config, configFile, configMap, configMapFile, not {given}",
        )
    if not given:
        if ref is None:
            raise PolicyError(
                source,
                _DEVICE_PLUGIN,
                "give the device plugin's config (config, configFile, configMap, "
                "configMapFile) or a configMapRef to watch",
            )
        return {}, ref, PluginSource({})
    configs, texts = _plugin_configs(given[0], body[given[0]], source, read)
    return configs, ref, texts


def _plugin_configs(
    kind: str, value: Any, source: str, read: Callable[[str], str] | None
) -> tuple[dict[str, PluginConfig], PluginSource]:
    """The configs one of ``config``, ``configFile``, ``configMap``, ``configMapFile`` gives."""
    where = f"{_DEVICE_PLUGIN}.{kind}"
    if kind == "configMap":
        return parse_plugin_configmap(value, source=f"{source}: {where}"), configmap_source(value)
    if kind == "config":
        label = f"{source}: {where}"
        if isinstance(value, str):
            config = parse_plugin_text(value, key="default", source=label)
        else:
            config = parse_plugin_config(value, key="default", source=label)
        return {"default": config}, PluginSource({"default": value})
    if not isinstance(value, str) or read is None:
        raise PolicyError(source, where, "must be a path to a file")
    try:
        text = read(value)
    except OSError as exc:
        raise PolicyError(source, where, f"cannot read {value}: {exc.strerror}") from None
    if kind == "configFile":
        config = parse_plugin_text(text, key="default", source=value)
        return {"default": config}, PluginSource({"default": text})
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PolicyError(value, "", f"not valid YAML: {exc}") from None
    return parse_plugin_configmap(doc, source=value), configmap_source(doc)


_DRA_FIELDS = frozenset(
    {
        "deviceClassSuffixes",
        "failRequestsGreaterThanOne",
        "adminAccessNamespaces",
        "dualPublishedNodes",
    }
)
#: ``spec.dra.dualPublishedNodes``: what the webhook does with a claim pod while some nodes
#: publish the same GPUs through the device plugin and DRA (docs/migrate.md, "The guard").
DUAL_PUBLISHED_MODES = ("warn", "avoid")


def _dra(spec: Mapping[str, Any], source: str) -> DraPolicy:
    body = _get(spec, "dra", Mapping, {}, source, "spec.dra")
    unknown = sorted(set(body) - _DRA_FIELDS)
    if unknown:
        raise PolicyError(
            source,
            f"spec.dra.{unknown[0]}",
            f"unknown field (known: {', '.join(sorted(_DRA_FIELDS))})",
        )
    suffixes = _get(
        body, "deviceClassSuffixes", list, ["nvidia.com"], source, "spec.dra.deviceClassSuffixes"
    )
    if not suffixes or not all(isinstance(s, str) and s.strip(".") for s in suffixes):
        raise PolicyError(
            source, "spec.dra.deviceClassSuffixes", "must be a list of DNS suffixes (nvidia.com)"
        )
    namespaces = _get(
        body, "adminAccessNamespaces", list, [], source, "spec.dra.adminAccessNamespaces"
    )
    return DraPolicy(
        device_class_suffixes=tuple(str(s).strip(".") for s in suffixes),
        fail_requests_greater_than_one=_get(
            body,
            "failRequestsGreaterThanOne",
            bool,
            True,
            source,
            "spec.dra.failRequestsGreaterThanOne",
        ),
        admin_access_namespaces=frozenset(str(n) for n in namespaces),
        dual_published_nodes=_choice(
            body.get("dualPublishedNodes", "warn"),
            DUAL_PUBLISHED_MODES,
            source,
            "spec.dra.dualPublishedNodes",
        ),
    )


_ISOLATION_FIELDS = frozenset({"mode", "exemptNamespaces"})


def _isolation(spec: Mapping[str, Any], source: str) -> Isolation:
    body = _get(spec, "isolation", Mapping, {}, source, "spec.isolation")
    unknown = sorted(set(body) - _ISOLATION_FIELDS)
    if unknown:
        raise PolicyError(
            source,
            f"spec.isolation.{unknown[0]}",
            f"unknown field (known: {', '.join(sorted(_ISOLATION_FIELDS))})",
        )
    # YAML 1.1 reads a bare `off` as false: take it for the mode it was meant to be.
    raw = body.get("mode", "off")
    mode = "off" if raw is False else raw
    exempt = _get(
        body,
        "exemptNamespaces",
        list,
        list(DEFAULT_ISOLATION_EXEMPT),
        source,
        "spec.isolation.exemptNamespaces",
    )
    return Isolation(
        mode=_choice(mode, ISOLATION_MODES, source, "spec.isolation.mode"),
        exempt_namespaces=frozenset(str(n) for n in exempt),
    )


def _check_keys(
    configs: Mapping[str, PluginConfig], named: Iterable[tuple[str, str | None]], source: str
) -> None:
    """Every config key the policy names (field, key) is one the device plugin's config has."""
    for field, key in named:
        if key is not None and configs and key not in configs:
            raise PolicyError(source, field, f"no config key {key!r} (keys: {', '.join(configs)})")


def _tolerations(mutation: Mapping[str, Any], source: str) -> tuple[Mapping[str, Any], ...]:
    tolerations = _get(
        mutation,
        "tolerations",
        list,
        list(DEFAULT_TOLERATIONS),
        source,
        "spec.mutation.tolerations",
    )
    for i, tol in enumerate(tolerations):
        if not isinstance(tol, Mapping) or tol.get("operator", "Equal") not in ("Equal", "Exists"):
            raise PolicyError(
                source,
                f"spec.mutation.tolerations[{i}]",
                "must be a toleration (key, operator Equal|Exists, value, effect)",
            )
    return tuple(dict(t) for t in tolerations)
