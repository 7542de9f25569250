"""The fields of a suite file that the loader reads one by one: the kind and name, node
selection, inline objects, expected warnings and golden files, and the objects a case selects.
Each takes the :class:`~webhook.harness.yaml_nodes.NodeReader` that collects problems with their
lines."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import yaml

from webhook.contract import GPU_POLICY_API_VERSION
from webhook.harness.suite import (
    SUITE_KINDS,
    UNCHANGED,
    Golden,
)
from webhook.harness.yaml_nodes import NodeReader, line_of
from webhook.policy import (
    NODE_SELECTION_MODES,
    NodeSelection,
)

_SELECT_FIELDS: tuple[str, ...] = ("kind", "name", "namespace")


def check_kind(r: NodeReader, node: yaml.Node, fields: Mapping[str, yaml.Node]) -> None:
    """apiVersion and kind say this is a suite."""
    api = fields.get("apiVersion")
    if api is None:
        r.problem(node, f"apiVersion is missing: use {GPU_POLICY_API_VERSION}")
    elif r.value(api) != GPU_POLICY_API_VERSION:
        r.problem(api, f"apiVersion is {r.value(api)!r}: use {GPU_POLICY_API_VERSION}")
    kind = fields.get("kind")
    if kind is None:
        r.problem(node, "kind is missing: use Suite (or PolicyTest)")
    elif r.value(kind) not in SUITE_KINDS:
        r.problem(kind, f"kind is {r.value(kind)!r}: use Suite (or PolicyTest)")


def suite_name(r: NodeReader, fields: Mapping[str, yaml.Node]) -> str:
    """``name``, or ``metadata.name``, or the file name without its extension."""
    name = r.path.name.rsplit(".", 1)[0]
    if "name" in fields and "metadata" in fields:
        r.problem(fields["metadata"], "give the name once: name or metadata.name")
    if "name" in fields:
        return r.string(fields["name"], "name") or name
    if "metadata" in fields:
        meta = r.mapping(fields["metadata"], "metadata", ("name",))
        if "name" in meta:
            return r.string(meta["name"], "metadata.name") or name
    return name


def node_selection(r: NodeReader, node: yaml.Node | None, what: str) -> NodeSelection | None:
    """``injectNodeSelection: <mode>`` of one case, or None when the suite's policy decides."""
    if node is None:
        return None
    value = r.string(node, f"{what}: injectNodeSelection")
    for mode in NODE_SELECTION_MODES:
        if value == mode:
            return mode
    if value is not None:
        r.problem(
            node,
            f"{what}: injectNodeSelection {value!r} is not one of "
            f"{', '.join(NODE_SELECTION_MODES)}",
        )
    return None


def inline_object(
    r: NodeReader, inline: yaml.Node, what: str
) -> list[tuple[str, dict[str, Any]]] | None:
    """``inline: {...}``, labelled with the suite file's name and line."""
    if not isinstance(inline, yaml.MappingNode):
        r.problem(inline, f"{what}: inline must be a Kubernetes object (a mapping)")
        return None
    obj = r.value(inline)
    if not check_object(r, inline, obj, what):
        return None
    return [(f"{r.path.name}:{line_of(inline)} (inline)", obj)]


def warning_patterns(
    r: NodeReader, items: yaml.Node, what: str
) -> tuple[re.Pattern[str], ...] | None:
    """``warnings: [regex, ...]``; the patterns that compile."""
    if not isinstance(items, yaml.SequenceNode):
        r.problem(items, f"{what}: warnings must be a list of regular expressions")
        return None
    compiled = [r.regex(item, f"{what}: warnings") for item in items.value]
    return tuple(p for p in compiled if p is not None)


def golden_file(r: NodeReader, node: yaml.Node, what: str, allowed: bool | None) -> Golden | None:
    """``golden: <file>`` (relative to the suite) or ``golden: unchanged``."""
    golden = None
    text = r.string(node, f"{what}: golden")
    if text == UNCHANGED:
        golden = Golden(None, text)
    elif text is not None:
        golden = Golden(r.path.parent / text, text)
    if allowed is False:
        r.problem(node, f"{what}: a denied object has no golden (allowed is false)")
    return golden


def case_label(node: yaml.Node, index: int) -> str:
    """``case 'name'`` when the entry has a plain name, else ``cases[index]``."""
    if isinstance(node, yaml.MappingNode):
        names = [
            v.value
            for k, v in node.value
            if isinstance(k, yaml.ScalarNode)
            and k.value == "name"
            and isinstance(v, yaml.ScalarNode)
        ]
        if len(names) == 1 and names[0]:
            return f"case {names[0]!r}"
    return f"cases[{index}]"


def check_object(r: NodeReader, node: yaml.Node, obj: Any, what: str) -> bool:
    if not isinstance(obj, dict):
        r.problem(node, f"{what}: the object must be a mapping")
        return False
    if not isinstance(obj.get("apiVersion"), str) or not isinstance(obj.get("kind"), str):
        r.problem(node, f"{what}: the object needs apiVersion and kind")
        return False
    return True


def select(
    r: NodeReader, node: yaml.Node, objects: list[tuple[str, dict[str, Any]]], what: str
) -> list[tuple[str, dict[str, Any]]] | None:
    fields = r.nonempty_mapping(
        node, f"{what}: select", _SELECT_FIELDS, f"{what}: select needs kind, name or namespace"
    )
    if fields is None:
        return None
    wanted = {k: r.string(v, f"{what}: select.{k}") for k, v in fields.items()}

    def matches(obj: Mapping[str, Any]) -> bool:
        meta = metadata_of(obj)
        have = {
            "kind": obj.get("kind"),
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
        }
        return all(have[k] == v for k, v in wanted.items())

    chosen = [(label, obj) for label, obj in objects if matches(obj)]
    if len(chosen) != 1:
        listed = ", ".join(ident(obj) for _, obj in objects)
        count = "no" if not chosen else str(len(chosen))
        r.problem(node, f"{what}: select matches {count} documents (the file holds {listed})")
        return None
    return chosen


def metadata_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def ident(obj: Mapping[str, Any]) -> str:
    meta = metadata_of(obj)
    return f"{obj.get('kind')}/{meta.get('name') or meta.get('generateName') or '?'}"
