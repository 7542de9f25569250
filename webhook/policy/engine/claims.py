"""The claim rules that are not about fit: what a DRA claim's GPU requests may ask for.

A claim's GPU requests (those whose DeviceClass the policy counts as a GPU class) are checked
against the policy and the DeviceClasses:

* ``gpu-claim-admin-access``: ``adminAccess`` outside the namespaces the policy allows;
* ``gpu-claim-device-class``: a DeviceClass that does not exist;
* ``gpu-claim-shared-request-above-one``: a request whose config shares the device (TimeSlicing,
  MPS) for more than one device, or more than one ``shares``.

Whether the devices can be allocated (``gpu-claim-devices-available``,
``gpu-claim-mig-profile``) is the allocator's to say, on the supply, with its words
(engine/fit.py, engine/refusal.py): no second reading of the ResourceSlices here.

Facts and sources: docs/dra-claims.md.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from webhook.policy.claims import SHARES_CAPACITY, ClaimAsk, DeviceAsk, RequestAsk, sharing_strategy
from webhook.policy.decision import RuleResult
from webhook.policy.dra import DraSnapshot
from webhook.policy.model import DraPolicy
from webhook.policy.quantity import QuantityError, quantity_value


def _where(ask: DeviceAsk, request: RequestAsk, claim: ClaimAsk) -> str:
    name = ask.name if request.first_available else request.name
    return f'{claim.label}: request "{name}"'


def gpu_requests(claim: ClaimAsk, policy: DraPolicy) -> tuple[RequestAsk, ...]:
    """The requests of ``claim`` with at least one alternative of a GPU DeviceClass."""
    return tuple(
        r
        for r in claim.requests
        if any(policy.is_gpu_class(a.device_class) for a in r.alternatives)
    )


def _class_sharing(dra: DraSnapshot, name: str) -> str | None:
    device_class = dra.classes.get(name)
    if device_class is None:
        return None
    found = None
    for config in device_class.config:
        found = sharing_strategy(config) or found
    return found


def _admin_access(
    claim: ClaimAsk, requests: Sequence[RequestAsk], policy: DraPolicy, namespace: str | None
) -> list[RuleResult]:
    out = []
    for request in requests:
        for ask in request.alternatives:
            if not ask.admin_access or namespace in policy.admin_access_namespaces:
                continue
            allowed = ", ".join(sorted(policy.admin_access_namespaces))
            where = f"only in namespaces {allowed}" if allowed else "in no namespace"
            out.append(
                RuleResult(
                    "gpu-claim-admin-access",
                    "fail",
                    f"{_where(ask, request, claim)} sets adminAccess: true, which reaches "
                    "devices other claims hold and ignores their allocations; the policy "
                    f"allows it {where} (spec.dra.adminAccessNamespaces). Remove adminAccess "
                    "to get devices of your own.",
                )
            )
    return out


def _device_classes(
    claim: ClaimAsk, requests: Sequence[RequestAsk], dra: DraSnapshot, policy: DraPolicy
) -> list[RuleResult]:
    out = []
    known = sorted(dra.classes)
    gpu = [c for c in known if policy.is_gpu_class(c)]
    for request in requests:
        for ask in request.alternatives:
            if ask.device_class in dra.classes or not policy.is_gpu_class(ask.device_class):
                continue
            close = difflib.get_close_matches(ask.device_class, known, n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            offered = ", ".join(gpu) if gpu else "none"
            out.append(
                RuleResult(
                    "gpu-claim-device-class",
                    "fail",
                    f"{_where(ask, request, claim)} asks for DeviceClass {ask.device_class}, "
                    f"which does not exist: no device can be allocated and the pod would stay "
                    f"Pending. {hint}GPU DeviceClasses in the cluster: {offered}.",
                )
            )
    return out


def _shared_above_one(
    claim: ClaimAsk, requests: Sequence[RequestAsk], dra: DraSnapshot, policy: DraPolicy
) -> list[RuleResult]:
    if not policy.fail_requests_greater_than_one:
        return []
    out = []
    for request in requests:
        for ask in request.alternatives:
            if not policy.is_gpu_class(ask.device_class):
                continue
            sharing = request.sharing or _class_sharing(dra, ask.device_class)
            where = _where(ask, request, claim)
            if sharing is not None and (ask.all_devices or ask.count > 1):
                amount = "all matching devices" if ask.all_devices else f"{ask.count} devices"
                out.append(
                    RuleResult(
                        "gpu-claim-shared-request-above-one",
                        "fail",
                        f"{where} shares its devices ({sharing}) and asks for {amount}: a "
                        "shared request gets one device, as the device plugin's "
                        "failRequestsGreaterThanOne says for shared GPUs. Ask for count: 1, or "
                        "drop the sharing config to get whole devices.",
                    )
                )
            shares = ask.capacity.get(SHARES_CAPACITY)
            if shares is not None and _above_one(shares):
                out.append(
                    RuleResult(
                        "gpu-claim-shared-request-above-one",
                        "fail",
                        f"{where} asks for {shares} shares of one device "
                        f"(capacity.requests.{SHARES_CAPACITY}): a shared device is asked for "
                        f"one share at a time, like failRequestsGreaterThanOne. Ask for "
                        f"{SHARES_CAPACITY}: 1, or for a whole device without it.",
                    )
                )
    return out


def _above_one(raw: str) -> bool:
    try:
        return quantity_value(raw) > 1
    except QuantityError:
        return False


def claim_findings(
    claims: Sequence[ClaimAsk],
    *,
    dra: DraSnapshot,
    policy: DraPolicy,
    namespace: str | None,
) -> list[RuleResult]:
    """The claim rules' findings for ``claims``: one claim, or every claim of one pod."""
    findings: list[RuleResult] = []
    for claim in claims:
        requests = gpu_requests(claim, policy)
        findings += _admin_access(claim, requests, policy, namespace)
        findings += _device_classes(claim, requests, dra, policy)
        findings += _shared_above_one(claim, requests, dra, policy)
    return findings
