"""Where the pod specs are in the objects the webhook reviews."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from webhook.policy.records import per_review_record

#: The apiVersion each kind that holds GPU pods is served at: the kinds the audit and
#: ``gpu-policy migrate`` list from a cluster, whose list items carry neither kind nor
#: apiVersion.
API_VERSIONS: dict[str, str] = {
    "Pod": "v1",
    **dict.fromkeys(("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet"), "apps/v1"),
    **dict.fromkeys(("Job", "CronJob"), "batch/v1"),
}
# kind -> path of the pod template (metadata + spec) inside the object; () for a Pod itself.
TEMPLATE_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": (),
    "PodTemplate": ("template",),
    "Deployment": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "Job": ("spec", "template"),
    "ReplicationController": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


@per_review_record
class Workload:
    """The pod (or pod template) inside an object: its metadata and spec, and where they are."""

    kind: str
    path: tuple[str, ...]
    metadata: Mapping[str, Any]
    spec: Mapping[str, Any]


def dig(obj: object, path: Iterable[str]) -> Any:
    """The value at ``path`` (keys of nested objects) in ``obj``; None where a step is missing."""
    node: Any = obj
    for step in path:
        if not isinstance(node, dict):
            return None
        node = node.get(step)
    return node


def locate(obj: Mapping[str, Any]) -> Workload | None:
    """The pod spec of ``obj``, or None for kinds without one (or a template without a spec)."""
    kind = obj.get("kind")
    if not isinstance(kind, str) or kind not in TEMPLATE_PATHS:
        return None
    node = dig(obj, TEMPLATE_PATHS[kind])
    if not isinstance(node, dict):
        return None
    spec = node.get("spec")
    if not isinstance(spec, dict):
        return None
    metadata = node.get("metadata")
    return Workload(
        kind, TEMPLATE_PATHS[kind], metadata if isinstance(metadata, dict) else {}, spec
    )


def containers(spec: Mapping[str, Any]) -> Iterator[tuple[str, int, Mapping[str, Any]]]:
    """(list name, index, container) for every container, init and ephemeral ones included."""
    for list_name in CONTAINER_LISTS:
        items = spec.get(list_name)
        if not isinstance(items, list):
            continue
        for i, container in enumerate(items):
            if isinstance(container, dict):
                yield list_name, i, container


def container_label(list_name: str, container: Mapping[str, Any], index: int) -> str:
    """How messages name a container: ``container "main"``, ``init container "setup"``."""
    name = container.get("name")
    shown = f'"{name}"' if isinstance(name, str) and name else f"#{index}"
    prefix = {"initContainers": "init container", "ephemeralContainers": "ephemeral container"}
    return f"{prefix.get(list_name, 'container')} {shown}"
