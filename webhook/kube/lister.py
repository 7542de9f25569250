"""Listing the cluster once, page by page, for the audit; and connecting to it.

``connect_audit`` gives the client: a kubeconfig (and context), or with none the pod's
service account (in-cluster, what the chart's CronJob runs with). ``read_configmap`` reads
the device-plugin ConfigMap a policy's ``configMapRef`` names, with one get (RBAC can grant
just that name). Each kind is listed with ``limit``/``continue``; every page's raw JSON is
decoded with orjson (``webhook.kube.raw``, as the watchers do) and handed to the sink at
once, so that no more than one page of full objects is held: the sink
(``webhook.audit.Collector``) keeps only what GPU judgement needs. Nodes are trimmed to what
the engine reads and returned. Where API discovery finds ``resource.k8s.io/v1`` (and listing
it is allowed), DeviceClasses, ResourceSlices, ResourceClaims and ResourceClaimTemplates are
listed too: why pods with claims wait (docs/audit.md).
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

import orjson
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from webhook.kube.client import load_client
from webhook.kube.discovery import DraSupport, discover_dra, dra_collections
from webhook.kube.dryrun import connect
from webhook.kube.failures import describe_failure, status_message
from webhook.kube.raw import CONFIGMAP, NODES, PODS, Collection, call_json, custom_path, group_path
from webhook.kube.source import DRA_KINDS, NODEPOOLS
from webhook.kube.trim import dra_trimmer, trim_node, trim_nodepool
from webhook.policy.workloads import API_VERSIONS

__all__ = [
    "AUDIT_KINDS",
    "ClusterError",
    "Sink",
    "connect_audit",
    "failure",
    "list_pages",
    "read_configmap",
    "read_dra",
    "read_for_audit",
]

PAGE_SIZE = 500


class ClusterError(Exception):
    """The cluster could not be read: one line naming the kind and the cause."""


class Sink(Protocol):
    """What takes each page's items (``webhook.audit.Collector``)."""

    def add_all(self, objects: Iterable[Mapping[str, Any]], kind: str | None = None) -> None:
        """Read every object of one page."""


#: The kinds the audit lists besides nodes (the ClusterRole of the audit grants exactly these).
AUDIT_KINDS = ("Pod", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob")


def workload_collections(api: client.ApiClient) -> dict[str, Collection]:
    """The cluster-wide collections of :data:`AUDIT_KINDS`, by kind."""
    paths = {kind: group_path(API_VERSIONS[kind], kind.lower() + "s") for kind in AUDIT_KINDS[1:]}
    return {kind: Collection(api, path) for kind, path in {"Pod": PODS, **paths}.items()}


def list_pages(
    collection: Collection, *, page_size: int = PAGE_SIZE, timeout: float = 30.0
) -> Iterable[list[dict[str, Any]]]:
    """The items of a collection, one page (at most ``page_size`` objects) at a time."""
    token: str | None = None
    while True:
        resp = collection.get({"limit": page_size, "continue": token or None}, timeout=timeout)
        try:
            body = resp.data
        finally:
            resp.release_conn()
        doc = orjson.loads(body)
        del body  # the raw page can be large; do not hold it while the sink reads it
        token = (doc.get("metadata") or {}).get("continue")
        items = doc.get("items") or []
        del doc
        yield items
        if not token:
            return


def connect_audit(
    kubeconfig: str | None, context: str | None = None, **in_cluster: Any
) -> client.ApiClient:
    """A client for ``context`` of ``kubeconfig``, or (None) the pod's service account.

    ``in_cluster`` goes to :func:`webhook.kube.client.load_client` (``token_file``,
    ``ca_file``, ``environ``). Raises ClusterError with one line when neither can be used.
    """
    if kubeconfig is None:
        try:
            return load_client("in-cluster", **in_cluster)
        except (config.ConfigException, OSError) as exc:
            raise ClusterError(
                f"in-cluster configuration (the pod's service account): {exc} Give "
                "--kubeconfig, or run it in a pod that mounts its service account token"
            ) from None
    try:
        return connect(kubeconfig, context)
    except ValueError as exc:
        raise ClusterError(str(exc)) from None


def read_configmap(
    api: client.ApiClient, namespace: str, name: str, *, timeout: float = 30.0
) -> dict[str, Any] | None:
    """The ConfigMap ``namespace/name`` as a document, or None when there is none.

    Raises ClusterError (one line, with the fix) when it cannot be read.
    """
    try:
        return call_json(
            api, "GET", CONFIGMAP, params={"namespace": namespace, "name": name}, timeout=timeout
        )
    except Exception as exc:  # ApiException, and urllib3's several connection errors
        status = exc.status if isinstance(exc, ApiException) else None
        if status == 404:
            return None
        fix = (
            f"; grant get on configmaps {name!r} in namespace {namespace}" if status == 403 else ""
        )
        raise failure(f"reading ConfigMap {namespace}/{name}", exc, fix) from None


def read_nodepools(
    api: client.ApiClient, *, page_size: int = PAGE_SIZE, timeout: float = 30.0
) -> list[dict[str, Any]]:
    """Karpenter's NodePools, trimmed; none where the cluster has no Karpenter.

    A 404 (the CRD is not installed) or a 403 (the audit's role does not grant them) reads as
    none, as the webhook's watch does: the audit then knows no pools that can appear besides
    the policy's. Other failures raise ClusterError.
    """
    collection = Collection(api, custom_path(*NODEPOOLS))
    try:
        return [
            trim_nodepool(item)
            for page in list_pages(collection, page_size=page_size, timeout=timeout)
            for item in page
        ]
    except ApiException as exc:
        if exc.status in (403, 404):
            return []
        raise failure("listing NodePools", exc) from None
    except Exception as exc:  # urllib3's several connection errors
        raise failure("listing NodePools", exc) from None


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while the pages are decoded and read.

    A page of 500 pods decodes to some 75,000 dicts, lists and strings; allocating them sets
    off the collector's generation scans again and again (two thirds of the listing's CPU time
    at 100,000 pods, ``bench/audit.py``) and they find nothing: decoded JSON holds no reference
    cycles, so each page is freed by reference counting as soon as the sink is done with it.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def read_for_audit(
    api: client.ApiClient, sink: Sink, *, page_size: int = PAGE_SIZE, timeout: float = 30.0
) -> list[dict[str, Any]]:
    """List every audited kind into ``sink``, page by page; return the (trimmed) nodes.

    Where the cluster serves DRA, the DRA kinds (:func:`read_dra`) go into ``sink`` too.
    ``api`` comes from :func:`connect_audit` (the caller closes it). Raises ClusterError with
    one line (the kind, the HTTP status or the connection error) when a list fails.
    """
    kind = "Node"
    try:
        with _collector_paused():
            nodes = [
                trim_node(node)
                for page in list_pages(Collection(api, NODES), page_size=page_size, timeout=timeout)
                for node in page
            ]
            for kind, collection in workload_collections(api).items():
                for page in list_pages(collection, page_size=page_size, timeout=timeout):
                    sink.add_all(page, kind=kind)
    except Exception as exc:  # ApiException, and urllib3's several connection errors
        raise failure(f"listing {kind}s", exc) from None
    _, listed = read_dra(api, page_size=page_size, timeout=timeout)
    for name, objects in listed.items():
        if objects:
            sink.add_all(objects, kind=DRA_KINDS[name])
    return nodes


def read_dra(
    api: client.ApiClient, *, page_size: int = PAGE_SIZE, timeout: float = 30.0
) -> tuple[DraSupport, dict[str, list[dict[str, Any]]]]:
    """DeviceClasses, ResourceSlices, ResourceClaims and ResourceClaimTemplates (trimmed, by
    the names of ``webhook.kube.source.DRA_KINDS``), listed page by page where discovery finds
    DRA; empty lists, and why, where it does not (docs/dra.md, "Detection").

    Raises ClusterError with one line when the API server cannot be asked or a list fails.
    """
    kinds = tuple(DRA_KINDS)
    try:
        found = discover_dra(api, kinds=kinds, timeout=timeout)
    except Exception as exc:  # ApiException, and urllib3's several connection errors
        raise failure("discovering resource.k8s.io", exc) from None
    listed: dict[str, list[dict[str, Any]]] = {kind: [] for kind in kinds}
    if not found.available:
        return found, listed
    collections = dra_collections(api)
    kind = kinds[0]
    try:
        for kind in kinds:
            trim = dra_trimmer(DRA_KINDS[kind])
            for page in list_pages(collections[kind], page_size=page_size, timeout=timeout):
                listed[kind] += [trim(obj) for obj in page]
    except Exception as exc:  # as above
        raise failure(f"listing {kind}", exc) from None
    return found, listed


def failure(doing: str, exc: Exception, fix: str = "") -> ClusterError:
    """One line: what failed, how (the HTTP status and the API server's message, or the
    connection error), then ``fix``."""
    said = status_message(exc) if isinstance(exc, ApiException) else ""
    return ClusterError(f"{doing}: {describe_failure(exc)}{said}{fix}")
