"""The claim rules: what a DRA claim asks for, judged against the DeviceClasses and devices.

A claim's GPU requests (those whose DeviceClass the policy counts as a GPU class) are judged
the way the scheduler's allocator would try them, against every device the ResourceSlices
publish, allocated or not: the question is whether the cluster *has* what is asked for, as
``gpu-resource-offered`` asks of Nodes. Whether it is free now is the audit's question.

* ``gpu-claim-admin-access``: ``adminAccess`` outside the namespaces the policy allows;
* ``gpu-claim-device-class``: a DeviceClass that does not exist;
* ``gpu-claim-shared-request-above-one``: a request whose config shares the device (TimeSlicing,
  MPS) for more than one device, or more than one ``shares``;
* ``gpu-claim-mig-profile``: a selector on the MIG ``profile`` that no device passes;
* ``gpu-claim-devices-available``: no node with enough devices for all the GPU requests of the
  claims (a pod's claims, like one claim's requests, are allocated on one node).

Facts and sources: docs/dra-claims.md.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from webhook.policy.claims import SHARES_CAPACITY, ClaimAsk, DeviceAsk, RequestAsk, sharing_strategy
from webhook.policy.decision import RuleResult
from webhook.policy.dra import Device, DraSnapshot
from webhook.policy.model import DraPolicy
from webhook.policy.quantity import QuantityError, quantity_value

# A selector that reads the MIG profile attribute (device.attributes['gpu.nvidia.com'].profile,
# or ["profile"]): the request names a MIG profile (docs/dra-claims.md, "devices").
_READS_PROFILE = re.compile(r"""\.profile\b|\[\s*["']profile["']\s*\]""")
_PROFILE = "profile"
_PRODUCT = "productName"
# How many answers a snapshot remembers (see _matching).
_MEMO_LIMIT = 1024
# Devices reachable from every node, or from nodes a selector picks: counted with each node.
_ANY_NODE = "(devices of no single node)"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


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


def _describe(devices: Sequence[Device]) -> str:
    """``2 on node a100-1 (NVIDIA A100-SXM4-40GB), 1 on node b``: what some devices are."""
    by_node: dict[str, list[Device]] = defaultdict(list)
    for device in devices:
        by_node[device.node or _ANY_NODE].append(device)
    parts = []
    for node, found in sorted(by_node.items()):
        products = sorted({str(d.attribute(_PRODUCT)) for d in found if d.attribute(_PRODUCT)})
        profiles = Counter(str(d.attribute(_PROFILE)) for d in found if d.attribute(_PROFILE))
        what = ", ".join(f"{n} x {p}" for p, n in sorted(profiles.items())) or ", ".join(products)
        where = node if node == _ANY_NODE else f"node {node}"
        parts.append(f"{len(found)} on {where}" + (f" ({what})" if what else ""))
    return "; ".join(parts)


def _class_sharing(dra: DraSnapshot, name: str) -> str | None:
    device_class = dra.classes.get(name)
    if device_class is None:
        return None
    found = None
    for config in device_class.config:
        found = sharing_strategy(config) or found
    return found


def _capacity_fits(device: Device, capacity: Mapping[str, str]) -> bool:
    """Does ``device`` have each capacity asked for, at least that much, within its policy?"""
    for name, raw in capacity.items():
        try:
            wanted = quantity_value(raw)
        except QuantityError:
            return False
        have = device.capacity_of(name)
        if have is None or have.value < wanted:
            return False
        most = have.valid_range[1] if have.valid_range is not None else None
        if most is not None and wanted > most:
            return False
    return True


def _matching(ask: DeviceAsk, dra: DraSnapshot) -> tuple[tuple[Device, ...], tuple[str, ...]]:
    """The devices ``ask`` may get (class, selectors, capacity), and the CEL problems met.

    Remembered per snapshot: the pods of one template, and the claims of one manifest, ask
    the same question, and evaluating CEL on every device of a class is a review's main cost.
    """
    key = ("matching", ask.device_class, ask.selectors, tuple(sorted(ask.capacity.items())))
    found = dra.memo.get(key)
    if found is not None:
        return found  # type: ignore[no-any-return]
    of_class, problems = dra.class_devices(ask.device_class)
    chosen, more = dra.select(of_class, ask.selectors)
    if ask.capacity:
        chosen = tuple(d for d in chosen if _capacity_fits(d, ask.capacity))
    found = (chosen, (*problems, *more))
    _remember(dra, key, found)
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


Keys = frozenset[tuple[str, str, str]]
Alternatives = Sequence[tuple[DeviceAsk, Keys]]


def _groups(devices: Iterable[Device]) -> list[list[Device]]:
    """Devices by the node they can be used on; node-independent ones join every node."""
    by_node: dict[str, list[Device]] = defaultdict(list)
    shared: list[Device] = []
    for device in devices:
        if device.node is not None:
            by_node[device.node].append(device)
        else:
            shared.append(device)
    groups = [[*found, *shared] for found in by_node.values()]
    return groups or [shared]


def _fits_on(node_devices: Sequence[Device], requests: Sequence[Alternatives]) -> bool:
    """Can every request get its devices among ``node_devices``, each device used once (unless
    it allows multiple allocations)? The first alternative that fits wins, as the scheduler's
    allocator tries ``firstAvailable`` in order."""
    taken: set[tuple[str, str, str]] = set()
    for alternatives in requests:
        for ask, keys in alternatives:
            mine = [d for d in node_devices if d.key in keys]
            free = [d.key for d in mine if d.key not in taken or d.allow_multiple_allocations]
            # All: every matching device of the node, and at least one.
            need = max(1, len(mine)) if ask.all_devices else ask.count
            if len(free) >= need:
                taken.update(free[:need])
                break
        else:
            return False
    return True


def _profiles(dra: DraSnapshot) -> str:
    """The MIG profiles the ResourceSlices offer, with how many devices of each."""
    counted = Counter(
        str(d.attribute(_PROFILE)) for d in dra.devices if d.attribute(_PROFILE) is not None
    )
    if not counted:
        return "No ResourceSlice offers MIG devices"
    return "MIG profiles offered: " + ", ".join(
        f"{p} ({_plural(n, 'device')})" for p, n in sorted(counted.items())
    )


def _remember(dra: DraSnapshot, key: Any, value: Any) -> None:
    if len(dra.memo) >= _MEMO_LIMIT:
        # Claims come from users: a stream of distinct ones must not grow it for ever.
        dra.memo.clear()
    dra.memo[key] = value


def _ask_key(ask: DeviceAsk) -> tuple[Any, ...]:
    return (
        ask.name,
        ask.device_class,
        ask.selectors,
        ask.all_devices,
        ask.count,
        tuple(sorted(ask.capacity.items())),
    )


def _availability(
    claim_requests: Sequence[tuple[ClaimAsk, RequestAsk]], dra: DraSnapshot, policy: DraPolicy
) -> list[RuleResult]:
    """``gpu-claim-mig-profile`` and ``gpu-claim-devices-available`` for the GPU requests of
    one claim, or of all the claims of one pod (allocated on one node); remembered per
    snapshot, since the pods of one template ask the same."""
    key = (
        "availability",
        policy.device_class_suffixes,
        tuple(
            (c.label, r.name, r.first_available, tuple(_ask_key(a) for a in r.alternatives))
            for c, r in claim_requests
        ),
    )
    found = dra.memo.get(key)
    if found is None:
        found = tuple(_judge_availability(claim_requests, dra, policy))
        _remember(dra, key, found)
    return list(found)


def _judge_availability(
    claim_requests: Sequence[tuple[ClaimAsk, RequestAsk]], dra: DraSnapshot, policy: DraPolicy
) -> list[RuleResult]:
    """Each GPU request that no node could serve even alone: none of its alternatives matches a
    device, or none has as many matching devices on one node as it asks for. Each is a proof
    (what matches bounds what can be allocated), in the inventory's words; whether the
    requests fit together is the allocator's to say (engine/fit.py)."""
    out: list[RuleResult] = []
    for claim, request in claim_requests:
        if not all(policy.is_gpu_class(a.device_class) for a in request.alternatives):
            continue  # another driver's alternative may serve it: not ours to judge
        found = [
            (ask, *_matching(ask, dra))
            for ask in request.alternatives
            if ask.device_class in dra.classes  # else gpu-claim-device-class said so
        ]
        if not found:
            continue
        alternatives = [(ask, frozenset(d.key for d in devices)) for ask, devices, _ in found]
        mine = {d.key: d for _, devices, _ in found for d in devices}
        if not mine:
            out.append(_none_match(claim, request, found, dra))
        elif not any(_fits_on(g, [alternatives]) for g in _groups(mine.values())):
            out.append(_too_few(claim, request, found))
    return out


Found = Sequence[tuple[DeviceAsk, Sequence[Device], Sequence[str]]]


def _none_match(claim: ClaimAsk, request: RequestAsk, found: Found, dra: DraSnapshot) -> RuleResult:
    ask = found[0][0]
    reads_profile = any(
        _READS_PROFILE.search(s)
        for a, _, _ in found
        for s in (*a.selectors, *dra.classes[a.device_class].selectors)
    )
    problems = sorted({p for _, _, trouble in found for p in trouble})
    of_class, _ = dra.class_devices(ask.device_class)
    offered = _describe(of_class) if of_class else "none"
    where = f'{claim.label}: request "{request.name}"'
    asked = " or ".join(a.describe() for a, _, _ in found)
    if reads_profile and not problems:
        return RuleResult(
            "gpu-claim-mig-profile",
            "fail",
            f"{where} asks for a MIG profile no ResourceSlice offers ({asked}): the pod would "
            f"stay Pending. {_profiles(dra)}; devices of class {ask.device_class}: {offered}.",
        )
    why = f" ({'; '.join(problems[:2])})" if problems else ""
    return RuleResult(
        "gpu-claim-devices-available",
        "fail",
        f"{where} asks for {asked}, but no device matches{why}: the pod would stay Pending "
        f"(the scheduler: cannot allocate all claims). Devices of class {ask.device_class}: "
        f"{offered}.",
    )


def _too_few(claim: ClaimAsk, request: RequestAsk, found: Found) -> RuleResult:
    where = f'{claim.label}: request "{request.name}"'
    asked = " or ".join(a.describe() for a, _, _ in found)
    best = max(
        max(Counter(d.node or _ANY_NODE for d in devices).values(), default=0)
        for _, devices, _ in found
    )
    have = "; ".join(_describe(devices) for _, devices, _ in found if devices)
    return RuleResult(
        "gpu-claim-devices-available",
        "fail",
        f"{where} asks for {asked}, but no node has more than "
        f"{_plural(best, 'matching device')} ({have}): the pod would stay Pending (the "
        f"scheduler: cannot allocate all claims). Ask for at most {best}.",
    )


def usable_devices(
    claims: Sequence[ClaimAsk], dra: DraSnapshot, policy: DraPolicy
) -> tuple[Device, ...]:
    """Every device the GPU requests of ``claims`` could use, free or not (the audit names
    who holds them)."""
    usable: dict[tuple[str, str, str], Device] = {}
    for claim in claims:
        for request in gpu_requests(claim, policy):
            if not all(policy.is_gpu_class(a.device_class) for a in request.alternatives):
                continue
            for ask in request.alternatives:
                devices, _ = _matching(ask, dra) if ask.device_class in dra.classes else ((), ())
                usable.update((d.key, d) for d in devices)
    return tuple(usable.values())


def claim_findings(
    claims: Sequence[ClaimAsk],
    *,
    dra: DraSnapshot,
    policy: DraPolicy,
    namespace: str | None,
) -> list[RuleResult]:
    """The claim rules' findings for ``claims``: one claim, or every claim of one pod."""
    findings: list[RuleResult] = []
    together: list[tuple[ClaimAsk, RequestAsk]] = []
    for claim in claims:
        requests = gpu_requests(claim, policy)
        findings += _admin_access(claim, requests, policy, namespace)
        findings += _device_classes(claim, requests, dra, policy)
        findings += _shared_above_one(claim, requests, dra, policy)
        together += [(claim, r) for r in requests]
    findings += _availability(together, dra, policy)
    return findings
