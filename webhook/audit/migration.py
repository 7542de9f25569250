"""The audit's findings about a migration from the device plugin to DRA (docs/migrate.md).

``gpu-node-dual-published`` (warn): a node publishes the same GPUs in ``status.allocatable``
and in a ResourceSlice of NVIDIA's DRA driver; ``gpu-node-double-allocation`` (fail): on such
a node, device-plugin pods and allocated claims already hold more GPUs than it has.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from webhook.audit.findings import Finding, Ref
from webhook.policy import Inventory
from webhook.policy.dual import double_allocations, dual_published

DUAL_FIX = (
    "finish the node's cutover: stop the device plugin on it (its config label) so that only "
    "the DRA driver serves its GPUs, or stop the DRA driver there until the plan's step for "
    "this node (gpu-policy migrate plan; spec.dra.dualPublishedNodes: avoid keeps claim pods "
    "off it meanwhile)"
)
DOUBLE_FIX = (
    "the GPUs are given twice: delete one side's pods (the claim pods, or the device-plugin "
    "pods) so that what runs fits the node, then finish its cutover"
)


def migration_findings(inventory: Inventory, pods: Iterable[Mapping[str, Any]]) -> list[Finding]:
    """One finding per dual-published node, and one per node whose GPUs are given twice."""
    supply = inventory.supply
    if supply is None:
        return []
    dual = dual_published(supply)
    out = [
        Finding(
            rule="gpu-node-dual-published",
            result="warn",
            subject=Ref("Node", None, node.node),
            message=f"{node.describe()}: two ledgers for one set of GPUs, the scheduler may "
            "give a GPU to a device-plugin pod and to a claim",
            fix=DUAL_FIX,
            category="nodes",
            details={"slices": ", ".join(node.slices), "gpus": str(node.gpus)},
        )
        for node in dual
    ]
    allocations = inventory.dra.allocations if inventory.dra is not None else ()
    for double in double_allocations(dual, pods, allocations, supply.slices):
        out.append(
            Finding(
                rule="gpu-node-double-allocation",
                result="fail",
                subject=Ref("Node", None, double.node),
                message=double.describe(),
                fix=DOUBLE_FIX,
                category="nodes",
                details={
                    "gpus": str(double.gpus),
                    "pluginGpus": str(double.plugin_gpus),
                    "claimGpus": str(double.claim_gpus),
                },
            )
        )
    return out
