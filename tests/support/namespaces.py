"""Emptying a test's namespace as kube-controller-manager's namespace controller does.

``tests.support.controlplane.delete_namespace`` uses these: every namespaced kind the API
server serves (aggregated discovery), deleted as a collection (docs/testing-control-plane.md,
"What runs, and why these flags").
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.support.controlplane import ControlPlane

# How kube-controller-manager's namespace controller empties a namespace, less the 5 s it waits
# before it starts (namespaceDeletionGracePeriod, docs/testing-control-plane.md): every
# namespaced kind the API server serves, deleted as a collection, until none is left.
_DISCOVERY = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"


def request(plane: ControlPlane, method: str, path: str, accept: str = "application/json") -> Any:
    """One request as the admin, on the kept-alive connections of ``plane.client``; the
    decoded JSON answer, or None when it failed."""
    from urllib3.exceptions import HTTPError

    pool = plane.client.rest_client.pool_manager
    try:
        answer = pool.request(method, plane.url + path, headers={"Accept": accept}, timeout=30)
    except (OSError, HTTPError):
        return None
    if answer.status >= 300:
        return None
    try:
        return json.loads(answer.data)
    except ValueError:
        return None


def namespaced_collections(plane: ControlPlane) -> list[str]:
    """The path of every namespaced kind's collection (``{ns}`` for the namespace), in the
    preferred version of its group, that can be deleted as a collection (aggregated
    discovery: CRDs included)."""
    paths = []
    for root in ("/api", "/apis"):
        found = request(plane, "GET", root, accept=_DISCOVERY) or {}
        for group in found.get("items", []):
            version = (group.get("versions") or [{}])[0]  # listed in order of preference
            group_path = "/api" if root == "/api" else f"/apis/{group['metadata']['name']}"
            prefix = f"{group_path}/{version.get('version')}"
            for res in version.get("resources", []):
                if res.get("scope") == "Namespaced" and "deletecollection" in res.get("verbs", []):
                    paths.append(f"{prefix}/namespaces/{{ns}}/{res['resource']}")
    return paths


def holds(plane: ControlPlane, path: str) -> bool:
    """Whether the collection at ``path`` still holds an object (False when it cannot be read)."""
    answer = request(plane, "GET", path + "?limit=1")
    return bool(answer and answer.get("items"))


#: The query of a DELETE: at once (no kubelet would finish a pod), dependents in the background.
NOW = "?gracePeriodSeconds=0&propagationPolicy=Background"
