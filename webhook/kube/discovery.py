"""Whether the cluster serves Dynamic Resource Allocation (``resource.k8s.io/v1``), and whether
we may read it.

A 1.28 API server has no ``resource.k8s.io/v1`` (at most ``v1alpha2``, behind a feature gate),
nor does a newer one started with ``--runtime-config=resource.k8s.io/v1=false``: API discovery
(``GET /apis``) says so, and the webhook then runs on device-plugin resources alone. Where the
group is served but our ServiceAccount may not list its kinds (a chart older than the image),
watching them would never sync and keep the webhook unready: a one-item list of each kind
finds that out first, and DRA is reported as not readable instead (docs/dra.md, "Detection").
"""

from __future__ import annotations

from dataclasses import dataclass

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from webhook.kube.raw import API_GROUPS, Collection, call_json, group_path
from webhook.policy.dra import API_GROUP, API_VERSION

__all__ = ["DraSupport", "discover_dra", "dra_collections"]


@dataclass(frozen=True)
class DraSupport:
    """What discovery found: ``available`` to watch the DRA kinds; ``detail`` says why not."""

    available: bool
    detail: str

    def describe(self) -> str:
        """``DRA available`` or ``DRA is not available: <why>``: for logs and /readyz."""
        return "DRA available" if self.available else f"DRA is not available: {self.detail}"


#: The DRA kinds' collections, cluster-wide, by the names the watchers and the audit use
#: (their plurals); resourceclaimtemplates are what pods' spec.resourceClaims refer to, for the
#: claim rules (docs/dra-claims.md).
DRA_PLURALS = ("deviceclasses", "resourceslices", "resourceclaims", "resourceclaimtemplates")


def dra_collections(api: client.ApiClient) -> dict[str, Collection]:
    """The collections of the DRA kinds, by the names the watchers and the audit use."""
    return {plural: Collection(api, group_path(API_VERSION, plural)) for plural in DRA_PLURALS}


def _served_versions(api: client.ApiClient, timeout: float) -> list[str]:
    doc = call_json(api, "GET", API_GROUPS, timeout=timeout)
    for group in doc.get("groups") or ():
        if group.get("name") == API_GROUP:
            return [str(v.get("groupVersion")) for v in group.get("versions") or ()]
    return []


def discover_dra(
    api: client.ApiClient, *, kinds: tuple[str, ...], timeout: float = 10.0
) -> DraSupport:
    """Ask the API server whether it serves ``resource.k8s.io/v1`` and lets us list ``kinds``
    (names of :func:`dra_collections`).

    Raises what the client raises when the API server cannot be reached or answers 5xx: the
    caller retries, as for any list.
    """
    try:
        versions = _served_versions(api, timeout)
    except ApiException as exc:
        if exc.status != 404:
            raise
        # Only something short of an API server (a test double, a proxy that passes the core
        # group alone) answers /apis with 404: it serves no resource.k8s.io either.
        return DraSupport(False, "the API server answers no API discovery (GET /apis: 404)")
    if API_VERSION not in versions:
        served = f" (it serves {', '.join(sorted(versions))})" if versions else ""
        return DraSupport(False, f"the API server does not serve {API_VERSION}{served}")
    collections = dra_collections(api)
    for kind in kinds:
        try:
            resp = collections[kind].get({"limit": 1}, timeout=timeout)
            # Read the answer out before the connection goes back to the pool: an unread body
            # would be the next request's status line on that connection (BadStatusLine).
            resp.drain_conn()
            resp.release_conn()
        except ApiException as exc:
            if exc.status in (401, 403):
                return DraSupport(
                    False,
                    f"listing {kind} is forbidden (HTTP {exc.status}): grant get, list and "
                    f"watch on {kind} in {API_GROUP} to the webhook's ServiceAccount",
                )
            if exc.status == 404:
                return DraSupport(False, f"the API server does not serve {kind} in {API_VERSION}")
            raise
    return DraSupport(True, f"{API_VERSION} served")
