"""Why a pod with DRA claims is stuck, in DRA terms (docs/audit.md, "Pods with claims").

A pending pod's GPU claims are judged in this order, and the first answer is the reason:

1. ``claim-missing``: a claim it refers to does not exist (neither the ResourceClaim nor the
   ResourceClaimTemplate it is made from);
2. ``claim-unsatisfiable``: the allocator cannot allocate its claims on any node group,
   existing or able to appear, even on an empty cluster: the webhook's question and answer
   (no device matches the class and the selectors, too few on any node, a constraint no
   devices meet, a DeviceClass that does not exist...), with what the closest group has;
3. ``claim-allocated``: the allocator (docs/allocator.md) cannot allocate its claims on any
   node with the devices of the other claims' allocations (``status.allocation``) in use
   (``webhook.audit.now``): the holders of the devices its claims can use (the allocator's
   ``usable_devices`` on the supply) are named, with the
   pods they are reserved for (``status.reservedFor``), and a shared claim with how many pods
   use it;
4. ``claim-elsewhere``: the allocator allocates them on some node now (or its claims are
   allocated already): what keeps it Pending is not its GPU claims.

Claims are read from the inventory's DRA snapshot (``Inventory.dra``); a claim made from a
template is found through the pod's ``status.resourceClaimStatuses``, and before it exists,
through the template.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from webhook.audit.now import FitNow, allocated_devices
from webhook.audit.stuck import Reason
from webhook.policy.allocator.reach import usable_devices
from webhook.policy.allocator.usage import Usage
from webhook.policy.claims import ClaimAsk, pod_claim_refs, read_claim
from webhook.policy.demand import Claim, read_claim_spec
from webhook.policy.dra import Allocation, Device, DraSnapshot
from webhook.policy.engine.claims import gpu_requests
from webhook.policy.engine.fit import verdict_findings
from webhook.policy.model import DraPolicy

__all__ = ["ClaimDiagnosis"]

#: How many holders a message names before "and N more".
HOLDERS_SHOWN = 5

_CLAIM = "ResourceClaim"
_TEMPLATE = "ResourceClaimTemplate"


def _generated(pod: Mapping[str, Any]) -> dict[str, str]:
    """The names of the claims made for the pod from templates, by its claim entry's name."""
    out = {}
    for entry in (pod.get("status") or {}).get("resourceClaimStatuses") or ():
        if isinstance(entry, Mapping) and entry.get("name") and entry.get("resourceClaimName"):
            out[str(entry["name"])] = str(entry["resourceClaimName"])
    return out


def _holder(allocation: Allocation) -> str:
    """``ns/claim (pod p)``, ``ns/claim (shared by 3 pods: a, b, c)``, ``ns/claim (no pod)``."""
    pods = [r.removeprefix("pods/") for r in allocation.reserved_for]
    where = f"{allocation.namespace}/{allocation.name}"
    if not pods:
        return f"{where} (reserved for no pod)"
    if len(pods) == 1:
        return f"{where} (pod {pods[0]})"
    shown = ", ".join(pods[:3]) + (f" and {len(pods) - 3} more" if len(pods) > 3 else "")
    return f"{where} (shared by {len(pods)} pods: {shown})"


class ClaimDiagnosis:
    """The DRA side of the audit: the claims' allocations, and the diagnosis of pending pods."""

    def __init__(self, dra: DraSnapshot, policy: DraPolicy, fit_now: FitNow) -> None:
        self.dra = dra
        self.policy = policy
        self.fit_now = fit_now
        # The allocator's reading of each claim found, by its label.
        self._claims: dict[str, Claim] = {}
        # Which claim holds each allocated device (driver, pool, device).
        self.holders: dict[tuple[str, str, str], list[Allocation]] = defaultdict(list)
        self._allocated: dict[tuple[str, str], Allocation] = {}
        for allocation in dra.allocations:
            if allocation.devices:
                self._allocated[(allocation.namespace, allocation.name)] = allocation
            for _request, driver, pool, device in allocation.devices:
                self.holders[(driver, pool, device)].append(allocation)

    def claims_of(self, pod: Mapping[str, Any]) -> tuple[list[tuple[str, ClaimAsk]], list[str]]:
        """The pod's GPU claims, each with its ResourceClaim name ("" before it exists), and
        what could not be found (the claim entries whose claim and template are unknown)."""
        spec = pod.get("spec") or {}
        namespace = str((pod.get("metadata") or {}).get("namespace") or "")
        generated = _generated(pod)
        found: list[tuple[str, ClaimAsk]] = []
        missing: list[str] = []
        for ref in pod_claim_refs(spec):
            name = ref.claim or generated.get(ref.name, "")
            claim_spec = self.dra.claim_specs.get((_CLAIM, namespace, name)) if name else None
            label = f'claim "{ref.name}" ({_CLAIM} {namespace}/{name})'
            if claim_spec is None and ref.template:
                claim_spec = self.dra.claim_specs.get((_TEMPLATE, namespace, ref.template))
                label = f'claim "{ref.name}" ({_TEMPLATE} {namespace}/{ref.template})'
            if claim_spec is None:
                what = f"{_CLAIM} {name}" if ref.claim else f"{_TEMPLATE} {ref.template}"
                missing.append(f'claim "{ref.name}": {what} does not exist in {namespace}')
                continue
            claim = read_claim(claim_spec, label)
            if gpu_requests(claim, self.policy):
                found.append((name, claim))
                if label not in self._claims:
                    self._claims[label] = read_claim_spec(claim_spec, label)
        return found, missing

    def asks(self, pod: Mapping[str, Any]) -> bool:
        """True when the pod refers to claims this diagnosis should explain."""
        claims, missing = self.claims_of(pod)
        return bool(claims or missing)

    def diagnose(self, pod: Mapping[str, Any]) -> list[Reason]:
        """Why a pending pod's GPU claims keep it off every node (see the module docstring)."""
        namespace = str((pod.get("metadata") or {}).get("namespace") or "")
        named, missing = self.claims_of(pod)
        if missing:
            return [
                Reason(
                    "claim-missing",
                    "; ".join(missing) + ": the pod waits for its claims",
                    "create the ResourceClaim or ResourceClaimTemplate it names (in the "
                    "pod's namespace), or fix the name in spec.resourceClaims",
                )
            ]
        waiting = [c for n, c in named if (namespace, n) not in self._allocated]
        if not waiting:
            return [self._elsewhere(named, allocated=True)]
        claims = [self._claims[c.label] for c in waiting]
        labels = ", ".join(c.label for c in waiting)
        failed = verdict_findings(
            self.fit_now.ever(claims), labels, has_claims=True, supply=self.fit_now.supply
        )
        failed = [r for r in failed if r.status == "fail"]
        if failed:
            return [
                Reason(
                    "claim-unsatisfiable",
                    "; ".join(f"[{r.rule}] {r.message}" for r in failed),
                    "ask for what the cluster has: the claim's spec is immutable, so delete "
                    "the claim (or the template and the pod) and create it again corrected",
                    details={"rules": ", ".join(dict.fromkeys(r.rule for r in failed))},
                )
            ]
        mine = {(namespace, n) for n, _ in named}
        # In use: the devices of every other claim's allocation (the allocator's
        # allocatedState); the pod's own allocated claims are not allocated again.
        whole, shared = allocated_devices(self.dra.allocations, self.fit_now.supply, skip=mine)
        usage = Usage(devices=whole, shared=shared)
        if self.fit_now.fits_somewhere(claims, usage):
            return [self._elsewhere(named, allocated=False)]
        # The devices its claims could use (and those sharing their counters), as the
        # allocator reads the supply: who holds them is the answer.
        usable = usable_devices(claims, self.fit_now.supply)
        return [self._allocated_reason(usable, mine)]

    def _allocated_reason(self, usable: Sequence[Device], mine: set[tuple[str, str]]) -> Reason:
        held: dict[str, list[str]] = defaultdict(list)
        for device in usable:
            for allocation in self.holders.get(device.key, ()):
                if (allocation.namespace, allocation.name) not in mine:
                    where = f"{device.name} on node {device.node}" if device.node else device.name
                    held[_holder(allocation)].append(where)
        holders = [f"{h}: {', '.join(devices)}" for h, devices in sorted(held.items())]
        shown = "; ".join(holders[:HOLDERS_SHOWN])
        if len(holders) > HOLDERS_SHOWN:
            shown += f"; and {len(holders) - HOLDERS_SHOWN} more claims"
        return Reason(
            "claim-allocated",
            f"every device its claims can use is allocated to other claims, or shares its "
            f"counters with one that is ({len(usable)} devices): {shown}",
            "wait for those claims to be released, or free devices: a claim made from a "
            "template goes with its pod, a claim shared by pods is released when none of "
            "them uses it any more",
            details={"holders": str(len(holders)), "devices": str(len(usable))},
        )

    def _elsewhere(self, named: Sequence[tuple[str, ClaimAsk]], *, allocated: bool) -> Reason:
        labels = ", ".join(c.label for _, c in named)
        what = "are allocated" if allocated else "can be allocated now"
        return Reason(
            "claim-elsewhere",
            f"its GPU claims ({labels}) {what}: what keeps it Pending is not its GPU devices",
            "read the scheduler's message below",
        )
