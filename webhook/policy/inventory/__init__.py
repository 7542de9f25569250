"""What the cluster offers: pools of nodes, each advertising GPU resources under some name.

The inventory is an immutable snapshot: what the nodes offer now, plus what the pools an
autoscaler can grow from zero would add. Every :class:`Pool` says where it came from (its
:class:`PoolOrigin`) and whether it has nodes now (``at_zero``: it has none, and can get some).
What the nodes offer comes from one of three sources, best first:

1. Node objects (a ``kubectl get nodes -o yaml`` dump, or the live watch): ``status.allocatable``
   is the truth about resource names and slots, GFD labels the truth about products
   (docs/device-plugin.md, "GFD labels"); disagreements between the two are recorded, not hidden.
2. The pools the policy declares (``spec.pools``), expanded with the device-plugin config.
3. The device-plugin config alone: resource names per config key, products unknown.

The pools that can appear come from the policy's autoscaled pools (``spec.pools`` entries with
``minNodes`` or ``maxNodes``) and from the cluster's autoscaler objects, read by the shells
(Karpenter NodePools: ``webhook.policy.autoscaling``); docs/autoscaling.md says how.

The package holds the types (``model``), building from nodes (``from_nodes``), the declared and
autoscaled pools (``declared``); the names the rest of the code uses are importable from the
package itself. DRA devices are no pools: what DeviceClasses serve is read from their devices
(``webhook.policy.supply.served``).
"""

from webhook.policy.inventory.declared import assumed_taints, declared_pool, inventory_from_policy
from webhook.policy.inventory.from_nodes import inventory_from_nodes
from webhook.policy.inventory.model import (
    MAX_KEPT,
    Inventory,
    Offer,
    Pool,
    PoolOrigin,
    Scaling,
    describe_pair,
    keep,
)

__all__ = [
    "MAX_KEPT",
    "Inventory",
    "Offer",
    "Pool",
    "PoolOrigin",
    "Scaling",
    "assumed_taints",
    "declared_pool",
    "describe_pair",
    "inventory_from_nodes",
    "inventory_from_policy",
    "keep",
]
