"""The GPUs a pod holds and what the scheduler said of it: read from the pod's spec and status.

``pod_requests`` counts as the scheduler does (KEP-753's formula for init containers and
native sidecars); ``scheduler_message`` is the scheduler's word on a pod it cannot place.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from webhook.policy.nodes import is_gpu_resource
from webhook.policy.quantity import QuantityError, parse_gpu_quantity

__all__ = ["pod_requests", "scheduler_message"]


def _count(raw: Any) -> int:
    try:
        return parse_gpu_quantity(raw)
    except QuantityError:
        return 0  # the API server refuses such pods: an existing pod has none


def _container_requests(container: Mapping[str, Any]) -> dict[str, int]:
    resources = container.get("resources") or {}
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    # API defaulting copies a missing extended-resource request from the limit.
    names = [n for n in (*requests, *(k for k in limits if k not in requests))]
    return {
        n: _count(requests[n] if n in requests else limits[n]) for n in names if is_gpu_resource(n)
    }


def pod_requests(spec: Mapping[str, Any]) -> dict[str, int]:
    """The GPUs a pod holds, per resource name, as the scheduler counts them.

    The containers' requests add up; an init container runs alone (with the native sidecars
    started before it), so the pod holds the larger of the two (KEP-753's formula).
    """
    totals: dict[str, int] = defaultdict(int)
    sidecars: dict[str, int] = defaultdict(int)
    peak: dict[str, int] = defaultdict(int)
    for container in spec.get("initContainers") or ():
        asked = _container_requests(container)
        if container.get("restartPolicy") == "Always":
            for name, n in asked.items():
                sidecars[name] += n
                peak[name] = max(peak[name], sidecars[name])
        else:
            for name, n in asked.items():
                peak[name] = max(peak[name], sidecars[name] + n)
    for container in spec.get("containers") or ():
        for name, n in _container_requests(container).items():
            totals[name] += n
    names = set(totals) | set(sidecars) | set(peak)
    out = {n: max(totals[n] + sidecars[n], peak[n]) for n in sorted(names)}
    return {n: v for n, v in out.items() if v > 0}


def scheduler_message(pod: Mapping[str, Any]) -> str | None:
    """The scheduler's message on the pod's ``PodScheduled=False`` condition, if any."""
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "PodScheduled" and condition.get("status") != "True":
            message = condition.get("message")
            return str(message) if message else None
    return None
