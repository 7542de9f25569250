"""The claim the scheduler builds for extended resources that DeviceClasses serve (KEP-5004).

A pod asking ``nvidia.com/gpu: 2`` where a DeviceClass has ``extendedResourceName:
nvidia.com/gpu`` gets its GPUs from DRA on every node that does not advertise the name
(allocatable 0): the dynamicresources plugin builds one in-memory claim per node, with one
request per container, and allocates it with the pod's other claims. Ported from
kube-scheduler's ``pkg/scheduler/framework/plugins/dynamicresources/extendeddynamicresources.go``
(``filterExtendedResources``, ``createRequestsAndMappings``,
``createResourceRequestAndMappings``, ``partitionContainerIndices``) and
``pkg/scheduler/util/utils.go`` (``IsDRAExtendedResourceName``); docs/allocator.md,
"Extended resources backed by DRA".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from functools import lru_cache

from webhook.policy.demand.model import Claim, DeviceRequest, Request
from webhook.policy.demand.requests import Container
from webhook.policy.dra import IMPLICIT_PREFIX, DeviceClass
from webhook.policy.quantity import Quantity

#: The claim's name while it exists only in memory (``specialClaimInMemName``).
EXTENDED_CLAIM = "<extended-resources>"

# IsQualifiedName (apimachinery validation): an optional DNS-1123 subdomain prefix and "/",
# then a name of up to 63 characters.
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def is_extended_resource_name(name: str) -> bool:
    """``IsExtendedResourceName`` (pkg/apis/core/v1/helper/helpers.go): a name with a domain
    outside ``kubernetes.io``, whose ``requests.<name>`` is a qualified name."""
    if "/" not in name or "kubernetes.io/" in name or name.startswith("requests."):
        return False
    prefix, _, rest = f"requests.{name}".partition("/")
    return (
        "/" not in rest
        and 0 < len(prefix) <= 253
        and bool(_PREFIX.match(prefix))
        and 0 < len(rest) <= 63
        and bool(_NAME.match(rest))
    )


@lru_cache(maxsize=1024)
def is_dra_extended_resource_name(name: str) -> bool:
    """``IsDRAExtendedResourceName`` (pkg/scheduler/util/utils.go): an extended resource name
    or ``deviceclass.resource.kubernetes.io/<class>``."""
    return is_extended_resource_name(name) or name.startswith(IMPLICIT_PREFIX)


def _resource_request(
    index: int,
    container: Container,
    resource: str,
    class_name: str,
    reusable: list[DeviceRequest | None],
) -> DeviceRequest | None:
    """``createResourceRequestAndMappings``: the container's request for ``resource``, less
    what the long-lived requests after it already hold; None when none is needed."""
    asked = container[3]
    quantity = asked.get(resource)
    if quantity is None or quantity.denominator != 1 or quantity == 0:
        return None
    wanted = int(quantity)
    total = 0
    for request in reusable:
        if request is not None and request.exactly is not None:
            total += request.exactly.count
            if total >= wanted:
                return None
    # Requests are named by the container's index and the resource's index among the
    # container's sorted request names.
    ridx = sorted(asked).index(resource)
    name = f"container-{index}-request-{ridx}"
    return DeviceRequest(
        name,
        exactly=Request(name, class_name, count=wanted - total),
        asked_by=f'container "{container[0]}" ({resource}: {wanted})',
    )


def _count(request: DeviceRequest) -> int:
    return request.exactly.count if request.exactly is not None else 0


def create_requests(
    containers: tuple[Container, ...], resources: list[str], class_of: Callable[[str], str | None]
) -> tuple[DeviceRequest, ...]:
    """``createRequestsAndMappings``: the device requests of the claim, sorted by name."""
    # partitionContainerIndices: init containers that are not sidecars live shortly.
    long_lived = [i for i, c in enumerate(containers) if not c[1] or c[2] == "Always"]
    short_lived = [i for i, c in enumerate(containers) if c[1] and c[2] != "Always"]
    out: list[DeviceRequest] = []
    for resource in sorted(resources):
        class_name = class_of(resource)
        if class_name is None:
            continue
        long_requests: list[DeviceRequest | None] = [None] * len(containers)
        for i in long_lived:
            long_requests[i] = _resource_request(i, containers[i], resource, class_name, [])
        biggest: DeviceRequest | None = None
        for i in short_lived:
            found = _resource_request(i, containers[i], resource, class_name, long_requests[i:])
            if found is not None and (biggest is None or _count(biggest) < _count(found)):
                biggest = found
        if biggest is not None:
            out.append(biggest)
        out += [r for r in long_requests if r is not None]
    return tuple(sorted(out, key=lambda r: r.name))


def extended_resource_claim(
    resources: Mapping[str, Quantity],
    containers: tuple[Container, ...],
    class_for: Callable[[str], DeviceClass | None],
    allocatable: Mapping[str, int],
) -> tuple[Claim | None, str | None]:
    """``filterExtendedResources`` for one node: the in-memory claim for the pod's extended
    resources the node must get from DRA (None when there are none), or the first resource
    neither the node advertises nor a DeviceClass serves (the pod does not fit there).

    ``resources`` are the pod's requests (:func:`~webhook.policy.demand.pod_requests`),
    ``containers`` its init containers then containers, ``class_for`` resolves an extended
    resource name to the class that serves it, ``allocatable`` is the node's.
    """
    through_dra: list[str] = []
    for name in sorted(resources):
        quantity = resources[name]
        if not is_dra_extended_resource_name(name) or quantity == 0:
            continue
        backed = class_for(name) is not None
        if backed and allocatable.get(name, 0) == 0:
            through_dra.append(name)
        elif name not in allocatable:
            return None, name
    if not through_dra:
        return None, None

    def class_of(resource: str) -> str | None:
        found = class_for(resource)
        return None if found is None else found.name

    requests = create_requests(containers, through_dra, class_of)
    return Claim(EXTENDED_CLAIM, requests=requests), None
