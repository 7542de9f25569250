"""What the cluster offers, one model for every question: node groups and device classes.

A :class:`NodeGroup` is a set of nodes of one shape, existing or able to appear; a
:class:`Supply` holds the groups and the DeviceClasses. The allocator
(``webhook.policy.allocator``) judges a demand against one group at a time
(docs/allocator.md).
"""

from webhook.policy.supply.model import NodeGroup, Supply, group_name

__all__ = ["NodeGroup", "Supply", "group_name"]
