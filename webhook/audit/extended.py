"""Pending pods whose extended resources a DRA DeviceClass serves (docs/dra.md, "KEP-5004").

No node advertises such a name in ``status.allocatable``: the scheduler makes one claim of the
pod's extended resources and allocates it from the class's devices (docs/allocator.md). The
audit's verdict is the allocator's for every name (``webhook/audit/verdict.py``); these are
the words for such names: why the pod could never run (``too-large``, with the allocator's
words), and that the devices are held now (``full``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from webhook.audit.findings import Reason
from webhook.policy.allocator import DOES_NOT_FIT, Fit
from webhook.policy.demand import Demand
from webhook.policy.demand.extended import EXTENDED_CLAIM
from webhook.policy.supply import NodeGroup, Supply


def served_by_dra(
    requests: Mapping[str, int], supply: Supply, advertised: Collection[str]
) -> list[str]:
    """The requested names a DeviceClass serves that no node's device plugin advertises."""
    return [r for r in requests if r not in advertised and supply.class_for_resource(r)]


def dra_too_large(answers: Sequence[tuple[NodeGroup, Fit]], demand: Demand) -> Reason:
    """The allocator's reason why ``demand`` fits none of the groups of ``answers`` (those
    that could run it) even were they empty: the closest group's."""
    failed = [a for _, a in answers if a.outcome == DOES_NOT_FIT]
    if not failed:
        detail, said = "no node reaches devices of its DeviceClass", "cannot allocate all claims"
    else:
        closest = max(failed, key=lambda a: (a.closeness, a.nearness))
        detail, said = closest.detail or closest.reason, closest.reason
        # The claim the scheduler makes in memory for the extended resources, in words.
        detail = detail.replace(EXTENDED_CLAIM, "the claim for its extended resources")
    return Reason(
        "too-large",
        f"it fits none of the nodes that could run it, even were they empty: {detail} (the "
        f"scheduler: {said})",
        "ask for what one node's devices can give, or add nodes with more of them",
        {"requested": ", ".join(f"{n} {r}" for r, n in demand.resources.items())},
    )


def held_by_claims(served: Sequence[str], supply: Supply) -> Reason:
    """The devices the pod's DRA-served names need are allocated to claims now."""
    classes = sorted({c.name for r in served if (c := supply.class_for_resource(r))})
    return Reason(
        "full",
        f"{', '.join(served)} come from DeviceClass {', '.join(classes)}, whose devices on the "
        "nodes that could run it are allocated to claims now (other pods' claims, and the "
        "claims the scheduler makes for their extended resources)",
        "wait for those pods to finish or be deleted: a claim made for a pod's extended "
        "resources goes with its pod",
        {"resource": ", ".join(served)},
    )
