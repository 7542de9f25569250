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
  pools: [{name, config, product, nodes, minNodes, maxNodes, gpusPerNode, memoryMiB,
           migDevices, deviceClass}]
  mutation: {rewriteResourceNames, injectNodeSelection: intent | always | when-needed | never,
             tolerations}
  dra: {deviceClassSuffixes, failRequestsGreaterThanOne, adminAccessNamespaces,
        dualPublishedNodes: warn | avoid}
  isolation: {mode: off | warn | enforce, exemptNamespaces: [...]}
  quota: {enabled, migShare: compute | memory, weights: {name | class | profile: weight}}
```

``quota`` is about GPU budgets per namespace (docs/quota.md, ``webhook.policy.quota``).

``dra`` is about claims (ResourceClaims, ResourceClaimTemplates, pods' ``resourceClaims``;
docs/dra-claims.md): ``deviceClassSuffixes`` says which claims are GPU claims (a request whose
DeviceClass is named one of them, or ends in ``.<suffix>``; default ``[nvidia.com]``, the
classes NVIDIA's DRA driver installs); ``failRequestsGreaterThanOne`` (default true), the device
plugin's word for the same rule, refuses a request for more than one device whose config shares
the device (the driver's ``GpuConfig`` / ``MigDeviceConfig`` sharing TimeSlicing or MPS) and a
consumable-capacity ``shares`` request above one; ``adminAccessNamespaces`` (default none) are
the namespaces whose claims may set ``adminAccess: true``; ``dualPublishedNodes`` (default
``warn``) is what a pod with GPU claims meets while some nodes publish the same GPUs through the
device plugin and a ResourceSlice: a warning naming them, or (``avoid``) a required node
affinity that keeps it off them, and a refusal when only they could serve it (docs/migrate.md).

``isolation`` is about the containers that ask for no GPU (docs/isolation.md): ``off`` (the
default) leaves them alone and the webhook never looks at a pod without a GPU request; ``warn``
and ``enforce`` review every pod that can be placed on a GPU node. Under ``enforce`` each of its
containers that asks for no GPU gets ``NVIDIA_VISIBLE_DEVICES=void`` and one that sets the
variable to GPUs itself is refused; ``warn`` says so instead. ``exemptNamespaces`` (the GPU
Operator's own ``gpu-operator`` is the usual one: its pods reach the GPUs on purpose, without a
request) are left alone, as is a pod annotated ``gpu-policy.io/isolation: disabled`` (which is
reported).

``injectNodeSelection`` says when the webhook adds the product node selection: ``intent`` (the
default) whenever the pod states what it wants (a sharing, product or MIG profile annotation)
or the webhook renamed its resource, and whenever the name alone would reach nodes that cannot
serve it; ``when-needed`` only in that last case; ``always`` for every GPU pod; ``never``.
``true`` and ``false`` are aliases of ``intent`` and ``never``. A pod that keeps what it asked
for still lands right when the nodes change, and a cluster autoscaler scaling up for it can pick
the right node group.

A bare device-plugin config file or ConfigMap is also accepted as a policy, with defaults for
everything else: one source of truth for plugin and webhook. This module opens no files: a
shell passes ``read`` to resolve ``configFile`` / ``configMapFile`` references.

``devicePlugin`` is read here only: the parsed configs go into ``Policy.configs``, their texts
as given (for ``gpu-policy plan``, which writes the keys it keeps back verbatim) into
``Policy.plugin_source``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

import yaml

from webhook.contract import DEVICE_PLUGIN_CONFIGMAP, GPU_POLICY_API_VERSION, SHARING_POLICY_KIND
from webhook.policy.errors import PolicyError, PolicyWarning
from webhook.policy.plugin_config import (
    PluginConfig,
    parse_plugin_config,
    parse_plugin_configmap,
    parse_plugin_text,
)
from webhook.policy.quota.settings import QuotaPolicy, parse_quota
from webhook.policy.resources import is_mig_profile

Enforcement = Literal["enforce", "warn", "audit"]
SharingIntent = Literal["any", "shared", "exclusive"]
NodeSelection = Literal["intent", "always", "when-needed", "never"]
NODE_SELECTION_MODES: tuple[NodeSelection, ...] = ("intent", "always", "when-needed", "never")
IsolationMode = Literal["off", "warn", "enforce"]
ISOLATION_MODES: tuple[IsolationMode, ...] = ("off", "warn", "enforce")
# The GPU Operator's namespace: its device plugin, DCGM exporter and validators use the GPUs
# without a device-plugin request, on purpose (docs/isolation.md).
DEFAULT_ISOLATION_EXEMPT: tuple[str, ...] = ("gpu-operator",)
DEFAULT_NODE_LABEL = "nvidia.com/device-plugin.config"
DEFAULT_TOLERATIONS: tuple[Mapping[str, Any], ...] = (
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
)


@dataclass(frozen=True, slots=True)
class DeclaredPool:
    """A node pool described in the policy.

    Without ``min_nodes`` / ``max_nodes`` it describes nodes that exist, for when no node dump
    or cluster is at hand (a live cluster's nodes replace it). With either, it is a pool an
    autoscaler grows and shrinks: it joins the live inventory too, so that a pod only it can
    serve is allowed while it has no node (docs/autoscaling.md). ``nodes`` is how many it has
    when no cluster says (default 1, or ``min_nodes`` for an autoscaled pool).
    """

    config: str
    product: str | None
    nodes: int
    gpus_per_node: int
    memory_mib: int | None
    mig_devices: tuple[tuple[str, int], ...]  # (profile, instances per node), mixed strategy
    name: str | None = None
    min_nodes: int | None = None
    max_nodes: int | None = None
    # The DRA DeviceClass the pool's nodes publish devices of (their ResourceSlices).
    device_class: str | None = None

    @property
    def autoscaled(self) -> bool:
        """True when an autoscaler sizes the pool (the policy gives minNodes or maxNodes)."""
        return self.min_nodes is not None or self.max_nodes is not None


@dataclass(frozen=True, slots=True)
class Isolation:
    """What the webhook does with containers that ask for no GPU (docs/isolation.md)."""

    mode: IsolationMode = "off"
    exempt_namespaces: frozenset[str] = frozenset(DEFAULT_ISOLATION_EXEMPT)

    @property
    def on(self) -> bool:
        """True when pods without a GPU request are reviewed at all."""
        return self.mode != "off"


@dataclass(frozen=True, slots=True)
class ConfigMapRef:
    """Where the device plugin's ConfigMap lives in the cluster (watched live)."""

    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class PluginSource:
    """The device plugin's config keys as the policy gives them, before parsing.

    ``texts`` maps each key to its config file's text, verbatim (comments and all), or to the
    mapping of an inline ``config:``; ``configmap`` is the (namespace, name) of the ConfigMap
    they come from, when they come from one.
    """

    texts: Mapping[str, str | Mapping[str, Any]]
    configmap: tuple[str, str] | None = None


def configmap_source(doc: Mapping[str, Any]) -> PluginSource:
    """A device-plugin ConfigMap's config texts per key, verbatim, and its (namespace, name)."""
    data = doc.get("data") or {}
    meta = doc.get("metadata") or {}
    where = None
    if isinstance(meta, Mapping) and meta.get("name"):
        namespace = meta.get("namespace") or DEVICE_PLUGIN_CONFIGMAP[0]
        where = (str(namespace), str(meta["name"]))
    texts = {str(k): str(v) for k, v in data.items()} if isinstance(data, Mapping) else {}
    return PluginSource(texts, where)


@dataclass(frozen=True, slots=True)
class DraPolicy:
    """What the policy says about DRA claims (``spec.dra``)."""

    device_class_suffixes: tuple[str, ...] = ("nvidia.com",)
    fail_requests_greater_than_one: bool = True
    admin_access_namespaces: frozenset[str] = frozenset()
    # warn: a claim pod is told which nodes are dual-published; avoid: it is kept off them.
    dual_published_nodes: str = "warn"

    def is_gpu_class(self, name: str) -> bool:
        """True when a request for DeviceClass ``name`` is a GPU request the policy judges."""
        return any(name == s or name.endswith(f".{s}") for s in self.device_class_suffixes)


@dataclass(frozen=True, slots=True)
class Policy:
    """A loaded, validated sharing policy: immutable, shared by every request."""

    configs: Mapping[str, PluginConfig]
    default_config: str | None
    node_label: str = DEFAULT_NODE_LABEL
    enforcement: Enforcement = "enforce"
    default_intent: SharingIntent = "any"
    exempt_namespaces: frozenset[str] = frozenset({"kube-system"})
    rewrite_resource_names: bool = True
    inject_node_selection: NodeSelection = "intent"
    tolerations: tuple[Mapping[str, Any], ...] = DEFAULT_TOLERATIONS
    pools: tuple[DeclaredPool, ...] = ()
    configmap_ref: ConfigMapRef | None = None
    name: str = "policy"
    source: str = "<policy>"
    plugin_source: PluginSource | None = None
    dra: DraPolicy = DraPolicy()
    isolation: Isolation = Isolation()
    quota: QuotaPolicy = dataclasses.field(default_factory=QuotaPolicy)

    def plugin_warnings(self) -> tuple[PolicyWarning, ...]:
        """What the device plugin would silently ignore in the configs, each warning once."""
        return tuple(dict.fromkeys(w for c in self.configs.values() for w in c.warnings))

    def config_for(self, key: str | None) -> PluginConfig | None:
        """The plugin config a node with config label ``key`` runs (the fallback when absent)."""
        if key is not None and key in self.configs:
            return self.configs[key]
        if self.default_config is not None:
            return self.configs.get(self.default_config)
        return None

    def with_configs(self, configs: Mapping[str, PluginConfig]) -> Policy:
        """The same policy with the device-plugin configs replaced (a live ConfigMap edit).

        ``plugin_source`` goes: the policy's own texts no longer describe its configs.
        """
        default = self.default_config if self.default_config in configs else _fallback(configs)
        return replace(self, configs=dict(configs), default_config=default, plugin_source=None)


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


_SPEC_FIELDS = frozenset(
    {
        "enforcement",
        "defaultIntent",
        "exemptNamespaces",
        "devicePlugin",
        "pools",
        "mutation",
        "isolation",
        "dra",
        "quota",
    }
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


def parse_policy(
    doc: object,
    *,
    source: str,
    read: Callable[[str], str] | None = None,
    text: str | None = None,
) -> Policy:
    """Build a Policy from a decoded YAML document.

    Accepts a SharingPolicy, a device-plugin ConfigMap or a bare device-plugin config file.
    ``read`` resolves file references (paths relative to the policy file: the caller decides).
    ``text`` is the document as written, when the caller has it: a bare device-plugin config
    keeps it as its ``plugin_source``. Raises PolicyError with the file, the field and the
    reason.
    """
    if not isinstance(doc, Mapping):
        raise PolicyError(
            source,
            "",
            "expected a mapping (a SharingPolicy, a ConfigMap or a device-plugin config)",
        )
    if doc.get("kind") == "ConfigMap":
        configs = parse_plugin_configmap(doc, source=source)
        return Policy(
            configs=configs,
            default_config=_fallback(configs),
            source=source,
            plugin_source=configmap_source(doc),
        )
    if doc.get("kind") != SHARING_POLICY_KIND:
        return _bare_config(doc, source, text)
    if doc.get("apiVersion") != GPU_POLICY_API_VERSION:
        raise PolicyError(
            source,
            "apiVersion",
            f"expected {GPU_POLICY_API_VERSION}, found {doc.get('apiVersion')!r}",
        )
    return _sharing_policy(doc, source, read)


def _bare_config(doc: Mapping[str, Any], source: str, text: str | None) -> Policy:
    # An empty document is the device plugin's empty config: v1, every default.
    if not doc or "version" in doc or "sharing" in doc or "flags" in doc:
        config = parse_plugin_config(doc, key="default", source=source)
        return Policy(
            configs={"default": config},
            default_config="default",
            source=source,
            plugin_source=PluginSource({"default": doc if text is None else text}),
        )
    raise PolicyError(
        source,
        "kind",
        f"expected {SHARING_POLICY_KIND}, a ConfigMap or a device-plugin config, "
        f"found {doc.get('kind')!r}",
    )


def _sharing_policy(
    doc: Mapping[str, Any], source: str, read: Callable[[str], str] | None
) -> Policy:
    spec = _get(doc, "spec", Mapping, {}, source, "spec")
    unknown = sorted(set(spec) - _SPEC_FIELDS)
    if unknown:
        raise PolicyError(
            source,
            f"spec.{unknown[0]}",
            f"unknown field (known: {', '.join(sorted(_SPEC_FIELDS))})",
        )
    dp = _get(spec, "devicePlugin", Mapping, None, source, _DEVICE_PLUGIN)
    if dp is None:
        raise PolicyError(source, _DEVICE_PLUGIN, "required: the device plugin's config")
    configs, ref, plugin_source = _device_plugin(dp, source, read)
    default = _get(dp, "defaultConfig", str, None, source, f"{_DEVICE_PLUGIN}.defaultConfig")
    _check_keys(configs, ((f"{_DEVICE_PLUGIN}.defaultConfig", default),), source)
    # Checked in this order, so a policy with several problems is told about the same one first.
    mutation = _get(spec, "mutation", Mapping, {}, source, "spec.mutation")
    tolerations = _tolerations(mutation, source)
    exempt = _get(spec, "exemptNamespaces", list, ["kube-system"], source, "spec.exemptNamespaces")
    pools = _pools(spec.get("pools"), source)
    _check_keys(
        configs, ((f"spec.pools[{i}].config", p.config) for i, p in enumerate(pools)), source
    )
    dra = _dra(spec, source)
    isolation = _isolation(spec, source)
    quota = parse_quota(spec, source)
    metadata = _get(doc, "metadata", Mapping, {}, source, "metadata")
    return Policy(
        configs=configs,
        default_config=default if default is not None else _fallback(configs),
        node_label=_get(
            dp, "nodeLabel", str, DEFAULT_NODE_LABEL, source, f"{_DEVICE_PLUGIN}.nodeLabel"
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
        inject_node_selection=_node_selection(mutation.get("injectNodeSelection"), source),
        tolerations=tolerations,
        pools=pools,
        configmap_ref=ref,
        name=str(metadata.get("name", "policy")),
        source=source,
        plugin_source=plugin_source,
        dra=dra,
        isolation=isolation,
        quota=quota,
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
