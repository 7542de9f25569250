"""The mutated copy of a pod: resource names and missing limits, node selection, tolerations.

The copy shares every subtree it does not change with the original (the JSON Patch diff skips
shared subtrees by identity), and each change is also said in words: they become the
``gpu-policy.io/mutations`` annotation, the API server's audit annotations and the CLI's output.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from webhook.contract import MUTATIONS_ANNOTATION
from webhook.policy.engine.checks import MISSING
from webhook.policy.engine.intent import required_terms
from webhook.policy.engine.placement import Choice
from webhook.policy.model import Policy
from webhook.policy.patch import Within
from webhook.policy.workloads import Workload

# Everything the mutation of a pod can write (its annotations and the spec fields the writers
# below set), in the order the API server serializes a pod, so that the patch is in document
# order. The property tests fail if a write falls outside it.
MUTABLE: Within = {
    "metadata": {"annotations": None},
    "spec": {
        "initContainers": None,
        "containers": None,
        "nodeSelector": None,
        "affinity": None,
        "tolerations": None,
    },
}


def mutated_spec(
    spec: Mapping[str, Any],
    choices: Sequence[Choice],
    wanted: Mapping[str, set[str]],
    policy: Policy,
) -> tuple[dict[str, Any], list[str]]:
    """A new pod spec with the chosen names, ``wanted`` node labels and the policy's tolerations.

    Returns the spec and the changes in words (empty when it equals ``spec``).
    """
    new = dict(spec)
    changes = _write_resources(new, choices)
    if wanted:
        changes += _write_selection(new, wanted)
    if policy.tolerations:
        changes += _write_tolerations(new, policy.tolerations)
    return new, changes


# The writers below each set fields of ``spec``, the new copy ``mutated_spec`` builds, and
# return what they changed, in words.


def _write_resources(spec: dict[str, Any], choices: Sequence[Choice]) -> list[str]:
    changes: list[str] = []
    copied: dict[str, list[Any]] = {}
    for choice in choices:
        ask, entry, chosen = choice.ask, choice.ask.entry, choice.name
        rename = chosen != entry.name
        fill_request = entry.request is MISSING
        fill_limit = entry.limit is MISSING
        if not (rename or fill_request or fill_limit):
            continue
        items = copied.get(ask.list_name)
        if items is None:
            items = copied[ask.list_name] = list(spec[ask.list_name])
        value = entry.limit if fill_request else entry.request
        items[ask.index] = _with_resource(items[ask.index], entry.name, chosen, value)
        if rename:
            changes.append(f"{ask.label}: {entry.name} -> {chosen}")
        if fill_request or fill_limit:
            changes.append(
                f"{ask.label}: {'requests' if fill_request else 'limits'} {chosen} = {value}"
            )
    spec.update(copied)
    return changes


def _with_resource(
    container: Mapping[str, Any], name: str, chosen: str, value: Any
) -> dict[str, Any]:
    """A copy of ``container`` asking for ``chosen`` instead of ``name``, in requests and limits."""
    resources = dict(container.get("resources") or {})
    for part in ("requests", "limits"):
        section = resources.get(part)
        section = section if isinstance(section, dict) else {}
        new: dict[str, Any] = {}
        for key, raw in section.items():
            new[chosen if key == name else key] = raw
        if name not in section:
            new[chosen] = value
        resources[part] = new
    return {**container, "resources": resources}


def _write_selection(spec: dict[str, Any], wanted: Mapping[str, set[str]]) -> list[str]:
    changes: list[str] = []
    for key, values in sorted(wanted.items()):
        node_selector = spec.get("nodeSelector")
        if isinstance(node_selector, dict) and node_selector.get(key) in values:
            continue
        if len(values) == 1:
            value = next(iter(values))
            new_selector = dict(node_selector) if isinstance(node_selector, dict) else {}
            new_selector[key] = value
            spec["nodeSelector"] = new_selector
            changes.append(f"nodeSelector {key}={value}")
            continue
        terms = required_terms(spec)
        if terms and all(_term_within(t, key, values) for t in terms):
            continue
        spec["affinity"] = _with_expression(spec.get("affinity"), key, values)
        changes.append(f"node affinity {key} In ({', '.join(sorted(values))})")
    return changes


def _with_expression(current: object, key: str, values: set[str]) -> dict[str, Any]:
    """A copy of the pod's affinity that also requires ``key`` In ``values``."""
    expr = {"key": key, "operator": "In", "values": sorted(values)}
    affinity: dict[str, Any] = copy.deepcopy(dict(current)) if isinstance(current, dict) else {}
    node_affinity = affinity.setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    existing = required.get("nodeSelectorTerms")
    if isinstance(existing, list) and existing:
        # Terms are ORed: AND the expression into each one, so nothing is loosened.
        for term in existing:
            term.setdefault("matchExpressions", []).append(dict(expr))
    else:
        required["nodeSelectorTerms"] = [{"matchExpressions": [expr]}]
    return affinity


def _term_within(term: Any, key: str, values: set[str]) -> bool:
    if not isinstance(term, dict):
        return False
    for expr in term.get("matchExpressions") or []:
        if (
            isinstance(expr, dict)
            and expr.get("key") == key
            and expr.get("operator") == "In"
            and set(expr.get("values") or []) <= values
        ):
            return True
    return False


def _tolerated(existing: list[Any], tol: Mapping[str, Any]) -> bool:
    for t in existing:
        if not isinstance(t, dict):
            continue
        operator = t.get("operator") or "Equal"
        effect_ok = not t.get("effect") or t.get("effect") == tol.get("effect")
        if operator == "Exists" and not t.get("key") and effect_ok:
            return True
        if t.get("key") == tol.get("key") and effect_ok:
            if operator == "Exists":
                return True
            if (tol.get("operator") or "Equal") == "Equal" and t.get("value") == tol.get("value"):
                return True
    return False


def _write_tolerations(spec: dict[str, Any], tolerations: Sequence[Mapping[str, Any]]) -> list[str]:
    existing = spec.get("tolerations")
    existing = list(existing) if isinstance(existing, list) else []
    added = [dict(t) for t in tolerations if not _tolerated(existing, t)]
    if not added:
        return []
    spec["tolerations"] = existing + added
    return [
        "tolerations " + ", ".join(f"{t.get('key', '*')}:{t.get('effect', '*')}" for t in added)
    ]


def mutated_copy(
    obj: Mapping[str, Any], workload: Workload, spec: dict[str, Any], annotation: str | None
) -> dict[str, Any]:
    """A new object sharing every untouched subtree with ``obj``, with ``spec`` swapped in."""
    root: dict[str, Any] = dict(obj)
    node = root
    for step in workload.path:
        node[step] = dict(node[step])
        node = node[step]
    node["spec"] = spec
    if annotation is not None:
        # Tolerate what no API server sends but a hand-written manifest may hold.
        old_meta = node.get("metadata")
        metadata = dict(old_meta) if isinstance(old_meta, dict) else {}
        old_annotations = metadata.get("annotations")
        annotations = dict(old_annotations) if isinstance(old_annotations, dict) else {}
        annotations[MUTATIONS_ANNOTATION] = annotation
        metadata["annotations"] = annotations
        node["metadata"] = metadata
    return root


def template_changes(kind: str, changes: Sequence[str]) -> str:
    """The warning on a pod template (never patched) that says what its pods will get."""
    return f"pods created from this {kind} will be changed: " + "; ".join(changes)
