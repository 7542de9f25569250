"""Dynamic Resource Allocation as the scheduler sees it: device classes, published devices, CEL.

``resource.k8s.io/v1`` objects (docs/dra.md) come in as plain mappings and leave as immutable
values. The package holds three parts, each of which only reads the ones before it:

- ``objects``: the values (``DeviceClass``, ``ResourceSlice``, ``Device`` with its capacities,
  taints and counters, ``Allocation``);
- ``parse``: reading the API objects into them;
- ``snapshot``: ``DraSnapshot``, which holds the classes, the devices and the claims of one
  inventory snapshot with ``Selectors``, so that each class is matched once.

The names the rest of the code uses are importable from the package itself.
"""

from webhook.policy.dra.objects import (
    API_GROUP,
    API_VERSION,
    IMPLICIT_PREFIX,
    Allocation,
    Attribute,
    Capacity,
    CounterSet,
    Device,
    DeviceClass,
    DeviceTaint,
    ResourceSlice,
    dra_product,
    node_slice,
)
from webhook.policy.dra.parse import (
    parse_allocation,
    parse_device_class,
    parse_resource_slice,
    parse_slice,
)
from webhook.policy.dra.snapshot import DraSnapshot, Selectors, dra_snapshot

__all__ = [
    "API_GROUP",
    "API_VERSION",
    "IMPLICIT_PREFIX",
    "Allocation",
    "Attribute",
    "Capacity",
    "CounterSet",
    "Device",
    "DeviceClass",
    "DeviceTaint",
    "DraSnapshot",
    "ResourceSlice",
    "Selectors",
    "dra_product",
    "dra_snapshot",
    "node_slice",
    "parse_allocation",
    "parse_device_class",
    "parse_resource_slice",
    "parse_slice",
]
