"""``review()``: the checks, the placement and the mutation of one object, put together.

Each step returns its answer or the rule results that say why there is none; ``review`` strings
them together and turns the findings into a :class:`~webhook.policy.decision.Decision` under
the policy's enforcement mode.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from webhook.policy.claims import ClaimAsk, claim_spec, read_claim
from webhook.policy.decision import CLAIM_RULES, RULES, Decision, RuleResult
from webhook.policy.engine.checks import Ask, Found, check_container, gpu_containers
from webhook.policy.engine.claims import claim_findings, gpu_requests
from webhook.policy.engine.dual import dual_guard
from webhook.policy.engine.fit import (
    AVAILABILITY_RULES,
    claim_fit,
    decided,
    pod_claims,
    pod_fit,
    served_by_dra,
)
from webhook.policy.engine.intent import Intent, read_intent
from webhook.policy.engine.isolation import ISOLATION_RULES, Isolation, judge, reach, with_void
from webhook.policy.engine.mutation import MUTABLE, mutated_copy, mutated_spec
from webhook.policy.engine.placement import (
    Choice,
    awaiting_nodes,
    choose_names,
    per_container,
    selection,
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
# A claim has no containers: only the claim rules are in force, but for the one about the
# claims a pod names.
_OF_PODS_ONLY = frozenset(r for r in RULES if r not in CLAIM_RULES) | {
    "gpu-claim-exists",
    "gpu-claim-dual-published",
}
_GPU_POD = "the GPU node it asks for"


def _claim_parts(
    claims: Sequence[ClaimAsk],
    missing: Sequence[RuleResult],
    namespace: str | None,
    policy: Policy,
    inventory: Inventory,
) -> tuple[list[RuleResult], list[RuleResult]]:
    """The claim rules' findings on a pod's claims, and apart from them the "cannot be
    allocated" ones, which the allocator decides on the whole pod (engine/fit.py)."""
    claimed: list[RuleResult] = list(missing)
    availability: list[RuleResult] = []
    if claims:
        assert inventory.dra is not None  # _pod_claims finds none without it
        for finding in claim_findings(
            claims, dra=inventory.dra, policy=policy.dra, namespace=namespace
        ):
            (availability if finding.rule in AVAILABILITY_RULES else claimed).append(finding)
    return claimed, availability


def _fails(findings: Sequence[RuleResult]) -> bool:
    return any(f.status == "fail" for f in findings)


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
    claims, missing = (
        pod_claims(workload, namespace, policy, inventory) if workload is not None else ((), ())
    )
    # Extended resources a GPU DeviceClass serves (deviceclass.resource.kubernetes.io/*, or a
    # class's extendedResourceName), asked for under a name the device plugin does not use.
    dra_only = bool(claims or missing) or (
        workload is not None and not found and served_by_dra(workload, policy, inventory)
    )
    isolating = policy.isolation.on and workload is not None
    why = skip_reason(
        kind,
        operation,
        namespace,
        has_pod_spec=workload is not None,
        asks_for_gpu=bool(found or dra_only) or isolating,
        exempt=policy.exempt_namespaces,
    )
    where = _GPU_POD
    if why is None and not found and not dra_only:
        assert workload is not None  # isolating says so
        why, where = reach(workload, namespace, policy, inventory)
    if why is not None:
        out_of_scope = (RuleResult("gpu-policy", "skip", why),)
        return Decision(kind, namespace, name, True, out_of_scope, enforcement=mode)
    assert workload is not None  # skip_reason says so otherwise
    isolation = _isolation(workload, found, where, namespace, policy=policy, inventory=inventory)
    if not found and not dra_only:
        return _isolated(
            obj, workload, isolation, kind=kind, namespace=namespace, name=name, mode=mode
        )
    omit = frozenset() if policy.isolation.on else _ISOLATION_OFF
    claimed, availability = _claim_parts(claims, missing, namespace, policy, inventory)
    if not claims:
        omit |= _NO_CLAIMS
    guard = dual_guard(workload, bool(claims), namespace, policy=policy, inventory=inventory)
    claimed += guard.findings
    what = f"{kind or 'object'} {name or ''}".strip()
    if not found:
        # Only claims or DRA-served names: no nvidia.com resource of the device plugin's.
        if not _fails(claimed):
            verdict = pod_fit(workload.spec, what, namespace, inventory)
            availability = decided(verdict, availability, what, has_claims=bool(claims))
        findings = [*claimed, *availability, *isolation.findings]
        results = rule_results(findings, _CLAIMS_ONLY, omit)
        return guard.applied(
            _decision(
                obj,
                results,
                kind=kind,
                namespace=namespace,
                name=name,
                mode=mode,
                clean=not findings,
            ),
            obj,
            workload,
        )
    reviewed = _review_gpu_pod(
        obj,
        workload,
        found,
        (claimed, availability, bool(claims)),
        isolation=isolation,
        omit=omit,
        kind=kind,
        namespace=namespace,
        name=name,
        what=what,
        policy=policy,
        inventory=inventory,
    )
    return guard.applied(reviewed, obj, workload)


def _review_gpu_pod(
    obj: Mapping[str, Any],
    workload: Workload,
    found: Sequence[Found],
    claim_parts: tuple[list[RuleResult], list[RuleResult], bool],
    *,
    isolation: Isolation,
    omit: frozenset[str],
    kind: str,
    namespace: str | None,
    name: str | None,
    what: str,
    policy: Policy,
    inventory: Inventory,
) -> Decision:
    """A pod (or template) with device-plugin GPU requests: the container rules, the
    placement, the allocator's verdict on the pod as it will be created, the mutation.
    ``claim_parts``: its claims' findings, their availability findings, whether it has any."""
    claimed, availability, has_claims = claim_parts
    mode = policy.enforcement
    asks, intent, findings = _checked(found, workload, policy, inventory)
    findings += claimed
    if intent is None or not asks:
        findings += availability
        # Every finding so far is a failure: nothing to place.
        findings += isolation.findings
        results = rule_results(findings, _FIX_FIRST, omit)
        return _decision(
            obj, results, kind=kind, namespace=namespace, name=name, mode=mode, clean=False
        )
    # No finding so far: _checked gives an intent only then.
    choices, wanted, findings, short = _placed(asks, intent, policy, inventory)
    findings += claimed
    findings += isolation.findings
    changes: list[str] = []
    mutated = None
    spec = dict(workload.spec)
    if _fails(findings):
        findings += [*short, *availability]
    else:
        # The pod as it will be created (renamed, its node selection and tolerations added)
        # is what the scheduler will judge.
        if choices and mode != "audit":
            spec, changes = mutated_spec(workload.spec, choices, wanted, policy)
        verdict = pod_fit(spec, what, namespace, inventory)
        findings += decided(verdict, [*short, *availability], what, has_claims=has_claims)
    # A pod that fails a rule gets no patch at all (the API server refuses it anyway): an
    # isolation failure comes after placement has chosen, so it must also drop the choices.
    failed = _fails(findings)
    if failed:
        changes = []
    if mode != "audit" and not failed and (choices or isolation.to_void):
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
    findings: list[RuleResult] = []
    availability: list[RuleResult] = []
    for finding in claim_findings(
        [claim], dra=inventory.dra, policy=policy.dra, namespace=namespace
    ):
        (availability if finding.rule in AVAILABILITY_RULES else findings).append(finding)
    what = f"{kind} {name or ''}".strip()
    verdict = None if _fails(findings) else claim_fit(spec, what, inventory)
    findings += decided(verdict, availability, what, has_claims=True)
    results = rule_results(findings, omit=_OF_PODS_ONLY)
    return _decision(
        obj, results, kind=kind, namespace=namespace, name=name, mode=mode, clean=not findings
    )


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
) -> tuple[list[Choice], Mapping[str, set[str]], list[RuleResult], list[RuleResult]]:
    """The chosen names (none when a placement rule fails), the node labels to select,
    findings, and the containers no node has enough for (in the inventory's terms: the
    allocator decides whether that refuses the pod)."""
    each = per_container(asks, intent, inventory)
    findings, short = each.findings, each.short
    if each.failed:
        return [], {}, findings, short
    choices = choose_names(asks, each.found, policy, each.dra)
    if isinstance(choices, RuleResult):
        return [], {}, [*findings, choices], short
    # A pod only pools at zero can serve is what makes the autoscaler add their node: it is
    # allowed and mutated as it would be with the node there, and told that it waits.
    findings += [w for w in map(awaiting_nodes, choices) if w is not None]
    mode = policy.inject_node_selection
    if mode == "never" or policy.enforcement == "audit":
        return choices, {}, findings, short
    # Under "intent" the pod keeps what it said it wants, and a renamed resource keeps the
    # kind of device the pod named, even when today's nodes make the selection redundant.
    renamed = any(c.name != c.ask.form.name for c in choices)
    keep = mode == "always" or (mode == "intent" and (intent.stated or renamed))
    wanted = selection(choices, inventory, keep=keep)
    if isinstance(wanted, RuleResult):
        return choices, {}, [*findings, wanted], short
    return choices, wanted, findings, short


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
