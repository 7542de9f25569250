"""Node selector terms (core/v1 ``NodeSelectorTerm``) matched against one node, as the scheduler
matches them: for a pod's required node affinity, and for the nodes a DRA ResourceSlice's
``nodeSelector`` names."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def expression_matches(expr: Mapping[str, Any], value: str | None) -> bool:
    """One ``matchExpressions``/``matchFields`` entry against the value it names (None: absent)."""
    operator = expr.get("operator")
    values = [str(v) for v in expr.get("values") or ()]
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            mine, theirs = int(value), int(values[0])
        except ValueError:
            return False
        return mine > theirs if operator == "Gt" else mine < theirs
    return False


def term_matches(term: Any, name: str, labels: Mapping[str, str]) -> bool:
    """True when the node ``name`` with ``labels`` passes every requirement of ``term``."""
    if not isinstance(term, Mapping):
        return False
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False  # an empty term matches no node (core/v1 NodeSelectorTerm)
    for expr in expressions:
        if not isinstance(expr, Mapping):
            return False
        if not expression_matches(expr, labels.get(str(expr.get("key")))):
            return False
    for expr in fields:
        # metadata.name is the only field a node selector term may name.
        if not isinstance(expr, Mapping) or expr.get("key") != "metadata.name":
            return False
        if not expression_matches(expr, name):
            return False
    return True


def selector_matches(
    selector: Mapping[str, Any] | None, name: str, labels: Mapping[str, str]
) -> bool:
    """True when a ``NodeSelector`` (its terms ORed) admits the node; no selector admits none."""
    terms = (selector or {}).get("nodeSelectorTerms") or ()
    return any(term_matches(term, name, labels) for term in terms)
