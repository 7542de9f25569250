"""Cut pods and workloads down to what GPU judgement reads, in their Kubernetes shape.

A pod is 5-20 KB of JSON (managedFields, env, probes, volumes, container statuses); judging
its GPU request reads a few hundred bytes of it. The audit must hold every GPU pod of a
100,000-pod cluster at once (the holders of a slot are only known when every pod has been
read), so each object is trimmed as soon as it is read and the rest is dropped:

* objects that ask for no GPU are dropped whole (most pods of a cluster);
* metadata keeps name, namespace, uid, creationTimestamp, the controller owner and the
  ``gpu-policy.io/`` annotations;
* the pod spec keeps the containers that ask for GPUs (``nvidia.com/gpu*``,
  ``nvidia.com/mig-*``): their name, those resources and an init container's
  ``restartPolicy``; then ``nodeName``, ``nodeSelector``,
  the node affinity, the tolerations and ``resourceClaims`` (DRA: a pod with claims is kept
  even when no container asks for a GPU resource, since its claims may ask for GPUs);
* the status keeps phase, reason, message, the ``PodScheduled`` condition and
  ``resourceClaimStatuses`` (the names of the claims made from templates).

The result is still a Pod, Deployment, ... that ``review()`` judges as it judges a manifest.
Strings that repeat across thousands of pods (namespaces, node names, resource names, kinds)
are interned. Pure functions on plain dicts.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from webhook.policy.nodes import is_gpu_resource
from webhook.policy.workloads import API_VERSIONS, TEMPLATE_PATHS, dig

__all__ = [
    "ADMISSION_ERROR",
    "MESSAGE_LIMIT",
    "WORKLOAD_KINDS",
    "trim",
    "trim_pod",
    "trim_pod_spec",
    "trim_workload",
]

#: The kubelet's reason on a pod whose devices could not be allocated at admission.
ADMISSION_ERROR = "UnexpectedAdmissionError"
#: The kinds besides Pod that own GPU pods: the audit lists every kind of ``API_VERSIONS``.
WORKLOAD_KINDS = tuple(k for k in API_VERSIONS if k != "Pod")
#: Status and condition messages are quoted to users; a pathological one is cut here.
MESSAGE_LIMIT = 1000
_ANNOTATION_PREFIX = "gpu-policy.io/"
_intern = sys.intern


def _text(value: Any, limit: int = MESSAGE_LIMIT) -> str:
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _gpu_section(section: Any) -> dict[str, Any]:
    if not isinstance(section, Mapping):
        return {}
    return {_intern(k): v for k, v in section.items() if isinstance(k, str) and is_gpu_resource(k)}


def _container(container: Any, *, init: bool) -> dict[str, Any] | None:
    if not isinstance(container, Mapping):
        return None
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        return None
    kept: dict[str, Any] = {}
    for part in ("requests", "limits"):
        section = _gpu_section(resources.get(part))
        if section:
            kept[part] = section
    if not kept:
        return None
    out: dict[str, Any] = {"name": str(container.get("name", "")), "resources": kept}
    # A restartable init container (a native sidecar) keeps its devices while the pod runs.
    if init and container.get("restartPolicy") == "Always":
        out["restartPolicy"] = "Always"
    return out


def _containers(items: Any, *, init: bool) -> list[dict[str, Any]]:
    if not isinstance(items, list):
        return []
    return [c for c in (_container(item, init=init) for item in items) if c is not None]


def trim_pod_spec(spec: Any) -> dict[str, Any] | None:
    """The GPU-relevant part of a pod spec, or None when no container asks for a GPU.

    Ephemeral containers are left out: the API server refuses resources on them.
    """
    if not isinstance(spec, Mapping):
        return None
    containers = _containers(spec.get("containers"), init=False)
    init_containers = _containers(spec.get("initContainers"), init=True)
    claims = _claims(spec.get("resourceClaims"))
    if not containers and not init_containers and not claims:
        return None
    out: dict[str, Any] = {}
    if claims:
        out["resourceClaims"] = claims
    if init_containers:
        out["initContainers"] = init_containers
    out["containers"] = containers
    node_name = spec.get("nodeName")
    if isinstance(node_name, str) and node_name:
        out["nodeName"] = _intern(node_name)
    selector = spec.get("nodeSelector")
    if isinstance(selector, Mapping) and selector:
        out["nodeSelector"] = {_intern(str(k)): _intern(str(v)) for k, v in selector.items()}
    affinity = spec.get("affinity")
    if isinstance(affinity, Mapping) and isinstance(affinity.get("nodeAffinity"), Mapping):
        # Pod (anti-)affinity is about other pods, not GPUs: only node affinity is kept.
        out["affinity"] = {"nodeAffinity": affinity["nodeAffinity"]}
    tolerations = spec.get("tolerations")
    if isinstance(tolerations, list) and tolerations:
        out["tolerations"] = [
            {_intern(k): v for k, v in t.items() if k != "tolerationSeconds"}
            for t in tolerations
            if isinstance(t, Mapping)
        ]
    return out


def _claims(refs: Any) -> list[dict[str, str]]:
    """A pod's ``spec.resourceClaims``: each entry's name and its claim or template name."""
    if not isinstance(refs, list):
        return []
    keys = ("name", "resourceClaimName", "resourceClaimTemplateName")
    return [
        {k: str(r[k]) for k in keys if isinstance(r.get(k), str) and r[k]}
        for r in refs
        if isinstance(r, Mapping)
        and (r.get("resourceClaimName") or r.get("resourceClaimTemplateName"))
    ]


def _metadata(meta: Any) -> dict[str, Any]:
    meta = meta if isinstance(meta, Mapping) else {}
    out: dict[str, Any] = {"name": str(meta.get("name") or meta.get("generateName") or "")}
    namespace = meta.get("namespace")
    if isinstance(namespace, str) and namespace:
        out["namespace"] = _intern(namespace)
    for key in ("uid", "creationTimestamp"):
        value = meta.get(key)
        if value:
            out[key] = str(value)
    owners = meta.get("ownerReferences")
    if isinstance(owners, list):
        refs = [r for r in owners if isinstance(r, Mapping) and r.get("kind") and r.get("name")]
        # The controller is the owner that decides how many pods exist; others are bookkeeping.
        chosen = [r for r in refs if r.get("controller")] or refs[:1]
        if chosen:
            ref = chosen[0]
            out["ownerReferences"] = [
                {
                    "apiVersion": _intern(str(ref.get("apiVersion", ""))),
                    "kind": _intern(str(ref["kind"])),
                    "name": str(ref["name"]),
                    "uid": str(ref.get("uid", "")),
                    "controller": True,
                }
            ]
    annotations = _annotations(meta)
    if annotations:
        out["annotations"] = annotations
    return out


def _annotations(meta: Any) -> dict[str, str]:
    if not isinstance(meta, Mapping):
        return {}
    annotations = meta.get("annotations")
    if not isinstance(annotations, Mapping):
        return {}
    return {
        _intern(k): v
        for k, v in annotations.items()
        if isinstance(k, str) and k.startswith(_ANNOTATION_PREFIX)
    }


def _status(status: Any) -> dict[str, Any]:
    status = status if isinstance(status, Mapping) else {}
    out: dict[str, Any] = {"phase": _intern(str(status.get("phase") or "Pending"))}
    for key in ("reason", "message"):
        value = status.get(key)
        if value:
            out[key] = _intern(str(value)) if key == "reason" else _text(value)
    for condition in status.get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == "PodScheduled":
            kept = {"type": "PodScheduled", "status": str(condition.get("status", ""))}
            for key in ("reason", "message", "lastTransitionTime"):
                if condition.get(key):
                    kept[key] = _text(condition[key])
            out["conditions"] = [kept]
            break
    claims = status.get("resourceClaimStatuses")
    if isinstance(claims, list) and claims:
        out["resourceClaimStatuses"] = [
            {k: str(c[k]) for k in ("name", "resourceClaimName") if c.get(k)}
            for c in claims
            if isinstance(c, Mapping)
        ]
    return out


def trim_pod(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    """A GPU pod cut down to what judging and diagnosing it read, or None.

    None for pods that ask for no GPU, and for finished pods, which
    hold no device: Succeeded ones, and Failed ones except those the kubelet refused at
    admission (``UnexpectedAdmissionError``), which the audit reports.
    """
    status = pod.get("status")
    phase = status.get("phase") if isinstance(status, Mapping) else None
    if phase == "Succeeded":
        return None
    if phase == "Failed" and (status or {}).get("reason") != ADMISSION_ERROR:
        return None
    spec = trim_pod_spec(pod.get("spec"))
    if spec is None:
        return None
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(pod.get("metadata")),
        "spec": spec,
        "status": _status(status),
    }


def trim_workload(obj: Mapping[str, Any], kind: str) -> dict[str, Any] | None:
    """A workload (Deployment, ..., CronJob) cut down to its GPU pod template, or None.

    None when its pod template asks for no GPU. Kept: metadata as for
    pods, ``spec.replicas`` when set, and the template's ``gpu-policy.io/`` annotations and
    trimmed spec, at the path the kind keeps them (``spec.jobTemplate.spec.template`` for a
    CronJob).
    """
    path = TEMPLATE_PATHS.get(kind)
    if not path:
        return None
    node = dig(obj, path)
    if not isinstance(node, Mapping):
        return None
    spec = trim_pod_spec(node.get("spec"))
    if spec is None:
        return None
    template: dict[str, Any] = {"spec": spec}
    annotations = _annotations(node.get("metadata"))
    if annotations:
        template["metadata"] = {"annotations": annotations}
    # Rebuild the path from the inside out: {"spec": {"template": ...}} for most kinds.
    inner: dict[str, Any] = template
    for step in reversed(path[1:]):
        inner = {step: inner}
    top_spec: dict[str, Any] = dict(inner)
    obj_spec = obj.get("spec")
    if isinstance(obj_spec, Mapping) and isinstance(obj_spec.get("replicas"), int):
        top_spec["replicas"] = obj_spec["replicas"]
    return {
        "apiVersion": _intern(str(obj.get("apiVersion") or API_VERSIONS[kind])),
        "kind": _intern(kind),
        "metadata": _metadata(obj.get("metadata")),
        "spec": top_spec,
    }


def trim(obj: Mapping[str, Any], kind: str | None = None) -> dict[str, Any] | None:
    """Trim a Pod or a workload; None for other kinds and for objects without a GPU request.

    ``kind`` names the kind of objects that carry none, as the items of an API list do.
    """
    found = obj.get("kind")
    kind = found if isinstance(found, str) and found else kind
    if kind == "Pod":
        return trim_pod(obj)
    if kind in WORKLOAD_KINDS:
        return trim_workload(obj, kind)
    return None
