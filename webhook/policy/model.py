"""The webhook's own policy file: the device plugin's config plus what only the webhook needs.

```yaml
apiVersion: gpu-policy.io/v1alpha1
kind: SharingPolicy
spec:
  enforcement: enforce | warn | audit
  defaultIntent: any | shared | exclusive
  exemptNamespaces: [...]
  devicePlugin: {configMap | configMapFile | config | configFile, nodeLabel, defaultConfig,
                 configMapRef: {namespace, name}}
  pools: [{config, product, nodes, gpusPerNode, memoryMiB, migDevices}]
  mutation: {rewriteResourceNames, injectNodeSelection, tolerations}
```

A bare device-plugin config file or ConfigMap is also accepted as a policy, with defaults for
everything else: one source of truth for plugin and webhook. This module opens no files: a
shell passes ``read`` to resolve ``configFile`` / ``configMapFile`` references.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import yaml

from webhook.contract import GPU_POLICY_API_VERSION, SHARING_POLICY_KIND
from webhook.policy.errors import PolicyError
from webhook.policy.plugin_config import (
    PluginConfig,
    parse_plugin_config,
    parse_plugin_configmap,
    parse_plugin_text,
)
from webhook.policy.resources import is_mig_profile

Enforcement = Literal["enforce", "warn", "audit"]
Intent = Literal["any", "shared", "exclusive"]
DEFAULT_NODE_LABEL = "nvidia.com/device-plugin.config"
DEFAULT_TOLERATIONS: tuple[Mapping[str, Any], ...] = (
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
)


@dataclass(frozen=True, slots=True)
class DeclaredPool:
    """A node pool described in the policy, for when no node dump or cluster is at hand."""

    config: str
    product: str | None
    nodes: int
    gpus_per_node: int
    memory_mib: int | None
    mig_devices: tuple[tuple[str, int], ...]  # (profile, instances per node), mixed strategy


@dataclass(frozen=True, slots=True)
class ConfigMapRef:
    """Where the device plugin's ConfigMap lives in the cluster (watched live)."""

    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class Policy:
    """A loaded, validated sharing policy: immutable, shared by every request."""

    configs: Mapping[str, PluginConfig]
    default_config: str | None
    node_label: str = DEFAULT_NODE_LABEL
    enforcement: Enforcement = "enforce"
    default_intent: Intent = "any"
    exempt_namespaces: frozenset[str] = frozenset({"kube-system"})
    rewrite_resource_names: bool = True
    inject_node_selection: bool = True
    tolerations: tuple[Mapping[str, Any], ...] = DEFAULT_TOLERATIONS
    pools: tuple[DeclaredPool, ...] = ()
    configmap_ref: ConfigMapRef | None = None
    name: str = "policy"
    source: str = "<policy>"

    def config_for(self, key: str | None) -> PluginConfig | None:
        """The plugin config a node with config label ``key`` runs (the fallback when absent)."""
        if key is not None and key in self.configs:
            return self.configs[key]
        if self.default_config is not None:
            return self.configs.get(self.default_config)
        return None

    def with_configs(self, configs: Mapping[str, PluginConfig]) -> Policy:
        """The same policy with the device-plugin configs replaced (a live ConfigMap edit)."""
        default = self.default_config if self.default_config in configs else _fallback(configs)
        return _replace(self, configs=dict(configs), default_config=default)


def _replace(policy: Policy, **changes: Any) -> Policy:
    from dataclasses import replace

    return replace(policy, **changes)


def _fallback(configs: Mapping[str, PluginConfig]) -> str | None:
    # The GPU Operator's documented fallbacks; a single key serves every node.
    for key in ("any", "default"):
        if key in configs:
            return key
    return next(iter(configs)) if len(configs) == 1 else None


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
        nodes = _get(entry, "nodes", int, 1, source, f"{where}.nodes")
        gpus = _get(entry, "gpusPerNode", int, 1, source, f"{where}.gpusPerNode")
        if nodes < 0 or gpus < 0:
            raise PolicyError(source, where, "nodes and gpusPerNode cannot be negative")
        pools.append(
            DeclaredPool(
                config=config,
                product=_get(entry, "product", str, None, source, f"{where}.product"),
                nodes=nodes,
                gpus_per_node=gpus,
                memory_mib=_get(entry, "memoryMiB", int, None, source, f"{where}.memoryMiB"),
                mig_devices=tuple(mig),
            )
        )
    return tuple(pools)


def _device_plugin(
    body: Mapping[str, Any], source: str, read: Callable[[str], str] | None
) -> tuple[dict[str, PluginConfig], ConfigMapRef | None]:
    where = "spec.devicePlugin"
    given = [k for k in ("config", "configFile", "configMap", "configMapFile") if k in body]
    ref_raw = _get(body, "configMapRef", Mapping, None, source, f"{where}.configMapRef")
    ref = None
    if ref_raw is not None:
        ns, name = ref_raw.get("namespace"), ref_raw.get("name")
        if not isinstance(ns, str) or not isinstance(name, str) or not ns or not name:
            raise PolicyError(source, f"{where}.configMapRef", "needs a namespace and a name")
        ref = ConfigMapRef(ns, name)
    if len(given) > 1:
        raise PolicyError(
            source, where, f"give one of config, configFile, configMap, configMapFile, not {given}"
        )
    if not given:
        if ref is None:
            raise PolicyError(
                source,
                where,
                "give the device plugin's config (config, configFile, configMap, "
                "configMapFile) or a configMapRef to watch",
            )
        return {}, ref
    kind = given[0]
    value = body[kind]
    if kind in ("configFile", "configMapFile"):
        if not isinstance(value, str) or read is None:
            raise PolicyError(source, f"{where}.{kind}", "must be a path to a file")
        try:
            text = read(value)
        except OSError as exc:
            raise PolicyError(
                source, f"{where}.{kind}", f"cannot read {value}: {exc.strerror}"
            ) from None
        if kind == "configFile":
            return {"default": parse_plugin_text(text, key="default", source=value)}, ref
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise PolicyError(value, "", f"not valid YAML: {exc}") from None
        return parse_plugin_configmap(doc, source=value), ref
    if kind == "config":
        if isinstance(value, str):
            return {
                "default": parse_plugin_text(
                    value, key="default", source=f"{source}: {where}.config"
                )
            }, ref
        return {
            "default": parse_plugin_config(value, key="default", source=f"{source}: {where}.config")
        }, ref
    return parse_plugin_configmap(value, source=f"{source}: {where}.configMap"), ref


def parse_policy(doc: object, *, source: str, read: Callable[[str], str] | None = None) -> Policy:
    """Build a Policy from a decoded YAML document.

    Accepts a SharingPolicy, a device-plugin ConfigMap or a bare device-plugin config file.
    ``read`` resolves file references (paths relative to the policy file: the caller decides).
    Raises PolicyError with the file, the field and the reason.
    """
    if not isinstance(doc, Mapping):
        raise PolicyError(
            source,
            "",
            "expected a mapping (a SharingPolicy, a ConfigMap or a device-plugin config)",
        )
    if doc.get("kind") == "ConfigMap":
        configs = parse_plugin_configmap(doc, source=source)
        return Policy(configs=configs, default_config=_fallback(configs), source=source)
    if doc.get("kind") != SHARING_POLICY_KIND:
        if "version" in doc or "sharing" in doc or "flags" in doc:
            config = parse_plugin_config(doc, key="default", source=source)
            return Policy(configs={"default": config}, default_config="default", source=source)
        raise PolicyError(
            source,
            "kind",
            f"expected {SHARING_POLICY_KIND}, a ConfigMap or a device-plugin config, "
            f"found {doc.get('kind')!r}",
        )
    if doc.get("apiVersion") != GPU_POLICY_API_VERSION:
        raise PolicyError(
            source,
            "apiVersion",
            f"expected {GPU_POLICY_API_VERSION}, found {doc.get('apiVersion')!r}",
        )
    spec = _get(doc, "spec", Mapping, {}, source, "spec")
    known = {
        "enforcement",
        "defaultIntent",
        "exemptNamespaces",
        "devicePlugin",
        "pools",
        "mutation",
    }
    unknown = sorted(set(spec) - known)
    if unknown:
        raise PolicyError(
            source, f"spec.{unknown[0]}", f"unknown field (known: {', '.join(sorted(known))})"
        )
    dp = _get(spec, "devicePlugin", Mapping, None, source, "spec.devicePlugin")
    if dp is None:
        raise PolicyError(source, "spec.devicePlugin", "required: the device plugin's config")
    configs, ref = _device_plugin(dp, source, read)
    default = _get(dp, "defaultConfig", str, None, source, "spec.devicePlugin.defaultConfig")
    if default is not None and configs and default not in configs:
        raise PolicyError(
            source,
            "spec.devicePlugin.defaultConfig",
            f"no config key {default!r} (keys: {', '.join(configs)})",
        )
    mutation = _get(spec, "mutation", Mapping, {}, source, "spec.mutation")
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
    exempt = _get(spec, "exemptNamespaces", list, ["kube-system"], source, "spec.exemptNamespaces")
    pools = _pools(spec.get("pools"), source)
    for i, pool in enumerate(pools):
        if configs and pool.config not in configs:
            raise PolicyError(
                source,
                f"spec.pools[{i}].config",
                f"no config key {pool.config!r} (keys: {', '.join(configs)})",
            )
    metadata = _get(doc, "metadata", Mapping, {}, source, "metadata")
    return Policy(
        configs=configs,
        default_config=default if default is not None else _fallback(configs),
        node_label=_get(
            dp, "nodeLabel", str, DEFAULT_NODE_LABEL, source, "spec.devicePlugin.nodeLabel"
        ),
        enforcement=_choice(
            spec.get("enforcement", "enforce"),
            ("enforce", "warn", "audit"),
            source,
            "spec.enforcement",
        ),
        default_intent=_choice(
            spec.get("defaultIntent", "any"),
            ("any", "shared", "exclusive"),
            source,
            "spec.defaultIntent",
        ),
        exempt_namespaces=frozenset(str(n) for n in exempt),
        rewrite_resource_names=_get(
            mutation,
            "rewriteResourceNames",
            bool,
            True,
            source,
            "spec.mutation.rewriteResourceNames",
        ),
        inject_node_selection=_get(
            mutation, "injectNodeSelection", bool, True, source, "spec.mutation.injectNodeSelection"
        ),
        tolerations=tuple(dict(t) for t in tolerations),
        pools=pools,
        configmap_ref=ref,
        name=str(metadata.get("name", "policy")),
        source=source,
    )
