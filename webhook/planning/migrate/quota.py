"""ResourceQuota equivalents for the plan's DeviceClasses (docs/migrate.md, "Quotas").

Kubernetes counts a claim's devices per class under
``<class>.deviceclass.resource.k8s.io/devices`` (the quota evaluator for ResourceClaims), and
devices requested through a DRA-backed extended resource under ``requests.<name>`` too, which
also counts the device plugin's (the ResourceQuota documentation). So a quota on a name a class
takes over keeps its ``requests.`` key and gains the class's key with the same number; a quota
on shared slots becomes whole devices, since a claim takes a device, not a share of one: that
is said, not hidden.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.planning.migrate.classes import ClassPlan
from webhook.policy.quantity import QuantityError, parse_gpu_quantity

PER_CLASS = ".deviceclass.resource.k8s.io/devices"


@dataclass(frozen=True)
class QuotaPlan:
    """One ResourceQuota rewritten: the object, and what could not be kept as it was."""

    namespace: str
    name: str
    obj: dict[str, Any]
    notes: tuple[str, ...]


def _count(raw: object) -> int | None:
    try:
        return parse_gpu_quantity(raw)
    except QuantityError:
        return None


def plan_quota(quota: Mapping[str, Any], classes: Sequence[ClassPlan]) -> QuotaPlan | None:
    """The equivalent of ``quota`` (None when it limits no NVIDIA name)."""
    meta = quota.get("metadata") or {}
    hard = dict((quota.get("spec") or {}).get("hard") or {})
    added: dict[str, str] = {}
    notes: list[str] = []
    touched = False
    for key, raw in sorted(hard.items()):
        name = str(key).removeprefix("requests.")
        if not name.startswith("nvidia.com/"):
            continue
        touched = True
        count = _count(raw)
        served = [c for c in classes if name in c.serves]
        if count is None or not served:
            notes.append(f"{key}: {raw} kept; no class of the plan serves {name}")
            continue
        for found in served:
            class_key = found.name + PER_CLASS
            if found.extended == name:
                added[class_key] = str(count)
                continue
            devices = math.ceil(count / max(found.replicas, 1))
            added[class_key] = str(devices)
            notes.append(
                f"{key}: {raw} shared slots ({found.replicas} per device) become "
                f"{class_key}: {devices} whole devices: a claim takes a device, so the quota "
                f"bounds the GPUs ({devices}), not the pods ({count}); a per-pod share of a GPU "
                "cannot be expressed"
            )
    if not touched:
        return None
    out = copy.deepcopy(dict(quota))
    out["apiVersion"], out["kind"] = "v1", "ResourceQuota"
    out["metadata"] = {"name": meta.get("name"), "namespace": meta.get("namespace")}
    out.pop("status", None)
    out.setdefault("spec", {})["hard"] = {**hard, **added}
    return QuotaPlan(
        str(meta.get("namespace") or ""), str(meta.get("name") or ""), out, tuple(notes)
    )
