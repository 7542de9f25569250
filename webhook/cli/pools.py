"""The pool table of ``gpu-policy inventory``, also shown before and after by ``gpu-policy plan``.

Per pool (config key and GPU model) and advertised resource: nodes, product, physical GPUs,
sharing strategy, replicas, slots, the slots running pods hold and the free ones; the total
("GPU slots: 11 (NVIDIA-L20 x 8 + Tesla-T4 x 3)"), the DRA DeviceClasses, and any
label/allocatable disagreement. As text for a terminal, or as one JSON document.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from webhook.audit.requests import pod_requests
from webhook.cli.render import cell, table, to_json
from webhook.policy import Inventory
from webhook.policy.dra import dra_product


@dataclass(frozen=True)
class Row:
    """One advertised resource of one pool."""

    pool: str
    config: str | None
    origin: str
    origin_name: str | None
    scaling: str | None
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


def _pod_spec(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """A Pod's spec; for a trimmed pod of the live watch, a spec made of its GPU requests."""
    if "spec" in pod:
        return pod.get("spec") or {}
    return {
        "nodeName": pod.get("nodeName"),
        **{
            field: [{"resources": {"requests": c.get("requests") or {}}} for c in pod[field]]
            for field in ("containers", "initContainers")
            if pod.get(field)
        },
    }


def pod_usage(pods: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], int]:
    """Slots held per (node, resource): the pod's effective request, as the scheduler counts it.

    Accepts Pod objects or the trimmed pods of the live watch. Pending pods hold nothing. The
    count is the audit's (``webhook.audit.requests.pod_requests``): per resource, a request or
    else its limit; init containers and native sidecars as the scheduler adds them up.
    """
    usage: dict[tuple[str, str], int] = defaultdict(int)
    for pod in pods:
        spec = _pod_spec(pod)
        node = spec.get("nodeName")
        phase = ((pod.get("status") or {}).get("phase")) if "status" in pod else pod.get("phase")
        if not node or phase in ("Succeeded", "Failed"):
            continue
        for name, n in pod_requests(spec).items():
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
                    origin=pool.origin.kind,
                    origin_name=pool.origin.name,
                    scaling=None if pool.scaling is None else pool.scaling.describe(),
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


def total_line(found: list[Row]) -> str:
    """``GPU slots: 11 (NVIDIA-L20 x 8 + Tesla-T4 x 3)``."""
    known = [r for r in found if r.slots is not None]
    total = sum(r.slots or 0 for r in known)
    parts = " + ".join(
        f"{(r.product or r.pool).removesuffix('-SHARED')} x {r.slots}" for r in known
    )
    unknown = len(found) - len(known)
    tail = f"; {unknown} resource(s) of unknown size" if unknown else ""
    return f"GPU slots: {total} ({parts}){tail}" if parts else f"GPU slots: 0{tail}"


HEADERS = (
    "POOL",
    "ORIGIN",
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
)


def origin_cell(row: Row) -> str:
    """``nodes``, ``policy, 0-4 nodes``, ``NodePool gpu-t4, from zero``: the ORIGIN column.

    The policy file is named once, in the ``source:`` line; a NodePool by its name.
    """
    where = {"karpenter": "NodePool"}.get(row.origin)
    what = f"{where} {row.origin_name}" if where else row.origin
    return what if row.scaling is None else f"{what}, {row.scaling}"


def text(inventory: Inventory, pods: Iterable[Mapping[str, Any]] = ()) -> str:
    """The table, the total and the disagreements, for a terminal."""
    found = rows(inventory, pods)
    data = [
        [
            cell(v)
            for v in (
                r.pool,
                origin_cell(r),
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
            )
        ]
        for r in found
    ]
    lines = table(HEADERS, data)
    total = total_line(found)
    if inventory.dra is not None and inventory.dra.devices:
        # DRA's devices are no pool of slots: the classes' table lists them.
        total += f"; DRA devices: {len(inventory.dra.devices)} (by DeviceClass below)"
    lines.append(total)
    classes = dra_classes(inventory)
    if classes:
        lines.append("")
        lines += table(
            ("DEVICECLASS", "SERVES", "DEVICES"),
            [[c["name"], ", ".join(c["serves"]), c["devices"]] for c in classes],
        )
    lines.append(f"source: {inventory.source}")
    lines += [f"disagreement: {problem}" for problem in inventory.disagreements]
    return "\n".join(lines) + "\n"


def as_json(inventory: Inventory, pods: Iterable[Mapping[str, Any]] = ()) -> str:
    """The same as ``text``, as one JSON document."""
    found = rows(inventory, pods)
    return to_json(
        {
            "source": inventory.source,
            "pools": [asdict(r) for r in found],
            "total_slots": sum(r.slots or 0 for r in found),
            "summary": total_line(found),
            "disagreements": [str(d) for d in inventory.disagreements],
            "deviceClasses": dra_classes(inventory),
        }
    )


def dra_classes(inventory: Inventory) -> list[dict[str, Any]]:
    """Per DRA DeviceClass: the extended resource names it serves and the devices it selects
    (``8: NVIDIA-A100-SXM4-40GB x 8``); [] where the inventory has no DRA side."""
    dra = inventory.dra
    if dra is None:
        return []
    out = []
    for name in sorted(dra.classes):
        device_class = dra.classes[name]
        devices, _ = dra.class_devices(name)
        kinds: dict[str, int] = defaultdict(int)
        for device in devices:
            model, profile = dra_product(device)
            kinds[" ".join(p for p in (model or "unknown product", profile) if p)] += 1
        listed = ", ".join(f"{k} x {n}" for k, n in sorted(kinds.items()))
        serves = [
            n for n in device_class.resource_names if dra.class_for_resource(n) is device_class
        ]
        out.append(
            {
                "name": name,
                "serves": serves,
                "devices": f"{len(devices)}: {listed}" if devices else "0",
            }
        )
    return out
