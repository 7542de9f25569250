"""``gpu-policy inventory``: what the cluster offers per pool, what running pods hold, what is free.

The view a cluster admin wants before and after a sharing rollout (seed 003's table): per pool
(config key and GPU model) the nodes, product, physical GPUs, sharing strategy, replicas, the
advertised resource, its slots, the slots requested by running pods and the free ones; then the
total ("GPU slots: 11 (NVIDIA-L20 x 8 + Tesla-T4 x 3)") and any label/allocatable disagreement.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from webhook.policy import Inventory
from webhook.policy.quantity import QuantityError, parse_gpu_quantity


@dataclass(frozen=True)
class Row:
    """One advertised resource of one pool."""

    pool: str
    config: str | None
    nodes: int
    product: str | None
    gpus: int | None
    sharing: str
    replicas: int
    resource: str
    slots: int | None
    requested: int
    free: int | None
    memory_per_slot_mib: int | None


def _requests(container: Mapping[str, Any]) -> Mapping[str, Any]:
    if "requests" in container:  # a trimmed pod from the live watch
        return container.get("requests") or {}
    resources = container.get("resources") or {}
    return resources.get("requests") or resources.get("limits") or {}


def _count(raw: Any) -> int:
    try:
        return parse_gpu_quantity(raw)
    except QuantityError:
        return 0


def pod_usage(pods: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], int]:
    """Slots held per (node, resource): the pod's effective request, as the scheduler counts it.

    Accepts Pod objects or the trimmed pods of the live watch. Pending pods hold nothing.
    """
    usage: dict[tuple[str, str], int] = defaultdict(int)
    for pod in pods:
        spec = pod.get("spec") if "spec" in pod else pod
        node = (spec or {}).get("nodeName")
        phase = ((pod.get("status") or {}).get("phase")) if "status" in pod else pod.get("phase")
        if not node or phase in ("Succeeded", "Failed"):
            continue
        totals: dict[str, int] = defaultdict(int)
        for container in (spec or {}).get("containers") or ():
            for name, raw in _requests(container).items():
                totals[name] += _count(raw)
        # Init containers run one at a time: the pod holds the larger of the two.
        for container in (spec or {}).get("initContainers") or ():
            for name, raw in _requests(container).items():
                totals[name] = max(totals[name], _count(raw))
        for name, n in totals.items():
            if name.startswith("nvidia.com/"):
                usage[(node, name)] += n
    return dict(usage)


def rows(inventory: Inventory, pods: Iterable[Mapping[str, Any]] = ()) -> list[Row]:
    """One row per pool and advertised resource, with what running pods hold."""
    usage = pod_usage(pods)
    out = []
    for pool in inventory.pools:
        for offer in pool.offers:
            held = sum(usage.get((node, offer.form.name), 0) for node in pool.nodes)
            memory = None
            if offer.memory_mib is not None:
                memory = offer.memory_mib // max(offer.replicas, 1)
            out.append(
                Row(
                    pool=pool.name,
                    config=pool.config_key,
                    nodes=pool.node_count or len(pool.nodes),
                    product=offer.product,
                    gpus=offer.devices,
                    sharing=offer.strategy,
                    replicas=offer.replicas,
                    resource=offer.form.name,
                    slots=offer.slots,
                    requested=held,
                    free=None if offer.slots is None else offer.slots - held,
                    memory_per_slot_mib=memory,
                )
            )
    return out


def total_line(table: list[Row]) -> str:
    """``GPU slots: 11 (NVIDIA-L20 x 8 + Tesla-T4 x 3)``."""
    known = [r for r in table if r.slots is not None]
    total = sum(r.slots or 0 for r in known)
    parts = " + ".join(
        f"{(r.product or r.pool).removesuffix('-SHARED')} x {r.slots}" for r in known
    )
    unknown = len(table) - len(known)
    tail = f"; {unknown} resource(s) of unknown size" if unknown else ""
    return f"GPU slots: {total} ({parts}){tail}" if parts else f"GPU slots: 0{tail}"


def text(inventory: Inventory, pods: Iterable[Mapping[str, Any]] = ()) -> str:
    """The table, the total and the disagreements, for a terminal."""
    table = rows(inventory, pods)
    headers = [
        "POOL",
        "NODES",
        "PRODUCT",
        "GPUS",
        "SHARING",
        "REPLICAS",
        "RESOURCE",
        "SLOTS",
        "REQUESTED",
        "FREE",
        "MIB/SLOT",
    ]

    def cell(v: Any) -> str:
        return "-" if v is None else str(v)

    data = [
        [
            r.pool,
            r.nodes,
            r.product,
            r.gpus,
            r.sharing,
            r.replicas,
            r.resource,
            r.slots,
            r.requested,
            r.free,
            r.memory_per_slot_mib,
        ]
        for r in table
    ]
    widths = [max(len(h), *(len(cell(row[i])) for row in data)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for row in data:
        lines.append("  ".join(cell(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    lines.append(total_line(table))
    lines.append(f"source: {inventory.source}")
    for problem in inventory.disagreements:
        lines.append(f"disagreement: {problem}")
    return "\n".join(lines) + "\n"


def as_json(inventory: Inventory, pods: Iterable[Mapping[str, Any]] = ()) -> str:
    """The same as ``text``, as one JSON document."""
    table = rows(inventory, pods)
    return json.dumps(
        {
            "source": inventory.source,
            "pools": [asdict(r) for r in table],
            "total_slots": sum(r.slots or 0 for r in table),
            "summary": total_line(table),
            "disagreements": list(inventory.disagreements),
        },
        indent=2,
    )
