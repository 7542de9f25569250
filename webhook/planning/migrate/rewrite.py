"""Workloads whose GPU request no DRA-backed extended resource can serve, rewritten to claims.

A container asking for a name whose class takes it over (``extendedResourceName``) is left
as it is: the scheduler turns the request into a claim of that class (KEP-5004). A container
asking for a shared name (``nvidia.com/gpu.shared``, or a name with ``replicas`` above one)
gets a claim instead: the pod names a ResourceClaimTemplate with one request per such
container, of the shared class (whose config is the driver's sharing), and the container
names its request in ``resources.claims``; the device-plugin name leaves its requests and
limits, and node selection on the device plugin's GFD labels (``nvidia.com/...``) leaves
the pod, since the class selects the devices (docs/migrate.md, "Rewritten workloads").
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.planning.migrate.classes import ClassPlan
from webhook.policy.quantity import QuantityError, parse_gpu_quantity
from webhook.policy.workloads import locate

CLAIM = "gpu"
_LISTS = ("initContainers", "containers")


@dataclass(frozen=True)
class Rewrite:
    """A workload's rewrite: the object with its pod spec rewritten, the template it names
    (None when nothing needed a claim), and why."""

    obj: dict[str, Any]
    template: dict[str, Any] | None
    changes: tuple[str, ...]


def choose_class(name: str, node: str | None, classes: Sequence[ClassPlan]) -> ClassPlan | None:
    """The class that will serve a request for ``name`` of a pod on ``node`` (None: not
    bound): the class of that node's devices, else the one taking ``name`` over."""
    serving = [c for c in classes if name in c.serves]
    if node is not None:
        for found in serving:
            if node in found.nodes:
                return found
    return next((c for c in serving if c.extended == name), serving[0] if serving else None)


def _count(raw: object) -> int:
    try:
        return parse_gpu_quantity(raw)
    except QuantityError:
        return 0


def _gpu_names(container: Mapping[str, Any]) -> dict[str, int]:
    resources = container.get("resources") or {}
    merged = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
    return {k: _count(v) for k, v in merged.items() if str(k).startswith("nvidia.com/")}


def rewrite_spec(
    spec: Mapping[str, Any], name: str, node: str | None, classes: Sequence[ClassPlan]
) -> tuple[dict[str, Any], dict[str, Any] | None, list[str]]:
    """The pod spec rewritten, the ResourceClaimTemplate spec it needs (``spec.spec``), and
    the changes made; ``name`` names the template."""
    out = copy.deepcopy(dict(spec))
    requests: list[dict[str, Any]] = []
    changes: list[str] = []
    for list_name in _LISTS:
        for container in out.get(list_name) or ():
            for resource, count in sorted(_gpu_names(container).items()):
                chosen = choose_class(resource, node, classes)
                if chosen is None or chosen.extended == resource:
                    continue
                request = _safe(str(container.get("name") or f"c{len(requests)}"))
                requests.append(
                    {
                        "name": request,
                        "exactly": {"deviceClassName": chosen.name, "count": max(count, 1)},
                    }
                )
                _to_claim(container, resource, request)
                changes.append(
                    f"container {container.get('name')}: {resource}: {count} -> claim {CLAIM} "
                    f"request {request} ({chosen.name})"
                )
    if not requests:
        return dict(spec), None, []
    refs = [r for r in out.get("resourceClaims") or () if r.get("name") != CLAIM]
    out["resourceClaims"] = [*refs, {"name": CLAIM, "resourceClaimTemplateName": name}]
    selector = out.get("nodeSelector")
    if isinstance(selector, dict):
        dropped = sorted(k for k in selector if str(k).startswith("nvidia.com/"))
        for key in dropped:
            del selector[key]
        if dropped:
            changes.append(f"nodeSelector {', '.join(dropped)} removed (the class selects)")
        if not selector:
            del out["nodeSelector"]
    return out, {"devices": {"requests": requests}}, changes


def _to_claim(container: dict[str, Any], resource: str, request: str) -> None:
    """Take ``resource`` out of the container's requests and limits; name the claim."""
    resources = container.setdefault("resources", {})
    for section in ("requests", "limits"):
        if resource in (resources.get(section) or {}):
            del resources[section][resource]
            if not resources[section]:
                del resources[section]
    resources.setdefault("claims", []).append({"name": CLAIM, "request": request})


def _safe(text: str) -> str:
    cleaned = "".join(c if c.isalnum() or c == "-" else "-" for c in text.lower()).strip("-")
    return cleaned[:63] or "gpu"


def rewrite(obj: Mapping[str, Any], node: str | None, classes: Sequence[ClassPlan]) -> Rewrite:
    """The workload (a Pod, Deployment, StatefulSet, Job, ...) rewritten to claims where its
    GPU requests need them, with its ResourceClaimTemplate (named ``<name>-gpu``)."""
    workload = locate(obj)
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or meta.get("generateName") or "workload").rstrip("-")
    if workload is None:
        return Rewrite(dict(obj), None, ())
    template_name = _safe(f"{name}-gpu")
    spec, claim, changes = rewrite_spec(workload.spec, template_name, node, classes)
    if claim is None:
        return Rewrite(dict(obj), None, ())
    out = copy.deepcopy(dict(obj))
    holder: Any = out
    for step in workload.path:
        holder = holder[step]
    holder["spec"] = spec
    for key in ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation"):
        out.get("metadata", {}).pop(key, None)
    out.pop("status", None)
    if out.get("kind") == "Pod":
        out["spec"].pop("nodeName", None)  # a resubmitted pod is scheduled anew
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": template_name, "namespace": meta.get("namespace") or "default"},
        "spec": {"spec": claim},
    }
    return Rewrite(out, template, tuple(changes))
