"""A lean loopback API server for large paged lists: objects serialised once, served by page.

A 100,000-pod cluster is more than a real API server on a development machine takes in
reasonable time; the audit's benchmark (``bench/audit.py``) needs only its paged lists. This
server answers what a paged listing needs, as the API server does from its watch cache:

* ``GET /api/v1/nodes``, ``/api/v1/pods``, ``/apis/apps/v1/deployments``, ... (Nodes, Pods,
  ConfigMaps and the workload kinds, cluster-wide) return a ``<Kind>List`` sorted by namespace
  and name; ``limit`` and ``continue`` page through it (``metadata.continue``,
  ``remainingItemCount``); a ``continue`` token it did not issue is answered ``410 Expired``;
* anything else is ``404 NotFound``: no watch, no get, no writes.

Objects are serialised with orjson when added (:meth:`PageServer.add_many`); the server never
changes them, so every list is consistent. :attr:`PageServer.lists` counts list requests per
resource. Plain HTTP on 127.0.0.1 (see ``fake_http``). That the audit reads the same through it
as through the real API server is tested in ``tests/cluster/kube/test_page_server.py``.
"""

from __future__ import annotations

import base64
import json
import threading
from collections import Counter
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson

from tests.support.fake_http import JsonHandler, LoopbackServer, status
from webhook.harness.admission_review import resource_for
from webhook.policy.workloads import API_VERSIONS

__all__ = ["PageServer"]

RESOURCE_VERSION = "1000"

# The kinds it serves, named as the API server names them (the harness's table of plurals, the
# engine's table of apiVersions: one of each in the project).
_KINDS = (
    "Node",
    "Pod",
    "ConfigMap",
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "ReplicaSet",
    "Job",
    "CronJob",
)
# resource (URL plural) -> (kind, namespaced)
_RESOURCES: dict[str, tuple[str, bool]] = {
    resource_for(kind)[0]: (kind, resource_for(kind)[1]) for kind in _KINDS
}
# resource -> group/version ("v1": the core group)
_GROUP_VERSIONS = {resource_for(kind)[0]: API_VERSIONS.get(kind, "v1") for kind in _KINDS}
_KIND_TO_RESOURCE = {kind: res for res, (kind, _) in _RESOURCES.items()}


def _route(path: str) -> tuple[str | None, str | None, str | None]:
    """(resource, namespace, name) of an API path; resource None when it names none."""
    parts = path.strip("/").split("/")
    if parts[:2] == ["api", "v1"]:
        group_version, rest = "v1", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group_version, rest = "/".join(parts[1:3]), parts[3:]
    else:
        return None, None, None
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not 1 <= len(rest) <= 2 or _GROUP_VERSIONS.get(rest[0], "v1") != group_version:
        return None, None, None
    return rest[0], namespace, rest[1] if len(rest) == 2 else None


class PageServer(LoopbackServer):
    """Serves pre-serialised objects as paged cluster-wide lists. A context manager."""

    def __init__(self) -> None:
        super().__init__()
        self._objects: dict[str, dict[tuple[str, str], bytes]] = {r: {} for r in _RESOURCES}
        self._pages: dict[str, list[bytes]] = {}  # sorted by key; rebuilt after a change
        self._lock = threading.Lock()
        #: List requests answered, per resource ("pods", "nodes", ...).
        self.lists: Counter[str] = Counter()

    def add_many(self, objects: Iterable[dict[str, Any]]) -> None:
        """Store objects (their ``kind`` picks the resource), serialised now."""
        with self._lock:
            for obj in objects:
                resource = _KIND_TO_RESOURCE[obj["kind"]]
                meta = obj["metadata"]
                namespace = meta.get("namespace", "") if _RESOURCES[resource][1] else ""
                stored = self._objects[resource]
                if (namespace, meta["name"]) in stored:
                    raise KeyError(f"{resource} {namespace}/{meta['name']} already exists")
                stored[(namespace, meta["name"])] = orjson.dumps(obj)
                self._pages.pop(resource, None)

    def counts(self) -> dict[str, int]:
        """How many objects are stored, per resource that has any."""
        return {r: len(stored) for r, stored in sorted(self._objects.items()) if stored}

    def stored_bytes(self) -> int:
        """The JSON size of every stored object."""
        return sum(len(raw) for stored in self._objects.values() for raw in stored.values())

    def page(self, resource: str, limit: int, token: str | None) -> bytes:
        """One page of the list of ``resource`` as the API server sends it.

        Raises ValueError for a ``continue`` token this server did not issue.
        """
        with self._lock:
            items = self._pages.get(resource)
            if items is None:
                stored = self._objects[resource]
                items = self._pages[resource] = [stored[k] for k in sorted(stored)]
        start = 0
        if token:
            state = json.loads(base64.urlsafe_b64decode(token))
            if state.get("rv") != RESOURCE_VERSION:
                raise ValueError(token)
            start = int(state["start"])
        end = min(len(items), start + limit) if limit > 0 else len(items)
        meta: dict[str, Any] = {"resourceVersion": RESOURCE_VERSION}
        if end < len(items):
            state = {"rv": RESOURCE_VERSION, "start": end}
            meta["continue"] = base64.urlsafe_b64encode(json.dumps(state).encode()).decode()
            meta["remainingItemCount"] = len(items) - end
        head = orjson.dumps(
            {
                "kind": f"{_RESOURCES[resource][0]}List",
                "apiVersion": _GROUP_VERSIONS.get(resource, "v1"),
                "metadata": meta,
            }
        )
        return head[:-1] + b',"items":[' + b",".join(items[start:end]) + b"]}"


class _Handler(JsonHandler):
    fake: PageServer

    def _error(self, code: int, reason: str, message: str) -> None:
        self.send_json(code, json.dumps(status(code, reason, message)).encode())

    def do_GET(self) -> None:
        """A cluster-wide list page, or 404."""
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        resource, namespace, name = _route(url.path)
        if (
            resource is None
            or namespace is not None
            or name is not None
            or query.get("watch") in ("true", "1")
        ):
            self._error(404, "NotFound", f"the server could not find the requested resource {url}")
            return
        try:
            body = self.fake.page(resource, int(query.get("limit") or 0), query.get("continue"))
        except ValueError:
            self._error(
                410,
                "Expired",
                "The provided continue parameter is too old to display a consistent list result.",
            )
            return
        self.fake.lists[resource] += 1
        self.send_json(200, body)


PageServer.handler = _Handler
