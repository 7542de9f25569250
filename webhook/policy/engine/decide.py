"""``review()``: the checks, the placement and the mutation of one object, put together.

Each step returns its answer or the rule results that say why there is none; ``review`` strings
them together and turns the findings into a :class:`~webhook.policy.decision.Decision` under
the policy's enforcement mode.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from webhook.policy.claims import ClaimAsk, claim_spec, pod_claim_refs, read_claim
from webhook.policy.decision import CLAIM_RULES, RULES, Decision, RuleResult
from webhook.policy.engine.checks import Ask, Found, check_container, gpu_containers
from webhook.policy.engine.claims import claim_findings, gpu_requests
from webhook.policy.engine.intent import Intent, read_intent
from webhook.policy.engine.isolation import ISOLATION_RULES, Isolation, judge, reach, with_void
from webhook.policy.engine.mutation import MUTABLE, mutated_copy, mutated_spec
from webhook.policy.engine.placement import (
    Choice,
    Pair,
    awaiting_nodes,
    candidates,
    choose_names,
    selection,
    several_shared,
)
from webhook.policy.engine.results import as_warnings, rule_results, skipping
from webhook.policy.engine.scope import operation_skip, skip_reason
from webhook.policy.inventory import Inventory
from webhook.policy.model import Policy
from webhook.policy.patch import diff
from webhook.policy.quota.charge import charge
from webhook.policy.workloads import Workload, locate

# Judged only once the containers and the annotations pass.
_PLACEMENT_RULES = (
    "gpu-node-selection",
    "gpu-shared-request-above-one",
    "gpu-resource-offered",
    "gpu-pool-at-zero",
)
# While GPU isolation is off its rules are not in force: no result at all, not even a skip.
_ISOLATION_OFF = frozenset(ISOLATION_RULES)
_FIX_FIRST = skipping(_PLACEMENT_RULES, "fix the errors above first")
# A pod that asks for no GPU is judged by the isolation rules alone.
_NO_GPU = skipping(
    (r for r in RULES if r not in ISOLATION_RULES and r not in CLAIM_RULES), "asks for no GPU"
)
# The claim rules are about claims: a pod without GPU claims has no result for them.
_NO_CLAIMS = frozenset(CLAIM_RULES)
# A pod whose GPUs all come from its claims: its containers ask for no nvidia.com resource.
_CLAIMS_ONLY = skipping(
    (r for r in RULES if r not in ISOLATION_RULES and r not in CLAIM_RULES),
    "asks for no nvidia.com resource: its GPU claims are judged",
)
# A claim has no containers: only the claim rules are in force.
_NOT_CLAIM_RULES = frozenset(r for r in RULES if r not in CLAIM_RULES)
_GPU_POD = "the GPU node it asks for"


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
    UPDATE as the pods they will create, after the mutation those pods will get. Under
    ``spec.quota.enabled`` an admitted GPU pod also requests its cost (docs/quota.md).
    """
    decision = _review(
        obj, policy=policy, inventory=inventory, operation=operation, namespace=namespace
    )
    return charge(decision, obj, policy=policy, inventory=inventory, operation=operation)


def _review(
    obj: Mapping[str, Any],
    *,
    policy: Policy,
    inventory: Inventory,
    operation: str,
    namespace: str | None,
) -> Decision:
    raw_kind = obj.get("kind")
    kind = raw_kind if isinstance(raw_kind, str) else ""
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    name = _str_or_none(metadata.get("name")) or _str_or_none(metadata.get("generateName"))
    namespace = namespace or _str_or_none(metadata.get("namespace"))
    mode = policy.enforcement
    spec = claim_spec(obj)
    if spec is not None:
        return _review_claim(
            obj,
            spec,
            kind=kind,
            name=name,
            namespace=namespace,
            operation=operation,
            policy=policy,
            inventory=inventory,
        )
    workload = locate(obj)
    found = gpu_containers(workload.spec) if workload is not None else []
    claims = _pod_claims(workload, namespace, policy, inventory) if workload is not None else ()
    isolating = policy.isolation.on and workload is not None
    why = skip_reason(
        kind,
        operation,
        namespace,
        has_pod_spec=workload is not None,
        asks_for_gpu=bool(found or claims) or isolating,
        exempt=policy.exempt_namespaces,
    )
    where = _GPU_POD
    if why is None and not found and not claims:
        assert workload is not None  # isolating says so
        why, where = reach(workload, namespace, policy, inventory)
    if why is not None:
        out_of_scope = (RuleResult("gpu-policy", "skip", why),)
        return Decision(kind, namespace, name, True, out_of_scope, enforcement=mode)
    assert workload is not None  # skip_reason says so otherwise
    isolation = _isolation(workload, found, where, namespace, policy=policy, inventory=inventory)
    if not found and not claims:
        return _isolated(
            obj, workload, isolation, kind=kind, namespace=namespace, name=name, mode=mode
        )
    omit = frozenset() if policy.isolation.on else _ISOLATION_OFF
    claimed: list[RuleResult] = []
    if claims:
        assert inventory.dra is not None  # _pod_claims finds none without it
        claimed = claim_findings(claims, dra=inventory.dra, policy=policy.dra, namespace=namespace)
    else:
        omit |= _NO_CLAIMS
    if not found:
        # Only claims: the pod's own resources ask for no GPU.
        findings = [*claimed, *isolation.findings]
        results = rule_results(findings, _CLAIMS_ONLY, omit)
        return _decision(
            obj, results, kind=kind, namespace=namespace, name=name, mode=mode, clean=not findings
        )
    asks, intent, findings = _checked(found, workload, policy, inventory)
    findings += claimed
    if intent is None or not asks:
        # Every finding so far is a failure: nothing to place.
        findings += isolation.findings
        results = rule_results(findings, _FIX_FIRST, omit)
        return _decision(
            obj, results, kind=kind, namespace=namespace, name=name, mode=mode, clean=False
        )
    # No finding so far: _checked gives an intent only then.
    choices, wanted, findings = _placed(asks, intent, policy, inventory)
    findings += claimed
    findings += isolation.findings
    changes: list[str] = []
    mutated = None
    # A pod that fails a rule gets no patch at all (the API server refuses it anyway): an
    # isolation failure comes after placement has chosen, so it must also drop the choices.
    failed = any(f.status == "fail" for f in findings)
    if mode != "audit" and not failed and (choices or isolation.to_void):
        spec = dict(workload.spec)
        if choices:
            spec, changes = mutated_spec(workload.spec, choices, wanted, policy)
        changes += with_void(spec, isolation.to_void)
        if changes and kind == "Pod":
            mutated = mutated_copy(obj, workload, spec, "; ".join(changes))
    results = rule_results(findings, omit=omit)
    return _decision(
        obj,
        results,
        kind=kind,
        namespace=namespace,
        name=name,
        mode=mode,
        clean=not findings,
        changes=changes,
        mutated=mutated,
    )


def _isolation(
    workload: Workload,
    found: Sequence[Found],
    where: str,
    namespace: str | None,
    *,
    policy: Policy,
    inventory: Inventory,
) -> Isolation:
    """The isolation findings and writes of a pod under review (none when isolation is off or
    the namespace is exempt from it)."""
    if not policy.isolation.on or namespace in policy.isolation.exempt_namespaces:
        return Isolation([], [])
    if workload.spec.get("resourceClaims"):
        # Its containers may get GPUs from DRA claims (resources.claims), which no
        # nvidia.com resource shows: voiding their NVIDIA_VISIBLE_DEVICES could take them away.
        return Isolation([], [])
    return judge(workload, found, where=where, policy=policy, inventory=inventory)


def _isolated(
    obj: Mapping[str, Any],
    workload: Workload,
    isolation: Isolation,
    *,
    kind: str,
    namespace: str | None,
    name: str | None,
    mode: str,
) -> Decision:
    """The Decision on a pod that asks for no GPU and can be placed on a GPU node."""
    changes: list[str] = []
    mutated = None
    failed = any(f.status == "fail" for f in isolation.findings)
    if isolation.to_void and mode != "audit" and not failed:
        spec = dict(workload.spec)
        changes = with_void(spec, isolation.to_void)
        if kind == "Pod":
            mutated = mutated_copy(obj, workload, spec, "; ".join(changes))
    results = rule_results(isolation.findings, _NO_GPU, _NO_CLAIMS)
    return _decision(
        obj,
        results,
        kind=kind,
        namespace=namespace,
        name=name,
        mode=mode,
        clean=not isolation.findings,
        changes=changes,
        mutated=mutated,
    )


def _review_claim(
    obj: Mapping[str, Any],
    spec: Mapping[str, Any],
    *,
    kind: str,
    name: str | None,
    namespace: str | None,
    operation: str,
    policy: Policy,
    inventory: Inventory,
) -> Decision:
    """A ResourceClaim or ResourceClaimTemplate: the claim rules, nothing to mutate."""
    mode = policy.enforcement
    claim = read_claim(spec, f"{kind} {name or ''}".strip())
    suffixes = ", ".join(policy.dra.device_class_suffixes)
    why = operation_skip(kind, operation)
    if why is None and not gpu_requests(claim, policy.dra):
        why = f"asks for no GPU DeviceClass (spec.dra.deviceClassSuffixes: {suffixes})"
    elif why is None and namespace in policy.exempt_namespaces:
        why = f"namespace {namespace} is exempt"
    elif why is None and inventory.dra is None:
        why = f"the inventory ({inventory.source}) has no DRA objects: claims are not judged"
    if why is not None:
        skipped = (RuleResult("gpu-policy", "skip", why),)
        return Decision(kind, namespace, name, True, skipped, enforcement=mode)
    assert inventory.dra is not None
    findings = claim_findings([claim], dra=inventory.dra, policy=policy.dra, namespace=namespace)
    results = rule_results(findings, omit=_NOT_CLAIM_RULES)
    return _decision(
        obj, results, kind=kind, namespace=namespace, name=name, mode=mode, clean=not findings
    )


def _pod_claims(
    workload: Workload, namespace: str | None, policy: Policy, inventory: Inventory
) -> tuple[ClaimAsk, ...]:
    """The GPU claims of a pod spec that the inventory knows (by claim or template name).

    A claim or template the snapshot does not hold yet (applied in the same ``kubectl apply``)
    is not judged here: it was judged itself when it was created.
    """
    dra = inventory.dra
    if dra is None or not workload.spec.get("resourceClaims"):
        return ()
    out = []
    for ref in pod_claim_refs(workload.spec):
        if ref.claim is not None:
            key = ("ResourceClaim", namespace or "", ref.claim)
            label = f'claim "{ref.name}" (ResourceClaim {ref.claim})'
        else:
            key = ("ResourceClaimTemplate", namespace or "", ref.template or "")
            label = f'claim "{ref.name}" (ResourceClaimTemplate {ref.template})'
        spec = dra.claim_specs.get(key)
        if spec is None:
            continue
        claim = read_claim(spec, label)
        if gpu_requests(claim, policy.dra):
            out.append(claim)
    return tuple(out)


def _checked(
    found: Sequence[Found], workload: Workload, policy: Policy, inventory: Inventory
) -> tuple[list[Ask], Intent | None, list[RuleResult]]:
    """The containers' asks, the pod's intent (None once anything failed), and the failures."""
    asks: list[Ask] = []
    findings: list[RuleResult] = []
    for list_name, i, container, entries in found:
        checked = check_container(list_name, i, container, entries, inventory)
        if isinstance(checked, Ask):
            asks.append(checked)
        else:
            findings += checked
    intent = read_intent(workload, policy)
    if not isinstance(intent, Intent):
        findings += intent
        return asks, None, findings
    return asks, (None if findings else intent), findings


def _placed(
    asks: Sequence[Ask], intent: Intent, policy: Policy, inventory: Inventory
) -> tuple[list[Choice], Mapping[str, set[str]], list[RuleResult]]:
    """The chosen names (none when a placement rule fails), the node labels to select, findings."""
    found: list[list[Pair]] = []
    findings: list[RuleResult] = []
    failed = False
    for ask in asks:
        cands = candidates(ask, intent, inventory)
        if isinstance(cands, RuleResult):
            findings.append(cands)
            failed = True
            continue
        found.append(cands)
        warning = several_shared(ask, cands)
        if warning is not None:
            findings.append(warning)
    if failed:
        return [], {}, findings
    choices = choose_names(asks, found, policy)
    if isinstance(choices, RuleResult):
        return [], {}, [*findings, choices]
    # A pod only pools at zero can serve is what makes the autoscaler add their node: it is
    # allowed and mutated as it would be with the node there, and told that it waits.
    findings += [w for w in map(awaiting_nodes, choices) if w is not None]
    mode = policy.inject_node_selection
    if mode == "never" or policy.enforcement == "audit":
        return choices, {}, findings
    # Under "intent" the pod keeps what it said it wants, and a renamed resource keeps the
    # kind of device the pod named, even when today's nodes make the selection redundant.
    renamed = any(c.name != c.ask.form.name for c in choices)
    keep = mode == "always" or (mode == "intent" and (intent.stated or renamed))
    wanted = selection(choices, inventory, keep=keep)
    if isinstance(wanted, RuleResult):
        return choices, {}, [*findings, wanted]
    return choices, wanted, findings


def _decision(
    obj: Mapping[str, Any],
    results: tuple[RuleResult, ...],
    *,
    kind: str,
    namespace: str | None,
    name: str | None,
    mode: str,
    clean: bool,
    changes: Sequence[str] = (),
    mutated: dict[str, Any] | None = None,
) -> Decision:
    """The Decision under enforcement ``mode``; ``clean``: every rule passed."""
    if mode != "enforce" and not clean:
        results = as_warnings(results)
    warnings: list[str] = []
    if mode != "audit" and not clean:
        warnings = [f"[{r.rule}] {r.message}" for r in results if r.status == "warn"]
    patch: tuple[dict[str, Any], ...] = ()
    if kind != "Pod" and changes:
        warnings.append(f"pods created from this {kind} will be changed: " + "; ".join(changes))
    elif mutated is not None:
        patch = tuple(diff(obj, mutated, within=MUTABLE))
    allowed = clean or not any(r.status == "fail" for r in results)
    return Decision(
        kind=kind,
        namespace=namespace,
        name=name,
        allowed=allowed,
        results=results,
        warnings=tuple(warnings),
        changes=tuple(changes),
        mutated=mutated,
        patch=patch,
        enforcement=mode,
    )
