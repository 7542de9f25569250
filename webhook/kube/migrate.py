"""Reading a cluster for ``gpu-policy migrate``: whole objects, since the plan rewrites them.

Nodes, pods, the workload kinds, ResourceQuotas and (where served) the DRA kinds, listed page
by page (``webhook.kube.lister``). Unlike the audit's listing nothing is trimmed but the DRA
objects: a rewritten workload must keep every container.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from webhook.kube.lister import failure, list_pages, read_dra, workload_collections
from webhook.kube.raw import NODES, RESOURCE_QUOTAS, Collection
from webhook.kube.source import DRA_KINDS
from webhook.policy.workloads import API_VERSIONS


@dataclass
class ClusterRead:
    """What ``migrate`` reads of a cluster."""

    nodes: list[dict[str, Any]] = field(default_factory=list)
    objects: list[dict[str, Any]] = field(default_factory=list)
    quotas: list[dict[str, Any]] = field(default_factory=list)
    dra: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def read_for_migrate(
    api: client.ApiClient, *, page_size: int = 500, timeout: float = 30.0
) -> ClusterRead:
    """Every object ``migrate`` reads. Raises ClusterError with one line when a list fails."""
    out = ClusterRead()
    collections = {
        "Node": Collection(api, NODES),
        "ResourceQuota": Collection(api, RESOURCE_QUOTAS),
        **workload_collections(api),
    }
    kind = "Node"
    try:
        for kind, collection in collections.items():
            for page in list_pages(collection, page_size=page_size, timeout=timeout):
                for obj in page:
                    obj["kind"] = kind
                    # A list's items carry neither kind nor apiVersion; Nodes and
                    # ResourceQuotas are core v1.
                    obj["apiVersion"] = API_VERSIONS.get(kind, "v1")
                    if kind == "Node":
                        out.nodes.append(obj)
                    elif kind == "ResourceQuota":
                        out.quotas.append(obj)
                    else:
                        out.objects.append(obj)
    except Exception as exc:  # ApiException, and urllib3's several connection errors
        raise failure(f"listing {kind}s", exc) from None
    _, listed = read_dra(api, page_size=page_size, timeout=timeout)
    out.dra = {DRA_KINDS[name]: list(objects) for name, objects in listed.items()}
    return out
