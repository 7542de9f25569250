"""Reading a policy document: a SharingPolicy, or a bare device-plugin config file or
ConfigMap, which becomes a policy with defaults for everything else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from webhook.contract import GPU_POLICY_API_VERSION, SHARING_POLICY_KIND
from webhook.policy.errors import PolicyError
from webhook.policy.model.sections import (
    _DEVICE_PLUGIN,
    _check_keys,
    _choice,
    _device_plugin,
    _dra,
    _get,
    _isolation,
    _node_selection,
    _pools,
    _tolerations,
)
from webhook.policy.model.values import (
    DEFAULT_NODE_LABEL,
    PluginSource,
    Policy,
    _fallback,
    configmap_source,
)
from webhook.policy.plugin_config import (
    parse_plugin_config,
    parse_plugin_configmap,
)
from webhook.policy.quota.settings import parse_quota

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
