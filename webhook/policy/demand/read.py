"""Reading a pod spec, a pod template or a claim into a :class:`Demand`.

``spec.resourceClaims`` name ResourceClaims (``resourceClaimName``) and templates
(``resourceClaimTemplateName``), each turned into one claim (the ResourceClaim the
resourceclaim controller makes from a template has the template's spec); a claim named by
several entries is allocated once, as the scheduler sees one claim. Claims and templates
come as their specs, keyed ``(kind, namespace, name)`` as
``webhook.policy.dra.DraSnapshot.claim_specs``.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from webhook.policy.demand.model import (
    ALL,
    EXACT_COUNT,
    Claim,
    Constraint,
    Demand,
    DeviceRequest,
    DeviceToleration,
    Request,
)
from webhook.policy.demand.requests import pod_requests, read_containers, resource_list
from webhook.policy.nodes import required_terms
from webhook.policy.records import MAPPING

ClaimSpecs = Mapping[tuple[str, str, str], Mapping[str, Any]]


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _tolerations(raw: object) -> tuple[DeviceToleration, ...]:
    return tuple(
        DeviceToleration(
            _str(t.get("key")),
            _str(t.get("operator")) or "Equal",
            _str(t.get("value")),
            _str(t.get("effect")),
        )
        for t in _list(raw)
        if isinstance(t, MAPPING)
    )


def _request(name: str, raw: Mapping[str, Any]) -> Request:
    """An ``ExactDeviceRequest`` or ``DeviceSubRequest`` (API defaults: ``ExactCount``, 1)."""
    mode = _str(raw.get("allocationMode")) or EXACT_COUNT
    count = raw.get("count")
    admin = raw.get("adminAccess")
    capacity = raw.get("capacity")
    requests = capacity.get("requests") if isinstance(capacity, MAPPING) else None
    return Request(
        name=name,
        device_class=_str(raw.get("deviceClassName")),
        allocation_mode=mode,
        count=count if isinstance(count, int) and mode != ALL else (0 if mode == ALL else 1),
        admin_access=admin if isinstance(admin, bool) else None,
        selectors=tuple(
            _str((s.get("cel") or {}).get("expression"))
            for s in _list(raw.get("selectors"))
            if isinstance(s, MAPPING)
        ),
        tolerations=_tolerations(raw.get("tolerations")),
        capacity=_capacity(requests) if isinstance(requests, MAPPING) else None,
    )


def _capacity(requests: Mapping[str, Any]) -> dict[str, Fraction]:
    # The structured allocator's capacity arithmetic (webhook.policy.allocator.capacity) is
    # written for Fraction values; claims that request capacity are rare, so they are not
    # worth carrying the demand's int-or-Fraction form through it.
    return {name: Fraction(value) for name, value in resource_list(requests).items()}


def read_claim_spec(spec: Mapping[str, Any], label: str) -> Claim:
    """A ResourceClaimSpec (``spec`` of a claim, ``spec.spec`` of a template) as a Claim."""
    devices = spec.get("devices")
    devices = devices if isinstance(devices, MAPPING) else {}
    requests = []
    problems = []
    for raw in _list(devices.get("requests")):
        if not isinstance(raw, MAPPING):
            continue
        name = _str(raw.get("name"))
        exactly = raw.get("exactly")
        subs = tuple(
            _request(_str(s.get("name")), s)
            for s in _list(raw.get("firstAvailable"))
            if isinstance(s, MAPPING)
        )
        if isinstance(exactly, MAPPING):
            requests.append(DeviceRequest(name, exactly=_request(name, exactly)))
        elif subs:
            requests.append(DeviceRequest(name, first_available=subs))
        else:
            problems.append(f"{label}: request {name!r} has neither exactly nor firstAvailable")
    constraints = tuple(
        Constraint(
            tuple(map(str, _list(c.get("requests")))),
            _str(c.get("matchAttribute")) or None,
            _str(c.get("distinctAttribute")) or None,
        )
        for c in _list(devices.get("constraints"))
        if isinstance(c, MAPPING)
    )
    return Claim(label, tuple(requests), constraints, tuple(problems))


def pod_demand(
    spec: Mapping[str, Any], label: str, claim_specs: ClaimSpecs, namespace: str
) -> Demand:
    """What the pod spec ``spec`` (of a pod, or a workload's ``spec.template.spec``) asks of
    a node; its claims and templates are looked up in ``claim_specs`` in ``namespace``."""
    claims: list[Claim] = []
    missing: list[str] = []
    seen: set[tuple[str, str]] = set()
    for entry in _list(spec.get("resourceClaims")):
        if not isinstance(entry, MAPPING):
            continue
        claim_name = _str(entry.get("resourceClaimName"))
        template = _str(entry.get("resourceClaimTemplateName"))
        kind, name = (
            ("ResourceClaim", claim_name) if claim_name else ("ResourceClaimTemplate", template)
        )
        if not name:
            continue
        # A claim named twice is one claim; each template entry makes a claim of its own.
        if kind == "ResourceClaim" and (kind, name) in seen:
            continue
        seen.add((kind, name))
        found = claim_specs.get((kind, namespace, name))
        if found is None:
            missing.append(f"{kind} {name}")
            continue
        # As the pod says it and the cluster has it: claim "gpu" (ResourceClaimTemplate t).
        label = f'claim "{_str(entry.get("name"))}" ({kind} {name})'
        claims.append(read_claim_spec(found, label))
    selector = spec.get("nodeSelector")
    # A list made, then frozen: a generator would resume once per toleration, and every pod
    # has a few (the API server adds two).
    tolerations = tuple([t for t in _list(spec.get("tolerations")) if isinstance(t, MAPPING)])
    terms = required_terms(spec.get("affinity"))
    containers = read_containers(spec)
    return Demand(
        label=label,
        resources=pod_requests(spec, containers),
        containers=containers,
        claims=tuple(claims),
        node_name=_str(spec.get("nodeName")) or None,
        node_selector=(
            {str(k): str(v) for k, v in selector.items()}
            if selector is not None and isinstance(selector, MAPPING)
            else {}
        ),
        required_terms=None if terms is None else tuple(terms),
        tolerations=tolerations,
        missing=tuple(missing),
    )


# The toleration of every taint (core/v1 Toleration: empty key, operator Exists).
_EVERY_TAINT: tuple[Mapping[str, Any], ...] = ({"operator": "Exists"},)


def claim_demand(spec: Mapping[str, Any], label: str) -> Demand:
    """A lone ResourceClaim or template (its ResourceClaimSpec): can any node allocate it?

    Node taints are the pod's business, not the claim's: the pods that will use the claim
    may tolerate any of them, so the lone claim is judged as if tolerating every taint (an
    empty key with ``Exists`` matches them all, as in the scheduler's TaintToleration).
    """
    return Demand(label=label, claims=(read_claim_spec(spec, label),), tolerations=_EVERY_TAINT)
