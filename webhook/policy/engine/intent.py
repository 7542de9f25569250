"""What the pod says about where its GPUs should come from: annotations and node selection.

The ``gpu-policy.io/`` annotations (sharing, product, MIG profile), the pod's nodeSelector on
GFD's product and capability labels and on the config label, and its required node affinity on
those GFD labels, read once into an :class:`Intent` that placement compares offers against.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.contract import MIG_ANNOTATION, PRODUCT_ANNOTATION, SHARING_ANNOTATION
from webhook.policy.decision import RuleResult
from webhook.policy.model import Policy
from webhook.policy.products import CAPABILITY_LABELS, model_key, product_mig_profile
from webhook.policy.records import per_review_record
from webhook.policy.resources import PREFIX, is_mig_profile, nvidia_spelling
from webhook.policy.text import as_text, shown
from webhook.policy.workloads import Workload, dig

_REQUIRED_TERMS = (
    "affinity",
    "nodeAffinity",
    "requiredDuringSchedulingIgnoredDuringExecution",
    "nodeSelectorTerms",
)
# (label key, operator, values) of one product expression; a term ANDs its expressions.
Expression = tuple[str, str, frozenset[str]]


@per_review_record
class Intent:
    """The pod's stated wishes: sharing, products, MIG profile and node selection."""

    sharing: str
    products: frozenset[str]
    mig_profile: str | None
    config_key: str | None
    selectors: tuple[tuple[str, str], ...]
    affinity_terms: tuple[tuple[Expression, ...], ...]
    # nodeSelector entries on GFD's capability labels (products.CAPABILITY_LABELS).
    capabilities: tuple[tuple[str, str], ...] = ()
    # True when an annotation says what the pod wants (sharing, product or MIG profile).
    stated: bool = False

    def describe_selection(self) -> str:
        """How messages name the pod's selection: ``nodeSelector k=v and config key x``."""
        parts = [f"nodeSelector {k}={v}" for k, v in self.selectors + self.capabilities]
        if self.config_key is not None:
            parts.append(f"config key {self.config_key}")
        if self.products:
            parts.append(f"{PRODUCT_ANNOTATION}={','.join(sorted(self.products))}")
        if self.affinity_terms:
            parts.append("its required node affinity")
        return " and ".join(parts) or "its node selection"


def read_intent(workload: Workload, policy: Policy) -> Intent | tuple[RuleResult, ...]:
    """The pod's :class:`Intent`, or the ``gpu-intent`` failures of its annotations."""
    annotations = workload.metadata.get("annotations")
    annotations = annotations if isinstance(annotations, dict) else {}
    sharing = annotations.get(SHARING_ANNOTATION)
    mig = annotations.get(MIG_ANNOTATION)
    failures = _annotation_failures(sharing, mig)
    if failures:
        return failures
    raw_products = annotations.get(PRODUCT_ANNOTATION)
    products: frozenset[str] = frozenset()
    if isinstance(raw_products, str) and raw_products.strip():
        products = frozenset(model_key(p.strip()) for p in raw_products.split(",") if p.strip())
    mig_annotated = mig is not None
    if mig is not None:
        mig = _profile(mig)
    node_selector = workload.spec.get("nodeSelector")
    node_selector = node_selector if isinstance(node_selector, dict) else {}
    selectors: tuple[tuple[str, str], ...] = ()
    capabilities: tuple[tuple[str, str], ...] = ()
    if node_selector:  # most pods select no node: no generators to run for them
        selectors = tuple(
            (k, as_text(v))
            for k, v in node_selector.items()
            if isinstance(k, str) and k.startswith(PREFIX) and k.endswith(".product")
        )
        capabilities = tuple(
            (k, as_text(v)) for k, v in node_selector.items() if k in CAPABILITY_LABELS
        )
    if mig is None:
        # A pod pinned to a MIG product (migStrategy single) asks for that profile.
        for _, value in selectors:
            mig = mig or product_mig_profile(value)
    config_key = node_selector.get(policy.node_label)
    terms = affinity_terms(workload.spec)
    stated = sharing is not None or bool(products) or mig_annotated
    if sharing is None:
        # An explicit product selection already says shared or not (the -SHARED suffix).
        sharing = "any" if selectors or capabilities or terms or products else policy.default_intent
    return Intent(
        sharing=str(sharing),
        products=products,
        mig_profile=mig,
        config_key=as_text(config_key) if config_key is not None else None,
        selectors=selectors,
        affinity_terms=terms,
        capabilities=capabilities,
        stated=stated,
    )


def _profile(annotation: object) -> str:
    """The MIG profile annotation in NVIDIA's spelling: ``mig-1g.10gb.me`` -> ``1g.10gb+me``."""
    return nvidia_spelling(as_text(annotation).removeprefix("mig-"))


def _annotation_failures(sharing: object, mig: object) -> tuple[RuleResult, ...]:
    failures: tuple[RuleResult, ...] = ()
    if sharing is not None and sharing not in ("any", "shared", "exclusive"):
        failures += (
            RuleResult(
                "gpu-intent",
                "fail",
                f"annotation {SHARING_ANNOTATION}={shown(sharing)}: use shared, exclusive or any",
            ),
        )
    if mig is not None and not is_mig_profile(_profile(mig)):
        failures += (
            RuleResult(
                "gpu-intent",
                "fail",
                f"annotation {MIG_ANNOTATION}={shown(mig)} is not "
                "a MIG profile: use a name such as 1g.5gb or 3g.40gb",
            ),
        )
    return failures


def required_terms(spec: Mapping[str, Any]) -> list[Any] | None:
    """The pod's required node affinity terms (``nodeSelectorTerms``), None when it has none."""
    terms = dig(spec, _REQUIRED_TERMS)
    return terms if isinstance(terms, list) else None


def _gfd_label(key: object) -> bool:
    """A GFD label node selection is judged on: a product label or a capability label."""
    if not isinstance(key, str):
        return False
    return (key.startswith(PREFIX) and key.endswith(".product")) or key in CAPABILITY_LABELS


def _product_expressions(term: Mapping[str, Any]) -> tuple[Expression, ...]:
    exprs = []
    for expr in term.get("matchExpressions") or []:
        if not isinstance(expr, dict):
            continue
        key = expr.get("key")
        if isinstance(key, str) and _gfd_label(key):
            raw_values = expr.get("values")
            values = frozenset(as_text(v) for v in raw_values or [] if isinstance(raw_values, list))
            exprs.append((key, as_text(expr.get("operator")), values))
    return tuple(exprs)


def affinity_terms(spec: Mapping[str, Any]) -> tuple[tuple[Expression, ...], ...]:
    """The GFD label expressions of each required affinity term; () when some term has none."""
    terms = required_terms(spec)
    if not terms:
        return ()  # the usual pod: no required node affinity, nothing to build
    out = [_product_expressions(t) for t in terms if isinstance(t, dict)]
    # A term without GFD label expressions admits every offer: no constraint at all.
    if any(not t for t in out):
        return ()
    return tuple(out)
