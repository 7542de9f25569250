"""Which nodes must advertise the synthetic resource (docs/quota.md, "Nodes").

The scheduler's NodeResourcesFit filter refuses a pod that requests an extended resource a
node does not advertise, so every node a charged GPU pod may run on advertises
``gpu-policy.io/gpu-milli``: the nodes that advertise a GPU through the device plugin, and the
nodes DRA devices are on. A DRA device that reaches nodes by selector or everywhere (a network
device) may serve a pod on any node: then every node advertises it.
"""

from __future__ import annotations

from collections.abc import Iterable

from webhook.policy.inventory import Inventory


def nodes_to_advertise(inventory: Inventory, every_node: Iterable[str]) -> frozenset[str]:
    """The names of the nodes that must advertise the synthetic resource."""
    names = {node.name for node in inventory.gpu_nodes.nodes or ()}
    dra = inventory.dra
    for device in dra.devices if dra is not None else ():
        if device.node is not None:
            names.add(device.node)
        elif device.all_nodes or device.node_selector is not None:
            return frozenset(every_node)
    return frozenset(names)
