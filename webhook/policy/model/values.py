"""The policy as the rest of the code reads it: :class:`Policy` and its parts.

The declared pools (:class:`DeclaredPool`), the device-plugin source (:class:`PluginSource`,
:class:`ConfigMapRef`), the ``dra`` and ``isolation`` settings, and the defaults they start
from. Reading them from a policy file is ``webhook.policy.model.parse``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from webhook.contract import DEVICE_PLUGIN_CONFIGMAP
from webhook.policy.errors import Diagnostic
from webhook.policy.plugin_config import PluginConfig
from webhook.policy.quota.settings import QuotaPolicy

Enforcement = Literal["enforce", "warn", "audit"]
SharingIntent = Literal["any", "shared", "exclusive"]
NodeSelection = Literal["intent", "always", "when-needed", "never"]
NODE_SELECTION_MODES: tuple[NodeSelection, ...] = ("intent", "always", "when-needed", "never")
IsolationMode = Literal["off", "warn", "enforce"]
ISOLATION_MODES: tuple[IsolationMode, ...] = ("off", "warn", "enforce")
#: ``spec.dra.dualPublishedNodes``: what the webhook does with a claim pod while some nodes
#: publish the same GPUs through the device plugin and DRA (docs/migrate.md, "The guard").
DualPublished = Literal["warn", "avoid"]
DUAL_PUBLISHED_MODES: tuple[DualPublished, ...] = ("warn", "avoid")
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

    def plugin_warnings(self) -> tuple[Diagnostic, ...]:
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
