"""Reading the sections of a SharingPolicy's ``spec`` (``pools``, ``devicePlugin``, ``dra``,
``isolation``, ``mutation``) into the values of ``webhook.policy.model.values``.

Each reads a section whose structure ``webhook.policy.model.spec`` has already checked (the
fields at fault are left out, so each reads the types it expects or falls back on its default),
and notes in the reading's :class:`~webhook.policy.errors.Diagnostics` what a schema cannot
say: a config key the device plugin does not have, ``minNodes`` above ``maxNodes``, a MIG
profile that is not one. Every problem is noted and the reading goes on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import yaml

from webhook.policy.errors import Diagnostics, PolicyError
from webhook.policy.model.values import (
    DEFAULT_ISOLATION_EXEMPT,
    DEFAULT_TOLERATIONS,
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


def node_selection(value: object) -> NodeSelection:
    """``spec.mutation.injectNodeSelection``, one of the modes (or true / false)."""
    # true / false were the only values before the modes: they keep meaning "inject" / "not".
    if value is None or value is True:
        return "intent"
    if value is False:
        return "never"
    mode: NodeSelection = value  # type: ignore[assignment]  # one of the schema's choices
    return mode


def pools(raw: object, diags: Diagnostics) -> tuple[DeclaredPool, ...]:
    """``spec.pools``: the pools whose structure holds, their bounds and profiles checked."""
    pools = []
    for i, entry in enumerate(raw if isinstance(raw, list) else ()):
        where = f"spec.pools[{i}]"
        config = entry.get("config")
        if not config:
            continue  # the structure check said it is required
        mig = []
        for profile, count in (entry.get("migDevices") or {}).items():
            p = str(profile).removeprefix("mig-")
            if not is_mig_profile(p):
                diags.error(f"{where}.migDevices.{profile}", "not a MIG profile")
                continue
            mig.append((p, count))
        low, high = _scaling(entry, diags, where)
        nodes = entry.get("nodes", 1 if low is None else low)
        gpus = entry.get("gpusPerNode", 1)
        if nodes < 0 or gpus < 0:
            diags.error(where, "nodes and gpusPerNode cannot be negative")
        elif high is not None and nodes > high:
            diags.error(f"{where}.nodes", f"more than maxNodes ({high})")
        pools.append(
            DeclaredPool(
                config=config,
                product=entry.get("product"),
                nodes=nodes,
                gpus_per_node=gpus,
                memory_mib=entry.get("memoryMiB"),
                mig_devices=tuple(mig),
                name=entry.get("name") or None,
                min_nodes=low,
                max_nodes=high,
                device_class=entry.get("deviceClass") or None,
            )
        )
    return tuple(pools)


def _scaling(
    entry: Mapping[str, Any], diags: Diagnostics, where: str
) -> tuple[int | None, int | None]:
    """A declared pool's (minNodes, maxNodes); (None, None) when they cannot be used."""
    low, high = entry.get("minNodes"), entry.get("maxNodes")
    if (low is not None and low < 0) or (high is not None and high < 1):
        diags.error(where, "minNodes cannot be negative, maxNodes must be >= 1")
        return None, None
    if low is not None and high is not None and low > high:
        diags.error(f"{where}.minNodes", f"above maxNodes ({high})")
        return None, None
    return low, high


_CONFIG_KEYS = ("config", "configFile", "configMap", "configMapFile")
DEVICE_PLUGIN = "spec.devicePlugin"


def _configmap_ref(body: Mapping[str, Any], diags: Diagnostics) -> ConfigMapRef | None:
    ref_raw = body.get("configMapRef")
    if ref_raw is None:
        return None
    ns, name = ref_raw.get("namespace"), ref_raw.get("name")
    if not ns or not name:
        diags.error(f"{DEVICE_PLUGIN}.configMapRef", "needs a namespace and a name")
        return None
    return ConfigMapRef(ns, name)


def device_plugin(
    body: Mapping[str, Any] | None, diags: Diagnostics, read: Callable[[str], str] | None
) -> tuple[dict[str, PluginConfig], ConfigMapRef | None, PluginSource]:
    """The configs ``spec.devicePlugin`` gives, the ConfigMap to watch, and the configs' texts.

    A device-plugin config that cannot be used adds every problem it has to ``diags``; no
    ``body`` (the section is missing or at fault: noted already) gives nothing.
    """
    if body is None:
        return {}, None, PluginSource({})
    given = [k for k in _CONFIG_KEYS if k in body]
    ref = _configmap_ref(body, diags)
    if len(given) > 1:
        diags.error(
            DEVICE_PLUGIN, f"give one of config, configFile, configMap, configMapFile, not {given}"
        )
        return {}, ref, PluginSource({})
    if not given:
        if ref is None and "configMapRef" not in body:
            diags.error(
                DEVICE_PLUGIN,
                "give the device plugin's config (config, configFile, configMap, "
                "configMapFile) or a configMapRef to watch",
            )
        return {}, ref, PluginSource({})
    try:
        configs, texts = _plugin_configs(given[0], body[given[0]], diags.source, read)
    except PolicyError as exc:
        diags.absorb(exc)
        return {}, ref, PluginSource({})
    return configs, ref, texts


def _plugin_configs(
    kind: str, value: Any, source: str, read: Callable[[str], str] | None
) -> tuple[dict[str, PluginConfig], PluginSource]:
    """The configs one of ``config``, ``configFile``, ``configMap``, ``configMapFile`` gives."""
    where = f"{DEVICE_PLUGIN}.{kind}"
    if kind == "configMap":
        return parse_plugin_configmap(value, source=f"{source}: {where}"), configmap_source(value)
    if kind == "config":
        label = f"{source}: {where}"
        if isinstance(value, str):
            config = parse_plugin_text(value, key="default", source=label)
        else:
            config = parse_plugin_config(value, key="default", source=label)
        return {"default": config}, PluginSource({"default": value})
    if read is None:
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


def dra(spec: Mapping[str, Any], diags: Diagnostics) -> DraPolicy:
    """``spec.dra``."""
    body = spec.get("dra") or {}
    suffixes = body.get("deviceClassSuffixes", ["nvidia.com"])
    if not suffixes or not all(s.strip(".") for s in suffixes):
        diags.error("spec.dra.deviceClassSuffixes", "must be a list of DNS suffixes (nvidia.com)")
        suffixes = ["nvidia.com"]
    return DraPolicy(
        device_class_suffixes=tuple(s.strip(".") for s in suffixes),
        fail_requests_greater_than_one=body.get("failRequestsGreaterThanOne", True),
        admin_access_namespaces=frozenset(map(str, body.get("adminAccessNamespaces", ()))),
        dual_published_nodes=body.get("dualPublishedNodes", "warn"),
    )


def isolation(spec: Mapping[str, Any]) -> Isolation:
    """``spec.isolation`` (nothing in it needs more than the structure check)."""
    body = spec.get("isolation") or {}
    # YAML 1.1 reads a bare `off` as false: take it for the mode it was meant to be.
    raw = body.get("mode", "off")
    return Isolation(
        mode="off" if raw is False else raw,
        exempt_namespaces=frozenset(
            map(str, body.get("exemptNamespaces", DEFAULT_ISOLATION_EXEMPT))
        ),
    )


def check_keys(
    configs: Mapping[str, PluginConfig],
    named: Iterable[tuple[str, str | None]],
    diags: Diagnostics,
) -> None:
    """Every config key the policy names (field, key) is one the device plugin's config has."""
    for field, key in named:
        if key is not None and configs and key not in configs:
            diags.error(field, f"no config key {key!r} (keys: {', '.join(configs)})")


def tolerations(mutation: Mapping[str, Any], diags: Diagnostics) -> tuple[Mapping[str, Any], ...]:
    """``spec.mutation.tolerations``: each a toleration whose operator is Equal or Exists."""
    kept = []
    for i, tol in enumerate(mutation.get("tolerations", DEFAULT_TOLERATIONS)):
        if tol.get("operator", "Equal") not in ("Equal", "Exists"):
            diags.error(
                f"spec.mutation.tolerations[{i}]",
                "must be a toleration (key, operator Equal|Exists, value, effect)",
            )
            continue
        kept.append(dict(tol))
    return tuple(kept)
