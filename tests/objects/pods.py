"""Pods: as a user writes them (:func:`pod` of :func:`ctr` containers) and as the API server
lists them (:func:`listed_pod`: status, owner, a sidecar)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from tests.objects.workloads import owner, uid

#: The audit's "now" in the tests: pods created before it have waited since.
NOW = datetime(2025, 7, 14, 8, 18, 53, tzinfo=UTC)


def pod(
    *containers: dict[str, Any],
    name: str = "p",
    namespace: str | None = "default",
    annotations: dict[str, str] | None = None,
    claims: Sequence[str] = (),
    **spec: Any,
) -> dict[str, Any]:
    """A Pod with the given containers (see ``ctr``) and extra spec fields; ``namespace``
    None leaves it to the request (a create in a test's own namespace); ``claims``: the
    ResourceClaims it names (``resourceClaims`` entries of the claims' own names)."""
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    if annotations:
        meta["annotations"] = annotations
    if claims:
        spec["resourceClaims"] = [{"name": c, "resourceClaimName": c} for c in claims]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": list(containers), **spec},
    }


def ctr(
    name: str = "main",
    *,
    limits: dict[str, Any] | None = None,
    requests: dict[str, Any] | None = None,
    claims: Sequence[str] = (),
    **extra: Any,
) -> dict[str, Any]:
    """A container asking for the given limits and requests, and using the pod's claims of
    the names in ``claims``."""
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    if claims:
        resources["claims"] = [{"name": c} for c in claims]
    return {"name": name, "image": "registry.example/app:1", "resources": resources, **extra}


def token_mount(token: str) -> dict[str, Any]:
    """The volume mount of the ServiceAccount admission's token volume ``kube-api-access-`` +
    ``token`` (the API server draws 5 random characters per pod)."""
    return {
        "name": f"kube-api-access-{token}",
        "readOnly": True,
        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
    }


def token_volume(token: str) -> dict[str, Any]:
    """The ServiceAccount admission's token volume ``kube-api-access-`` + ``token``, as it
    adds it to every pod that mounts a ServiceAccount token (its sources as on 1.36)."""
    return {
        "name": f"kube-api-access-{token}",
        "projected": {
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {
                    "configMap": {
                        "name": "kube-root-ca.crt",
                        "items": [{"key": "ca.crt", "path": "ca.crt"}],
                    }
                },
            ],
            "defaultMode": 420,
        },
    }


def replica(name: str, *, token: str = "x7k2p", **spec: Any) -> dict[str, Any]:
    """A pod of one workload as the API server hands it to the webhooks: one container asking
    for one GPU, its own name and uid, and the ServiceAccount admission's token volume with a
    name of its own (``token``); ``spec``: more spec fields."""
    obj = pod(
        ctr("main", limits={"nvidia.com/gpu": 1}, volumeMounts=[token_mount(token)]),
        name=name,
        namespace="ml",
        volumes=[token_volume(token)],
        **spec,
    )
    obj["metadata"]["uid"] = uid("pod", name, token)
    return obj


def gpu(n: Any = 1, name: str = "nvidia.com/gpu") -> dict[str, Any]:
    """A container asking for ``n`` of ``name`` in limits only."""
    return ctr(limits={name: n})


def claim_pod(
    name: str, template: str, *, namespace: str | None = None, **spec: Any
) -> dict[str, Any]:
    """A Pod whose one container uses the claim ``gpu``, made from the ResourceClaimTemplate
    ``template``; ``namespace`` None leaves it to the request; ``spec``: more spec fields."""
    return pod(
        ctr(claims=["gpu"]),
        name=name,
        namespace=namespace,
        resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": template}],
        **spec,
    )


def listed_pod(
    name: str,
    namespace: str = "ml",
    *,
    gpu: dict[str, Any] | None = None,
    node: str | None = None,
    phase: str | None = None,
    owned_by: tuple[str, str] | None = None,
    created: str = "2025-06-15T02:37:12Z",
    scheduler: str | None = None,
    reason: str | None = None,
    message: str | None = None,
    annotations: dict[str, str] | None = None,
    init_gpu: dict[str, str] | None = None,
    claims: Sequence[dict[str, str]] = (),
    generated: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A Pod as the API returns it: the GPU container, a sidecar, status, uid and owner.

    ``gpu`` (``{resource: quantity}``) goes into the first container's requests and limits,
    ``init_gpu`` into an init container's; ``claims`` are its ``resourceClaims`` entries, all
    used by the first container, and ``generated`` the names of the claims made for them
    from templates (``status.resourceClaimStatuses``); ``node`` binds it (phase Running
    unless given); unbound pods are Pending with ``scheduler`` as the PodScheduled message.
    """
    limits = {"cpu": "1", "memory": "2Gi", **(gpu or {})}
    resources: dict[str, Any] = {"limits": limits, "requests": dict(limits)}
    if claims:
        resources["claims"] = [{"name": c["name"]} for c in claims]
        spec["resourceClaims"] = list(claims)
    containers = [
        {"name": "main", "image": "registry.example/infer:1", "resources": resources},
        {"name": "proxy", "image": "envoy:1", "resources": {"requests": {"cpu": "100m"}}},
    ]
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid(namespace, "Pod", name),
        "creationTimestamp": created,
    }
    if owned_by:
        meta["ownerReferences"] = [owner(owned_by[0], owned_by[1], namespace)]
    if annotations:
        meta["annotations"] = annotations
    body: dict[str, Any] = {"containers": containers, **spec}
    if init_gpu:
        body["initContainers"] = [
            {
                "name": "warmup",
                "image": "registry.example/infer:1",
                "resources": {"requests": init_gpu, "limits": init_gpu},
            }
        ]
    status: dict[str, Any] = {}
    if node:
        body["nodeName"] = node
        status["phase"] = phase or "Running"
        status["conditions"] = [{"type": "PodScheduled", "status": "True"}]
    else:
        status["phase"] = phase or "Pending"
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": scheduler or "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
            }
        ]
    if generated:
        status["resourceClaimStatuses"] = [
            {"name": k, "resourceClaimName": v} for k, v in generated.items()
        ]
    if reason:
        status["reason"] = reason
    if message:
        status["message"] = message
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body, "status": status}
