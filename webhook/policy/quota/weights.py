"""What a pod costs in GPU-equivalents, from what the inventory knows (docs/quota.md, "Weights").

One unit of each way to ask for a GPU weighs:

* a whole GPU through the device plugin (``nvidia.com/gpu`` on a node that does not share it): 1;
* a time-sliced or MPS replica: 1/replicas of its GPU (the offer's ``replicas``);
* a MIG device: its share of the parent GPU, by compute slices (``3g.20gb`` is 3/7; 4 slices on
  an A30) or, under ``migShare: memory``, by memory (20 GB of a 40 GB A100 is 1/2);
* a DRA device: 1, a MIG device published by NVIDIA's DRA driver (attribute ``profile``) its MIG
  share, a consumable-capacity request its fraction of the device (``shares`` n of N,
  ``memory`` m of M); ``deviceclass.resource.kubernetes.io/<class>`` and a DeviceClass's
  ``extendedResourceName`` (KEP-5004) weigh what one device of that class weighs.

Where the pod may land on offers of different weight, it is charged the largest, unless its
node selector (the one the webhook injects, or its own) leaves only lighter ones. An entry of
``spec.quota.weights`` for the resource name, the DeviceClass or the MIG profile replaces the
computed weight.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from webhook.contract import QUOTA_MILLI, QUOTA_RESOURCE
from webhook.policy.claims import DeviceAsk, RequestAsk, pod_claim_refs, read_claim
from webhook.policy.demand import pod_requests
from webhook.policy.dra import Device, DraSnapshot
from webhook.policy.inventory import Inventory, Offer
from webhook.policy.model import DraPolicy, Policy
from webhook.policy.quantity import quantity_value
from webhook.policy.quota.settings import QuotaPolicy
from webhook.policy.resources import nvidia_spelling, parse_resource, profile_size

# Compute slices of a whole GPU: 7 on every MIG-capable GPU but the A30, which has 4
# (NVIDIA's MIG user guide, "Supported MIG profiles"; docs/quota.md).
_SLICES = 7
_SLICES_BY_MODEL = (("A30", 4),)
_MODEL_GB = re.compile(r"(\d+)\s*GB", re.IGNORECASE)
ONE = Fraction(1)


@dataclass(frozen=True, slots=True)
class Part:
    """One line of a pod's cost: ``units`` of ``what``, each ``weight`` GPU-equivalents."""

    what: str
    units: Fraction
    weight: Fraction
    why: str
    # True when several offers could serve it and the heaviest was charged.
    largest: bool = False

    @property
    def total(self) -> Fraction:
        """units x weight."""
        return self.units * self.weight

    def describe(self) -> str:
        """``1 x nvidia.com/gpu.shared at 0.125 (1/8 of a time-sliced GPU)``."""
        units = f"{self.units}" if self.units.denominator != 1 else f"{int(self.units)}"
        return f"{units} x {self.what} at {equivalents(self.weight)} ({self.why})"


@dataclass(frozen=True, slots=True)
class Cost:
    """A pod's cost: its parts and what they add up to, in thousandths of a GPU-equivalent."""

    parts: tuple[Part, ...]
    # Claims the inventory does not hold yet: they cost nothing now (docs/quota.md, "Limits").
    unknown_claims: tuple[str, ...] = ()

    @property
    def total(self) -> Fraction:
        """The sum of the parts, in GPU-equivalents."""
        return sum((p.total for p in self.parts), Fraction(0))

    @property
    def milli(self) -> int:
        """The request the webhook adds: thousandths, rounded down (so n parts of one GPU
        never cost more than the GPU: 7 x 1/7 is 7 x 142 = 994), at least 1 for a GPU pod."""
        if not self.parts:
            return 0
        return max(1, math.floor(self.total * QUOTA_MILLI))

    @property
    def largest(self) -> bool:
        """True when some part was charged the heaviest of several offers."""
        return any(p.largest for p in self.parts)

    def describe(self) -> str:
        """The parts in words, ``; ``-separated."""
        return "; ".join(p.describe() for p in self.parts)


def equivalents(value: Fraction) -> str:
    """``0.125``, ``1``, ``0.429``: GPU-equivalents as messages write them."""
    text = f"{float(value):.3f}".rstrip("0").rstrip(".")
    return text or "0"


def mig_weight(profile: str, product: str | None, share: str) -> tuple[Fraction, str] | None:
    """A MIG profile's share of its parent GPU and the words for it; None if not a profile.

    ``compute``: its compute slices of the GPU's 7 (4 on an A30). ``memory``: its memory of the
    parent's, read from the product name (``NVIDIA-A100-SXM4-40GB``); compute when unknown.
    """
    size = profile_size(nvidia_spelling(profile))
    if size is None:
        return None
    slices, gb = size
    if share == "memory" and product is not None:
        found = _MODEL_GB.search(product.split("-MIG-")[0])
        if found is not None and int(found[1]) >= gb:
            return Fraction(gb, int(found[1])), f"{gb} of the GPU's {found[1]} GB"
    whole = next((n for model, n in _SLICES_BY_MODEL if product and model in product), _SLICES)
    return Fraction(min(slices, whole), whole), f"{slices} of the GPU's {whole} compute slices"


def _override(quota: QuotaPolicy, *keys: str | None) -> Fraction | None:
    for key in keys:
        if key is not None and key in quota.weights:
            return quota.weights[key]
    return None


def offer_weight(name: str, offer: Offer, quota: QuotaPolicy) -> tuple[Fraction, str]:
    """One unit of ``name`` on ``offer``: its weight and why."""
    profile = offer.profile
    fixed = _override(quota, name, profile)
    if fixed is not None:
        return fixed, "spec.quota.weights"
    weight, why = ONE, "a whole GPU"
    if profile is not None:
        weight, why = mig_weight(profile, offer.product, quota.mig_share) or (ONE, "a MIG device")
    if offer.replicas > 1:
        # A replica of a shared MIG device is that share of the MIG device.
        of = "a shared GPU" if profile is None else f"a shared MIG device ({why})"
        return weight / offer.replicas, f"1/{offer.replicas} of {of}"
    return weight, why


def device_weight(
    device: Device, device_class: str, capacity: Mapping[str, str], quota: QuotaPolicy
) -> tuple[Fraction, str]:
    """One DRA device of ``device_class`` asked with ``capacity`` requests: weight and why."""
    profile = device.attributes.get("profile")
    profile = profile if isinstance(profile, str) else None
    fixed = _override(quota, device_class, profile)
    base, why = (fixed, "spec.quota.weights") if fixed is not None else (ONE, "a whole device")
    if fixed is None and profile is not None:
        product = device.attributes.get("productName")
        found = mig_weight(profile, product if isinstance(product, str) else None, quota.mig_share)
        if found is not None:
            base, why = found
    for key in ("shares", "memory"):
        asked = capacity.get(key)
        has = device.capacity.get(key)
        if asked is None or has is None or has.value <= 0:
            continue
        try:
            amount = quantity_value(asked)
        except ValueError:
            continue
        part = min(ONE, amount / has.value)
        return base * part, f"{key} {asked} of the device's {_number(has.value)}"
    return base, why


def _number(value: Fraction) -> str:
    return str(int(value)) if value.denominator == 1 else str(float(value))


def _pinned(offer: Offer, selector: Mapping[str, str]) -> bool:
    """False when the pod's nodeSelector rules out the offer's nodes (a label both name)."""
    labels = offer.labels()
    return all(key not in labels or value in labels[key] for key, value in selector.items())


def _heaviest(
    found: Iterable[tuple[Fraction, str]],
    what: str,
    units: Fraction,
    fallback: tuple[Fraction, str],
) -> Part:
    options = dict.fromkeys(found)
    weight, why = max(options, key=lambda o: o[0], default=fallback)
    distinct = {w for w, _ in options}
    return Part(what, units, weight, why, largest=len(distinct) > 1)


def _class_part(
    what: str, units: Fraction, device_class: str, dra: DraSnapshot | None, quota: QuotaPolicy
) -> Part:
    devices = dra.class_devices(device_class)[0] if dra is not None else ()
    fixed = _override(quota, what, device_class)
    if fixed is not None:
        return Part(what, units, fixed, "spec.quota.weights")
    found = (device_weight(d, device_class, {}, quota) for d in devices)
    return _heaviest(found, what, units, (ONE, f"a device of class {device_class}"))


def _extended_part(
    name: str, units: Fraction, spec: Mapping[str, Any], inventory: Inventory, quota: QuotaPolicy
) -> Part | None:
    """The part of an extended resource the pod asks for; None when it is no GPU name."""
    dra = inventory.dra
    served = dra.class_for_resource(name) if dra is not None else None
    if served is not None:
        return _class_part(name, units, served.name, dra, quota)
    form = parse_resource(name)
    if form is None:
        return None
    raw = spec.get("nodeSelector")
    selector = {str(k): str(v) for k, v in raw.items()} if isinstance(raw, Mapping) else {}
    offers = [o for _, o in inventory.advertising(name) if _pinned(o, selector)]
    fixed = _override(quota, name, form.profile)
    if fixed is not None:
        return Part(name, units, fixed, "spec.quota.weights")
    if not offers and form.profile is not None:
        found = mig_weight(form.profile, None, "compute")
        return Part(name, units, *(found or (ONE, "a MIG device")))
    fallback = (ONE, "no node advertises it: a whole GPU")
    return _heaviest((offer_weight(name, o, quota) for o in offers), name, units, fallback)


def _request_part(request: RequestAsk, claim: str, dra: DraSnapshot, quota: QuotaPolicy) -> Part:
    """A claim's request: the heaviest alternative (firstAvailable may give any of them)."""
    options: list[tuple[Fraction, Fraction, str]] = []
    for ask in request.alternatives:
        units, weight, why = _ask_weight(ask, dra, quota)
        options.append((units * weight, units, f"{why}, class {ask.device_class}"))
    total, units, why = max(options, key=lambda o: o[0])
    weight = total / units if units else Fraction(0)
    largest = len({o[0] for o in options}) > 1
    return Part(f"{claim} request {request.name}", units, weight, why, largest=largest)


def _ask_weight(
    ask: DeviceAsk, dra: DraSnapshot, quota: QuotaPolicy
) -> tuple[Fraction, Fraction, str]:
    """(devices, weight of each, why) for one alternative of a claim's request."""
    key = ("quota", ask.device_class, ask.selectors)
    chosen = dra.memo.get(key)
    if chosen is None:
        chosen = dra.select(dra.class_devices(ask.device_class)[0], ask.selectors)[0]
        dra.memo.setdefault(key, chosen)
    if ask.all_devices:
        per_node: dict[str | None, int] = {}
        for device in chosen:
            per_node[device.node] = per_node.get(device.node, 0) + 1
        count = max(per_node.values(), default=0)
    else:
        count = ask.count
    weights = {device_weight(d, ask.device_class, ask.capacity, quota) for d in chosen}
    fixed = _override(quota, ask.device_class)
    if fixed is not None:
        weights = {(fixed, "spec.quota.weights")}
    weight, why = max(weights, key=lambda o: o[0], default=(ONE, "a whole device"))
    return Fraction(count), weight, why


def _claim_parts(
    spec: Mapping[str, Any],
    namespace: str,
    dra: DraSnapshot | None,
    policy: DraPolicy,
    quota: QuotaPolicy,
) -> tuple[list[Part], list[str]]:
    """The parts of the pod's GPU claims, and the claims the inventory does not hold."""
    parts: list[Part] = []
    unknown: list[str] = []
    for ref in pod_claim_refs(spec):
        kind, name = (
            ("ResourceClaim", ref.claim)
            if ref.claim is not None
            else ("ResourceClaimTemplate", ref.template or "")
        )
        label = f'claim "{ref.name}" ({kind} {name})'
        claim_spec = dra.claim_specs.get((kind, namespace, name)) if dra is not None else None
        if claim_spec is None:
            unknown.append(label)
            continue
        assert dra is not None
        claim = read_claim(claim_spec, label)
        for request in claim.requests:
            if any(policy.is_gpu_class(a.device_class) for a in request.alternatives):
                parts.append(_request_part(request, label, dra, quota))
    return parts, unknown


def pod_cost(
    spec: Mapping[str, Any], *, namespace: str, policy: Policy, inventory: Inventory
) -> Cost:
    """What the pod spec costs: its GPU extended resources (as the scheduler adds them up:
    init containers against the sum of the others) and its GPU claims."""
    parts: list[Part] = []
    for name, amount in sorted(pod_requests(spec).items()):
        if name == QUOTA_RESOURCE or amount <= 0:
            continue
        part = _extended_part(name, Fraction(amount), spec, inventory, policy.quota)
        if part is not None:
            parts.append(part)
    claimed, unknown = _claim_parts(spec, namespace, inventory.dra, policy.dra, policy.quota)
    return Cost(tuple([*parts, *claimed]), tuple(unknown))


__all__ = [
    "Cost",
    "Part",
    "device_weight",
    "equivalents",
    "mig_weight",
    "offer_weight",
    "pod_cost",
]
