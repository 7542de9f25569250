"""``review()``: the one entry point the server, the CLI and the harness share.

A review reads the pod (or pod template) once, decides where its GPU requests can run in the
inventory, mutates a copy (renames, node selection, tolerations) and validates the result.
Rules are judged on the object as it will be after mutation, which is what the API server's
validating webhooks see, so a mutated pod always passes its own validation.
"""

from __future__ import annotations

import copy
import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.contract import (
    MIG_ANNOTATION,
    MUTATIONS_ANNOTATION,
    PRODUCT_ANNOTATION,
    SHARING_ANNOTATION,
)
from webhook.policy.decision import RULES, Decision, RuleResult, Status
from webhook.policy.inventory import Inventory, Offer, Pool
from webhook.policy.model import Policy
from webhook.policy.patch import Within, diff
from webhook.policy.products import base_model, model_key
from webhook.policy.quantity import QuantityError, parse_gpu_quantity
from webhook.policy.resources import PREFIX, ResourceForm, is_mig_profile, parse_resource
from webhook.policy.text import as_text, shown
from webhook.policy.workloads import Workload, container_label, containers, locate

_MISSING = object()
_GPU_PREFIXES = (f"{PREFIX}gpu", f"{PREFIX}mig")
_SKIP_ALL = "skip"
# Everything the mutation of a pod can write (its annotations and _apply_resources,
# _apply_selection, _apply_tolerations), in the order the API server serializes a pod, so
# that the patch is in document order. The property tests fail if a write falls outside it.
_MUTABLE: Within = {
    "metadata": {"annotations": None},
    "spec": {
        "initContainers": None,
        "containers": None,
        "nodeSelector": None,
        "affinity": None,
        "tolerations": None,
    },
}


@dataclass(slots=True)
class _Entry:
    """One GPU resource in one container, as written."""

    name: str
    form: ResourceForm | None
    request: Any
    limit: Any
    count: int | None = None


@dataclass(slots=True)
class _Ask:
    """What one container asks for, after the per-container rules."""

    list_name: str
    index: int
    label: str
    entries: list[_Entry]
    form: ResourceForm | None = None
    count: int = 0
    candidates: list[tuple[Pool, Offer]] = field(default_factory=list)
    chosen: str | None = None


@dataclass(slots=True)
class _Intent:
    sharing: str
    products: frozenset[str]
    mig_profile: str | None
    config_key: str | None
    selectors: tuple[tuple[str, str], ...]
    affinity_terms: tuple[tuple[tuple[str, str, frozenset[str]], ...], ...]

    def describe_selection(self) -> str:
        parts = [f"nodeSelector {k}={v}" for k, v in self.selectors]
        if self.config_key is not None:
            parts.append(f"config key {self.config_key}")
        if self.products:
            parts.append(f"{PRODUCT_ANNOTATION}={','.join(sorted(self.products))}")
        if self.affinity_terms:
            parts.append("its required node affinity")
        return " and ".join(parts) or "its node selection"


class _Results:
    """Rule results in the order rules are declared; a rule with no finding passes."""

    def __init__(self) -> None:
        self.items: list[RuleResult] = []
        self.touched: set[str] = set()

    def add(self, rule: str, status: Status, message: str, container: str | None = None) -> None:
        self.items.append(RuleResult(rule, status, message, container))
        self.touched.add(rule)

    def has_failure(self) -> bool:
        return any(r.status == "fail" for r in self.items)

    def finish(self, skipped: Iterable[str] = (), reason: str = "") -> tuple[RuleResult, ...]:
        if not self.items and not skipped:
            return _ALL_PASS  # the common case: one shared tuple, nothing to build
        skip = set(skipped)
        out: list[RuleResult] = []
        for rule in RULES:
            if rule in self.touched:
                out += [r for r in self.items if r.rule == rule]
            elif rule in skip:
                out.append(RuleResult(rule, "skip", reason))
            else:
                out.append(_PASS[rule])
        return tuple(out)


_PASS = {rule: RuleResult(rule, "pass", text) for rule, text in RULES.items()}
_ALL_PASS = tuple(_PASS.values())


def _gpu_entries(container: Mapping[str, Any]) -> list[_Entry]:
    resources = container.get("resources")
    if not isinstance(resources, dict):
        return []
    asked = resources.get("requests")
    limits = resources.get("limits")
    asked = asked if isinstance(asked, dict) else {}
    limits = limits if isinstance(limits, dict) else {}
    names = [k for k in asked if isinstance(k, str) and k.startswith(PREFIX)]
    names += [k for k in limits if isinstance(k, str) and k.startswith(PREFIX) and k not in asked]
    return [
        _Entry(n, parse_resource(n), asked.get(n, _MISSING), limits.get(n, _MISSING)) for n in names
    ]


def _gpu_containers(
    spec: Mapping[str, Any],
) -> list[tuple[str, int, Mapping[str, Any], list[_Entry]]]:
    """(list name, index, container, entries) of the containers that ask for ``nvidia.com/``.

    One walk over the containers: most pods reaching a webhook ask for no GPU at all, and
    those that do have one or two GPU containers among their sidecars.
    """
    found = []
    for list_name, i, container in containers(spec):
        resources = container.get("resources")
        if not resources or not isinstance(resources, dict):
            continue
        if not any(
            isinstance(section, dict)
            and any(isinstance(k, str) and k.startswith(PREFIX) for k in section)
            for section in (resources.get("limits"), resources.get("requests"))
        ):
            continue  # the usual container: cpu and memory only
        entries = _gpu_entries(container)
        if entries:
            found.append((list_name, i, container, entries))
    return found


def _known_names(inventory: Inventory) -> list[str]:
    return [*inventory.names, "nvidia.com/gpu", "nvidia.com/gpu.shared"]


def _check_container(
    list_name: str,
    index: int,
    container: Mapping[str, Any],
    entries: list[_Entry],
    *,
    results: _Results,
    inventory: Inventory,
) -> _Ask | None:
    # Other nvidia.com/ resources (NICs, vGPU, RDMA) are not ours to judge.
    entries = [e for e in entries if e.form is not None or e.name.startswith(_GPU_PREFIXES)]
    if not entries:
        return None
    label = container_label(list_name, container, index)
    ok = True
    if list_name == "ephemeralContainers":
        names = ", ".join(e.name for e in entries)
        results.add(
            "gpu-ephemeral-container",
            "fail",
            f"{label} asks for {names}: ephemeral containers cannot be given devices; "
            "remove the GPU resources from it (debug from a container that already has the GPU)",
            label,
        )
        return None
    for entry in entries:
        if entry.form is None:
            close = difflib.get_close_matches(entry.name, _known_names(inventory), n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            results.add(
                "gpu-resource-name",
                "fail",
                f"{label} asks for {entry.name}, which no NVIDIA device plugin advertises; {hint}"
                f"the cluster offers {inventory.summary()}",
                label,
            )
            ok = False
            continue
        values = {}
        for part, raw in (("requests", entry.request), ("limits", entry.limit)):
            if raw is _MISSING:
                continue
            try:
                values[part] = parse_gpu_quantity(raw)
            except QuantityError as exc:
                results.add("gpu-quantity", "fail", f"{label}: {part} {entry.name}: {exc}", label)
                ok = False
        if len(values) == 2 and values["requests"] != values["limits"]:
            results.add(
                "gpu-requests-equal-limits",
                "fail",
                f"{label} asks for {entry.name} requests {values['requests']} but limits "
                f"{values['limits']}: GPUs cannot be overcommitted, set requests and limits to "
                f"the same number (e.g. both {values['limits']})",
                label,
            )
            ok = False
        if values:
            entry.count = values.get("limits", values.get("requests"))
    forms = [e for e in entries if e.form is not None]
    if len(forms) > 1:
        names = ", ".join(e.name for e in forms)
        results.add(
            "gpu-container-forms",
            "fail",
            f"{label} asks for {names}: one container gets one kind of GPU (a MIG profile, a "
            "shared or an exclusive GPU); split it into containers or keep one of them",
            label,
        )
        ok = False
    if not ok:
        return _Ask(list_name, index, label, entries)
    entry = forms[0]
    return _Ask(list_name, index, label, entries, form=entry.form, count=entry.count or 0)


def _intent(workload: Workload, policy: Policy, results: _Results) -> _Intent:
    annotations = workload.metadata.get("annotations")
    annotations = annotations if isinstance(annotations, dict) else {}
    sharing = annotations.get(SHARING_ANNOTATION)
    if sharing is not None and sharing not in ("any", "shared", "exclusive"):
        results.add(
            "gpu-intent",
            "fail",
            f"annotation {SHARING_ANNOTATION}={shown(sharing)}: use shared, exclusive or any",
        )
        sharing = None
    raw_products = annotations.get(PRODUCT_ANNOTATION)
    products: frozenset[str] = frozenset()
    if isinstance(raw_products, str) and raw_products.strip():
        products = frozenset(model_key(p.strip()) for p in raw_products.split(",") if p.strip())
    mig = annotations.get(MIG_ANNOTATION)
    if mig is not None:
        mig = as_text(mig).removeprefix("mig-").replace(".me", "+me")
        if not is_mig_profile(mig):
            results.add(
                "gpu-intent",
                "fail",
                f"annotation {MIG_ANNOTATION}={shown(annotations.get(MIG_ANNOTATION))} is not "
                "a MIG profile: use a name such as 1g.5gb or 3g.40gb",
            )
            mig = None
    node_selector = workload.spec.get("nodeSelector")
    node_selector = node_selector if isinstance(node_selector, dict) else {}
    selectors = tuple(
        (k, as_text(v))
        for k, v in node_selector.items()
        if isinstance(k, str) and k.startswith(PREFIX) and k.endswith(".product")
    )
    if mig is None:
        # A pod pinned to a MIG product (migStrategy single) asks for that profile.
        for _, value in selectors:
            if "-MIG-" in value:
                mig = value.split("-MIG-", 1)[1].removesuffix("-SHARED")
    config_key = node_selector.get(policy.node_label)
    terms = _affinity_terms(workload.spec)
    if sharing is None:
        # An explicit product selection already says shared or not (the -SHARED suffix).
        sharing = "any" if selectors or terms or products else policy.default_intent
    return _Intent(
        sharing=str(sharing),
        products=products,
        mig_profile=mig,
        config_key=as_text(config_key) if config_key is not None else None,
        selectors=selectors,
        affinity_terms=terms,
    )


def _required_terms(spec: Mapping[str, Any]) -> list[Any] | None:
    affinity = spec.get("affinity")
    if not isinstance(affinity, dict):
        return None
    node_affinity = affinity.get("nodeAffinity")
    if not isinstance(node_affinity, dict):
        return None
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not isinstance(required, dict):
        return None
    terms = required.get("nodeSelectorTerms")
    return terms if isinstance(terms, list) else None


def _affinity_terms(
    spec: Mapping[str, Any],
) -> tuple[tuple[tuple[str, str, frozenset[str]], ...], ...]:
    terms = _required_terms(spec) or []
    out = []
    for term in terms:
        if not isinstance(term, dict):
            continue
        exprs = []
        for expr in term.get("matchExpressions") or []:
            if not isinstance(expr, dict):
                continue
            key = expr.get("key")
            if isinstance(key, str) and key.startswith(PREFIX) and key.endswith(".product"):
                raw_values = expr.get("values")
                values = frozenset(
                    as_text(v) for v in raw_values or [] if isinstance(raw_values, list)
                )
                exprs.append((key, as_text(expr.get("operator")), values))
        out.append(tuple(exprs))
    # A term without product expressions admits every product: no constraint at all.
    if any(not t for t in out):
        return ()
    return tuple(out)


def _selection_admits(intent: _Intent, offer: Offer) -> bool:
    if offer.selector is None:
        return True
    key, value = offer.selector
    for sel_key, sel_value in intent.selectors:
        if sel_key == key and sel_value != value:
            return False
    if not intent.affinity_terms:
        return True
    for term in intent.affinity_terms:
        admitted = True
        for expr_key, operator, values in term:
            if expr_key != key:
                continue
            if (operator == "In" and value not in values) or (
                operator == "NotIn" and value in values
            ):
                admitted = False
        if admitted:
            return True
    return False


def _describe_kind(form: ResourceForm, mig_profile: str | None) -> str:
    profile = form.profile or mig_profile
    return f"MIG {profile} instances" if profile else "GPUs"


def _place(ask: _Ask, intent: _Intent, inventory: Inventory, results: _Results) -> None:
    """Narrow the offers that can serve ``ask``; record why when none can."""
    form = ask.form
    assert form is not None
    wanted = form.profile or intent.mig_profile
    by_kind = [(pool, offer) for pool, offer in inventory.offers() if offer.profile == wanted]
    if not by_kind and wanted is None:
        # Only MIG instances under migStrategy single advertise nvidia.com/gpu here: a pod that
        # names no profile may take one (it would be scheduled there anyway). Where full GPUs
        # exist too, a plain request is steered to them.
        by_kind = [(p, o) for p, o in inventory.offers() if o.form.profile is None]
    what = _describe_kind(form, intent.mig_profile)
    if not by_kind:
        results.add(
            "gpu-resource-offered",
            "fail",
            f"{ask.label} asks for {form.name}, but no node offers {what}: the pod would stay "
            f"Pending. The cluster offers {inventory.summary()}; ask for one of those",
            ask.label,
        )
        return
    if form.renamed and intent.sharing == "exclusive":
        results.add(
            "gpu-intent",
            "fail",
            f"{ask.label} asks for {form.name}, a shared GPU, but annotation "
            f"{SHARING_ANNOTATION}=exclusive asks for an exclusive one: drop one of the two",
            ask.label,
        )
        return
    shared_only = form.renamed or intent.sharing == "shared"
    cands = by_kind
    if shared_only:
        cands = [(p, o) for p, o in cands if o.shared]
    elif intent.sharing == "exclusive":
        cands = [(p, o) for p, o in cands if not o.shared]
    if not cands:
        why = "shared" if shared_only else "exclusive (not shared)"
        source = "its name" if form.renamed else f"annotation {SHARING_ANNOTATION}"
        results.add(
            "gpu-resource-offered",
            "fail",
            f"{ask.label} asks for {why} {what} ({source}), but no node offers them: the pod "
            f"would stay Pending. Nodes offer {_summary(by_kind)}",
            ask.label,
        )
        return
    selected = [
        (p, o)
        for p, o in cands
        if (intent.config_key is None or p.config_key == intent.config_key)
        and (not intent.products or o.model_key in intent.products)
        and _selection_admits(intent, o)
    ]
    if not selected:
        results.add(
            "gpu-node-selection",
            "fail",
            f"{ask.label} asks for {form.name}, but {intent.describe_selection()} matches no "
            f"node that offers it; the nodes that do offer {_summary(cands)}: "
            f"{_selection_fix(intent, cands)}",
            ask.label,
        )
        return
    if ask.count > 1:
        exclusive = [(p, o) for p, o in selected if not o.shared]
        if exclusive:
            selected = exclusive
        else:
            lenient = [(p, o) for p, o in selected if not o.fail_requests_greater_than_one]
            if not lenient:
                results.add(
                    "gpu-shared-request-above-one",
                    "fail",
                    f"{ask.label} asks for {ask.count} {form.name}, but every node that could run "
                    f"it shares its GPUs ({_summary(selected)}) and the device plugin fails shared "
                    "requests above one (failRequestsGreaterThanOne): the pod would fail with "
                    "UnexpectedAdmissionError. Ask for 1 (a share is access to a GPU, not a "
                    "fraction of its compute), or target an exclusive GPU",
                    ask.label,
                )
                return
            selected = lenient
            results.add(
                "gpu-shared-request-above-one",
                "warn",
                f"{ask.label} asks for {ask.count} shared {form.name}: {ask.count} replicas of a "
                "shared GPU may be the same GPU and do not give more compute; ask for 1",
                ask.label,
            )
    ask.candidates = selected


def _selection_fix(intent: _Intent, cands: list[tuple[Pool, Offer]]) -> str:
    """Name the selector value the user most likely meant (``Tesla-T4`` -> ``Tesla-T4-SHARED``)."""
    for key, value in intent.selectors:
        for _, offer in cands:
            if offer.selector and offer.selector[0] == key and offer.model == base_model(value):
                return f"select {key}={offer.selector[1]} instead, or remove the nodeSelector"
    return "select one of those products, or remove the selection"


def _summary(pairs: Iterable[tuple[Pool, Offer]]) -> str:
    by_name: dict[str, list[str]] = {}
    for _, offer in pairs:
        by_name.setdefault(offer.form.name, []).append(offer.describe())
    return "; ".join(f"{name}: {', '.join(sorted(set(v)))}" for name, v in sorted(by_name.items()))


def _choose_names(asks: list[_Ask], policy: Policy, results: _Results) -> set[str] | None:
    """Pick the resource name each container will ask for, on pools they all share."""
    pools: set[str] | None = None
    for ask in asks:
        names = {p.name for p, _ in ask.candidates}
        pools = names if pools is None else pools & names
    if not pools:
        detail = "; ".join(
            f"{a.label} -> {', '.join(sorted({p.name for p, _ in a.candidates}))}" for a in asks
        )
        results.add(
            "gpu-resource-offered",
            "fail",
            f"no single node can serve every container's GPU request ({detail}): containers of "
            "one pod run on one node; ask for GPUs one node pool offers",
        )
        return None
    for ask in asks:
        assert ask.form is not None
        usable = [(p, o) for p, o in ask.candidates if p.name in pools]
        groups: dict[str, list[tuple[Pool, Offer]]] = {}
        for pair in usable:
            groups.setdefault(pair[1].form.name, []).append(pair)
        current = ask.form.name
        if current in groups:
            ask.chosen = current
        elif not policy.rewrite_resource_names:
            results.add(
                "gpu-resource-offered",
                "fail",
                f"{ask.label} asks for {current}, but the nodes that fit it advertise "
                f"{_summary(usable)}: the pod would stay Pending. Ask for "
                f"{' or '.join(sorted(groups))} instead",
                ask.label,
            )
            return None
        else:
            # The name with the most slots, so the pod lands where there is most room.
            ask.chosen = max(sorted(groups), key=lambda n: sum(o.slots or 0 for _, o in groups[n]))
        ask.candidates = groups[ask.chosen]
        pools &= {p.name for p, _ in ask.candidates}
    return pools


def _needs_selection(ask: _Ask, inventory: Inventory) -> bool:
    assert ask.chosen is not None
    # The candidates are some of the pairs that offer the chosen name (``_choose_names`` kept
    # those of ``inventory.offers()`` that advertise it), each once: fewer of them than all
    # means the name alone would also reach nodes that cannot serve the container.
    return len(ask.candidates) < len(inventory.offering(ask.chosen))


def _selection(asks: list[_Ask], inventory: Inventory, results: _Results) -> dict[str, set[str]]:
    """Node labels (key -> values) that keep every container on nodes that can serve it."""
    if not any(_needs_selection(a, inventory) for a in asks):
        return {}
    wanted: dict[str, set[str]] = {}
    for ask in asks:
        for _, offer in ask.candidates:
            if offer.selector is None:
                results.add(
                    "gpu-node-selection",
                    "warn",
                    f"{ask.label}: cannot steer the pod to {ask.chosen} on "
                    f"{offer.describe()}: its nodes carry no known product label",
                    ask.label,
                )
                return {}
            wanted.setdefault(offer.selector[0], set()).add(offer.selector[1])
    return wanted


def _apply_selection(spec: dict[str, Any], wanted: dict[str, set[str]], changes: list[str]) -> None:
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
        terms = _required_terms(spec)
        expr = {"key": key, "operator": "In", "values": sorted(values)}
        if terms and all(_term_within(t, key, values) for t in terms):
            continue
        current = spec.get("affinity")
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
        spec["affinity"] = affinity
        changes.append(f"node affinity {key} In ({', '.join(sorted(values))})")


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


def _apply_tolerations(spec: dict[str, Any], policy: Policy, changes: list[str]) -> None:
    existing = spec.get("tolerations")
    existing = list(existing) if isinstance(existing, list) else []
    added = [dict(t) for t in policy.tolerations if not _tolerated(existing, t)]
    if added:
        spec["tolerations"] = existing + added
        changes.append(
            "tolerations " + ", ".join(f"{t.get('key', '*')}:{t.get('effect', '*')}" for t in added)
        )


def _apply_resources(spec: dict[str, Any], asks: list[_Ask], changes: list[str]) -> None:
    copied: dict[str, list[Any]] = {}
    for ask in asks:
        assert ask.form is not None and ask.chosen is not None
        entry = next(e for e in ask.entries if e.form is not None)
        rename = ask.chosen != entry.name
        fill_request = entry.request is _MISSING
        fill_limit = entry.limit is _MISSING
        if not (rename or fill_request or fill_limit):
            continue
        items = copied.get(ask.list_name)
        if items is None:
            items = copied[ask.list_name] = list(spec[ask.list_name])
        container = dict(items[ask.index])
        resources = dict(container.get("resources") or {})
        value = entry.limit if entry.request is _MISSING else entry.request
        for part in ("requests", "limits"):
            section = resources.get(part)
            section = section if isinstance(section, dict) else {}
            new: dict[str, Any] = {}
            for key, raw in section.items():
                new[ask.chosen if key == entry.name else key] = raw
            if entry.name not in section:
                new[ask.chosen] = value
            resources[part] = new
        container["resources"] = resources
        items[ask.index] = container
        if rename:
            changes.append(f"{ask.label}: {entry.name} -> {ask.chosen}")
        if fill_request or fill_limit:
            changes.append(
                f"{ask.label}: {'requests' if fill_request else 'limits'} {ask.chosen} = {value}"
            )
    spec.update(copied)


def _mutated_copy(
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


def _skip(
    kind: str, namespace: str | None, name: str | None, reason: str, enforcement: str
) -> Decision:
    return Decision(
        kind=kind,
        namespace=namespace,
        name=name,
        allowed=True,
        results=(RuleResult("gpu-policy", "skip", reason),),
        enforcement=enforcement,
    )


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def review(
    obj: Mapping[str, Any],
    *,
    policy: Policy,
    inventory: Inventory,
    operation: str = "CREATE",
    namespace: str | None = None,
) -> Decision:
    """Judge one object against the policy and the inventory, and mutate a copy of it.

    ``operation`` is the admission operation (CREATE, UPDATE, ...). Pods are mutated on CREATE
    only (their resources are immutable afterwards); pod templates are validated on CREATE and
    UPDATE as the pods they will create, after the mutation those pods will get.
    """
    raw_kind = obj.get("kind")
    kind = raw_kind if isinstance(raw_kind, str) else ""
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    name = _str_or_none(metadata.get("name")) or _str_or_none(metadata.get("generateName"))
    namespace = namespace or _str_or_none(metadata.get("namespace"))
    mode = policy.enforcement
    workload = locate(obj)
    if workload is None:
        return _skip(kind, namespace, name, f"{kind or 'this object'} has no pod spec", mode)
    gpu_containers = _gpu_containers(workload.spec)
    if not gpu_containers:
        return _skip(kind, namespace, name, "asks for no GPU", mode)
    if namespace in policy.exempt_namespaces:
        return _skip(kind, namespace, name, f"namespace {namespace} is exempt", mode)
    if kind == "Pod" and operation != "CREATE":
        return _skip(
            kind,
            namespace,
            name,
            f"pod {operation}: GPU resources cannot change after creation",
            mode,
        )
    if operation not in ("CREATE", "UPDATE"):
        return _skip(kind, namespace, name, f"{operation} is not reviewed", mode)

    results = _Results()
    asks = [
        ask
        for list_name, i, c, entries in gpu_containers
        if (ask := _check_container(list_name, i, c, entries, results=results, inventory=inventory))
        is not None
    ]
    intent = _intent(workload, policy, results)
    placement_rules = ("gpu-node-selection", "gpu-shared-request-above-one", "gpu-resource-offered")
    changes: list[str] = []
    mutated: dict[str, Any] | None = None
    if results.has_failure() or not asks:
        finished = results.finish(placement_rules, "fix the errors above first")
    else:
        for ask in asks:
            _place(ask, intent, inventory, results)
        pools = None if results.has_failure() else _choose_names(asks, policy, results)
        if pools is not None and mode != "audit":
            spec = dict(workload.spec)
            _apply_resources(spec, asks, changes)
            if policy.inject_node_selection:
                _apply_selection(spec, _selection(asks, inventory, results), changes)
            if policy.tolerations:
                _apply_tolerations(spec, policy, changes)
            if changes:
                annotation = "; ".join(changes) if kind == "Pod" else None
                mutated = _mutated_copy(obj, workload, spec, annotation)
        finished = results.finish()

    clean = finished is _ALL_PASS
    if mode != "enforce" and not clean:
        finished = tuple(
            RuleResult(r.rule, "warn", r.message, r.container) if r.status == "fail" else r
            for r in finished
        )
    warnings: list[str] = []
    if mode != "audit" and not clean:
        warnings = [f"[{r.rule}] {r.message}" for r in finished if r.status == "warn"]
    patch: tuple[dict[str, Any], ...] = ()
    if kind != "Pod" and changes and mode != "audit":
        warnings.append(f"pods created from this {kind} will be changed: " + "; ".join(changes))
        mutated = None
    elif mutated is not None:
        patch = tuple(diff(obj, mutated, within=_MUTABLE))
    allowed = clean or not any(r.status == "fail" for r in finished)
    return Decision(
        kind=kind,
        namespace=namespace,
        name=name,
        allowed=allowed,
        results=finished,
        warnings=tuple(warnings),
        changes=tuple(changes),
        mutated=mutated,
        patch=patch,
        enforcement=mode,
    )
