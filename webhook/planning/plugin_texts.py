"""The device plugin's config texts: the ones the policy gives, and the ones a plan writes.

A plan keeps every key it does not change verbatim (comments and all) and writes each key it
sizes as one device-plugin config file, in the layout the plugin's documentation uses.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from webhook.policy.model import PluginSource, Policy, configmap_source


class _IndentedDumper(yaml.SafeDumper):
    """Lists indented under their key, as the device plugin's documentation writes them."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def dump_yaml(doc: Any) -> str:
    """Block-style YAML in the given key order."""
    return yaml.dump(doc, Dumper=_IndentedDumper, sort_keys=False, default_flow_style=False)


def _texts(source: PluginSource) -> tuple[dict[str, str], tuple[str, str] | None]:
    texts = {k: v if isinstance(v, str) else dump_yaml(v) for k, v in source.texts.items()}
    return texts, source.configmap


def existing_configs(policy: Policy) -> tuple[dict[str, str], tuple[str, str] | None]:
    """The config texts the policy gives, per key, and the (namespace, name) of their ConfigMap."""
    if policy.plugin_source is None:
        return {}, None
    return _texts(policy.plugin_source)


def configmap_texts(doc: Mapping[str, Any]) -> tuple[dict[str, str], tuple[str, str] | None]:
    """A device-plugin ConfigMap's config texts per key, and its (namespace, name)."""
    return _texts(configmap_source(doc))


def kept_flags(config_text: str | None, mig_strategy: str) -> dict[str, Any]:
    """The ``flags`` of an existing config text, with the nodes' MIG strategy when it has none."""
    flags: dict[str, Any] = {}
    if config_text is not None:
        try:
            doc = yaml.safe_load(config_text)
        except yaml.YAMLError:
            doc = None
        if isinstance(doc, Mapping) and isinstance(doc.get("flags"), Mapping):
            flags = dict(doc["flags"])
    flags.setdefault("migStrategy", mig_strategy)
    return flags


def config_text(
    replicas: Iterable[tuple[str, int]], *, flags: Mapping[str, Any], rename_by_default: bool
) -> str:
    """One device-plugin config file: the flags kept, time-slicing for every shared resource.

    ``replicas`` holds (resource, replicas planned) pairs, the resource by its unshared name.
    """
    resources = [
        {"name": name, "replicas": n}
        for name, n in sorted(replicas, key=lambda pair: pair[0])
        if n >= 2
    ]
    doc: dict[str, Any] = {"version": "v1", "flags": dict(flags)}
    if resources:
        doc["sharing"] = {
            "timeSlicing": {
                "renameByDefault": rename_by_default,
                "failRequestsGreaterThanOne": True,
                "resources": resources,
            }
        }
    return dump_yaml(doc).rstrip("\n")
