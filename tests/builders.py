"""Builders for test objects: pods and containers asking for GPUs."""

from __future__ import annotations

from typing import Any


def pod(
    *containers: dict[str, Any],
    name: str = "p",
    namespace: str = "default",
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A Pod with the given containers (see ``ctr``) and extra spec fields."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations:
        meta["annotations"] = annotations
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
    **extra: Any,
) -> dict[str, Any]:
    """A container asking for the given limits and requests."""
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    return {"name": name, "image": "registry.example/app:1", "resources": resources, **extra}


def gpu(n: Any = 1, name: str = "nvidia.com/gpu") -> dict[str, Any]:
    """A container asking for ``n`` of ``name`` in limits only."""
    return ctr(limits={name: n})
