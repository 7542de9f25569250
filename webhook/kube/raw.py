"""Every request ``webhook.kube`` makes of the API server: plain paths, raw JSON.

The generated API classes of the ``kubernetes`` client (``client.CoreV1Api`` and the others)
are not used. kubernetes 37 imports one of them, and with it a pydantic model class for every
object it names, the first time it is looked up: about 1.2 s of CPU per process for the few
endpoints this package calls (docs/server.md, "The Kubernetes client's API classes"), and
every call then checks its arguments through pydantic. This package reads and writes plain
dicts anyway.

A request goes through the ``ApiClient`` those classes use, the same two steps their methods
take (``param_serialize``, then ``call_api``): its configuration (kubeconfig or in-cluster, TLS,
the bearer token re-read as it rotates, the proxy), its default headers (User-Agent), its
retries and its timeouts are the same. As the generated methods do with
``_preload_content=False``, a 2xx answer comes back as the unread urllib3 response and any
other raises ``ApiException`` (``ApiException.from_response``: the subclass of its status,
with the body and the headers).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
import urllib3
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

__all__ = [
    "API_GROUPS",
    "CONFIGMAP",
    "CONFIGMAPS",
    "JSON_PATCH",
    "NODES",
    "NODE_STATUS",
    "PODS",
    "RESOURCE_QUOTAS",
    "SECRET",
    "SECRETS",
    "STRATEGIC_MERGE_PATCH",
    "Collection",
    "Timeout",
    "call_json",
    "custom_path",
    "group_path",
    "read_json",
    "request",
]

#: A request timeout as the client takes it: total seconds, or (connect, read).
Timeout = float | tuple[float, float] | None

#: The patch types the package sends: a JSON patch (a list of operations) and a strategic merge
#: patch (an object), as ``kubectl patch --type json`` and ``--type strategic`` send them.
JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


# The built-in paths the package calls (kube-apiserver serves the core group under /api/v1, the
# others under /apis/GROUP/VERSION); ``{name}`` is filled from a request's ``params``.
NODES = "/api/v1/nodes"
NODE_STATUS = "/api/v1/nodes/{name}/status"
PODS = "/api/v1/pods"
RESOURCE_QUOTAS = "/api/v1/resourcequotas"
CONFIGMAPS = "/api/v1/namespaces/{namespace}/configmaps"
CONFIGMAP = "/api/v1/namespaces/{namespace}/configmaps/{name}"
# (Paths, not passwords: the linters take the names for secrets.)
SECRETS = "/api/v1/namespaces/{namespace}/secrets"
SECRET = "/api/v1/namespaces/{namespace}/secrets/{name}"  # noqa: S105  # nosec B105
#: API discovery: the groups and versions served.
API_GROUPS = "/apis"


def group_path(api_version: str, plural: str) -> str:
    """The cluster-wide collection of a built-in kind: ``apps/v1``, ``deployments`` gives
    ``/apis/apps/v1/deployments``."""
    return f"/apis/{api_version}/{plural}"


def custom_path(group: str, version: str, plural: str) -> str:
    """The cluster-wide collection of ``plural`` in ``group/version`` (a custom resource)."""
    return group_path(f"{group}/{version}", plural)


def request(
    api: ApiClient,
    method: str,
    path: str,
    *,
    params: Mapping[str, str] | None = None,
    query: Iterable[tuple[str, Any]] = (),
    body: Any = None,
    content_type: str = "application/json",
    timeout: Timeout = None,
    check: bool = True,
) -> urllib3.BaseHTTPResponse:
    """One request: ``path`` with its ``{name}`` placeholders filled from ``params`` (quoted
    as the generated methods quote them), ``query`` (None values left out), ``body`` sent as
    JSON under ``content_type``.

    Returns the urllib3 response unread (the caller reads and releases it) for a 2xx answer;
    raises ``ApiException`` for any other (with ``check=False``: returns it too), urllib3's
    errors when the API server cannot be reached.
    """
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = content_type
    prepared = api.param_serialize(
        method=method,
        resource_path=path,
        path_params=dict(params or {}),
        query_params=[(k, v) for k, v in query if v is not None],
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
    )
    response = api.call_api(*prepared, _request_timeout=timeout)
    if check and not 200 <= response.status <= 299:
        response.read()  # type: ignore[no-untyped-call]
        # Raises the subclass of the status (NotFoundException...), as the generated code does.
        ApiException.from_response(http_resp=response, body=None, data=None)
    unread: urllib3.BaseHTTPResponse = response.response
    return unread


def read_json(response: urllib3.BaseHTTPResponse) -> Any:
    """The response's body, decoded; the connection goes back to the pool."""
    try:
        raw = response.data
    finally:
        response.release_conn()
    return orjson.loads(raw) if raw else None


def call_json(api: ApiClient, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
    """:func:`request`, then the answer's JSON object (ValueError when it is not one)."""
    doc = read_json(request(api, method, path, **kwargs))
    if not isinstance(doc, dict):
        raise ValueError(f"the API server answered with a {type(doc).__name__}, not an object")
    return doc


@dataclass(frozen=True)
class Collection:
    """A collection to list and watch: ``/api/v1/nodes``, a namespace's ConfigMaps...

    ``path`` may hold ``{name}`` placeholders, filled from ``params``. ``query`` holds what
    every request of it carries (a field or label selector); each :meth:`get` adds its own
    (``limit``, ``continue``, ``watch``, ``resourceVersion``...).
    """

    api: ApiClient
    path: str
    query: tuple[tuple[str, str], ...] = field(default=())
    params: tuple[tuple[str, str], ...] = field(default=())

    def get(self, query: Mapping[str, Any], *, timeout: Timeout = None) -> urllib3.BaseHTTPResponse:
        """GET the collection with ``query`` added; see :func:`request`."""
        return request(
            self.api,
            "GET",
            self.path,
            params=dict(self.params),
            query=(*self.query, *query.items()),
            timeout=timeout,
        )
