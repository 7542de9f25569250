"""A pod's resource requests added up as the scheduler adds them.

A port of ``PodRequests`` and ``AggregateContainerRequests`` of
``k8s.io/component-helpers/resource/helpers.go`` (v0.36.2, the version kube-scheduler
v1.36.2 vendors), with the options the scheduler's NodeResourcesFit and dynamicresources
plugins pass (none: overhead included, no status resources): the containers' requests
summed; each init container's requests plus those of the restartable (sidecar) init
containers before it; the larger of the two per resource; restartable init containers
added to the sum; pod-level requests for the resources they may set; overhead added.
See docs/allocator.md, "Pod requests".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from webhook.policy.quantity import Quantity, QuantityError, exact_quantity
from webhook.policy.records import MAPPING

#: Exact values, whole ones as ``int`` (``webhook.policy.quantity.Quantity``).
ResourceList = dict[str, Quantity]

# IsSupportedPodLevelResource (helpers.go): cpu, memory and hugepages-* only.
_POD_LEVEL = ("cpu", "memory")
_HUGEPAGES = "hugepages-"
_ALWAYS = "Always"


def resource_list(raw: Any) -> ResourceList:
    """A ResourceList mapping as exact values; entries that are no quantity are left out
    (the API server refuses them, so the scheduler never meets them)."""
    out: ResourceList = {}
    if raw is None or not isinstance(raw, MAPPING):  # None first: most lists are absent
        return out
    for name, value in raw.items():
        try:
            out[str(name)] = exact_quantity(value)
        except QuantityError:
            continue
    return out


def container_requests(container: Mapping[str, Any]) -> ResourceList:
    """A container's ``resources.requests``, with the API server's defaulting applied: a
    resource with a limit and no request requests its limit (``SetDefaults_Pod``,
    pkg/apis/core/v1/defaults.go), so manifests read before admission add up the same."""
    resources = container.get("resources")
    resources = resources if isinstance(resources, MAPPING) else {}
    requests = resource_list(resources.get("requests"))
    for name, value in resource_list(resources.get("limits")).items():
        requests.setdefault(name, value)
    return requests


def _add(into: ResourceList, new: Mapping[str, Quantity]) -> None:
    # addResourceList (helpers.go)
    for name, value in new.items():
        into[name] = into.get(name, 0) + value


def _max(into: ResourceList, new: Mapping[str, Quantity]) -> None:
    # maxResourceList (helpers.go)
    for name, value in new.items():
        if name not in into or value > into[name]:
            into[name] = value


#: A container as the demand reads it: its name, whether it is an init container, its
#: ``restartPolicy`` (None unless text) and its requests (:func:`container_requests`).
Container = tuple[str, bool, str | None, Mapping[str, Quantity]]


def read_containers(spec: Mapping[str, Any]) -> tuple[Container, ...]:
    """The init containers, then the containers, of a pod spec, each read once: entries that
    are no object are left out."""
    out = []
    for key, is_init in (("initContainers", True), ("containers", False)):
        raw = spec.get(key)
        if not isinstance(raw, list):
            continue
        for container in raw:
            if isinstance(container, MAPPING):
                name = container.get("name")
                policy = container.get("restartPolicy")
                out.append(
                    (
                        name if isinstance(name, str) else "",
                        is_init,
                        policy if isinstance(policy, str) else None,
                        container_requests(container),
                    )
                )
    return tuple(out)


def aggregate_container_requests(containers: Sequence[Container]) -> ResourceList:
    """``AggregateContainerRequests`` (helpers.go): the containers and init containers."""
    reqs: ResourceList = {}
    for _, is_init, _, asked in containers:
        if not is_init:
            _add(reqs, asked)
    restartable: ResourceList = {}
    init: ResourceList = {}
    # InitContainerUse(i) = sum(restartable init containers before i) + init container i
    for _, is_init, policy, asked in containers:
        if not is_init:
            continue
        if policy == _ALWAYS:  # a restartable (sidecar) init container
            _add(reqs, asked)
            _add(restartable, asked)
            container_reqs = dict(restartable)
        else:
            container_reqs = {}
            _add(container_reqs, asked)
            _add(container_reqs, restartable)
        _max(init, container_reqs)
    if init:  # most pods have no init container: nothing to take the maximum of
        _max(reqs, init)
    return reqs


def _is_pod_level(name: str) -> bool:
    return name in _POD_LEVEL or name.startswith(_HUGEPAGES)


def pod_requests(
    spec: Mapping[str, Any], containers: Sequence[Container] | None = None
) -> ResourceList:
    """``PodRequests`` (helpers.go) of a pod spec: every resource the pod requests, as the
    scheduler adds them up (``nvidia.com/gpu`` of two containers asking 1 each is 2).
    ``containers``: the spec's :func:`read_containers`, when the caller has read them."""
    if containers is None:
        containers = read_containers(spec)
    reqs = aggregate_container_requests(containers)
    pod_level = spec.get("resources")
    # Most pods state no pod-level resources: nothing to read or test for them.
    if pod_level is not None and isinstance(pod_level, MAPPING):
        level = resource_list(pod_level.get("requests"))
        if any(_is_pod_level(name) for name in level):  # IsPodLevelRequestsSet
            for name, value in level.items():
                if _is_pod_level(name):
                    reqs[name] = value
    _add(reqs, resource_list(spec.get("overhead")))
    return reqs
