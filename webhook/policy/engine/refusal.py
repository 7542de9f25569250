"""The words of a refusal for devices that cannot be allocated, from the allocator's explanation.

The allocator says which part of the claims keeps them off the node group that comes closest
(:class:`~webhook.policy.allocator.result.Explanation`: the request at fault and what the
group has for it, or the constraint, or the requests together). This module turns it into
what the user reads: who asks (the request, the claim, or the container whose extended
resources a DeviceClass serves), for what class, what the closest node has, and the fix.
A request whose selectors read the MIG ``profile`` attribute and that no node has a device
for is a MIG profile the cluster does not offer: ``gpu-claim-mig-profile``, with the profiles
the supply's devices have (docs/dra-claims.md, "What the webhook checks").
"""

from __future__ import annotations

import re

from webhook.policy.allocator import Verdict
from webhook.policy.allocator.result import (
    CLAIMS,
    CONSTRAINT,
    REQUEST,
    TOGETHER,
    Explanation,
    Fit,
    Shortfall,
)
from webhook.policy.demand.extended import EXTENDED_CLAIM
from webhook.policy.demand.model import ALL
from webhook.policy.supply import Supply, group_name
from webhook.policy.text import counted

# A selector that reads the MIG profile attribute (device.attributes['gpu.nvidia.com'].profile,
# or ["profile"]): the request names a MIG profile (docs/dra-claims.md, "devices").
_READS_PROFILE = re.compile(r"""\.profile\b|\[\s*["']profile["']\s*\]""")
_PROFILE = "profile"
#: The claim the scheduler builds in memory for extended resources DeviceClasses serve.
EXTENDED_WORDS = "the claim for its extended resources served by DRA"


def _claim(label: str) -> str:
    return label.replace(EXTENDED_CLAIM, EXTENDED_WORDS)


def _who(why: Explanation, what: str, shortfall: Shortfall | None = None) -> str:
    """Who asks: ``request "gpu"`` of the object itself, ``claim "c" (ResourceClaimTemplate
    t), request "gpu"`` of a pod's claim, or the container of an extended resource."""
    if shortfall is not None and why.asked_by:
        return why.asked_by
    name = shortfall.name if shortfall is not None else why.request
    request = f'request "{name}"'
    return request if why.claim == what else f"{_claim(why.claim)}, {request}"


def _reads_profile(shortfall: Shortfall, supply: Supply | None) -> bool:
    selectors = list(shortfall.request.selectors)
    if supply is not None:
        found = supply.classes.get(shortfall.request.device_class)
        selectors += found.selectors if found is not None else ()
    return any(_READS_PROFILE.search(s) for s in selectors)


def _profiles(supply: Supply | None) -> str:
    """The MIG profiles the supply's devices offer, with how many devices of each."""
    profiles = supply.attribute_values(_PROFILE) if supply is not None else ()
    if not profiles:
        return "No ResourceSlice offers MIG devices"
    shown = ", ".join(f"{p} ({counted(n, 'device')})" for p, n in profiles)
    return f"MIG profiles offered: {shown}; ask for one of those"


def _where_it_can_run(verdict: Verdict) -> str:
    """``no node`` or, when some groups fail the pod's node selection or taints first, ``no
    node it can run on``: their devices were not counted."""
    early = bool(verdict.stages & {"node", "resources"})
    return "no node it can run on" if early else "no node"


def _on(group: str, count: int, products: tuple[str, ...]) -> str:
    what = f" ({', '.join(products)})" if products else ""
    return f"{count} on {group_name(group)}{what}"


def _request(
    why: Explanation, what: str, verdict: Verdict, supply: Supply | None
) -> tuple[str, str, bool]:
    """The reason, the fix, and whether it is a MIG profile nothing offers."""
    if len(why.shortfalls) > 1:
        best = max(why.shortfalls, key=lambda s: s.available)
        each = "; ".join(
            f'"{s.name}" asks for {s.asked()} ({group_name(why.group)} has {s.available})'
            for s in why.shortfalls
        )
        return (
            f"{_who(why, what)} has no alternative of firstAvailable that one node can serve: "
            f"{each}",
            f'Ask for at most {best.available} in one alternative of request "{why.request}"',
            False,
        )
    short = why.shortfalls[0]
    who = _who(why, what, short)
    asked = f"{who} asks for {short.asked()}"
    where = group_name(why.group)
    if short.request.allocation_mode == ALL and short.tainted:
        return (
            f"{asked}, and {short.tainted} of the {short.usable} matching devices of {where} "
            "have a taint it does not tolerate (All takes every one)",
            "Tolerate the taint in the request (tolerations), or ask for a count",
            False,
        )
    if short.request.allocation_mode != ALL and short.available >= short.request.count:
        # Enough devices match, yet they cannot be given together: what they share (counters
        # of partitionable devices, consumable capacity) stops it.
        return (
            f"{asked}; {where} has {counted(short.available, 'matching device')}, but not "
            f"{short.request.count} that can be allocated together (they share counters or "
            "capacity)",
            f'Ask for fewer devices in request "{why.request}"',
            False,
        )
    if short.available > 0:
        taints = (
            f", besides {short.tainted} with a taint it does not tolerate" if short.tainted else ""
        )
        most = _on(why.group, short.available, short.products)
        fix = f"Ask for at most {short.available}"
        return (
            f"{asked}, but {_where_it_can_run(verdict)} has more than "
            f"{counted(short.available, 'matching device')} ({most}{taints})",
            fix if why.asked_by else f'{fix} in request "{why.request}"',
            False,
        )
    if short.usable > 0:
        return (
            f"{asked}, but each of the {short.usable} matching devices of "
            f"{where} has a taint it does not tolerate",
            "Tolerate the taint in the request (tolerations), or ask for devices without it",
            False,
        )
    if _reads_profile(short, supply):
        return (
            f"{who} asks for a MIG profile no node offers ({short.asked()})",
            _profiles(supply),
            True,
        )
    if short.selector is not None and short.of_class:
        of_class = _on(why.group, short.of_class, short.products)
        return (
            f'{asked}, but no device matches: the selector "{short.selector}" matches none '
            f"of the devices of class {short.request.device_class} ({of_class})",
            "Change the selector to match a device the cluster has",
            False,
        )
    if short.request.capacity and short.of_class is None:
        return (
            f"{asked}, but no device matches the capacity it requests (capacity.requests)",
            "Ask for a capacity one device has",
            False,
        )
    return (
        f"{asked}, but no node has a device of class {short.request.device_class}",
        "Ask for a DeviceClass whose devices the cluster has",
        False,
    )


def _reason_and_fix(
    why: Explanation, what: str, verdict: Verdict, supply: Supply | None
) -> tuple[str, str, bool]:
    where = group_name(why.group)
    counters = (
        " (its devices share counter sets: partitions and the whole device they are cut from "
        "cannot all be taken together)"
        if why.counters
        else ""
    )
    whose = "" if why.claim == what else f"{_claim(why.claim)}: "
    if why.kind == REQUEST:
        return _request(why, what, verdict, supply)
    if why.kind == CONSTRAINT:
        constraint = f"constraint {why.constraint}" if why.constraint else "constraints together"
        if why.constraint.startswith("matchAttribute"):
            alike = f"that many with one {why.attribute}"
        elif why.constraint:
            alike = f"that many with a different {why.attribute} each"
        else:
            alike = "that many that meet them all"
        return (
            f"{whose}no devices of {where} meet its {constraint}",
            f"Drop the constraint, or ask for fewer devices: {where} does not have {alike}",
            False,
        )
    if why.kind == TOGETHER:
        return (
            f"{whose}its requests together need more devices than {where} has{counters}",
            "Ask for fewer devices in all, or split them over several claims and pods",
            False,
        )
    if why.kind == CLAIMS:
        named = [
            f"{why.asked_by}, served by DRA," if label == EXTENDED_CLAIM and why.asked_by else label
            for label in why.claims
        ]
        claims = " and ".join([", ".join(named[:-1]), named[-1]] if len(named) > 1 else named)
        return (
            f"{claims} together need more devices than {where} has{counters}",
            "Ask for fewer devices in all, or spread the work over several pods",
            False,
        )
    return (
        _claim(why.text),
        "Ask for no more devices than one node has, or loosen the selectors and constraints",
        False,
    )


def _error(closest: Fit) -> tuple[str, str, bool]:
    """The allocator failed (a CEL error, a request it cannot read): the scheduler fails the
    pod on every node with that error; its first line is what the user needs."""
    lines = closest.reason.splitlines() or [""]
    fix = (
        "Correct the selector (docs/cel.md)"
        if "CEL" in lines[0]
        else "Correct the claim's devices section"
    )
    return f"the scheduler's allocator fails on it: {lines[0].rstrip()}", fix, False


def claims_refusal(
    verdict: Verdict, closest: Fit, what: str, supply: Supply | None
) -> tuple[str, str, bool] | None:
    """Why no node can allocate the devices of ``what``, from the closest group's
    explanation or the allocator's error: the reason, the fix, and whether it is a MIG
    profile the cluster does not offer. None for the filters before the claims'."""
    if closest.error:
        return _error(closest)
    why = closest.explanation
    if why is None:
        return None
    return _reason_and_fix(why, what, verdict, supply)
