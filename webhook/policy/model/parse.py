"""Reading a policy document: a SharingPolicy, or a bare device-plugin config file or
ConfigMap, which becomes a policy with defaults for everything else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from webhook.contract import GPU_POLICY_API_VERSION, SHARING_POLICY_KIND
from webhook.policy import schema
from webhook.policy.errors import Diagnostics, PolicyError
from webhook.policy.model import sections
from webhook.policy.model.sections import DEVICE_PLUGIN
from webhook.policy.model.spec import SPEC_SCHEMA
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
from webhook.policy.text import shown


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
    """A SharingPolicy: its structure checked against the spec's schema, then every section
    read; every problem of both is raised at once."""
    diags = Diagnostics(source)
    raw = doc.get("spec") or {}
    spec = schema.check(raw, SPEC_SCHEMA, diags, "spec")
    if not isinstance(spec, Mapping):
        diags.check()  # a spec that is not a mapping: nothing in it can be read
        spec = {}
    dp = spec.get("devicePlugin")
    # Not there at all is a problem of its own; one of the wrong type is noted already.
    if dp is None and raw.get("devicePlugin") is None:
        diags.error(DEVICE_PLUGIN, "required: the device plugin's config")
    configs, ref, plugin_source = sections.device_plugin(dp, diags, read)
    default = (dp or {}).get("defaultConfig")
    sections.check_keys(configs, ((f"{DEVICE_PLUGIN}.defaultConfig", default),), diags)
    mutation = spec.get("mutation") or {}
    tolerations = sections.tolerations(mutation, diags)
    pools = sections.pools(spec.get("pools"), diags)
    sections.check_keys(
        configs, ((f"spec.pools[{i}].config", p.config) for i, p in enumerate(pools)), diags
    )
    dra = sections.dra(spec, diags)
    quota = parse_quota(spec, source, diags)
    metadata = doc.get("metadata")
    if metadata is not None and not isinstance(metadata, Mapping):
        diags.error("metadata", f"must be a mapping, not {shown(metadata)}")
        metadata = None
    diags.check()
    return Policy(
        configs=configs,
        default_config=default if default is not None else _fallback(configs),
        node_label=(dp or {}).get("nodeLabel", DEFAULT_NODE_LABEL),
        enforcement=spec.get("enforcement", "enforce"),
        default_intent=spec.get("defaultIntent", "any"),
        exempt_namespaces=frozenset(map(str, spec.get("exemptNamespaces", ("kube-system",)))),
        rewrite_resource_names=mutation.get("rewriteResourceNames", True),
        inject_node_selection=sections.node_selection(mutation.get("injectNodeSelection")),
        tolerations=tolerations,
        pools=pools,
        configmap_ref=ref,
        name=str((metadata or {}).get("name", "policy")),
        source=source,
        plugin_source=plugin_source,
        dra=dra,
        isolation=sections.isolation(spec),
        quota=quota,
    )
